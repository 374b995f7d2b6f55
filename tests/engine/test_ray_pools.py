"""Warm pools on Ray nodes without a cluster (engine.nodeengine, engine.raynodes): a
whole `Session` over two nodes whose engines are real `NodeEngine`s in this process
(each actor's `m.remote(...)` a call of its method), each keeping its own pools, the
controller checking and recording their events. The run on a real cluster is
tests/engine/test_ray_cluster.py's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from rtax_tui.drivers import get_driver

from rtax_tui.engine.nodeengine import NodeEngine
from rtax_tui.engine.plan import build_plan
from rtax_tui.engine.profile import Profile, load_profile
from rtax_tui.engine.raynodes import NodePools, RayNodeHost, RaySpec
from rtax_tui.engine.runner import resolve_workloads
from rtax_tui.engine.session import Session
from tests.raynodeinproc import Tamper, node_host

# a hostile workload: it leaves a mark where the next trial of the environment would find
# it (the workspace, the home, /tmp) and fails when it finds an earlier trial's
PERSIST = (
    "import os,sys,tempfile\n"
    "marks=[os.path.join(d,'.rtax-mark') for d in (os.getcwd(),os.path.expanduser('~'),"
    "tempfile.gettempdir())]\n"
    "found=[m for m in marks if os.path.exists(m)]\n"
    "for m in marks:\n"
    "    try: open(m,'w').write('x')\n"
    "    except OSError: pass\n"
    "sys.exit(3 if found else 0)\n"
)


def _profile(tmp: Path, driver: str, reset: str, trials: int) -> Profile:
    path = tmp / "pool.toml"
    path.write_text(
        f"""
[run]
hosts = ["local"]
drivers = ["{driver}"]
workloads = ["persist"]
channels = ["exec"]
modes = ["pool"]
trials = {trials}
warmup = 0
concurrency = 2

[pool]
size = 1
reset = "{reset}"

[timeouts]
create = 20
ready = 20
action = 20
teardown = 20

