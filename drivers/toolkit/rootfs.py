"""The root filesystems that both the container images (`drivers.toolkit.images`) and the VM
guest (`drivers.toolkit.vmimage`) are made from: the host's static busybox, and a Debian root
filesystem (`debootstrap --variant=minbase` of bookworm from the mirror apt already
uses, with python3, git, pytest and hypothesis) packed as a tarball cached under the
rtax cache directory (`<cache>/images/workload-<suite>-<hash>.tar`). The hash is that
of the Debian recipe below, which the workload image's tag carries too.
No terminal code here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from rtax_tui.drivers.toolkit.assets import cache_dir
from rtax_tui.drivers.toolkit.stepenv import step_env

from rtax_tui.model.spec import RtaxError

# Bump when the way the Debian workload image is built changes.
DEBIAN_RECIPE_VERSION = 1
DEBIAN_SUITE = "bookworm"
DEBIAN_VARIANT = "minbase"
# python-is-python3, python3-numpy, python3-pip: what agents' commands call most after
# the shell and git (`python -c "import numpy ..."`, `pip install`): a replayed step that
# finds them runs as the agent's did instead of failing fast (docs/trajectories.md).
DEBIAN_INCLUDE = (
    "python3",
    "git",
    "python3-pytest",
    "python3-hypothesis",
    "python-is-python3",
    "python3-numpy",
    "python3-pip",
)
DEBIAN_FALLBACK_MIRROR = "http://deb.debian.org/debian"
DEBOOTSTRAP_TIMEOUT_S = 1800
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
# The image's command and PATH (part of the Debian recipe: changing them changes the tag).
CMD = ["/bin/sh"]
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_env(workdir: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a step in a root made here (a container's, a gVisor sandbox's):
    home in the workspace, `/tmp` for temporary files, and `extra` on top. The workspace
    and the bound assets belong to host uids, so git is told every directory is safe."""
    return step_env(path=PATH_ENV, home=workdir, tmpdir="/tmp", extra=extra, git_safe_all=True)


Log = Callable[[str], None]


def debian_recipe() -> dict[str, Any]:
    return {
        "version": DEBIAN_RECIPE_VERSION,
        "suite": DEBIAN_SUITE,
        "variant": DEBIAN_VARIANT,
        "include": list(DEBIAN_INCLUDE),
        "cmd": CMD,
        "path": PATH_ENV,
    }


