"""Container images built here, with no registry.

`build_busybox_image()` makes a 2 MB root filesystem from the host's static busybox
(Debian package `busybox-static`): `bin/busybox` plus a link to it for every applet,
`etc/passwd` and `etc/group` with root, and empty `tmp`, `root`, `workspace`, then
imports it with `docker import` (or `podman import`) as `rtax/busybox:<recipe hash>`.
The tag carries a hash of the recipe below (not of the busybox binary), so changing
the recipe rebuilds, and an image that already has the tag is not built again.

`build_debian_image()` makes the workload image (T1, T2, trajectories, capacity:
python3, git, pytest, hypothesis): `debootstrap --variant=minbase` of Debian bookworm
from the mirror apt already uses, packed as a tarball cached under the rtax cache
directory (`<cache>/images/workload-<hash>.tar`, so podman can import the same file),
then imported as `rtax/workload:<recipe hash>`. About a minute cold; needs root and
the `debootstrap` package (installed with apt when missing).
No terminal code here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Callable

from rtax_tui.core.model import RtaxError

# Bump when the way the Debian workload image is built changes.
DEBIAN_RECIPE_VERSION = 1
DEBIAN_REPO = "rtax/workload"
DEBIAN_SUITE = "bookworm"
DEBIAN_VARIANT = "minbase"
DEBIAN_INCLUDE = ("python3", "git", "python3-pytest", "python3-hypothesis")
DEBIAN_FALLBACK_MIRROR = "http://deb.debian.org/debian"
DEBOOTSTRAP_TIMEOUT_S = 1800

# Bump when the way the image is built changes (the tag changes too).
RECIPE_VERSION = 1
BUSYBOX_REPO = "rtax/busybox"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nnobody:x:65534:\n"
# (path, mode) of the directories of the root filesystem.
DIRS = (
    ("bin", 0o755),
    ("dev", 0o755),
    ("etc", 0o755),
    ("proc", 0o755),
    ("root", 0o700),
    ("sys", 0o755),
    ("tmp", 0o1777),
    ("usr", 0o755),
    ("usr/bin", 0o755),
    ("workspace", 0o755),
)
# Extra links (path -> target) so `#!/usr/bin/env python`-style lines resolve.
EXTRA_LINKS = {"usr/bin/env": "/bin/env"}
CMD = ["/bin/sh"]
KINDS = ("docker", "podman")
VM_KINDS = ("vm", "libvirt", "microvm")  # one guest for both VM drivers

Log = Callable[[str], None]


def _recipe() -> dict:
    return {
        "version": RECIPE_VERSION,
        "passwd": PASSWD,
        "group": GROUP,
        "dirs": [list(d) for d in DIRS],
        "links": EXTRA_LINKS,
        "cmd": CMD,
        "path": PATH_ENV,
    }


def _debian_recipe() -> dict:
    return {
        "version": DEBIAN_RECIPE_VERSION,
        "suite": DEBIAN_SUITE,
        "variant": DEBIAN_VARIANT,
        "include": list(DEBIAN_INCLUDE),
        "cmd": CMD,
        "path": PATH_ENV,
    }


def _digest(recipe: dict) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def image_tag(name: str = "busybox") -> str:
    """The tag the current recipe builds, e.g. `rtax/busybox:1a2b3c4d5e6f`;
    `name` is "busybox" or "workload" (the Debian image)."""
    if name == "busybox":
        return f"{BUSYBOX_REPO}:{_digest(_recipe())}"
    if name in ("workload", "debian"):
        return f"{DEBIAN_REPO}:{_digest(_debian_recipe())}"
    raise KeyError(name)


def debian_image_tag() -> str:
    return image_tag("workload")


def _changes(client_kind: str) -> list[str]:
    sep = " " if client_kind == "docker" else "="  # podman wants CMD=[...]
    return [f"CMD{sep}{json.dumps(CMD)}", f"ENV{sep}PATH={PATH_ENV}"]


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


def _client(client_kind: str) -> str:
    if client_kind not in KINDS:
        raise RtaxError(f"images: unknown client {client_kind!r} (known: {', '.join(KINDS)})")
    exe = shutil.which(client_kind)
    if exe is None:
        pkg = "docker.io" if client_kind == "docker" else "podman"
        raise RtaxError(f"images: `{client_kind}` is not on PATH (apt-get install {pkg})")
    return exe


def image_exists(tag: str, client_kind: str = "docker") -> bool:
    exe = _client(client_kind)
    res = subprocess.run(
        [exe, "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        timeout=60,
    )
    return res.returncode == 0


def _rootfs_tar(busybox: str, dest: str) -> int:
    """Write the root filesystem tarball to `dest`; return how many applets it links."""
    res = subprocess.run([busybox, "--list"], capture_output=True, timeout=30, check=False)
    if res.returncode != 0:
        raise RtaxError(f"images: `{busybox} --list` failed: {res.stderr.decode(errors='replace')}")
    applets = sorted(
        {a for a in res.stdout.decode().split() if a and a != "busybox" and "/" not in a}
    )

    def add(tf: tarfile.TarFile, info: tarfile.TarInfo, data: bytes | None = None) -> None:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        tf.addfile(info, io.BytesIO(data) if data is not None else None)

    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tf:
        for path, mode in DIRS:
            ti = tarfile.TarInfo(path)
            ti.type, ti.mode = tarfile.DIRTYPE, mode
            add(tf, ti)
        with open(busybox, "rb") as f:
            blob = f.read()
        ti = tarfile.TarInfo("bin/busybox")
        ti.mode, ti.size = 0o755, len(blob)
        add(tf, ti, blob)
        links = {f"bin/{a}": "busybox" for a in applets}
        links.update(EXTRA_LINKS)
        for path, target in sorted(links.items()):
            ti = tarfile.TarInfo(path)
            ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, target, 0o777
            add(tf, ti)
        for path, text in (("etc/passwd", PASSWD), ("etc/group", GROUP)):
            data = text.encode()
            ti = tarfile.TarInfo(path)
            ti.mode, ti.size = 0o644, len(data)
            add(tf, ti, data)
    return len(applets)


def build_busybox_image(
    client_kind: str = "docker", *, force: bool = False, log: Log | None = None
) -> str:
    """Build (or find cached) the busybox image; return its tag."""
    say = log or (lambda _msg: None)
    tag = image_tag()
    exe = _client(client_kind)
    if not force and image_exists(tag, client_kind):
        say(f"{tag}: already built")
        return tag
    busybox = find_static_busybox()
    if busybox is None:
        raise RtaxError(
            "images: no statically linked busybox found (looked at "
            f"{', '.join(BUSYBOX_CANDIDATES)} and PATH); apt-get install busybox-static"
        )
    with tempfile.TemporaryDirectory(prefix="rtax-image-") as tmp:
        tar = os.path.join(tmp, "rootfs.tar")
        n = _rootfs_tar(busybox, tar)
        _import(exe, client_kind, tar, tag, timeout=300)
    say(f"{tag}: built from {busybox} ({n} applets, {os.path.getsize(busybox) >> 10} KiB)")
    return tag


def _import(exe: str, client_kind: str, tar: str, tag: str, *, timeout: float) -> None:
    """`docker|podman import` a root filesystem tarball as `tag`, with rtax's changes."""
    argv = [exe, "import"]
    for ch in _changes(client_kind):
        argv += ["--change", ch]
    argv += [tar, tag]
    res = subprocess.run(argv, capture_output=True, timeout=timeout)
    if res.returncode != 0:
        err = (res.stderr or res.stdout).decode(errors="replace").strip()
        raise RtaxError(f"images: `{client_kind} import` failed: {err[-500:]}")


