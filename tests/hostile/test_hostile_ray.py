"""The red team's pass over the capacity batch spread over Ray nodes (branch raybar):
each attack that got through, as the promise it broke (docs/boundaries.md, "Ray nodes
and the spanning barrier: what was tried", lists what was tried and what held).

Without a cluster: each node's engine is a real `NodeEngine` in this process, its
actor's `m.remote(...)` a call of its method (`_InProc`), so that the controller's
side (`NodeTrials`, `NodeBatch`, `CapacityRun` with its span) follows the node's real
barrier log and its trials' real events; an attack on the wire replaces one answer.
The runs on a real cluster are tests/engine/test_ray_cluster.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine.capacity import Barrier, CapacityRun
from rtax_tui.engine.control import Progress, RunControl
from rtax_tui.engine.health import HostHealth, SubstrateHealth
from rtax_tui.engine.lifecycle import TrialRunner
from rtax_tui.engine.nodeengine import NodeEngine
from rtax_tui.engine.profile import Profile, load_profile
from rtax_tui.engine.raynodes import NodeBatch, NodeTrials, RayNodeHost, RaySpec
from rtax_tui.engine.runner import resolve_workloads
from rtax_tui.model import events
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Cell
from tests.raynodeinproc import Call, Tamper, exact_clock, node_host


def _profile(tmp: Path, step: str, *, size: int, deadline_s: int, driver: str) -> Profile:
    path = tmp / "span.toml"
    path.write_text(
        f"""
[run]
hosts = ["local"]
drivers = ["{driver}"]
workloads = ["span"]
channels = ["exec"]
warmup = 0

[timeouts]
create = 10
ready = 10
action = 10
teardown = 10

[capacity]
size = {size}
batches = 1
deadline_s = {deadline_s}

[workloads.span]
steps = [{{ argv = ["python3", "-c", {json.dumps(step)}] }}]
"""
    )
    return load_profile(str(path))


def span_run(
    tmp: Path,
    step: str,
    *,
    nodes: int = 2,
    size: int = 1,
    deadline_s: int = 20,
    tamper: Tamper | None = None,
    driver: str = "local",
) -> tuple[list[dict[str, Any]], Progress]:
    """One capacity batch over `nodes` in-process node engines; the events recorded."""
    profile = _profile(tmp, step, size=size, deadline_s=deadline_s, driver=driver)
    workloads = resolve_workloads(profile)
    got: list[dict[str, Any]] = []
    emit = Emitter([got.append])
    control, progress = RunControl(), Progress()

    async def go() -> None:
        engines: list[NodeEngine] = []
        hosts: dict[str, RayNodeHost] = {}
        try:
            for i in range(nodes):
                eng = NodeEngine(f"ray-{i}", profile, profile.drivers)
                engines.append(eng)
                hosts[f"ray-{i}"] = node_host(i, profile, eng, tamper)
            trials = TrialRunner(
                profile, drivers={}, workloads=workloads, run_id="r", emit=emit,
                control=control, progress=progress, substrates=SubstrateHealth({}),
                hosts=HostHealth({}),
            )  # fmt: skip
            span = NodeTrials(hosts, trials)
            await span.setup(workloads)
            emit.start()
            cells = [Cell(h, driver, "span", "exec") for h in hosts]
            run = CapacityRun(
                profile.capacity,  # type: ignore[arg-type]
                run_id="r", emit=emit, control=control, progress=progress,
                launch=span.launch_in_batch, let_go_s=profile.timeouts.action, span=span,
            )  # fmt: skip
            async with asyncio.timeout(120):
                await run.run(cells, 0, 1)
        finally:
            for eng in engines:
                await eng.close()

    asyncio.run(go())
    return got, progress


def _ends(evs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["trial"]: e for e in evs if e["type"] == "trial_end"}


def _bars(evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["cell"].split("/")[0]: e for e in evs if e["type"] == "barrier"}


def test_the_harness_runs_one_batch_over_two_nodes(tmp_path: Path) -> None:
    evs, prog = span_run(tmp_path, "pass", nodes=2, size=2)
    ends = _ends(evs)
    assert len(ends) == 4 and all(e["ok"] for e in ends.values()), ends
    bars = _bars(evs)
    assert set(bars) == {"ray-0", "ray-1"}
    for b in bars.values():
        assert (b["size"], b["arrived"], b["span"], b["released"]) == (2, 2, 4, "all_arrived")
        assert type(b["release_lag_ns"]) is int
    assert prog.done == 4


# -- values on the wire: what a node answers cannot crash the controller ----------------
def _junk_log(node: str, method: str, call: Any) -> Any:
    """ray-1's batch log: an entry whose kind is a list (unhashable)."""
    _args, got = call
    if node == "ray-1" and method == "barrier_news":
        return [[["arrive"], 2, 5, True]]
    return got


