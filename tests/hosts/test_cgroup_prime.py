"""cgroup_prime: which `cgroup.procs` is this process's own, and the no-op move itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtax_tui.hosts import cgroup_prime
from rtax_tui.hosts.cgroups import Cgroup


def _layout(tmp_path: Path, self_cgroup: str, dirs: list[str]) -> tuple[str, str]:
    root = tmp_path / "cg"
    for d in dirs:
        (root / d).mkdir(parents=True)
        (root / d / "cgroup.procs").write_text("")
    f = tmp_path / "self_cgroup"
    f.write_text(self_cgroup)
    return str(root), str(f)


V1 = "4:memory:/svc/a\n8:pids:/svc/b\n1:cpu,cpuacct:/\n0::/\n"


def test_v1_the_pids_hierarchy_first_at_this_process_s_own_path(tmp_path: Path) -> None:
    root, f = _layout(tmp_path, V1, ["memory/svc/a", "pids/svc/b", "cpu"])
    assert cgroup_prime.own_procs_file(root, f) == f"{root}/pids/svc/b/cgroup.procs"


def test_v1_without_pids_another_mounted_controller(tmp_path: Path) -> None:
    root, f = _layout(tmp_path, V1, ["memory/svc/a", "cpu"])
    assert cgroup_prime.own_procs_file(root, f) in (
        f"{root}/cpu/cgroup.procs",
        f"{root}/memory/svc/a/cgroup.procs",
    )
    # never a path of another hierarchy's line
    assert cgroup_prime.own_procs_file(root, f) != f"{root}/memory/svc/b/cgroup.procs"


def test_v2_the_unified_line(tmp_path: Path) -> None:
    root, f = _layout(tmp_path, "0::/user.slice/x\n", ["user.slice/x"])
    assert cgroup_prime.own_procs_file(root, f) == f"{root}/user.slice/x/cgroup.procs"


def test_none_where_nothing_is_mounted_or_readable(tmp_path: Path) -> None:
    root, f = _layout(tmp_path, V1, [])
    assert cgroup_prime.own_procs_file(root, f) is None
    assert cgroup_prime.own_procs_file(root, str(tmp_path / "missing")) is None


@pytest.mark.skipif(
    os.geteuid() != 0 or Cgroup.version() is None, reason="needs root and a cgroup filesystem"
)
def test_the_move_is_into_the_cgroup_it_is_already_in() -> None:
    with open("/proc/self/cgroup") as f:
        before = f.read()
    assert cgroup_prime.prime() is True
    with open("/proc/self/cgroup") as f:
        assert f.read() == before
