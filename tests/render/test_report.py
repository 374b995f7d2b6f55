import csv
import io
import json
import subprocess
import sys

import orjson
import pytest
from rich.console import Console

from rtax_tui.analysis.report import build_report, compare_reports, project_report
from rtax_tui.model.recording import read_stream
from rtax_tui.render.reporting import (
    LEGEND,
    fmt_ms,
    render_compare,
    render_csv,
    render_markdown,
    render_project,
    render_table,
)

MS = 1_000_000
LOCAL = "local/local/T0/exec"
DOCKER = "local/docker/T0/exec"
CAP = "local/stage/capacity/exec"
REMOTE_CAP = "ssh://u@h:22/podman/capacity/shell"


class Lines:
    def __init__(self, run_id="r1"):
        self.events = [
            {
                "type": "run",
                "t_ns": 0,
                "format": "rtax/1",
                "run_id": run_id,
                "started_at": "2025-01-01T00:00:00Z",
                "seed": 11,
                "argv": ["rtax", "run"],
                "profile": {"name": "smoke"},
                "hosts": {},
            }
        ]

    def add(self, **ev):
        ev.setdefault("t_ns", len(self.events))
        self.events.append(ev)

    def trial(
        self,
        tid,
        cell,
        *,
        create,
        ready,
        actions,
        teardown,
        orch,
        warmup=False,
        ok=True,
        valid=True,
        error=None,
        end=True,
        sub=None,
        batch=None,
    ):
        host, driver, workload, channel = cell.rsplit("/", 3)
        self.add(
            type="trial_start",
            trial=tid,
            cell=cell,
            host=host,
            driver=driver,
            workload=workload,
            channel=channel,
            warmup=warmup,
            batch=batch,
        )
        for name, ms in (sub or {}).items():
            self.add(type="phase", trial=tid, name=name, dur_ns=ms * MS, ok=True)
        self.add(type="phase", trial=tid, name="create", dur_ns=create * MS, ok=True)
        self.add(type="phase", trial=tid, name="ready", dur_ns=ready * MS, ok=True)
        for i, ms in enumerate(actions):
            self.add(type="action", trial=tid, i=i, dur_ns=ms * MS, rc=0, ok=True, out_bytes=10)
        self.add(type="phase", trial=tid, name="teardown", dur_ns=teardown * MS, ok=True)
        self.add(type="phase", trial=tid, name="orchestration", dur_ns=orch * MS, ok=True)
        if end:
            self.add(type="trial_end", trial=tid, ok=ok, valid=valid, error=error)

    def barrier(self, batch, cell, size, arrived, ok):
        self.add(
            type="barrier",
            batch=batch,
            cell=cell,
            size=size,
            arrived=arrived,
            released=True,
            ok=ok,
            deadline_s=60,
        )

    def lines(self, torn=False):
        out = [orjson.dumps(e) + b"\n" for e in self.events]
        if torn:
            out.append(b'{"type": "action", "tri')
        return out

    def recording(self, torn=False):
        return read_stream("test.jsonl", self.lines(torn))


def _main_lines(run_end=False):
    r = Lines()
    big = {"create": 1000, "ready": 1000, "actions": [1000], "teardown": 1000, "orch": 1000}
    r.trial("w0", LOCAL, warmup=True, **big)
    r.trial(
        "t1", LOCAL, create=10, ready=5, actions=[1, 2], teardown=3, orch=1, sub={"create.spawn": 2}
    )
    r.trial("d1", DOCKER, create=100, ready=50, actions=[10], teardown=20, orch=1)
    r.trial(
        "t2", LOCAL, create=20, ready=6, actions=[3], teardown=4, orch=1, sub={"create.spawn": 4}
    )
    r.trial("t3", LOCAL, create=30, ready=7, actions=[4, 5, 6], teardown=5, orch=2)
    r.trial(
        "t4",
        LOCAL,
        ok=False,
        valid=False,
        error={"phase": "ready", "kind": "timeout", "message": "probe"},
        **big,
    )
    r.trial("t5", LOCAL, ok=True, valid=False, **big)
    r.trial("d2", DOCKER, create=110, ready=50, actions=[10], teardown=20, orch=1)
    r.trial("d3", DOCKER, create=120, ready=50, actions=[10], teardown=20, orch=1)
    r.trial("c1", CAP, create=5, ready=5, actions=[5], teardown=5, orch=5, batch="b1")
    r.barrier("b1", CAP, 4, 4, True)
    r.barrier("b2", CAP, 4, 3, False)
    r.barrier("b3", REMOTE_CAP, 2, 0, False)
    r.trial("t6", LOCAL, end=False, **big)  # killed before trial_end
    if run_end:
        r.add(type="run_end", status="completed", trials=11)
    return r


