"""`docker`: one container per trial on dockerd's Engine API.

The work is the container base's (`toolkit/container.py`, `toolkit/container_env.py`);
what is dockerd's is here: the socket `unix:///var/run/docker.sock`, the images
`rtax/busybox` and `rtax/workload`, `bash scripts/start-dockerd` as the fix when it does
not answer, its masked paths, a seccomp profile sent as JSON, and the runtimes it knows.
`podman.py` sets Podman's on the same base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rtax_tui.drivers.base import DaemonNeed, Environment, ImageRecipe, Problem, SubTimer
from rtax_tui.drivers.toolkit.container import ContainerDriver
from rtax_tui.drivers.toolkit.container_env import ContainerEnvironment
from rtax_tui.drivers.toolkit.container_options import ContainerOptions, userns_key
from rtax_tui.drivers.toolkit.engine_api import LABEL_KEY, call
from rtax_tui.drivers.toolkit.images import container_images, image_tag

from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.schema import option
from rtax_tui.model.spec import EnvSpec

__all__ = ["DEFAULT_SOCKET", "LABEL_KEY", "DockerDriver"]

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# dockerd 20.10's own masked paths (moby oci/defaults.go), which a HostConfig's
# MaskedPaths replace
DOCKER_MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)


@dataclass(frozen=True)
class DockerOptions(ContainerOptions):
    """`[drivers_options.docker]`: the container boundary options (`ContainerOptions`)."""

    # dockerd's API knows only "host" (per container, opting out of a remapping daemon);
    # "remap" asks for the daemon's --userns-remap, which `check()` verifies.
    userns: str | None = option(userns_key(("host", "remap")))


class DockerDriver(ContainerDriver):
    name = "docker"
    # Every check: namespaces, Docker's default capability set and seccomp profile, the
    # devices cgroup, no network, limits, /proc/cmdline masked, a sized host tmpfs as
    # /workspace. Root in the container all the same. But not `vsock` (dockerd 20.10.24
    # of Debian 12, measured: its default profile lets socket(AF_VSOCK) through; moby
    # #44562 refuses it from 23.0); a `seccomp=PATH` security_opt can close it.
    # `workspace_size` and `deep_tree` only where the workspace is that host tmpfs
    # (`promised_checks`).
    boundary = ALL_CHECKS - {"vsock"}
    default_socket = DEFAULT_SOCKET
    service = "dockerd"
    daemon: ClassVar[DaemonNeed] = DaemonNeed("dockerd", "bash scripts/start-dockerd")
    image_recipe: ClassVar[ImageRecipe | None] = ImageRecipe("docker", container_images("docker"))
    log_hint = "the dockerd log (/tmp/rtax-dockerd.log)"
    cli = "docker"
    options_type = DockerOptions
    opts: DockerOptions
    # drivers.toolkit.delivery: its own copy, or a pull from a registry on loopback
    image_modes = ("cached", "pull")
    image_registry = True

    def default_image(self) -> str:
        return image_tag("busybox")

    def default_workload_image(self) -> str:
        return image_tag("workload")

    def seccomp_profile(self, path: str) -> str:
        """What follows `seccomp=` for a profile file: docker's API wants the JSON (as the
        docker CLI sends it: dockerd would try to decode the path itself as JSON)."""
        with open(path, encoding="utf-8") as f:
            return f.read()

    def mask_cmdline(self, host_config: dict[str, Any]) -> None:
        """docker's MaskedPaths replace its defaults, so they are given too."""
        host_config["MaskedPaths"] = [*DOCKER_MASKED_PATHS, "/proc/cmdline"]

    async def runtime_problem(self, api: Any) -> Problem | None:
        """dockerd lists the runtimes it knows in `info` (`--add-runtime`, or
        daemon.json's `runtimes`)."""
        info = await call("info", api.info)
        known = sorted(info.get("Runtimes") or {})
        if self.opts.runtime in known:
            return None
        return Problem(
            f"drivers_options.{self.name}.runtime = {self.opts.runtime!r}: {self.service} "
            f"does not know it (its runtimes: {', '.join(known) or 'none'})",
            f"install it (apt-get install runsc), stop {self.service} and start it again "
            f"with {self.start_command()}, which registers runsc",
        )

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return ContainerEnvironment(self, spec, sub)