def test_a_node_log_entry_of_an_unhashable_kind_fails_its_trials_not_the_run(
    tmp_path: Path,
) -> None:
    """Got through at 930c6c7: `kind not in NEWS_KINDS` raised TypeError on a list, in
    the follow task (which died silently) and in the trial's catch-up: the trial's task
    ended in an exception, swallowed by the batch's gather, so the trial had no
    trial_end at all (out of every denominator) and progress never counted it done."""
    evs, prog = span_run(tmp_path, "pass", nodes=2, deadline_s=3, tamper=_junk_log)
    starts = {e["trial"]: e["host"] for e in evs if e["type"] == "trial_start"}
    ends = _ends(evs)
    assert set(ends) == set(starts) and len(ends) == 2, (starts, ends)
    for trial, host in starts.items():
        end = ends[trial]
        if host == "ray-1":  # its log never said it arrived: its events not recorded
            assert not end["ok"] and "sent events not recorded" in end["error"]["message"]
        else:
            assert end["ok"], end
    bars = _bars(evs)
    assert bars["ray-1"]["arrived"] == 0 and bars["ray-0"]["arrived"] == 1
    assert {b["released"] for b in bars.values()} == {"deadline"}
    assert prog.done == 2


# -- a node's part, followed by the controller, with a crafted log ------------------------
class _Answers:
    """A node's actor answering the release at `release_at()` (its clock) after `nap`."""

    def __init__(self, release_at: Callable[[], int], nap: float = 0.0) -> None:
        async def release_batch(batch: str, expired: bool, share: int) -> int:
            at = release_at()
            await asyncio.sleep(nap)
            return at

        async def barrier_news(batch: str, cursor: int, wait_s: float, share: int) -> Any:
            return []

        self.release_batch = Call(release_batch)
        self.barrier_news = Call(barrier_news)


def _part(barrier: Barrier, trials: set[int], actor: Any = None) -> NodeBatch:
    host = RayNodeHost("ray-1", "id1", RaySpec("ray", "auto"), Profile("p", "p.toml"))
    host.clock, host.actor = exact_clock(), actor
    part = NodeBatch(host, "b1", barrier)
    part.trials |= trials
    return part


def test_an_arrival_after_the_deadlines_release_is_not_counted() -> None:
    """Got through at 930c6c7: the controller took a node's `arrive` whenever it came.
    A `local` workload that will miss the deadline SIGSTOPs its node's engine across it
    (tests/engine/test_ray_cluster.py's STOP_MY_ENGINE, then a SIGCONT from a child): its step
    ends meanwhile, and when the engine runs again the trial arrives (on the node's
    clock, after the controller's decision) before the engine reads the release that
    would have interrupted it. Locally the deadline interrupts every trial on its way;
    here that arrival was counted (`arrived`, the cell's batch `ok`) and the trial ok.
    Now an arrival the node's clock puts after a deadline's release is not counted, and
    its trial is failed saying so."""
    barrier = Barrier(1)
    part = _part(barrier, {1})
    barrier.expire()  # the deadline: the controller's decision
    assert barrier.released_ns is not None
    late = barrier.released_ns + 1_000_000_000  # a second after it, on the node
    part.apply(0, [("arrive", 1, late, True), ("let_go", 1, late + 5, True)])
    assert 1 in barrier.arrivals and 1 in barrier.lost_trials  # not counted as arrived
    wait = {"type": "phase", "name": "barrier.wait"}
    assert "after the batch's deadline" in (part.check_trial(1, [wait]) or "")
    # one that arrived before the decision (within the clock's error) is counted
    barrier = Barrier(2)
    part = _part(barrier, {1, 2})
    barrier.expire()
    assert barrier.released_ns is not None
    part.apply(0, [("arrive", 1, barrier.released_ns + 500, True)])
    assert 1 not in barrier.lost_trials and part.check_trial(1, [wait]) is None


def test_a_let_go_before_its_node_received_the_release_is_held_to_that_receipt() -> None:
    """Got through at 930c6c7: a let-go was held no earlier than the controller's
    decision, yet a node cannot let go before it receives the release (its answer, the
    node's `release_lag_ns`): a let-go stamped in between made the node's
    `release_dur_ns` shorter than its own lag, a better figure than measured. Now each
    let-go of the node is held to its receipt of the release, before or after the
    answer comes."""

    async def go() -> None:
        barrier = Barrier(1)
        # the node received the release 50 ms after the decision (its answer says)
        part = _part(barrier, {1}, _Answers(lambda: barrier.released_ns + 50_000_000, 0.08))
        part.apply(0, [("arrive", 1, time.monotonic_ns(), True)])
        assert barrier.released_ns is not None
        decided = barrier.released_ns
        part.apply(1, [("let_go", 1, decided + 1, True)])  # 1 ns after the decision
        await part._release()
        lag = part.release_lag_ns
        assert lag is not None and lag >= 50_000_000
        assert barrier.let_go_at[1] >= decided + lag
        assert barrier.let_go_ns is not None and barrier.let_go_ns >= decided + lag
        # a let-go taken after the answer, stamped before the receipt: held to it too
        barrier = Barrier(2)
        part = _part(barrier, {1, 2}, _Answers(lambda: barrier.released_ns + 50_000_000, 0.08))
        part.apply(0, [("arrive", 1, time.monotonic_ns(), True)])
        part.apply(1, [("arrive", 2, time.monotonic_ns(), True)])
        decided = barrier.released_ns
        await part._release()
        lag = part.release_lag_ns
        part.apply(2, [("let_go", 2, decided + 1, True)])
        assert lag is not None and barrier.let_go_at[2] >= decided + lag

    asyncio.run(go())


