"""`rtax reproduce`: the studies' figures as data, each row tied to an experiment, and a
run whose "ours" is what the raw recordings say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rtax_tui.drivers import names as driver_names

from rtax_tui.analysis import studies
from rtax_tui.commands import cli
from rtax_tui.engine.profile import load_profile, resolve_profile_path
from rtax_tui.render.reproduce_render import reproduce_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_the_studies_load_and_every_row_names_an_experiment():
    assert studies.study_names() == ["paper", "pvisor"]
    for name in studies.study_names():
        study = studies.load_study(name)
        assert study.source and study.rows
        for row in study.rows:
            exp = study.experiments[row.experiment]
            assert row.table in {t.id for t in study.tables}
            if exp.kind == "run":
                profile = load_profile(resolve_profile_path(str(exp.profile)))
                assert set(exp.drivers) <= set(driver_names()), exp.id
                assert exp.counts["quick"] and exp.counts["full"], exp.id
                assert profile.name == exp.profile
            elif exp.kind == "prepare":
                assert all((ROOT / p).is_dir() for p in exp.paths)
            elif exp.kind in ("pending", "unavailable"):
                assert exp.why
            if row.get("driver") is not None:
                assert row.get("driver") in exp.drivers, row.label


def test_the_published_figures_are_the_issues():
    """A few figures as the study states them (issue 40), units included."""
    pv = {(r.table, r.label): r for r in studies.load_study("pvisor").rows}
    assert studies.published_text(pv["completion", "staged"]) == "0.64 s, n=60"
    assert studies.published_text(pv["capacity", "VM 32"]) == "3/5 batches, 138/160 tasks"
    assert studies.published_text(pv["completion", "staged - Docker"]) == (
        "-175.84 ms (95% CI -178.85 to -174.55), n=60"
    )
    paper = {r.label: r for r in studies.load_study("paper").rows}
    labels = ("1 s per rollout", "10 ms per action", "100 ms per action")
    assert [paper[k].get("published") for k in labels] == [278, 417, 4167]


def test_the_projection_rows_are_rtax_projects_arithmetic():
    study = studies.load_study("paper")
    doc = studies.reproduce_document(study, studies.Results(), "quick")
    proj = {r["label"]: r for t in doc["tables"] if t["id"] == "projection" for r in t["rows"]}
    assert proj["1 s per rollout"]["ours"]["value"] == pytest.approx(1e6 / 3600)
    assert proj["100 ms per action"]["ours"]["value"] == pytest.approx(1e6 * 150 * 0.1 / 3600)
    assert proj["10 ms per action"]["ratio"] == pytest.approx(416.667 / 417, rel=1e-4)


TINY = """\
title = "tiny"
source = "a test's own study"

[experiments.start]
what = "T0 on local, stage and docker"
profile = "t0"
drivers = ["local", "stage", "docker"]
channels = ["exec"]
quick = { trials = 3, warmup = 0 }
full = { trials = 3, warmup = 0 }
differs = ["a test"]

[experiments.later]
what = "a later row"
kind = "pending"
why = "not yet reproduced: a test"

[[tables]]
id = "t"
title = "start"
conditions = "N = 60"

[[rows]]
table = "t"
label = "stage completion"
experiment = "start"
driver = "stage"
figure = "total"
published = 1.0
unit = "s"
n = 60

[[rows]]
table = "t"
label = "local ready"
experiment = "start"
driver = "local"
figure = "ready"
published = 2.0
n = 60

[[rows]]
table = "t"
label = "docker completion"
experiment = "start"
driver = "docker"
figure = "total"
published = 0.8
unit = "s"

[[rows]]
table = "t"
label = "local - stage"
experiment = "start"
driver = "local"
versus = "stage"
figure = "diff"
published = -5.0