@pytest.fixture
def report():
    return build_report(_main_lines().recording(torn=True), seed=0)


def _cell(report, cell):
    (c,) = [c for c in report["cells"] if c["cell"] == cell]
    return c


def test_report_run_block(report):
    assert report["format"] == "rtax-report/1"
    assert report["run"] == {
        "run_id": "r1",
        "started_at": "2025-01-01T00:00:00Z",
        "seed": 11,
        "argv": ["rtax", "run"],
        "profile": "smoke",
        "status": "incomplete",
        "torn_tail": True,
        "trials": 11,
        "limits": "unknown",  # a header without `limits`: made before they were recorded
    }
    done = build_report(_main_lines(run_end=True).recording())
    assert done["run"]["status"] == "completed"
    assert done["run"]["torn_tail"] is False


def test_report_cells_order_and_counts(report):
    assert [c["cell"] for c in report["cells"]] == [LOCAL, DOCKER, CAP, REMOTE_CAP]
    c = _cell(report, LOCAL)
    assert (c["host"], c["driver"], c["workload"], c["channel"]) == ("local", "local", "T0", "exec")
    assert c["n"] == 6  # t1..t6, not the warm-up
    assert c["failed"] == 2  # t4 (not ok) and t6 (no trial_end)
    assert c["invalid"] == 1  # t5
    assert c["warmup"] == 1
    assert c["errors"] == {"timeout": 1, "incomplete": 1}
    assert c["capacity"] is None
    d = _cell(report, DOCKER)
    assert (d["n"], d["failed"], d["invalid"], d["warmup"]) == (3, 0, 0, 0)
    assert d["errors"] == {}


def test_report_phase_statistics_use_only_good_trials(report):
    ph = _cell(report, LOCAL)["phases"]
    assert list(ph) == ["create", "ready", "action", "teardown", "orchestration", "total"]
    assert ph["create"]["n"] == 3
    assert ph["create"]["p50_ms"] == pytest.approx(20.0)
    assert ph["create"]["min_ms"] == pytest.approx(10.0)
    assert ph["create"]["max_ms"] == pytest.approx(30.0)  # not 1000: excluded trials
    assert ph["ready"]["mean_ms"] == pytest.approx(6.0)
    assert ph["teardown"]["p95_ms"] == pytest.approx(4.9)  # linear: 4 + 0.9 * (5 - 4)
    assert ph["orchestration"]["p50_ms"] == pytest.approx(1.0)
    # action pools every action of t1, t2, t3: 1..6 ms
    assert ph["action"]["n"] == 6
    assert ph["action"]["p50_ms"] == pytest.approx(3.5)
    assert ph["action"]["mean_ms"] == pytest.approx(3.5)
    # total per trial: 10+5+3+3+1=22, 20+6+3+4+1=34, 30+7+15+5+2=59
    assert ph["total"]["n"] == 3
    assert ph["total"]["min_ms"] == pytest.approx(22.0)
    assert ph["total"]["p50_ms"] == pytest.approx(34.0)
    assert ph["total"]["max_ms"] == pytest.approx(59.0)
    lo, hi = ph["total"]["p50_ci95_ms"]
    assert 22.0 <= lo <= 34.0 <= hi <= 59.0
    sub = _cell(report, LOCAL)["subphases"]
    assert list(sub) == ["create.spawn"]
    assert sub["create.spawn"]["n"] == 2
    assert sub["create.spawn"]["p50_ms"] == pytest.approx(3.0)
    assert _cell(report, LOCAL)["clusters"] == {}


