"""`podman`: one container per environment, through Podman's Docker-compatible API.

This is the docker driver's code path, unchanged: the same `docker` SDK calls
(create, put_archive, attach, start, exec create/start/inspect, forced remove), the
same channels and sub-phases, the same error mapping, against the socket of
`podman system service --time=0 unix:///run/rtax-podman/podman.sock` (started by
`bash scripts/start-podman`). What differs:

- images are named `localhost/NAME:TAG` (`podman import rtax/busybox:T` stores
  `localhost/rtax/busybox:T`; the bare name would be looked up in registries);
- every container gets ulimits no higher than the caller's (`nofile` 20000, `nproc`
  32768): Podman's defaults are higher, and without CAP_SYS_RESOURCE the runtime
  cannot raise them, so the container would not start;
- conmon leaks: Podman 4.x leaves two `conmon` processes for every exec session
  started through the API (podman issue #15377; they otherwise linger for
  `exit_command_delay`, 5 minutes, even after the container is removed). Teardown
  therefore ends, after the container is removed, every conmon process whose
  command line names the container (`-c ID` or `-n NAME`), and so does `cleanup()`
  for the containers it removes. That sub-step is timed as `teardown.conmon_reap`.
  It only works when the service runs on this machine (a unix socket here).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import docker.errors
from docker.types import Ulimit
from rtax_tui.drivers.base import DaemonNeed, Environment, ImageRecipe, Problem, SubTimer
from rtax_tui.drivers.toolkit.container import ContainerDriver
from rtax_tui.drivers.toolkit.container_env import ContainerEnvironment
from rtax_tui.drivers.toolkit.container_options import ContainerOptions, userns_key
from rtax_tui.drivers.toolkit.engine_api import LABEL_KEY, call
from rtax_tui.drivers.toolkit.images import container_images, image_tag
from rtax_tui.drivers.toolkit.seccomp import narrowed_profile_file

from rtax_tui.hosts import Host
from rtax_tui.hosts.conmon import conmon_processes
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.inputs import INT64_MAX
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import EnvSpec

# podman 4.3's default seccomp profile on Debian 12 (`podman info`: SECCOMPProfilePath)
PODMAN_SECCOMP = "/usr/share/containers/seccomp.json"

DEFAULT_SOCKET = "unix:///run/rtax-podman/podman.sock"
LOCAL_PREFIX = "localhost/"
NOFILE = 20000
NPROC = 32768
RUNTIME_SOCKET = "unix:///run/rtax-podman/podman-{runtime}.sock"
REMOVE_RETRY_S = 10.0
REAP_WAIT_S = 2.0


def _localhost(tag: str) -> str:
    return tag if tag.startswith(LOCAL_PREFIX) else LOCAL_PREFIX + tag


def reap_conmon(ids: set[str]) -> int:
    """SIGKILL the conmon processes of these containers; return how many were signalled.

    Run only after the containers are removed: conmon of a running container is its
    monitor. The processes' parent (PID 1, as conmon daemonizes) reaps them."""
    ids = {i for i in ids if i}
    if not ids:
        return 0
    n = 0
    killed = []
    for pid in conmon_processes(ids):
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    # Wait until they have exited (a dying process still shows its command line).
    deadline = time.monotonic() + REAP_WAIT_S
    while killed and time.monotonic() < deadline:
        killed = [p for p in killed if _alive(p)]
        if killed:
            time.sleep(0.002)
    return n


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return bool(f.read(1))  # a zombie's is empty
    except OSError:
        return False


class PodmanEnvironment(ContainerEnvironment):
    def _remove(self, api: Any, target: str) -> None:
        """The forced remove, retried while Podman reports the container between states.

        Closing the shell channel's attach stream ends the container's `sh`, and a
        forced remove racing with that stop fails with "container state improper"
        (Podman 4.3 sends SIGKILL to a container that has just stopped)."""
        deadline = time.monotonic() + REMOVE_RETRY_S
        while True:
            try:
                api.remove_container(target, v=True, force=True)
                return
            except docker.errors.NotFound:
                raise
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                if "state improper" not in text or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    async def _teardown(self) -> None:
        made = self.cid is not None or self._create is not None
        cid = self.cid
        await super()._teardown()  # raises when the container could not be removed
        if made and self.d.local:
            async with self.sub("conmon_reap"):
                await asyncio.to_thread(reap_conmon, {self.name, cid or ""})


@dataclass(frozen=True)
class PodmanOptions(ContainerOptions):
    """`[drivers_options.podman]`: the container boundary options (`ContainerOptions`),
    podman's user namespace modes, and the containers' ulimits."""

    # Podman's own user namespace modes, sent as the API's UsernsMode. Measured with
    # podman 4.3 as root: "host" works; "auto" needs a `containers` range in /etc/subuid
    # and /etc/subgid ("could not find enough available IDs" without one); "keep-id"
    # and "nomap" are for rootless podman only; "private" without explicit mappings is
    # refused, so it is not offered.
    userns: str | None = option(
        userns_key(("host", "auto", "keep-id", "nomap"), ("auto:", "keep-id:"))
    )
    nofile: int = option(
        Key((int,), NOFILE, "the containers' open files limit (ulimit)", (1, INT64_MAX))
    )
    nproc: int = option(
        Key((int,), NPROC, "the containers' processes limit (ulimit)", (1, INT64_MAX))
    )


