"""`rtax history PROFILE`: each phase's P50 run after run, and the runs where it stepped
(asv's step detection, analysis.step_detect), over recordings made by the real engine on
`local` and over minimal ones written with the model's writer."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.analysis.step_detect import detect_steps, segments
from rtax_tui.commands import cli
from rtax_tui.model.recording import RecordingWriter

# a workload whose one step sleeps as long as a file beside it says: the same definition
# (the same recorded steps) in every run, a slower host in the later ones
PROFILE = """\
name = "stepping"
[run]
drivers = ["local"]
workloads = ["sleepy"]
channels = ["exec"]
trials = 4
warmup = 0
[workloads.sleepy]
steps = [{{argv = ["sh", "-c", "sleep \\"$(cat {delay})\\""]}}]
"""
CELL = "local/local/sleepy/exec"


def history(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["history", *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def series_of(doc: dict[str, Any], cell: str) -> dict[str, Any]:
    (s,) = [s for s in doc["series"] if s["cell"] == cell]
    return s


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six runs of the profile on `local`: three whose step sleeps 100 ms, then three
    600 ms (a contrast that a loaded machine's noise, tens of ms here, does not blur: at
    5 ms, a shared machine's +10 ms between two steady runs was a step of 115%)."""
    root = tmp_path_factory.mktemp("history")
    delay = root / "delay"
    prof = root / "stepping.toml"
    prof.write_text(PROFILE.format(delay=delay))
    recs = root / "recordings"
    for i, sleep in enumerate(["0.100"] * 3 + ["0.600"] * 3):
        delay.write_text(sleep)
        out = recs / f"2026120{i}T000000Z-stepping.jsonl"
        assert cli.main(["run", str(prof), "--headless", "--quiet", "-o", str(out)]) == 0
    return root


