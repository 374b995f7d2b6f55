"""Container images built here, with no registry.

`build_busybox_image()` makes a 2 MB root filesystem from the host's static busybox
(Debian package `busybox-static`): `bin/busybox` plus a link to it for every applet,
`etc/passwd` and `etc/group` with root, and empty `tmp`, `root`, `workspace`, then
imports it with `docker import` (or `podman import`) as `rtax/busybox:<recipe hash>`.
The tag carries a hash of the recipe below (not of the busybox binary), so changing
the recipe rebuilds, and an image that already has the tag is not built again.

`build_debian_image()` makes the workload image (T1, T2, trajectories, capacity:
python3, git, pytest, hypothesis): the Debian root filesystem tarball of
`drivers.toolkit.rootfs` (cached, so podman and the VM guest use the same file), imported as
`rtax/workload:<recipe hash>`. About a minute cold; needs root and
the `debootstrap` package (installed with apt when missing).
No terminal code here.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from typing import Any

from rtax_tui.drivers.toolkit.rootfs import (
    BUSYBOX_CANDIDATES,
    CMD,
    PATH_ENV,
    Log,
    build_debian_rootfs,
    debian_recipe,
    find_static_busybox,
    recipe_digest,
)
from rtax_tui.drivers.toolkit.vmimage import build_guest

from rtax_tui.model.spec import RtaxError

# Bump when the way the image is built changes (the tag changes too).
RECIPE_VERSION = 1
BUSYBOX_REPO = "rtax/busybox"
DEBIAN_REPO = "rtax/workload"
SWEREX_REPO = "rtax/swerex"
# Bump when the SWE-ReX image's recipe changes.
SWEREX_RECIPE_VERSION = 1
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
KINDS = ("docker", "podman")


def _recipe() -> dict[str, Any]:
    return {
        "version": RECIPE_VERSION,
        "passwd": PASSWD,
        "group": GROUP,
        "dirs": [list(d) for d in DIRS],
        "links": EXTRA_LINKS,
        "cmd": CMD,
        "path": PATH_ENV,
    }


def image_tag(name: str = "busybox") -> str:
    """The tag the current recipe builds, e.g. `rtax/busybox:1a2b3c4d5e6f`;
    `name` is "busybox" or "workload" (the Debian image)."""
    if name == "busybox":
        return f"{BUSYBOX_REPO}:{recipe_digest(_recipe())}"
    if name in ("workload", "debian"):
        return f"{DEBIAN_REPO}:{recipe_digest(debian_recipe())}"
    raise KeyError(name)


def debian_image_tag() -> str:
    return image_tag("workload")


def _changes(client_kind: str) -> list[str]:
    sep = " " if client_kind == "docker" else "="  # podman wants CMD=[...]
    return [f"CMD{sep}{json.dumps(CMD)}", f"ENV{sep}PATH={PATH_ENV}"]


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


def _swerex_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("swe-rex")
    except PackageNotFoundError:
        raise RtaxError(
            "images: SWE-ReX is not installed here (pip install 'rtax[swerex]'): the image "
            "gets the same version as the controller's client"
        ) from None


def swerex_image_tag() -> str:
    """`rtax/swerex:<hash>`: the Debian workload image plus the controller's own version of
    swe-rex (so that its server speaks what the client expects)."""
    recipe = {
        "version": SWEREX_RECIPE_VERSION,
        "base": debian_image_tag(),
        "swe-rex": _swerex_version(),
        "python": "cp311",
    }
    return f"{SWEREX_REPO}:{recipe_digest(recipe)}"


# pip is not in the Debian image: it runs from its own wheel, offline, from the context.
SWEREX_DOCKERFILE = """FROM {base}
COPY wheels /tmp/rtax-wheels
RUN python3 /tmp/rtax-wheels/{pip}/pip install --no-index --find-links /tmp/rtax-wheels \
    --break-system-packages --no-cache-dir --root-user-action=ignore \
    swe-rex=={version} aiohttp && rm -rf /tmp/rtax-wheels && swerex-remote --version
"""


def build_swerex_image(*, force: bool = False, log: Log | None = None) -> str:
    """SWE-ReX's Docker deployment's image, with no registry: the wheels are fetched on
    the controller by pip (the image's Python is Debian 12's 3.11, manylinux wheels),
    then `docker build --network none` installs them from the build context."""
    say = log or (lambda _msg: None)
    tag = swerex_image_tag()
    exe = _client("docker")
    if not force and image_exists(tag, "docker"):
        say(f"{tag}: already built")
        return tag
    base = build_debian_image("docker", log=log)
    version = _swerex_version()
    with tempfile.TemporaryDirectory(prefix="rtax-image-") as ctx:
        wheels = os.path.join(ctx, "wheels")
        pip = [sys.executable, "-m", "pip", "download", "-q", "-d", wheels]
        pip += ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]
        for plat in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"):
            pip += ["--platform", plat]
        res = subprocess.run(
            [*pip, f"swe-rex=={version}", "aiohttp", "pip"], capture_output=True, timeout=600
        )
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip()[-500:]
            raise RtaxError(f"images: pip download of swe-rex failed: {err}")
        pip_whl = next(f for f in sorted(os.listdir(wheels)) if f.startswith("pip-"))
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write(SWEREX_DOCKERFILE.format(base=base, pip=pip_whl, version=version))
        res = subprocess.run(
            [exe, "build", "-q", "--network", "none", "-t", tag, ctx],
            capture_output=True,
            timeout=900,
        )
        if res.returncode != 0:
            err = (res.stderr or res.stdout).decode(errors="replace").strip()[-500:]
            raise RtaxError(f"images: docker build of {tag} failed: {err}")
    say(f"{tag}: built from {base} with swe-rex {version}")
    return tag


def container_images(kind: str) -> Callable[[bool, Log | None], list[str]]:
    """The docker or podman driver's image recipe: the busybox image (T0) and the Debian
    workload image (T1, T2, trajectories), imported into `kind`'s engine."""

    def build(force: bool, log: Log | None) -> list[str]:
        return [
            build_busybox_image(kind, force=force, log=log),
            build_debian_image(kind, force=force, log=log),
        ]

    return build


def vm_guest_images(force: bool, log: Log | None) -> list[str]:
    """The VM drivers' image recipe: the guest's kernel, initramfs and root disk."""
    g = build_guest(force=force, log=log)
    return [p for p in (g.kernel, g.initramfs, g.rootdisk) if p]


def swerex_images(force: bool, log: Log | None) -> list[str]:
    """The swerex driver's image recipe (its docker deployment's image)."""
    return [build_swerex_image(force=force, log=log)]


def build(name: str, *, force: bool = False, log: Log | None = None) -> list[str]:
    """What `rtax images build --driver NAME` builds (a driver's name or an image kind,
    as the drivers declare them: `Driver.image`); returns the tags or paths."""
    from rtax_tui.drivers.registry import image_recipe

    return image_recipe(name).build(force, log)
