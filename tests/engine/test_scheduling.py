"""Scheduling and control: concurrency, the plan's order, stop and pause."""

from __future__ import annotations

import asyncio

from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver


def test_stop_interrupts_and_tears_down():
    drv = FakeDriver()
    # each action far longer than the time to the stop: the stop always lands in one (with
    # 20 ms actions it once landed in a teardown on a loaded machine, which it must not
    # cut short, and the last trial ended ok)
    drv.delays = {"action": 2.0}
    s, ev = run(prof(warmup=0, trials=1000), drv, {"w": W_OK}, stop_after=0.3)
    end = by_type(ev, "run_end")[0]
    assert end["status"] == "interrupted"
    starts, ends = by_type(ev, "trial_start"), by_type(ev, "trial_end")
    assert 0 < len(ends) == len(starts) < 1000 and end["trials"] == len(ends)
    assert ends[-1]["error"]["kind"] == "interrupted"
    assert drv.live == 0


def test_concurrency_runs_trials_in_parallel():
    drv = FakeDriver()
    drv.delays = {"action": 0.05}
    s, ev = run(prof(warmup=0, trials=8, concurrency=4), drv, {"w": W_OK})
    t = [e["t_ns"] for e in ev]
    # 8 trials x 2 actions x 50 ms: ~800 ms serially, ~200 ms four at a time
    assert t[-1] < 600e6
    assert len(by_type(ev, "trial_end")) == 8


# -- room: the plan's order, except past a host that has none ------------------
def test_next_with_room_skips_a_full_host_and_a_lost_host_in_flight() -> None:
    from collections import deque

    from rtax_tui.engine.control import RunControl
    from rtax_tui.engine.health import HostHealth
    from rtax_tui.engine.plan import PlannedTrial
    from rtax_tui.engine.scheduling import Scheduler
    from rtax_tui.model.errors import ErrorKind, TrialError
    from rtax_tui.model.spec import Cell

    class H:
        lost = False

    def pt(i: int, host: str) -> PlannedTrial:
        return PlannedTrial(i, Cell(host, "d", "w", "exec"), False)

    async def go() -> None:
        health = HostHealth({"a": H(), "b": H()})
        s = Scheduler({"a": 1, "b": None}, 4, RunControl(), health)
        pending = deque([pt(1, "a"), pt(2, "a"), pt(3, "b")])
        assert s.next_with_room(pending) == 0
        await s._host_sems["a"].acquire()  # host a is full
        assert s.next_with_room(pending) == 2
        s._host_sems["a"].release()
        health.dropped("b", TrialError("action", ErrorKind.HOST_LOST, "gone"))
        s.in_flight["b"] = 1  # one trial of the lost host already waits for it
        assert s.next_with_room(deque([pt(3, "b"), pt(1, "a")])) == 1
        assert s.next_with_room(deque([pt(3, "b")])) is None
        empty: deque[PlannedTrial] = deque()
        assert Scheduler({}, 1, RunControl(), HostHealth({})).next_with_room(empty) is None

    asyncio.run(go())


def test_trials_start_in_the_plans_order_one_at_a_time() -> None:
    drv = FakeDriver()
    s, ev = run(prof(warmup=1, trials=4), drv, {"w": W_OK})
    ids = [e["trial"] for e in by_type(ev, "trial_start")]
    assert ids == sorted(ids) and len(ids) == 5
    # concurrency 1: each trial ends before the next starts
    order = [(e["type"], e["trial"]) for e in ev if e["type"] in ("trial_start", "trial_end")]
    assert order == [(t, i) for i in ids for t in ("trial_start", "trial_end")]


def test_pause_holds_scheduling_and_resume_goes_on() -> None:
    from rtax_tui.engine.session import Session

    drv = FakeDriver()
    events: list[dict] = []

    async def go() -> None:
        s = Session(
            prof(warmup=0, trials=3),
            sinks=[events.append],
            argv=["t"],
            drivers={("local", "local"): drv},
            workloads={"w": W_OK},
            host_facts={"local": {}},
        )
        s.pause()
        task = asyncio.ensure_future(s.run())
        await asyncio.sleep(0.1)
        assert by_type(events, "trial_start") == []
        s.resume()
        assert await task == "completed"

    asyncio.run(go())
    assert len(by_type(events, "trial_end")) == 3