def test_report_capacity(report):
    cap = _cell(report, CAP)["capacity"]
    assert {k: cap[k] for k in ("batches", "passed_batches", "tasks", "arrived_tasks")} == {
        "batches": 2,
        "passed_batches": 1,
        "tasks": 8,
        "arrived_tasks": 7,
    }
    # one size (4), one of its two batches failed: no size passed; recordings made before
    # the budget's figures existed give null for them
    assert cap["sizes"] == [
        {
            "size": 4,
            "batches": 2,
            "passed": 1,
            "tasks": 8,
            "arrived": 7,
            "mem_peak_bytes": None,
            "oom_kills": None,
        }
    ]
    assert cap["largest_passing_size"] is None
    remote = _cell(report, REMOTE_CAP)
    assert (remote["host"], remote["driver"], remote["channel"]) == (
        "ssh://u@h:22",
        "podman",
        "shell",
    )
    assert remote["n"] == 0
    assert remote["phases"]["total"]["p50_ms"] is None
    rcap = remote["capacity"]
    assert {k: rcap[k] for k in ("batches", "passed_batches", "tasks", "arrived_tasks")} == {
        "batches": 1,
        "passed_batches": 0,
        "tasks": 2,
        "arrived_tasks": 0,
    }


def test_report_diffs(report):
    diffs = report["diffs"]
    assert [(d["a"], d["b"], d["phase"]) for d in diffs] == [
        (LOCAL, DOCKER, "total"),
        (LOCAL, DOCKER, "action"),
    ]
    total, action = diffs
    assert total["a_p50_ms"] == pytest.approx(34.0)
    assert total["b_p50_ms"] == pytest.approx(191.0)  # 110+50+10+20+1
    assert total["diff_ms"] == pytest.approx(157.0)
    assert total["ratio"] == pytest.approx(191.0 / 34.0)
    assert total["faster"] == "a"
    assert total["ci95_ms"][0] > 0
    assert action["diff_ms"] == pytest.approx(10.0 - 3.5)
    assert action["faster"] == "a"


