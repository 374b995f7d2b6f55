"""bench/fleet_bench.py's fleet: N sshd in network namespaces, and nothing left after.

The bench makes root-level things on this machine (namespaces, veths, a uid-0 login
alias, sshd processes); these tests check that its teardown removes all of them, after
a set-up that succeeded and after one that failed half-way. Root, iproute2, sshd and
nsenter only.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_bench", ROOT / "bench" / "fleet_bench.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fleet_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


fb = _load()
pytestmark = pytest.mark.skipif(bool(fb.missing()), reason=str(fb.missing()))


@pytest.fixture(autouse=True)
def _no_fleet_before() -> None:
    if fb.leftovers():
        pytest.skip(f"a fleet bench is running here: {fb.leftovers()}")


def test_two_hosts_answer_ssh_then_nothing_is_left() -> None:
    fleet = fb.Fleet(2)
    try:
        fleet.open()
        assert [h.address for h in fleet.hosts] == ["10.252.0.2", "10.252.0.6"]
        for h in fleet.hosts:  # each sshd speaks SSH on its namespace's address
            with socket.create_connection((h.address, 22), timeout=10) as s:
                assert s.recv(64).startswith(b"SSH-2.0-")
        # the host keys are the ones in the bench's known_hosts: a checked login works
        h = fleet.hosts[1]
        res = subprocess.run(
            ["ssh", "-i", fleet.identity, "-o", f"UserKnownHostsFile={fleet.known_hosts}",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
             f"{fleet.user}@{h.address}", "cat /proc/self/net/dev"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "eth0" in res.stdout and "rfl-" not in res.stdout  # in its own namespace
        left = fb.leftovers()
        assert {"netns rtax-fleet-0", "netns rtax-fleet-1", "veth rfl-0", "veth rfl-1"} <= set(left)
        assert sum(x.startswith("sshd pid") for x in left) >= 2
    finally:
        fleet.close()
    assert fb.leftovers() == []
    fleet.close()  # twice is harmless


def test_a_setup_failing_half_way_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = fb.Fleet(3)
    made = fleet._make_host

    def fail_third(k: int, conf: str) -> object:
        if k == 2:
            fleet.netns.append("rtax-fleet-2")  # as the real one notes it first
            raise RuntimeError("no room")
        return made(k, conf)

    monkeypatch.setattr(fleet, "_make_host", fail_third)
    with pytest.raises(RuntimeError, match="no room"):
        try:
            fleet.open()
        finally:
            fleet.close()
    assert fb.leftovers() == []
