"""Noise seen and named (issue 38): the sampler beside a run, the report's "may be
unstable" and outliers, the rough-interval mark, the sampler's end, doctor's advice."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

from rtax_tui.analysis.noise_report import stability
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import TIMED_PHASES

HOG = "while True: pass"


def rtax(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=timeout
    )


def profile(tmp_path: Path, trials: int, step: str, drivers: str = '"local"') -> Path:
    p = tmp_path / "p.toml"
    p.write_text(
        f'[run]\ntrials = {trials}\nwarmup = 1\ndrivers = [{drivers}]\nworkloads = ["w"]\n'
        f'channels = ["exec"]\n[workloads.w]\nsteps = [{{argv = {step}}}]\n'
    )
    return p


def samplers_of(pid: int) -> list[int]:
    """The noise samplers whose root is rtax process `pid` (hosts/noise.py's argv)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"hosts/noise.py") for a in argv) and str(pid).encode() in argv:
            out.append(int(d))
    return out


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


@pytest.fixture
def hog():
    """A busy loop beside the run, on every core, killed after the test."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 1)]
    time.sleep(0.5)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("driver", ["local", "stage"])
def test_samples_recorded_and_a_hog_beside_the_run_marks_the_cell(tmp_path, hog, driver):
    out = tmp_path / "r.jsonl"
    prof = profile(tmp_path, 12, '["sleep", "0.2"]', f'"{driver}"')
    res = rtax("run", str(prof), "--headless", "-o", str(out))
    assert res.returncode == 0, res.stderr
    rec = read_recording(out)
    noise = [e for e in rec.events if e["type"] == "noise"]
    assert len(noise) >= 2, [e["type"] for e in rec.events]
    types = [e["type"] for e in rec.events]
    assert types[-1] == "run_end" and types.index("noise") > 0  # after the header
    at = [e["at_ns"] for e in noise]
    assert at == sorted(at) and all(e["host"] == "local" for e in noise)
    for e in noise:
        assert 0 <= e["own"] <= e["busy"] <= 1 and e["cpus"] == os.cpu_count()
        assert e["other"] >= 0.25  # the hog: a core of each
    # the console (the run's own report) and the report say it, with the reason
    assert "may be unstable: other processes used" in res.stdout
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    (cell,) = rep["cells"]
    assert cell["noise"]["unstable"] and cell["noise"]["kinds"]["other_cpu"] == 1.0
    assert any(
        r.startswith("other processes used") and r.endswith("during 100% of this cell's trials")
        for r in cell["noise"]["reasons"]
    )
    cmp = rtax("compare", str(out), str(out))
    assert "may be unstable: other processes used" in cmp.stdout, cmp.stdout


def test_the_sampler_ends_with_the_run_and_after_kill_9(tmp_path):
    out = tmp_path / "r.jsonl"
    prof = profile(tmp_path, 200, '["sleep", "0.1"]')
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while b'"type":"noise"' not in (out.read_bytes() if out.exists() else b""):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        (sampler,) = samplers_of(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while not gone(sampler):
            assert time.monotonic() < deadline, "the sampler outlived rtax's kill -9"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # and a run that ends as it should leaves none either
    prof = profile(tmp_path, 3, '["true"]')
    run = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o",
         str(tmp_path / "s.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.wait(timeout=120) == 0
    assert samplers_of(run.pid) == []


# -- the report's figures, from recordings written here ---------------------------------


def _recording(cells: dict[str, list[int]], noise: list[dict[str, object]]) -> bytes:
    """A recording of measured trials with these totals (ns, as one action each), one
    after the other from t=1 s, and these noise events."""
    lines = [{"type": "run", "t_ns": 0, "format": "rtax/1", "run_id": "r", "started_at": "x",
              "seed": 0, "argv": [], "profile": {}, "hosts": {}}]  # fmt: skip
    t, trial = 1_000_000_000, 0
    for cell, totals in cells.items():
        for dur in totals:
            trial += 1
            lines.append({"type": "trial_start", "t_ns": t, "trial": trial, "cell": cell,
                          "host": "local", "driver": "local", "workload": "w",
                          "channel": "exec", "warmup": False, "batch": None})  # fmt: skip
            lines.append({"type": "action", "t_ns": t + dur, "trial": trial, "i": 0,
                          "dur_ns": dur, "rc": 0, "ok": True, "out_bytes": 0})  # fmt: skip
            lines.append({"type": "trial_end", "t_ns": t + dur, "trial": trial, "ok": True,
                          "valid": True, "error": None})  # fmt: skip
            t += dur + 1000
    lines += [{"t_ns": t, **n} for n in noise]
    lines.append({"type": "run_end", "t_ns": t, "status": "completed", "trials": trial})
    return b"".join(orjson.dumps(e) + b"\n" for e in lines)


def _tukey(xs: list[int]) -> tuple[int, int]:
    """Mild and severe outliers, computed apart from rtax (statistics' quartiles)."""
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    iqr = q3 - q1
    severe = [x for x in xs if x < q1 - 3 * iqr or x > q3 + 3 * iqr]
    mild = [x for x in xs if (x < q1 - 1.5 * iqr or x > q3 + 1.5 * iqr) and x not in severe]
    return len(mild), len(severe)


def _totals_from_raw(path: Path) -> dict[str, list[int]]:
    """Per cell, each measured good trial's total (timed phases and actions), read from
    the recording's lines with json alone."""
    starts, sums, good = {}, {}, set()
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == "trial_start" and not ev["warmup"]:
            starts[ev["trial"]] = ev["cell"]
            sums[ev["trial"]] = 0
        elif ev["type"] == "action" and ev["trial"] in sums:
            sums[ev["trial"]] += ev["dur_ns"]
        elif ev["type"] == "phase" and ev["trial"] in sums and ev["name"] in TIMED_PHASES:
            sums[ev["trial"]] += ev["dur_ns"]
        elif ev["type"] == "trial_end" and ev["ok"] and ev["valid"]:
            good.add(ev["trial"])
    out: dict[str, list[int]] = {}
    for trial, cell in starts.items():
        if trial in good:
            out.setdefault(cell, []).append(sums[trial])
    return out


def test_outliers_match_a_count_made_from_the_raw_recording(tmp_path):
    totals = [10_000_000 + 1000 * i for i in range(20)] + [10_040_000, 10_100_000, 90_000_000]
    path = tmp_path / "r.jsonl"
    path.write_bytes(_recording({"local/local/w/exec": totals}, []))
    rep = json.loads(rtax("report", str(path), "--format", "json").stdout)
    raw = _totals_from_raw(path)
    for c in rep["cells"]:
        mild, severe = _tukey(raw[c["cell"]])
        assert (c["outliers"]["mild"], c["outliers"]["severe"]) == (mild, severe)
    assert (mild, severe) == (1, 2)  # the case is one that has both
    text = rtax("report", str(path)).stdout
    assert "outliers in total: 1 mild (1.5 IQR), 2 severe (3 IQR) of 23" in text


def test_outliers_of_a_real_run_match_the_raw_recording(tmp_path):
    out = tmp_path / "r.jsonl"
    res = rtax("run", str(profile(tmp_path, 15, '["true"]')), "--headless", "-o", str(out))
    assert res.returncode == 0, res.stderr
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    raw = _totals_from_raw(out)
    (c,) = rep["cells"]
    assert len(raw[c["cell"]]) == 15
    assert (c["outliers"]["mild"], c["outliers"]["severe"]) == _tukey(raw[c["cell"]])


def test_an_interval_from_fewer_than_10_samples_is_marked_rough(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        _recording(
            {"local/local/w/exec": [5_000_000] * 5, "local/local/w/shell": [5_000_000] * 12}, []
        )
    )
    text = rtax("report", str(path)).stdout
    rows: dict[str, str] = {}
    for line in text.splitlines():  # the cells' table first (the diffs' table after it)
        if line.startswith("│ local/local/w/"):
            rows.setdefault(line.split()[1], line)
    assert "~5.00 / 5.00" in rows["local/local/w/exec"]
    assert "~" not in rows["local/local/w/shell"]
    assert "~: fewer than 10 samples: its interval is rough" in " ".join(text.split())
    md = rtax("report", str(path), "--format", "markdown").stdout
    assert "- `local/local/w/exec`: total P50 5.00 ms ~[" in md
    assert "- `local/local/w/shell`: total P50 5.00 ms [" in md


def _noise(at_s: float, **kw: object) -> dict[str, object]:
    return {"type": "noise", "host": "local", "at_ns": int(at_s * 1e9), "dur_ns": 1_000_000_000,
            "cpus": 2, "busy": 0.3, "own": 0.25, "other": 0.05, "steal": 0.0, "load1": 0.5,
            **kw}  # fmt: skip


def test_a_cell_is_unstable_only_for_the_trials_the_noise_touched(tmp_path):
    # 20 trials of 0.1 s from t=1 s (to ~3 s); the second cell's 20 from ~3 s to ~5 s
    cells = {"local/local/w/exec": [100_000_000] * 20, "local/local/w/shell": [100_000_000] * 20}
    noise = [_noise(s) for s in (2.0, 3.0, 4.0, 5.0)]
    noise[3] = _noise(5.0, load1=4.0, swap_in=12, swap_out=3)  # the shell cell's 2nd second
    path = tmp_path / "r.jsonl"
    path.write_bytes(_recording(cells, noise))
    rep = json.loads(rtax("report", str(path), "--format", "json").stdout)
    got = {c["cell"]: c["noise"] for c in rep["cells"]}
    assert got["local/local/w/exec"]["unstable"] is False
    assert got["local/local/w/exec"]["reasons"] == []
    shell = got["local/local/w/shell"]
    assert shell["unstable"] and set(shell["kinds"]) == {"load", "swap"}
    assert "load 4.0 on 2 cores during 55% of this cell's trials" in shell["reasons"]
    assert "swapping (15 pages a sample) during 55% of this cell's trials" in shell["reasons"]
    # a sample of another host, or outside every trial, says nothing
    assert stability(np.asarray([0]), np.asarray([10]), [_noise(9.0, other=0.9)]) is None


def test_doctor_says_what_to_change(hog):
    """Doctor's advice, measured with a hog on every core (doctor's section itself, not
    the whole `rtax doctor`: its driver checks under a hog took 20 s of the fast tier;
    test_doctor_words sees the section in a whole doctor's table)."""
    show = (  # in a process of its own: the hogs are this one's children, not "other"
        "from rich.console import Console; from rtax_tui.commands.doctor import _steadier; "
        "c = Console(record=True, width=300); _steadier(c); print(c.export_text())"
    )
    res = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, timeout=60)
    out = res.stdout
    assert "steadier figures: what to change here (measured over 1 s):" in out
    line = next(x for x in out.splitlines() if "other processes:" in x)
    share = int(line.split("other processes: ")[1].split("%")[0])
    assert share >= 40, line  # the hog's cores, measured
    assert "stop what else runs here" in line
