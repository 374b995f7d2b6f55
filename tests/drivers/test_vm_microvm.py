"""The `microvm` driver on real QEMU guests (TCG here: few boots, generous timeouts)."""

from __future__ import annotations

import asyncio
import os
import re

import pytest
from rtax_tui.drivers.microvm import MicrovmDriver

from rtax_tui.model.spec import EnvSpec, OptionError, PhaseFailure, Step, Workload
from tests.vmtools import (
    check_never_ready,
    check_t0_lifecycle,
    check_t1_run,
    ensure_guest,
    nothing_left,
    qemu_pids,
    trial_dirs,
    vm_driver,
    vm_spec,
)

LABEL = f"pyvm{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(scope="module", autouse=True)
def guest(vm_guest):  # conftest: the guest built
    g = ensure_guest()
    yield g
    assert nothing_left(LABEL) == ([], [])


def spec(channel: str, workload: Workload | None = None, src: str | None = None) -> EnvSpec:
    return vm_spec("microvm", LABEL, channel, workload, src)


def driver(**opts) -> MicrovmDriver:
    return vm_driver("microvm", **opts)


@pytest.mark.parametrize("channel", ["shell", "exec"])
def test_t0_lifecycle_with_sub_phases_and_agent(channel):
    def created(env):
        assert len(qemu_pids(LABEL)) == 1

    async def in_guest(env):
        r = await env.action(Step(("cat", "/proc/cmdline")), 30)
        assert b"tsc_early_khz" in r.output  # it runs in the guest, not on the host
        r = await env.action(Step(("printf", "%s", "a 'quoted'\n word")), 30)
        assert r.output == b"a 'quoted'\n word"

    asyncio.run(
        check_t0_lifecycle(
            driver(),
            spec(channel),
            create_s=60,
            sub_names=["disks", "launch", "firmware_kernel", "agent"],
            created=created,
            in_guest=in_guest,
        )
    )


def test_action_timeout_leaves_env_broken_and_teardown_clean():
    async def run():
        env = driver().environment(spec("shell"))
        try:
            await env.create()
            await asyncio.wait_for(env.ready(), 120)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(env.action(Step(("sleep", "100")), 1), 1)
            with pytest.raises(PhaseFailure) as ei:
                await env.action(Step(("true",)), 5)
            assert ei.value.kind == "agent_lost"
        finally:
            await env.teardown()
        assert nothing_left(LABEL) == ([], [])

    asyncio.run(run())


def test_options_are_checked():
    with pytest.raises(OptionError, match=r"^'fast' \(allowed") as bad:
        driver(accel="fast")
    assert bad.value.key == "accel"
    for bad_key, value, says in (
        ("memory_mib", 12, "must be at least 128, got 12"),
        ("memory_mib", 65537, "at most 65536, got 65537"),
        ("bogus", 1, "unknown key (allowed: accel, vcpus, memory_mib, start, qemu, append)"),
        ("start", "warm", "'warm' (allowed"),
    ):
        with pytest.raises(OptionError, match=re.escape(says)) as bad:
            driver(**{bad_key: value})
        assert bad.value.key == bad_key


def test_cleanup_removes_a_run_s_qemu_and_files():
    async def run():
        d = driver()
        env = d.environment(spec("exec"))
        await env.create()  # QEMU paused, as a killed rtax would leave it
        assert len(qemu_pids(LABEL)) == 1 and len(trial_dirs(LABEL)) == 1
        assert await driver().cleanup("some-other-run") == 0
        assert len(qemu_pids(LABEL)) == 1
        assert await driver().cleanup(LABEL) == 1
        assert nothing_left(LABEL) == ([], [])
        await env.teardown()  # after cleanup: nothing to do, no error

    asyncio.run(run())


def test_guest_that_never_says_hello_is_ready_timeout_and_leaves_nothing(tmp_path):
    check_never_ready("microvm", "shell", tmp_path)


def test_t1_on_the_root_disk_is_valid_and_leaves_the_base_untouched(tmp_path):
    g = ensure_guest(root=True)
    before = os.stat(g.rootdisk).st_mtime_ns
    events = check_t1_run("microvm", ["shell", "exec"], tmp_path)
    subs = {e["name"] for e in events if e["type"] == "phase"}
    assert {"create.disks", "ready.firmware_kernel", "ready.agent"} <= subs
    assert os.stat(g.rootdisk).st_mtime_ns == before  # each trial wrote to its own overlay


def test_restore_path_starts_from_a_saved_guest(tmp_path):
    from tests.vmtools import check_restore_run

    events = check_restore_run("microvm", tmp_path)
    names = {e["name"] for e in events if e["type"] == "phase"}
    assert "create.load" in names


def test_t2_is_refused_before_any_trial():
    from rtax_tui.drivers.toolkit import assets

    from rtax_tui.engine.workloads import builtin_workloads

    t2 = builtin_workloads(assets.prepare())["t2"]
    probs = asyncio.run(driver().check_workloads([t2]))
    assert any("host paths" in p.reason for p in probs), probs