[workloads.persist]
steps = [{{ argv = ["python3", "-c", {json.dumps(PERSIST)}] }}]
"""
    )
    return load_profile(str(path))


def pooled_run(
    tmp: Path,
    driver: str,
    reset: str,
    *,
    trials: int = 3,
    tamper: Tamper | None = None,
    stop_at: str | None = None,
) -> tuple[list[dict[str, Any]], Session, list[NodeEngine]]:
    """One pooled run over 2 in-process nodes; the events recorded, the session.
    `stop_at`: the run is stopped (as Ctrl-C does) at the first event of that type."""
    profile = _profile(tmp, driver, reset, trials)
    workloads = resolve_workloads(profile)
    got: list[dict[str, Any]] = []
    engines: list[NodeEngine] = []

    async def go() -> Session:
        hosts: dict[str, RayNodeHost] = {}
        for i in range(2):
            eng = NodeEngine(f"ray-{i}", profile, profile.drivers)
            engines.append(eng)
            hosts[f"ray-{i}"] = node_host(i, profile, eng, tamper)
        drivers = {(h, driver): get_driver(driver, host, {}) for h, host in hosts.items()}

        def sink(ev: dict[str, Any]) -> None:
            got.append(ev)
            if ev["type"] == stop_at:
                session.stop()

        session = Session(
            profile, sinks=[sink], argv=[], drivers=drivers, workloads=workloads,
            hosts=dict(hosts),
        )  # fmt: skip
        try:
            async with asyncio.timeout(120):
                await session.run()
        finally:
            for eng in engines:
                if hosts[eng.name].dead is not None:  # a lost node's: its reaper's, not here
                    await eng.close_pools()
                await eng.close()
        return session

    return got, asyncio.run(go()), engines


def _check_against_plan(got: list[dict[str, Any]], session: Session, reset: str) -> None:
    plan = build_plan(session.cells, 3, 0, session.profile.seed)
    starts = {e["trial"]: e for e in got if e["type"] == "trial_start"}
    ends = {e["trial"]: e for e in got if e["type"] == "trial_end"}
    assert sorted(starts) == sorted(pt.id for pt in plan) == sorted(ends)
    for pt in plan:
        assert starts[pt.id]["host"] == pt.cell.host and starts[pt.id]["cell"] == pt.cell.id
        assert ends[pt.id]["ok"] and ends[pt.id]["valid"], ends[pt.id]
        names = [e["name"] for e in got if e["type"] == "phase" and e["trial"] == pt.id]
        assert "acquire" in names and "release" in names and "create" not in names, names
    pools = [e for e in got if e["type"] == "pool"]
    header = next(e for e in got if e["type"] == "run")
    for cell in session.cells:
        assert header["profile"]["pool"]["resets"][cell.id]["reset"] == reset
        mine = [e for e in pools if e["cell"] == cell.id]
        assert {e["host"] for e in mine} == {cell.host}
        envs = {e["env"] for e in mine}
        for n in envs:  # each environment made once and torn down once, nothing left
            ops = [e["op"] for e in mine if e["env"] == n]
            assert ops[0] == "create" and ops[-1] == "teardown", ops
            assert ops.count("create") == 1 and ops.count("teardown") == 1, ops
        resets = sum(e["op"] == "reset" and e["ok"] for e in mine)
        creates = sum(e["op"] == "create" and e["ok"] for e in mine)
        if reset == "clean":  # one environment, reset after each of its 3 trials
            assert (len(envs), resets) == (1, 3), [(e["op"], e["env"]) for e in mine]
        else:
            assert resets == 0 and creates >= 3
    t_end = next(e for e in got if e["type"] == "run_end")
    assert t_end["status"] == "completed"


def _no_environment_left(engines: list[NodeEngine]) -> None:
    for eng in engines:
        assert eng.pools is not None
        for p in eng.pools.pools.values():
            assert p.closed and not p.ready and not p.in_use and not p.pending


def test_pooled_trials_over_two_nodes_each_keeping_its_own_pool(tmp_path: Path) -> None:
    """Fails before: `rtax run` refused pools on Ray nodes, and a node's engine had none
    (its pooled trials failed: "a pooled cell without pools")."""
    got, session, engines = pooled_run(tmp_path, "local", "recreate")
    assert {c.host for c in session.cells} == {"ray-0", "ray-1"}
    _check_against_plan(got, session, "recreate")
    _no_environment_left(engines)


def test_a_clean_reset_on_a_node_leaves_nothing_to_the_next_trial(tmp_path: Path) -> None:
    """The hostile workload marks its environment; `clean` on a node is the local one
    (stage replaces the sandbox), so the next trial in it finds nothing."""
    from rtax_tui.hosts import LocalHost

    drv = get_driver("stage", LocalHost(), {})
    if asyncio.run(drv.check()):
        pytest.skip("stage cannot run here")
    got, session, engines = pooled_run(tmp_path, "stage", "clean")
    _check_against_plan(got, session, "clean")
    _no_environment_left(engines)


def _forge(op: str) -> Tamper:
    """ray-1 claims, with every pool answer, one more `op` of its first environment."""

    def tamper(node: str, method: str, sent: Any) -> Any:
        got = sent[1]
        if node != "ray-1" or method not in ("pool_news", "close_pools") or not got:
            return got
        return [*got, dict(got[-1], op=op, ok=True, env=1)]

    return tamper


def test_a_node_claiming_a_reset_it_did_not_do_is_not_recorded(tmp_path: Path) -> None:
    """ray-1's pool claims a reset under `recreate` (which never resets): its pool events
    are not recorded, its trial fails saying why, the node is lost; ray-0 goes on."""
    got, session, _ = pooled_run(tmp_path, "local", "recreate", tamper=_forge("reset"))
    ends = {e["trial"]: e for e in got if e["type"] == "trial_end"}
    by_host = {e["trial"]: e["host"] for e in got if e["type"] == "trial_start"}
    ok0 = [t for t, h in by_host.items() if h == "ray-0" and ends[t]["ok"]]
    assert len(ok0) == 3
    bad = [ends[t] for t, h in by_host.items() if h == "ray-1"]
    assert bad and not any(e["ok"] for e in bad)
    assert any("a reset where the run's reset is recreate" in e["error"]["message"] for e in bad)
    forged = [e for e in got if e["type"] == "pool" and e["host"] == "ray-1" and e["op"] == "reset"]
    assert not forged


def test_an_interrupted_pooled_run_tears_down_every_nodes_pool(tmp_path: Path) -> None:
    """Stopped as the first trial starts: what runs ends, and each node's pool is closed
    (every environment it made torn down, recorded), nothing left on either node."""
    got, session, engines = pooled_run(tmp_path, "local", "recreate", stop_at="trial_start")
    assert next(e for e in got if e["type"] == "run_end")["status"] == "interrupted"
    pools = [e for e in got if e["type"] == "pool"]
    for h in ("ray-0", "ray-1"):
        made = {e["env"] for e in pools if e["host"] == h and e["op"] == "create"}
        gone = {e["env"] for e in pools if e["host"] == h and e["op"] == "teardown"}
        assert made and made == gone, (h, made, gone)
    _no_environment_left(engines)


class RayActorError(Exception):
    """A Ray error, as `raynodes.is_ray_error` knows one (by its module)."""


RayActorError.__module__ = "ray.exceptions"


def test_a_node_lost_mid_run_loses_its_pooled_trials_and_the_other_goes_on(
    tmp_path: Path,
) -> None:
    """ray-1 dies as its first pooled trial answers: that trial and its later ones are
    `host_lost` with the reason, its pool is not asked for anything more, ray-0's
    trials and pool go on to the end."""

    def die(node: str, method: str, sent: Any) -> Any:
        if node == "ray-1" and method == "run_trial":
            raise RayActorError("The actor died unexpectedly")
        return sent[1]

    got, session, engines = pooled_run(tmp_path, "local", "recreate", tamper=die)
    ends = {e["trial"]: e for e in got if e["type"] == "trial_end"}
    by_host = {e["trial"]: e["host"] for e in got if e["type"] == "trial_start"}
    lost = [ends[t] for t, h in by_host.items() if h == "ray-1"]
    assert len(lost) == 3 and all(e["error"]["kind"] == "host_lost" for e in lost)
    assert all("The actor died unexpectedly" in e["error"]["message"] for e in lost)
    assert all(ends[t]["ok"] for t, h in by_host.items() if h == "ray-0")
    zero = [e for e in got if e["type"] == "pool" and e["host"] == "ray-0"]
    assert zero and zero[-1]["op"] == "teardown"
    assert next(e for e in got if e["type"] == "run_end")["status"] == "completed"


def test_a_nodes_pool_events_are_checked_in_order() -> None:
    host = RayNodeHost("ray-1", "id1", RaySpec("ray", "auto"), Profile("p", "p.toml"))
    track = NodePools(host, {"c": "clean"}, 0)
    track.sent("c")

    def ev(what: str, env: int = 1, ok: bool = True, **kw: Any) -> dict[str, Any]:
        e = dict(type="pool", t_ns=10, host="ray-1", cell="c", env=env, op=what, dur_ns=5,
                 ok=ok, cpu_ns=1, env_cpu_ns=None, error=None)  # fmt: skip
        return {**e, **kw}

    assert track.take([ev("create")], hi_ns=100, err_ns=0) is None
    assert track.acquired("c") is None
    assert "handed out" in (track.acquired("c") or "")  # a second, never made nor reset
    fresh = lambda: NodePools(host, {"c": "clean"}, 0)  # noqa: E731
    for batch, says in [
        ([ev("reset")], "reset before its create"),
        ([ev("create"), ev("create")], "created twice"),
        ([ev("create"), ev("teardown"), ev("reset")], "after its teardown"),
        ([ev("create"), ev("reset"), ev("reset")], "more than the 1 trials sent"),
        ([ev("create", cell="d")], "no pooled cell"),
        ([ev("create", host="ray-0")], "not ray-1"),
        ([ev("create", t_ns=10**12)], "outside the pools' time"),
        ([ev("create", dur_ns=10**12)], "longer than"),
        ([ev("create", op="restore")], "not (env, op)"),
        ([{"type": "trial_end"}], "lacks"),
        ({"x": 1}, "not a list"),
    ]:
        t = fresh()
        t.sent("c")
        assert says in (t.take(batch, hi_ns=100, err_ns=0) or ""), (batch, says)
        assert t.take([], hi_ns=100, err_ns=0) is not None  # refused once: refused after
