"""`rtax probe` in the VM drivers' guests (TCG here, so one channel each: ~30 s a driver)."""

from __future__ import annotations

import os

import pytest

from rtax_tui.core.probe import ALL_CHECKS
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
    """Its own kernel, no network, no shared file system: every check blocked or held
    (kernel settings written inside reach only the guest's kernel), but `process_vm`,
    which the VM drivers do not promise: root in the guest may read its own processes."""
    if driver == "libvirt":
        request.getfixturevalue("libvirtd")  # conftest: libvirtd answering
    doc = probe([driver], [channel], options={driver: {"accel": "tcg"}}, label=LABEL)
    runs = by_run(doc, driver)
    assert set(runs[("local", channel)]) == ALL_CHECKS
    # result_integrity: the guest agent runs as the guest's root, as the workload does, so a
    # step can write its memory; the VM drivers say so (Driver.integrity) and do not promise it
    kept = (" process_vm: ", " result_integrity: ")
    assert [b for b in failures(doc, driver) if not any(k in b for k in kept)] == []
    assert doc["drivers"][driver]["summary"]["broken_promises"] == []
    evidence = doc["drivers"][driver]["checks"]["proc_sys"]["evidence"]
    assert "own kernel" in evidence  # measured as a guest, not assumed
