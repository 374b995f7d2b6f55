"""`rtax reproduce`: the studies' figures as data, each row tied to an experiment, and a
run whose "ours" is what the raw recordings say."""

from __future__ import annotations

import json
import re
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

ROOT = Path(__file__).resolve().parents[2]


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


def test_live_tables_wait_run_and_end_as_report_json(tmp_path, monkeypatch, capsys):
    """`--live FILE` (the console's view): a study file given by its path; the tables
    as `reproduce_document` builds them, rows waiting, then running with the trials
    planned, then report.json's document; the terminal's output as without it."""
    from rtax_tui.commands import reproduce as rep

    study = tmp_path / "tiny.toml"
    study.write_text(TINY)
    seen: list[dict] = []
    write_live = rep._write_live
    monkeypatch.setattr(rep, "_write_live", lambda p, d: (seen.append(json.loads(json.dumps(d))),
                                                          write_live(p, d)))  # fmt: skip
    live = tmp_path / "live.json"
    rc = cli.main(["reproduce", str(study), "--driver", "local,stage", "--root",
                   str(tmp_path / "out"), "--live", str(live)])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (out,) = (tmp_path / "out").iterdir()
    report = json.loads((out / "report.json").read_text())
    ours = [{r["label"]: r["ours"] for r in d["tables"][0]["rows"]} for d in seen]
    assert ours[0]["stage completion"] == {"status": "waiting"}
    assert ours[0]["docker completion"]["status"] == "unavailable"  # said from the start
    assert ours[1]["stage completion"] == {"status": "running", "done": 0, "of": 6}
    assert seen[1]["running"] == {"experiment": "start", "recording": str(out / "start.jsonl")}
    assert [d["state"] for d in seen][-1] == "done"
    final = json.loads(live.read_text())
    assert final["tables"] == report["tables"] and final["not_run"] == report["not_run"]
    assert studies.ours_text({"status": "running", "done": 2, "of": 6}) == "running: 2 of 6 trials"
    assert studies.ours_text({"status": "running", "done": 0, "of": None}) == "running"
    assert "stage completion" in captured.out  # the terminal's table, as ever


def test_a_study_file_must_be_named_as_a_study(tmp_path):
    bad = tmp_path / "a b.toml"
    bad.write_text(TINY)
    with pytest.raises(studies.RtaxError, match="not a study file"):
        studies.load_study(str(bad))
    with pytest.raises(studies.RtaxError, match="not a study file"):
        studies.load_study(str(tmp_path / "missing.toml"))


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
    assert "rtax probe --driver stage,docker,podman,libvirt --channel exec,shell" in out
    assert "--channel shell --trials 5 --warmup 1 --image lazy,pull" in out


# -- the paper's figures, trajectories, warm pools, projections and conditions ----------

FULL = """\
title = "tiny2"
source = "a test's own study"

[experiments.pools]
what = "T0 and T1, cold and from a warm pool"
profile = "t0"
workloads = ["t0", "t1"]
drivers = ["local", "stage"]
channels = ["exec"]
modes = ["cold", "pool"]
pool = 1
quick = { trials = 3, warmup = 0 }
full = { trials = 3, warmup = 0 }

[experiments.traj]
what = "trajectories of 10 and 50 actions"
profile = "trajectory"
workloads = ["trajectory-10", "trajectory-50"]
drivers = ["local"]
channels = ["exec"]
quick = { trials = 2, warmup = 0 }
full = { trials = 2, warmup = 0 }

[[tables]]
id = "t"
title = "start"
conditions = "N = 60, 3 warm-ups"
setup = { warmup = 3 }

[[rows]]
table = "t"
label = "stage ready"
experiment = "pools"
driver = "stage"
workload = "t0"
figure = "ready"
published = 0.001
n = 60
also = [{ label = "with assets (T1)", workload = "t1" }]

[[rows]]
table = "t"
label = "stage pool"
experiment = "pools"
driver = "stage"
workload = "t0"
figure = "pool"
published_text = "none"

[[rows]]
table = "t"
label = "local trajectories"
experiment = "traj"
driver = "local"
figure = "trajectory"
published_text = "none"

[[rows]]
table = "t"
label = "local projection"
experiment = "traj"
driver = "local"
workload = "trajectory-50"
figure = "project"
unit = "h"
published = 1000.0

[[figures]]
id = "f2"
kind = "cold-start"
title = "cold starts and pools"
experiments = ["pools"]

[[figures]]
id = "f1"
kind = "breakdown"
title = "breakdown"
experiments = ["pools"]

[[figures]]
id = "f4-5"
kind = "trajectory"
title = "trajectories"
experiments = ["traj"]

[[figures]]
id = "cap"
kind = "capacity"
title = "no capacity here"
experiments = ["pools"]
"""


