"""The stage sandbox's boundary: its view, its identity, its filter; local and over SSH.

One bubblewrap sandbox per environment. What it keeps out, and how:

- **a minimal view**: `/usr` and the `/bin`, `/lib*`, `/sbin` links (or directories)
  read-only, a curated `/etc` (no `shadow`, `gshadow`, `ssh/`, `sudoers`, `ssl/private`:
  only the files programs read to run, listed in `ETC_ENTRIES`, copied once per
  content into one directory by `ETC_SH`, with rtax's own `passwd` and `group`, and
  bound with one mount: a bind per file cost 6 ms a sandbox); a fresh `/proc` and
  minimal `/dev`, a private tmpfs `/tmp`, the workspace read-write at `/workspace`,
  and the workload's assets, named one by one, read-only. Nothing of `/root`,
  `/home`, `/run`, `/var`, `/srv`, `/mnt`, `/opt`, `/boot`, `/sys`, the host's `/tmp`
  or the rest of rtax's cache.
- **no way back to host privileges**: bubblewrap runs as an unprivileged host uid
  (`uid`, default `DEFAULT_UID`) and makes a user namespace whose root is that uid;
  every capability is dropped (`--cap-drop ALL`), no_new_privs is set, no further
  user namespace can be made (`--disable-userns`), and the seccomp filter of
  `seccomp.py` refuses mount, ptrace, bpf, keyrings, modules, namespaces and the like.
  Read-only binds made by a more privileged mount namespace are locked: they cannot
  be remounted read-write from inside, even with a capability.
- new PID, IPC, UTS (hostname `rtax`), cgroup and network (only `lo`) namespaces.
- **less of the host's kernel and installs** (`_masks`): `/proc/cmdline`,
  `/proc/kallsyms` and `/proc/keys` read as empty files (`MASKED_PROC`); an empty
  read-only tmpfs covers `/usr/local` (`HIDDEN_DIRS`), so the distribution's programs
  (`sh`, `python3`, `git` in /usr/bin) run, and the host's own installs are not seen.
  A host whose only python3 is in /usr/local (the python:3 Docker images) gives
  sandboxes without it.

What stays visible, and why:

- `/proc/self/mountinfo` names the bind sources as the host's file system has them:
  `/usr`; the curated /etc as `/var/cache/rtax/stage-public/etc-<key>` (the key is
  a checksum of the sizes and times of the host's /etc entries); the masks'
  `.../stage-public/empty`; each asset as `.../stage-public/assets/<hash>/<name>`;
  and the workspace's host path (`/tmp/rtax-ws-<label>-...`) until workspaces get a
  file system of their own. bubblewrap can only bind, and a bind shows its path in
  its file system; only a separate file system per source would hide them. The
  PUBLIC paths are constants of rtax's source; `rtax probe`'s `host_paths` check
  looks for the host-specific ones (the workspace's path, rtax's cache, the host's
  temporary directory). The super options show the host's devtmpfs size (its RAM)
  and the root device (`/dev/vda`).
- host-wide statistics of the shared kernel: `/proc/loadavg`, `/proc/uptime`,
  `/proc/stat`, `/proc/meminfo`, `/proc/vmstat`, `/proc/cpuinfo`, `/proc/diskstats`,
  `/proc/partitions`, `/proc/modules`, `/proc/interrupts`, `/proc/version` (and
  `uname`). They tell the host's size, load and hardware, and let an environment
  watch the load other environments put on the machine; programs read them to size
  themselves or report (`free`, `top`, `uptime`, psutil, build tools), so blank files would
  break them, and virtualizing them (lxcfs) is not done. No /sys is mounted.

The exec channel starts each action with `rtax-enter` (`stage_enter.c`), which joins
the sandbox's namespaces and takes on the same identity, capabilities (none) and
filter; nsenter would leave the action root of its namespace with every capability.
It names the sandbox by its init's PID and start time, so a reused PID is never
entered.

The sandbox's pid 1 is `rtax-enter --init` itself (bubblewrap's `--as-pid-1`: no
bubblewrap process inside), and the shell channel's shell is its only child. Both are
execute-only copies (`INIT_BIN`, `SHELL_BIN`, mode 0111, owned by host root): the
kernel makes a process whose file it cannot read non-dumpable, so no process of the
sandbox can open their `/proc/PID/mem`, `process_vm_writev` them or take their
descriptors. A step can therefore neither change the init a clean reset trusts, nor
rewrite the shell that frames every later step's result.

Because bubblewrap runs unprivileged, the filter arrives as a file descriptor that
rtax opens as root, and what it binds (the curated `/etc`, the assets) are
world-readable copies under `PUBLIC` (made once per content): it never has to
traverse a directory that is closed to its uid (`/root/.cache`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import posixpath
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rtax_tui.drivers.toolkit import seccomp
from rtax_tui.drivers.toolkit.assets import cache_dir
from rtax_tui.drivers.toolkit.stepenv import SANDBOX_PATH, step_env

from rtax_tui.model.spec import workspace_alias_problem

HOSTNAME = "rtax"
READY = b"RTAX-READY\n"
# Inside the sandbox, the execute-only copies of rtax-enter (the init) and of the
# host's /bin/sh (the shell channel's shell); see the module docstring.
INIT_BIN = "/.rtax/init"
SHELL_BIN = "/.rtax/sh"
# The sandbox's pid 1 per channel: exec says READY, then waits for stdin to close;
# shell runs the shell as its child on the same stdin and stdout.
INIT_CMD = {
    "exec": (INIT_BIN, "--init", "exec"),
    "shell": (INIT_BIN, "--init", "shell", SHELL_BIN),
}
# Not a user of this machine (Debian leaves 60000-64999 to its packages' fixed ids and
# hands out none of them itself); environments can't see each other whatever uid they
# share (separate PID, IPC, network and mount namespaces).
DEFAULT_UID = 64000
PATH = SANDBOX_PATH
# Top-level entries of the host's `/` that the sandbox sees (read-only).
ROOT_NAMES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What of `/etc` programs read to run; bound read-only where the host has it.
ETC_ENTRIES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "os-release",
    "debian_version",
    "lsb-release",
    "mime.types",
    "magic",
    "protocols",
    "services",
    "shells",
    "profile",
    "inputrc",
    "locale.alias",
    "ssl/certs",
    "ssl/openssl.cnf",
    "python3",
    *(f"python3.{n}" for n in range(8, 15)),
)
PASSWD = (
    "root:x:0:0:root:/workspace:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\n"
# World-readable copies bound into sandboxes (on each host that runs them).
PUBLIC = "/var/cache/rtax/stage-public"
# Makes the curated /etc under BASE (once per content of the entries: their sizes and
# modification times) and prints its path. Args: BASE PASSWD GROUP ENTRY...
ETC_SH = r"""base=$1 passwd=$2 group=$3; shift 3
key=$(cd /etc && ls -ldL --time-style=+%s -- "$@" 2>/dev/null | cksum | tr ' ' -)
d=$base/etc-$key
if [ ! -d "$d" ]; then
  mkdir -p "$base" && chmod 755 "$base" "${base%/*}" || exit 1
  t=$(mktemp -d "$base/.tmp-etc-XXXXXX") || exit 1
  (cd /etc && for e in "$@"; do
    [ -e "$e" ] || continue
    cp -a --parents -- "$e" "$t/" || exit 1
  done) || { rm -rf "$t"; exit 1; }
  printf '%s' "$passwd" >"$t/passwd" && printf '%s' "$group" >"$t/group" &&
    chmod -R a+rX "$t" && chmod 755 "$t" || { rm -rf "$t"; exit 1; }
  mv -T "$t" "$d" 2>/dev/null || rm -rf "$t"  # another run made it first
