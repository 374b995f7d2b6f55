"""Whether the container engines the tests need are answering here."""

from __future__ import annotations

import os

from rtax_tui.drivers.docker import DEFAULT_SOCKET

SOCK_PATH = DEFAULT_SOCKET[len("unix://") :]


def dockerd_answers() -> str | None:
    """None when dockerd answers on its socket, else why not (and how to start it)."""
    if not os.path.exists(SOCK_PATH):
        return f"dockerd is not running (no {SOCK_PATH}; start it with bash scripts/start-dockerd)"
    try:
        import docker

        c = docker.DockerClient(base_url=DEFAULT_SOCKET, version="auto", timeout=5)
        c.ping()
        c.close()
    except Exception as exc:
        return f"dockerd does not answer on {DEFAULT_SOCKET}: {exc}"
    return None
