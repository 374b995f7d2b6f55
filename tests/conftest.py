"""Session fixtures for the tests that need an engine: dockerd, podman's API service,
libvirtd and the images (docker, podman, the VM guest).

Each is set up the first time a test that asks for it runs (a run of unit tests
starts no daemon): a daemon that does not answer is started with its scripts/start-*
script, the images are built or found in the cache (`rtax images build`), and at the
end of the session a daemon is stopped only if this session started it, by the PID it
started (tests/services.py). A test is skipped, saying why, only where the machine
cannot run the backend at all (its package is not installed, no root); a daemon that
should start and does not is an error.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine import evloop
from tests import services, tiers

# The console's tests: their loops stay asyncio's, as the console's own process (Textual's).
_CONSOLE_TESTS = ("test_ui_", "test_probe_ui", "test_serve")


class _ChosenLoop(asyncio.DefaultEventLoopPolicy):
    """asyncio's policy, making its loops with `factory` (uvloop's)."""

    def __init__(self, factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
        super().__init__()
        self._factory = factory

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return self._factory()


@pytest.fixture(autouse=True)
def _event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's `asyncio.run` runs on the loop `rtax run` chooses (engine.evloop: uvloop
    where it is installed; `RTAX_LOOP=asyncio pytest ...` for asyncio's), so the engine,
    hosts and drivers are tested on the loop they run on; the `rtax` processes tests start
    choose it themselves."""
    name = request.node.module.__name__.rpartition(".")[2] if request.node.module else ""
    factory = None if name.startswith(_CONSOLE_TESTS) else evloop.loop_factory()
    if factory is None:
        yield
        return
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_ChosenLoop(factory))
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(old)


def _up(daemon: services.Daemon) -> None:
    if daemon.answers() is None:
        return
    why = daemon.cannot_run()
    if why is not None:
        pytest.skip(f"{daemon.name} cannot run here: {why}")
    try:
        daemon.ensure()
    except services.DaemonError as exc:
        daemon.stop()
        pytest.fail(str(exc), pytrace=False)


def _session_daemon(daemon: services.Daemon) -> Iterator[services.Daemon]:
    _up(daemon)
    try:
        yield daemon
    finally:
        daemon.stop()


