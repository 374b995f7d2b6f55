"""Ray hosts without a cluster (engine/raynodes.py): how a cluster is named, the refusal
of one not on loopback, and what the controller refuses of a node's batch of events (the
attacks of docs/boundaries.md's "Ray nodes": forged events, a lying clock). The runs on a
real cluster are tests/engine/test_ray_cluster.py's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest

from rtax_tui.engine.plan import PlannedTrial
from rtax_tui.engine.profile import ProfileError, load_profile
from rtax_tui.engine.raynodes import (
    RaySpec,
    check_batch,
    current_cluster_file_wrong,
    refuse_untrusted,
    spec_of,
)
from rtax_tui.model import events
from rtax_tui.model.events import Emitter
from rtax_tui.model.netaddr import address_host, is_loopback, is_ray_name
from rtax_tui.model.spec import Cell, RtaxError


def _rtax(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **env),
    )


def test_cluster_names_and_addresses():
    assert is_ray_name("ray:auto") and is_ray_name("ray://127.0.0.1:10001")
    assert not is_ray_name("ray") and not is_ray_name("ssh://ray")
    assert address_host("ray://10.0.0.5:10001") == "10.0.0.5"
    assert address_host("127.0.0.1:6379") == "127.0.0.1"
    assert address_host("[::1]:6379") == "::1"
    assert address_host("ray://") == ""
    assert is_loopback("127.0.0.1") and is_loopback("127.9.9.9") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("10.0.0.5") and not is_loopback("localhost.evil.example")
    assert spec_of("ray:auto", {}) == RaySpec("ray", "auto")
    assert spec_of("gpu", {"gpu": {"ray": "10.0.0.5:6379", "trusted": True, "nodes": 2}}) == (
        RaySpec("gpu", "10.0.0.5:6379", trusted=True, nodes=2)
    )
    assert spec_of("box", {"box": {"address": "box"}}) is None
    assert spec_of("local", {}) is None


def test_a_cluster_not_on_loopback_is_refused_unless_trusted():
    with pytest.raises(RtaxError, match="trusted = true"):
        refuse_untrusted(RaySpec("ray", "ray://10.0.0.5:10001"), "ray://10.0.0.5:10001")
    with pytest.raises(RtaxError, match=r"\[hosts.gpu\]"):
        refuse_untrusted(RaySpec("gpu", "10.0.0.5:6379"), "10.0.0.5:6379")
    refuse_untrusted(RaySpec("gpu", "10.0.0.5:6379", trusted=True), "10.0.0.5:6379")
    refuse_untrusted(RaySpec("ray", "auto"), "127.0.0.1:6379")


def test_the_command_line_refuses_a_remote_cluster_in_one_line_exit_2(tmp_path):
    res = _rtax("run", "t0", "--host", "ray://10.1.2.3:10001", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "trusted = true" in lines[0], res.stderr
    assert not (tmp_path / "r.jsonl").exists()
    res = _rtax("run", "t0", "--host", "ray://", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2 and "ray://HOST:PORT" in res.stderr


def test_ray_auto_resolving_to_a_remote_cluster_is_refused_too(tmp_path):
    pytest.importorskip("ray", reason="the extra rtax[ray] is not installed")
    out = tmp_path / "r.jsonl"
    res = _rtax("run", "t0", "--host", "ray:auto", "-o", str(out), RAY_ADDRESS="10.1.2.3:6379")
    assert res.returncode == 2, res.stderr
    assert "10.1.2.3:6379" in res.stderr and "trusted = true" in res.stderr


def test_a_profile_with_a_remote_cluster_is_refused_naming_its_table_and_field(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nhosts = ["gpu"]\n\n[hosts.gpu]\nray = "10.1.2.3:6379"\n')
    res = _rtax("run", str(prof), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2 and "[hosts.gpu]" in res.stderr, res.stderr
    assert "trusted = true" in res.stderr


def test_ray_auto_reads_only_a_current_cluster_file_of_this_user(tmp_path):
    """An attack: Ray's temp directory (/tmp/ray) is writable by every user, so another
    user can write its current-cluster file and have `ray:auto` join a cluster of theirs
    (on loopback too), whose workers would then run the node engines and return pickles
    to the controller. Without RAY_ADDRESS, rtax reads the file only if it is this
    user's and no one else can write it."""
    f = tmp_path / "ray_current_cluster"
    assert "no " in (current_cluster_file_wrong(str(f)) or "")
    f.write_text("127.0.0.1:6379")
    f.chmod(0o644)
    assert current_cluster_file_wrong(str(f)) is None
    f.chmod(0o666)
    assert "writable by others" in (current_cluster_file_wrong(str(f)) or "")
    f.chmod(0o644)
    os.chown(f, 12345, -1) if os.getuid() == 0 else pytest.skip("chown needs root")
    assert "belongs to uid 12345" in (current_cluster_file_wrong(str(f)) or "")
    link = tmp_path / "link"
    link.symlink_to(f)
    assert "not a regular file" in (current_cluster_file_wrong(str(link)) or "")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('ray = "auto"\naddress = "box"', "either address (SSH) or ray"),
        ('ray = "auto"\nuser = "me"', "an SSH host's key"),
        ('address = "box"\ntrusted = true', "a Ray cluster's"),
        ('ray = "auto"\nnodes = 0', "nodes"),
        ('ray = "ray://"', "expected auto, HOST:PORT or ray://HOST:PORT"),
        ('ray = "auto"\ntrusted = "yes"', "trusted"),
    ],
)
def test_host_tables_of_ray_are_checked_when_the_profile_loads(tmp_path, body, says):
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\nhosts = ["c"]\n\n[hosts.c]\n{body}\n')
    with pytest.raises(ProfileError, match=re.escape(says)):
        load_profile(str(prof))


