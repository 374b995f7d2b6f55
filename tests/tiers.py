"""The test suite's tiers: which tests need a backend, which are slow, the rest fast.

`pytest -m fast -n auto` runs what needs no daemon, VM, runsc, sshd, SWE-ReX, browser or
image build and is cheap, on pytest-xdist's workers, one a core (README says how long it
takes here): a fast test is independent of the others (its ids the same in every worker,
its files its own) and reads no timing that a test beside it can disturb;
`pytest -m "not backend"` every test that needs no backend, slow ones included; `pytest`
everything (CI). The marks are
set at collection (tests/conftest.py). A new test is fast unless a rule below catches it:
a backend fixture among its fixtures, a backend named by a parameter or by a word of its
name, or its file or name listed here. In a run of fast tests only, a backend fixture
asked for at run time (`request.getfixturevalue`) fails the test, naming where to class
it, rather than starting a daemon.
"""

from __future__ import annotations

from typing import Any

# whole files whose every test needs a backend
BACKEND_FILES = frozenset(
    {
        "test_container_interrupt.py", "test_docker.py", "test_docker_options.py",
        "test_docker_workloads.py", "test_engine_faults.py", "test_engines.py",
        "test_fleet_bench.py", "test_gvisor.py", "test_libvirtd_faults.py", "test_podman.py",
        "test_pool_kill9.py", "test_probe_engines.py", "test_probe_ssh.py", "test_probe_vm.py",
        "test_ray_cluster.py",
        "test_slow_daemons.py", "test_ssh_host.py", "test_ssh_run.py", "test_ssh_stage.py",
        "test_swerex.py", "test_vm_kill.py", "test_vm_kvm_probe.py", "test_vm_libvirt.py",
        "test_vm_microvm.py", "test_vmagent.py",
    }
)  # fmt: skip
# fixtures that bring a backend up (tests/conftest.py's, and the tests' own)
BACKEND_FIXTURES = frozenset(
    {
        "dockerd", "podman_service", "libvirtd", "docker_engine", "podman_engine", "vm_guest",
        "podman_runsc_service",
        "image_tools",  # test_image_delivery: a Debian root as squashfs, nginx, rclone
        "lab", "ssh_doc",  # sshd (tests/sshhosts.py)
    }
)  # fmt: skip
# a backend named by a parameter's value (a driver, `swerex[local]`) or a test name's word
BACKEND_WORDS = frozenset(
    {
        "docker", "dockerd", "podman", "gvisor", "runsc", "libvirt", "libvirtd", "microvm",
        "kvm", "qemu", "swerex", "chromium",
    }
)  # fmt: skip
# tests that need a backend and say so nowhere the rules look
BACKEND_TESTS = frozenset(
    {
        # `rtax doctor` on local: microvm's check boots the KVM probe's guest where it is built
        "test_plugins.py::test_a_plugin_driver_shows_in_doctor_and_runs_in_a_profile",
        "test_doctor_words.py::test_doctor_says_details_in_words_and_json_keeps_the_raw_facts",
        "test_ui_workbench.py::test_drivers_per_host_come_from_doctor_live_and_a_bad_host_says_why",
        "test_ui_workbench.py::test_an_ssh_host_added_in_the_launcher_is_checked_at_once_and_runs",
        # `rtax reproduce lazy` makes the squashfs of the workload image, built first if
        # it is not (2.4 minutes of the fast tier on one worker in a fresh root)
        "test_reproduce.py::test_the_lazy_rows_are_the_image_delivery_of_the_recording",
    }
)
# no backend, but long (real runs, a cold mypy): `slow`, out of the fast tier
SLOW_FILES = frozenset(
    {
        "test_checks.py", "test_workloads_e2e.py", "test_capacity.py", "test_ui_tmux.py",
        # its tests count what any probe leaves on the host (files, loop devices, its
        # listener): a neighbour worker's probe counted as theirs in the fast tier
        "test_probe_cli.py",
    }
)  # fmt: skip
# ("engine_runs": real runs whose timings a test reads as steps; the fast tier's parallel
# workers beside them made a false step of 6%)
SLOW_FIXTURES = frozenset({"prepared", "local_probe", "local_doc", "plugin_path", "engine_runs"})
SLOW_TESTS = frozenset(
    {
        "test_replay.py::test_every_format_replays_on_local_and_stage",
        "test_stage.py::test_default_limits_stop_a_fork_bomb_of_5000_sleeps",
        "test_badinput.py::test_mutated_recordings_report_compare_project",
        "test_badinput.py::test_mutated_trajectories_inspect_and_prepare",
        "test_badinput.py::test_mutated_profiles_load_or_fail_in_one_line",
        # what any probe leaves on the host (global paths, its listener): a neighbour's
        # probe in the fast tier's parallel workers would count as this one's
        "test_probe_cli.py::test_ctrl_c_tears_down_and_leaves_nothing",
        # stress, not cheap (each 10-31 s of the fast tier in the rehearsals, on both cores):
        # 4 GiB and more allocated to meet the default memory limit; 900 children beside
        # two threads churning orphans; up to three probes of a broken double's race
        "test_stage.py::test_default_memory_limit_kills_a_hog",
        "test_subreaper.py::test_own_children_keep_their_exit_status_under_orphan_churn",
        "test_probe_integrity.py::test_the_old_frame_is_caught_forging_a_later_status",
    }
)


