"""Runs that stop when the answer is clear (issue 38 item 3): `rtax run --precision P%`
and `[run] precision`, on the `local` and `stage` drivers, each run a real `rtax run` in
a child process. Every verdict the engine recorded is recomputed here from the raw
events with a literal resampling bootstrap, not with rtax's own functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtax_tui.engine.plan import build_round
from rtax_tui.model.precision import check_cell, parse_duration, parse_precision, within
from rtax_tui.model.spec import Cell

STEADY = '[workloads.steady]\nsteps = [{argv = ["sleep", "0.2"]}]\n'
# half its trials sleep 30 ms, half not at all: its median jumps between the two
COIN = '[workloads.coin]\nsteps = [{argv = ["sh", "-c", "sleep $(shuf -n1 -e 0 0.03)"]}]\n'
FALSE = '[workloads.broken]\nsteps = [{argv = ["false"]}]\n'


def _stage_ok() -> bool:
    from rtax_tui.hosts.cgroups import Cgroup

    return os.geteuid() == 0 and Cgroup.version() is not None


DRIVERS = '["local", "stage"]' if _stage_ok() else '["local"]'


def rtax(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def profile(tmp_path: Path, run: str, workloads: str, drivers: str = DRIVERS) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(f'[run]\nwarmup = 1\ndrivers = {drivers}\nchannels = ["exec"]\n{run}\n{workloads}')
    return p


def events_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def measured_totals(evs: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per cell, the totals of its measured trials, straight from the events: a trial's
    phases without a dot (create, ready, teardown, orchestration) plus its actions, for a
    trial that is not a warm-up and ended ok and valid."""
    cell: dict[Any, str] = {}
    warm: dict[Any, bool] = {}
    total: dict[Any, int] = {}
    good: set[Any] = set()
    for ev in evs:
        t = ev["type"]
        if t == "trial_start":
            cell[ev["trial"]], warm[ev["trial"]] = ev["cell"], ev["warmup"]
            total[ev["trial"]] = 0
        elif t == "phase" and "." not in ev["name"]:
            total[ev["trial"]] += ev["dur_ns"]
        elif t == "action":
            total[ev["trial"]] += ev["dur_ns"]
        elif t == "trial_end" and ev["ok"] and ev["valid"] and not warm[ev["trial"]]:
            good.add(ev["trial"])
    out: dict[str, list[int]] = {}
    for trial in cell:
        if trial in good:
            out.setdefault(cell[trial], []).append(total[trial])
    return out


def literal_ci(x: list[int], n_boot: int = 4000) -> tuple[float, float]:
    """The textbook bootstrap: resample with replacement, take each median."""
    a = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(12345)
    meds = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(lo), float(hi)


