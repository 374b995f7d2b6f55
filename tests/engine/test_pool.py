"""Warm pools in the engine (engine.pool) against the driver double: acquire, release,
resets, waiting, a failed refill, cold beside pooled, the report and the projection.

The real drivers' resets are in test_contract.py and test_pool_reuse.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtax_tui.analysis.report import build_report, project_report
from rtax_tui.engine.poolspec import PoolSpec
from rtax_tui.engine.profile import ProfileError, load_profile
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.events import encode
from rtax_tui.model.recording import read_bytes
from rtax_tui.model.spec import ActionResult, EnvSpec, PhaseFailure, Step
from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver, FakeEnvironment


class CleanEnvironment(FakeEnvironment):
    """The double with a clean reset: it forgets what the last trial left."""

    def __init__(self, driver: Any, spec: EnvSpec, sub: Any) -> None:
        super().__init__(driver, spec, sub)
        self.left: list[str] = []

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if step.argv[0] == "plant":
            self.left.append(step.argv[1])
            return ActionResult(0, b"")
        if step.argv[0] == "look":  # fails when an earlier trial's mark is still there
            return ActionResult(1 if self.left else 0, " ".join(self.left).encode())
        return await super().action(step, timeout)

    async def reset_clean(self) -> None:
        self.fd.resets += 1
        if not self.fd.broken_reset:
            self.left.clear()


class CleanDriver(FakeDriver):
    def __init__(self) -> None:
        super().__init__()
        self.resets = 0
        self.broken_reset = False
        self.fail_creates: set[int] = set()

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        return {**super().pool_resets(channel), "clean": None}

    def environment(self, spec: EnvSpec, sub: Any = None) -> Any:
        env = CleanEnvironment(self, spec, sub)
        if self.created_count in self.fail_creates:
            self.fail_creates.discard(self.created_count)
            self.fail["create"] = True
        else:
            self.fail["create"] = False
        return env


def pooled(**kw: Any) -> Any:
    return prof(pool=kw.pop("pool", PoolSpec(size=2)), **kw)


def phases_of(events: list[dict[str, Any]], trial: int) -> list[str]:
    return [e["name"] for e in by_type(events, "phase") if e["trial"] == trial]


def test_a_pooled_trial_acquires_and_releases_and_nothing_is_left() -> None:
    drv = FakeDriver()
    # a trial's action outlasts a create five times over: the eager pool's next
    # environment is ready before the next trial asks (with instant actions, a loaded
    # machine once made all five trials wait on creates of 10 ms)
    drv.delays = {"create": 0.01, "action": 0.05}
    s, ev = run(pooled(warmup=0, trials=5), drv, {"w": W_OK})
    starts = by_type(ev, "trial_start")
    assert all(e["mode"] == "pool" and e["cell"].endswith("/exec+pool") for e in starts)
    for e in starts:
        names = phases_of(ev, e["trial"])
        assert "create" not in names and "teardown" not in names
        assert names[0] in ("acquire", "acquire.wait") and names[-2:] == [
            "release",
            "orchestration",
        ]
    assert all(e["ok"] and e["valid"] for e in by_type(ev, "trial_end"))
    pool = by_type(ev, "pool")
    ops = [e["op"] for e in pool]
    # recreate: every used environment is torn down, never reused
    assert ops.count("create") == ops.count("teardown") >= 5
    assert all(e["cpu_ns"] >= 0 and e["dur_ns"] > 0 for e in pool)
    assert ev[-1]["type"] == "run_end" and drv.live == 0
    # eager: after the first trials the pool had environments ready (hits)
    waits = [e for e in by_type(ev, "phase") if e["name"] == "acquire.wait"]
    assert len(waits) < 5
    assert ev[0]["profile"]["pool"]["resets"]["local/local/w/exec+pool"]["reset"] == "recreate"


def test_clean_reset_reuses_the_same_environment_and_a_small_pool_makes_trials_wait() -> None:
    drv = CleanDriver()
    drv.delays = {"action": 0.01}
    p = pooled(warmup=0, trials=6, concurrency=3, pool=PoolSpec(size=1, reset="clean"))
    s, ev = run(p, drv, {"w": W_OK})
    assert all(e["ok"] for e in by_type(ev, "trial_end"))
    ops = [e["op"] for e in by_type(ev, "pool")]
    assert ops.count("create") == 1 and ops.count("reset") == 6 and ops.count("teardown") == 1
    waits = [e for e in by_type(ev, "phase") if e["name"] == "acquire.wait"]
    assert len(waits) >= 2  # concurrency 3 on a pool of 1: trials waited for a reset
    assert drv.live == 0 and drv.resets == 6


def test_an_unsupported_reset_falls_back_to_recreate_and_says_so() -> None:
    drv = FakeDriver()
    s, ev = run(pooled(warmup=0, trials=2, pool=PoolSpec(size=1, reset="clean")), drv, {"w": W_OK})
    r = ev[0]["profile"]["pool"]["resets"]["local/local/w/exec+pool"]
    assert r["reset"] == "recreate" and "clean" in r["fallback"]
    assert "reset" not in [e["op"] for e in by_type(ev, "pool")]
    assert drv.live == 0


def test_a_failed_refill_fails_trials_with_its_reason_and_the_pool_recovers() -> None:
    drv = CleanDriver()
    drv.fail_creates = {1, 2}  # the 2nd and 3rd creates fail (the daemon went away)
    drv.delays = {"action": 0.005}
    p = pooled(warmup=0, trials=6, pool=PoolSpec(size=1, reset="recreate", refill="lazy"))
    s, ev = run(p, drv, {"w": W_OK})
    ends = by_type(ev, "trial_end")
    failed = [e for e in ends if not e["ok"]]
    assert len(failed) == 2
    for e in failed:
        assert e["error"]["phase"] == "acquire" and e["error"]["kind"] == "sandbox_failed"
        assert "pool refill failed: create failed on purpose" in e["error"]["message"]
    assert sum(1 for e in ends if e["ok"]) == 4  # and then it recovered
    bad = [e for e in by_type(ev, "pool") if not e["ok"]]
    assert [e["op"] for e in bad] == ["create", "create"] and "sandbox_failed" in bad[0]["error"]
    assert drv.live == 0


def test_a_broken_reset_is_a_dirty_reuse_the_next_trial_sees() -> None:
    from rtax_tui.model.spec import Workload

    w = Workload("w", (Step(("look",)), Step(("plant", "mark"))))
    for broken, dirty in ((False, 0), (True, 2)):
        drv = CleanDriver()
        drv.broken_reset = broken
        p = pooled(warmup=0, trials=3, pool=PoolSpec(size=1, reset="clean"))
        s, ev = run(p, drv, {"w": w})
        first_fail = [e for e in by_type(ev, "action") if e["i"] == 0 and e["rc"] != 0]
        assert len(first_fail) == dirty


def test_cold_beside_pooled_in_one_run_and_the_report_and_projection() -> None:
    drv = FakeDriver()
    drv.delays = {"create": 0.02, "ready": 0.01}
    p = prof(warmup=0, trials=4, pool=PoolSpec(size=2), modes=("cold", "pool"))
    s, ev = run(p, drv, {"w": W_OK})
    cells = {e["cell"] for e in by_type(ev, "trial_start")}
    assert cells == {"local/local/w/exec", "local/local/w/exec+pool"}
    assert drv.live == 0
    rec = read_bytes("mem", b"".join(encode(e) for e in ev))
    rep = build_report(rec)
    by = {c["cell"]: c for c in rep["cells"]}
    cold, pool = by["local/local/w/exec"], by["local/local/w/exec+pool"]
    assert "acquire" not in cold["phases"] and "startup" not in cold
    assert pool["phases"]["acquire"]["n"] == 4 and pool["mode"] == "pool"
    assert pool["phases"]["acquire"]["p50_ms"] < cold["phases"]["create"]["p50_ms"]
    h = rep["pools"]["hosts"]["local"]
    assert h["trials"] == 4 and h["hits"] + h["misses"] == 4 and h["pool_work_s"] > 0
    proj = {c["cell"]: c for c in project_report(rec, 1000, 10)["cells"]}
    assert proj["local/local/w/exec+pool"]["pool_s_per_trajectory"] > 0.02
    assert proj["local/local/w/exec"].get("pool_s_per_trajectory") is None


def test_pool_table_errors_name_the_line(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[run]\ndrivers = ["local"]\n\n[pool]\nsize = 2\nreset = "wipe"\n')
    with pytest.raises(ProfileError, match=r"p.toml:6: pool.reset: 'wipe' \(allowed: recreate"):
        load_profile(f)
    f.write_text('[run]\ndrivers = ["local"]\nmodes = ["cold", "warm"]\n')
    with pytest.raises(ProfileError, match=r"p.toml:3: run.modes: unknown 'warm'"):
        load_profile(f)
    f.write_text('[run]\ndrivers = ["local"]\nmodes = ["cold", "pool"]\n[pool]\nsize = 3\n')
    p = load_profile(f)
    assert p.run_modes == ("cold", "pool") and p.pool_spec.size == 3
    assert p.to_dict()["pool"] == {"size": 3, "reset": "recreate", "refill": "eager"}


def test_a_phase_failure_in_reset_never_hands_out_the_environment() -> None:
    class FailingReset(CleanEnvironment):
        async def reset_clean(self) -> None:
            raise PhaseFailure(ErrorKind.RESET_FAILED, "cannot clean")

    drv = CleanDriver()
    drv.environment = lambda spec, sub=None: FailingReset(drv, spec, sub)  # type: ignore[method-assign]
    s, ev = run(pooled(warmup=0, trials=3, pool=PoolSpec(size=1, reset="clean")), drv, {"w": W_OK})
    assert all(e["ok"] for e in by_type(ev, "trial_end"))
    pool = by_type(ev, "pool")
    bad = [e["op"] for e in pool if not e["ok"]]
    # every reset failed (the last create may be cut short by the end of the run)
    assert bad.count("reset") == 3 and set(bad) <= {"reset", "create"}
    assert sum(1 for e in pool if e["op"] == "create") >= 3 and drv.live == 0


def test_compare_sets_a_cold_recording_beside_a_pooled_one_by_start_up() -> None:
    from rtax_tui.analysis.report import compare_reports, pair_cells

    def rec(**kw: Any) -> Any:
        drv = FakeDriver()
        drv.delays = {"create": 0.02}
        s, ev = run(prof(warmup=0, trials=4, **kw), drv, {"w": W_OK})
        return read_bytes("mem", b"".join(encode(e) for e in ev))

    cold, pooled = rec(), rec(pool=PoolSpec(size=2))
    pairs = pair_cells(cold, pooled, changed=True)
    assert pairs == {"local/local/w/exec": "local/local/w/exec+pool"}
    rows = compare_reports(cold, pooled, changed=True)["rows"]
    start = [r for r in rows if r["phase"] == "startup"]
    assert len(start) == 1 and "acquire" in start[0]["note"]
    assert start[0]["b_p50_ms"] < start[0]["a_p50_ms"]


def test_the_report_prints_the_pools_per_host() -> None:
    from rich.console import Console

    from rtax_tui.render.reporting import print_report, render_markdown

    drv = FakeDriver()
    drv.delays = {"create": 0.01}
    p = prof(warmup=0, trials=3, pool=PoolSpec(size=1), modes=("cold", "pool"))
    s, ev = run(p, drv, {"w": W_OK})
    rep = build_report(read_bytes("mem", b"".join(encode(e) for e in ev)))
    con = Console(record=True, width=200)
    print_report(rep, con)
    text = con.export_text()
    assert "warm pools" in text and "host local" in text and "local/local/w/exec+pool" in text
    md = render_markdown(rep)  # the Markdown report has the same table
    hit = f"{rep['pools']['hosts']['local']['hit_rate']:.0%}"
    assert "### warm pools" in md and f"| host local | 3 | {hit} |" in md
    assert "| local/local/w/exec+pool | 3 |" in md


def test_dash_dash_pool_runs_the_profile_pooled(tmp_path: Path) -> None:
    """`rtax run --pool N` on the real local driver: pooled cells, the pool's events."""
    import subprocess
    import sys

    prof_path = tmp_path / "p.toml"
    prof_path.write_text(
        '[run]\ntrials = 4\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["t0"]\n'
        'channels = ["exec"]\n'
    )
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "rtax_tui", "run", str(prof_path), "--pool", "2"]
    res = subprocess.run(cmd + ["--headless", "--quiet", "-o", str(out)], capture_output=True)
    assert res.returncode == 0, res.stderr
    rec = read_bytes("r", out.read_bytes())
    assert rec.header["profile"]["pool"]["size"] == 2
    assert {e["cell"] for e in rec.events if e["type"] == "trial_start"} == {
        "local/local/t0/exec+pool"
    }
    assert sum(1 for e in rec.events if e["type"] == "pool" and e["op"] == "create") >= 4
    bad = subprocess.run(cmd[:-1] + ["0", "--headless"], capture_output=True)
    assert bad.returncode == 2 and b"--pool" in bad.stderr


