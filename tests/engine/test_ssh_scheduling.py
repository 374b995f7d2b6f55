"""The engine across hosts: a host's own concurrency limit, and a lost host, never hold
the other hosts' trials back (engine doubles for the hosts and drivers: no network)."""

from __future__ import annotations

import asyncio

from rtax_tui.engine.profile import Profile
from rtax_tui.engine.session import Session
from rtax_tui.model.spec import HostLost, Step, Workload
from tests.fakes import FakeDriver


class _Host:
    """A test double with SSHHost's engine-facing attributes."""

    def __init__(self, name: str, concurrency: int | None = None) -> None:
        self.name = name
        self.concurrency = concurrency
        self.lost = False
        self.connects = 0

    async def connect(self) -> None:
        self.connects += 1
        if self.lost:
            raise OSError("no route to host")


def _run(drivers: dict, trials: int, concurrency: int) -> tuple[Session, list[dict]]:
    prof = Profile(
        name="sched", path="test", trials=trials, warmup=0, concurrency=concurrency,
        drivers=("fake",), workloads=("w",), channels=("exec",),
    )  # fmt: skip
    events: list[dict] = []
    wl = {"w": Workload("w", (Step(("true",)),))}

    async def go() -> Session:
        s = Session(
            prof, sinks=[events.append], argv=["t"], drivers=drivers, workloads=wl,
            host_facts={h: {} for h, _ in drivers},
        )  # fmt: skip
        await s.run()
        return s

    return asyncio.run(go()), events


def _ends_by_host(events: list[dict]) -> dict[str, list[dict]]:
    host = {e["trial"]: e["host"] for e in events if e["type"] == "trial_start"}
    out: dict[str, list[dict]] = {}
    for e in events:
        if e["type"] == "trial_end":
            out.setdefault(host[e["trial"]], []).append(e)
    return out


def test_a_full_host_does_not_hold_the_others_back() -> None:
    slow, fast = FakeDriver(_Host("slow", concurrency=1)), FakeDriver(_Host("fast"))
    slow.delays["action"] = 0.3
    s, events = _run({("slow", "fake"): slow, ("fast", "fake"): fast}, trials=6, concurrency=3)
    ends = _ends_by_host(events)
    assert len(ends["slow"]) == len(ends["fast"]) == 6 and all(
        e["ok"] for e in events if e["type"] == "trial_end"
    )
    # every fast trial ended before the second slow one: none waited behind the slow host
    assert ends["fast"][-1]["t_ns"] < ends["slow"][1]["t_ns"]
    # the slow host never had two trials at once
    live = peak = 0
    host = {e["trial"]: e["host"] for e in events if e["type"] == "trial_start"}
    for e in events:
        if e["type"] in ("trial_start", "trial_end") and host[e["trial"]] == "slow":
            live += 1 if e["type"] == "trial_start" else -1
            peak = max(peak, live)
    assert peak == 1


def test_lost_host_fails_host_lost_retries_with_backoff_and_rejoins() -> None:
    h = _Host("flaky")
    drv = FakeDriver(h)
    calls = {"n": 0}
    orig = drv.environment

    def environment(spec, sub=None):
        env = orig(spec, sub)
        action = env.action

        async def dropping(step, timeout):
            calls["n"] += 1
            if calls["n"] == 1:
                h.lost = True
                asyncio.get_running_loop().call_later(1.2, setattr, h, "lost", False)
                raise HostLost("host flaky: ConnectionLost")
            return await action(step, timeout)

        env.action = dropping
        return env

    drv.environment = environment
    other = FakeDriver(_Host("steady"))
    other.delays["action"] = 0.05
    s, events = _run({("flaky", "fake"): drv, ("steady", "fake"): other}, trials=12, concurrency=2)
    ends = _ends_by_host(events)
    assert all(e["ok"] for e in ends["steady"]) and len(ends["steady"]) == 12
    flaky = ends["flaky"]
    assert len(flaky) == 12
    failed = [e for e in flaky if not e["ok"]]
    assert failed and all(e["error"]["kind"] == "host_lost" for e in failed)
    assert flaky[0]["error"]["kind"] == "host_lost"
    assert any(e["ok"] for e in flaky), "the host never rejoined"
    assert flaky[-1]["ok"]  # back for good once it answered
    assert h.connects >= 2  # reconnect attempts, spaced by the backoff (0.5 s, 1 s, ...)
    assert len(failed) <= h.connects  # one trial at a time waited for each attempt


def test_the_hosts_are_asked_for_their_facts_at_once() -> None:
    """A run's start does not grow with its hosts (bench/fleet_bench.py): the header's
    facts are asked of every host at once, each over its own connection."""
    asked: list[str] = []
    everyone = asyncio.Event()

    class _FactsHost(_Host):
        async def facts(self) -> dict:
            asked.append(self.name)
            if len(asked) == 3:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 10)  # asked in turn: the first waits alone
            return {"kernel": f"k-{self.name}"}

    drivers = {(n, "fake"): FakeDriver(_FactsHost(n)) for n in ("a", "b", "c")}
    prof = Profile(
        name="facts", path="test", trials=1, warmup=0, concurrency=3,
        drivers=("fake",), workloads=("w",), channels=("exec",),
    )  # fmt: skip
    events: list[dict] = []
    wl = {"w": Workload("w", (Step(("true",)),))}

    async def go() -> None:
        s = Session(prof, sinks=[events.append], argv=["t"], drivers=drivers, workloads=wl)
        await s.run()

    asyncio.run(go())
    hosts = events[0]["hosts"]
    assert list(hosts) == ["a", "b", "c"]  # in the hosts' order, whatever order they answered
    assert [hosts[n].get("kernel") for n in "abc"] == ["k-a", "k-b", "k-c"], hosts
    assert all("fake" in hosts[n]["drivers"] for n in "abc")
