"""Image delivery (issue 24): how an environment's root reaches the host, as a phase.

A run that lists image modes (`[run] images`) gives each trial one of:

- `cached`: the image is on the host already (the phase is zero, and says so);
- `pull`: the whole image is fetched from a content server on loopback, then mounted;
- `lazy`: the image is mounted from the content server, and only what a step reads is
  fetched, when it reads it (FUSE over HTTP range requests, a read-only squashfs on top).

The image is the workload root of `rootfs.build_debian_rootfs` as a zstd squashfs
(`squashfs_image`), made once per recipe under `SERVED` (world-readable: nginx's workers
run as `nobody`). `ContentServer` is a real nginx on 127.0.0.1 started for the run: each
trial fetches under a prefix of its own (`/t/TAG/...`), so the bytes it fetched are the
server's own count (`$bytes_sent` of its access log, headers included), never an
estimate. `rclone mount` is the FUSE client of the lazy mode: it reads in bounded 128
KiB ranges (an open-ended range makes nginx count what it queued, not what was read)
and keeps no cache of its own, so every fetch reaches the server.

Everything a trial mounts is under `TRIALS/<label>-<tag>/`, registered with the host's
reaper before it exists (the reaper unmounts, deepest path first, and kills the FUSE
client's and the server's process groups): nothing stays mounted or serving after a
run, `kill -9` included. rtax acts as root only on these paths, which no environment
can reach; the environment sees the mounted root read-only, through bubblewrap.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.toolkit import sinks

from rtax_tui.hosts import reaper, safefs
from rtax_tui.hosts.local import LocalHost, kill_group
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.runlock import safe_label
from rtax_tui.model.spec import EnvSpec, PhaseFailure, RtaxError

CACHED, PULL, LAZY = "cached", "pull", "lazy"
MODES = (CACHED, PULL, LAZY)
# Served images and the trials' mounts: outside /root, so that nginx's workers (nobody)
# and bubblewrap's sandbox uid can traverse to them.
BASE = "/var/cache/rtax/images"
SERVED = f"{BASE}/served"
TRIALS = f"{BASE}/trials"
# The lazy client's read size: bounded ranges (see the module docstring).
CHUNK = "128k"
# How long a mount may take to appear (rclone's FUSE mount, on a loaded host).
MOUNT_WAIT_S = 30.0
# Where image delivery runs its servers, clients and mounts: the controller's own host.
_HOST = LocalHost()
TOOLS = {"nginx": "nginx-light", "mksquashfs": "squashfs-tools", "rclone": "rclone",
         "fusermount": "fuse"}  # fmt: skip


class DeliveryError(RtaxError):
    """An image could not be made, served, fetched or mounted."""


def missing_tools() -> list[str]:
    """The Debian packages whose programs image delivery needs and this host lacks."""
    return [pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None]


def _public_dir(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)
    parent = os.path.dirname(path)
    while parent.startswith("/var/cache/rtax"):
        os.chmod(parent, os.stat(parent).st_mode | 0o755)
        parent = os.path.dirname(parent)


def squashfs_image(log: Any = None) -> str:
    """The workload root as a zstd squashfs under SERVED/<name>/ (made once per recipe of
    the root, about 20 s plus the root's own build when it is not cached): its path.

    A read-only root needs its mount points made beforehand: `/workspace`, `/tmp`,
    `/proc`, and the assets' path (rtax's cache, bound at its host path by stage and
    gVisor), which is this host's: the name carries a hash of it."""
    import hashlib

    from rtax_tui.drivers.toolkit.assets import cache_dir
    from rtax_tui.drivers.toolkit.rootfs import build_debian_rootfs

    tarball = build_debian_rootfs(log=log)
    assets = os.path.abspath(cache_dir())
    key = hashlib.sha256(assets.encode()).hexdigest()[:8]
    name = f"{os.path.basename(tarball).removesuffix('.tar')}-{key}"
    out_dir = f"{SERVED}/{name}"
    out = f"{out_dir}/root.sqfs"
    if os.path.exists(out):
        return out
    for tool in ("mksquashfs", "tar"):
        if shutil.which(tool) is None:
            raise DeliveryError(f"image delivery needs {tool} (apt-get install squashfs-tools)")
    _public_dir(out_dir)
    work = tempfile.mkdtemp(prefix=".build-", dir=out_dir)
    try:
        root = f"{work}/root"
        os.mkdir(root)
        subprocess.run(
            ["tar", "--numeric-owner", "-xf", tarball, "-C", root], check=True,
            capture_output=True,
        )  # fmt: skip
        for sub, mode in (("workspace", 0o755), ("tmp", 0o1777), ("proc", 0o555)):
            os.makedirs(f"{root}/{sub}", exist_ok=True)
            os.chmod(f"{root}/{sub}", mode)
        os.makedirs(root + assets, exist_ok=True)
        subprocess.run(
            ["mksquashfs", root, f"{work}/root.sqfs", "-comp", "zstd", "-noappend", "-quiet",
             "-no-progress"],
            check=True, capture_output=True,
        )  # fmt: skip
        os.chmod(f"{work}/root.sqfs", 0o644)
        os.replace(f"{work}/root.sqfs", out)
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise DeliveryError(f"{exc.cmd[0]} failed: {err[-1] if err else exc.returncode}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log crit;
events {{ worker_connections 512; }}
http {{
  log_format rtax '$request_uri $status $bytes_sent';
  map $request_uri $rtax_trial {{ ~^/(t/|v2/t-) 1; default 0; }}
  access_log {dir}/access.log rtax if=$rtax_trial;
  log_not_found off;
  client_body_temp_path {dir}/tmp;
  proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  default_type application/octet-stream;
  sendfile on;
  server {{
    listen 127.0.0.1:{port};
    location ~ ^/t/[^/]+/(.*)$ {{
      alias {served}/$1;
      autoindex on;
    }}{registry}
  }}
}}
"""
# The registry behind nginx (a container engine's pull): `/v2/` as it is, and each trial's
# `/v2/t-TAG/REPO/...` as `/v2/REPO/...`, streamed (no buffering to disk).
NGINX_REGISTRY = """
    location = /v2/ {{
      proxy_pass http://127.0.0.1:{port};
    }}
    location ~ ^/v2/t-[^/]+/(.*)$ {{
      proxy_pass http://127.0.0.1:{port}/v2/$1$is_args$args;
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_set_header Host $http_host;
    }}"""
REGISTRY_CONF = """version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: 127.0.0.1:{port}
"""
# The registry's storage: kept between runs, so that a second run's push sends nothing.
REGISTRY_ROOT = f"{BASE}/registry"


class _Server:
    """A server rtax runs for one run: its directory (configuration, logs), its port on
    127.0.0.1 and its process; `stop` ends the process group and removes the directory."""

    def __init__(self) -> None:
        self.dir: str | None = None
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None

    async def stop(self) -> None:
        await _end(self.proc)
        self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            reaper.current().drop_path(self.dir)
            self.dir = None


class ContentServer(_Server):
    """A real nginx on 127.0.0.1 serving SERVED under per-trial prefixes, for one run."""

    def __init__(self, registry_port: int | None = None) -> None:
        super().__init__()
        self.registry_port = registry_port  # proxied under /v2/ when given

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """nginx up and answering (its first preparation, not any trial's)."""
        if shutil.which("nginx") is None:
            raise DeliveryError("image delivery needs nginx (apt-get install nginx-light)")
        _public_dir(SERVED)
        self.dir = tempfile.mkdtemp(prefix=f"rtax-nginx-{os.getpid()}-")
        reaper.current().add_path(self.dir)
        os.mkdir(f"{self.dir}/tmp")
        d = self.dir
        reg = "" if self.registry_port is None else NGINX_REGISTRY.format(port=self.registry_port)

        def configure(port: int) -> list[str]:
            with open(f"{d}/nginx.conf", "w") as f:
                f.write(NGINX_CONF.format(dir=d, port=port, served=SERVED, registry=reg))
            return ["nginx", "-c", f"{d}/nginx.conf", "-p", d]

        got = await _serve(configure)
        if got is None:
            raise DeliveryError(f"nginx did not start: {self._error_tail()}")
        self.proc, self.port = got

    def _error_tail(self) -> str:
        try:
            with open(f"{self.dir}/error.log") as f:
                lines = f.read().strip().splitlines()
            return lines[-1] if lines else "no error logged"
        except OSError:
            return "no error log"

    def url(self, tag: str, path: str) -> str:
        """The address of SERVED/`path` under trial `tag`'s prefix."""
        rel = os.path.relpath(path, SERVED)
        return f"{self.base}/t/{tag}/{rel}"

    def fetched(self, tag: str) -> tuple[int, int]:
        """(bytes sent, requests) under `tag`'s prefixes, from the server's access log."""
        if self.dir is None:
            return 0, 0
        prefix = (f"/t/{tag}/", f"/v2/t-{tag}/")
        total = n = 0
        try:
            with open(f"{self.dir}/access.log", "rb") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0].decode(errors="replace").startswith(prefix):
                        total += int(parts[2])
                        n += 1
        except OSError:
            pass
        return total, n


async def _serve(
    configure: Callable[[int], list[str]], wait_s: float = 15.0
) -> tuple[asyncio.subprocess.Process, int] | None:
    """A server on a free port of 127.0.0.1: `configure(port)` writes its configuration
    and returns its argv; its process group goes to the reaper as it starts. (process,
    port) once the port accepts a connection; another port when this one was taken
    meanwhile; None after five."""
    for _ in range(5):
        port = _free_port()
        proc = await _HOST.spawn(
            configure(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and proc.returncode is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return proc, port
            except OSError:
                await asyncio.sleep(0.02)
        await _end(proc)
    return None


async def _end(proc: asyncio.subprocess.Process | None) -> None:
    """Kill a server's process group, wait for it, tell the reaper."""
    if proc is None:
        return
    kill_group(proc)
    await proc.wait()
    _HOST.release(proc)


class Registry(_Server):
    """A real `docker-registry` (the CNCF distribution registry) on 127.0.0.1, for one
    run, storing under REGISTRY_ROOT; reached by the engines through ContentServer."""

    async def start(self) -> None:
        if shutil.which("docker-registry") is None:
            raise DeliveryError("the pull mode of containers needs docker-registry "
                                "(apt-get install docker-registry)")  # fmt: skip
        os.makedirs(REGISTRY_ROOT, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=f"rtax-registry-{os.getpid()}-")
        reaper.current().add_path(self.dir)
        d = self.dir

        def configure(port: int) -> list[str]:
            with open(f"{d}/config.yml", "w") as f:
                f.write(REGISTRY_CONF.format(root=REGISTRY_ROOT, port=port))
            return ["docker-registry", "serve", f"{d}/config.yml"]

        got = await _serve(configure)
        if got is None:
            raise DeliveryError("docker-registry did not start on 127.0.0.1")
        self.proc, self.port = got

    def manifest(self, repo: str, tag: str) -> tuple[str, int]:
        """A pushed image's manifest digest (sha256 of its bytes, as the registry stores
        them) and its whole size: the manifest, its config and its layers (compressed, as
        they are sent)."""
        import hashlib

        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v2/{repo}/manifests/{tag}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
        m = json.loads(body)
        size = len(body) + int(m["config"]["size"]) + sum(int(x["size"]) for x in m["layers"])
        return "sha256:" + hashlib.sha256(body).hexdigest(), size


@dataclass
class Delivered:
    """What a trial's image phase left: its mounted root, and what the trial fetched."""

    mode: str
    root: str  # the image's root directory on the host (read-only)
    size: int  # the image's full size, bytes
    fetched: int = 0  # bytes the server sent under this trial's prefix (headers included)
    requests: int = 0
    tag: str | None = None  # the trial's prefix on the server (None: nothing fetched)

    def to_json(self) -> dict[str, Any]:
        """The trial's `image` event's fields (`model.events.image`)."""
        return {"mode": self.mode, "fetched": self.fetched, "requests": self.requests,
                "size": self.size}  # fmt: skip


class Delivery:
    """The run's image service: the image, the server, the cached mount, each trial's."""

    def __init__(self) -> None:
        self.image: str | None = None
        self.server: ContentServer | None = None
        self.registry: Registry | None = None
        self._cached: str | None = None
        self._pushed: dict[str, tuple[str, str, int]] = {}  # local ref -> repo, tag, size
        self._lock = asyncio.Lock()

    async def prepare(self, modes: tuple[str, ...], registry: bool = False) -> None:
        """Before the first trial (not timed as any trial's): the servers, when a mode
        fetches (a registry behind nginx too when a container engine pulls)."""
        for tool in ("rclone", "fusermount") if LAZY in modes else ():
            if shutil.which(tool) is None:
                raise DeliveryError(
                    f"the lazy image mode needs {tool} (apt-get install {TOOLS[tool]})"
                )
        if PULL not in modes and LAZY not in modes:
            return
        if registry and PULL in modes and self.registry is None:
            self.registry = Registry()
            await self.registry.start()
        if self.server is None:
            self.server = ContentServer(None if self.registry is None else self.registry.port)
            await self.server.start()

    async def push(self, api: Any, ref: str) -> tuple[str, str, int]:
        """A container engine's local image `ref` pushed to the run's registry (once per
        run; the registry keeps its blobs between runs): (repository, its manifest's
        digest, whole size). Pulls ask for the digest, which no later push can change."""
        async with self._lock:
            got = self._pushed.get(ref)
            if got is not None:
                return got
            if self.registry is None:
                raise DeliveryError("image mode pull: no registry in this run")
            repo, _, tag = ref.rpartition(":")
            if not repo or "/" in tag:
                repo, tag = ref, "latest"
            remote = f"127.0.0.1:{self.registry.port}/{repo}"

            def push() -> None:
                api.tag(ref, remote, tag)
                try:
                    for line in api.push(remote, tag=tag, stream=True, decode=True):
                        if isinstance(line, dict) and line.get("error"):
                            raise DeliveryError(f"push of {ref}: {line['error']}")
                finally:
                    api.remove_image(f"{remote}:{tag}", noprune=True)

            await asyncio.to_thread(push)
            assert self.registry is not None
            digest, size = await asyncio.to_thread(self.registry.manifest, repo, tag)
            got = self._pushed[ref] = (repo, digest, size)
            return got

    async def serve_file(self, path: str) -> str:
        """A file of rtax's cache (a VM's root disk) served too: linked (or copied, keeping
        its holes) under SERVED/<name>/ once per content; its served path."""
        import hashlib

        st = os.stat(path)
        key = hashlib.sha256(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        out_dir = f"{SERVED}/file-{key}"
        out = f"{out_dir}/{os.path.basename(path)}"
        if not os.path.exists(out):
            _public_dir(out_dir)
            tmp = f"{out}.tmp-{os.getpid()}"
            try:
                os.link(path, tmp)
            except OSError:  # another file system
                await asyncio.to_thread(
                    subprocess.run, ["cp", "--sparse=always", path, tmp], check=True
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, out)
        return out

    async def deliver_file(
        self, mode: str, label: str, local: str, served: str
    ) -> tuple[Delivered, str | None, str]:
        """One trial's copy of a served file (a VM's root disk, raw) by `mode`: (what it
        got, its own directory to remove at teardown or None, what QEMU opens: `local`
        itself (cached), the pulled copy (pull), or a `json:` spec of QEMU's http block
        driver on the server (lazy))."""
        size = os.path.getsize(served)
        if mode == CACHED:
            return Delivered(mode, "", size), None, local
        tag, d, url = self._trial(mode, label, served)
        got = Delivered(mode, "", size, tag=tag)
        if mode == LAZY:
            spec = {"driver": "raw", "file": {"driver": "http", "url": url}}
            return got, d, "json:" + json.dumps(spec, separators=(",", ":"))
        dest = f"{d}/{os.path.basename(served)}"
        try:
            await asyncio.to_thread(_download, url, dest, True)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(release_dir, d))
            raise
        return got, d, dest

    def pull_ref(self, repo: str, trial_tag: str) -> str:
        """Where an engine pulls `repo` for one trial: nginx's per-trial prefix."""
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}/t-{trial_tag}/{repo}"

    async def prepare_squashfs(self, modes: tuple[str, ...]) -> None:
        """The workload root as a squashfs (made once per recipe) and, when `cached` is
        listed, mounted once for the run's cached trials."""
        async with self._lock:
            if self.image is None:
                self.image = await asyncio.to_thread(squashfs_image)
            if CACHED in modes and self._cached is None:
                d = _trial_dir("cached")
                root = f"{d}/root"
                _mkdir_tracked(root)
                await _mount_squashfs(self.image, root)
                self._cached = d

    @property
    def size(self) -> int:
        return os.path.getsize(self.image) if self.image else 0

    async def deliver(self, mode: str, label: str) -> tuple[Delivered, str | None]:
        """One trial's image by `mode`: (what it got, its own directory to remove at
        teardown, or None for the shared cached mount)."""
        if self.image is None:
            raise DeliveryError("image delivery was not prepared for this run")
        if mode == CACHED:
            assert self._cached is not None
            return Delivered(mode, f"{self._cached}/root", self.size), None
        tag, d, url = self._trial(mode, label, self.image)
        got = Delivered(mode, f"{d}/root", self.size, tag=tag)
        root = f"{d}/root"
        _mkdir_tracked(root)
        try:
            if mode == PULL:
                local = f"{d}/image.sqfs"
                await asyncio.to_thread(_download, url, local)
                await _mount_squashfs(local, root)
            else:
                fuse = f"{d}/fuse"
                _mkdir_tracked(fuse)
                await _rclone_mount(os.path.dirname(url) + "/", fuse)
                await _mount_squashfs(f"{fuse}/{os.path.basename(self.image)}", root)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(release_dir, d))
            raise
        return got, d

    def _trial(self, mode: str, label: str, served: str) -> tuple[str, str, str]:
        """A fetching trial's own prefix on the server, its directory (with the reaper)
        and the address of `served` under that prefix."""
        if self.server is None:
            raise DeliveryError(f"image mode {mode}: no content server in this run")
        tag = os.urandom(6).hex()
        return tag, _trial_dir(f"{label}-{tag}"), self.server.url(tag, served)

    def count(self, got: Delivered) -> None:
        """Fill in what the server counted for the trial (after its mounts are gone)."""
        if got.tag is not None and self.server is not None:
            got.fetched, got.requests = self.server.fetched(got.tag)

    async def close(self) -> None:
        if self._cached is not None:
            await asyncio.to_thread(release_dir, self._cached)
            self._cached = None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.registry is not None:
            await self.registry.stop()
            self.registry = None


_current: Delivery | None = None


def current() -> Delivery:
    """The run's image service (`open` made it), for the environments' image phase."""
    if _current is None:
        raise DeliveryError("image delivery was not prepared for this run")
    return _current


def open_delivery() -> Delivery:
    global _current
    if _current is None:
        _current = Delivery()
    return _current


async def close_delivery() -> None:
    global _current
    d, _current = _current, None
    if d is not None:
        await d.close()


class TrialImage:
    """One environment's image, whatever the driver: delivered by the trial's mode (a
    root directory, a VM's disk, or what a container engine pulled, `got`), released
    after the environment is gone (its directory removed, the server's count read), and
    reported. One rule for every driver with image modes."""

    def __init__(self) -> None:
        self.delivered: Delivered | None = None
        self.dir: str | None = None  # the trial's own files and mounts, to release

    @property
    def root(self) -> str | None:
        """The image's root directory on the host, once delivered (stage, gVisor)."""
        return None if self.delivered is None else self.delivered.root or None

    async def deliver_root(self, spec: EnvSpec) -> None:
        """The image phase of a driver whose root is a directory (stage, gVisor)."""
        with _phase():
            self.delivered, self.dir = await current().deliver(
                str(spec.image), safe_label(spec.label)
            )

    async def deliver_file(self, spec: EnvSpec, local: str, served: str) -> str:
        """The image phase of a VM's disk: what QEMU opens (`Delivery.deliver_file`)."""
        with _phase():
            self.delivered, self.dir, source = await current().deliver_file(
                str(spec.image), safe_label(spec.label), local, served
            )
        return source

    def got(self, delivered: Delivered) -> None:
        """What a driver delivered itself (a container engine's pull, nothing at all)."""
        self.delivered = delivered

    async def release(self) -> None:
        """After the environment: its directory unmounted and removed, then what the
        server sent for it counted."""
        if self.dir is not None:
            await asyncio.to_thread(release_dir, self.dir)
            self.dir = None
        if self.delivered is not None:
            current().count(self.delivered)

    def report(self) -> dict[str, Any] | None:
        return None if self.delivered is None else self.delivered.to_json()


@contextmanager
def _phase() -> Iterator[None]:
    """A delivery's error as the image phase's failure."""
    try:
        yield
    except DeliveryError as exc:
        raise PhaseFailure(ErrorKind.ERROR, str(exc)) from None


def drop_page_cache() -> None:
    """The host's page cache written back and dropped (`page_cache = "dropped"`): the next
    image phase reads its image, and the server its file, from the disk. Host-wide."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _trial_dir(name: str) -> str:
    _public_dir(TRIALS)
    path = f"{TRIALS}/{name}-{os.getpid()}-{os.urandom(3).hex()}"
    reaper.current().add_path(path)
    os.mkdir(path, 0o755)
    return path


def _mkdir_tracked(path: str) -> None:
    reaper.current().add_path(path)
    os.mkdir(path, 0o755)


async def _mount_squashfs(image: str, root: str) -> None:
    argv = ["mount", "-t", "squashfs", "-o", "loop,ro,nodev,nosuid", image, root]
    res = await _HOST.run(argv, timeout=MOUNT_WAIT_S, merge_stderr=True)
    if res.returncode != 0:
        tail = res.stdout.decode(errors="replace").strip().splitlines()
        raise DeliveryError(
            f"mount of {os.path.basename(image)}: {tail[-1] if tail else res.returncode}"
        )


def _download(url: str, path: str, sparse: bool = False) -> int:
    """`url` into `path`; `sparse`: a MiB of zeros is a hole, not written (a disk image)."""
    n = 0
    zero = bytes(1 << 20)
    with urllib.request.urlopen(url, timeout=60) as resp, open(path, "wb") as out:
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                out.truncate(n)
                return n
            if sparse and chunk == zero[: len(chunk)]:
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
            n += len(chunk)


async def _rclone_mount(url: str, fuse: str) -> None:
    """rclone's FUSE mount of `url` at `fuse`, its process group with the reaper, there
    once the mount point answers."""
    argv = [
        "rclone", "mount", ":http:", fuse, "--http-url", url, "--read-only",
        "--vfs-cache-mode", "off", "--vfs-read-chunk-size", CHUNK,
        "--vfs-read-chunk-size-limit", CHUNK, "--buffer-size", "0", "--allow-other",
        "--dir-cache-time", "1h", "--config", "/dev/null",
    ]  # fmt: skip
    # its errors (a step's reads can cause them) go to a pipe rtax drains, keeping both
    # ends (drivers.toolkit.sinks), never to a host file that grows
    proc = await _HOST.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _MOUNTS[fuse] = proc  # release_dir ends it, even if the mount never comes up
    err = sinks.HeadTail()
    _DRAINS[fuse] = asyncio.ensure_future(sinks.drain(proc.stderr, err))
    deadline = time.monotonic() + MOUNT_WAIT_S
    while not safefs.is_mount_point(fuse):
        if proc.returncode is not None or time.monotonic() > deadline:
            await asyncio.sleep(0.05)  # what it said before it exited
            tail = err.text().splitlines()
            raise DeliveryError(
                f"rclone mount did not come up: {tail[-1] if tail else 'no error logged'}"
            )
        await asyncio.sleep(0.005)


_MOUNTS: dict[str, asyncio.subprocess.Process] = {}  # a lazy trial's FUSE client, by mount
_DRAINS: dict[str, asyncio.Future[None]] = {}  # its stderr's drain, by mount


def release_dir(d: str) -> None:
    """Unmount a trial's root and FUSE mount, end its FUSE client, remove its directory."""
    for sub in ("root", "fuse"):
        path = f"{d}/{sub}"
        safefs.unmount(path)
        proc = _MOUNTS.pop(path, None)
        _DRAINS.pop(path, None)  # it ends at the pipe's end, as the client does
        if proc is not None:
            kill_group(proc)
            _HOST.release(proc)
        if safefs.remove_tree(path) == []:
            reaper.current().drop_path(path)
    if safefs.remove_tree(d) == []:
        reaper.current().drop_path(d)


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _procs_naming(text: str) -> list[int]:
    """Processes whose command line names `text` (a path of a dead run's)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


def _kill_groups(pids: list[int]) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):  # a server leads its group; else the process
            try:
                kill(pid, 9)
                break
            except (ProcessLookupError, PermissionError):
                continue


def cleanup(label: str | None = None) -> int:
    """`rtax cleanup`: what image delivery left of runs whose rtax is gone (its reaper
    killed too): trials' mounts and FUSE clients, the cached mount, nginx and the
    registry with their directories. Every name carries the pid of the rtax that made
    it, so a live run's are spared; `label`: only that run's trials. Returns how many."""
    import re

    n = 0
    if os.path.isdir(TRIALS):
        for name in sorted(os.listdir(TRIALS)):
            m = re.search(r"-(\d+)-[0-9a-f]{6}$", name)
            if m is None or _alive(int(m.group(1))):
                continue
            if label is not None and not name.startswith(f"{label}-"):
                continue
            d = f"{TRIALS}/{name}"
            safefs.unmount(f"{d}/root")  # before its FUSE client goes
            _kill_groups(_procs_naming(f"{d}/fuse"))
            release_dir(d)
            n += 1
    if label is not None:
        return n
    tmp = tempfile.gettempdir()
    for name in sorted(os.listdir(tmp)):
        m = re.fullmatch(r"rtax-(nginx|registry)-(\d+)-\w+", name)
        if m is None or _alive(int(m.group(2))):
            continue
        d = os.path.join(tmp, name)
        _kill_groups(_procs_naming(d))
        try:  # nginx's workers name no path: their group is the master's, dead or not
            with open(os.path.join(d, "nginx.pid")) as f:
                os.killpg(int(f.read().strip()), 9)
        except (OSError, ValueError):
            pass
        shutil.rmtree(d, ignore_errors=True)
        n += 1
    return n