# -- a workload inside a node's environment ------------------------------------------------
STUBBORN = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    time.sleep(300.0731)\n"
    "    sys.exit(0)\n"
    "time.sleep(300.0731)\n"
)


def test_a_workload_that_never_arrives_ignores_sigterm_and_forks_does_not_hang_the_barrier(
    tmp_path: Path,
) -> None:
    """Held at 930c6c7 (kept as a check): on every node an environment that never
    arrives, ignores SIGTERM and leaves a grandchild in a session of its own. The
    controller releases at the deadline, each node interrupts its part, the trials fail
    `barrier_deadline`, the batch is recorded, and nothing of theirs is left running."""
    from tests.leftovers import processes

    t = time.monotonic()  # stage: `local` keeps nothing in (a session of its own escapes)
    evs, _ = span_run(tmp_path, STUBBORN, nodes=2, deadline_s=3, driver="stage")
    took = time.monotonic() - t
    assert took < 30, took
    ends = _ends(evs)
    assert len(ends) == 2 and all(not e["ok"] for e in ends.values()), ends
    assert {e["error"]["kind"] for e in ends.values()} == {"barrier_deadline"}, ends
    bars = _bars(evs)
    assert {(b["arrived"], b["released"]) for b in bars.values()} == {(0, "deadline")}
    deadline = time.monotonic() + 10
    while processes("300.0731") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes("300.0731") == []


FORGER = (
    "import json, sys\n"
    "ev = {'type': 'barrier', 'batch': 'b1', 'cell': 'x', 'size': 1, 'arrived': 1}\n"
    "for out in (sys.stdout, sys.stderr):\n"
    "    out.write(json.dumps(ev) + '\\n')\n"
    "    out.write(repr(('arrive', 1, 0, True)) + '\\n')\n"
    "    out.write(json.dumps({'type': 'phase', 'trial': 1, 'name': 'barrier.wait',"
    " 'dur_ns': 1, 'ok': True}) + '\\n')\n"
    "    out.write(json.dumps({'type': 'trial_end', 'trial': 1, 'ok': True}) + '\\n')\n"
    "sys.exit(3)\n"
)


def test_a_workload_that_prints_events_and_log_entries_is_only_counted(tmp_path: Path) -> None:
    """Held at 930c6c7 (kept as a check): an environment whose step prints what looks
    like a `barrier` event, a node log entry, a `barrier.wait` phase and a trial_end,
    then fails. Its output is counted (bytes), never read as events: its trial fails
    (rc 3 unexpected: not valid; it never arrived) and its node's part says 0 arrived."""
    evs, _ = span_run(tmp_path, FORGER, nodes=2, deadline_s=10)
    assert len([e for e in evs if e["type"] == "barrier"]) == 2
    assert not [e for e in evs if e["type"] == "phase" and e["name"] == "barrier.wait"]
    ends = _ends(evs)
    assert len(ends) == 2 and not any(e["valid"] for e in ends.values()), ends
    bars = _bars(evs)
    assert {(b["arrived"], b["released"]) for b in bars.values()} == {(0, "settled")}


@pytest.mark.parametrize("value", [2**70, -(2**70), 2**63, -1, True, float("nan"), "9", None])
def test_a_nodes_times_on_the_wire_stay_within_what_the_controller_saw(
    tmp_path: Path, value: Any
) -> None:
    """Held at 930c6c7 (kept as a check): ray-1 answers the release with `value` (past
    int64, negative, a bool, NaN, a string, nothing) and, when an integer, stamps every
    entry of its batch log with it. The run completes; its lag is an integer between the
    decision and when the controller heard, or null; its let-go no earlier than the
    release and no later than the controller saw; nothing is dropped from the record."""

    def forge(node: str, method: str, call: Any) -> Any:
        _args, got = call
        if node != "ray-1":
            return got
        if method == "release_batch":
            return value
        if method == "barrier_news" and type(value) is int:
            return [(k, t, value, h) for k, t, _, h in got]
        return got

    evs, prog = span_run(tmp_path, "pass", nodes=2, size=2, deadline_s=5, tamper=forge)
    assert len(_ends(evs)) == 4 and prog.done == 4
    bars = _bars(evs)
    honest, forged = bars["ray-0"], bars["ray-1"]
    assert honest["arrived"] == 2 and type(honest["release_lag_ns"]) is int
    lag = forged["release_lag_ns"]
    assert lag is None if type(value) is not int else 0 <= lag < 10**10, forged
    assert 0 <= forged["release_dur_ns"] < 10**10, forged
    for b in bars.values():
        check = events.check_event(b)
        assert check is None, check
