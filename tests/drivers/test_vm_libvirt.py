"""The `libvirt` driver against the real libvirtd and QEMU (TCG here: few boots)."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
from rtax_tui.drivers.libvirt import LibvirtDriver

from rtax_tui.model.spec import EnvSpec, OptionError, PhaseFailure, Step, Workload
from tests.services import libvirtd_answers
from tests.vmtools import (
    BOTH_VMS_PROFILE,
    check_never_ready,
    check_t0_lifecycle,
    check_t1_run,
    cli_started,
    ensure_guest,
    nothing_left,
    qemu_pids,
    vm_driver,
    vm_spec,
)

LABEL = f"pylv{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(scope="module", autouse=True)
def guest(libvirtd, vm_guest):  # conftest: libvirtd answering, the guest built
    g = ensure_guest()
    yield g
    assert nothing_left(LABEL) == ([], [])
    assert domains(LABEL) == []


def domains(label: str, prefix: str | None = None) -> list[str]:
    out = subprocess.run(
        ["virsh", "-c", "qemu:///system", "list", "--all", "--name"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    return [n for n in out if n.startswith(prefix or f"rtax-{label}-")]


def spec(channel: str, workload: Workload | None = None, src: str | None = None) -> EnvSpec:
    return vm_spec("libvirt", LABEL, channel, workload, src)


def driver(**opts) -> LibvirtDriver:
    return vm_driver("libvirt", **opts)


@pytest.mark.parametrize("channel", ["shell", "exec"])
def test_t0_lifecycle_with_sub_phases_and_agent(channel):
    def created(env):
        assert domains(LABEL) == [env.name]
        assert len(qemu_pids(LABEL)) == 1  # libvirt names QEMU after the domain

    async def in_guest(env):
        r = await env.action(Step(("sh", "-c", "ls /sys/bus/pci/devices | wc -l")), 30)
        assert int(r.output) > 3  # q35: a PCI machine, unlike microvm

    asyncio.run(
        check_t0_lifecycle(
            driver(),
            spec(channel),
            create_s=120,
            sub_names=["disks", "define", "connect", "firmware_kernel", "agent"],
            created=created,
            in_guest=in_guest,
        )
    )
    assert domains(LABEL) == []


def test_options_are_checked():
    # the field by its key; the profile names the table and the line (test_profile)
    with pytest.raises(OptionError, match=r"^must be at least 1, got 0$") as bad:
        driver(vcpus=0)
    assert bad.value.key == "vcpus"
    with pytest.raises(OptionError, match=r"^unknown key \(allowed: accel, .*, uri\)$") as bad:
        driver(image="x")
    assert bad.value.key == "image"


def test_cleanup_destroys_a_run_s_domains():
    async def run():
        env = driver().environment(spec("exec"))
        await env.create()  # a paused domain, as a killed rtax would leave it
        assert domains(LABEL) == [env.name]
        assert await driver().cleanup("another-run") == 0
        assert domains(LABEL) == [env.name]
        assert await driver().cleanup(LABEL) == 1
        assert domains(LABEL) == []
        assert nothing_left(LABEL) == ([], [])
        with pytest.raises(PhaseFailure):  # what cleanup removed is gone for teardown too
            await env.action(Step(("true",)), 5)
        await env.teardown()

    asyncio.run(run())


def test_guest_that_never_says_hello_is_ready_timeout_and_leaves_nothing(tmp_path):
    run_id = check_never_ready("libvirt", "exec", tmp_path)
    assert domains(run_id) == []


def test_restore_path_starts_from_a_saved_domain(tmp_path):
    from tests.vmtools import check_restore_run

    events = check_restore_run("libvirt", tmp_path)
    names = {e["name"] for e in events if e["type"] == "phase"}
    assert "create.restore" in names and "create.define" not in names
    assert domains("", prefix="rtax-snap-") == []


def _libvirtd_pid() -> int | None:
    try:
        with open("/run/libvirtd.pid") as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def test_libvirtd_stopped_mid_run_is_substrate_lost_and_other_cells_go_on(tmp_path, libvirtd):
    import json
    import signal
    import time

    pid = _libvirtd_pid()
    assert pid is not None, "libvirtd was started without /run/libvirtd.pid"
    profile = BOTH_VMS_PROFILE.format(concurrency=1, ready=90)
    try:
        cli = cli_started(profile, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with cli as (proc, rec):
            deadline = time.monotonic() + 120
            started = False
            while time.monotonic() < deadline and not started:  # a libvirt trial under way
                time.sleep(0.2)
                if rec.exists():
                    for line in rec.read_text().splitlines():
                        e = json.loads(line)
                        if e["type"] == "phase" and e["name"] == "create.define":
                            started = True
            assert started, "no libvirt trial started"
            os.kill(pid, signal.SIGTERM)
            out, _ = proc.communicate(timeout=600)
    finally:
        libvirtd.restart(pid)  # the session's to stop at its end if the stopped one was
    events = [json.loads(line) for line in rec.read_text().splitlines()]
    ends = {e["trial"]: e for e in events if e["type"] == "trial_end"}
    starts = {e["trial"]: e for e in events if e["type"] == "trial_start"}
    lv = [ends[t] for t, s in starts.items() if s["driver"] == "libvirt"]
    mv = [ends[t] for t, s in starts.items() if s["driver"] == "microvm"]
    assert len(lv) == 2 and all(not e["ok"] for e in lv), lv
    assert all(e["error"]["kind"] == "substrate_lost" for e in lv), lv
    assert len(mv) == 2 and all(e["ok"] and e["valid"] for e in mv), out
    run_id = events[0]["run_id"]
    assert nothing_left(run_id) == ([], [])
    assert libvirtd_answers() is None
    assert domains(run_id) == []


def test_t1_on_the_root_disk_over_virtio_pci(tmp_path):
    events = check_t1_run("libvirt", ["exec"], tmp_path)
    assert domains(events[0]["run_id"]) == []
