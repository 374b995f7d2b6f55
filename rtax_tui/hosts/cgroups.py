"""Control groups on cgroup v1 and v2: make one, limit it, join it, empty it, remove it.

Everything rtax makes lives under `rtax/` (`/sys/fs/cgroup/<controller>/rtax/...` on
v1, `/sys/fs/cgroup/rtax/...` on v2). On v1 a cgroup is one directory per
hierarchy (cpu, cpuacct, memory, pids), and a process joins it by writing its pid
to every `cgroup.procs`; `procs_files()` lists them for `hosts.local`, which
joins in the child before exec so that no descendant escapes.

The root is a constructor argument so that tests can run the v2 file protocol on a
directory that imitates `/sys/fs/cgroup`. All methods are synchronous and quick
(a few file writes); `kill_all` and `remove` wait a bounded time for the kernel.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator

DEFAULT_ROOT = "/sys/fs/cgroup"
# Everything's parent; another name (RTAX_CGROUP_ROOT) keeps a test's cgroups, and its
# cleanups, apart from other rtax runs on the machine.
PREFIX = os.environ.get("RTAX_CGROUP_ROOT") or "rtax"
if not PREFIX.replace("-", "").replace("_", "").isalnum():
    raise ValueError(f"RTAX_CGROUP_ROOT: not a plain name: {PREFIX!r}")
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
V2_CONTROLLERS = ("cpu", "memory", "pids")
MIB = 1 << 20


class CgroupError(RuntimeError):
    """A cgroup could not be made, emptied or removed."""


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    """One control file's value: open, one write, close (a Python file object adds four
    calls per file: fstat, the tty check and two seeks; the flags are open("w")'s)."""
    data = value.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.EIO, f"short write of {value!r}", path)
    finally:
        os.close(fd)


def _mkdir_p(path: str) -> None:
    """makedirs, the last one new (FileExistsError if it is not: a cgroup is never taken
    over); retried if `rtax cleanup` removes a parent meanwhile. The parent nearly always
    exists, so the last one is tried first: one call, not four."""
    for attempt in range(3):
        try:
            os.mkdir(path)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise
            os.makedirs(os.path.dirname(path), exist_ok=True)


def _clean_rel(relpath: str) -> str:
    rel = relpath.strip("/")
    if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
        raise ValueError(f"bad cgroup path {relpath!r}")
    return rel


# root -> its v1 hierarchies, looked up once per process (every cgroup operation
# asks, and the answer does not change while rtax runs); an empty answer is not kept.
_V1_CACHE: dict[str, list[tuple[frozenset[str], str]]] = {}


def _v1_hierarchies(root: str) -> list[tuple[frozenset[str], str]]:
    """(controllers, mount directory) for each mounted v1 hierarchy rtax uses.

    Co-mounted controllers (`cpu,cpuacct` reached through two symlinks) appear once.
    """
    found = _V1_CACHE.get(root)
    if found is None:
        found = _find_v1_hierarchies(root)
        if found:
            _V1_CACHE[root] = found
    return list(found)


def _find_v1_hierarchies(root: str) -> list[tuple[frozenset[str], str]]:
    out: list[tuple[frozenset[str], str]] = []
    for ctrl, d in _hierarchies_named(root, V1_CONTROLLERS):
        names = set(os.path.basename(os.path.realpath(d)).split(",")) | {ctrl}
        out.append((frozenset(names), d))
    return out


