"""Capacity batches: the barrier, its deadline, a stop during a batch."""

from __future__ import annotations

import asyncio

from rtax_tui.engine.profile import Capacity
from rtax_tui.model.spec import Timeouts
from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver


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


# -- the barrier alone ---------------------------------------------------------
def test_barrier_releases_when_all_arrived_or_settled_or_at_the_deadline() -> None:
    from rtax_tui.engine.capacity import Barrier

    async def go() -> None:
        b = Barrier(2)
        b.arrive(1)
        assert b.how is None and not b.released.is_set()
        b.arrive(2)
        assert b.how == "all_arrived" and b.released.is_set() and not b.expired

        b = Barrier(2)
        b.arrive(1)
        b.fail(2)
        assert b.how == "settled" and b.settled == {1, 2}

        b = Barrier(3)
        b.arrive(1)
        b.expire()
        assert b.how == "deadline" and b.expired and b.released.is_set()
        b.arrive(2)
        b.fail(3)  # late: the release stays the deadline's
        assert b.how == "deadline"

    asyncio.run(go())


def test_a_batch_budget_cgroup_is_made_and_removed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With `capacity.cpus`, each batch runs under its own budget cgroup, gone after it."""
    from rtax_tui.engine import capacity

    made: list[str] = []
    removed: list[str] = []
    parents: list[str | None] = []

    class FakeCgroup:
        def __init__(self, name: str) -> None:
            self.relpath = f"rtax/{name}"

        @staticmethod
        def relpath_of(name: str) -> str:
            return f"rtax/{name}"

        @classmethod
        def create(cls, name: str, **kw: object) -> FakeCgroup:
            made.append(name)
            return cls(name)

        def remove(self) -> None:
            removed.append(self.relpath)

        def reset_peak(self) -> None:
            pass

        def cpu_usage_ns(self) -> int:
            return 0

        def memory_peak_bytes(self) -> int:
            return 1 << 20

        def oom_kills_by_dir(self) -> dict[str, int]:
            return {}

    class Reaper:
        def add_cgroup(self, rel: str) -> None:
            pass

        def drop_cgroup(self, rel: str) -> None:
            pass

    monkeypatch.setattr(capacity, "Cgroup", FakeCgroup)
    monkeypatch.setattr(capacity.reaper, "current", lambda: Reaper())
    drv = FakeDriver()
    orig = drv.environment

    def environment(spec, sub=None):  # type: ignore[no-untyped-def]
        parents.append(spec.cgroup_parent)
        return orig(spec, sub)

    drv.environment = environment  # type: ignore[method-assign]
    p = prof(warmup=0, capacity=Capacity(size=2, batches=2, deadline_s=5, cpus=1.0))
    s, ev = run(p, drv, {"w": W_OK})
    assert len(made) == 2 and all(n.startswith("batch-") for n in made)
    assert removed == [f"rtax/{n}" for n in made]
    assert parents == [f"rtax/{made[0]}"] * 2 + [f"rtax/{made[1]}"] * 2
    assert all(b["ok"] for b in by_type(ev, "barrier"))


def test_a_thousand_environments_pass_one_barrier_and_all_let_go():
    drv = FakeDriver()
    p = prof(warmup=0, capacity=Capacity(size=1000, batches=1, deadline_s=60))
    s, ev = run(p, drv, {"w": W_OK})
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] and bar["arrived"] == 1000 and bar["released"] == "all_arrived"
    assert bar["release_dur_ns"] > 0  # the last of the 1,000 let go after the decision
    assert bar["mem_peak_bytes"] is None and bar["oom_kills"] is None  # no budget cgroup
    assert len(by_type(ev, "trial_end")) == 1000 and drv.live == 0


def test_a_release_step_runs_through_the_channel_after_the_barrier():
    from rtax_tui.model.spec import Step, Workload

    drv = FakeDriver()
    held = Workload("h", (Step(("echo", "held"), expect_out="held"),))
    held = Workload("h", held.steps, release=Step(("echo", "released"), expect_out="released"))
    s, ev = run(
        prof(warmup=0, capacity=Capacity(size=3, batches=1, deadline_s=5)), drv, {"w": held}
    )
    phases = [e for e in by_type(ev, "phase") if e["name"].startswith("barrier.")]
    assert [e["name"] for e in phases].count("barrier.release") == 3
    # every environment waits for the release before its release step
    order = [e["name"] for e in phases]
    assert order.index("barrier.release") > max(
        i for i, n in enumerate(order) if n == "barrier.wait"
    )
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] and bar["release_dur_ns"] >= max(
        e["dur_ns"] for e in phases if e["name"] == "barrier.release"
    )

    # a release that finds nothing held: the trial fails and does not count as arrived
    lost = Workload("h", held.steps, release=Step(("false",)))
    s, ev = run(
        prof(warmup=0, capacity=Capacity(size=2, batches=1, deadline_s=5)), drv, {"w": lost}
    )
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] is False and bar["arrived"] == 0
    assert {e["error"]["phase"] for e in by_type(ev, "trial_end")} == {"barrier.release"}


def test_every_woken_environment_lets_go_before_any_teardown_starts(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Without a release step, the release wakes N trials: each lets go (and records its
    `barrier.wait`) before the first teardown begins, so that no teardown's start lies
    inside the batch's release latency."""
    from rtax_tui.engine import capacity
    from tests.fakes import FakeEnvironment

    log: list[str] = []
    let_go = capacity.Barrier.let_go

    def logged_let_go(self, trial, held=True):  # type: ignore[no-untyped-def]
        if trial in self.holding:
            log.append("let_go")
        let_go(self, trial, held)

    async def teardown(self) -> None:  # type: ignore[no-untyped-def]
        log.append("teardown")
        self.fd.live -= 1

    monkeypatch.setattr(capacity.Barrier, "let_go", logged_let_go)
    monkeypatch.setattr(FakeEnvironment, "teardown", teardown)
    drv = FakeDriver()
    s, ev = run(prof(warmup=0, capacity=Capacity(size=50, batches=1, deadline_s=30)), drv,
                {"w": W_OK})  # fmt: skip
    assert log == ["let_go"] * 50 + ["teardown"] * 50
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] and bar["arrived"] == 50 and drv.live == 0
    # every `barrier.wait` is recorded before the first teardown
    names = [e["name"] for e in by_type(ev, "phase") if e["name"] in ("barrier.wait", "teardown")]
    assert names == ["barrier.wait"] * 50 + ["teardown"] * 50