def test_a_real_step_is_found_at_the_run_where_the_host_slowed(
    engine_runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = history(capsys, "stepping", "--dir", str(engine_runs / "recordings"),
                           "--format", "json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    s = series_of(doc, CELL)
    assert doc["format"] == "rtax-history/1" and doc["runs"] == 6
    assert len(s["runs"]) == 6 and s["definition"].startswith("sha256:")
    action = [st for st in s["steps"] if st["phase"] == "action"]
    # the one step up, at the first run at 600 ms; none among the steady 100 ms runs (the
    # later runs' own noise is the machine's, not asserted on)
    st = max(action, key=lambda x: x["diff_ms"])
    assert st["run"] == 3 and [x for x in action if x["run"] <= 3] == [st]
    assert st["diff_ms"] > 400 and st["diff_pct"] > 200
    assert st["run_id"] == s["runs"][3]["run_id"]
    assert [x["run"] for x in s["steps"] if x["phase"] == "total" and x["diff_ms"] > 400] == [3]


def test_steady_real_runs_report_no_step_of_their_workload(
    engine_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady = tmp_path / "steady"
    steady.mkdir()
    for p in sorted((engine_runs / "recordings").glob("*.jsonl"))[:3]:  # the 100 ms runs
        (steady / p.name).write_bytes(p.read_bytes())
    code, out, _ = history(capsys, "stepping", "--dir", str(steady), "--format", "json",
                           "--phase", "action")  # fmt: skip
    assert code == 0
    s = series_of(json.loads(out), CELL)
    assert len(s["runs"]) == 3 and s["steps"] == []


def test_the_table_marks_the_step_with_its_size(
    engine_runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = history(capsys, "stepping", "--dir", str(engine_runs / "recordings"),
                           "--phase", "action", "--cell", "sleepy")  # fmt: skip
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 6
    assert "▲" in rows[3] and all("▲" not in r and "▼" not in r for r in rows[:3])
    assert "%" in rows[3] and "ms" in rows[3]
    assert f"{CELL} action: ▲" in out and "at run 4" in out


# -- minimal recordings, written with the model's writer ----------------------------------


def write_run(
    path: Path,
    started: str,
    totals_ms: dict[str, list[float]],
    custom: dict[str, Any] | None = None,
    profile: str = "p",
) -> None:
    """A recording of one run: per cell, measured trials whose create is its total."""
    w = RecordingWriter.open(path)
    prof: dict[str, Any] = {"name": profile, "path": f"{profile}.toml"}
    if custom is not None:
        prof["custom_workloads"] = custom
    w.write({"type": "run", "t_ns": 0, "format": "rtax/1", "run_id": f"run-{started}",
             "started_at": started, "seed": 1, "argv": ["rtax"], "profile": prof,
             "hosts": {"local": {}}})  # fmt: skip
    trial = 0
    for cell, totals in totals_ms.items():
        host, driver, workload, channel = cell.split("/")
        for ms in totals:
            trial += 1
            w.write({"type": "trial_start", "t_ns": trial, "trial": trial, "cell": cell,
                     "host": host, "driver": driver, "workload": workload,
                     "channel": channel, "warmup": False, "batch": None})  # fmt: skip
            w.write({"type": "phase", "t_ns": trial, "trial": trial, "name": "create",
                     "dur_ns": int(ms * 1e6), "ok": True})  # fmt: skip
            w.write({"type": "trial_end", "t_ns": trial, "trial": trial, "ok": True,
                     "valid": True, "error": None})  # fmt: skip
    w.write({"type": "run_end", "t_ns": trial + 1, "status": "completed", "trials": trial})
    w.close()


def test_noisy_but_steady_runs_report_no_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(7)
    for i in range(16):
        level = 10 * (1 + rng.gauss(0, 0.15))  # 15% run-to-run noise, no change
        write_run(tmp_path / f"r{i:02}.jsonl", f"2026-12-01T00:{i:02}:00+00:00",
                  {"local/local/t0/exec": [level * 0.98, level, level * 1.02]})  # fmt: skip
    code, out, _ = history(capsys, "p", "--dir", str(tmp_path), "--format", "json")
    assert code == 0
    s = series_of(json.loads(out), "local/local/t0/exec")
    assert len(s["runs"]) == 16 and s["steps"] == []
    assert s["assumed"] and "assumed unchanged" in s["assumed"]  # a built-in: said so


def test_runs_are_ordered_by_start_and_a_changed_definition_is_another_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = {"w": [{"argv": ["sleep", "0.01"], "expect_rc": 0, "expect_out": None}]}
    b = {"w": [{"argv": ["sleep", "0.05"], "expect_rc": 0, "expect_out": None}]}
    cell = "local/local/w/exec"
    for i in range(4):  # written out of order: the header's start orders them
        write_run(tmp_path / f"a{3 - i}.jsonl", f"2026-12-01T0{i}:00:00+00:00",
                  {cell: [10.0, 10.1]}, custom=a)  # fmt: skip
        write_run(tmp_path / f"b{i}.jsonl", f"2026-12-02T0{i}:00:00+00:00",
                  {cell: [50.0, 50.2]}, custom=b)  # fmt: skip
    code, out, _ = history(capsys, "p", "--dir", str(tmp_path), "--format", "json")
    assert code == 0
    got = json.loads(out)["series"]
    assert [len(s["runs"]) for s in got] == [4, 4]  # never compared with each other
    assert got[0]["definition"] != got[1]["definition"]
    assert all(s["steps"] == [] and s["assumed"] is None for s in got)
    starts = [r["started_at"] for r in got[0]["runs"]]
    assert starts == sorted(starts)


def test_phase_and_cell_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(3):
        write_run(tmp_path / f"r{i}.jsonl", f"2026-12-01T0{i}:00:00+00:00",
                  {"local/local/t0/exec": [1.0], "local/stage/t0/exec": [5.0]})  # fmt: skip
    code, out, _ = history(capsys, "p", "--dir", str(tmp_path), "--format", "json",
                           "--phase", "create,total", "--cell", "stage")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert [s["cell"] for s in doc["series"]] == ["local/stage/t0/exec"]
    assert doc["phases"] == ["create", "total"]
    assert doc["series"][0]["runs"][0]["p50_ms"] == {"create": 5.0, "total": 5.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "history: no recording of profile 'nope' under {d} (profiles recorded: p)"),
        (["p", "--cell", "docker"], "history: no cell of profile 'p' matches --cell docker"),
        (["p", "--phase", "creat"], "unknown phase 'creat'"),
        (["{d}/missing.toml"], "{d}/missing.toml"),
        (["p", "--dir", "{d}/nowhere"], "{d}/nowhere: no such directory of recordings"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    write_run(tmp_path / "r.jsonl", "2026-12-01T00:00:00+00:00", {"local/local/t0/exec": [1.0]})
    argv = [a.format(d=tmp_path) for a in argv]
    if "--dir" not in argv:
        argv += ["--dir", str(tmp_path)]
    try:
        code = cli.main(["history", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message.format(d=tmp_path) in err, err


def test_an_unreadable_recording_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "20261201T000000Z-p.jsonl"
    write_run(good, "2026-12-01T00:00:00+00:00", {"local/local/t0/exec": [1.0]})
    lines = good.read_text().splitlines(keepends=True)
    bad = tmp_path / "20261202T000000Z-p.jsonl"
    bad.write_text("".join(lines[:2]) + '{"type": "phase", "t_ns": "x"}\n' + "".join(lines[2:]))
    code, _, err = history(capsys, "p", "--dir", str(tmp_path))
    assert code == 2
    assert err.startswith(f"rtax: error: {bad}:3: ") and len(err.strip().splitlines()) == 1
    # a file of another profile whose header does not read is skipped, and said
    bad.unlink()
    (tmp_path / "20261203T000000Z-other.jsonl").write_text("not json\n")
    code, out, err = history(capsys, "p", "--dir", str(tmp_path))
    assert code == 0 and "20261203T000000Z-other.jsonl:1:" in err and "skipped" in err


# -- the method itself --------------------------------------------------------------------


def test_step_detection_finds_a_step_in_noise_and_no_false_one_in_steady_noise() -> None:
    false_steps = missed = 0
    for seed in range(40):
        rng = random.Random(seed)
        n = rng.randint(6, 30)
        steady = [10 * (1 + rng.gauss(0, 0.15)) for _ in range(n)]
        false_steps += bool(detect_steps(steady, 0.05, 0.5))
        k = rng.randint(3, n - 3)
        stepped = [10 * (1 + rng.gauss(0, 0.1)) for _ in range(k)]
        stepped += [40 * (1 + rng.gauss(0, 0.1)) for _ in range(n - k)]
        missed += [s.at for s in detect_steps(stepped, 0.05, 0.5)] != [k]
    assert false_steps == 0 and missed == 0


def test_an_outlier_run_is_no_step_and_a_small_step_is_below_the_minimum() -> None:
    assert detect_steps([5.0, 5.1, 4.9, 5.0, 30.0, 5.1, 5.0, 4.9]) == []
    # 10.0 -> 10.2 is a clean level change to the fit, but 2% and 0.2 ms: not reported
    flat = [10.0] * 6 + [10.2] * 6
    assert len(segments(flat)) == 2 and detect_steps(flat, 0.05, 0.5) == []
    assert [s.at for s in detect_steps(flat, 0.01, 0.1)] == [6]