def recipe_digest(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def is_static_elf(path: str) -> bool:
    """True for an ELF executable with no program interpreter (statically linked)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return False
            is64 = head[4] == 2
            end = "<" if head[5] == 1 else ">"
            if is64:
                phoff = struct.unpack_from(end + "Q", head, 0x20)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
            else:
                phoff = struct.unpack_from(end + "I", head, 0x1C)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x2A)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    for i in range(phnum):
        (p_type,) = struct.unpack_from(end + "I", table, i * phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def find_static_busybox() -> str | None:
    seen = [p for p in BUSYBOX_CANDIDATES if os.path.isfile(p)]
    w = shutil.which("busybox")
    if w:
        seen.append(w)
    for p in seen:
        if is_static_elf(p):
            return p
    return None


# -- the Debian root filesystem ------------------------------------------------------


def apt_mirror(
    sources: str = "/etc/apt/sources.list.d/debian.sources",
    legacy: str = "/etc/apt/sources.list",
) -> str:
    """The Debian mirror apt already uses (the first non-security `URIs:` of a deb822
    file, else the first `deb URI ...` line), else deb.debian.org."""
    try:
        with open(sources, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        text = ""
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if ":" in line and not line.lstrip().startswith("#"):
                k, _, v = line.partition(":")
                fields[k.strip().lower()] = v.strip()
        types = fields.get("types", "deb").split()
        suites = fields.get("suites", "").split()
        if "deb" not in types or any("security" in x for x in suites):
            continue
        for uri in fields.get("uris", "").split():
            if uri.startswith(("http://", "https://", "file:")):
                return uri
    try:
        with open(legacy, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "deb" or "security" in line:
            continue
        uri = next((w for w in words[1:] if "://" in w or w.startswith("file:")), "")
        if uri:
            return uri
    return DEBIAN_FALLBACK_MIRROR


def _ensure_debootstrap(say: Log) -> str:
    exe = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if exe:
        return exe
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise RtaxError("images: debootstrap is not installed (apt-get install debootstrap)")
    say("installing debootstrap with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = [apt, "install", "-y", "-q", "--no-install-recommends", "debootstrap"]
    res = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    if res.returncode != 0:  # stale or missing package lists: update once, then retry
        subprocess.run([apt, "update", "-q"], capture_output=True, env=env, timeout=600)
        res = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    exe = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if res.returncode != 0 or exe is None:
        err = (res.stderr or res.stdout).decode(errors="replace").strip()
        raise RtaxError(f"images: apt-get install debootstrap failed: {err[-500:]}")
    return exe


def debian_rootfs_path() -> str:
    """Where the Debian root filesystem tarball of the current recipe is cached."""
    digest = recipe_digest(debian_recipe())
    return str(cache_dir() / "images" / f"workload-{DEBIAN_SUITE}-{digest}.tar")


@contextlib.contextmanager
def build_lock(path: str, say: Log | None = None) -> Iterator[None]:
    """Hold flock(2) on `path`.lock while `path` is built: two processes that build the
    same cached file at once (two `rtax images build`, the test suite's two workers, one
    building a container image and the other the VM's root disk from the same tarball)
    build it once, the second saying it waits and then finding it built. The lock file is
    the cache's, in the user's own directory; anything else found at its name (a link, a
    FIFO, a file of another user that its owner could hold locked for ever) is refused."""
    lock = path + ".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK
    fd = os.open(lock, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            kind = "a file" if stat.S_ISREG(st.st_mode) else "not a file"
            raise RtaxError(
                f"images: {lock}: not a lock file rtax made ({kind}, uid {st.st_uid}, "
                f"{st.st_nlink} links); remove it"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (say or (lambda _m: None))(f"{path}: another rtax is building it; waiting")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def build_debian_rootfs(*, force: bool = False, log: Log | None = None) -> str:
    """debootstrap the Debian root filesystem and tar it into the cache (or find it
    there); return the tarball's path. Needs root."""
    say = log or (lambda _msg: None)
    dest = debian_rootfs_path()
    if not force and os.path.isfile(dest):
        say(f"{dest}: already built")
        return dest
    if os.geteuid() != 0:
        raise RtaxError("images: building the Debian image needs root (debootstrap)")
    with build_lock(dest, say):
        if not force and os.path.isfile(dest):
            say(f"{dest}: built by another process meanwhile")
            return dest
        return _debootstrap_into(dest, say)


def _debootstrap_into(dest: str, say: Log) -> str:
    """debootstrap and pack the Debian root as the tarball `dest` (atomically)."""
    exe = _ensure_debootstrap(say)
    mirror = apt_mirror()
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".rtax-rootfs-", dir=os.path.dirname(dest)) as tmp:
        root = os.path.join(tmp, "root")
        say(f"debootstrap {DEBIAN_SUITE} from {mirror} (about a minute)")
        argv = [
            exe,
            f"--variant={DEBIAN_VARIANT}",
            f"--include={','.join(DEBIAN_INCLUDE)}",
            DEBIAN_SUITE,
            root,
            mirror,
        ]
        res = subprocess.run(argv, capture_output=True, timeout=DEBOOTSTRAP_TIMEOUT_S)
        if res.returncode != 0:
            err = (res.stdout + res.stderr).decode(errors="replace").strip()
            hint = ""
            log_path = os.path.join(root, "debootstrap", "debootstrap.log")
            if os.path.isfile(log_path):
                with open(log_path, errors="replace") as f:
                    hint = " | log: " + f.read()[-500:]
            raise RtaxError(f"images: debootstrap failed: {err[-800:]}{hint}")
        # Smaller image, nothing host-specific: no downloaded .debs, no apt lists.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            d = os.path.join(root, sub)
            if os.path.isdir(d):
                for name in os.listdir(d):
                    p = os.path.join(d, name)
                    if os.path.isfile(p) and name != "lock":
                        os.unlink(p)
        for path, mode in (("workspace", 0o755), ("tmp", 0o1777)):
            os.makedirs(os.path.join(root, path), exist_ok=True)
            os.chmod(os.path.join(root, path), mode)
        tar = os.path.join(tmp, "rootfs.tar")
        say("packing the root filesystem")
        res = subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", root, "-cf", tar, "."],
            capture_output=True,
            timeout=600,
        )
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip()
            raise RtaxError(f"images: packing the root filesystem failed: {err[-500:]}")
        os.replace(tar, dest)  # atomic: a concurrent build gives the same content
    return dest