def _raw_trials(path: Path) -> list[dict]:
    """Every measured trial of the recording, straight from its lines: its cell's
    driver, workload and mode, its top-level phases and its actions (ns)."""
    trials: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        t = trials.get(ev.get("trial"))
        if ev["type"] == "trial_start" and not ev["warmup"]:
            trials[ev["trial"]] = {
                "driver": ev["driver"], "workload": ev["workload"],
                "mode": "pool" if ev["cell"].endswith("+pool") else "cold",
                "phases": {}, "actions": [], "ok": False,
            }  # fmt: skip
        elif t is not None and ev["type"] == "phase" and "." not in ev["name"]:
            t["phases"][ev["name"]] = ev["dur_ns"]
        elif t is not None and ev["type"] == "action":
            t["actions"].append(ev["dur_ns"])
        elif t is not None and ev["type"] == "trial_end":
            t["ok"] = ev["ok"] and ev["valid"] is not False
    return [t for t in trials.values() if t["ok"]]


def _of(trials: list[dict], driver: str, workload: str, mode: str = "cold") -> list[dict]:
    got = [t for t in trials if (t["driver"], t["workload"], t["mode"]) == (driver, workload, mode)]
    assert got, (driver, workload, mode)
    return got


def _med_ms(values: list[float]) -> float:
    return float(np.median(values)) / 1e6