fi
if [ ! -f "$base/empty" ]; then  # bound over the masked /proc files
  e=$(mktemp "$base/.tmp-empty-XXXXXX") && chmod 444 "$e" && mv -f "$e" "$base/empty" || exit 1
fi
echo "$d"
"""
# Makes the execute-only copies of rtax-enter (as `init`) and of the host's /bin/sh
# (as `sh`) under BASE, once per content, and prints the directory. Args: BASE ENTER
# The directory is bound whole as the sandbox's /.rtax, so it is made 0711: a sandbox
# runs the two files by path and can neither list it nor watch it (an inotify watch on a
# readable one saw every other sandbox's init and shell start, host-wide). One found
# there is used only if it is exactly what this makes (a real directory of root's, 0711,
# holding init and sh only, each root's and 0111; an older rtax made it 0755); anything
# else is moved aside and made again.
BIN_SH = r"""base=$1 enter=$2
sh=$(readlink -f /bin/sh) || exit 1
key=$(cat -- "$enter" "$sh" | cksum | tr ' ' -)
d=$base/bin-$key
ok() {
  [ -d "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %u:%g:%a -- "$1")" = 0:0:711 ] &&
    [ "$(ls -A -- "$1" | tr '\n' ' ')" = "init sh " ] &&
    [ "$(stat -c %u:%g:%a:%F -- "$1/init" "$1/sh" | tr '\n' ' ')" = \
      "0:0:111:regular file 0:0:111:regular file " ]
}
if ! ok "$d"; then
  mkdir -p "$base" && chmod 755 "$base" "${base%/*}" || exit 1
  t=$(mktemp -d "$base/.tmp-bin-XXXXXX") || exit 1
  cp -- "$enter" "$t/init" && cp -- "$sh" "$t/sh" && chown 0:0 "$t" "$t/init" "$t/sh" &&
    chmod 0111 "$t/init" "$t/sh" && chmod 711 "$t" || { rm -rf "$t"; exit 1; }
  if { [ -e "$d" ] || [ -L "$d" ]; } && ! ok "$d"; then  # not made as this makes it
    o=$(mktemp -d "$base/.old-bin-XXXXXX") && mv -- "$d" "$o/" && rm -rf -- "$o"
  fi
  mv -T "$t" "$d" 2>/dev/null || rm -rf "$t"  # another run made it first
  ok "$d" || { echo "rtax: $d is not the init and shell it should be" >&2; exit 1; }
