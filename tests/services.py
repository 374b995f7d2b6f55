"""The daemons the engine tests need (dockerd, podman's API service, libvirtd), started
for a test session by the session fixtures of conftest.py when they are not answering,
with the scripts a person would use (scripts/start-*), and stopped at the session's
end only if this session started them: by the PID it started, never by name.

A daemon counts as started here when, after its script ran, its pid file names a live
process of that daemon that it did not name before (a script that only waited for a
daemon some other process started leaves the pid file as it was).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# conftest's session fixtures that bring up a daemon or an image a driver declares
# (`Driver.daemon`, `Driver.image_recipe`), by the daemon's name and the image's kind; a
# fixture of an image starts its engine too. A driver whose daemon or image is not here
# runs where its own `check()` passes and is skipped with its reason elsewhere.
DAEMON_FIXTURES = {"dockerd": "dockerd", "podman": "podman_service", "libvirtd": "libvirtd"}
IMAGE_FIXTURES = {"docker": "docker_engine", "podman": "podman_engine", "vm": "vm_guest"}


def backend_fixtures(cls: type) -> tuple[str, ...]:
    """The session fixtures that bring up what driver class `cls` declares it needs."""
    out = []
    daemon, image = getattr(cls, "daemon", None), getattr(cls, "image_recipe", None)
    if daemon is not None and daemon.name in DAEMON_FIXTURES:
        out.append(DAEMON_FIXTURES[daemon.name])
    if image is not None and image.kind in IMAGE_FIXTURES:
        out.append(IMAGE_FIXTURES[image.kind])
    return tuple(dict.fromkeys(out))


def usable_driver(name: str, request: Any) -> Any:
    """Driver `name` on this host: what it needs brought up (`backend_fixtures`, through
    the test's `request`) and its own check passed, or the test skipped saying why."""
    import asyncio

    import pytest
    from rtax_tui.drivers import driver_class, get_driver

    from rtax_tui.hosts.local import LocalHost

    for fixture in backend_fixtures(driver_class(name)):
        request.getfixturevalue(fixture)
    drv = get_driver(name, LocalHost(), {})
    problems = asyncio.run(drv.check())
    if problems:
        pytest.skip(f"{name} cannot run here: {problems[0]}")
    return drv


SCRIPT_TIMEOUT_S = 180
STOP_WAIT_S = 60


class DaemonError(Exception):
    """The machine can run the daemon, but it did not come up."""


def proc_state(pid: int) -> str | None:
    """The process's state letter, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")  # a zombie has exited already


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ")
    except OSError:
        return b""


@dataclass
class PidFile:
    path: str
    mark: bytes  # in the command line of the process it names (a reused PID is not it)

    def pid(self) -> int | None:
        """The live process of this daemon that the file names, or None."""
        try:
            pid = int(Path(self.path).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) and self.mark in cmdline(pid) else None


@dataclass
class Daemon:
    name: str
    script: Path
    programs: tuple[str, ...]  # what must be installed (else the tests skip, saying so)
    install: str  # how to install them
    pidfiles: tuple[PidFile, ...]  # in the order the script starts them
    answers: Callable[[], str | None]  # None when the daemon answers, else why not
    env: Mapping[str, str] = field(default_factory=dict)  # for the script
    needs_root: bool = True
    prerequisite: Callable[[], str | None] | None = None  # another reason it cannot run
    started: list[int] = field(default_factory=list)  # PIDs this session started
    # Processes the daemon can leave behind once stopped (dockerd's containerd shims
    # outlive it): those that appeared while this session's daemon ran end with it.
    strays: Callable[[], set[int]] | None = None
    _strays_before: set[int] = field(default_factory=set)

    def cannot_run(self) -> str | None:
        """Why this machine cannot run the daemon at all, or None."""
        missing = [p for p in self.programs if shutil.which(p) is None]
        if missing:
            return f"{', '.join(missing)} not installed ({self.install})"
        if self.needs_root and os.geteuid() != 0:
            return f"starting {self.name} needs root"
        return self.prerequisite() if self.prerequisite else None

    def _run_script(self) -> list[int]:
        """Run the start script; return the PIDs it started."""
        before = [pf.pid() for pf in self.pidfiles]
        res = subprocess.run(
            ["bash", str(self.script)],
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
        new = [p for pf, b in zip(self.pidfiles, before, strict=True) if (p := pf.pid()) != b]
        new = [p for p in new if p is not None]
        if res.returncode != 0:
            self.started += new  # whatever did start is still this session's to stop
            raise DaemonError(f"{self.script.name} failed: {(res.stderr or res.stdout)[-2000:]}")
        return new

    def ensure(self) -> None:
        """Make the daemon answer: start it if it does not (raise DaemonError if it
        will not come up; the caller first asks cannot_run())."""
        if self.answers() is None:
            return
        if self.strays is not None:
            self._strays_before = self.strays()
        self.started += self._run_script()
        why = self.answers()
        if why is not None:
            raise DaemonError(f"{self.name} still does not answer after {self.script.name}: {why}")

    def restart(self, killed: int | None) -> None:
        """After a test killed `killed` (a daemon's PID, or None): start it again. The
        new process is this session's to stop only if the killed one was."""
        ours = killed is not None and killed in self.started
        if ours:
            self.started.remove(killed)
        new = self._run_script()
        if ours:
            self.started += new
        why = self.answers()
        if why is not None:
            raise DaemonError(f"{self.name} does not answer after a restart: {why}")

    def stop(self) -> list[int]:
        """End what this session started (SIGTERM, then SIGKILL after STOP_WAIT_S);
        return the PIDs it ended."""
        ended = []
        marks = {pf.mark for pf in self.pidfiles}
        for pid in reversed(self.started):
            if not alive(pid) or not any(m in cmdline(pid) for m in marks):
                continue  # gone already (a test stopped it), or its PID is someone else's now
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_WAIT_S
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
            ended.append(pid)
        self.started.clear()
        if ended and self.strays is not None:
            for pid in sorted(self.strays() - self._strays_before):
                _kill_tree(pid)
        return ended


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it (children first)."""
    for child in _children(pid):
        _kill_tree(child)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def processes_with(*needles: bytes) -> set[int]:
    """Live processes whose command line contains every one of `needles`."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and all(n in cmdline(int(name)) for n in needles):
            if alive(int(name)):
                found.add(int(name))
    return found


def containerd_shims(address: str) -> set[int]:
    """containerd shims serving the containerd at `address` (a socket path)."""
    return processes_with(b"containerd-shim", address.encode())


# -- the three daemons ---------------------------------------------------------------


def docker_api_answers(base_url: str, what: str, script: str) -> str | None:
    """None when a Docker API answers on `base_url` (unix://PATH), else why not."""
    path = base_url.removeprefix("unix://")
    if not os.path.exists(path):
        return f"{what} is not running (no {path}; bash scripts/{script} starts it)"
    try:
        import docker

        c = docker.DockerClient(base_url=base_url, version="auto", timeout=5)
        try:
            c.ping()
        finally:
            c.close()
    except Exception as exc:
        return f"{what} does not answer on {base_url}: {exc}"
    return None


def dockerd() -> Daemon:
    from rtax_tui.drivers.docker import DEFAULT_SOCKET

    return Daemon(
        name="dockerd",
        script=ROOT / "scripts" / "start-dockerd",
        programs=("dockerd", "docker"),
        install="apt-get install docker.io; scripts/bootstrap does",
        pidfiles=(
            PidFile(os.environ.get("RTAX_DOCKERD_PIDFILE", "/run/rtax-dockerd.pid"), b"dockerd"),
        ),
        answers=lambda: docker_api_answers(DEFAULT_SOCKET, "dockerd", "start-dockerd"),
        strays=lambda: containerd_shims("/var/run/docker/containerd/containerd.sock"),
    )


def podman_service(env: Mapping[str, str] | None = None) -> Daemon:
    """Podman's Docker-compatible API service; `env` may move its socket, pid file, log
    and containers.conf drop-in (the RTAX_PODMAN_* variables of start-podman)."""
    from rtax_tui.drivers.podman import DEFAULT_SOCKET

    env = dict(env or {})
    sock = env.get("RTAX_PODMAN_SOCK")
    base_url = f"unix://{sock}" if sock else DEFAULT_SOCKET
    pidfile = env.get("RTAX_PODMAN_PIDFILE", os.environ.get("RTAX_PODMAN_PIDFILE"))
    return Daemon(
        name="the podman API service",
        script=ROOT / "scripts" / "start-podman",
        programs=("podman",),
        install="apt-get install --no-install-recommends podman; scripts/bootstrap does",
        pidfiles=(PidFile(pidfile or "/run/rtax-podman.pid", b"system service"),),
        answers=lambda: docker_api_answers(base_url, "the podman API service", "start-podman"),
        env=env,
    )


def libvirt_python() -> str | None:
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "libvirt-python is not installed (scripts/bootstrap installs it)"
    return None


def libvirtd_answers() -> str | None:
    why = libvirt_python()
    if why is not None:
        return why
    import libvirt

    try:
        libvirt.open("qemu:///system").close()
    except libvirt.libvirtError as exc:
        return f"libvirtd does not answer (bash scripts/start-libvirtd starts it): {exc}"
    return None


def libvirtd() -> Daemon:
    return Daemon(
        name="libvirtd",
        script=ROOT / "scripts" / "start-libvirtd",
        programs=("libvirtd", "virtlogd", "virsh"),
        install="apt-get install libvirt-daemon-system libvirt-clients; scripts/bootstrap does",
        pidfiles=(
            PidFile("/run/virtlogd.pid", b"virtlogd"),
            PidFile("/run/libvirtd.pid", b"libvirtd"),
        ),
        answers=libvirtd_answers,
        prerequisite=libvirt_python,
    )