def test_locality_a_trial_whose_host_has_a_ready_environment_goes_first() -> None:
    from collections import deque

    from rtax_tui.engine.control import RunControl
    from rtax_tui.engine.health import HostHealth
    from rtax_tui.engine.plan import PlannedTrial
    from rtax_tui.engine.scheduling import Scheduler
    from rtax_tui.model.spec import Cell

    a = Cell("a", "stage", "w", "exec", "pool")
    b = Cell("b", "stage", "w", "exec", "pool")
    cold = Cell("a", "stage", "w", "exec")
    sch = Scheduler({"a": None, "b": None}, 4, RunControl(), HostHealth({}))
    pending = deque([PlannedTrial(1, a, False), PlannedTrial(2, b, False)])
    assert sch.next_with_room(pending) == 0  # no preference: the plan's order
    sch.prefer = lambda cell: cell.host == "b"  # only host b has a ready environment
    assert sch.next_with_room(pending) == 1
    sch.prefer = lambda cell: True
    assert sch.next_with_room(pending) == 0
    sch.prefer = lambda cell: cell.host == "b"
    assert sch.next_with_room(deque([PlannedTrial(3, cold, False), *pending])) == 0  # cold first


class MemEnvironment(FakeEnvironment):
    """The double with a memory of its own: 64 MiB plus a MiB per environment."""

    def memory_bytes(self) -> int | None:
        return (64 + self.n) << 20


