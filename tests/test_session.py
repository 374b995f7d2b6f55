"""The engine against a deterministic driver double: phases, failures, timeouts, stop."""

from __future__ import annotations

import asyncio

from rtax_tui.core.model import Step, Timeouts, Workload
from rtax_tui.core.profile import Capacity, Profile
from rtax_tui.core.session import Session
from tests.fakes import FakeDriver

W_OK = Workload("w", (Step(("echo", "hi"), expect_out="hi"), Step(("true",))))
W_BAD = Workload("bad", (Step(("false",)),))
W_HANG = Workload("hang", (Step(("hang",), timeout_s=0.05),))


def run(profile: Profile, driver: FakeDriver, workloads: dict, stop_after: float | None = None):
    events: list[dict] = []

    async def go() -> Session:
        s = Session(
            profile,
            sinks=[events.append],
            argv=["test"],
            drivers={("local", d): driver for d in profile.drivers},
            workloads=workloads,
            host_facts={"local": {}},
        )
        if stop_after is not None:
            asyncio.get_running_loop().call_later(stop_after, s.stop)
        await s.run()
        return s

    return asyncio.run(go()), events


def prof(**kw) -> Profile:
    base = dict(
        name="p",
        path="p.toml",
        trials=3,
        warmup=1,
        drivers=("local",),
        workloads=("w",),
        channels=("exec",),
        custom_workloads={},
    )
    base.update(kw)
    return Profile(**base)


def by_type(events, t):
    return [e for e in events if e["type"] == t]


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
        "kind": "boom",
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


def test_stop_interrupts_and_tears_down():
    drv = FakeDriver()
    drv.delays = {"action": 0.02}
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


def test_capacity_barrier_passes_and_fails():
    drv = FakeDriver()
    cap = Capacity(size=4, batches=2, deadline_s=0.5)
    p = prof(warmup=0, capacity=cap, trials=1)
    # no cgroup budget in this test: limits are None, so the engine still creates one only
    # where cgroups exist; the fake driver ignores it.
    s, ev = run(p, drv, {"w": W_OK})
    bars = by_type(ev, "barrier")
    assert len(bars) == 2 and all(b["ok"] and b["arrived"] == 4 and b["size"] == 4 for b in bars)
    assert all(b["released"] == "all_arrived" for b in bars)
    assert len({e["batch"] for e in by_type(ev, "trial_start")}) == 2

    drv = FakeDriver()
    drv.hang_ready_for = {1}  # the second environment never arrives
    s, ev = run(
        prof(
            warmup=0,
            capacity=Capacity(size=4, batches=1, deadline_s=0.3),
            timeouts=Timeouts(ready=60),
        ),
        drv,
        {"w": W_OK},
    )
    bar = by_type(ev, "barrier")[0]
    assert bar["ok"] is False and bar["arrived"] == 3 and bar["released"] == "deadline"
    ends = by_type(ev, "trial_end")
    assert sorted(e["ok"] for e in ends) == [False, True, True, True]
    assert [e["error"]["kind"] for e in ends if not e["ok"]] == ["barrier_deadline"]
    assert drv.live == 0


def test_stop_during_a_capacity_batch_ends_quickly_and_tears_down():
    drv = FakeDriver()
    drv.delays = {"action": 0.2}
    p = prof(warmup=0, capacity=Capacity(size=6, batches=5, deadline_s=60))
    s, ev = run(p, drv, {"w": W_OK}, stop_after=0.1)
    assert by_type(ev, "run_end")[0]["status"] == "interrupted"
    bars = by_type(ev, "barrier")
    assert len(bars) == 1 and bars[0]["ok"] is False
    assert ev[-1]["t_ns"] < 5e9  # not held until the 60 s deadline
    assert drv.live == 0
    ends = by_type(ev, "trial_end")
    assert len(ends) == len(by_type(ev, "trial_start")) == 6
    assert all(e["error"]["kind"] == "interrupted" for e in ends)


class LosingDriver(FakeDriver):
    """Its substrate goes away at the third environment; `check()` fails until `back`."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0
        self.back = False

    async def check(self):
        from rtax_tui.drivers.base import Problem

        self.checks += 1
        return [] if self.back else [Problem("the daemon is gone", "start it")]

    def environment(self, spec, sub=None):
        env = super().environment(spec, sub)
        if self.created_count >= 2 and not self.back:
            from rtax_tui.core.model import SubstrateLost

            async def create():
                self.created_count += 1
                raise SubstrateLost("the daemon went away")

            env.create = create
        return env


def test_after_substrate_lost_later_trials_fail_fast_until_the_check_passes(monkeypatch):
    from rtax_tui.core import session as sess

    drv = LosingDriver()
    s, ev = run(prof(trials=8, warmup=0), drv, {"w": W_OK})
    ends = by_type(ev, "trial_end")
    assert [e["ok"] for e in ends] == [True, True] + [False] * 6
    assert all(e["error"]["kind"] == "substrate_lost" for e in ends[2:])
    assert "not attempted" in ends[3]["error"]["message"]
    assert drv.created_count == 3  # only the trial that met the loss tried to create
    assert drv.checks == 1  # every later trial came within LOST_RECHECK_S of that check
    for e in ends[3:]:
        phases = [p for p in by_type(ev, "phase") if p["trial"] == e["trial"]]
        assert [(p["name"], p["ok"]) for p in phases] == [
            ("create", False),
            ("orchestration", True),
        ]
    assert ev[-1]["type"] == "run_end" and ev[-1]["status"] == "completed"

    # Checked again each time (no wait), and once it passes trials run normally again.
    monkeypatch.setattr(sess, "LOST_RECHECK_S", 0.0)
    drv = LosingDriver()
    orig = drv.check

    async def check():
        if drv.checks >= 2:
            drv.back = True
        return await orig()

    drv.check = check
    s, ev = run(prof(trials=8, warmup=0), drv, {"w": W_OK})
    ends = by_type(ev, "trial_end")
    assert [e["ok"] for e in ends] == [True, True, False, False, False, True, True, True]
    assert drv.checks == 3
