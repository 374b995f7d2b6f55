"""Helpers of the container engines' tests (docker, podman): rtax's busybox image as each
driver names it, and what a daemon or the host still holds of one test module's runs."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from rtax_tui.drivers.docker import LABEL_KEY
from rtax_tui.drivers.podman import conmon_processes
from rtax_tui.drivers.toolkit import images

from rtax_tui.model.spec import Cell, EnvSpec, Limits, Workload


def busybox_image(engine: str) -> str:
    """rtax's busybox image on `engine` (built or found), named as its driver names it;
    the test is skipped where there is no static busybox to build it from."""
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    tag = images.build_busybox_image(engine)
    return "localhost/" + tag if engine == "podman" else tag


def env_spec(engine: str, label: str, channel: str, src: str | None = None) -> EnvSpec:
    """One environment's spec on `engine` for run `label`: 1 CPU, 256 MiB, 128 pids, the
    workspace filled from `src` if given."""
    return EnvSpec(
        cell=Cell("local", engine, "t", channel),
        workload=Workload("t", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        workspace_src=src,
        label=label,
    )


def containers_of(socket: str, labels: Collection[str] | None) -> list[str]:
    """Names of the containers on the daemon at `socket` whose rtax run label is one of
    `labels` (None: every rtax container, whichever run's)."""
    import docker

    c = docker.DockerClient(base_url=socket, version="auto", timeout=30)
    try:
        found = c.containers.list(all=True, filters={"label": LABEL_KEY})
        return [x.name for x in found if labels is None or x.labels.get(LABEL_KEY) in labels]
    finally:
        c.close()


def conmon_of(prefix: bytes) -> list[int]:
    """Live conmon processes whose command line holds `prefix` (a run's container names)."""
    out = []
    for pid in conmon_processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if prefix in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out