[[rows]]
table = "t"
label = "lazy"
experiment = "later"
figure = "pending"
published = 183.7
"""


def _raw_p50(path: Path, driver: str, phase: str) -> tuple[float, int]:
    """The P50 (ms) of `phase` (or the trial's total) over the measured trials of
    `driver`'s cell, straight from the recording's lines."""
    trials: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        t = trials.get(ev.get("trial"))
        if ev["type"] == "trial_start" and ev["driver"] == driver and not ev["warmup"]:
            trials[ev["trial"]] = {"phases": {}, "actions": 0, "ok": False}
        elif t is not None and ev["type"] == "phase" and "." not in ev["name"]:
            t["phases"][ev["name"]] = ev["dur_ns"]
        elif t is not None and ev["type"] == "action":
            t["actions"] += ev["dur_ns"]
        elif t is not None and ev["type"] == "trial_end":
            t["ok"] = ev["ok"] and ev["valid"] is not False
    got = [
        (sum(t["phases"].values()) + t["actions"]) if phase == "total" else t["phases"][phase]
        for t in trials.values()
        if t["ok"]
    ]
    return float(np.median(got)) / 1e6, len(got)


def test_a_tiny_run_writes_the_directory_and_ours_is_the_recordings(tmp_path, monkeypatch, capsys):
    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny.toml").write_text(TINY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["reproduce", "tiny", "--size", "quick", "--driver", "local,stage",
                   "--root", str(tmp_path / "out")])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "[1/1] start: T0 on local, stage and docker" in captured.err
    (out,) = (tmp_path / "out").iterdir()
    assert out.name.startswith("reproduce-tiny-")
    assert {p.name for p in out.iterdir()} == {"start.jsonl", "report.json", "report.md"}
    doc = json.loads((out / "report.json").read_text())
    rows = {r["label"]: r for r in doc["tables"][0]["rows"]}

    stage = rows["stage completion"]
    p50, n = _raw_p50(out / "start.jsonl", "stage", "total")
    assert stage["ours"]["p50_ms"] == pytest.approx(p50) and stage["ours"]["n"] == n == 3
    lo, hi = stage["ours"]["ci95_ms"]
    assert lo <= p50 <= hi
    assert stage["ratio"] == pytest.approx(p50 / 1000.0)
    assert "N = 3 (published 60)" in stage["differs"]
    local = rows["local ready"]
    local_p50, _ = _raw_p50(out / "start.jsonl", "local", "ready")
    assert local["ours"]["p50_ms"] == pytest.approx(local_p50)
    # whichever way it falls, the verdict follows the ratio
    assert local["far"] == (local["ratio"] > 2 or local["ratio"] < 0.5)
    if local["far"]:
        assert "conditions that differ: a test; N = 3 (published 60)" in local["verdict"]
    diff = rows["local - stage"]["ours"]
    assert diff["p50_ms"] == pytest.approx(
        _raw_p50(out / "start.jsonl", "local", "total")[0]
        - _raw_p50(out / "start.jsonl", "stage", "total")[0]
    )
    # a driver that cannot run says why; a pending row says so
    assert rows["docker completion"]["ours"] == {
        "status": "unavailable", "why": "docker: left out by --driver"
    }  # fmt: skip
    assert rows["lazy"]["ours_text"] == "not yet reproduced: a test"
    md = (out / "report.md").read_text()
    assert "| docker completion | 0.8 s |" in md and "left out by --driver" in md
    assert "stage completion" in captured.out  # the terminal's table


def test_markdown_escapes_every_text():
    doc = {
        "study": "s", "title": "t", "source": "src", "size": "quick", "not_run": {},
        "drivers_out": {"x": "a | b <script>"},
        "experiments": {"e": {"what": "w", "kind": "run", "rtax": ["run", "t0"], "why": None}},
        "tables": [{"id": "t", "title": "T*", "conditions": "c", "rows": [{
            "label": "l", "published_text": "1 ms", "note": None, "ours_text": "cell a|b_*x*",
            "ratio": 3.0, "far": True, "differs": ["d"], "verdict": "more than 2x: d",
        }]}],
    }  # fmt: skip
    md = reproduce_markdown(doc)
    assert "cell a\\|b\\_\\*x\\*" in md and "a \\| b \\<script>" in md
    assert "3.00x (more than 2x)" in md and "## T\\*" in md


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["reproduce", "nope"], "rtax: error: unknown study 'nope' (known: paper, pvisor)"),
        (["reproduce", "pvisor", "--size", "huge"], "--size: expected one of quick, full"),
    ],
)
def test_a_bad_study_or_size_is_one_line_exit_2(args, needle):
    res = subprocess.run([sys.executable, "-m", "rtax_tui", *args], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_list_names_every_row_and_its_experiment(capsys):
    assert cli.main(["reproduce"]) == 0
    out = capsys.readouterr().out
    for name in studies.study_names():
        for row in studies.load_study(name).rows:
            assert row.label in out
    assert "rtax run capacity-pvisor --headless --driver stage,podman,libvirt" in out