def test_report_is_json_and_deterministic(report):
    again = build_report(_main_lines().recording(torn=True), seed=0)
    assert json.dumps(report, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_report_clusters_present_when_bimodal():
    r = Lines()
    for i in range(30):
        create = 5 + (i % 3) if i % 2 else 200 + (i % 3)
        r.trial(f"t{i}", LOCAL, create=create, ready=1, actions=[1], teardown=1, orch=1)
    rep = build_report(r.recording())
    cl = _cell(rep, LOCAL)["clusters"]
    assert list(cl) == ["create", "total"]
    assert [k["n"] for k in cl["create"]] == [15, 15]
    assert cl["create"][0]["p50_ms"] == pytest.approx(6.0)
    assert cl["create"][1]["p50_ms"] == pytest.approx(201.0)


def test_compare_reports():
    a = _main_lines().recording()
    rb = Lines("r2")
    for i, create in enumerate((40, 50, 60)):
        rb.trial(f"x{i}", LOCAL, create=create, ready=6, actions=[3], teardown=4, orch=1)
    rb.trial("y0", "local/podman/T0/exec", create=1, ready=1, actions=[1], teardown=1, orch=1)
    cmp = compare_reports(a, rb.recording(), seed=0)
    assert cmp["format"] == "rtax-compare/1"
    assert (cmp["a"], cmp["b"]) == ("r1", "r2")
    rows = {(r["cell"], r["phase"]): r for r in cmp["rows"]}
    assert set(rows) == {
        (LOCAL, p) for p in ("create", "ready", "action", "teardown", "orchestration", "total")
    }
    assert rows[(LOCAL, "create")]["diff_ms"] == pytest.approx(50.0 - 20.0)
    assert rows[(LOCAL, "create")]["faster"] == "a"
    assert rows[(LOCAL, "ready")]["diff_ms"] == pytest.approx(0.0)
    assert rows[(LOCAL, "ready")]["faster"] == "neither"


def test_project_report():
    proj = project_report(_main_lines().recording(), trajectories=1000, steps=50, seed=0)
    assert proj["format"] == "rtax-project/1"
    assert (proj["trajectories"], proj["steps"]) == (1000, 50)
    cells = {c["cell"]: c for c in proj["cells"]}
    local = cells[LOCAL]
    per_traj = 0.020 + 0.006 + 0.004 + 50 * 0.0035
    assert local["per_trajectory_s"] == pytest.approx(per_traj)
    assert local["worker_hours"] == pytest.approx(1000 * per_traj / 3600)
    lo, hi = local["ci95"]
    assert lo <= local["worker_hours"] <= hi
    assert cells[REMOTE_CAP]["worker_hours"] is None


def _text(renderable) -> str:
    console = Console(record=True, width=400, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_render_table(report):
    text = _text(render_table(report))
    assert "docker" in text and "stage" in text and "ssh://u@h:22" in text
    assert "34.0" in text  # local total P50
    assert "191" in text  # docker total P50
    assert "1/2, 7/8" in text  # capacity of the stage cell
    assert "capacity" in text
    no_cap = dict(report, cells=[c for c in report["cells"] if not c["capacity"]])
    assert "capacity" not in _text(render_table(no_cap))


def test_render_markdown(report):
    md = render_markdown(report)
    for cell in (LOCAL, DOCKER, CAP, REMOTE_CAP):
        assert cell in md
    assert "timeout: 1" in md
    assert "| local/docker/T0/exec | 3 | 0 | 0 |" in md
    assert "157" in md  # the docker - local difference of total
    assert LEGEND.splitlines()[0] in md


def test_each_format_points_to_a_legend_it_has(report):
    """The terminal prints no legend: its caption says where the columns are explained
    (and that command gives it); the Markdown's points to the legend it ends with."""
    from rtax_tui.render.reporting import print_report

    console = Console(record=True, width=400, file=io.StringIO())
    print_report(report, console)
    text = console.export_text()
    assert "see the legend" not in text and LEGEND.splitlines()[0] not in text
    assert "rtax report FILE --format markdown (its legend)" in text
    md = render_markdown(report)
    assert "## Cells (times in ms; every column in the legend at the end)" in md
    assert md.index("## Legend") > md.index("## Cells") and LEGEND.splitlines()[0] in md


def test_render_csv(report):
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    # 4 cells x 6 phases + 1 sub-phase
    assert len(rows) == 4 * 6 + 1
    by = {(r["cell"], r["phase"]): r for r in rows}
    t = by[(LOCAL, "total")]
    assert float(t["p50_ms"]) == pytest.approx(34.0)
    assert int(t["n"]) == 3 and int(t["trials"]) == 6 and int(t["failed"]) == 2
    assert float(by[(LOCAL, "create.spawn")]["p50_ms"]) == pytest.approx(3.0)
    assert by[(REMOTE_CAP, "total")]["p50_ms"] == ""


def test_render_compare_and_project():
    a = _main_lines().recording()
    cmp = compare_reports(a, _main_lines().recording(), seed=0)
    text = _text(render_compare(cmp))
    assert LOCAL in text and DOCKER in text and "neither" in text
    proj = project_report(a, trajectories=1000, steps=50)
    text = _text(render_project(proj))
    assert LOCAL in text and CAP in text
    # local worker-hours: 1000 * 0.205 / 3600 = 0.0569
    assert "0.0569" in text


def test_fmt_ms():
    assert fmt_ms(None) == "-"
    assert fmt_ms(0.0) == "0"
    assert fmt_ms(0.01234) == "0.0123"
    assert fmt_ms(1.234) == "1.23"
    assert fmt_ms(12.34) == "12.3"
    assert fmt_ms(1234.5) == "1,234"


def test_core_does_not_import_rich():
    code = (
        "import sys, rtax_tui.analysis.report, rtax_tui.analysis.stats; "
        "sys.exit(any(m.split('.')[0] in ('rich', 'textual') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_limits_lines_say_the_limits_and_warn_of_unlimited_ones(report):
    from rtax_tui.render.reporting import limits_lines, print_report

    # a recording made before limits were recorded
    assert report["run"]["limits"] == "unknown"
    console = Console(record=True, width=400, file=io.StringIO())
    print_report(report, console)
    assert "limits: unknown" in console.export_text()
    lines = limits_lines({"cpus": 1.0, "memory_mib": 4096, "pids": 1024, "workspace_mib": 2048})
    assert lines == ["limits: cpus 1.0, memory_mib 4096 MiB, pids 1024, workspace_mib 2048 MiB"]
    lines = limits_lines({"cpus": 1.0, "memory_mib": 4096, "pids": "unlimited"})
    assert lines[0] == "limits: cpus 1.0, memory_mib 4096 MiB, pids unlimited"
    assert "warning" in lines[1] and "unlimited pids" in lines[1]
