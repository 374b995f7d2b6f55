"""The driver contract, one suite over every registered driver (plugins included).

Each driver that can run on this machine goes through the same tests on each of its
channels (conftest starts its daemon and builds its images first); one that cannot is
skipped with its own `check()`'s reason. What a driver must do (drivers/base.py):
create, ready, actions and teardown in order; a failed action leaves the channel
usable; a hanging action (with a child in the background) times out, the shell
channel is not reused after it, the exec channel is, and nothing of it survives
teardown; a phase cancelled at any point still tears down; teardown twice is
harmless; nothing of the environment is left afterwards (processes, cgroups,
workspaces, containers, VMs); `cleanup(label)` removes what an environment
abandoned. Per-driver test files keep only what is specific. A driver whose option
picks among several ways of running (swerex's `deployment`) goes through the suite once
per way, as `name[value]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import pytest
from rtax_tui.drivers import Driver, driver_class, get_driver, names

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, PhaseFailure, Step, Workload
from tests.leftovers import leftovers
from tests.procs import STREAM_FLAGS, nonblocking_streams
from tests.services import backend_fixtures

CHANNELS = ("exec", "shell")
_why: dict[str, str | None] = {}


def _class(name: str) -> type[Driver] | None:
    try:
        return driver_class(name)
    except Exception:
        return None  # cannot be loaded here (an extra missing): `_problem` says why


def _params() -> list[str]:
    """Every registered driver, once per value of the option that picks how it runs
    (`Driver.variants`), as `name[value]`."""
    out = []
    for name in names():
        cls = _class(name)
        if cls is not None and cls.variants is not None:
            out += [f"{name}[{v}]" for v in cls.variants[1]]
        else:
            out.append(name)
    return out


def _split(param: str) -> tuple[str, dict[str, str]]:
    """`swerex[remote]` -> ("swerex", {"deployment": "remote"})."""
    name, _, value = param.partition("[")
    cls = _class(name)
    if not value or cls is None or cls.variants is None:
        return name, {}
    return name, {cls.variants[0]: value.rstrip("]")}


def _problem(param: str) -> str | None:
    if param not in _why:
        try:
            name, options = _split(param)
            probs = asyncio.run(get_driver(name, LocalHost(), options).check())
            _why[param] = "; ".join(f"{p.reason} (fix: {p.fix})" for p in probs) or None
        except Exception as exc:
            _why[param] = f"{type(exc).__name__}: {exc}"
    return _why[param]


@pytest.fixture(params=_params())
def driver_name(request: pytest.FixtureRequest) -> str:
    """Every registered driver, its daemon and images up (conftest); skipped, with the
    driver's reason, where it can't run."""
    cls = _class(_split(request.param)[0])
    for fixture in backend_fixtures(cls) if cls is not None else ():
        request.getfixturevalue(fixture)
    why = _problem(request.param)
    if why is not None:
        pytest.skip(f"{request.param} cannot run here: {why}")
    return str(request.param)


@pytest.fixture(params=CHANNELS)
def channel(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _label() -> str:
    return f"ct{os.getpid()}{os.urandom(3).hex()}"


def _driver(param: str, channel: str) -> Driver:
    name, options = _split(param)
    drv = get_driver(name, LocalHost(), options)
    if channel not in drv.channels:
        pytest.skip(f"{name} has no {channel} channel")
    return drv


def _spec(param: str, channel: str, label: str) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", _split(param)[0], "contract", channel),
        workload=Workload("contract", (Step(("true",)),)),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        label=label,
    )


def _left(name: str, label: str) -> list[str]:
    cls = _class(_split(name)[0])
    return leftovers(label, leaves=cls.leaves if cls is not None else frozenset())


async def _settled(name: str, label: str, within_s: float = 15) -> list[str]:
    """Leftovers, given a moment for asynchronous removals (an engine's, a VM's)."""
    deadline = time.monotonic() + within_s
    left = _left(name, label)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        left = _left(name, label)
    return left


async def act(env, *argv: str, timeout: float = 60):
    return await env.action(Step(tuple(argv)), timeout)


def test_lifecycle_failed_action_and_double_teardown(driver_name, channel):
    drv = _driver(driver_name, channel)
    label = _label()

    async def run() -> None:
        env = drv.environment(_spec(driver_name, channel, label))
        try:
            await env.create()
            await env.ready()
            r = await act(env, "sh", "-c", "echo kept > rtax-contract && echo out")
            assert (r.rc, r.output) == (0, b"out\n"), r
            r = await act(env, "cat", "rtax-contract")  # the workspace persists
            assert (r.rc, r.output) == (0, b"kept\n"), r
            r = await act(env, "sh", "-c", "echo err >&2; exit 3")  # a failed action...
            assert r.rc == 3 and b"err" in r.output, r
            r = await act(env, "echo", "still")  # ...leaves the channel usable
            assert (r.rc, r.output) == (0, b"still\n"), r
            # the step's stdout and stderr block, as a program expects of them (gVisor's
            # exec made the second of two copies of one pipe non-blocking: writes failed
            # with EAGAIN when the reader was behind, and output was lost)
            r = await act(env, *STREAM_FLAGS)
            assert r.rc == 0 and nonblocking_streams(r.output) == [False, False], r
        finally:
            await env.teardown()
        await env.teardown()  # twice: harmless
        assert await _settled(driver_name, label) == []

    asyncio.run(run())


def test_output_past_the_limit_is_read_counted_and_not_kept(driver_name, channel, monkeypatch):
    """Issue 19: rtax keeps the first OUTPUT_LIMIT bytes of an action's output, reads the
    rest to its end (the step is not blocked and exits on its own, its own status
    recorded), counts it as dropped, and the channel goes on in step."""
    from rtax_tui.model import spec as model

    limit = 1 << 20
    monkeypatch.setattr(model, "OUTPUT_LIMIT", limit)
    # readers hold less than the output: a shell's or agent's reader is taken as it fills
    monkeypatch.setattr(model, "READ_LIMIT", 256 << 10)
    drv = _driver(driver_name, channel)
    label = _label()

    async def run() -> None:
        env = drv.environment(_spec(driver_name, channel, label))
        try:
            await env.create()
            await env.ready()
            # 8 MiB through SWE-ReX's shell took 56 s on a loaded 2-core machine: a
            # behaviour test, so a generous timeout (bench/output_rss.py times it)
            big = "head -c 8388608 /dev/zero; echo tail; exit 3"
            r = await act(env, "sh", "-c", big, timeout=240)
            assert r.rc == 3, (r.rc, len(r.output), r.dropped)
            assert r.output == bytes(limit), (len(r.output), r.output[-20:])
            assert r.dropped == (8 << 20) - limit + len(b"tail\n"), r.dropped
            r = await act(env, "echo", "ok")  # in step: the next action's own answer
            assert (r.rc, r.output, r.dropped) == (0, b"ok\n", 0), r
            # under the limit: kept whole, exactly
            r = await act(env, "sh", "-c", "head -c 1048575 /dev/zero; printf x; exit 4")
            assert (r.rc, r.output, r.dropped) == (4, bytes(limit - 1) + b"x", 0), r.dropped
        finally:
            await env.teardown()
        assert await _settled(driver_name, label) == []

    asyncio.run(run())


def test_hanging_action_times_out_and_tears_down(driver_name, channel):
    drv = _driver(driver_name, channel)
    label = _label()

    async def run() -> None:
        env = drv.environment(_spec(driver_name, channel, label))
        try:
            await env.create()
            await env.ready()
            # as the engine does it (lifecycle.timed): the phase inside asyncio.timeout, the
            # timeout also passed to the driver; the driver must give up promptly either way
            t = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    await act(env, "sh", "-c", "sleep 300 & sleep 300", timeout=1.0)
            assert time.monotonic() - t < 15
            if channel == "shell":  # out of step now: never reused (the stale-channel rule)
                with pytest.raises(PhaseFailure):
                    await act(env, "true")
            elif not drv.exec_reusable_after_timeout:  # one stream for every action: stale
                with pytest.raises(PhaseFailure):
                    await act(env, "true")
            else:  # a new process per action: the next one runs
                assert (await act(env, "sh", "-c", "echo ok")).output == b"ok\n"
        finally:
            t = time.monotonic()
            await env.teardown()
            assert time.monotonic() - t < 60
        assert await _settled(driver_name, label) == []

    asyncio.run(run())


async def timed_act(env, delay: float) -> None:
    """A `sleep 30` cancelled after `delay`, as the engine times an action
    (lifecycle.timed): inside asyncio.timeout, the timeout also passed to the driver. A
    driver that leaves the timeout to the engine (a VM's agent) is cancelled too, rather
    than running the step to its end."""
    async with asyncio.timeout(delay):
        await act(env, "sleep", "30", timeout=delay)


@pytest.mark.parametrize("phase", ["create", "ready", "action"])
def test_a_cancelled_phase_still_tears_down(driver_name, channel, phase):
    drv = _driver(driver_name, channel)
    label = _label()
    # small delays land in every await of create (workspace, cgroup, the spawn and its
    # pipes), of ready and of an action's spawn; a VM boots in seconds, so fewer there
    if drv.boots_a_kernel:
        delays = [0.0, 0.05] if channel == "exec" or phase == "action" else [0.05]
    else:
        delays = [0.0, 0.0005, 0.002, 0.005, 0.02, 0.1]

    # a VM's actions are cancelled one after another in one guest (a boot under TCG is
    # half a minute; the guest's teardown then answers for every cancelled action's leftovers)
    one_guest = drv.boots_a_kernel and phase == "action"

    async def run() -> None:
        if one_guest:
            env = drv.environment(_spec(driver_name, channel, label))
            await env.create()
            await env.ready()
            for delay in delays:
                with contextlib.suppress(TimeoutError, PhaseFailure):
                    await timed_act(env, delay)
            await asyncio.wait_for(env.teardown(), 60)
            assert await _settled(driver_name, label) == [], (phase, delays)
            return
        for delay in delays:
            env = drv.environment(_spec(driver_name, channel, label))
            try:
                if phase == "create":
                    await asyncio.wait_for(env.create(), delay)
                elif phase == "ready":
                    await env.create()
                    await asyncio.wait_for(env.ready(), delay)
                else:
                    await env.create()
                    await env.ready()
                    await timed_act(env, delay)
            except TimeoutError:
                pass
            await asyncio.wait_for(env.teardown(), 60)
            assert await _settled(driver_name, label) == [], (phase, delay)

    asyncio.run(run())


def test_cleanup_removes_an_abandoned_environment(driver_name):
    drv = _driver(driver_name, "exec")
    label = _label()

    async def run() -> None:
        env = drv.environment(_spec(driver_name, "exec", label))
        await env.create()
        await env.ready()
        assert _left(driver_name, label), "the live environment should be visible"
        n = await drv.cleanup(label)  # as `rtax cleanup --run` after a crash
        assert n >= 1
        assert await _settled(driver_name, label) == []
        assert await drv.cleanup(label) == 0
        await env.teardown()  # still safe afterwards

    asyncio.run(run())


def test_pool_acquire_release_and_every_reset(driver_name, channel):
    """Warm pools (engine.pool): for each reset the driver offers on this channel, a pool of
    one hands out an environment, takes it back, resets (or replaces) it, hands it out
    again, and leaves nothing when closed; every in-place reset passes the probe's
    `pool_reuse_clean` (a planting trial, then a checking trial on the same environment)."""
    from rtax_tui.engine.pool import EnvPool
    from rtax_tui.engine.poolspec import PoolSpec
    from rtax_tui.engine.probe.reuse import check_reuse
    from rtax_tui.model.events import Emitter
    from rtax_tui.model.spec import Timeouts

    drv = _driver(driver_name, channel)
    resets = [r for r, why in drv.pool_resets(channel).items() if why is None]
    assert "recreate" in resets

    async def run(reset: str) -> None:
        label = _label()
        spec = _spec(driver_name, channel, label)
        spec = EnvSpec(spec.cell, spec.workload, spec.limits, label=label)
        evs: list[dict] = []
        pool = EnvPool(
            Cell("local", driver_name, "contract", channel, "pool"),
            drv,
            spec,
            PoolSpec(size=1, reset=reset, refill="eager"),
            Timeouts(create=120, ready=120, teardown=60),
            Emitter([evs.append]),
        )
        pool.start()
        try:
            seen = []
            for i in range(2):
                pe, _ = await pool.acquire()
                seen.append(pe.n)
                r = await act(pe.env, "sh", "-c", f"echo {i} > mark; cat mark")
                assert (r.rc, r.output) == (0, f"{i}\n".encode()), r
                pool.release(pe, True)
            if reset == "recreate":
                assert seen[0] != seen[1]
            else:
                assert seen[0] == seen[1], evs
        finally:
            await pool.close()
        assert all(e["ok"] for e in evs if e["op"] != "create"), evs
        ops = [e["op"] for e in evs]
        assert ops.count("teardown") == sum(1 for e in evs if e["op"] == "create"), evs
        assert await _settled(driver_name, label) == []
        if reset != "recreate":
            got = await check_reuse(drv, "local", channel, reset, _spec("x", "exec", "x").limits)
            assert got.result == "held", got

    for reset in resets:
        asyncio.run(run(reset))
