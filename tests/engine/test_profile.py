"""Profiles: the built-ins load; every mistake is one line naming file, line and key."""

from __future__ import annotations

import pytest

from rtax_tui.engine.profile import ProfileError, load_profile, profiles_dir


@pytest.mark.parametrize(
    "name", ["default", "t0", "t1", "t2", "trajectory", "capacity", "capacity-pvisor"]
)
def test_builtin_profiles_load(name):
    prof = load_profile(profiles_dir() / f"{name}.toml")
    assert prof.name == name and prof.trials >= 1 and prof.drivers


def test_default_profile_is_t0_t1_on_local_and_stage_30_trials():
    prof = load_profile(profiles_dir() / "default.toml")
    assert set(prof.workloads) == {"t0", "t1"} and set(prof.drivers) == {"local", "stage"}
    assert prof.trials == 30 and prof.warmup >= 1


def err(tmp_path, text: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_unknown_key_names_line_and_allowed(tmp_path):
    msg = err(tmp_path, "[run]\ntrials = 3\n\n[timeouts]\ncreate = 1\nreddy = 2\n")
    assert msg.startswith(f"{tmp_path}/p.toml:6: timeouts.reddy: unknown key (allowed: create")


def test_unknown_driver_and_workload(tmp_path):
    msg = err(tmp_path, '[run]\ndrivers = ["local", "dockr"]\n')
    # every registered driver, sorted (plugins included: no list of them here)
    from rtax_tui.drivers import names

    allowed = ", ".join(sorted(names()))
    assert f"p.toml:2: drivers: unknown 'dockr' (allowed: {allowed})" in msg
    msg = err(tmp_path, '[run]\nseed = 1\nworkloads = ["t9"]\n')
    assert "p.toml:3: workloads: unknown 't9' (allowed: t0, t1, t2" in msg


def test_wrong_type(tmp_path):
    msg = err(tmp_path, '[run]\ntrials = "many"\n')
    assert msg.endswith("p.toml:2: run.trials: expected integer, got 'many'")
    msg = err(tmp_path, "[limits]\ncpus = true\n")
    assert 'p.toml:2: limits.cpus: expected a positive number or "unlimited", got True' in msg


def test_unknown_table_and_bad_toml(tmp_path):
    assert "p.toml:1: [rum]: unknown table" in err(tmp_path, "[rum]\nx = 1\n")
    assert "p.toml: not valid TOML" in err(tmp_path, "[run\n")


def test_custom_workload(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[run]\nworkloads = ["mine"]\ndrivers = ["local"]\n'
        '[workloads.mine]\nsteps = [{argv = ["echo", "hi"], expect_out = "hi"}]\n'
    )
    prof = load_profile(path)
    assert prof.custom_workloads["mine"].steps[0].argv == ("echo", "hi")
    msg = err(tmp_path, '[workloads.mine]\nsteps = [{argv = ["x"], expect = 1}]\n')
    assert "p.toml:2: workloads.mine.steps[0].expect: unknown key" in msg


def test_capacity_curve_sizes_and_touch_mib(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[capacity]\nsize = 8\nsizes = [16, 32]\ntouch_mib = 16\n")
    cap = load_profile(p).capacity
    assert cap is not None and cap.sizes == (16, 32) and cap.curve == (16, 32)
    assert cap.touch_mib == 16
    p.write_text("[capacity]\nsize = 8\n")
    cap = load_profile(p).capacity
    assert cap is not None and cap.curve == (8,) and cap.touch_mib == 32  # `size` still works
    assert load_profile(p).with_sizes((2, 4)).capacity.curve == (2, 4)  # --sizes
    assert "p.toml:2: capacity.sizes: expected integer" in err(
        tmp_path, '[capacity]\nsizes = [16, "x"]\n'
    )
    assert "capacity.sizes: each must be at least 1" in err(tmp_path, "[capacity]\nsizes = [0]\n")
    assert "capacity.touch_mib: must be at least 1" in err(tmp_path, "[capacity]\ntouch_mib = 0\n")
    p.write_text("[run]\nseed = 1\n")
    with pytest.raises(ProfileError, match="--sizes: the profile has no \\[capacity\\] table"):
        load_profile(p).with_sizes((2,))


def test_capacity_release_concurrency(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[capacity]\nsize = 8\nrelease_concurrency = 4\n")
    cap = load_profile(p).capacity
    assert cap is not None and cap.release_concurrency == 4
    p.write_text("[capacity]\nsize = 8\n")
    cap = load_profile(p).capacity
    assert cap is not None and cap.release_concurrency == 256  # the default
    assert "capacity.release_concurrency: must be at least 1" in err(
        tmp_path, "[capacity]\nrelease_concurrency = 0\n"
    )


def test_the_pvisor_capacity_profile_is_pvisors_budget():
    prof = load_profile(profiles_dir() / "capacity-pvisor.toml")
    cap = prof.capacity
    assert cap is not None
    assert (cap.cpus, cap.memory_mib, cap.swap_mib, cap.touch_mib, cap.batches) == (
        2.0,
        2048,
        0,
        32,
        5,
    )
    assert prof.drivers == ("stage", "docker", "podman", "libvirt", "microvm")
    # per environment: pVisor's guests' size (a VM's limits are its vCPUs and RAM), not
    # the default limits' 4096 MiB
    assert (prof.limits.cpus, prof.limits.memory_mib) == (1.0, 256)


# -- [limits]: given by default, lifted only by "unlimited" --------------------------


def test_limits_by_default_without_a_limits_table(tmp_path):
    from rtax_tui.model.spec import (
        DEFAULT_CPUS,
        DEFAULT_MEMORY_MIB,
        DEFAULT_PIDS,
        DEFAULT_WORKSPACE_MIB,
    )

    path = tmp_path / "p.toml"
    path.write_text('[run]\ntrials = 1\ndrivers = ["stage"]\n')
    lim = load_profile(path).limits
    assert (lim.cpus, lim.memory_mib, lim.pids, lim.workspace_mib) == (
        DEFAULT_CPUS,
        DEFAULT_MEMORY_MIB,
        DEFAULT_PIDS,
        DEFAULT_WORKSPACE_MIB,
    )
    assert None not in (DEFAULT_CPUS, DEFAULT_MEMORY_MIB, DEFAULT_PIDS, DEFAULT_WORKSPACE_MIB)
    assert lim.unlimited() == []
    # a table that sets one key keeps the defaults of the others
    path.write_text("[limits]\nmemory_mib = 512\n")
    lim = load_profile(path).limits
    assert (lim.memory_mib, lim.pids, lim.workspace_mib) == (512, DEFAULT_PIDS, 2048)


def test_unlimited_is_explicit_and_round_trips(tmp_path):
    from rtax_tui.engine.profile_toml import dump, from_resolved

    path = tmp_path / "p.toml"
    path.write_text('[limits]\npids = "unlimited"\nworkspace_mib = "unlimited"\ncpus = 2\n')
    prof = load_profile(path)
    assert prof.limits.pids is None and prof.limits.workspace_mib is None
    assert prof.limits.cpus == 2.0 and prof.limits.unlimited() == ["pids", "workspace_mib"]
    resolved = prof.to_dict()["limits"]
    assert resolved == {
        "cpus": 2.0,
        "memory_mib": 4096,
        "pids": "unlimited",
        "workspace_mib": "unlimited",
    }
    # the profile written back from a recording's header lifts the same limits
    again = tmp_path / "again.toml"
    again.write_text(dump(from_resolved(prof.to_dict())))
    assert load_profile(again).limits == prof.limits


@pytest.mark.parametrize(
    "line, needle",
    [
        ("pids = -1", 'limits.pids: must be at least 1 (no limit is "unlimited"), got -1'),
        ("pids = 0", "limits.pids: must be at least 1"),
        ("memory_mib = 0", "limits.memory_mib: must be at least 1"),
        ('memory_mib = "lots"', "limits.memory_mib: expected a positive integer or"),
        ('pids = "Unlimited"', "limits.pids: expected a positive integer or"),
        ("pids = 10.5", "limits.pids: expected a positive integer or"),
        ("memory_mib = 1024.0", "limits.memory_mib: expected a positive integer"),
        ("workspace_mib = 1e3", "limits.workspace_mib: expected a positive integer"),
        ("pids = true", "limits.pids: expected a positive integer"),
        ("cpus = 0", "limits.cpus: must be at least 0.01"),
        ("cpus = nan", "limits.cpus: expected a positive number"),
        ("cpus = inf", "limits.cpus: at most"),
        ("pids = 9223372036854775808", "limits.pids: at most 9223372036854775807"),
        ("memory_mib = 9223372036854775807", "limits.memory_mib: at most 8796093022207"),
        ("workspace_mib = 99999999999999999999", "limits.workspace_mib: at most"),
        ("stack_mib = 8", "limits.stack_mib: unknown key"),
    ],
)
def test_bad_limits_are_one_line_naming_key_and_line(tmp_path, line, needle):
    msg = err(tmp_path, f"[run]\ntrials = 1\n\n[limits]\n# the bad line is the sixth\n{line}\n")
    assert f"p.toml:6: {needle}" in msg, msg


def test_a_vms_size_under_limits():
    from rtax_tui.model.spec import DEFAULT_MEMORY_MIB as MIB
    from rtax_tui.model.spec import vm_size

    assert vm_size(None, MIB, 512) == 512  # unlimited: the driver's option
    assert vm_size(MIB, MIB, 512) == 512  # the default limit: the option, up to it
    assert vm_size(MIB, MIB, 8192) == MIB
    assert vm_size(1024, MIB, 512) == 1024  # a profile's own limit: the guest's size
    assert vm_size(2.5, 1.0, 1) == 2 and vm_size(0.5, 1.0, 4) == 1  # whole vCPUs


def test_cold_and_pooled_modes_round_trip_through_a_written_profile(tmp_path):
    """A run of cold and pooled cells, written back from its header, reloads as the
    same run (it reloaded pool-only when `modes` was not written)."""
    from rtax_tui.engine.profile_toml import dump, from_resolved

    path = tmp_path / "p.toml"
    path.write_text('[run]\nmodes = ["cold", "pool"]\n[pool]\nsize = 2\n')
    prof = load_profile(path)
    assert prof.run_modes == ("cold", "pool")
    again = tmp_path / "again.toml"
    again.write_text(dump(from_resolved(prof.to_dict())))
    assert load_profile(again).run_modes == ("cold", "pool")
    # pool-only stays as it was written: `[pool]` alone
    path.write_text("[pool]\nsize = 2\n")
    prof = load_profile(path)
    text = dump(from_resolved(prof.to_dict()))
    assert "modes" not in text and prof.run_modes == ("pool",)


def test_a_driver_instance_is_a_driver_of_its_own_name(tmp_path):
    """`[drivers_options.NAME]` with `driver = "BASE"` makes NAME an instance of BASE
    with its own options: two configurations of one driver side by side in one run."""
    from rtax_tui.drivers import get_driver
    from rtax_tui.drivers.docker import DockerDriver

    from rtax_tui.hosts.local import LocalHost

    path = tmp_path / "p.toml"
    path.write_text(
        '[run]\ndrivers = ["docker", "docker-runsc"]\n'
        '[drivers_options.docker-runsc]\ndriver = "docker"\nruntime = "runsc"\n'
    )
    prof = load_profile(path)
    assert prof.drivers == ("docker", "docker-runsc")
    opts = prof.driver_options["docker-runsc"]
    d = get_driver("docker-runsc", LocalHost(), opts)
    assert isinstance(d, DockerDriver) and d.name == "docker-runsc"
    assert d.opts.runtime == "runsc"
    plain = get_driver("docker", LocalHost(), prof.driver_options.get("docker", {}))
    assert plain.name == "docker" and plain.opts.runtime is None


def test_a_driver_instance_mistake_names_its_line(tmp_path):
    head = '[run]\ndrivers = ["x"]\n[drivers_options.x]\n'
    msg = err(tmp_path, head + 'driver = "dockr"\n')
    assert msg.startswith(f"{tmp_path}/p.toml:4: ") and "unknown driver 'dockr'" in msg
    # the base driver checks the instance's options, as its own
    msg = err(tmp_path, head + 'driver = "docker"\nruntime = "a b"\n')
    assert msg.startswith(f"{tmp_path}/p.toml:5: ") and "runtime" in msg
    # a registered driver's name cannot be an instance of another
    msg = err(tmp_path, '[drivers_options.stage]\ndriver = "local"\n')
    assert "stage is a registered driver" in msg
    # a name in [run] drivers that is neither registered nor an instance
    msg = err(tmp_path, '[run]\ndrivers = ["y"]\n[drivers_options.x]\ndriver = "local"\n')
    assert "drivers: unknown 'y'" in msg and ", x)" in msg


def test_a_driver_instance_runs_as_its_own_cells(tmp_path):
    """Through the engine: the instance's cells and facts carry its name."""
    import subprocess
    import sys

    from rtax_tui.model.recording import read_recording

    path = tmp_path / "p.toml"
    path.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local", "local-2"]\nworkloads = ["t0"]\n'
        'channels = ["exec"]\n[drivers_options.local-2]\ndriver = "local"\n'
    )
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(path), "--headless", "-o", str(out)],
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode()
    rec = read_recording(out)
    drivers = {e["driver"] for e in rec.events if e["type"] == "trial_start"}
    assert drivers == {"local", "local-2"}
    assert set(rec.header["hosts"]["local"]["drivers"]) == {"local", "local-2"}