def _hierarchies_named(root: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """(name, directory) of each of `names` under `root` that is a mounted hierarchy (it
    holds `cgroup.procs`), a hierarchy reached by two names (`cpu`, `cpuacct`) once."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for name in names:
        d = os.path.join(root, name)
        if not os.path.exists(os.path.join(d, "cgroup.procs")):
            continue
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append((name, d))
    return out


# root -> every hierarchy mounted under it, for removal (see _mounted_hierarchies).
_MOUNTED_CACHE: dict[str, list[str]] = {}


def _mounted_hierarchies(root: str) -> list[str]:
    """Every v1 hierarchy mounted under `root` (a directory holding `cgroup.procs`), the
    ones rtax makes cgroups in and the ones it does not (blkio, cpuset, devices, freezer,
    a named `systemd`, the hybrid `unified`), each once.

    Removal walks all of them: a container engine given one of rtax's cgroups as its
    parent (docker's and runsc's `--cgroup-parent`) makes the container's cgroup, and
    with it the parent's path, in every hierarchy it knows, and removes only its own
    child. What rtax named, rtax removes, wherever it appeared; no list of controllers
    to keep up to date.
    """
    found = _MOUNTED_CACHE.get(root)
    if found is not None:
        return list(found)
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    out = [d for _, d in _hierarchies_named(root, entries)]
    if out:
        _MOUNTED_CACHE[root] = out
    return list(out)


# The version of the machine's own root, once known (it does not change while rtax runs);
# a test's imitation of a root is looked at each time.
_VERSION_CACHE: dict[str, str] = {}
# memory hierarchy -> whether the kernel accounts swap (memory.memsw.* in every cgroup)
_MEMSW_CACHE: dict[str, bool] = {}


def _has_memsw(memory_base: str) -> bool:
    found = _MEMSW_CACHE.get(memory_base)
    if found is None:
        found = os.path.exists(os.path.join(memory_base, "memory.memsw.limit_in_bytes"))
        _MEMSW_CACHE[memory_base] = found
    return found


class Cgroup:
    """One cgroup, named by its path relative to the hierarchy root (`rtax/env-1a2b`)."""

    def __init__(self, relpath: str, *, root: str = DEFAULT_ROOT, version: str | None = None):
        ver = version or _VERSION_CACHE.get(root) or Cgroup.version(root)
        if ver is not None and root == DEFAULT_ROOT:
            _VERSION_CACHE[root] = ver
        if ver is None:
            raise CgroupError(f"no cgroup filesystem under {root}")
        self.root = root
        self.relpath = _clean_rel(relpath)
        self.ver = ver
        # What create() wrote (control file -> value) and what it could not (limit -> why).
        self.applied: dict[str, str] = {}
        self.skipped: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Cgroup({self.relpath!r}, {self.ver}, root={self.root!r})"

    # -- discovery ---------------------------------------------------------

    @staticmethod
    def version(root: str = DEFAULT_ROOT) -> str | None:
        """ "v2" for a unified hierarchy at root, "v1" for v1 controllers under it, else None."""
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            return "v2"
        if os.path.exists(os.path.join(root, "memory", "memory.limit_in_bytes")):
            return "v1"
        return None

    def _bases(self) -> list[tuple[frozenset[str], str]]:
        """(controllers, hierarchy root directory); v2 has one for all."""
        if self.ver == "v2":
            return [(frozenset(V2_CONTROLLERS), self.root)]
        return _v1_hierarchies(self.root)

    def dirs(self) -> list[str]:
        return [os.path.join(base, self.relpath) for _, base in self._bases()]

    def _dir(self, controller: str) -> str | None:
        if self.ver == "v2":
            return os.path.join(self.root, self.relpath)
        for ctrls, base in self._bases():
            if controller in ctrls:
                return os.path.join(base, self.relpath)
        return None

    def exists(self) -> bool:
        """Made in a hierarchy rtax makes cgroups in."""
        return any(os.path.isdir(d) for d in self.dirs())

    def left_anywhere(self) -> bool:
        """Present in any hierarchy, ones rtax does not make cgroups in included."""
        return any(os.path.isdir(d) for d in self._every_dir())

    # -- making ------------------------------------------------------------

    @staticmethod
    def relpath_of(name: str, parent: str | None = None) -> str:
        """The path `create(name, parent=parent)` makes, known before it exists (so that
        it can be registered with the reaper first)."""
        if "/" in name or not name or name in (".", ".."):
            raise ValueError(f"bad cgroup name {name!r}")
        return f"{_clean_rel(parent) if parent else PREFIX}/{name}"

    @classmethod
    def create(
        cls,
        name: str,
        *,
        cpus: float | None = None,
        memory_mib: int | None = None,
        swap_mib: int | None = None,
        pids: int | None = None,
        parent: str | None = None,
        root: str = DEFAULT_ROOT,
    ) -> Cgroup:
        """Make `<parent or rtax>/<name>` in every hierarchy and write the limits.

        `swap_mib` is swap allowed on top of `memory_mib` (None: none). A limit the
        kernel does not offer is recorded in `skipped`, not raised. On any error the
        partly made cgroup is removed again.
        """
        rel = cls.relpath_of(name, parent)
        cg = cls(rel, root=root)
        if cg.exists():
            raise FileExistsError(errno.EEXIST, "cgroup exists", rel)
        try:
            if cg.ver == "v2":
                cg._create_v2()
            else:
                cg._create_v1()
            cg._limit(cpus, memory_mib, swap_mib, pids)
        except BaseException:
            try:
                cg.remove(timeout=1.0)
            except Exception:
                pass
            raise
        return cg

    def _create_v1(self) -> None:
        bases = self._bases()
        if not any("memory" in ctrls for ctrls, _ in bases):
            raise CgroupError(f"no v1 memory hierarchy under {self.root}")
        for _, base in bases:
            _mkdir_p(os.path.join(base, self.relpath))
        for ctrl in ("cpu", "pids"):
            if self._dir(ctrl) is None:
                self.skipped[ctrl] = f"no v1 {ctrl} hierarchy under {self.root}"

    def _create_v2(self) -> None:
        # Enable the controllers in every ancestor's subtree_control, root first.
        parts = self.relpath.split("/")
        cur = self.root
        for i in range(len(parts)):
            self._enable_subtree(cur)
            cur = os.path.join(cur, parts[i])
            if i < len(parts) - 1:
                try:
                    os.mkdir(cur)
                except FileExistsError:
                    pass
        _mkdir_p(cur)

    def _enable_subtree(self, d: str) -> None:
        try:
            available = set(_read(os.path.join(d, "cgroup.controllers")).split())
        except FileNotFoundError:
            available = set(V2_CONTROLLERS)
        try:
            text = _read(os.path.join(d, "cgroup.subtree_control"))
            enabled = {c.lstrip("+") for c in text.split()}
        except FileNotFoundError:
            enabled = set()
        want = [c for c in V2_CONTROLLERS if c in available and c not in enabled]
        for c in V2_CONTROLLERS:
            if c not in available and c not in self.skipped:
                self.skipped[c] = f"controller {c} not available in {d}"
        if want:
            _write(os.path.join(d, "cgroup.subtree_control"), " ".join("+" + c for c in want))

    def _put(self, controller: str, fname: str, value: str) -> bool:
        d = self._dir(controller)
        if d is None or (self.ver == "v2" and controller in self.skipped):
            return False
        _write(os.path.join(d, fname), value)
        self.applied[fname] = value
        return True

    def _limit(
        self, cpus: float | None, memory_mib: int | None, swap_mib: int | None, pids: int | None
    ) -> None:
        v2 = self.ver == "v2"
        if cpus is not None:
            quota = max(1000, int(round(cpus * CPU_PERIOD_US)))
            if v2:
                self._put("cpu", "cpu.max", f"{quota} {CPU_PERIOD_US}")
            elif self._dir("cpu") is not None:
                self._put("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US))
                self._put("cpu", "cpu.cfs_quota_us", str(quota))
        if memory_mib is not None:
            mem = int(memory_mib) * MIB
            swap = int(swap_mib or 0) * MIB
            if v2:
                self._put("memory", "memory.max", str(mem))
                try:
                    self._put("memory", "memory.swap.max", str(swap))
                except OSError as exc:
                    self.skipped["swap"] = f"memory.swap.max not writable ({exc.strerror})"
            else:
                self._put("memory", "memory.limit_in_bytes", str(mem))
                base = next((b for c, b in self._bases() if "memory" in c), None)
                if base and _has_memsw(base):
                    self._put("memory", "memory.memsw.limit_in_bytes", str(mem + swap))
                else:
                    self.skipped["swap"] = (
                        "no memory.memsw.limit_in_bytes (swap accounting off): swap not limited"
                    )
        if pids is not None:
            if not self._put("pids", "pids.max", str(int(pids))):
                self.skipped.setdefault("pids", "no pids controller")

    # -- using -------------------------------------------------------------

    @classmethod
    def at(cls, relpath: str, *, root: str = DEFAULT_ROOT) -> Cgroup:
        """An existing cgroup (FileNotFoundError when it is in no hierarchy)."""
        cg = cls(relpath, root=root)
        if not cg.exists():
            raise FileNotFoundError(errno.ENOENT, "no such cgroup", relpath)
        return cg

    def procs_files(self, made: bool = False) -> list[str]:
        """The `cgroup.procs` of every hierarchy: write a pid to each to join. `made`: this
        object's `create` made every directory (the kernel gives each its `cgroup.procs`),
        so none is looked for."""
        if made:
            return [os.path.join(d, "cgroup.procs") for d in self.dirs()]
        return [
            os.path.join(d, "cgroup.procs")
            for d in self.dirs()
            if os.path.exists(os.path.join(d, "cgroup.procs"))
        ]

    def _every_dir(self) -> list[str]:
        """Where this cgroup's path can exist: `dirs()`, and on v1 every other mounted
        hierarchy too (an engine nesting under it made it there; `_mounted_hierarchies`)."""
        if self.ver == "v2":
            return self.dirs()
        return [os.path.join(base, self.relpath) for base in _mounted_hierarchies(self.root)]

    def _walk_dirs(self) -> Iterator[str]:
        """Every directory of this cgroup and its descendants in every hierarchy,
        deepest first."""
        for d in self._every_dir():
            if not os.path.isdir(d):
                continue
            for cur, _subdirs, _files in os.walk(d, topdown=False):
                yield cur

    def pids(self) -> set[int]:
        """Processes in this cgroup or a descendant, in any hierarchy."""
        out: set[int] = set()
        for d in self._walk_dirs():
            try:
                text = _read(os.path.join(d, "cgroup.procs"))
            except OSError:
                continue
            out.update(int(x) for x in text.split())
        return out

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL everything inside until it is empty; False if it is not by `timeout`."""
        if self.ver == "v2":
            killf = os.path.join(self.root, self.relpath, "cgroup.kill")
            if os.path.exists(killf):
                try:
                    _write(killf, "1")
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def remove(self, timeout: float = 5.0) -> None:
        """Kill what is inside, then rmdir depth-first everywhere. Already gone is fine."""
        deadline = time.monotonic() + timeout
        while True:
            self.kill_all(timeout=max(0.0, deadline - time.monotonic()))
            busy: list[str] = []
            for d in list(self._walk_dirs()):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                        busy.append(d)
                    else:
                        raise
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise CgroupError(f"cgroup {self.relpath} still busy: {', '.join(busy)}")
            time.sleep(0.005)

    # -- reading -----------------------------------------------------------

    def memory_bytes(self) -> int | None:
        """The memory the cgroup is charged now (v2 `memory.current`, v1
        `memory.usage_in_bytes`): its processes' pages, page cache and tmpfs included."""
        return self._memory_value("memory.current", "memory.usage_in_bytes")

    def memory_peak_bytes(self) -> int | None:
        return self._memory_value("memory.peak", "memory.max_usage_in_bytes")

    def _memory_value(self, v2_file: str, v1_file: str) -> int | None:
        """A byte count the memory controller keeps (v2's file or v1's), or None."""
        d = self._dir("memory")
        if d is None:
            return None
        fname = v2_file if self.ver == "v2" else v1_file
        try:
            return int(_read(os.path.join(d, fname)).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def reset_peak(self) -> None:
        """Start the peak memory afresh (v1 `max_usage_in_bytes`; v2 `memory.peak`, which
        kernels before 6.12 cannot reset: a new cgroup starts from zero anyway)."""
        d = self._dir("memory")
        if d is None:
            return
        fname = "memory.peak" if self.ver == "v2" else "memory.max_usage_in_bytes"
        try:
            _write(os.path.join(d, fname), "0")
        except OSError:
            pass

    def oom_kills_by_dir(self) -> dict[str, int]:
        """OOM kills so far, per memory cgroup directory of this one's tree.

        v2's `memory.events` counts the kills of the whole subtree in this cgroup; v1's
        `memory.oom_control` counts only those of processes in that very cgroup (the
        victim's), so v1 reads every descendant: the caller keeps the largest count seen
        per directory, since a descendant's count goes with it when it is removed."""
        d = self._dir("memory")
        if d is None:
            return {}
        out: dict[str, int] = {}
        if self.ver == "v2":
            dirs, fname = [d], "memory.events"
        else:
            dirs, fname = [cur for cur, _s, _f in os.walk(d)], "memory.oom_control"
        for cur in dirs:
            try:
                text = _read(os.path.join(cur, fname))
            except OSError:
                continue
            for line in text.splitlines():
                key, _, val = line.partition(" ")
                if key == "oom_kill":
                    out[cur] = int(val)
        return out

    def cpu_usage_ns(self) -> int | None:
        if self.ver == "v2":
            try:
                for line in _read(os.path.join(self.root, self.relpath, "cpu.stat")).splitlines():
                    key, _, val = line.partition(" ")
                    if key == "usage_usec":
                        return int(val) * 1000
            except (OSError, ValueError):
                return None
            return None
        d = self._dir("cpuacct")
        if d is None:
            return None
        try:
            return int(_read(os.path.join(d, "cpuacct.usage")))
        except (OSError, ValueError):
            return None


def _all_bases(root: str) -> list[str]:
    ver = Cgroup.version(root)
    if ver == "v2":
        return [root]
    if ver == "v1":
        return _mounted_hierarchies(root)
    return []


def cleanup(
    prefix: str = PREFIX + "/",
    *,
    root: str = DEFAULT_ROOT,
    timeout: float = 5.0,
    spare: Callable[[str], bool] | None = None,
) -> int:
    """Remove leftover cgroups whose path starts with `prefix`; return how many.

    `prefix` is `dir/` (everything under dir; dir itself is removed when it ends up
    empty) or `dir/name-start` (children of dir whose name starts so, at any depth).
    `spare(name)`, asked once every candidate is listed, keeps a cgroup (and what is
    below it): a live run's (model/runlock.py).
    """
    p = prefix.strip("/")
    if prefix.endswith("/") or "/" not in p:
        base_rel, name_start = p, ""
    else:
        base_rel, _, name_start = p.rpartition("/")
    if not base_rel:
        raise ValueError(f"refusing to clean the whole hierarchy ({prefix!r})")
    found: set[str] = set()
    for base in _all_bases(root):
        top = os.path.join(base, base_rel)
        if not os.path.isdir(top):
            continue
        for cur, subdirs, _files in os.walk(top):
            for sd in list(subdirs):
                if sd.startswith(name_start):
                    found.add(os.path.relpath(os.path.join(cur, sd), base))
                    subdirs.remove(sd)  # its descendants go with it
    # Shallow ones first would also remove the deep ones; sort for a stable order.
    n = 0
    for rel in sorted(found):
        if spare is not None and spare(rel.rpartition("/")[2]):
            continue
        cg = Cgroup(rel, root=root)
        if not cg.left_anywhere():
            continue
        cg.remove(timeout=timeout)
        n += 1
    if not name_start:
        for base in _all_bases(root):
            try:
                os.rmdir(os.path.join(base, base_rel))
            except OSError:
                pass
    return n
