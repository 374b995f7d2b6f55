"""The `podman` driver against Podman's Docker-compatible API socket.

conftest starts the service (scripts/start-podman) if it does not answer. Podman 4.x
leaves two `conmon` processes per API exec session; these tests count them, and require
that teardown (and cleanup) leaves none of ours.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers import get_driver  # noqa: E402
from rtax_tui.drivers.docker import LABEL_KEY  # noqa: E402
from rtax_tui.drivers.podman import (  # noqa: E402
    DEFAULT_SOCKET,
    NOFILE,
    NPROC,
    PodmanDriver,
    conmon_processes,
)

from rtax_tui.core import images  # noqa: E402
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

pytestmark = pytest.mark.usefixtures("podman_engine")  # conftest: the API service, images
CHANNELS = ("exec", "shell")
LABEL = f"pytpm{os.getpid()}{os.urandom(2).hex()}"
OTHER = LABEL + "x"  # a second run of this module's own
OUR_PREFIX = f"rtax-{LABEL}".encode()  # every container name of this module starts so


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


def _our_conmon() -> list[int]:
    """Live conmon processes of this module's containers (named after LABEL)."""
    out = []
    for pid in conmon_processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if OUR_PREFIX in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


def _settled_conmon_count(want: int, wait_s: float = 3.0) -> int:
    deadline = time.monotonic() + wait_s
    while True:
        n = len(conmon_processes())
        if n <= want or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


@pytest.fixture(scope="module", autouse=True)
def image() -> str:
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    return "localhost/" + images.build_busybox_image("podman")


@pytest.fixture(autouse=True)
def _nothing_left():
    yield
    left = _ours()
    conmon = _our_conmon()
    if left:
        for lab in (LABEL, OTHER):
            asyncio.run(PodmanDriver(LocalHost(), {}).cleanup(lab))
    assert left == []
    assert conmon == []


def spec(channel: str, *, limits: Limits | None = None, src: str | None = None) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", "podman", "t", channel),
        workload=Workload("t", ()),
        limits=limits or Limits(cpus=1, memory_mib=256, pids=128),
        workspace_src=src,
        label=LABEL,
    )


def driver(**options) -> PodmanDriver:
    d = get_driver("podman", LocalHost(), options)
    assert isinstance(d, PodmanDriver)
    return d


async def act(env, *argv: str, timeout: float = 30):
    return await env.action(Step(tuple(argv)), timeout)


def test_driver_defaults(image):
    d = driver()
    assert d.name == "podman" and d.channels == CHANNELS
    assert d.socket == DEFAULT_SOCKET == "unix:///run/rtax-podman/podman.sock"
    assert d.image == image == "localhost/" + images.image_tag()
    assert d.workload_image.startswith("localhost/")
    ul = d.host_config_extra()["ulimits"]
    assert [(u.name, u.soft, u.hard) for u in ul] == [
        ("nofile", NOFILE, NOFILE),
        ("nproc", NPROC, NPROC),
    ]


@pytest.mark.parametrize("channel", CHANNELS)
def test_lifecycle_output_isolation_labels_limits(channel, tmp_path, image):
    (tmp_path / "seed.txt").write_text("seed\n")
    sub_names: list[str] = []

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
            if channel == "shell":
                assert (r.rc, r.output) == (0, b"out\nerr\nout2\n")
            else:
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
            r = await act(env, "sh", "-c", "ulimit -n; ulimit -u")
            assert r.output == f"{NOFILE}\n{NPROC}\n".encode()
            r = await act(env, "cat", "/proc/net/dev")
            ifaces = {ln.split(":")[0].strip() for ln in r.output.decode().splitlines()[2:]}
            assert ifaces == {"lo"}
            c = _client()
            try:
                info = c.api.inspect_container(env.cid)
            finally:
                c.close()
            assert info["Config"]["Labels"][LABEL_KEY] == LABEL
            assert info["Config"]["Labels"]["rtax.cell"] == f"local/podman/t/{channel}"
            assert info["Config"]["Image"] == image
            hc = info["HostConfig"]
            assert hc["NetworkMode"] == "none"
            assert hc["NanoCpus"] == 1_000_000_000
            assert hc["Memory"] == 256 << 20
            assert hc["PidsLimit"] == 128
            assert info["State"]["Running"]
            assert _our_conmon()  # the container's monitor, at least
        finally:
            await env.teardown()
            await env.teardown()  # twice is harmless
        assert _our_conmon() == []

    asyncio.run(run())
    want = ["image_lookup", "container_create", "workspace"]
    want += ["attach"] if channel == "shell" else []
    assert sub_names == want + ["start", "first_command", "conmon_reap"]


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
    assert _our_conmon() == []