def _container_images(kind: str) -> list[str]:
    """`rtax images build --driver KIND`: the busybox and Debian workload images."""
    from rtax_tui.drivers.toolkit import images

    from rtax_tui.model.spec import RtaxError

    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static; scripts/bootstrap does)")
    if os.geteuid() != 0 and not images.image_exists(images.debian_image_tag(), kind):
        pytest.skip("building the Debian workload image needs root (debootstrap)")
    try:
        return images.build(kind)
    except RtaxError as exc:
        pytest.fail(f"images build --driver {kind}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dockerd() -> Iterator[services.Daemon]:
    yield from _session_daemon(services.dockerd())


@pytest.fixture(scope="session")
def podman_service() -> Iterator[services.Daemon]:
    yield from _session_daemon(services.podman_service())


@pytest.fixture(scope="session")
def libvirtd() -> Iterator[services.Daemon]:
    yield from _session_daemon(services.libvirtd())


@pytest.fixture(scope="session")
def docker_engine(dockerd: services.Daemon) -> list[str]:
    """dockerd answering, with rtax's images; their tags."""
    return _container_images("docker")


@pytest.fixture(scope="session")
def podman_engine(podman_service: services.Daemon) -> list[str]:
    """podman's API service answering, with rtax's images; their tags."""
    return _container_images("podman")


@pytest.fixture(scope="session")
def vm_guest() -> list[str]:
    """The VM guest (`rtax images build --driver vm`: kernel, initramfs, root disk)."""
    from rtax_tui.drivers.toolkit import images, vmimage

    from rtax_tui.model.spec import RtaxError

    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("QEMU is not installed (apt-get install qemu-system-x86; bootstrap does)")
    try:
        vmimage.kernel_version()
    except RtaxError as exc:  # no guest kernel package
        pytest.skip(str(exc))
    if os.geteuid() != 0 and vmimage.guest_files(need_root=True) is None:
        pytest.skip("building the guest's root disk needs root (debootstrap)")
    try:
        return images.build("vm")
    except RtaxError as exc:
        pytest.fail(f"images build --driver vm: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def podman_runsc_service(podman_engine: list[str]) -> Iterator[services.Daemon]:
    """A second podman API service whose containers run under gVisor's runsc
    (`start-podman --runtime runsc`: podman 4.3's compat API ignores a container's own
    runtime), sharing the first one's images."""
    from rtax_tui.drivers.podman import RUNTIME_SOCKET

    if shutil.which("runsc") is None:
        pytest.skip("runsc is not installed (apt-get install runsc; scripts/bootstrap does)")
    sock = RUNTIME_SOCKET.format(runtime="runsc").removeprefix("unix://")
    yield from _session_daemon(
        services.podman_service(
            {
                "RTAX_PODMAN_RUNTIME": "runsc",
                "RTAX_PODMAN_SOCK": sock,
                "RTAX_PODMAN_PIDFILE": "/run/rtax-podman-runsc.pid",
                "RTAX_PODMAN_LOG": "/tmp/rtax-podman-runsc.log",
            }
        )
    )


# -- tiers (tests/tiers.py) ------------------------------------------------------------------
_fast_only = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: needs no backend and is cheap (tests/tiers.py)")
    config.addinivalue_line(
        "markers",
        "backend: needs a daemon, a VM, runsc, sshd, SWE-ReX, a browser or an image build",
    )
    config.addinivalue_line(
        "markers", "alone: of the rest, needs the machine to itself (tests/tiers.py)"
    )
    config.pluginmanager.register(_FixtureGuard(), "rtax-fixture-guard")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tiers.tier(item)
        item.add_marker(tier)
        if tier != "fast":
            group = tiers.group(item)
            item.add_marker(
                pytest.mark.alone if group == "alone" else pytest.mark.xdist_group(group)
            )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m fast`, the files of the other tiers are not even imported (some probe the
    machine at import: `ip netns add` in the SSH tests)."""
    if str(config.option.markexpr).strip() == "fast" and collection_path.name in (
        tiers.BACKEND_FILES | tiers.SLOW_FILES
    ):
        return True
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _fast_only
    _fast_only = bool(session.items) and all(
        i.get_closest_marker("fast") is not None for i in session.items
    )


class _FixtureGuard:
    """Registered as a plugin (pytest_configure), not a conftest hook: a conftest's hooks
    see only fixtures of nodes under its directory, and a session fixture's node is the
    session, above tests/, so a conftest hook never saw dockerd, libvirtd or the images."""

    @staticmethod
    def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> None:
        """In a run of fast tests only, no daemon starts: a test classed fast that asks for a
        backend at run time fails, naming where to class it. On xdist's workers, a daemon or
        image is brought up only by its group's tests (tests/tiers.py): the other worker's
        session would share it and stop it while this one's tests still use it."""
        test = getattr(request, "_pyfuncitem", request.node)  # a session fixture's: the test's
        if _fast_only and fixturedef.argname in tiers.BACKEND_FIXTURES:
            pytest.fail(
                f"{test.nodeid} is in the fast tier but asks for {fixturedef.argname}: "
                "add its file to BACKEND_FILES or the test to BACKEND_TESTS in tests/tiers.py",
                pytrace=False,
            )
        owner = (
            tiers.VMS
            if fixturedef.argname in tiers.VM_FIXTURES
            else tiers.OTHERS
            if fixturedef.argname in tiers.OTHER_FIXTURES
            else None
        )
        mark = test.get_closest_marker("xdist_group")
        if owner and os.environ.get("PYTEST_XDIST_WORKER") and mark and mark.args[0] != owner:
            pytest.fail(
                f"{test.nodeid} is in the {mark.args[0]} group but asks for {fixturedef.argname}, "
                f"which the {owner} group's worker owns: class it in tests/tiers.py",
                pytrace=False,
            )
