"""The container engine's Engine API, as rtax calls it through the `docker` SDK (dockerd,
and Podman's Docker-compatible service): the client of one socket, each blocking call
in a worker thread with its errors typed, the multiplexed streams of an exec or an
attach read on the event loop, and the image pulls of image delivery.

The low-level `APIClient` is used (the high-level `containers.create` adds an inspect
round trip). Streams (an exec's output, the shell's attach) are read on the event
loop from the hijacked socket, so a timed-out or cancelled action never leaves a
thread blocked. Without a TTY the attach/exec streams are multiplexed: 8-byte headers
(stream type, 0, 0, 0, big-endian length); stdout and stderr are merged.

The engine going away (connection refused or reset, the container vanishing) is
`SubstrateLost`; other API errors are `PhaseFailure("docker_error")`.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import OutputSink, PhaseFailure, SubstrateLost
from rtax_tui.model.waits import waiting_on

# The label of every container rtax makes on an engine: the run's label (cleanup's key)
LABEL_KEY = "rtax.run"
API_TIMEOUT_S = 60
POOL_SIZE = 64  # concurrent API connections (capacity batches); the SDK's default is 10
HEADER = struct.Struct(">BxxxL")

T = TypeVar("T")


def socket_path(url: str) -> str | None:
    """The path of a `unix://` engine URL (an engine on this machine), else None."""
    for prefix in ("unix://", "unix:"):
        if url.startswith(prefix):
            return url[len(prefix) :] or None
    return None


class EngineClient:
    """The SDK's client of one engine socket, made on first use (its construction asks
    for the API version)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: Any = None

    def _connect(self) -> Any:
        return docker.DockerClient(
            base_url=self.url, version="auto", timeout=API_TIMEOUT_S, max_pool_size=POOL_SIZE
        )

    async def client(self) -> Any:
        if self._client is None:
            c = await call(f"connecting to {self.url}", self._connect)
            if self._client is None:
                self._client = c
            elif c is not self._client:
                c.close()
        return self._client

    async def api(self) -> Any:
        return (await self.client()).api

    def forget(self) -> None:
        """Connect afresh next time (after the engine did not answer)."""
        self._client = None

    async def alive(self) -> bool:
        try:
            api = await self.api()
            return bool(await asyncio.wait_for(asyncio.to_thread(api.ping), 5))
        except BaseException:
            return False


# -- errors ----------------------------------------------------------------


def is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, docker.errors.APIError):  # an answer (APIError is an HTTPError)
        return False
    if isinstance(exc, requests.exceptions.RequestException):
        return True
    if isinstance(exc, (ConnectionError, FileNotFoundError, socket.timeout, TimeoutError)):
        return True
    # DockerException but not APIError: "Error while fetching server API version", ...
    return isinstance(exc, docker.errors.DockerException)


def map_error(exc: BaseException, what: str, *, container: bool = False) -> PhaseFailure:
    if isinstance(exc, PhaseFailure):
        return exc
    if is_connection_error(exc):
        return SubstrateLost(f"dockerd went away during {what}: {exc}")
    if isinstance(exc, docker.errors.ImageNotFound):
        return PhaseFailure(ErrorKind.IMAGE_MISSING, f"{what}: {exc.explanation or exc}")
    if container and isinstance(exc, docker.errors.NotFound):
        return SubstrateLost(f"the container vanished during {what}: {exc.explanation or exc}")
    if isinstance(exc, docker.errors.APIError):
        return PhaseFailure(ErrorKind.DOCKER_ERROR, f"{what}: {exc.explanation or exc}")
    return PhaseFailure(ErrorKind.DOCKER_ERROR, f"{what}: {type(exc).__name__}: {exc}")


async def call(
    what: str, fn: Callable[..., T], *args: Any, container: bool = False, **kw: Any
) -> T:
    try:
        with waiting_on(f"the engine's API ({what})"):
            return await asyncio.to_thread(fn, *args, **kw)
    except Exception as exc:
        raise map_error(exc, what, container=container) from exc


# -- multiplexed streams -----------------------------------------------------


class Demuxer:
    """Turns a multiplexed attach/exec stream into its payload (stdout and stderr merged)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        buf = self._buf
        pos = 0
        while len(buf) - pos >= HEADER.size:
            _, n = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - HEADER.size < n:
                break
            out += buf[pos + HEADER.size : pos + HEADER.size + n]
            pos += HEADER.size + n
        del buf[:pos]
        return bytes(out)

    @property
    def pending(self) -> int:
        return len(self._buf)


def take_socket(raw: Any) -> tuple[socket.socket, bytes]:
    """Our own non-blocking socket for a hijacked API stream, plus bytes already buffered.

    The SDK returns a `SocketIO` (unix socket) whose HTTP response may have read past
    the headers into its buffer; those bytes come back as the prefix. The SDK's
    objects are closed, so ours is the only descriptor of the connection.
    """
    sock = raw if isinstance(raw, socket.socket) else getattr(raw, "_sock", None)
    if not isinstance(sock, socket.socket):
        raise PhaseFailure(
            ErrorKind.DOCKER_ERROR, f"unsupported stream object {type(raw).__name__}"
        )
    sock.setblocking(False)  # shared with the dup: the file status flags are per description
    mine = sock.dup()
    prefix = b""
    try:
        fp = raw._response.raw._fp.fp  # the BufferedReader the HTTP headers were read with
    except AttributeError:
        fp = None
    if fp is not None:
        try:  # what is buffered; a non-blocking raw read adds nothing or what has arrived
            prefix = fp.read1(1 << 20) or b""
        except (BlockingIOError, ValueError, OSError):
            prefix = b""
    for obj in (raw, sock):
        try:
            obj.close()
        except Exception:
            pass
    return mine, prefix


class DemuxProtocol(asyncio.StreamReaderProtocol):
    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._demux = Demuxer()

    def data_received(self, data: bytes) -> None:
        payload = self._demux.feed(data)
        if payload:
            super().data_received(payload)


async def read_all(sock: socket.socket, prefix: bytes, sink: OutputSink) -> None:
    """An exec's output to its end, into `sink` (what is past OUTPUT_LIMIT only counted)."""
    loop = asyncio.get_running_loop()
    demux = Demuxer()
    sink.add(demux.feed(prefix))
    while True:
        data = await loop.sock_recv(sock, 1 << 16)
        if not data:
            return
        sink.add(demux.feed(data))


# -- image pulls (drivers.toolkit.delivery's modes) ---------------------------


def present(api: Any, ref: str) -> bool:
    try:
        api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def pull(api: Any, src: str, digest: str) -> None:
    """`src@digest` pulled (an error in the engine's stream raised). By its manifest's
    digest, never a tag: whatever a tag of the registry says now (a step with the host's
    network could push one), the pull gets the pushed image."""
    for line in api.pull(src, tag=digest, stream=True, decode=True):
        if isinstance(line, dict) and line.get("error"):
            raise RuntimeError(f"pull of {src}@{digest}: {line['error']}")


def pull_as(api: Any, src: str, digest: str, local: str) -> None:
    """`src@digest` pulled, then tagged `local` (a cached image put back)."""
    pull(api, src, digest)
    repo, _, ltag = local.rpartition(":")
    api.tag(f"{src}@{digest}", repo or local, ltag if repo else "latest")