def test_figures_trajectories_pools_and_conditions_are_the_recordings(tmp_path, monkeypatch):
    import os

    from rtax_tui.render.tables import fmt_ms
    from tests.render.test_plots import Svg

    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny2.toml").write_text(FULL)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "tiny2", "--root", str(tmp_path / "out")]) == 0
    (out,) = (tmp_path / "out").iterdir()
    doc = json.loads((out / "report.json").read_text())
    rows = {r["label"]: r for r in doc["tables"][0]["rows"]}
    pools, traj = _raw_trials(out / "pools.jsonl"), _raw_trials(out / "traj.jsonl")

    # the ready row, far from its (made-up) figure: the verdict names what was measured
    ready = rows["stage ready"]
    assert ready["ours"]["p50_ms"] == pytest.approx(
        _med_ms([t["phases"]["ready"] for t in _of(pools, "stage", "t0")])
    )
    assets = _med_ms([t["phases"]["ready"] for t in _of(pools, "stage", "t1")])
    assert ready["far"] and f"with assets (T1): {assets:.2f} ms" in ready["verdict"]
    create = _med_ms([t["phases"]["create"] for t in _of(pools, "stage", "t0")])
    assert f"create {create:,.2f} ms" in ready["verdict"]
    assert "warm-ups a cell: 0 (study: 3)" in ready["differs"]
    cpus = json.loads((out / "pools.jsonl").read_text().splitlines()[0])["hosts"]["local"]["cpus"]
    assert f"here: {cpus} CPUs, not pinned, load " in "; ".join(ready["differs"])
    assert doc["machine"]["affinity"] == sorted(os.sched_getaffinity(0))

    # a warm pool beside the cold start it hides
    pool = rows["stage pool"]["ours"]
    assert pool["p50_ms"] == pytest.approx(
        _med_ms([t["phases"]["acquire"] for t in _of(pools, "stage", "t0", "pool")])
    )
    cold = [t["phases"]["create"] + t["phases"]["ready"] for t in _of(pools, "stage", "t0")]
    assert pool["cold_p50_ms"] == pytest.approx(_med_ms(cold))

    # trajectories: completion P50 per length and its cost an action
    lengths = rows["local trajectories"]["ours"]["lengths"]
    assert [x["steps"] for x in lengths] == [10, 50]
    for x in lengths:
        tr = _of(traj, "local", f"trajectory-{x['steps']}")
        total = _med_ms([sum(t["phases"].values()) + sum(t["actions"]) for t in tr])
        assert x["p50_ms"] == pytest.approx(total) and x["n"] == len(tr) == 2
        assert x["per_action_ms"] == pytest.approx(total / x["steps"])

    # rtax project's worker-hours for a million 150-action rollouts, from the medians
    tr = _of(traj, "local", "trajectory-50")
    med = {p: float(np.median([t["phases"][p] for t in tr])) / 1e9
           for p in ("create", "ready", "teardown")}  # fmt: skip
    action = float(np.median([a for t in tr for a in t["actions"]])) / 1e9
    hours = 1e6 * (sum(med.values()) + 150 * action) / 3600
    proj = rows["local projection"]
    assert proj["ours"]["value"] == pytest.approx(hours)
    assert proj["ratio"] == pytest.approx(hours / 1000.0)

    # the figures: drawn by rtax plot's code into plots/, their numbers the recording's
    figs = {f["id"]: f for f in doc["figures"]}
    assert figs["f2"]["file"] == "plots/f2-cold-start.svg" and figs["f2"]["why"] is None
    assert figs["cap"]["file"] is None and "no capacity batch" in figs["cap"]["why"]
    assert {p.name for p in (out / "plots").iterdir()} == {
        "f2-cold-start.svg", "f1-breakdown.svg", "f4-5-trajectory.svg"
    }  # fmt: skip
    svg = Svg(out / "plots" / "f2-cold-start.svg")
    assert svg.series == {"t0/exec": 2, "t1/exec": 2, "t0/exec+pool": 2, "t1/exec+pool": 2}
    for driver in ("local", "stage"):
        for wl in ("t0", "t1"):
            first = [t["phases"]["create"] + t["phases"]["ready"] for t in _of(pools, driver, wl)]
            assert fmt_ms(_med_ms(first)) in svg.texts, (driver, wl)
            acq = [t["phases"]["acquire"] for t in _of(pools, driver, wl, "pool")]
            assert fmt_ms(_med_ms(acq)) in svg.texts, (driver, wl)
    svg = Svg(out / "plots" / "f1-breakdown.svg")
    for driver in ("local", "stage"):
        tr = _of(pools, driver, "t0")
        mean = float(np.mean([sum(t["phases"].values()) + sum(t["actions"]) for t in tr])) / 1e6
        assert svg.has(f"{fmt_ms(mean)} ms (n=3)"), driver
    md = (out / "report.md").read_text()
    assert "![cold-start](plots/f2-cold-start.svg)" in md
    assert "not drawn: " in md and "## This machine as the run found it" in md


def test_the_projection_gap_is_the_most_worker_hours_over_the_fewest():
    cells = {
        "local/local/trajectory-150/exec": {"worker_hours": 10.0},
        "local/stage/trajectory-150/exec": {"worker_hours": 300.0},
        "local/libvirt/trajectory-150/exec": {"worker_hours": 540.0},
        "local/stage/trajectory-150/exec+pool": {"worker_hours": 1.0},
        "local/docker/trajectory-50/exec": {"worker_hours": 9999.0},
    }
    got = studies._project_gap(cells, "trajectory-150", "exec")
    assert got["value"] == pytest.approx(1.8) and got["extra_h"] == pytest.approx(240.0)
    one = studies._project_gap({k: v for k, v in cells.items() if "libvirt" not in k},
                               "trajectory-150", "exec")  # fmt: skip
    assert one["status"] == "failed" and "fewer than two" in one["why"]


