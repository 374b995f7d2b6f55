"""The `podman` driver against Podman's Docker-compatible API socket.

What only podman has (what it shares with docker, its defaults and T0-T2 through the
engine among it: tests/drivers/test_engines.py). conftest starts the service
(scripts/start-podman) if it does not answer. Podman 4.x leaves two `conmon` processes
per API exec session; these tests count them, and require that teardown (and cleanup)
leaves none of ours.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers import get_driver  # noqa: E402
from rtax_tui.drivers.podman import (  # noqa: E402
    DEFAULT_SOCKET,
    NOFILE,
    NPROC,
    PodmanDriver,
    conmon_processes,
)

from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.spec import EnvSpec, Step  # noqa: E402
from tests.containertools import busybox_image, conmon_of, containers_of, env_spec  # noqa: E402

pytestmark = pytest.mark.usefixtures("podman_engine")  # conftest: the API service, images
LABEL = f"pytpm{os.getpid()}{os.urandom(2).hex()}"
OTHER = LABEL + "x"  # a second run of this module's own
OUR_PREFIX = f"rtax-{LABEL}".encode()  # every container name of this module starts so


def _ours() -> list[str]:
    # Only this module's containers (LABEL, or OTHER): never another run's.
    return containers_of(DEFAULT_SOCKET, (LABEL, OTHER))


def _our_conmon() -> list[int]:
    """Live conmon processes of this module's containers (named after LABEL)."""
    return conmon_of(OUR_PREFIX)


def _settled_conmon_count(want: int, wait_s: float = 3.0) -> int:
    deadline = time.monotonic() + wait_s
    while True:
        n = len(conmon_processes())
        if n <= want or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


@pytest.fixture(scope="module", autouse=True)
def image() -> str:
    return busybox_image("podman")


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


def spec(channel: str) -> EnvSpec:
    return env_spec("podman", LABEL, channel)


def driver(**options) -> PodmanDriver:
    d = get_driver("podman", LocalHost(), options)
    assert isinstance(d, PodmanDriver)
    return d


async def act(env, *argv: str, timeout: float = 30):
    return await env.action(Step(tuple(argv)), timeout)


def test_driver_ulimits():
    """Beyond tests/drivers/test_engines.py's defaults: the ulimits podman's containers get."""
    ul = driver().host_config_extra()["ulimits"]
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
    """Beyond tests/drivers/test_engines.py's missing image: the fix podman's check gives, for an
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