def last_check(evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    checks = [e for e in evs if e["type"] == "precision"]
    assert checks, "no precision event recorded"
    last = max(e["round"] for e in checks)
    return {e["cell"]: e for e in checks if e["round"] == last}


def measured_runs(evs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in evs:
        if e["type"] == "trial_start" and not e["warmup"]:
            out[e["cell"]] = out.get(e["cell"], 0) + 1
    return out


def test_stops_early_when_every_cell_is_precise(tmp_path: Path) -> None:
    """The profile's key: rounds of 10 stop well under the budget of 200 per cell, and
    every cell's interval, recomputed from the raw events, is within the 20%."""
    prof = profile(tmp_path, 'trials = 10\nworkloads = ["steady"]\nprecision = "20%"\n'
                   "max_trials = 200\n", STEADY)  # fmt: skip
    rec = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(rec))
    assert res.returncode == 0, res.stderr
    evs = events_of(rec)
    assert evs[0]["profile"]["precision"] == "20%"
    checks = last_check(evs)
    assert {e.get("end") for e in checks.values()} == {"precise"}
    totals = measured_totals(evs)
    runs = measured_runs(evs)
    assert set(checks) == set(totals) == set(runs) and len(runs) == DRIVERS.count('"') // 2
    for cell, x in totals.items():
        assert runs[cell] < 200, (cell, runs[cell])
        ev = checks[cell]
        assert ev["verdict"] == "precise" and ev["n"] == len(x) >= 10
        p50 = float(np.median(x))
        assert ev["p50_ns"] == round(p50)
        lo, hi = literal_ci(x)
        assert lo >= 0.8 * p50 * 0.98 and hi <= 1.2 * p50 * 1.02, (cell, lo, p50, hi)
        # the engine's interval is the literal one's, up to resampling noise
        assert abs(ev["lo_ns"] - lo) <= 0.05 * p50 and abs(ev["hi_ns"] - hi) <= 0.05 * p50


def test_stops_at_max_trials_and_names_the_cells(tmp_path: Path) -> None:
    """The flag: a coin-toss cell never gets to 2%; the run stops at --max-trials per cell
    and says which cells did not get there, and `rtax report` says the same."""
    prof = profile(tmp_path, 'trials = 30\nworkloads = ["coin"]\n', COIN)
    rec = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(rec), "--precision", "2%",
               "--max-trials", "12", "--trials", "5")  # fmt: skip
    assert res.returncode == 0, res.stderr
    evs = events_of(rec)
    checks = last_check(evs)
    assert {e.get("end") for e in checks.values()} == {"max_trials"}
    assert [e["round"] for e in evs if e["type"] == "precision"][-1] == 3  # 5 + 5 + 2
    totals = measured_totals(evs)
    for cell, n in measured_runs(evs).items():
        assert n == 12
        ev = checks[cell]
        x = totals.get(cell, [])
        assert ev["n"] == len(x) and ev["trials"] == 12
        if ev["verdict"] == "wide":
            p50 = float(np.median(x))
            assert not within(p50, ev["lo_ns"], ev["hi_ns"], 0.02)
    wide = sorted(c for c, e in checks.items() if e["verdict"] != "precise")
    assert wide, "a coin toss came out within 2%"
    out = res.stdout + res.stderr
    assert "not within +-2%: " + ", ".join(c for c in checks if c in wide) in out
    # the replay: the report of the recording shows the same verdict
    rep = rtax("report", str(rec))
    assert rep.returncode == 0
    assert "not within +-2%: " + ", ".join(c for c in checks if c in wide) in rep.stdout
    doc = json.loads(rtax("report", str(rec), "--format", "json").stdout)
    assert doc["precision"]["end"] == "max_trials"
    assert sorted(doc["precision"]["not_precise"]) == wide
    assert {c["cell"]: c["verdict"] for c in doc["precision"]["cells"]} == {
        c: e["verdict"] for c, e in checks.items()
    }
    # the engine's interval is the report's own P50 interval of total: one bootstrap
    for c in doc["cells"]:
        ev = checks[c["cell"]]
        lo, hi = c["phases"]["total"]["p50_ci95_ms"]
        assert (round(lo * 1e6), round(hi * 1e6)) == (ev["lo_ns"], ev["hi_ns"])


def test_max_time_ends_the_rounds(tmp_path: Path) -> None:
    prof = profile(tmp_path, 'trials = 5\nworkloads = ["coin"]\n', COIN, drivers='["local"]')
    rec = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(rec), "--precision", "1%",
               "--max-time", "2s")  # fmt: skip
    assert res.returncode == 0, res.stderr
    evs = events_of(rec)
    assert {e.get("end") for e in last_check(evs).values()} == {"max_time"}
    starts = [e["t_ns"] for e in evs if e["type"] == "trial_start"]
    assert 10 < len(starts) < 1000
    assert max(starts) < 3e9  # none started past the budget (and the run's own start)