def test_a_study_figure_must_name_a_plot_kind_a_file_name_and_a_run(tmp_path, monkeypatch):
    data = tmp_path / "studies"
    data.mkdir()
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    base = TINY.split("[[tables]]")[0] + '[[tables]]\nid = "t"\ntitle = "x"\nconditions = "c"\n'
    for fig, needle in [
        ('id = "../x"\nkind = "cdf"\ntitle = "x"\nexperiments = ["start"]', "figures[0].id"),
        ('id = "x"\nkind = "pie"\ntitle = "x"\nexperiments = ["start"]', "figures[0].kind"),
        ('id = "x"\nkind = "cdf"\ntitle = "x"\nexperiments = ["later"]', "no run of the study"),
    ]:
        (data / "bad.toml").write_text(base + "\n[[figures]]\n" + fig + "\n")
        with pytest.raises(studies.RtaxError, match=re.escape(needle)):
            studies.load_study("bad")
    (data / "bad.toml").write_text(base.replace('conditions = "c"', 'conditions = "c"\n'
                                                'setup = { cores = 2 }'))  # fmt: skip
    with pytest.raises(studies.RtaxError, match=r"setup\.cores: unknown"):
        studies.load_study("bad")


# -- the reports committed under docs/reproduce/: their numbers are their recordings' ----

COMMITTED = sorted((ROOT / "docs" / "reproduce").glob("reproduce-*/report.json"))


def test_a_report_of_each_study_is_committed_and_linked_from_the_readme():
    studies_done = {json.loads(p.read_text())["study"] for p in COMMITTED}
    assert studies_done == {"pvisor", "paper"}
    readme = (ROOT / "README.md").read_text()
    for p in COMMITTED:
        assert f"]({p.parent.relative_to(ROOT)}/report.md)" in readme, p


@pytest.mark.parametrize("report", COMMITTED, ids=lambda p: p.parent.name)
def test_a_committed_reports_rows_and_figures_are_its_recordings(report: Path) -> None:
    from rtax_tui.render.tables import fmt_ms
    from tests.render.test_plots import Svg

    doc = json.loads(report.read_text())
    study = studies.load_study(doc["study"])
    spec = {(r.table, r.label): r for r in study.rows}
    checked = 0
    for t in doc["tables"]:
        for row in t["rows"]:
            if row["ours"]["status"] != "measured":
                continue
            r = spec[t["id"], row["label"]]
            exp = study.experiments[r.experiment]
            if r.figure == "boundary":  # the probe's verdicts, from its recording's lines
                _check_boundary(report.parent / f"{r.experiment}.jsonl", r, row["ours"])
                checked += 1
                continue
            if exp.kind != "run":  # arithmetic, or rtax traj prepare's: no trial
                continue
            if r.figure == "image":
                cell = [r.get("driver"), r.get("workload")]
                got = _image_trials(report.parent / f"{r.experiment}.jsonl").values()
                mode = r.get("mode")
                tr = [x for x in got if x["mode"] == mode and x["cell"].split("/")[1:3] == cell]
                if r.get("part") == "ready":  # of the trials that passed; the bytes: of all
                    ready = [x["ready"] for x in tr if x["ok"]]
                    assert row["ours"]["p50_ms"] == pytest.approx(_med_ms(ready))
                elif r.get("part") == "fetched":
                    assert row["ours"]["value"] == float(np.median([x["fetched"] for x in tr]))
                else:
                    assert row["ours"]["value"] == max(x["size"] for x in tr)
                checked += 1
                continue
            trials = _raw_trials(report.parent / f"{r.experiment}.jsonl")
            wl = r.get("workload") or (exp.workloads[0] if exp.workloads else None)
            if r.figure in ("total", "ready"):
                tr = [t for t in _of(trials, r.get("driver"), wl) if t["ok"]]
                vals = [sum(t["phases"].values()) + sum(t["actions"]) if r.figure == "total"
                        else t["phases"]["ready"] for t in tr]  # fmt: skip
                assert row["ours"]["p50_ms"] == pytest.approx(_med_ms(vals)), row["label"]
                assert row["ours"]["n"] == len(vals)
                checked += 1
            elif r.figure == "trajectory":
                for x in row["ours"]["lengths"]:
                    tr = _of(trials, r.get("driver"), f"trajectory-{x['steps']}")
                    total = _med_ms([sum(t["phases"].values()) + sum(t["actions"]) for t in tr])
                    assert x["p50_ms"] == pytest.approx(total), (row["label"], x["steps"])
                checked += 1
            elif r.figure == "pool":
                tr = _of(trials, r.get("driver"), wl, "pool")
                assert row["ours"]["p50_ms"] == pytest.approx(
                    _med_ms([t["phases"]["acquire"] for t in tr])
                )
                checked += 1
            elif r.figure == "project":  # a million rollouts of 150 actions, from medians
                tr = _of(trials, r.get("driver"), wl)
                med = sum(float(np.median([t["phases"][p] for t in tr]))
                          for p in ("create", "ready", "teardown"))  # fmt: skip
                action = float(np.median([a for t in tr for a in t["actions"]]))
                hours = 1e6 * (med + 150 * action) / 1e9 / 3600
                assert row["ours"]["value"] == pytest.approx(hours), row["label"]
                checked += 1
    assert checked >= 2
    for f in doc["figures"]:
        assert f["file"] is not None, f
        svg = Svg(report.parent / f["file"])
        if f["kind"] != "cold-start":
            continue
        for e in f["experiments"]:  # each cold cell's create + ready P50, as written
            cells: dict[tuple[str, str], list[int]] = {}
            for t in _raw_trials(report.parent / f"{e}.jsonl"):
                if t["mode"] == "cold":
                    cells.setdefault((t["driver"], t["workload"]), []).append(
                        t["phases"]["create"] + t["phases"]["ready"]
                    )
            for key, first in cells.items():
                assert fmt_ms(_med_ms(first)) in svg.texts, (f["id"], key)