class PodmanDriver(ContainerDriver):
    name = "podman"
    default_socket = DEFAULT_SOCKET
    service = "the podman API socket"
    daemon = DaemonNeed("podman", "bash scripts/start-podman")
    image_recipe = ImageRecipe("podman", container_images("podman"))
    log_hint = "the podman service log (/tmp/rtax-podman.log)"
    cli = "podman"
    options_type = PodmanOptions
    opts: PodmanOptions
    # Every check. podman 4.3's default profile (containers-common's seccomp.json) lets
    # root in the container call process_vm_readv/writev and pidfd_getfd, and open
    # AF_VSOCK sockets (measured here): rtax gives the service that profile narrowed
    # (`narrowed_seccomp`), and promises `process_vm` and `vsock` only then.
    boundary = ALL_CHECKS

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.nofile = self.opts.nofile
        self.nproc = self.opts.nproc
        self._narrowed: str | None = None  # "": looked, none to be had
        # conmon runs where the service runs: reap it only when that is here (self.local).

    def engine_socket(self) -> str:
        """podman 4.3's compat API ignores a container's HostConfig.Runtime: with option
        `runtime`, a service whose default runtime is this one (`start-podman --runtime
        NAME`) runs them, on a socket of its own."""
        if self.opts.runtime:
            return RUNTIME_SOCKET.format(runtime=self.opts.runtime)
        return DEFAULT_SOCKET

    def start_command(self) -> str:
        start = super().start_command()
        return f"{start} --runtime {self.opts.runtime}" if self.opts.runtime else start

    async def runtime_problem(self, api: Any) -> Problem | None:
        """Podman's compat API ignores a container's runtime: the service's default must
        be it (`start-podman --runtime NAME` starts one on its own socket)."""
        info = await call("info", api.info)
        default = info.get("DefaultRuntime")
        if default == self.opts.runtime:
            return None
        return Problem(
            f"drivers_options.{self.name}.runtime = {self.opts.runtime!r}: the service on "
            f"{self.socket} runs containers with {default!r} (podman's compat API ignores "
            "a container's own runtime)",
            f"{self.start_command()} (a service of its own), and no `socket` option",
        )

    def narrowed_seccomp(self) -> str | None:
        """The path of podman's default seccomp profile narrowed (`seccomp.narrow_profile`), which
        every container gets unless the options give a profile of their own; None where
        it cannot be (a remote service, no default profile on this machine)."""
        if not self.local or any(o.startswith("seccomp") for o in self.opts.security_opt):
            return None
        if self._narrowed is None:
            self._narrowed = narrowed_profile_file(PODMAN_SECCOMP) or ""
        return self._narrowed or None

    def security_opts(self) -> list[str]:
        out = super().security_opts()
        narrowed = self.narrowed_seccomp()
        return out if narrowed is None else [*out, f"seccomp={narrowed}"]

    def promised_checks(self) -> frozenset[str]:
        out = super().promised_checks()
        return out if self.narrowed_seccomp() else out - {"vsock", "process_vm"}

    def mask_cmdline(self, host_config: dict[str, Any]) -> None:
        """Podman's API ignores MaskedPaths; its `mask=` security option adds a path to
        its own masked ones (measured with podman 4.3)."""
        host_config["SecurityOpt"] = [*host_config.get("SecurityOpt", []), "mask=/proc/cmdline"]

    def seccomp_profile(self, path: str) -> str:
        """Podman's API takes a seccomp profile as a path (on the service's machine) and
        would try to open inline JSON as a file name."""
        return path

    def default_image(self) -> str:
        return _localhost(image_tag("busybox"))

    def default_workload_image(self) -> str:
        return _localhost(image_tag("workload"))

    def host_config_extra(self) -> dict[str, Any]:
        return {
            "ulimits": [
                Ulimit(name="nofile", soft=self.nofile, hard=self.nofile),
                Ulimit(name="nproc", soft=self.nproc, hard=self.nproc),
            ]
        }

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return PodmanEnvironment(self, spec, sub)

    async def cleanup(self, label: str | None = None) -> int:
        sel = f"{LABEL_KEY}={label}" if label else LABEL_KEY

        async def ours() -> dict[str, set[str]] | None:
            try:
                api = await self.api()
                found = await asyncio.to_thread(api.containers, all=True, filters={"label": sel})
            except Exception:
                return None
            return {
                c["Id"]: {c["Id"], *(x.lstrip("/") for x in c.get("Names") or ())} for c in found
            }

        before = await ours()
        n = await super().cleanup(label)
        if before and self.local:
            after = await ours()
            if after is not None:  # the conmon of only those that are gone
                gone = set().union(*(v for k, v in before.items() if k not in after))
                await asyncio.to_thread(reap_conmon, gone)
        return n
