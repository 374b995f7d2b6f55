"""The `docker` driver against a real dockerd (conftest starts one if none answers)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers import docker as dd  # noqa: E402
from rtax_tui.drivers.container import Demuxer  # noqa: E402
from rtax_tui.drivers.docker import DEFAULT_SOCKET, LABEL_KEY, DockerDriver  # noqa: E402

from rtax_tui.core import images, rootfs  # noqa: E402
from rtax_tui.core.model import (  # noqa: E402
    Cell,
    EnvSpec,
    Limits,
    PhaseFailure,
    Step,
    SubstrateLost,
    Workload,
)
from rtax_tui.hosts.local import LocalHost  # noqa: E402

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images
SOCK_PATH = DEFAULT_SOCKET[len("unix://") :]
CHANNELS = ("exec", "shell")
LABEL = f"pytdk{os.getpid()}{os.urandom(2).hex()}"
OTHER = LABEL + "x"  # a second run of this module's own


def _client():
    return docker.DockerClient(base_url=DEFAULT_SOCKET, version="auto", timeout=30)


def _ours() -> list[str]:
    c = _client()
    try:
        found = c.containers.list(all=True, filters={"label": LABEL_KEY})
        # Only this module's containers (LABEL, or OTHER): never another run's.
        return [x.name for x in found if x.labels.get(LABEL_KEY) in (LABEL, OTHER)]
    finally:
        c.close()


@pytest.fixture(scope="module", autouse=True)
def image() -> str:
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    return images.build_busybox_image("docker")


@pytest.fixture(autouse=True)
def _no_container_left():
    yield
    left = _ours()
    if left:
        for lab in (LABEL, OTHER):
            asyncio.run(DockerDriver(LocalHost(), {}).cleanup(lab))
    assert left == []


def spec(channel: str, *, limits: Limits | None = None, src: str | None = None) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", "docker", "t", channel),
        workload=Workload("t", ()),
        limits=limits or Limits(cpus=1, memory_mib=256, pids=128),
        workspace_src=src,
        label=LABEL,
    )


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


@pytest.mark.parametrize("channel", CHANNELS)
def test_lifecycle_output_isolation_labels_limits(channel, tmp_path):
    (tmp_path / "seed.txt").write_text("seed\n")
    sub_names: list[str] = []

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def sub(name):
        sub_names.append(name)
        yield

    async def run():
        env = driver().environment(spec(channel, src=str(tmp_path)), sub)
        try:
            await env.create()
            await env.ready()
            r = await act(env, "sh", "-c", "echo hi; exit 3")
            assert (r.rc, r.output) == (3, b"hi\n")
            r = await act(env, "printf", "no newline")
            assert (r.rc, r.output) == (0, b"no newline")
            r = await act(env, "sh", "-c", "echo out; echo err >&2; echo out2")
            if channel == "shell":  # one stream: the order of the writes
                assert (r.rc, r.output) == (0, b"out\nerr\nout2\n")
            else:  # two pipes merged as they arrive: each stream's own order only
                assert r.rc == 0 and r.output.replace(b"err\n", b"", 1) == b"out\nout2\n"
                assert b"err\n" in r.output
            r = await act(env, "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x")
            assert r.output == b"x" * 300000
            assert (await act(env, "pwd")).output == b"/workspace\n"
            assert (await act(env, "cat", "seed.txt")).output == b"seed\n"
            r = await act(env, "sh", "-c", "echo $HOME $TMPDIR")
            assert r.output == b"/workspace /tmp\n"
            r = await act(env, "sh", "-c", "echo d > /workspace/f && cat f")
            assert (r.rc, r.output) == (0, b"d\n")
            # Network: only lo.
            r = await act(env, "cat", "/proc/net/dev")
            ifaces = {ln.split(":")[0].strip() for ln in r.output.decode().splitlines()[2:]}
            assert ifaces == {"lo"}
            # Labels and limits, as the daemon sees them.
            c = _client()
            try:
                info = c.api.inspect_container(env.cid)
            finally:
                c.close()
            assert info["Config"]["Labels"][LABEL_KEY] == LABEL
            hc = info["HostConfig"]
            assert hc["NetworkMode"] == "none"
            assert hc["NanoCpus"] == 1_000_000_000
            assert hc["Memory"] == 256 << 20
            assert hc["PidsLimit"] == 128
            assert info["State"]["Running"]
        finally:
            await env.teardown()
            await env.teardown()  # twice is harmless

    asyncio.run(run())
    want = ["image_lookup", "container_create", "workspace"]
    want += ["attach"] if channel == "shell" else []
    assert sub_names == want + ["start", "first_command"]


def test_a_timed_out_exec_leaves_no_process_in_the_container():
    """Beyond the contract's hanging action: `docker exec` has no kill, so the driver
    kills the timed-out action's processes itself (in the background); none is left,
    not even a zombie, by the next action."""

    async def run():
        env = driver().environment(spec("exec"))
        try:
            await env.create()
            await env.ready()
            with pytest.raises(asyncio.TimeoutError):
                await act(env, "sh", "-c", "sleep 300 & sleep 300", timeout=0.5)
            if env._bg:  # the background kill, if it has not finished yet
                await asyncio.wait(set(env._bg), timeout=10)
            r = await act(env, "ps", "-o", "stat,args")
            assert b"sleep 300" not in r.output and b"Z" not in r.output, r
        finally:
            await env.teardown()

    asyncio.run(run())
    assert _ours() == []


def test_check_facts_and_cleanup():
    async def run():
        d = driver()
        assert await d.check() == []
        facts = await d.facts()
        assert facts["server"] and facts["api"] and facts["image"] == images.image_tag()
        # Leave a container behind, as a crashed run would, then clean it up.
        env = d.environment(spec("exec"))
        await env.create()
        await env.ready()
        other = d.environment(EnvSpec(**{**spec("exec").__dict__, "label": OTHER}))
        await other.create()
        assert len(_ours()) == 2
        assert await d.cleanup(LABEL) == 1  # only that run's
        assert len(_ours()) == 1
        # Without a label: every rtax run's (the only test that calls it so, on a
        # container of its own; it asserts only about that one).
        assert await d.cleanup() >= 1
        assert _ours() == []
        assert await d.cleanup(LABEL) == 0
        await env.teardown()  # still safe: the container is already gone
        await other.teardown()

    asyncio.run(run())


def test_missing_image_and_missing_daemon(tmp_path):
    async def run():
        d = driver(image="rtax/no-such-image:none")
        probs = await d.check()
        assert len(probs) == 1 and "missing" in probs[0].reason
        env = d.environment(spec("exec"))
        with pytest.raises(PhaseFailure) as ei:
            await env.create()
        assert ei.value.kind == "image_missing"
        await env.teardown()

        gone = f"unix://{tmp_path}/docker.sock"
        d = driver(socket=gone)
        probs = await d.check()
        assert len(probs) == 1
        assert "dockerd is not running" in probs[0].reason
        assert probs[0].fix == "bash scripts/start-dockerd"
        env = d.environment(spec("shell"))
        with pytest.raises(SubstrateLost):
            await env.create()
        await env.teardown()
        assert await d.cleanup(LABEL) == 0

    asyncio.run(run())


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
        assert await driver().cleanup(LABEL) == 1  # the real daemon still has it

    asyncio.run(run())


def test_module_constants():
    assert dd.DEFAULT_SOCKET == "unix:///var/run/docker.sock"
    assert DockerDriver.name == "docker" and DockerDriver.channels == CHANNELS