def _check_boundary(path: Path, r: studies.Row, ours: dict) -> None:
    from rtax_tui.model.checks import BY_NAME

    results: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == "probe" and ev["driver"] == r.get("driver"):
            results.setdefault(ev["check"], []).append(ev["result"])
    names = [*r.get("kept", []), *r.get("outside", [])]
    # a breach on any channel is a breach; else one it could not measure is n/a
    measured = [n for n in names if results.get(n) and ("n/a" not in results[n]
                                                        or "breached" in results[n])]  # fmt: skip
    ok = [n for n in measured if set(results[n]) == {BY_NAME[n].passed}]
    assert ours["passed"] == [len(ok), len(measured)], r.label


def test_what_was_measured_is_said_within_2x_too():
    row = {"label": "l", "published_text": "25 ms", "note": None, "ours_text": "16 ms",
           "ratio": 0.65, "far": False, "differs": ["d"], "verdict": None,
           "measured": ["with the assets: 24.11 ms"]}  # fmt: skip
    doc = {"study": "s", "title": "t", "source": "src", "size": "full", "not_run": {},
           "drivers_out": {}, "experiments": {},
           "tables": [{"id": "t", "title": "T", "conditions": "c", "rows": [row]}]}  # fmt: skip
    assert "| d; measured here: with the assets: 24.11 ms |" in reproduce_markdown(doc)


# -- pVisor's lazy client shell and workspace boundary (the rows once "not yet reproduced")

LAZY = """\
title = "lazy"
source = "a test's own study"

[experiments.lazy]
what = "T0 on stage's shell, its image lazy"
profile = "t0"
drivers = ["stage"]
channels = ["shell"]
images = ["lazy"]
quick = { trials = 3, warmup = 0 }
full = { trials = 3, warmup = 0 }

[[tables]]
id = "lazy"
title = "Lazy cold client shell"
conditions = "N = 30"

[[rows]]
table = "lazy"
label = "ready"
experiment = "lazy"
driver = "stage"
figure = "image"
mode = "lazy"
part = "ready"
published = 183.7
n = 30

[[rows]]
table = "lazy"
label = "fetched"
experiment = "lazy"
driver = "stage"
figure = "image"
mode = "lazy"
part = "fetched"
published = 2580417
unit = "bytes"
"""


