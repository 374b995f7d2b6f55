"""The engine run against the deterministic driver double, for the engine's part tests."""

from __future__ import annotations

import asyncio
from typing import Any

from rtax_tui.engine.profile import Profile
from rtax_tui.engine.session import Session
from rtax_tui.model.spec import Step, Workload
from tests.fakes import FakeDriver

W_OK = Workload("w", (Step(("echo", "hi"), expect_out="hi"), Step(("true",))))
W_BAD = Workload("bad", (Step(("false",)),))
W_HANG = Workload("hang", (Step(("hang",), timeout_s=0.05),))


def run(
    profile: Profile,
    driver: FakeDriver,
    workloads: dict[str, Workload],
    stop_after: float | None = None,
) -> tuple[Session, list[dict[str, Any]]]:
    """Run `profile` on the local host through `driver`; (the session, its events)."""
    events: list[dict[str, Any]] = []

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


def prof(**kw: Any) -> Profile:
    base: dict[str, Any] = dict(
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


def by_type(events: list[dict[str, Any]], t: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == t]
