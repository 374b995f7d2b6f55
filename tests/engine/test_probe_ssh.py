"""`rtax probe` on an SSH host: everything it plants and watches is on that host, through
the host's API (the tests' sshd on loopback; the open `local` driver, so every check
that the host observes must come back breached)."""

from __future__ import annotations

import os

import pytest

from rtax_tui.model.checks import BREACHED, HELD
from tests.probetools import by_run, probe
from tests.sshhosts import SSHLab, missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def test_the_probe_plants_and_observes_on_the_ssh_host() -> None:
    from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url

    lab = SSHLab()
    try:
        h = lab.serve_loopback()
        target = parse_ssh_url(h.url, identity=lab.identity, known_hosts=lab.known_hosts)
        label = f"pysshprb{os.getpid()}"
        doc = probe(["local"], ["shell"], host=lambda: SSHHost(target), label=label)
        home = os.path.join(lab.dir, "home")
    finally:
        lab.close()
    runs = by_run(doc, "local")[(target.name, "shell")]
    # seen by the remote listener (a connection, a signal), or tokens planted over SSH
    for check in ("tmp_sentinel", "cache_sentinel", "probe_socket", "loopback_tcp",
                  "host_signal", "host_processes", "other_env", "fresh_env"):  # fmt: skip
        assert runs[check] == BREACHED, (check, doc["drivers"]["local"]["checks"][check])
    assert runs["workspace_persists"] == HELD
    evidence = doc["drivers"]["local"]["checks"]["cache_sentinel"]["evidence"]
    assert f"{home}/.cache/rtax/probe-" in evidence  # rtax's cache of the SSH user, there
    assert not [n for n in os.listdir("/tmp") if n.startswith("rtax-probe-")]