fi
echo "$d"
"""
ENTER_SOURCE = Path(__file__).with_name("stage_enter.c")
# Copies of the assets a sandbox binds, where its unprivileged uid can reach them
# (bubblewrap resolves a bind's source as that uid; rtax's cache is under /root).
PUBLIC_ASSETS = Path(PUBLIC) / "assets"


def bwrap_argv(
    bwrap: str,
    workspace: str,
    cmd: tuple[str, ...] | list[str],
    *,
    workspace_mib: int | None = None,
    root: list[tuple[str, str, str]],
    etc: str,
    bin_dir: str,
    seccomp_fd: int,
    binds: Sequence[tuple[str, str]] = (),
    info_fd: int | None = None,
    alias: str | None = None,
    root_dir: str = "/",
) -> list[str]:
    """bubblewrap's arguments for one sandbox (the caller runs it as the sandbox uid).

    `workspace`: a host directory the sandbox uid owns, bound read-write at /workspace,
    or with `workspace_mib` only named: /workspace is then a tmpfs of that many MiB,
    mounted by bubblewrap in the sandbox's own mount namespace (`workspace_args`).
    `root`: (name, "dir"|"link", link target) for the entries of ROOT_NAMES the host
    has; `etc`: the curated /etc on the host; `bin_dir`: the execute-only init and
    shell on the host (`BIN_SH`); `seccomp_fd`: the filter, open for
    bubblewrap to read; `binds`: (a host path the sandbox uid can reach, the path
    inside), read-only; `alias`: a path that links to /workspace (its directories made
    in the sandbox's own root, read-only like the rest of it); `root_dir`: where the
    entries of `root` are on the host (an image's mounted root, `image_root`), else `/`.
    """
    a = [bwrap, "--die-with-parent", "--new-session", "--as-pid-1"]
    a += ["--unshare-user", "--uid", "0", "--gid", "0", "--disable-userns"]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    a += ["--unshare-cgroup-try", "--hostname", HOSTNAME]
    a += ["--cap-drop", "ALL", "--seccomp", str(seccomp_fd)]
    for name, kind, target in root:
        if kind == "link":
            a += ["--symlink", target, "/" + name]
        else:
            a += ["--ro-bind", posixpath.join(root_dir, name), "/" + name]
    a += ["--ro-bind", etc, "/etc"]
    a += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    a += _masks(root, etc)
    for src, dest in binds:
        a += ["--ro-bind", src, dest]
    # One bind of the directory that holds both (its only entries, execute-only), not one
    # per file: every bind is two mounts and a read of the mount table under the kernel's
    # one mount lock, which a burst of sandboxes queues on (bench/README.md, issue 36).
    a += ["--ro-bind", bin_dir, posixpath.dirname(INIT_BIN)]
    a += workspace_args(workspace, workspace_mib)
    if alias is not None:
        why = workspace_alias_problem(alias)
        if why is not None:
            raise ValueError(f"workspace alias {alias!r}: {why}")
        a += ["--symlink", "/workspace", alias]
    a += ["--remount-ro", "/", "--chdir", "/workspace"]
    if info_fd is not None:
        a += ["--info-fd", str(info_fd)]
    return a + ["--", *cmd]


# bubblewrap sets, then unsets this in its own environment as it reads its arguments:
# nothing reaches the sandbox, but its command line names the host directory.
WORKSPACE_TAG = "RTAX_WORKSPACE_ON_HOST"


def workspace_args(workspace: str, size_mib: int | None) -> list[str]:
    """bubblewrap's arguments for /workspace: the host directory `workspace` bound
    read-write, or with `size_mib` a tmpfs of that many MiB (mode 0700, nosuid, nodev),
    the sandbox's own. The directory then stays empty and unseen inside (no bind: a bind
    would show its host path in the sandbox's mountinfo); bubblewrap's command line
    still names it (WORKSPACE_TAG), which is how `rtax cleanup` and the reaper's
    leftovers tell a run's sandboxes.

    The tmpfs is mounted by bubblewrap inside the sandbox's new mount namespace, not on
    the host: a mount per environment in the host's table is copied into every later
    sandbox's namespace (and unmounted again when it pivots its root), all under the
    kernel's one mount lock, which made a burst of N sandboxes cost O(N^2) (bench/README.md,
    "Capacity at 1,000 environments"). Its pages are charged to the memory cgroup of the
    process that writes them: the environment's."""
    if size_mib is None:
        return ["--bind", workspace, "/workspace"]
    if int(size_mib) <= 0:
        raise ValueError(f"workspace_mib {size_mib!r}: a size in MiB above 0")
    return [
        *("--setenv", WORKSPACE_TAG, workspace, "--unsetenv", WORKSPACE_TAG),
        *("--perms", "0700", "--size", str(int(size_mib) << 20), "--tmpfs", "/workspace"),
    ]


# /proc files of the host's kernel that say more than programs need: its boot command
# line (where a VM's host may pass tokens) and the key and symbol tables. Read as empty
# files inside: ETC_SH's empty file (`empty` beside the curated /etc) is bound over
# them (/dev/null, as runc does, cannot be: a read-only bind is nodev). The root-only
# ones (kcore, sched_debug, timer_list, ...) are closed to the sandbox uid anyway.
MASKED_PROC = ("/proc/cmdline", "/proc/kallsyms", "/proc/keys")
# Under the read-only /usr, an empty read-only tmpfs: the host's own installs (here
# CUDA, docker, terraform, postgres) are not the distribution's programs a workload runs.
HIDDEN_DIRS = ("/usr/local",)


def _masks(root: Sequence[tuple[str, str, str]], etc: str) -> list[str]:
    """What bwrap_argv hides of what it binds (after /usr and /proc are in place)."""
    a: list[str] = []
    empty = posixpath.join(posixpath.dirname(etc), "empty")
    for path in MASKED_PROC:
        a += ["--ro-bind", empty, path]
    if any(name == "usr" and kind == "dir" for name, kind, _ in root):
        for d in HIDDEN_DIRS:  # FHS hosts have it; bwrap cannot make it in a read-only /usr
            a += ["--perms", "0755", "--tmpfs", d, "--remount-ro", d]
    return a


def image_root(root_dir: str) -> list[tuple[str, str, str]]:
    """The entries of ROOT_NAMES as an image mounted at `root_dir` (on the controller's
    host, read-only, made by rtax) has them: (name, dir|link, target), as `list_root`."""
    out = []
    for name in ROOT_NAMES:
        path = posixpath.join(root_dir, name)
        try:
            if os.path.islink(path):
                out.append((name, "link", os.readlink(path)))
            elif os.path.isdir(path):
                out.append((name, "dir", ""))
        except OSError:
            continue
    return sorted(out)


def sandbox_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment variables inside: nothing of the host's."""
    return step_env(path=PATH, home="/workspace", tmpdir="/tmp", extra=extra)


def etc_argv() -> list[str]:
    """The command that makes (or finds) the curated /etc on a host and prints it."""
    return ["sh", "-c", ETC_SH, "rtax-etc", PUBLIC, PASSWD, GROUP, *ETC_ENTRIES]


def bin_argv(enter: str) -> list[str]:
    """The command that makes (or finds) the execute-only init and shell on a host, from
    the host's copy of rtax-enter, and prints their directory."""
    return ["sh", "-c", BIN_SH, "rtax-bin", PUBLIC, enter]


# -- the support files: the filter and the exec channel's helper ---------------------


class SupportError(Exception):
    """The sandbox's support files cannot be made here (no C compiler, no filter)."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Support:
    """Files on one host that sandboxes are made from (paths on that host)."""

    enter: str
    filter: str
    etc: str
    bin: str  # the execute-only init and shell (BIN_SH)


def support_files() -> dict[str, bytes]:
    """What goes into a host's support directory (names carry a content hash)."""
    try:
        flt = seccomp.filter_bytes()
    except seccomp.SeccompUnsupported as exc:
        raise SupportError(str(exc), "run stage on an x86_64 host") from exc
    h = hashlib.sha256(flt).hexdigest()[:12]
    return {f"seccomp-{h}.bpf": flt}


def enter_name() -> str:
    src = ENTER_SOURCE.read_bytes()
    return f"rtax-enter-{hashlib.sha256(src).hexdigest()[:12]}-{platform.machine()}"


_build_lock = threading.Lock()


def local_enter() -> str:
    """`rtax-enter` under rtax's cache, compiled (statically) if missing: stage's helper,
    and (through the execute-only copy `local_bin` makes) stage's init and the
    non-dumpable init of docker's and podman's exec channel (`--init hold`). Safe to
    call from several threads and processes."""
    d = cache_dir() / "stage"
    with _build_lock:
        d.mkdir(parents=True, exist_ok=True)
        enter = d / enter_name()
        if not enter.exists():
            _compile(enter)
    return str(enter)


def local_support() -> Support:
    """The support files under rtax's cache (the helper compiled if missing) and the
    curated /etc under PUBLIC.

    The helper is built statically, so the same binary also serves remote hosts of
    the same architecture. Safe to call from several threads and processes.
    """
    d = cache_dir() / "stage"
    files = support_files()
    enter = local_enter()
    with _build_lock:
        for name, data in files.items():
            p = d / name
            if not p.exists() or p.read_bytes() != data:
                _write_atomic(p, data, 0o644)
        res = subprocess.run(etc_argv(), capture_output=True, timeout=60)
    etc = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or not etc.startswith(PUBLIC + "/"):
        err = res.stderr.decode(errors="replace").strip()[-300:]
        raise SupportError(f"cannot make the sandbox's /etc under {PUBLIC}: {err}", "run as root")
    flt = next(n for n in files if n.endswith(".bpf"))
    return Support(enter, str(d / flt), etc, local_bin(enter))


def local_bin(enter: str | None = None) -> str:
    """The directory under PUBLIC of the execute-only init and shell made from `enter`
    (`local_enter()` by default): stage's, and the init of docker's and podman's exec
    channel, which needs nothing else of stage's (no filter, no /etc)."""
    enter = enter or local_enter()
    with _build_lock:
        bres = subprocess.run(bin_argv(enter), capture_output=True, timeout=60)
    bin_dir = bres.stdout.decode(errors="replace").strip()
    if bres.returncode != 0 or not bin_dir.startswith(PUBLIC + "/"):
        err = bres.stderr.decode(errors="replace").strip()[-300:]
        raise SupportError(f"cannot make the sandbox's init under {PUBLIC}: {err}", "run as root")
    return bin_dir


def public_copy(path: str, uid: int) -> str:
    """A world-readable copy of a host file or directory, owned by `uid`, made once.

    Keyed by the path, its size and modification time (rtax's assets never change
    in place: their directory name carries their recipe's hash) and the owner. The
    sandbox's root is `uid` outside, so it sees the copy as its own, as a container's
    root sees a bind mount of root's files (git refuses a repository of another
    owner); it is bound read-only all the same.
    """
    st = os.stat(path)
    real = os.path.realpath(path)
    key = f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{uid}"
    dest = PUBLIC_ASSETS / hashlib.sha256(key.encode()).hexdigest()[:16] / os.path.basename(real)
    if dest.exists():
        return str(dest)
    with _build_lock:
        if dest.exists():
            return str(dest)
        PUBLIC_ASSETS.mkdir(parents=True, exist_ok=True)
        os.chmod(PUBLIC_ASSETS, 0o755)
        tmp = Path(tempfile.mkdtemp(dir=PUBLIC_ASSETS, prefix=".tmp-"))
        try:
            if os.path.isdir(real):
                shutil.copytree(real, tmp / dest.name, symlinks=True)
            else:
                shutil.copy2(real, tmp / dest.name)
            for top, _dirs, files in os.walk(tmp):
                os.chmod(top, 0o755)
                os.chown(top, uid, uid)
                for f in files:
                    p = os.path.join(top, f)
                    os.chown(p, uid, uid, follow_symlinks=False)
                    if not os.path.islink(p):
                        os.chmod(p, os.stat(p).st_mode | 0o444)
            os.replace(tmp, dest.parent)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _compile(dest: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SupportError(
            f"rtax's helper ({ENTER_SOURCE.name}) needs a C compiler",
            "apt-get install gcc libc6-dev",
        )
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    os.close(fd)
    try:
        res = subprocess.run(
            [cc, "-O2", "-static", "-o", tmp, str(ENTER_SOURCE)],
            capture_output=True,
            timeout=120,
        )
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            raise SupportError(
                f"cannot compile {ENTER_SOURCE.name}: {err[-1] if err else res.returncode}",
                "apt-get install gcc libc6-dev",
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# -- shared by the local and the remote environment --------------------------------


# Where `rtax-enter --spawn` puts the filter and (exec channel) a copy of stdout, for
# bwrap_argv's seccomp_fd and info_fd.
SPAWN_SECCOMP_FD = 5
SPAWN_INFO_FD = 3


def spawn_argv(
    support: Support, uid: int, procs: Sequence[str], argv: Sequence[str], *, info: bool
) -> list[str]:
    """The command that starts a sandbox: `rtax-enter --spawn` joins the environment's
    cgroups, opens the filter on SPAWN_SECCOMP_FD, copies stdout to SPAWN_INFO_FD when
    `info`, and becomes `uid` (no supplementary groups), then runs `argv` (bubblewrap)."""
    return [support.enter, "--spawn", str(uid), support.filter, "1" if info else "0", *procs] + [
        "--",
        *argv,
    ]


# rtax-enter's status when the sandbox it was to enter is gone (its init exited, or
# the PID is another process's now). A command may exit 124 too (timeout(1) does):
# the environment checks its init before it calls the sandbox lost.
ENTER_GONE = 124


def enter_argv(
    enter: str,
    filter_path: str,
    pid: int,
    start: int,
    procs: Sequence[str],
    argv: Sequence[str],
    cwd: str = "/workspace",
) -> list[str]:
    """The exec channel's command for one action in the sandbox whose init is `pid`,
    started at `start` (field 22 of its /proc/PID/stat); it joins the cgroups of
    `procs` (their `cgroup.procs` files) itself, first."""
    return [enter, f"{pid}:{start}", filter_path, cwd, *procs, "--", *argv]


def start_time(stat: str) -> int:
    """Field 22 (start time, clock ticks since boot) of a /proc/PID/stat line."""
    return int(stat.rsplit(")", 1)[1].split()[19])
