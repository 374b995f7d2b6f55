"""cgroups: the v2 file protocol on a fake root, and the real kernel (v1 here) as root."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from rtax_tui.hosts import cgroups
from rtax_tui.hosts.cgroups import Cgroup, CgroupError
from rtax_tui.hosts.local import LocalHost, join_cgroups_before_exec
from tests.procs import dead

REAL = os.geteuid() == 0 and Cgroup.version() is not None
real = pytest.mark.skipif(not REAL, reason="needs root and a cgroup filesystem")
TAG = f"pytest-cg-{os.getpid()}-{os.urandom(3).hex()}"


def _ours() -> list[str]:
    """Directories this module made that are still there."""
    out = []
    bases = ["/sys/fs/cgroup"] + [e.path for e in os.scandir("/sys/fs/cgroup") if e.is_dir()]
    for base in bases:
        top = os.path.join(base, "rtax")
        if os.path.isdir(top):
            out += [os.path.join(top, n) for n in os.listdir(top) if n.startswith(TAG)]
    return out


@pytest.fixture(autouse=True, scope="module")
def _nothing_left():
    yield
    if REAL:
        left = _ours()
        cgroups.cleanup(f"rtax/{TAG}")
        assert left == []


# -- fake roots --------------------------------------------------------------


def _fake_v2(tmp_path, controllers="cpuset cpu io memory hugetlb pids"):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_version_detection(tmp_path):
    assert Cgroup.version(str(_fake_v2(tmp_path))) == "v2"
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert Cgroup.version(str(v1)) == "v1"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Cgroup.version(str(empty)) is None
    with pytest.raises(CgroupError):
        Cgroup("rtax/x", root=str(empty))


def test_v2_protocol_on_fake_root(tmp_path):
    root = _fake_v2(tmp_path)
    cg = Cgroup.create("env-a", cpus=0.5, memory_mib=64, swap_mib=16, pids=32, root=str(root))
    assert cg.ver == "v2"
    assert cg.relpath == "rtax/env-a"
    d = root / "rtax" / "env-a"
    assert d.is_dir()
    # Controllers enabled top-down in every ancestor, not in the leaf.
    for anc in (root, root / "rtax"):
        enabled = (anc / "cgroup.subtree_control").read_text().split()
        assert enabled == ["+cpu", "+memory", "+pids"]
    assert not (d / "cgroup.subtree_control").exists()
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert (d / "memory.max").read_text() == str(64 << 20)
    assert (d / "memory.swap.max").read_text() == str(16 << 20)
    assert (d / "pids.max").read_text() == "32"
    assert cg.applied == {
        "cpu.max": "50000 100000",
        "memory.max": str(64 << 20),
        "memory.swap.max": str(16 << 20),
        "pids.max": "32",
    }
    assert cg.skipped == {}
    # The kernel would make these; imitate it.
    (d / "cgroup.procs").write_text("")
    (d / "cgroup.kill").write_text("")
    (d / "memory.peak").write_text("12345\n")
    assert cg.procs_files() == [str(d / "cgroup.procs")]
    assert cg.pids() == set()
    assert cg.kill_all(timeout=0.1) is True
    assert (d / "cgroup.kill").read_text() == "1"
    assert cg.memory_peak_bytes() == 12345
    again = Cgroup.at("rtax/env-a", root=str(root))
    assert again.dirs() == [str(d)]
    with pytest.raises(FileNotFoundError):
        Cgroup.at("rtax/nope", root=str(root))
    with pytest.raises(FileExistsError):
        Cgroup.create("env-a", cpus=None, memory_mib=None, pids=None, root=str(root))


def test_v2_nested_parent_and_missing_controller(tmp_path):
    root = _fake_v2(tmp_path, controllers="cpu memory")
    (root / "cgroup.subtree_control").write_text("+cpu\n")
    cg = Cgroup.create(
        "env-b", cpus=2, memory_mib=None, pids=10, parent="rtax/batch-1", root=str(root)
    )
    assert cg.relpath == "rtax/batch-1/env-b"
    # Only what is missing is enabled; pids is not available at all.
    assert (root / "cgroup.subtree_control").read_text() == "+memory"
    assert (root / "rtax" / "batch-1" / "cgroup.subtree_control").exists()
    d = root / "rtax" / "batch-1" / "env-b"
    assert (d / "cpu.max").read_text() == "200000 100000"
    assert not (d / "memory.max").exists()
    assert "pids" in cg.skipped
    with pytest.raises(ValueError):
        Cgroup.create("a/b", cpus=None, memory_mib=None, pids=None, root=str(root))
    with pytest.raises(ValueError):
        Cgroup.create("x", cpus=None, memory_mib=None, pids=None, parent="../up", root=str(root))


# -- the real kernel ---------------------------------------------------------


def _read(d: str, f: str) -> str:
    with open(os.path.join(d, f)) as fh:
        return fh.read().strip()


@real
def test_create_limits_join_kill_remove():
    cg = Cgroup.create(f"{TAG}-a", cpus=0.5, memory_mib=64, pids=50)
    try:
        assert cg.exists()
        if cg.ver == "v1":
            cpu = cg._dir("cpu")
            mem = cg._dir("memory")
            pids = cg._dir("pids")
            assert cpu and mem and pids
            assert _read(cpu, "cpu.cfs_period_us") == "100000"
            assert _read(cpu, "cpu.cfs_quota_us") == "50000"
            assert _read(mem, "memory.limit_in_bytes") == str(64 << 20)
            if os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes")):
                assert _read(mem, "memory.memsw.limit_in_bytes") == str(64 << 20)
                assert "swap" not in cg.skipped
            else:
                assert "swap" in cg.skipped
            assert _read(pids, "pids.max") == "50"
            assert len(cg.procs_files()) >= 3
        else:
            d = cg.dirs()[0]
            assert _read(d, "cpu.max") == "50000 100000"
            assert _read(d, "memory.max") == str(64 << 20)
            assert _read(d, "pids.max") == "50"

        async def run() -> None:
            host = LocalHost()
            proc = await host.spawn(
                ["sh", "-c", "sleep 60 & sleep 60 & wait"], cgroup_procs=cg.procs_files()
            )
            deadline = time.monotonic() + 5
            while len(cg.pids()) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            inside = cg.pids()
            assert proc.pid in inside and len(inside) == 3
            with open(f"/proc/{proc.pid}/cgroup") as f:
                lines = f.read()
            assert f"/{cg.relpath}\n" in lines
            assert cg.kill_all(timeout=5)
            assert await asyncio.wait_for(proc.wait(), 5) == -9
            assert cg.pids() == set()

        asyncio.run(run())
        assert cg.memory_peak_bytes() is not None
        assert Cgroup.at(cg.relpath).relpath == cg.relpath
    finally:
        cg.remove()
    assert not cg.exists()
    cg.remove()  # already gone is fine


@real
def test_memory_limit_is_enforced():
    cg = Cgroup.create(f"{TAG}-mem", cpus=None, memory_mib=64, pids=None)
    try:
        host = LocalHost()
        code = "import sys; b = b'x' * (int(sys.argv[1]) << 20); print(len(b) >> 20)"

        async def run(mib: int):
            return await host.run(
                [sys.executable, "-c", code, str(mib)], timeout=60, cgroup_procs=cg.procs_files()
            )

        small = asyncio.run(run(16))
        assert small.returncode == 0 and small.stdout.strip() == b"16"
        big = asyncio.run(run(256))
        assert big.returncode == -9  # the OOM killer's SIGKILL
        peak = cg.memory_peak_bytes()
        assert peak is not None and peak <= (64 << 20) + (1 << 20)
    finally:
        cg.remove()


@real
def test_pids_limit_is_enforced():
    cg = Cgroup.create(f"{TAG}-pids", cpus=None, memory_mib=None, pids=4)
    try:
        res = asyncio.run(
            LocalHost().run(
                ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 5 & done; wait"],
                timeout=30,
                merge_stderr=True,
                cgroup_procs=cg.procs_files(),
            )
        )
        assert res.returncode != 0 or b"fork" in res.stdout.lower()
    finally:
        cg.remove()


@real
def test_remove_kills_escaped_sessions_and_nested_children():
    parent = Cgroup.create(f"{TAG}-batch", cpus=1, memory_mib=128, pids=64)
    child = Cgroup.create("env-1", cpus=None, memory_mib=None, pids=None, parent=parent.relpath)
    assert child.relpath == f"rtax/{TAG}-batch/env-1"
    # A daemon that double-forks into its own session: only the cgroup still holds it.
    subprocess.run(
        ["sh", "-c", "setsid sh -c 'sleep 60 & sleep 60' >/dev/null 2>&1 &"],
        preexec_fn=join_cgroups_before_exec(child.procs_files()),
        check=True,
    )
    deadline = time.monotonic() + 5
    while len(parent.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    victims = parent.pids()
    assert len(victims) >= 2
    parent.remove()
    assert not parent.exists() and not child.exists()
    for pid in victims:
        assert dead(pid)


@real
def test_cleanup_removes_leftovers():
    a = Cgroup.create(f"{TAG}-left-1", cpus=None, memory_mib=32, pids=None)
    b = Cgroup.create(f"{TAG}-left-2", cpus=None, memory_mib=None, pids=8)
    Cgroup.create("inner", cpus=None, memory_mib=None, pids=None, parent=b.relpath)
    proc = subprocess.Popen(
        ["sleep", "60"],
        preexec_fn=join_cgroups_before_exec(a.procs_files()),
    )
    try:
        assert cgroups.cleanup(f"rtax/{TAG}-left-") == 2
        assert proc.wait(timeout=5) == -9
        assert not a.exists() and not b.exists()
        assert cgroups.cleanup(f"rtax/{TAG}-left-") == 0
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(ValueError):
        cgroups.cleanup("/")


def _unmanaged_hierarchies() -> list[str]:
    """The mounted v1 hierarchies rtax makes no cgroup in (blkio, freezer, systemd...)."""
    managed = {os.path.realpath(f"/sys/fs/cgroup/{c}") for c in cgroups.V1_CONTROLLERS}
    return [
        e.path
        for e in os.scandir("/sys/fs/cgroup")
        if os.path.exists(os.path.join(e.path, "cgroup.procs"))
        and os.path.realpath(e.path) not in managed
    ]


@real
@pytest.mark.skipif(Cgroup.version() != "v1", reason="v1 only: v2 has one hierarchy")
def test_removal_reaches_hierarchies_an_engine_nested_in():
    """A container engine given a budget cgroup as `--cgroup-parent` (docker, runsc on
    v1) makes `<parent>/<container>` in every hierarchy it knows, and removes only its
    child: the parent's path stays in blkio, devices, freezer, systemd... Removing the
    budget and the cleanup sweep must leave none of it, with a process still inside."""
    others = _unmanaged_hierarchies()
    if not others:
        pytest.skip("no hierarchy beyond the ones rtax makes cgroups in")
    parent = Cgroup.create(f"{TAG}-nest", cpus=1, memory_mib=None, pids=None)
    made = [os.path.join(h, parent.relpath, "ctr") for h in others]
    for d in made:
        os.makedirs(d)
    # what the engine's container left: a process in one of those hierarchies only
    holder = (
        next(h for h in others if os.path.basename(h) == "freezer")
        if any(os.path.basename(h) == "freezer" for h in others)
        else others[0]
    )
    proc = subprocess.Popen(
        ["sleep", "60"],
        preexec_fn=join_cgroups_before_exec(
            [os.path.join(holder, parent.relpath, "ctr", "cgroup.procs")]
        ),
    )
    try:
        parent.remove()
        assert proc.wait(timeout=5) == -9
        assert [d for d in made if os.path.exists(os.path.dirname(d))] == []
        # the sweep: a leftover only in hierarchies rtax makes nothing in
        left = [os.path.join(h, f"rtax/{TAG}-nest2/ctr") for h in others]
        for d in left:
            os.makedirs(d)
        assert not Cgroup(f"rtax/{TAG}-nest2").exists()
        assert cgroups.cleanup(f"rtax/{TAG}-nest") == 1
        assert [d for d in left if os.path.exists(os.path.dirname(d))] == []
    finally:
        proc.kill()
        proc.wait()


UNIFIED = "/sys/fs/cgroup/unified"


@pytest.mark.skipif(
    not (REAL and os.path.exists(os.path.join(UNIFIED, "cgroup.controllers"))),
    reason="needs root and a cgroup2 mount at /sys/fs/cgroup/unified",
)
def test_v2_protocol_on_the_real_unified_mount():
    """The hybrid layout's v2 mount has no controllers, but join/kill/remove are real."""
    cg = Cgroup.create(
        f"{TAG}-v2", cpus=1, memory_mib=64, pids=10, parent=f"rtax/{TAG}-v2p", root=UNIFIED
    )
    top = Cgroup(f"rtax/{TAG}-v2p", root=UNIFIED)
    try:
        assert cg.ver == "v2"
        available = set(open(os.path.join(UNIFIED, "cgroup.controllers")).read().split())
        for c in ("cpu", "memory", "pids"):
            assert (c in cg.skipped) == (c not in available)
        assert cg.procs_files() == [os.path.join(UNIFIED, cg.relpath, "cgroup.procs")]
        proc = subprocess.Popen(
            ["sh", "-c", "sleep 60 & sleep 60"],
            preexec_fn=join_cgroups_before_exec(cg.procs_files()),
        )
        deadline = time.monotonic() + 5
        while len(cg.pids()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.pid in cg.pids() and proc.pid in top.pids()
        assert cg.kill_all(timeout=5)
        assert proc.wait(timeout=5) == -9
    finally:
        top.remove()
        try:
            os.rmdir(os.path.join(UNIFIED, "rtax"))  # nobody else uses this hierarchy
        except OSError:
            pass
    assert not cg.exists() and not top.exists()


def test_a_cgroup_directory_is_made_new_or_not_at_all(tmp_path):
    """`_mkdir_p` tries the last directory first (its parent nearly always exists): a
    missing parent is still made, and a directory that exists is never taken over."""
    leaf = tmp_path / "rtax" / "env-a"
    cgroups._mkdir_p(str(leaf))  # the parent was missing: made, then the leaf
    assert leaf.is_dir()
    with pytest.raises(FileExistsError):
        cgroups._mkdir_p(str(leaf))
    cgroups._mkdir_p(str(tmp_path / "rtax" / "env-b"))
    assert sorted(p.name for p in (tmp_path / "rtax").iterdir()) == ["env-a", "env-b"]


def test_a_control_file_holds_exactly_the_value_written(tmp_path):
    f = tmp_path / "pids.max"
    cgroups._write(str(f), "100000")  # made where a test imitates the tree
    cgroups._write(str(f), "50")
    assert f.read_text() == "50"  # truncated, as open("w") did


@real
def test_a_made_cgroup_names_every_procs_file_without_looking():
    cg = Cgroup.create(f"{TAG}-made", cpus=0.5, memory_mib=64, pids=50)
    try:
        assert cg.procs_files(made=True) == cg.procs_files()
        assert all(os.path.exists(p) for p in cg.procs_files(made=True))
        # a second environment never gets it, even while the first is being removed
        with pytest.raises(FileExistsError):
            Cgroup.create(f"{TAG}-made", cpus=0.5, memory_mib=64, pids=50)
        assert cg.exists()
    finally:
        cg.remove()
    assert not cg.left_anywhere()


@real
@pytest.mark.skipif(Cgroup.version() != "v1", reason="v1: a directory per hierarchy")
def test_a_leftover_in_one_hierarchy_blocks_the_name_and_survives():
    """A directory of the name left in one hierarchy (another run's, a crash's) makes
    create fail before it makes anything, and is not removed by that failure."""
    rel = cgroups.Cgroup.relpath_of(f"{TAG}-left")
    pids_dir = os.path.join(cgroups.DEFAULT_ROOT, "pids", rel)
    cgroups._mkdir_p(pids_dir)
    try:
        with pytest.raises(FileExistsError):
            Cgroup.create(f"{TAG}-left", cpus=0.5, memory_mib=64, pids=50)
        assert os.path.isdir(pids_dir)
        mem_dir = os.path.join(cgroups.DEFAULT_ROOT, "memory", rel)
        assert not os.path.exists(mem_dir)
    finally:
        os.rmdir(pids_dir)


def test_the_remote_script_makes_each_v1_hierarchy_once_in_one_mkdir(tmp_path):
    """CREATE_SH (SSH hosts) on an imitation of a v1 tree where `cpu` is a link to the
    co-mounted `cpu,cpuacct` and `pids` a second name of `memory`: each hierarchy gets the
    directory once, with its limits, and only hierarchies that are there are named."""
    from rtax_tui.hosts import cgroup_sh

    root = tmp_path / "cg"
    (root / "cpu,cpuacct").mkdir(parents=True)
    (root / "cpu").symlink_to("cpu,cpuacct")
    (root / "memory").mkdir()
    (root / "pids").symlink_to("memory")
    for d in ("cpu,cpuacct", "memory"):
        (root / d / "cgroup.procs").write_text("")
    (root / "memory" / "memory.limit_in_bytes").write_text("")
    script = cgroup_sh.CREATE_SH.replace("R=/sys/fs/cgroup", f"R={root}")
    assert script != cgroup_sh.CREATE_SH
    args = cgroup_sh.limit_args(0.5, 64, 50)
    for sh in (["dash"], ["busybox", "sh"]):
        rel = f"rtax/env-{sh[0]}"
        res = subprocess.run(
            [*sh, "-c", script, "rtax-cg", rel, *args], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == [
            f"{root}/cpu/{rel}/cgroup.procs",
            f"{root}/memory/{rel}/cgroup.procs",
        ]
        assert (root / "cpu" / rel / "cpu.cfs_quota_us").read_text() == "50000\n"
        assert (root / "memory" / rel / "memory.limit_in_bytes").read_text() == f"{64 << 20}\n"
        assert not (root / "memory" / rel / "pids.max").exists()  # pids was memory again
