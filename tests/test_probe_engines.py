"""`rtax probe` on docker and podman: their default boundary, measured (not assumed)."""

from __future__ import annotations

import os

import pytest

from rtax_tui.core.probe import ALL_CHECKS
from tests.engines import dockerd_answers
from tests.probetools import by_run, failures, probe

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

PODMAN_SOCKET = "unix:///run/rtax-podman/podman.sock"


def _podman_answers() -> str | None:
    path = PODMAN_SOCKET[len("unix://") :]
    if not os.path.exists(path):
        return f"the podman API socket is not running (no {path}; bash scripts/start-podman)"
    try:
        c = docker.DockerClient(base_url=PODMAN_SOCKET, version="auto", timeout=5)
        c.ping()
        c.close()
    except Exception as exc:
        return f"the podman API socket does not answer: {exc}"
    return None


def _labelled(engine_socket: str, label: str) -> list[str]:
    c = docker.DockerClient(base_url=engine_socket, version="auto", timeout=30)
    try:
        return [x.name for x in c.containers.list(all=True, filters={"label": f"rtax.run={label}"})]
    finally:
        c.close()


@pytest.mark.parametrize(
    ("driver", "why", "socket"),
    [
        ("docker", dockerd_answers(), "unix:///var/run/docker.sock"),
        ("podman", _podman_answers(), PODMAN_SOCKET),
    ],
)
def test_the_container_keeps_every_check_on_both_channels(driver, why, socket) -> None:
    """Root in the container with the engine's default capabilities, network none and the
    probe's limits: every escape is blocked and every guarantee holds, as promised."""
    if why is not None:
        pytest.skip(why)
    label = f"pyprb{os.getpid()}{driver}"
    doc = probe([driver], ["exec", "shell"], label=label)
    runs = by_run(doc, driver)
    assert set(runs) == {("local", "exec"), ("local", "shell")}
    for results in runs.values():
        assert set(results) == ALL_CHECKS
    assert failures(doc, driver) == []
    assert doc["drivers"][driver]["summary"]["broken_promises"] == []
    assert _labelled(socket, label) == []  # the probe's containers are gone