class MemDriver(FakeDriver):
    def environment(self, spec: EnvSpec, sub: Any = None) -> Any:
        return MemEnvironment(self, spec, sub)


def test_what_a_pool_holds_idle_is_recorded_and_projected() -> None:
    """An environment's wait in the pool (ready until taken, or until the pool closes)
    goes on its next reset or teardown with its memory as it went in; the report sums
    it, and the projection gives it per trajectory as environment- and GiB-hours beside
    the worker-hours (recomputed here from the raw events)."""
    drv = MemDriver()
    drv.delays = {"action": 0.03}
    _, ev = run(pooled(warmup=0, trials=6, pool=PoolSpec(size=3)), drv, {"w": W_OK})
    pools = by_type(ev, "pool")
    assert all("idle_ns" in e for e in pools if e["op"] != "create")  # 0: never waited
    idle = [e for e in pools if e.get("idle_ns")]
    assert idle and all(e["op"] in ("reset", "teardown") for e in idle)
    assert all(e["idle_ns"] > 0 and e["mem_bytes"] >= 64 << 20 for e in idle)
    assert not any("idle_ns" in e for e in pools if e["op"] == "create")
    # the ones still ready when the run ended waited until the pool closed: the run's end
    # comes after, so none waited longer than the run
    assert max(e["idle_ns"] for e in idle) < by_type(ev, "run_end")[0]["t_ns"]
    rec = read_bytes("mem", b"".join(encode(e) for e in ev))
    rep = build_report(rec)
    c = rep["pools"]["cells"]["local/local/w/exec+pool"]
    assert c["pool_idle_s"] == pytest.approx(sum(e["idle_ns"] for e in idle) / 1e9)
    mems = sorted(e["mem_bytes"] for e in idle)
    assert c["pool_idle_mem_p50_mib"] == pytest.approx(
        (mems[(len(mems) - 1) // 2] + mems[len(mems) // 2]) / 2 / (1 << 20)
    )
    proj = {p["cell"]: p for p in project_report(rec, 1_000_000, 10)["cells"]}
    p = proj["local/local/w/exec+pool"]
    served = len(by_type(ev, "trial_start"))
    idle_s = sum(e["idle_ns"] for e in idle) / 1e9
    gib_s = sum(e["idle_ns"] / 1e9 * e["mem_bytes"] / (1 << 30) for e in idle)
    assert p["pool_idle_env_hours"] == pytest.approx(1_000_000 * idle_s / served / 3600)
    assert p["pool_idle_gib_hours"] == pytest.approx(1_000_000 * gib_s / served / 3600)
    assert drv.live == 0
