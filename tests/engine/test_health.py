"""Substrate and host health: lost drivers rechecked, lost hosts reconnected."""

from __future__ import annotations

import asyncio

from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver


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
            from rtax_tui.model.spec import SubstrateLost

            async def create():
                self.created_count += 1
                raise SubstrateLost("the daemon went away")

            env.create = create
        return env


def test_after_substrate_lost_later_trials_fail_fast_until_the_check_passes(monkeypatch):
    from rtax_tui.engine import health as sess

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


# -- lost hosts: decided by kind, reconnected with backoff ---------------------
class _Host:
    def __init__(self, lost: bool = False) -> None:
        self.lost = lost
        self.connects = 0
        self.up = False

    async def connect(self) -> None:
        self.connects += 1
        if not self.up:
            raise ConnectionError("no route")


def test_a_dropped_host_is_decided_by_kind_never_by_message() -> None:
    from rtax_tui.engine.health import HostHealth
    from rtax_tui.model.errors import ErrorKind, TrialError

    hosts = {"local": _Host(lost=True), "far": _Host()}
    h = HostHealth(hosts)
    # a driver's own message that happens to read like the engine's: still a drop
    err = TrialError("action", ErrorKind.HOST_LOST, "host far is lost (its own words)")
    assert not h.dropped("local", err)  # the local host never drops
    assert not h.dropped("far", TrialError("action", "boom", "x"))  # not lost, not host_lost
    assert h.dropped("far", err) and h.is_lost("far")
    # a trial refused because the reconnect failed: the host is marked already
    h2 = HostHealth(hosts)
    refused = TrialError("create", ErrorKind.HOST_LOST, "whatever", reconnect_failed=True)
    assert h2.dropped("far", refused) and not h2.is_lost("far")
    # any failure on a host whose connection is known lost counts as a drop
    hosts["far"].lost = True
    assert HostHealth(hosts).dropped("far", TrialError("create", "boom", "x"))


def test_reconnect_backs_off_then_rejoins(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rtax_tui.engine import health
    from rtax_tui.model.errors import ErrorKind, TrialError

    monkeypatch.setattr(health, "HOST_RETRY_MIN_S", 0.0)
    far = _Host()
    h = health.HostHealth({"far": far})
    h.dropped("far", TrialError("action", ErrorKind.HOST_LOST, "dropped"))

    async def go() -> None:
        st = h._lost["far"]
        st.delay = 0.001
        why = await h.back("far")
        assert why is not None and why.startswith("host far is lost (no route)")
        assert st.delay == 0.002 and h.is_lost("far")
        for _ in range(20):
            await h.back("far")
        assert st.delay == health.HOST_RETRY_MAX_S  # doubled up to the bound
        st.delay, st.next_try = 0.001, 0.0
        far.up = True
        assert await h.back("far") is None and not h.is_lost("far") and not h.any_lost

    monkeypatch.setattr(health, "HOST_RETRY_MAX_S", 0.01)
    asyncio.run(go())