def test_a_cell_whose_trials_all_fail_is_named_and_ends_the_rounds(tmp_path: Path) -> None:
    prof = profile(tmp_path, 'trials = 5\nworkloads = ["steady", "broken"]\n'
                   'precision = "25%"\n', STEADY + FALSE, drivers='["local"]')  # fmt: skip
    rec = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(rec), "--max-trials", "30")
    assert res.returncode == 0, res.stderr
    evs = events_of(rec)
    checks = last_check(evs)
    broken = "local/local/broken/exec"
    assert checks[broken]["verdict"] == "failing" and checks[broken]["n"] == 0
    assert checks[broken]["p50_ns"] is None
    assert measured_runs(evs)[broken] == 5  # one round, never another
    assert checks["local/local/steady/exec"]["verdict"] == "precise"
    assert {e.get("end") for e in checks.values()} == {"failing"}
    assert f"not within +-25%: {broken}" in res.stdout + res.stderr


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--precision", "0"], "argument --precision: expected a percentage such as 5%"),
        (["--precision", "0%"], "argument --precision: expected a percentage above 0%"),
        (["--precision", "abc"], "argument --precision: expected a percentage such as 5%"),
        (["--precision=-5%"], "argument --precision: expected a percentage such as 5%"),
        (["--precision", "-5%"], "argument --precision: expected one argument"),  # argparse's
        (["--precision", "101%"], "argument --precision: expected a percentage above 0%"),
        (["--precision", "5%", "--max-time", "0s"], "argument --max-time: expected a duration"),
        (["--precision", "5%", "--max-time", "soon"], "argument --max-time: expected a dur"),
        (["--precision", "5%", "--max-trials", "0"], "argument --max-trials: expected an int"),
        (["--max-trials", "50"], "max_trials: a budget of rounds needs precision"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, flags: list[str], says: str) -> None:
    prof = profile(tmp_path, 'trials = 5\nworkloads = ["steady"]\n', STEADY, drivers='["local"]')
    res = rtax("run", str(prof), "--headless", "-o", str(tmp_path / "r.jsonl"), *flags)
    assert res.returncode == 2
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    "run, says",
    [
        ('precision = "abc"', "p.toml:6: precision: expected a percentage such as 5%"),
        ("precision = 5", "p.toml:6: run.precision: expected string"),
        ('precision = "200%"', "p.toml:6: precision: expected a percentage above 0%"),
        ('precision = "5%"\nmax_time = "-1m"', "p.toml:7: max_time: expected a duration"),
        ('max_time = "1m"', "p.toml:6: max_time: a budget of rounds needs precision"),
        ('precision = "5%"\narrivals = ["burst:2"]', "precision: rounds run trials one after"),
    ],
)
def test_bad_profile_values_are_one_line(tmp_path: Path, run: str, says: str) -> None:
    prof = profile(tmp_path, f'workloads = ["steady"]\n{run}\n', STEADY, drivers='["local"]')
    res = rtax("run", str(prof), "--headless", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_the_rule_and_the_parsers() -> None:
    assert parse_precision("5%") == 0.05 and parse_precision(" 100% ") == 1.0
    assert parse_duration("90s") == 90 and parse_duration("10m") == 600
    assert parse_duration("1.5h") == 5400 and parse_duration("30") == 30
    assert within(100, 95, 105, 0.05) and not within(100, 94, 101, 0.05)
    x = [100] * 9  # too few, however narrow
    assert check_cell("c", x, 9, 0.05).verdict == "wide"
    assert check_cell("c", x + [100], 10, 0.05).verdict == "precise"
    assert check_cell("c", [], 4, 0.05).verdict == "failing"


def test_a_later_round_interleaves_its_cells_and_numbers_on() -> None:
    a, b = Cell("local", "local", "t0", "exec"), Cell("local", "stage", "t0", "exec")
    plan = build_round({a: 3, b: 2}, seed=1, round_=2, first_id=41)
    assert [p.id for p in plan] == [41, 42, 43, 44, 45]
    assert sorted(p.cell.driver for p in plan) == ["local"] * 3 + ["stage"] * 2
    assert not any(p.warmup for p in plan)
    assert plan == build_round({a: 3, b: 2}, seed=1, round_=2, first_id=41)  # seeded
    orders = {tuple(p.cell.driver for p in build_round({a: 3, b: 3}, 1, r, 1)) for r in range(8)}
    assert len(orders) > 1  # each round is shuffled anew
