"""Ray nodes without a cluster: each node's engine a real `NodeEngine` in this process,
its actor's `m.remote(...)` a call of the engine's method (started at once, as Ray does),
each answer passed through an optional `tamper` (an attack on the wire). The tests of the
controller's side (tests/engine/test_ray_pools.py, tests/hostile/test_hostile_ray.py) use
it; the runs on a real cluster are tests/engine/test_ray_cluster.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rtax_tui.engine.nodeengine import NodeEngine
from rtax_tui.engine.profile import Profile
from rtax_tui.engine.raynodes import RayNodeHost, RaySpec
from rtax_tui.hosts.clocksync import ClockSync, RemoteClock

# (node, method, (args, answer)) -> the answer sent (or a coroutine of it); may raise
Tamper = Callable[[str, str, Any], Any]


class Call:
    """`m.remote(*a)`: started at once, as Ray does (awaited or not)."""

    def __init__(self, fn: Callable[..., Awaitable[Any]]) -> None:
        self.fn = fn

    def remote(self, *a: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.fn(*a))


class InProc:
    """A node's actor in this process: `actor.m.remote(*a)` is `engine.m(*a)`, its answer
    passed through `tamper`."""

    def __init__(self, name: str, engine: NodeEngine, tamper: Tamper | None) -> None:
        self._name, self._engine, self._tamper = name, engine, tamper

    def __getattr__(self, method: str) -> Call:
        fn = getattr(self._engine, method)

        async def call(*a: Any) -> Any:
            got = await fn(*a)
            if self._tamper is None:
                return got
            sent = self._tamper(self._name, method, (a, got))
            return await sent if asyncio.iscoroutine(sent) else sent

        return Call(call)


def exact_clock() -> RemoteClock:
    """A node's clock synchronised now, with no offset and a 1 us error."""
    c = RemoteClock()
    c.add(ClockSync(mono_ns=time.monotonic_ns(), offset_ns=0, err_ns=1000, rtt_ns=2000, samples=8))
    return c


def node_host(i: int, profile: Profile, engine: NodeEngine, tamper: Tamper | None) -> RayNodeHost:
    """The controller's host `ray-i` for an in-process node whose engine is `engine`."""
    name = f"ray-{i}"
    h = RayNodeHost(name, f"id{i}", RaySpec("ray", "auto"), profile)
    h.actor, h.clock = InProc(name, engine, tamper), exact_clock()
    return h
