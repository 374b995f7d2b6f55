"""The `docker` driver against a real dockerd (conftest starts one if none answers): what
only docker has. What it shares with podman is tested over both in tests/drivers/test_engines.py
(its defaults, lifecycle, T0-T2 through the engine, ...)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers.docker import DEFAULT_SOCKET, DockerDriver  # noqa: E402
from rtax_tui.drivers.toolkit import images, rootfs  # noqa: E402
from rtax_tui.drivers.toolkit.engine_api import Demuxer  # noqa: E402

from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.spec import EnvSpec, Step, SubstrateLost  # noqa: E402
from tests.containertools import busybox_image, containers_of, env_spec  # noqa: E402

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images
SOCK_PATH = DEFAULT_SOCKET[len("unix://") :]
CHANNELS = ("exec", "shell")
LABEL = f"pytdk{os.getpid()}{os.urandom(2).hex()}"
OTHER = LABEL + "x"  # a second run of this module's own


def _ours() -> list[str]:
    # Only this module's containers (LABEL, or OTHER): never another run's.
    return containers_of(DEFAULT_SOCKET, (LABEL, OTHER))


@pytest.fixture(scope="module", autouse=True)
def image() -> str:
    return busybox_image("docker")


@pytest.fixture(autouse=True)
def _no_container_left():
    yield
    left = _ours()
    if left:
        for lab in (LABEL, OTHER):
            asyncio.run(DockerDriver(LocalHost(), {}).cleanup(lab))
    assert left == []


def spec(channel: str) -> EnvSpec:
    return env_spec("docker", LABEL, channel)


def driver(**options) -> DockerDriver:
    return DockerDriver(LocalHost(), options)


async def act(env, *argv: str, timeout: float = 30):
    return await env.action(Step(tuple(argv)), timeout)


def test_demuxer_handles_split_frames():
    def frame(kind: int, data: bytes) -> bytes:
        return bytes([kind, 0, 0, 0]) + len(data).to_bytes(4, "big") + data

    stream = frame(1, b"hello ") + frame(2, b"err ") + frame(1, b"") + frame(1, b"world")
    for cut in range(1, len(stream)):
        d = Demuxer()
        assert d.feed(stream[:cut]) + d.feed(stream[cut:]) == b"hello err world"
        assert d.pending == 0
    d = Demuxer()
    assert b"".join(d.feed(bytes([b])) for b in stream) == b"hello err world"


def test_image_tag_is_cached_and_runs(image):
    assert image == images.image_tag() and image.startswith("rtax/busybox:")
    t = time.monotonic()
    assert images.build_busybox_image("docker") == image  # cached: no rebuild
    assert time.monotonic() - t < 5
    assert rootfs.is_static_elf(images.find_static_busybox())


class Proxy:
    """A unix-socket forwarder to dockerd that can be cut, like a daemon that dies."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lsock = socket.socket(socket.AF_UNIX)
        self.lsock.bind(path)
        self.lsock.listen(64)
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.lsock.accept()
            except OSError:
                return
            b = socket.socket(socket.AF_UNIX)
            b.connect(SOCK_PATH)
            with self.lock:
                self.socks += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(x, y), daemon=True).start()

    @staticmethod
    def _pump(x: socket.socket, y: socket.socket) -> None:
        try:
            while data := x.recv(65536):
                y.sendall(data)
            y.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def cut(self) -> None:
        self.lsock.close()
        os.unlink(self.path)
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


@pytest.mark.parametrize("channel", CHANNELS)
def test_daemon_vanishing_mid_run_is_substrate_lost(channel, tmp_path):
    async def run():
        proxy = Proxy(str(tmp_path / "d.sock"))
        d = driver(socket=f"unix://{proxy.path}")
        env = d.environment(spec(channel))
        await env.create()
        await env.ready()
        assert (await act(env, "echo", "x")).output == b"x\n"
        proxy.cut()
        with pytest.raises(SubstrateLost):
            await act(env, "echo", "x", timeout=20)
        with pytest.raises(SubstrateLost):
            await env.teardown()
        assert await d.cleanup(LABEL) == 0  # can't reach it: nothing done, no error
        # the real daemon still has it; its host workspace (a tmpfs) goes with it
        assert await driver().cleanup(LABEL) == 2

    asyncio.run(run())
