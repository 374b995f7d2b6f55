"""Whether the container engines the tests need are answering here."""

from __future__ import annotations

import os

from rtax_tui.drivers.docker import DEFAULT_SOCKET
from rtax_tui.drivers.podman import DEFAULT_SOCKET as PODMAN_SOCKET

SOCK_PATH = DEFAULT_SOCKET[len("unix://") :]
PODMAN_SOCK_PATH = PODMAN_SOCKET[len("unix://") :]


def _answers(url: str, what: str, start: str) -> str | None:
    """None when the engine answers on the unix socket `url`, else why not (and how to
    start it)."""
    path = url[len("unix://") :]
    if not os.path.exists(path):
        return f"{what} is not running (no {path}; start it with {start})"
    try:
        import docker

        c = docker.DockerClient(base_url=url, version="auto", timeout=5)
        c.ping()
        c.close()
    except Exception as exc:
        return f"{what} does not answer on {url}: {exc}"
    return None


def dockerd_answers() -> str | None:
    """None when dockerd answers on its socket, else why not (and how to start it)."""
    return _answers(DEFAULT_SOCKET, "dockerd", "bash scripts/start-dockerd")


def podman_answers() -> str | None:
    """None when Podman's API service answers on rtax's socket, else why not."""
    return _answers(PODMAN_SOCKET, "the podman API socket", "bash scripts/start-podman")