def test_exec_conmon_leak_is_reaped_at_teardown():
    """25 API execs leave about 50 conmon processes; teardown ends all of them."""
    before = len(conmon_processes())

    async def run() -> int:
        env = driver().environment(spec("exec"))
        try:
            await env.create()
            await env.ready()
            for i in range(25):
                r = await act(env, "sh", "-c", f"echo {i}")
                assert (r.rc, r.output) == (0, f"{i}\n".encode())
            return len(_our_conmon())
        finally:
            await env.teardown()

    during = asyncio.run(run())
    assert during >= 1  # Podman 4.3: 1 + 2 * 26 (the probe and 25 actions)
    assert _our_conmon() == []
    assert _settled_conmon_count(before) == before, (before, during)


def test_check_facts_and_cleanup_reaps_conmon():
    async def run():
        d = driver()
        assert await d.check() == []
        facts = await d.facts()
        assert facts["server"] and facts["api"] and facts["image"] == d.image
        # Leave containers behind, as a crashed run would (with exec conmons), then clean up.
        env = d.environment(spec("exec"))
        await env.create()
        await env.ready()
        for _ in range(3):
            await act(env, "true")
        other = d.environment(EnvSpec(**{**spec("exec").__dict__, "label": OTHER}))
        await other.create()
        assert len(_ours()) == 2
        assert len(_our_conmon()) >= 1
        assert await d.cleanup(LABEL) == 1  # only that run's
        assert len(_ours()) == 1
        # Without a label: every rtax run's (the only test that calls it so, on a
        # container of its own; it asserts only about that one).
        assert await d.cleanup() >= 1
        assert _ours() == []
        assert _our_conmon() == []
        assert await d.cleanup(LABEL) == 0
        await env.teardown()  # still safe: the container is already gone
        await other.teardown()

    asyncio.run(run())


def test_missing_image_and_missing_socket(tmp_path):
    async def run():
        d = driver(image="localhost/rtax/no-such-image:none")
        probs = await d.check()
        assert len(probs) == 1 and "missing" in probs[0].reason
        assert probs[0].fix.startswith("podman pull")
        env = d.environment(spec("exec"))
        with pytest.raises(PhaseFailure) as ei:
            await env.create()
        assert ei.value.kind == "image_missing"
        await env.teardown()

        d = driver()
        d.image = "localhost/rtax/busybox:none"
        d.default_image = lambda: "localhost/rtax/busybox:none"  # as if never built
        probs = await d.check()
        assert len(probs) == 1 and probs[0].fix == "rtax images build --driver podman"

        gone = f"unix://{tmp_path}/podman.sock"
        d = driver(socket=gone)
        probs = await d.check()
        assert len(probs) == 1
        assert "podman API socket is not running" in probs[0].reason
        assert probs[0].fix == "bash scripts/start-podman"
        env = d.environment(spec("shell"))
        with pytest.raises(SubstrateLost):
            await env.create()
        await env.teardown()
        assert await d.cleanup(LABEL) == 0

    asyncio.run(run())


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_t1_t2_valid_on_podman(tmp_path, channel):
    # The Debian workload image, imported into podman from the same cached root filesystem.
    import json
    import subprocess
    import sys

    from rtax_tui.core.recording import read_recording

    images.build_debian_image("podman")
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtax_tui",
            "run",
            "t2",
            "--driver",
            "podman",
            "--workload",
            "t1,t2",
            "--channel",
            channel,
            "--trials",
            "1",
            "--warmup",
            "0",
            "-o",
            str(out),
        ],
        capture_output=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr.decode()
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    for c in rep["cells"]:
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), (c["workload"], c["errors"])
    events = read_recording(out).events
    t2 = {e["trial"] for e in events if e["type"] == "trial_start" and e["workload"] == "t2"}
    rcs = [e["rc"] for e in events if e["type"] == "action" and e["trial"] in t2]
    assert rcs[3] != 0 and rcs[5] == 0  # the pinned tests: fail before the patch, pass after
