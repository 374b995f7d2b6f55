"""One trial's lifecycle: phases timed, failures named by kind, teardown always."""

from __future__ import annotations

import asyncio

import pytest

from rtax_tui.model.errors import ErrorKind, TrialError
from rtax_tui.model.spec import PhaseFailure, Timeouts
from tests.enginetools import W_BAD, W_HANG, W_OK, by_type, prof, run
from tests.fakes import FakeDriver


def test_every_phase_recorded_and_orchestration_closes_the_sum():
    drv = FakeDriver()
    drv.delays = {"create": 0.002, "ready": 0.001, "action": 0.001, "teardown": 0.001}
    s, ev = run(prof(), drv, {"w": W_OK})
    assert ev[0]["type"] == "run" and ev[0]["format"] == "rtax/1" and ev[0]["seed"] == 1
    assert ev[-1] == {**ev[-1], "type": "run_end", "status": "completed", "trials": 4}
    ends = by_type(ev, "trial_end")
    assert len(ends) == 4 and all(e["ok"] and e["valid"] for e in ends)
    starts = by_type(ev, "trial_start")
    assert sum(e["warmup"] for e in starts) == 1 and starts[0]["warmup"] is True
    for tid in (e["trial"] for e in starts):
        names = [e["name"] for e in ev if e["type"] == "phase" and e["trial"] == tid]
        assert names == ["create.thing", "create", "ready", "teardown", "orchestration"]
        acts = [e for e in by_type(ev, "action") if e["trial"] == tid]
        assert [a["i"] for a in acts] == [0, 1] and acts[0]["out_bytes"] == 3
        assert all(a["dur_ns"] >= 1_000_000 for a in acts)
    create = [e for e in by_type(ev, "phase") if e["name"] == "create"]
    assert all(e["dur_ns"] >= 2_000_000 for e in create)
    ts = [e["t_ns"] for e in ev]
    assert ts == sorted(ts)
    assert drv.live == 0 and drv.torn_down == 4


def test_action_mismatch_makes_trial_invalid_not_failed():
    s, ev = run(prof(warmup=0, workloads=("bad",)), FakeDriver(), {"bad": W_BAD})
    ends = by_type(ev, "trial_end")
    assert all(e["ok"] and not e["valid"] and e["error"] is None for e in ends)
    assert s.progress.invalid == 3 and s.progress.failed == 0


def test_failed_create_still_tears_down_and_names_the_reason():
    drv = FakeDriver()
    drv.fail["create"] = True
    s, ev = run(prof(warmup=0), drv, {"w": W_OK})
    ends = by_type(ev, "trial_end")
    assert all(not e["ok"] for e in ends)
    assert ends[0]["error"] == {
        "phase": "create",
        "kind": "sandbox_failed",
        "message": "create failed on purpose",
    }
    assert [e["name"] for e in ev if e["type"] == "phase" and e["trial"] == 1] == [
        "create.thing",
        "create",
        "teardown",
        "orchestration",
    ]
    assert drv.live == 0
    assert by_type(ev, "run_end")[0]["status"] == "completed"


def test_ready_timeout_and_action_timeout():
    drv = FakeDriver()
    drv.hang_ready_for = {0}
    p = prof(warmup=0, trials=2, timeouts=Timeouts(ready=0.05, action=5))
    s, ev = run(p, drv, {"w": W_OK})
    ends = by_type(ev, "trial_end")
    assert ends[0]["error"]["kind"] == "ready_timeout" and ends[1]["ok"]
    assert drv.live == 0
    s, ev = run(prof(warmup=0, trials=1, workloads=("hang",)), FakeDriver(), {"hang": W_HANG})
    end = by_type(ev, "trial_end")[0]
    assert end["error"]["phase"] == "action" and end["error"]["kind"] == "action_timeout"
    act = by_type(ev, "action")[0]
    assert act["ok"] is False and act["rc"] is None and 40e6 < act["dur_ns"] < 2e9


# -- `timed`: one phase under its timeout, its failure as a typed error --------
def _timed(fn, timeout=1.0, barrier=None):  # type: ignore[no-untyped-def]
    from rtax_tui.engine.lifecycle import timed

    return asyncio.run(timed("ready", fn, timeout, barrier))


