"""The coordinator: the header, the run's end, and an engine bug still ending the recording.

The engine's parts have their own tests: test_scheduling, test_lifecycle, test_health,
test_batches (and test_capacity with real cgroups), test_events, test_fold.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rtax_tui.engine.scheduling import Scheduler
from rtax_tui.engine.session import Session
from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver


def test_header_first_run_end_last_and_t_ns_second() -> None:
    s, ev = run(prof(warmup=0, trials=2), FakeDriver(), {"w": W_OK})
    assert list(ev[0])[:4] == ["type", "t_ns", "format", "run_id"]
    assert ev[0]["format"] == "rtax/1" and ev[0]["run_id"] == s.run_id
    assert all(list(e)[:2] == ["type", "t_ns"] for e in ev)
    assert ev[-1] == {"type": "run_end", "t_ns": ev[-1]["t_ns"], "status": "completed", "trials": 2}
    assert s.progress.planned == s.progress.done == 2 and s.progress.in_flight == 0


def test_an_engine_bug_still_tears_down_and_ends_the_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = [0]
    orig = Scheduler.next_with_room

    def broken(self: Scheduler, pending: Any) -> int | None:
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("a bug")
        return orig(self, pending)

    monkeypatch.setattr(Scheduler, "next_with_room", broken)
    drv = FakeDriver()
    drv.delays = {"action": 0.01}
    events: list[dict[str, Any]] = []
    p = prof(warmup=0, trials=5)
    s = Session(
        p,
        sinks=[events.append],
        argv=["t"],
        drivers={("local", "local"): drv},
        workloads={"w": W_OK},
        host_facts={"local": {}},
    )
    with pytest.raises(RuntimeError, match="a bug"):
        asyncio.run(s.run())
    end = events[-1]
    assert end["type"] == "run_end" and end["status"] == "failed"
    assert end["error"] == "RuntimeError('a bug')" and end["trials"] == 2
    assert len(by_type(events, "trial_end")) == 2 and drv.live == 0