def _held_release(release_argv: tuple[str, ...] = ("echo", "released")):  # type: ignore[no-untyped-def]
    from rtax_tui.model.spec import Step, Workload

    steps = (Step(("echo", "held"), expect_out="held"),)
    return Workload("h", steps, release=Step(release_argv, expect_out="released"))


def test_release_steps_go_out_at_most_release_concurrency_at_a_time(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The release steps run in parallel, never more than `release_concurrency` at once;
    the barrier still waits for the last of them, and a failed one fails its trial only
    (its slot goes to the next)."""
    from tests.fakes import FakeEnvironment

    flight = {"now": 0, "max": 0, "done": 0}
    action = FakeEnvironment.action

    async def counted(self, step, timeout):  # type: ignore[no-untyped-def]
        if step.argv[-1] != "released" and step.argv[0] != "false":
            return await action(self, step, timeout)
        flight["now"] += 1
        flight["max"] = max(flight["max"], flight["now"])
        try:
            await asyncio.sleep(0.01)
            return await action(self, step, timeout)
        finally:
            flight["now"] -= 1
            flight["done"] += 1

    monkeypatch.setattr(FakeEnvironment, "action", counted)
    drv = FakeDriver()
    cap = Capacity(size=12, batches=1, deadline_s=30, release_concurrency=3)
    s, ev = run(prof(warmup=0, capacity=cap), drv, {"w": _held_release()})
    assert flight == {"now": 0, "max": 3, "done": 12}
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] and bar["arrived"] == 12
    releases = [e for e in by_type(ev, "phase") if e["name"] == "barrier.release"]
    assert len(releases) == 12 and all(e["ok"] for e in releases)
    # 12 releases of 10 ms, 3 at a time: the last let go after 4 rounds at least
    assert bar["release_dur_ns"] >= 4 * 10_000_000
    assert bar["release_dur_ns"] >= max(e["dur_ns"] for e in releases)
    # per trial: its wait, then its release; the batch's event after every release
    for t in {e["trial"] for e in releases}:
        mine = [e["name"] for e in by_type(ev, "phase") if e["trial"] == t]
        assert mine.index("barrier.wait") + 1 == mine.index("barrier.release")
    kinds = [e["type"] for e in ev]
    last_release = max(i for i, e in enumerate(ev) if e.get("name") == "barrier.release")
    assert kinds.index("barrier") > last_release
    assert drv.live == 0

    # one environment's release finds nothing held: that trial fails, the others pass
    flight.update(now=0, max=0, done=0)
    drv = FakeDriver()
    seen: list[int] = []
    orig = drv.environment

    def environment(spec, sub=None):  # type: ignore[no-untyped-def]
        env = orig(spec, sub)
        seen.append(0)
        if len(seen) == 2:  # the second environment lost what it held

            async def lost(step, timeout):  # type: ignore[no-untyped-def]
                from rtax_tui.model.spec import Step

                if step.argv[-1] == "released":
                    step = Step(("false",))
                return await counted(env, step, timeout)

            env.action = lost  # type: ignore[method-assign]
        return env

    drv.environment = environment  # type: ignore[method-assign]
    cap = Capacity(size=4, batches=1, deadline_s=30, release_concurrency=1)
    s, ev = run(prof(warmup=0, capacity=cap), drv, {"w": _held_release()})
    assert flight["max"] == 1 and flight["done"] == 4
    [bar] = by_type(ev, "barrier")
    assert bar["ok"] is False and bar["arrived"] == 3
    ends = by_type(ev, "trial_end")
    assert sorted(e["ok"] for e in ends) == [False, True, True, True]
    assert [e["error"]["phase"] for e in ends if not e["ok"]] == ["barrier.release"]
    assert drv.live == 0


def test_a_stop_while_waiting_for_a_release_slot_sends_no_release() -> None:
    """A stop during the release: the trials still waiting for a slot send no release
    step; every environment is torn down and the run ends."""
    drv = FakeDriver()
    drv.delays = {"action": 0.0}
    slow = _held_release(("hang", "released"))  # the release steps never come back
    cap = Capacity(size=5, batches=1, deadline_s=30, release_concurrency=2)
    s, ev = run(prof(warmup=0, capacity=cap), drv, {"w": slow}, stop_after=0.3)
    assert by_type(ev, "run_end")[0]["status"] == "interrupted"
    releases = [e for e in by_type(ev, "phase") if e["name"] == "barrier.release"]
    assert len(releases) == 2 and not any(e["ok"] for e in releases)  # the 2 in flight
    assert len(by_type(ev, "trial_end")) == 5 and drv.live == 0
    assert ev[-1]["t_ns"] < 5e9