def test_a_profile_may_name_a_cluster_in_its_hosts(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\nhosts = ["ray:auto", "c"]\n\n[hosts.c]\nray = "auto"\nnodes = 2\n')
    p = load_profile(str(prof))
    assert p.hosts == ("ray:auto", "c") and p.host_tables["c"]["nodes"] == 2


# -- a node's batch: what the controller records of it ---------------------------------
CELL = Cell("ray-1", "stage", "t0", "exec")
PT = PlannedTrial(7, CELL, False)


def _batch(t0: int = 1_000, dur: int = 100) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = [
        dict(
            events.trial_start(
                trial=7,
                cell=CELL.id,
                host="ray-1",
                driver="stage",
                workload="t0",
                channel="exec",
                warmup=False,
                batch=None,
                steps=1,
            )
        ),  # fmt: skip
        dict(events.phase(7, "create", dur, True)),
        dict(events.action(7, 0, dur, 0, True, 0)),
        dict(events.phase(7, "orchestration", dur, True)),
        dict(events.trial_end(7, True, None)),
    ]
    return [{"type": e["type"], "t_ns": t0 + 10 * k, **e} for k, e in enumerate(evs)]


def _check(batch: Any, lo: int = 0, hi: int = 10_000_000) -> str | None:
    return check_batch(batch, PT, lo_ns=lo, hi_ns=hi, err_ns=0)


def test_a_true_batch_is_recorded():
    assert _check(_batch()) is None


def test_a_forged_batch_is_refused():
    b = _batch()
    b[1]["trial"] = 8  # another trial's event slipped in
    assert "of trial 8" in (_check(b) or "")
    b = _batch()
    b.insert(2, {"type": "run_end", "t_ns": 1, "status": "completed", "trials": 0})
    assert "not a trial's" in (_check(b) or "")
    b = _batch()
    b.insert(2, {"type": "clock", "t_ns": 1, "host": "local", "at_ns": 0, "offset_ns": 0,
                 "err_ns": 0, "rtt_ns": 0, "samples": 1})  # fmt: skip
    assert "not a trial's" in (_check(b) or "")
    b = _batch()
    b[0]["host"] = "local"  # a node's trial passed off as the controller's
    assert "trial_start says" in (_check(b) or "")
    b = _batch()
    b[0]["warmup"] = True
    assert "trial_start says" in (_check(b) or "")
    b = _batch()
    b.insert(3, dict(b[-1]))  # two ends
    assert "more than one" in (_check(b) or "")
    b = _batch()
    b[2]["rc"] = "0"  # not the schema
    assert "expected" in (_check(b) or "")
    assert _check([]) == "no events" and _check("x") == "no events"
    assert _check(_batch()[1:]) == "not a trial_start ... trial_end"


def test_a_lying_clock_is_refused():
    """A node's durations and times cannot exceed what the controller saw the trial take."""
    assert "longer than the trial took" in (_check(_batch(dur=20_000_000)) or "")
    b = _batch(dur=6_000_000)  # each fits, but they add up past the trial's time
    assert "add up to" in (_check(b, hi=5_000_000) or "")
    assert "outside the trial's time" in (_check(_batch(t0=50_000_000)) or "")
    b = _batch()
    b[1]["dur_ns"] = -5
    assert "got -5" in (_check(b) or "")


def test_forward_keeps_the_node_stamp_and_shows_control_characters():
    got: list[dict[str, Any]] = []
    em = Emitter([got.append])
    ev = dict(events.trial_end(7, False, None))
    ev["error"] = {"phase": "create", "kind": "error", "message": "a\x1b[2Jb"}
    em.forward({"type": "trial_end", "t_ns": 42, **ev})
    assert got[0]["t_ns"] == 42 and "\x1b" not in got[0]["error"]["message"]


# -- the controller's side of a trial on a node, with a stand-in for the node's actor ----
class _Call:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class _Actor:
    """What NodeTrials calls of a node's actor: `run_trial.remote(...)`, awaited."""

    def __init__(self, answer: Any) -> None:
        async def run_trial(pt: PlannedTrial, sched: int, t0: int) -> Any:
            return await answer(pt, sched, t0)

        self.run_trial = _Call(run_trial)


def _nodes(answer: Any) -> tuple[Any, list[dict[str, Any]], Any]:
    from rtax_tui.engine.control import Progress, RunControl
    from rtax_tui.engine.health import HostHealth, SubstrateHealth
    from rtax_tui.engine.lifecycle import TrialRunner
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.raynodes import NodeTrials, RayNodeHost
    from rtax_tui.hosts.clocksync import ClockSync, RemoteClock
    from rtax_tui.model.spec import Timeouts, Workload

    host = RayNodeHost("ray-1", "id1", RaySpec("ray", "auto"), Profile("p", "p.toml"))
    host.actor = _Actor(answer)
    host.clock = RemoteClock()
    host.clock.add(ClockSync(mono_ns=0, offset_ns=0, err_ns=1000, rtt_ns=2000, samples=8))
    got: list[dict[str, Any]] = []
    em = Emitter([got.append])
    wl = Workload(name="t0", steps=())
    to = Timeouts(create=1, ready=1, action=1, teardown=1)
    trials = TrialRunner(
        Profile("p", "p.toml", timeouts=to), drivers={}, workloads={"t0": wl}, run_id="r",
        emit=em, control=RunControl(), progress=Progress(), substrates=SubstrateHealth({}),
        hosts=HostHealth({}),
    )  # fmt: skip
    return NodeTrials({"ray-1": host}, trials), got, host


def test_a_node_trial_is_forwarded_and_counted():
    import asyncio
    import time

    async def answer(pt: PlannedTrial, sched: int, t0: int) -> Any:
        now = time.monotonic_ns() - t0
        return [dict(e, t_ns=now) for e in _batch(dur=10)]

    nodes, got, host = _nodes(answer)
    asyncio.run(nodes.launch(PT, time.monotonic_ns()))
    assert [e["type"] for e in got] == ["trial_start", "phase", "action", "phase", "trial_end"]
    prog = nodes.trials.progress
    assert (prog.started, prog.done, prog.in_flight, prog.failed) == (1, 1, 0, 0)
    assert nodes.trials.ended == 1 and host.dead is None


def test_a_node_that_hangs_or_dies_makes_the_trial_lost_and_later_ones_at_once():
    import asyncio
    import time

    async def hang(pt: PlannedTrial, sched: int, t0: int) -> Any:
        await asyncio.sleep(3600)

    nodes, got, host = _nodes(hang)
    nodes.bound_s = lambda pt: 0.2  # the trial's timeouts and a margin, shortened
    asyncio.run(nodes.launch(PT, time.monotonic_ns()))
    ends = [e for e in got if e["type"] == "trial_end"]
    assert ends[0]["error"]["kind"] == "host_lost"
    assert "no answer within 0.2 s" in ends[0]["error"]["message"]
    assert host.dead is not None
    asyncio.run(nodes.launch(PlannedTrial(8, CELL, False), time.monotonic_ns()))
    ends = [e for e in got if e["type"] == "trial_end"]
    assert len(ends) == 2 and "node ray-1 lost" in ends[1]["error"]["message"]
    prog = nodes.trials.progress
    assert (prog.started, prog.done, prog.in_flight, prog.failed) == (2, 2, 0, 2)


def test_a_forged_batch_fails_its_trial_and_records_none_of_it():
    import asyncio
    import time

    async def forge(pt: PlannedTrial, sched: int, t0: int) -> Any:
        b = _batch()
        b[1]["dur_ns"] = 10**15  # a phase of 11 days
        return b

    nodes, got, host = _nodes(forge)
    asyncio.run(nodes.launch(PT, time.monotonic_ns()))
    assert [e["type"] for e in got] == ["trial_start", "phase", "trial_end"]  # ours
    assert got[1]["name"] == "orchestration"
    assert "sent events not recorded" in got[2]["error"]["message"]
    assert host.dead is None  # the node stays: the trial failed


def test_the_console_plans_a_cluster_as_its_nodes():
    """`trials done/planned` in the console: `ray:auto` is one name in the profile and one
    host per node in the header (before: 36/12 for 3 nodes)."""
    from rtax_tui.ui.livestate import LiveState

    prof = {"hosts": ["local", "ray:auto", "c"], "workloads": ["t0"], "channels": ["exec"],
            "drivers": ["stage"], "trials": 2, "warmup": 1,
            "host_tables": {"c": {"ray": "auto"}}}  # fmt: skip
    facts = {"local": {}, "ray-1": {"ray": {}}, "ray-2": {"ray": {}}, "c-3": {"ray": {}}}
    assert LiveState._hosts_planned(prof, facts) == 4
    assert LiveState._hosts_planned({"hosts": ["local", "ssh://h"]}, {"local": {}}) == 2


def test_a_lost_trial_starts_as_the_lifecycle_starts_any_trial():
    """A trial its node never ran (the node lost) starts with the lifecycle's own
    `trial_start` (TrialRunner.start_event): an episode's trial keeps its arrival pattern,
    episode and due time, so that `rtax compare`'s pairing and the load report read its
    cell as the others of it. Before, raynodes wrote a trial_start of its own without
    them: the cell's last start said arrival None."""
    import asyncio
    import time

    from rtax_tui.analysis.pairing import cell_fields

    async def never(pt: PlannedTrial, sched: int, t0: int) -> Any:
        raise AssertionError("a lost node is not asked")

    nodes, got, host = _nodes(never)
    host.dead = "killed"
    cell = Cell("ray-1", "stage", "t0", "exec", arrival="burst:2")
    pt = PlannedTrial(3, cell, False, None, "e1", 0)
    nodes.trials.emit.start()
    sched = time.monotonic_ns()
    asyncio.run(nodes.launch(pt, sched))
    start = got[0]
    assert start["type"] == "trial_start" and got[-1]["error"]["kind"] == "host_lost"
    wl = nodes.trials.workloads["t0"]
    want = nodes.trials.start_event(pt, sched, wl, nodes.trials.spec_for(cell, None, wl))
    assert {k: v for k, v in start.items() if k != "t_ns"} == dict(want)
    assert (start["arrival"], start["episode"], start["steps"]) == ("burst:2", "e1", 0)
    assert cell_fields(got)[cell.id][-1] == "burst:2"


# -- a capacity batch across nodes: what the controller takes of a node's log ----------
def test_a_nodes_log_settles_only_its_own_trials_in_order_and_never_the_release():
    """An attack (a node's engine is the node's code): its batch log names another node's
    trial, lets go before the release, arrives twice, or claims every trial of the batch.
    The controller takes only its own part's steps, each once and in order; the barrier
    releases only when every node's trials have arrived or failed."""
    import asyncio

    from rtax_tui.engine.capacity import Barrier
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.raynodes import NodeBatch, RayNodeHost
    from rtax_tui.hosts.clocksync import ClockSync, RemoteClock

    async def go() -> None:
        host = RayNodeHost("ray-1", "id1", RaySpec("ray", "auto"), Profile("p", "p.toml"))
        host.clock = RemoteClock()
        host.clock.add(ClockSync(mono_ns=0, offset_ns=0, err_ns=1000, rtt_ns=2000, samples=8))
        barrier = Barrier(4)  # trials 1, 2 on this node; 3, 4 on another
        part = NodeBatch(host, "b1", barrier)
        part.trials |= {1, 2}
        part.apply(0, [("arrive", 3, 5, True), ("arrive", 4, 5, True)])
        assert barrier.arrived == 0 and "not of this node's part" in (part.refused or "")
        part.apply(2, [("arrive", 1, 5, True), ("arrive", 1, 6, True), ("let_go", 1, 7, True)])
        assert barrier.arrived == 1 and barrier.holding == {1}  # once; no early let-go
        part.apply(2, [("arrive", 2, 5, True)])  # an entry already taken: not again
        assert barrier.arrived == 1
        part.apply(5, [("fail", 2, 8, True), ["arrive", "x", 1, True], "junk"])
        assert barrier.settled == {1, 2} and barrier.how is None  # the others' still out
        barrier.fail(3)
        barrier.arrive(4)
        assert barrier.how == "settled" and barrier.released_ns is not None
        late = barrier.released_ns + 10**12  # a let-go stamped far after: held to now
        part.apply(8, [("let_go", 1, late, True)])
        assert barrier.released_ns <= barrier.let_go_at[1] <= late
        assert part.cursor == 9

    asyncio.run(go())


def test_a_spanning_plan_puts_size_trials_of_every_node_in_each_batch():
    from rtax_tui.engine.plan import build_capacity_plan, build_spanning_plan

    cells = [Cell(h, "stage", "capacity", "exec") for h in ("ray-1", "ray-2", "ray-3")]
    plan = build_spanning_plan(cells, 2, 2, 1, 7)
    assert [b.id for b in plan] == ["b1", "b2", "b3"] and plan[0].warmup
    for b in plan:
        assert sorted(pt.cell.host for pt in b.trials) == [
            "ray-1",
            "ray-1",
            "ray-2",
            "ray-2",
            "ray-3",
            "ray-3",
        ]
        assert {pt.batch for pt in b.trials} == {b.id}
    ids = [pt.id for b in plan for pt in b.trials]
    assert ids == list(range(1, 19))
    # one cell: the plain plan, batch for batch
    one = build_capacity_plan(cells[:1], 2, 2, 1, 7)
    assert [(b.id, len(b.trials)) for b in build_spanning_plan(cells[:1], 2, 2, 1, 7)] == [
        (b.id, len(b.trials)) for b in one
    ]