def _image_trials(path: Path) -> dict[int, dict]:
    """Per measured trial, straight from the lines: its image mode, ready (ns) and the
    bytes the content server counted for it."""
    trials: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == "trial_start" and not ev["warmup"]:
            trials[ev["trial"]] = {"mode": ev.get("image"), "cell": ev["cell"], "ok": False}
        t = trials.get(ev.get("trial"))
        if t is None:
            continue
        if ev["type"] == "phase" and ev["name"] == "ready":
            t["ready"] = ev["dur_ns"]
        elif ev["type"] == "image":
            t["fetched"], t["size"] = ev["fetched"], ev["size"]
        elif ev["type"] == "trial_end":
            t["ok"] = ev["ok"] and ev["valid"] is not False
    return trials


def test_the_lazy_rows_are_the_image_delivery_of_the_recording(tmp_path, monkeypatch, capsys):
    """reproduce sets up the lazy image itself (the run makes the squashfs and starts the
    content server): ready and bytes fetched are the recording's lazy trials'."""
    import os

    from rtax_tui.drivers.toolkit import delivery

    if os.geteuid() != 0 or delivery.missing_tools():
        pytest.skip("image delivery mounts images: root with nginx, rclone, squashfs-tools")
    data = tmp_path / "studies"
    data.mkdir()
    (data / "lazy.toml").write_text(LAZY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    rc = cli.main(["reproduce", "lazy", "--root", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    (out,) = (tmp_path / "out").iterdir()
    doc = json.loads((out / "report.json").read_text())
    assert doc["experiments"]["lazy"]["rtax"][-2:] == ["--image", "lazy"]
    rows = {r["label"]: r for r in doc["tables"][0]["rows"]}
    trials = [t for t in _image_trials(out / "lazy.jsonl").values() if t["ok"]]
    assert len(trials) == 3 and all(t["mode"] == "lazy" for t in trials)
    ready = rows["ready"]["ours"]
    assert ready["p50_ms"] == pytest.approx(_med_ms([t["ready"] for t in trials]))
    assert ready["n"] == 3 and ready["cell"] == "local/stage/t0/shell~lazy"
    fetched = rows["fetched"]["ours"]
    assert fetched["value"] == pytest.approx(float(np.median([t["fetched"] for t in trials])))
    assert 0 < fetched["value"] < trials[0]["size"] // 4  # only what was read
    assert "bytes (local/stage/t0/shell~lazy, of" in rows["fetched"]["ours_text"]
    assert "N = 3 (published 30)" in rows["ready"]["differs"]


def test_the_lazy_row_says_the_one_command_that_sets_image_delivery_up(
    tmp_path, monkeypatch, capsys
):
    from rtax_tui.drivers.toolkit import delivery

    data = tmp_path / "studies"
    data.mkdir()
    (data / "lazy.toml").write_text(LAZY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.setattr(delivery, "missing_tools", lambda: ["nginx-light", "rclone"])
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert cli.main(["reproduce", "lazy", "--root", str(tmp_path / "out")]) == 0
    (out,) = (tmp_path / "out").iterdir()
    doc = json.loads((out / "report.json").read_text())
    why = "image delivery needs nginx-light, rclone: apt-get install nginx-light rclone"
    assert doc["not_run"] == {"lazy": why}
    assert doc["tables"][0]["rows"][0]["ours_text"] == f"not reproduced: {why}"


def _probe_recording(path: Path, verdicts: dict[tuple[str, str, str], str]) -> Path:
    """An `rtax probe -o` recording: its header and one `probe` event a verdict."""
    from rtax_tui.model.checks import BY_NAME

    evs: list[dict] = [{
        "type": "run", "t_ns": 1, "format": "rtax/1", "run_id": "p1",
        "started_at": "2026-12-07T00:00:00+00:00", "seed": 0, "argv": ["rtax", "probe"],
        "profile": {"name": "probe"}, "hosts": {"local": {"cpus": 2}},
    }]  # fmt: skip
    for i, ((driver, channel, check), result) in enumerate(verdicts.items()):
        evs.append({"type": "probe", "t_ns": 10 + i, "host": "local", "driver": driver,
                    "channel": channel, "check": check, "result": result,
                    "evidence": "e", "promised": True,
                    "kind": BY_NAME[check].kind})  # fmt: skip
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return path


def test_the_boundary_rows_are_the_probes_verdicts_on_the_workspace_checks(tmp_path):
    """pVisor's workspace boundary (writes kept, access outside the view blocked) read
    from the probe's recording: a breach on one channel, or a check it could not
    measure, is said, and `rtax report` on the recording has the same verdicts."""
    from rtax_tui.model.checks import BY_NAME
    from rtax_tui.model.recording import read_recording

    study = studies.load_study("pvisor")
    rows = {r.label: r for r in study.rows if r.table == "boundary"}
    names = [*rows["staged"].get("kept"), *rows["staged"].get("outside")]
    assert "workspace_persists" in names and "tmp_sentinel" in names and "other_env" in names
    verdicts: dict[tuple[str, str, str], str] = {}
    for ch in ("exec", "shell"):
        for name in names:
            passed = BY_NAME[name].passed
            verdicts["stage", ch, name] = passed
            verdicts["podman", ch, name] = passed
    verdicts["podman", "shell", "tmp_sentinel"] = "breached"  # one channel breached
    verdicts["podman", "exec", "assets_view"] = "n/a"  # one it could not measure
    rec = _probe_recording(tmp_path / "boundary.jsonl", verdicts)
    res = studies.Results(recordings={"boundary": read_recording(rec)})
    doc = studies.reproduce_document(study, res, "full")
    got = {r["label"]: r for t in doc["tables"] if t["id"] == "boundary" for r in t["rows"]}
    stage = got["staged"]
    assert stage["ours"]["passed"] == [len(names), len(names)] and stage["ours"]["n"] == 2
    assert stage["ratio"] == 1.0 and stage["published_text"].startswith("3/3")
    assert "N = 2 (published 3)" in stage["differs"]
    podman = got["OCI/Podman writable mounts"]["ours"]
    assert podman["passed"] == [len(names) - 2, len(names) - 1]
    assert "tmp_sentinel breached" in podman["detail"] and "n/a: assets_view" in podman["detail"]
    assert got["VM"]["ours"]["why"] == "the probe recorded no check of libvirt"
    assert got["safe"]["ours"]["status"] == "unavailable"
    res2 = subprocess.run([sys.executable, "-m", "rtax_tui", "report", str(rec), "--format",
                           "json"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res2.returncode == 0, res2.stderr
    checks = json.loads(res2.stdout)["probe"]["drivers"]["podman"]["checks"]
    assert checks["tmp_sentinel"]["result"] == "breached"


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ('figure = "image"\nmode = "lazy"\npart = "bytes"', "rows[0].part: 'bytes'"),
        ('figure = "image"\nmode = "pull"\npart = "ready"', "rows[0].mode: 'pull' is no image"),
        ('figure = "boundary"\nkept = ["workspace_persist"]', "rows[0].experiment: 'lazy' is"),
    ],
)
def test_a_bad_image_or_boundary_row_is_one_line_naming_the_field(tmp_path, monkeypatch, row,
                                                                   needle):  # fmt: skip
    data = tmp_path / "studies"
    data.mkdir()
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    head = LAZY.split("[[rows]]")[0]
    (data / "bad.toml").write_text(
        head + '[[rows]]\ntable = "lazy"\nlabel = "x"\nexperiment = "lazy"\n'
        'driver = "stage"\n' + row + "\n"
    )
    with pytest.raises(studies.RtaxError, match=re.escape(needle)):
        studies.load_study("bad")
    probe = head + '[experiments.p]\nwhat = "p"\nkind = "probe"\ndrivers = ["stage"]\n'
    (data / "bad.toml").write_text(
        probe + '[[rows]]\ntable = "lazy"\nlabel = "x"\nexperiment = "p"\n'
        'driver = "stage"\nfigure = "boundary"\nkept = ["workspace_persist"]\n'
    )
    with pytest.raises(studies.RtaxError, match=r"rows\[0\]\.kept: unknown check 'workspace_pe"):
        studies.load_study("bad")


def test_no_run_experiment_asks_a_vm_for_a_workload_the_vm_drivers_refuse():
    """A VM driver refuses a workload that reads rtax's assets at host paths (T2):
    `rtax run` then refuses the whole run, every driver's cells with it. So a study's
    VM rows that need one are `unavailable` with the reason, never run."""
    from pathlib import Path as P

    from rtax_tui.drivers.toolkit.assets import AssetPaths
    from rtax_tui.drivers.toolkit.vmguest import workload_problems

    from rtax_tui.engine.workloads import builtin_workloads

    fake = AssetPaths(P("/a"), P("/a/repo"), P("/a/attrs.git"), P("/a/fix.patch"), ("t",))
    table = builtin_workloads(fake)
    for name in studies.study_names():
        study = studies.load_study(name)
        for exp in study.experiments.values():
            if exp.kind != "run" or not set(exp.drivers) & set(studies.VM_DRIVERS):
                continue
            profile = load_profile(resolve_profile_path(str(exp.profile)))
            workloads = list(exp.workloads) or list(profile.workloads)
            wl = [table[w] for w in workloads if w in table]
            refused = [p.reason for p in workload_problems(wl, "boot") if "host paths" in p.reason]
            assert not refused, (name, exp.id, refused)


def test_the_spread_spans_the_vms_run_apart(tmp_path):
    """The paper's cold-start spread: the tiers' substrates and the VMs' (run apart, as
    they refuse T2) in one slowest / fastest."""
    from rtax_tui.model.recording import read_recording
    from tests.hostile.test_hostile_reproduce import _crafted

    tiers = read_recording(_crafted(tmp_path / "t.jsonl", {"a": "stage", "b": "docker"}))
    vms = read_recording(_crafted(tmp_path / "v.jsonl", {"a": "libvirt"}, 20_000_000))
    study = studies.load_study("paper")
    doc = studies.reproduce_document(
        study, studies.Results(recordings={"tiers": tiers, "tiers-vm": vms}), "quick"
    )
    spread = next(r for r in doc["tables"][0]["rows"] if r["figure"] == "spread")
    # create 1 ms + ready 2 ms (stage) against create 1 ms + ready 20 ms (libvirt)
    assert spread["ours"]["value"] == pytest.approx(21.0 / 3.0)
    assert "local/libvirt/t0/exec" in spread["ours"]["detail"]


def test_a_stop_between_two_experiments_keeps_what_ran_and_writes_the_report(
    tmp_path, monkeypatch, capsys
):
    """A stop signal (rtax's stop signals are a KeyboardInterrupt, model/signals.py) landing
    after the first experiment ended and before the second began: the first's recording
    and figures are kept, report.json and report.md written, the second said interrupted,
    exit 130. Before, rtax ended at once and wrote no report."""
    from rtax_tui.commands import reproduce as rep

    study = tmp_path / "two.toml"
    study.write_text(
        TINY.replace(
            '[experiments.later]\nwhat = "a later row"\nkind = "pending"\n'
            'why = "not yet reproduced: a test"\n',
            '[experiments.later]\nwhat = "T0 again"\nprofile = "t0"\ndrivers = ["local"]\n'
            'channels = ["exec"]\nquick = { trials = 2, warmup = 0 }\n'
            "full = { trials = 2, warmup = 0 }\n",
        )
    )
    say = rep._say

    def stop_before_the_second(text: str) -> None:
        if text.startswith("[2/2]"):
            raise KeyboardInterrupt
        say(text)

    monkeypatch.setattr(rep, "_say", stop_before_the_second)
    rc = cli.main(["reproduce", str(study), "--driver", "local", "--root", str(tmp_path / "out")])
    capsys.readouterr()
    assert rc == 130
    (out,) = (tmp_path / "out").iterdir()
    report = json.loads((out / "report.json").read_text())
    assert report["not_run"].get("later") == "interrupted", report["not_run"]
    assert "start" not in report["not_run"] and (out / "start.jsonl").exists()
    rows = {r["label"]: r["ours"] for r in report["tables"][0]["rows"]}
    assert rows["local ready"].get("n") == 3, rows["local ready"]
    assert (out / "report.md").exists()
