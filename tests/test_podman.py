"""The `podman` driver against Podman's Docker-compatible API socket.

What only podman has (what it shares with docker: tests/test_engines.py). conftest
starts the service (scripts/start-podman) if it does not answer. Podman 4.x
leaves two `conmon` processes per API exec session; these tests count them, and require
that teardown (and cleanup) leaves none of ours.
"""

from __future__ import annotations

import asyncio
import os
import time

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
from rtax_tui.drivers.toolkit import images  # noqa: E402

from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload  # noqa: E402

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


def test_missing_image_fixes_name_podman():
    """Beyond tests/test_engines.py's missing image: the fix podman's check gives, for an
    image of the user's and for rtax's own image never built."""

    async def run():
        d = driver(image="localhost/rtax/no-such-image:none")
        probs = await d.check()
        assert len(probs) == 1 and probs[0].fix.startswith("podman pull")
        d = driver()
        d.image = "localhost/rtax/busybox:none"
        d.default_image = lambda: "localhost/rtax/busybox:none"  # as if never built
        probs = await d.check()
        assert len(probs) == 1 and probs[0].fix == "rtax images build --driver podman"

    asyncio.run(run())


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_t1_t2_valid_on_podman(tmp_path, channel):
    # The Debian workload image, imported into podman from the same cached root filesystem.
    import json
    import subprocess
    import sys

    from rtax_tui.model.recording import read_recording

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