def _facts(item: Any) -> tuple[str, str, str, set[str], list[str]]:
    """What the rules read of a test item: its file's name, its function's name, the
    `file::name` key, its fixtures (with what they ask for in turn) and its parameters'
    string values."""
    file = item.path.name
    name = getattr(item, "originalname", item.name)
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    strings = [v for v in params if isinstance(v, str)]
    return file, name, f"{file}::{name}", set(getattr(item, "fixturenames", ())), strings


def tier(item: Any) -> str:
    """ "backend", "slow" or "fast" for a collected test item."""
    file, name, key, fixtures, params = _facts(item)
    values = {v.partition("[")[0] for v in params}
    if (
        file in BACKEND_FILES
        or key in BACKEND_TESTS
        or fixtures & BACKEND_FIXTURES
        or (values | set(name.split("_"))) & BACKEND_WORDS
    ):
        return "backend"
    if (
        item.get_closest_marker("slow") is not None
        or file in SLOW_FILES
        or key in SLOW_TESTS
        or fixtures & SLOW_FIXTURES
    ):
        return "slow"
    return "fast"


# -- the rest, on two workers ----------------------------------------------------------------
# `pytest -m "not fast and not alone" -n 2 --dist loadgroup` runs every other test in two
# xdist groups, one a worker, side by side: the VMs' (libvirtd, QEMU under TCG, the guest
# image) and the others' (dockerd, podman, runsc, sshd in its namespaces, Ray, the slow
# tests). A daemon or image belongs to one group's worker, which starts and stops it
# (tests/conftest.py fails a test of the other group that asks for it); then `pytest -m
# alone` runs, one after another, what must have the machine to itself.
VMS = "vms"
OTHERS = "others"
# fixtures that bring up what the VM group's worker owns, and the others' worker's
VM_FIXTURES = frozenset({"libvirtd", "vm_guest"})
OTHER_FIXTURES = frozenset(
    {
        "dockerd", "podman_service", "docker_engine", "podman_engine", "podman_runsc_service",
        "image_tools", "lab",
    }
)  # fmt: skip
# a VM named by a parameter's value or a word of the test's name
VM_WORDS = frozenset({"libvirt", "libvirtd", "microvm", "kvm", "qemu", "vm"})
VM_FILES = frozenset(
    {
        "test_libvirtd_faults.py", "test_probe_vm.py", "test_vm_kill.py", "test_vm_kvm_probe.py",
        "test_vm_libvirt.py", "test_vm_microvm.py", "test_vmagent.py",
    }
)  # fmt: skip
# `rtax doctor` boots the KVM probe's guest (BACKEND_TESTS above)
VM_TESTS = frozenset(k for k in BACKEND_TESTS if "doctor" in k)
# tests that must have the machine alone: they count what any probe, run or VM leaves on
# the host by global names (the probe's plants in /root, loop devices, its listener), or
# need both groups' daemons at once (a VM beside a registry; the probe of stage, local or
# over SSH, with dockerd, podman and libvirtd up, so that a step may try their sockets)
ALONE_FILES = frozenset({"test_probe_cli.py", "test_probe_ssh.py", "test_image_delivery.py"})
ALONE_FIXTURES = frozenset({"ssh_doc", "local_doc"})
ALONE_TESTS: frozenset[str] = frozenset()


def group(item: Any) -> str:
    """VMS, OTHERS or "alone" for a test of the rest (not fast)."""
    file, name, key, fixtures, params = _facts(item)
    if (
        file in ALONE_FILES
        or key in ALONE_TESTS
        or fixtures & ALONE_FIXTURES
        or (fixtures & VM_FIXTURES and fixtures & OTHER_FIXTURES)
    ):
        return "alone"
    values = {w for v in params for w in v.replace("[", "-").replace("]", "-").split("-")}
    if (
        file in VM_FILES
        or key in VM_TESTS
        or fixtures & VM_FIXTURES
        or (values | set(name.split("_"))) & VM_WORDS
    ):
        return VMS
    return OTHERS