# -- the Debian workload image -------------------------------------------------------


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
    from rtax_tui.core.assets import cache_dir

    digest = _digest(_debian_recipe())
    return str(cache_dir() / "images" / f"workload-{DEBIAN_SUITE}-{digest}.tar")


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


def build_debian_image(
    client_kind: str = "docker", force: bool = False, log: Log | None = None
) -> str:
    """Build (or find cached) the Debian workload image; return its tag."""
    say = log or (lambda _msg: None)
    tag = debian_image_tag()
    exe = _client(client_kind)
    if not force and image_exists(tag, client_kind):
        say(f"{tag}: already built")
        return tag
    tar = build_debian_rootfs(force=force, log=log)
    _import(exe, client_kind, tar, tag, timeout=900)
    say(f"{tag}: imported from {tar} ({os.path.getsize(tar) >> 20} MiB)")
    return tag


def build(driver: str, *, force: bool = False, log: Log | None = None) -> list[str]:
    """What `rtax images build --driver DRIVER` builds; returns the tags."""
    if driver in VM_KINDS:
        from rtax_tui.core.vmimage import build_guest

        g = build_guest(force=force, log=log)
        return [p for p in (g.kernel, g.initramfs, g.rootdisk) if p]
    if driver in KINDS:
        return [
            build_busybox_image(driver, force=force, log=log),
            build_debian_image(driver, force=force, log=log),
        ]
    known = ", ".join(KINDS + VM_KINDS)
    raise RtaxError(f"images: driver {driver!r} has no images to build (known: {known})")
