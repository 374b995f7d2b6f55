"""Gates (issue 38, items 4 and 5): compare's pairing rule, Holm's correction and the
practical threshold, `--fail-on regression`, `[thresholds]` / `--threshold`, `--summary`.
Cheap: the shipped example recordings and small crafted ones, no run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rtax_tui.analysis.gates import (
    check_thresholds,
    holm,
    judge,
    parse_min_effect,
    parse_threshold,
    regressions,
)
from rtax_tui.analysis.report import build_report, compare_reports, pair_cells
from rtax_tui.commands.cli import main
from rtax_tui.engine.profile import ProfileError, load_profile
from rtax_tui.model.recording import read_recording
from rtax_tui.model.thresholds import ThresholdError
from tests.render.test_report import Lines

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
T0 = EXAMPLES / "t0-local-stage.jsonl"
CELL = "local/local/T0/exec"


def crafted(path: Path, cell: str, creates: list[int], run_id: str = "r") -> Path:
    r = Lines(run_id)
    for i, c in enumerate(creates):
        r.trial(f"{run_id}{i}", cell, create=c, ready=2, actions=[1], teardown=1, orch=1)
    path.write_bytes(b"".join(r.lines()))
    return path


def test_holm_adjusts_step_down_and_stays_monotone() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([]) == []


def test_same_code_against_itself_flags_nothing() -> None:
    rec = read_recording(T0)
    cmp = compare_reports(rec, rec)
    judge(cmp, parse_min_effect("5%,0.5ms"))
    assert cmp["rows"] and {r["verdict"] for r in cmp["rows"]} == {"same"}
    assert regressions(cmp) == []
    assert "Holm-Bonferroni over" in cmp["correction"]


def test_a_small_difference_is_same_whatever_its_p(tmp_path) -> None:
    a = read_recording(crafted(tmp_path / "a.jsonl", CELL, [100] * 20, "a"))
    b = read_recording(crafted(tmp_path / "b.jsonl", CELL, [102] * 20, "b"))  # +2%: p tiny
    cmp = compare_reports(a, b)
    create = next(r for r in cmp["rows"] if r["phase"] == "create")
    judge(cmp, parse_min_effect("5%"))
    assert create["p_holm"] < 0.05 and create["verdict"] == "same"
    judge(cmp, parse_min_effect("1%,0.5ms"))
    assert create["verdict"] == "slower"
    assert [r["phase"] for r in regressions(cmp)] == ["create", "total"]


def test_min_effect_parsing() -> None:
    e = parse_min_effect("5%,0.5ms")
    assert (e.rel, e.abs_ms) == (0.05, 0.5)
    assert parse_min_effect("2ms").abs_ms == 2 and parse_min_effect("2ms").rel == 0
    with pytest.raises(ThresholdError, match="--min-effect: 'fast'"):
        parse_min_effect("fast")


def test_pairing_never_crosses_workloads(tmp_path) -> None:
    a = read_recording(crafted(tmp_path / "a.jsonl", "local/local/t0/exec", [5] * 5, "a"))
    b = read_recording(crafted(tmp_path / "b.jsonl", "local/local/mine/exec", [50] * 5, "b"))
    assert pair_cells(a, b) == {} and pair_cells(a, b, changed=True) == {}
    c = read_recording(crafted(tmp_path / "c.jsonl", "local/local/t0/shell", [5] * 5, "c"))
    assert pair_cells(a, c) == {}
    assert pair_cells(a, c, changed=True) == {"local/local/t0/exec": "local/local/t0/shell"}


def test_compare_fail_on_regression_sets_the_exit_code(tmp_path, capsys) -> None:
    a = crafted(tmp_path / "a.jsonl", CELL, [10 + i % 3 for i in range(20)], "a")
    b = crafted(tmp_path / "b.jsonl", CELL, [30 + i % 3 for i in range(20)], "b")
    assert main(["compare", str(a), str(a), "--fail-on", "regression"]) == 0
    assert main(["compare", str(b), str(a), "--fail-on", "regression"]) == 0  # faster
    summary = tmp_path / "summary.md"
    assert main(["compare", str(a), str(b), "--fail-on", "regression", "--summary",
                 str(summary)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert f"regression: {CELL} create:" in err
    assert "| slower |" in summary.read_text()
    assert main(["compare", str(a), str(b)]) == 0  # no gate asked: figures only


def test_a_threshold_parses_or_names_what_is_wrong() -> None:
    t = parse_threshold("stage/t0/exec create+ready p95 < 20ms", "x")
    assert (t.cell, t.what, t.stat, t.op, t.value) == ("stage/t0/exec", "create+ready", "p95",
                                                       "<", 20.0)  # fmt: skip
    assert parse_threshold("total p50 <= 1.5s", "x").value == 1500.0
    assert parse_threshold("failed == 0", "x").what == "failed"
    for text, why in (
        ("create p95 < 20", "needs its unit"),
        ("create p97 < 20ms", "unknown statistic 'p97'"),
        ("boot p95 < 20ms", "unknown phase 'boot'"),
        ("failed = 0", "expected `.CELL. WHAT OP VALUE`"),
        ("fidelity >= 80", "between 0 and 1"),
        ("failed == 0ms", "without a unit"),
    ):
        with pytest.raises(ThresholdError, match=f"^--threshold: threshold '.*': .*{why}"):
            parse_threshold(text, "--threshold")


def test_thresholds_against_the_t0_example() -> None:
    rec = read_recording(T0)
    report = build_report(rec)
    texts = ["stage/t0/exec create+ready p95 < 1s", "failed == 0", "stage/t0/exec total p50 < 1us",
             "nosuch/t0/exec create p50 < 1s", "fidelity >= 0.8"]  # fmt: skip
    res = check_thresholds(report, [parse_threshold(t, "x") for t in texts], lambda: rec)
    by = {(r.threshold.text, r.cell): r for r in res}
    assert by[(texts[0], "local/stage/t0/exec")].ok
    assert all(r.ok for r in res if r.threshold.text == "failed == 0")
    assert len([r for r in res if r.threshold.text == "failed == 0"]) == 4  # every cell
    assert not by[(texts[2], "local/stage/t0/exec")].ok
    assert not by[(texts[3], None)].ok  # no cell matches: breached, never vacuous
    assert not by[(texts[4], None)].ok  # no replay cell


def test_report_threshold_exit_code_and_summary(tmp_path, capsys) -> None:
    summary = tmp_path / "s.md"
    assert main(["report", str(T0), "--threshold", "failed == 0"]) == 0
    assert main(["report", str(T0), "--threshold", "stage/t0/exec create p95 < 1us",
                 "--summary", str(summary)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "threshold BREACHED: stage/t0/exec create p95 < 1us: local/stage/t0/exec" in err
    text = summary.read_text()
    assert text.startswith("# rtax report") and "## Gates" in text and "❌" in text
    assert main(["report", str(T0), "--threshold", "create p95 < 20"]) == 2  # bad: one line
    assert capsys.readouterr().err.count("\n") == 1


def test_recorded_thresholds_are_checked_by_report(tmp_path) -> None:
    lines = T0.read_bytes().splitlines()
    head = orjson.loads(lines[0])
    head["profile"]["thresholds"] = {"local/t0/exec create p95": "< 1us"}
    rec = tmp_path / "r.jsonl"
    rec.write_bytes(b"\n".join([orjson.dumps(head), *lines[1:]]) + b"\n")
    assert main(["report", str(rec), "--format", "json"]) == 1


def test_profile_thresholds_table(tmp_path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('[run]\ndrivers = ["local"]\n\n[thresholds]\nfailed = "== 0"\n'
                 '"create p95" = ["< 20ms", "> 0ms"]\n')  # fmt: skip
    prof = load_profile(p)
    assert prof.thresholds == {"failed": ["== 0"], "create p95": ["< 20ms", "> 0ms"]}
    assert prof.to_dict()["thresholds"] == prof.thresholds
    p.write_text('[run]\ndrivers = ["local"]\n\n[thresholds]\nfailed = "== 0"\n'
                 '"create p95" = "< 20"\n')  # fmt: skip
    with pytest.raises(ProfileError, match=r"p.toml:6: thresholds.create p95: threshold .*unit"):
        load_profile(p)


def test_a_difference_just_past_the_threshold_is_unclear_not_slower() -> None:
    """The p-value tests "within the practical threshold", not "no difference": a median 6%
    up whose interval reaches under 5% is not a regression yet."""
    from rtax_tui.analysis.stats import median_diff

    a = [(90 + i % 21) * 1e6 for i in range(84)]
    b = [x + 6e6 for x in a]
    assert median_diff(a, b, margin_ns=0)["p"] < 0.01
    assert median_diff(a, b, margin_ns=5e6)["p"] > 0.2


def test_compare_tests_against_the_threshold(tmp_path) -> None:
    noisy = [90 + i % 21 for i in range(84)]
    a = read_recording(crafted(tmp_path / "a.jsonl", CELL, noisy, "a"))
    b = read_recording(crafted(tmp_path / "b.jsonl", CELL, [c + 6 for c in noisy], "b"))
    effect = parse_min_effect("5%,0.5ms")
    cmp = compare_reports(a, b, min_effect=effect)
    judge(cmp, effect)
    create = next(r for r in cmp["rows"] if r["phase"] == "create")
    assert create["diff_ms"] == pytest.approx(6.0) and create["verdict"] == "unclear"
    c = read_recording(crafted(tmp_path / "c.jsonl", CELL, [c + 20 for c in noisy], "c"))
    cmp = compare_reports(a, c, min_effect=effect)
    judge(cmp, effect)
    assert next(r for r in cmp["rows"] if r["phase"] == "create")["verdict"] == "slower"


def test_junit_xml_from_report_and_compare(tmp_path) -> None:
    from xml.etree import ElementTree as ET

    out = tmp_path / "gates.xml"
    assert main(["report", str(T0), "--threshold", "failed == 0", "--threshold",
                 "stage/t0/exec create p95 < 1us", "--junit", str(out)]) == 1  # fmt: skip
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("5", "1")
    failed = [tc.get("name") for tc in suite if tc.find("failure") is not None]
    assert failed == ["stage/t0/exec create p95 < 1us [local/stage/t0/exec]"]
    a = crafted(tmp_path / "a.jsonl", CELL, [10 + i % 3 for i in range(20)], "a")
    b = crafted(tmp_path / "b.jsonl", CELL, [30 + i % 3 for i in range(20)], "b")
    assert main(["compare", str(a), str(b), "--junit", str(out)]) == 0
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "2"  # create and total slower


def test_the_report_is_drawn_full_width_into_a_log(tmp_path) -> None:
    """Not a terminal (a CI log): no column squeezed to 80 or cut, on stdout and when the
    report goes to stderr (as with `run -o -`)."""
    import subprocess
    import sys

    rec = EXAMPLES / "t0-stage-docker-libvirt-microvm.jsonl"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no COLUMNS from a terminal
    out = subprocess.run([sys.executable, "-m", "rtax_tui", "report", str(rec)],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    code = (
        "import sys; from rtax_tui.analysis.report import report_file; "
        "from rtax_tui.render.reporting import out_console, print_report; "
        f"print_report(report_file({str(rec)!r}), out_console(stderr=True))"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)  # fmt: skip
    for text in (out.stdout, err.stderr):
        table = [ln for ln in text.splitlines() if ln.startswith("│ local/")]
        assert table and "…" not in text
        assert max(len(ln) for ln in table) > 100  # its natural width, not 80


def test_report_reads_only_the_header_for_its_thresholds(tmp_path, monkeypatch) -> None:
    """A large recording is reported a chunk at a time: the gates read its header line and
    the whole file only for a figure the report has not (create+ready)."""
    import rtax_tui.commands.report as report_command
    import rtax_tui.model.recording as recording

    calls: list[str] = []
    real = recording.read_recording

    def counted(p):
        calls.append(str(p))
        return real(p)

    # the reader where it is defined, and where `rtax report` took it from
    monkeypatch.setattr(recording, "read_recording", counted)
    monkeypatch.setattr(report_command, "read_recording", counted)
    assert main(["report", str(T0), "--threshold", "failed == 0"]) == 0
    assert calls == []
    assert main(["report", str(T0), "--threshold", "stage/t0/exec create+ready p95 < 1s"]) == 0
    assert calls == [str(T0)]
