"""`rtax probe` in the VM drivers' guests (TCG here, so one channel each: ~30 s a driver)."""

from __future__ import annotations

import os

import pytest
from rtax_tui.drivers import get_driver

from rtax_tui.hosts import LocalHost
from rtax_tui.model.checks import ALL_CHECKS
from tests.probetools import by_run, failures, probe
from tests.vmtools import ensure_guest, nothing_left

pytestmark = pytest.mark.slow
LABEL = f"pyvprb{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(scope="module", autouse=True)
def guest(vm_guest):  # conftest: the guest built
    g = ensure_guest(root=True)  # the probe's steps name python3: the Debian root disk
    yield g
    assert nothing_left(LABEL) == ([], [])


@pytest.mark.parametrize(("driver", "channel"), [("libvirt", "shell"), ("microvm", "exec")])
def test_the_guest_keeps_every_check(driver: str, channel: str, request) -> None:
    """Its own kernel, no network, no shared file system: every check the driver promises
    blocked or held (kernel settings written inside reach only the guest's kernel). Those
    it does not promise may be breached, honestly: `process_vm` (a step reads the guest's
    own processes: as root on shell, its own children as uid 1000 on exec), `deep_tree`,
    `default_limits` (a disk image with no host path, the guest kernel's own pid limit),
    and `result_integrity` on shell, where
    `Driver.integrity` says why a step could forge its result. On exec it is promised: the
    step is uid 1000, the agent that reports its status root (issue 19)."""
    if driver == "libvirt":
        request.getfixturevalue("libvirtd")  # conftest: libvirtd answering
    doc = probe([driver], [channel], options={driver: {"accel": "tcg"}}, label=LABEL)
    runs = by_run(doc, driver)
    assert set(runs[("local", channel)]) == ALL_CHECKS
    drv = get_driver(driver, LocalHost(), {"accel": "tcg"})
    unpromised = ALL_CHECKS - drv.promised_checks()
    if drv.integrity(channel) is not None:
        unpromised |= {"result_integrity"}
    assert (drv.integrity(channel) is None) == (channel == "exec")
    if channel == "exec":
        assert runs[("local", channel)]["result_integrity"] == "blocked"
    # the workspace is a disk image of workspace_mib: a write past it stops there
    assert "workspace_size" in drv.promised_checks()
    assert runs[("local", channel)]["workspace_size"] in ("blocked", "held")
    # a daemon's socket the host has no daemon for is n/a (nothing there to reach: it is
    # up or not as the other tests' daemons come and go); the probe's own socket on the
    # host (`probe_socket`, promised) measures the same way out whatever runs
    promised_bad = [
        b
        for b in failures(doc, driver)
        if b.split()[1][:-1] not in unpromised and "socket on the host" not in b
    ]
    assert runs[("local", channel)]["probe_socket"] in ("blocked", "held")
    assert promised_bad == []
    assert doc["drivers"][driver]["summary"]["broken_promises"] == []
    evidence = doc["drivers"][driver]["checks"]["proc_sys"]["evidence"]
    if channel == "shell":  # the guest's root writes it: measured as a guest, not assumed
        assert "own kernel" in evidence
    else:  # an exec step is uid 1000: the guest's kernel refuses it the write
        assert "the write was refused" in evidence
