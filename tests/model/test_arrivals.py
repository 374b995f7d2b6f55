"""Arrival patterns (model.arrivals): parsing, the plan's episodes, the scheduler's open
loop, and what the recording, the report and the plot make of them."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtax_tui.engine.plan import build_plan, make_cells
from rtax_tui.model.arrivals import check_arrivals, parse_arrival
from rtax_tui.model.spec import Cell, RtaxError
from tests.enginetools import W_OK, by_type, prof, run
from tests.fakes import FakeDriver


# -- the patterns ------------------------------------------------------------------
def test_patterns_in_their_normal_spelling_and_bad_ones_named() -> None:
    assert check_arrivals(["sequential", "burst:08", "rate:4.0", "rate:0.5"], "f") == (
        "sequential", "burst:8", "rate:4", "rate:0.5",
    )  # fmt: skip
    for bad, why in (
        ("burst:0", "a burst of 1 to"),
        ("burst:5000", "a burst of 1 to"),
        ("rate:0", "a rate above 0"),
        ("rate:2000", "a rate above 0"),
        ("fast", "unknown arrival 'fast'"),
        ("burst:-1", "unknown arrival"),
        (3, "unknown arrival 3"),
    ):
        with pytest.raises(RtaxError, match=why):
            parse_arrival(bad, "p.toml:3")
    with pytest.raises(RtaxError, match="named twice"):
        check_arrivals(["burst:8", "burst:008"], "p.toml:3")
    with pytest.raises(RtaxError, match="non-empty list"):
        check_arrivals([], "p.toml:3")


def test_a_cells_id_carries_its_pattern_and_a_sequential_one_keeps_its_id() -> None:
    assert Cell("local", "stage", "t0", "exec").id == "local/stage/t0/exec"
    assert Cell("local", "stage", "t0", "exec", "pool", "burst:8").id == (
        "local/stage/t0/exec+pool@burst:8"
    )


def test_profile_errors_name_the_line_and_capacity_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\ntrials = 2\narrivals = ["burst:4", "rate:nope"]\n')
    res = _rtax("run", str(bad), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"rtax: error: {bad}:3: arrivals: unknown arrival 'rate:nope' (allowed: sequential, "
        "burst:N (N at once), rate:R (R a second, Poisson))"
    ]
    cap = tmp_path / "cap.toml"
    cap.write_text('[run]\narrivals = ["burst:2"]\n[capacity]\nsize = 2\n')
    res = _rtax("run", str(cap), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2 and "a capacity run asks for its batches at once" in res.stderr
    res = _rtax("run", "t0", "--arrival", "burst:0", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2 and "command line: arrivals: burst:0" in res.stderr
    assert not (tmp_path / "r.jsonl").exists()


# -- the plan ------------------------------------------------------------------------
def test_a_plan_without_patterns_is_the_plan_it_always_was() -> None:
    cells = make_cells(("local",), ("a", "b"), ("t0",), ("exec",))
    plan = build_plan(cells, trials=5, warmup=1, seed=7)
    measured = [c for c in cells for _ in range(5)]
    random.Random(7).shuffle(measured)  # the documented order: one seeded shuffle
    assert [p.cell for p in plan[2:]] == measured
    assert all(p.episode is None and p.offset_ns == 0 for p in plan)


def test_bursts_are_whole_episodes_at_one_instant_and_rates_poisson_gaps() -> None:
    cells = make_cells(("local",), ("a",), ("t0",), ("exec",), arrivals=(
        "sequential", "burst:4", "rate:50"))  # fmt: skip
    plan = build_plan(cells, trials=10, warmup=1, seed=3)
    assert [p.id for p in plan] == list(range(1, len(plan) + 1))
    assert all(p.warmup and p.episode is None for p in plan[:3])  # warm-ups: one at a time
    by_ep: dict[str, list[int]] = {}
    for i, p in enumerate(plan):
        if p.episode is not None:
            by_ep.setdefault(p.episode, []).append(i)
    for idx in by_ep.values():  # an episode's trials are contiguous and of one cell
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        assert len({plan[i].cell for i in idx}) == 1
    bursts = [v for v in by_ep.values() if plan[v[0]].cell.arrival == "burst:4"]
    assert len(bursts) == 3 and all(len(b) == 4 for b in bursts)  # 10 rounded up to 12
    assert all(plan[i].offset_ns == 0 for b in bursts for i in b)
    rates = [v for v in by_ep.values() if plan[v[0]].cell.arrival == "rate:50"]
    assert sum(map(len, rates)) == 10
    for r in rates:
        offs = [plan[i].offset_ns for i in r]
        assert offs[0] == 0 and offs == sorted(offs) and len(set(offs)) == len(offs)
    # the same seed, the same plan; another seed, other gaps
    again = build_plan(cells, trials=10, warmup=1, seed=3)
    assert [(p.cell, p.episode, p.offset_ns) for p in again] == [
        (p.cell, p.episode, p.offset_ns) for p in plan
    ]
    other = build_plan(cells, trials=10, warmup=1, seed=4)
    assert sorted(p.offset_ns for p in other) != sorted(p.offset_ns for p in plan)


def test_rate_gaps_average_one_over_the_rate() -> None:
    cells = [Cell("local", "a", "t0", "exec", "cold", "rate:50")]
    plan = build_plan(cells, trials=3200, warmup=0, seed=1)
    gaps: list[int] = []
    for k in range(len(plan) - 1):
        a, b = plan[k], plan[k + 1]
        if a.episode == b.episode:
            gaps.append(b.offset_ns - a.offset_ns)
    mean_ms = sum(gaps) / len(gaps) / 1e6
    assert 19.0 < mean_ms < 21.0  # 1/50 s; about 3,100 gaps: within 5%
    assert len({p.episode for p in plan}) == 100  # episodes of 32


# -- the scheduler's open loop ----------------------------------------------------------
def test_a_burst_starts_at_once_after_what_was_in_flight_whatever_the_concurrency() -> None:
    drv = FakeDriver()
    drv.delays = {"action": 0.1}
    p = prof(warmup=0, trials=4, concurrency=1, arrivals=("sequential", "burst:4"), seed=2)
    _, ev = run(p, drv, {"w": W_OK})
    starts, ends = by_type(ev, "trial_start"), by_type(ev, "trial_end")
    assert len(starts) == len(ends) == 8
    end_at = {e["trial"]: e["t_ns"] for e in ends}
    burst = [e for e in starts if e.get("arrival") == "burst:4"]
    assert len(burst) == 4 and len({e["episode"] for e in burst}) == 1
    assert len({e["arrival_ns"] for e in burst}) == 1
    first = min(e["t_ns"] for e in burst)
    # concurrency 1 would have run them one after another (4 x 2 x 0.1 s): they overlapped
    assert max(e["t_ns"] for e in burst) < min(end_at[e["trial"]] for e in burst)
    # every sequential trial planned before the burst ended before it began
    seq = [e for e in starts if "episode" not in e]
    before = [e for e in seq if e["trial"] < burst[0]["trial"]]
    assert all(end_at[e["trial"]] <= first for e in before)
    assert all(e["t_ns"] >= e["arrival_ns"] for e in burst)
    assert drv.live == 0


def test_rate_arrivals_start_when_due_not_when_the_last_one_ended() -> None:
    drv = FakeDriver()
    drv.delays = {"action": 0.15}  # a trial lasts far longer than the gaps between arrivals
    p = prof(warmup=0, trials=12, arrivals=("rate:40",), seed=5)
    _, ev = run(p, drv, {"w": W_OK})
    starts = by_type(ev, "trial_start")
    assert len(starts) == 12
    for e in starts:
        assert e["t_ns"] >= e["arrival_ns"]  # never before it was due
        assert e["t_ns"] - e["arrival_ns"] < 0.25e9  # nor held back by the trials in flight
    due = sorted(e["arrival_ns"] for e in starts)
    assert due[-1] - due[0] < 12 * 0.3e9  # open loop: not 12 trials' length end to end
    # the plan's offsets are what the recording says was due
    plan = build_plan(make_cells(("local",), ("local",), ("w",), ("exec",),
                                 arrivals=("rate:40",)), 12, 0, 5)  # fmt: skip
    offs = [pt.offset_ns for pt in plan]
    assert [d - due[0] for d in due] == offs


def test_a_stop_during_an_episode_starts_no_more_arrivals() -> None:
    drv = FakeDriver()
    drv.delays = {"action": 0.05}
    p = prof(warmup=0, trials=32, arrivals=("rate:10",), seed=1)  # about 3 s of arrivals
    s, ev = run(p, drv, {"w": W_OK}, stop_after=0.6)
    starts, ends = by_type(ev, "trial_start"), by_type(ev, "trial_end")
    assert by_type(ev, "run_end")[0]["status"] == "interrupted"
    assert 0 < len(starts) < 32 and len(ends) == len(starts)
    assert drv.live == 0


# -- end to end: recording, report, plot ---------------------------------------------
def _rtax(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_run_with_patterns_reports_load_and_plots_it(tmp_path: Path) -> None:
    prof_path = tmp_path / "load.toml"
    prof_path.write_text(
        '[run]\ndrivers = ["local"]\nworkloads = ["t0"]\ntrials = 8\nwarmup = 1\n'
        'arrivals = ["sequential", "burst:4", "rate:40"]\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof_path), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events[0]["profile"]["arrivals"] == ["sequential", "burst:4", "rate:40"]
    cells = {e["cell"] for e in events if e["type"] == "trial_start"}
    assert cells == {"local/local/t0/exec", "local/local/t0/exec@burst:4",
                     "local/local/t0/exec@rate:40"}  # fmt: skip
    res = _rtax("report", str(out), "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {r["arrival"]: r for r in json.loads(res.stdout)["load"]}
    assert list(rows) == ["sequential", "burst:4", "rate:40"]  # from the lightest load
    assert {r["cell"] for r in rows.values()} == {"local/local/t0/exec"}
    assert rows["burst:4"]["burst"] == 4 and rows["burst:4"]["episodes"] == 2
    assert rows["burst:4"]["spread_p50_ms"] is not None
    assert rows["rate:40"]["offered_per_s"] == 40 and rows["rate:40"]["achieved_per_s"] > 0
    # a second way: the achieved rate and the burst's start-up P50 from the raw events
    starts = [e for e in events if e["type"] == "trial_start" and e.get("arrival") == "rate:40"]
    by_ep: dict[str, list[int]] = {}
    for e in starts:
        by_ep.setdefault(e["episode"], []).append(e["t_ns"])
    gaps = sum(len(v) - 1 for v in by_ep.values())
    span = sum(max(v) - min(v) for v in by_ep.values())
    assert rows["rate:40"]["achieved_per_s"] == pytest.approx(gaps / (span / 1e9))
    burst_ids = {e["trial"] for e in events if e.get("arrival") == "burst:4"}
    up = sorted(
        sum(e["dur_ns"] for e in events if e["type"] == "phase" and e["trial"] == t
            and e["name"] in ("create", "ready"))
        for t in burst_ids
    )  # fmt: skip
    med = (up[3] + up[4]) / 2 / 1e6
    assert rows["burst:4"]["startup"]["p50_ms"] == pytest.approx(med)
    res = _rtax("report", str(out), "--format", "markdown")
    assert "load: start-up per arrival pattern" in res.stdout and "4 at once" in res.stdout
    svg = tmp_path / "load.svg"
    res = _rtax("plot", str(out), "--kind", "load", "-o", str(svg))
    assert res.returncode == 0, res.stderr
    assert 'id="series:local/local/t0/exec#' in svg.read_text()


def test_the_load_plot_says_when_there_is_no_pattern(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    res = _rtax("run", "t0", "--driver", "local", "--trials", "2", "--warmup", "0",
                "--headless", "--quiet", "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = _rtax("plot", str(out), "--kind", "load", "-o", str(tmp_path / "l.svg"))
    assert res.returncode == 2 and "no arrival pattern to plot" in res.stderr
    rep = json.loads(_rtax("report", str(out), "--format", "json").stdout)
    assert "load" not in rep


def test_the_scheduler_launches_an_episode_at_its_offsets() -> None:
    """The scheduler alone, with a launch double: each arrival is launched at (not before)
    its instant, and its scheduled time is that instant."""
    from rtax_tui.engine.control import RunControl
    from rtax_tui.engine.health import HostHealth
    from rtax_tui.engine.plan import PlannedTrial
    from rtax_tui.engine.scheduling import Scheduler

    cell = Cell("local", "d", "w", "exec", "cold", "rate:10")
    offs = [0, 50_000_000, 60_000_000, 200_000_000]
    plan = [PlannedTrial(i + 1, cell, False, None, "e1", o) for i, o in enumerate(offs)]
    seen: list[tuple[int, int, int]] = []

    async def launch(pt: PlannedTrial, scheduled_ns: int) -> None:
        seen.append((pt.id, scheduled_ns, time.monotonic_ns()))
        await asyncio.sleep(0.3)  # longer than the episode: none waits for another

    async def go() -> None:
        s = Scheduler({"local": 1}, 1, RunControl(), HostHealth({}))
        await s.run(plan, launch)

    asyncio.run(go())
    assert [i for i, _, _ in seen] == [1, 2, 3, 4]
    t0 = seen[0][1]
    assert [sch - t0 for _, sch, _ in seen] == offs
    assert all(at >= sch for _, sch, at in seen)
