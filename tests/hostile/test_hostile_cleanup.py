"""The red team on the names a cleanup goes by (hosts/names.py) and on what it spares.

Each test is an attack on `rtax cleanup`: make it remove what a live run made, or spare
a leftover for ever. Only `rtax cleanup`'s own matching runs here, on names made in a
temporary directory, with a real other process holding a real run lock (flock).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtax_tui.commands import cleanup as cleanup_cmd
from rtax_tui.hosts import LocalHost, cgroups, names
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import runlock

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    d, lid, label = sys.argv[1:4]
    fd = os.open(os.path.join(d, lid + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, (label + "\\n").encode())
    print("held", flush=True)
    sys.stdin.read()
    """
)


class _Run:
    """Another rtax process: a real lock with `label`, held until `stop`."""

    def __init__(self, runs: Path, label: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(runs), f"p{os.getpid()}-{label}", label],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "held"

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "runs"
    d.mkdir()
    monkeypatch.setenv("RTAX_RUNS_DIR", str(d))
    # the cleanup scripts' workspaces are looked for here, never in the real /tmp
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield d


def test_gvisor_cleanup_spares_a_run_that_starts_while_it_lists(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runlock's rule: a cleanup lists its candidates first, then the live labels (a
    resource seen in the listing was made by a process that had written its label
    before). gVisor's cleanup read the live labels first and listed its state directory
    after: a run that started between the two had its sandbox's state (and processes)
    removed while it ran. Here `rtax cleanup --run r` runs while run `r-late` starts."""
    from rtax_tui.drivers import gvisor

    state = tmp_path / "gvisor"
    state.mkdir()
    monkeypatch.setattr(gvisor, "STATE_BASE", str(state))
    tag = f"atk{os.getpid()}"  # `--run <tag>`: the cgroups and workspaces it matches are none
    late = f"{tag}-late"
    started: list[_Run] = []
    real = runlock.live_labels

    def live_then_a_run_starts() -> set[str]:
        got = real()
        if not started:  # the other run starts now: its lock, then its sandbox
            started.append(_Run(runs, late))
            (state / names.sandbox(late)).mkdir()
        return got

    monkeypatch.setattr(runlock, "live_labels", live_then_a_run_starts)
    dead = state / names.sandbox(tag)  # a dead run's: removed
    dead.mkdir()
    drv = gvisor.GvisorDriver(LocalHost(), {})
    try:
        asyncio.run(drv.cleanup(tag))
        left = sorted(p.name for p in state.iterdir())
        assert len(left) == 1 and left[0].startswith(names.sandbox_prefix(late)), left
    finally:
        for r in started:
            r.stop()


CGROUPS = os.geteuid() == 0 and Cgroup.version() is not None


@pytest.mark.skipif(not CGROUPS, reason="cgroups need root")
def test_cleanup_spares_a_live_gvisor_probe_cgroup(runs: Path) -> None:
    """gVisor's platform probe runs its sandbox in `rtax/gvisor-probe-<owner>-p<hex>`,
    its owner's label held in its run lock. `rtax cleanup` removes every child of the
    cgroup root that no live label spares, but it asked only the env- and batch- kinds:
    a cleanup while another rtax probed gVisor removed the probe's cgroup (its sandbox
    killed: the live run saw the platform fail). Here the cleanup's own spare is asked
    of a real cgroup of each kind whose label a real other process holds, and of a dead
    one of each kind."""
    label, dead = f"atkprobe{os.getpid()}", f"atkdead{os.getpid()}"
    other = _Run(runs, label)
    made = []
    try:
        for who in (label, dead):
            for name in (
                names.probe_cgroup(who, "p0a0b0c"),
                names.env_cgroup(who),
                names.batch_cgroup(who, "b1"),
            ):
                made.append(Cgroup.create(name))
        removed = 0
        for who in (label, dead):  # each cleanup limited to the cgroups made here
            for kind in names.CGROUP_KINDS:
                removed += cgroups.cleanup(
                    f"{cgroups.PREFIX}/{kind(who)}", spare=cleanup_cmd.spare_live_cgroups()
                )
        kept = [cg.relpath.rpartition("/")[2] for cg in made if cg.exists()]
        assert kept == [cg.relpath.rpartition("/")[2] for cg in made[:3]]  # the live run's
        assert removed == 3  # the dead one's
    finally:
        other.stop()
        for cg in made:
            if cg.exists():
                cg.remove(timeout=2)