def test_timed_names_each_failure_by_kind() -> None:
    async def ok() -> int:
        return 7

    async def hang() -> None:
        await asyncio.sleep(3600)

    async def phase_failure() -> None:
        raise PhaseFailure(ErrorKind.IMAGE_MISSING, "the image is missing")

    async def bug() -> None:
        raise ValueError("x")

    dur, res, err = _timed(ok)
    assert res == 7 and err is None and dur >= 0
    _, _, err = _timed(hang, timeout=0.01)
    assert err == TrialError("ready", "ready_timeout", "ready did not finish within 0.01 s")
    _, _, err = _timed(phase_failure)
    assert err == TrialError("ready", "image_missing", "the image is missing")
    _, _, err = _timed(bug)
    assert err == TrialError("ready", ErrorKind.ERROR, "ValueError: x")


def test_a_cancelled_phase_is_interrupted_or_the_batch_deadline() -> None:
    from rtax_tui.engine.capacity import Barrier
    from rtax_tui.engine.lifecycle import timed

    async def cancelled(barrier: Barrier | None) -> TrialError | None:
        async def hang() -> None:
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(timed("create", hang, None, barrier))
        await asyncio.sleep(0.01)
        if barrier is not None:
            barrier.expire()
        task.cancel()
        return (await task)[2]

    err = asyncio.run(cancelled(None))
    assert err is not None and err.kind == ErrorKind.INTERRUPTED == "interrupted"
    err = asyncio.run(cancelled(Barrier(2)))
    assert err is not None and err.kind == "barrier_deadline"
    assert err.to_event() == {
        "phase": "create",
        "kind": "barrier_deadline",
        "message": "the batch's deadline passed first",
    }
    assert type(err.to_event()["kind"]) is str  # a plain string for the recording


def test_error_kinds_are_a_closed_set() -> None:
    """A phase fails with one of `ErrorKind`'s kinds (a known kind's string is taken, as a
    plugin written before the set was closed passes it); any other is refused where it is
    raised, not recorded."""
    got = PhaseFailure("image_missing", "x")  # type: ignore[arg-type]
    assert got.kind is ErrorKind.IMAGE_MISSING
    with pytest.raises(ValueError):
        PhaseFailure("boom", "x")  # type: ignore[arg-type]
    assert PhaseFailure(ErrorKind.ENV_LOST, "gone").kind == "env_lost"  # recorded as before


def test_action_event_counts_output_past_the_limit(monkeypatch):
    """Issue 19, recorded: `out_bytes` what rtax kept (the first OUTPUT_LIMIT bytes),
    `out_dropped` the rest, only where there was some; the events still pass the schema
    (the local driver, for real)."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model import spec as model
    from rtax_tui.model.events import check_event
    from rtax_tui.model.spec import Step, Workload

    monkeypatch.setattr(model, "OUTPUT_LIMIT", 1024)
    big = Step(("sh", "-c", "head -c 8192 /dev/zero; exit 3"), expect_rc=3)
    w = Workload("w", (big, Step(("echo", "ok"), expect_out="ok")))
    drv = get_driver("local", LocalHost())
    s, ev = run(prof(trials=1, warmup=0), drv, {"w": w})
    acts = by_type(ev, "action")
    assert [(a["rc"], a["ok"], a["out_bytes"]) for a in acts] == [(3, True, 1024), (0, True, 3)]
    assert acts[0]["out_dropped"] == 8192 - 1024 and "out_dropped" not in acts[1]
    assert [check_event(e) for e in ev] == [None] * len(ev)
    assert check_event({**acts[0], "out_dropped": -1}) is not None  # a count, checked


@pytest.mark.parametrize(
    ("rc", "kills", "kind"),
    [(-9, 1, "oom"), (137, 2, "oom"), (-9, 0, "probe_failed"), (1, 3, "probe_failed")],
)
def test_a_ready_probe_killed_by_the_oom_killer_is_its_work(rc: int, kills: int, kind: str) -> None:
    """The OOM killer can take ready's probe `true` in a batch with a memory budget (a
    rehearsal's capacity test saw {oom, probe_failed}): SIGKILLed in a batch whose budget
    saw an OOM kill, the probe fails as `oom`, as an action does; otherwise as before."""
    from rtax_tui.engine.lifecycle import timed
    from rtax_tui.model.spec import ProbeFailed

    class Budget:  # a double of the batch's barrier: its budget's OOM kills so far
        expired = False

        def oom_seen(self) -> int:
            return kills

    async def ready() -> None:
        raise ProbeFailed(rc)

    _, _, err = asyncio.run(timed("ready", ready, 5.0, Budget()))  # type: ignore[arg-type]
    assert err is not None and err.phase == "ready" and err.kind == kind
    assert (f"returned {rc}" in err.message) == (kind == "probe_failed")
