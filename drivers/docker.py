"""`docker`: one container per trial on dockerd's Engine API.

The work is the container base's (`container.py`), whose defaults are dockerd's: the
socket `unix:///var/run/docker.sock`, the images `rtax/busybox` and `rtax/workload`,
`bash scripts/start-dockerd` as the fix when it does not answer. `podman.py` sets
Podman's on the same base.
"""

from __future__ import annotations

from rtax_tui.drivers.toolkit.container import DEFAULT_SOCKET, LABEL_KEY, ContainerDriver

__all__ = ["DEFAULT_SOCKET", "LABEL_KEY", "DockerDriver"]


class DockerDriver(ContainerDriver):
    name = "docker"
    # drivers.toolkit.delivery: its own copy, or a pull from a registry on loopback
    image_modes = ("cached", "pull")
    image_registry = True
