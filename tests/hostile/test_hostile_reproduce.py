"""The red team on `rtax reproduce` (2026-12-06): its output directory.

`rtax reproduce` runs as root (stage, VMs) and writes `--root`/reproduce-<study>-<time>/
for minutes to hours. Another user who can rename entries of `--root` (its owner, or
anyone where it is writable without the sticky bit) swaps that directory for one of
their own after rtax made it, with `report.json` a link to a file of root's: rtax
wrote its report through the link. Such a `--root` is refused, in one line.
"""

from __future__ import annotations

import json
import os
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from rtax_tui.analysis import studies
from rtax_tui.commands import cli

TINY = """\
title = "tiny"
source = "a test's own study"

[experiments.start]
what = "T0 on local"
profile = "t0"
drivers = ["local"]
channels = ["exec"]
quick = { trials = 3, warmup = 0 }
full = { trials = 3, warmup = 0 }

[[tables]]
id = "t"
title = "start"
conditions = "N = 3"

[[rows]]
table = "t"
label = "local completion"
experiment = "start"
driver = "local"
figure = "total"
published = 1.0
unit = "s"
"""

OTHER = 65534  # nobody


def _swap(root: Path, victim: Path, stop: threading.Event) -> None:
    """The other user: once rtax made its directory, put theirs in its place."""
    while not stop.is_set():
        made = [p for p in root.iterdir() if p.name.startswith("reproduce-tiny-")]
        if made:
            made[0].rename(root / "moved")
            made[0].mkdir()
            (made[0] / "report.json").symlink_to(victim)
            os.chown(made[0], OTHER, OTHER)
            return
        time.sleep(0.001)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's directory needs root to make")
@pytest.mark.parametrize(("owner", "mode"), [(OTHER, 0o755), (0, 0o777)])
def test_a_root_another_user_can_rename_in_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    owner: int, mode: int,
) -> None:  # fmt: skip
    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny.toml").write_text(TINY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "root-only"
    victim.write_text("root's own\n")
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, owner, owner)
    root.chmod(mode)
    stop = threading.Event()
    other = threading.Thread(target=_swap, args=(root, victim, stop), daemon=True)
    other.start()
    try:
        rc = cli.main(["reproduce", "tiny", "--driver", "local", "--root", str(root)])
    finally:
        stop.set()
        other.join()
    err = capsys.readouterr().err
    assert victim.read_text() == "root's own\n"
    assert rc == 2, err
    assert f"--root {root}: " in err and len(err.strip().splitlines()) == 1, err
    assert list(root.iterdir()) == []


def test_the_directory_is_said_without_its_escapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `--root` named with terminal sequences (a title, a colour) is shown as text."""
    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny.toml").write_text(TINY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "r\x1b]0;PWNED\x07\x1b[31m"
    rc = cli.main(["reproduce", "tiny", "--driver", "local", "--root", str(root)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "\x1b" not in captured.err and "\x07" not in captured.err, captured.err
    assert "reproduce: " in captured.err


# -- red team 2026-12-06 (second pass): the report's new surfaces ------------------------
# A recording's names are anyone's (a crafted file, a custom workload, a replay's name):
# they reach reproduce's rows (the spread names its slowest and fastest cells), its
# figures (every label) and report.md. Tried: markdown and HTML (`|`, `<img ...>`,
# `*_[x](...)`), terminal sequences (OSC title, SGR colour, clear screen), matplotlib's
# mathtext (`$\nosuch$`, `$x^{2}$`) and GitHub's math (`$...$`), durations at 2**63-1.

HEADER = {
    "type": "run", "t_ns": 1, "format": "rtax/1", "run_id": "r1",
    "started_at": "2026-12-06T00:00:00+00:00", "seed": 1, "argv": ["rtax"],
    "profile": {"name": "t2", "warmup": 0}, "hosts": {"local": {"cpus": 2}},
}  # fmt: skip
EVIL = {
    "stage": "ev`il|<img src=x onerror=alert(1)>*_[x](http://e)\x1b]0;PWNED\x07\x1b[31m$\\nosuch{x}$",
    "docker": "b<i>x</i>\x1b[2J $\\Huge x^{2}$",
}  # fmt: skip


def _crafted(path: Path, drivers: dict[str, str], ready_ns: int = 2_000_000) -> Path:
    evs: list[dict[str, object]] = [HEADER]
    t, trial = 10, 0
    for k, name in enumerate(drivers.values()):
        for _ in range(3):
            trial += 1
            evs.append({
                "type": "trial_start", "t_ns": t, "trial": trial, "host": "local",
                "cell": f"local/{name}/t0/exec", "driver": name, "workload": "t0",
                "channel": "exec", "warmup": False, "batch": None,
            })  # fmt: skip
            for ph, dur in (("create", 1_000_000), ("ready", ready_ns * (k + 1)),
                            ("teardown", 1_000_000)):  # fmt: skip
                t += 1000
                evs.append({"type": "phase", "t_ns": t, "trial": trial, "name": ph,
                            "dur_ns": dur, "ok": True})  # fmt: skip
            t += 1000
            evs.append({"type": "trial_end", "t_ns": t, "trial": trial, "ok": True,
                        "valid": True, "error": None})  # fmt: skip
    evs.append({"type": "run_end", "t_ns": t + 1, "status": "completed", "trials": trial})
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return path


def test_a_crafted_recordings_names_stay_text_in_rows_figures_report_and_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rtax_tui.commands.reproduce import draw_figures
    from rtax_tui.model.recording import read_recording
    from rtax_tui.render.reporting import out_console
    from rtax_tui.render.reproduce_render import render_reproduce, reproduce_markdown

    rec = read_recording(_crafted(tmp_path / "tiers.jsonl", EVIL))
    study = studies.load_study("paper")
    res = studies.Results(recordings={"tiers": rec, "pools": rec})
    doc = studies.reproduce_document(study, res, "quick")
    spread = doc["tables"][0]["rows"][0]
    assert spread["ours"]["status"] == "measured" and "PWNED" in spread["ours_text"]
    assert spread["ours"]["value"] == pytest.approx(5.0 / 3.0)  # (1 + 4) / (1 + 2) ms
    out = tmp_path / "reproduce"
    out.mkdir()
    # matplotlib read `$\nosuch{x}$` in a label as mathtext and raised (a traceback,
    # and the report's figures lost); `$\Huge x^{2}$` drew as a formula
    doc["figures"] = draw_figures(study, res, out)
    drawn = [f for f in doc["figures"] if f["file"]]
    assert {f["kind"] for f in drawn} == {"breakdown", "cold-start", "cdf"}, doc["figures"]
    for f in drawn:
        svg = (out / f["file"]).read_text()
        ET.fromstring(svg)  # well-formed: no element of the name's making
        assert "<img" not in svg and "<i>" not in svg and "\x1b" not in svg
        assert "$\\nosuch{x}$" in svg and "$\\Huge x^{2}$" in svg  # as written, as text
    md = reproduce_markdown(doc)
    assert "\x1b" not in md and "\\x1b\\]0;PWNED" in md
    assert "\\<img src=x onerror=alert(1)>" in md and "ev\\`il\\|" in md
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert html.count("<img") == html.count('<img src="plots/') == len(drawn)  # ours only
    assert "<i>" not in html and "<a " not in html and "&lt;img src=x" in html
    # GitHub renders `$...$` as math: each `$` escaped
    assert "\\$\\\\Huge x^{2}\\$" in md and "$\\Huge" not in md.replace("\\$\\\\Huge", "")
    console = out_console()
    for table in render_reproduce(doc):
        console.print(table)
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed and "ev`il|" in printed


def test_a_terminal_sequence_in_any_row_text_is_shown_not_acted_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows carry texts rtax did not write (a daemon's error in `drivers_out`, an
    experiment's failure): the terminal's table shows each as text."""
    from rtax_tui.render.reporting import out_console
    from rtax_tui.render.reproduce_render import render_reproduce

    row = {"label": "l\x1b]52;c;cHduZWQ=\x07", "published_text": "p", "note": None,
           "ours_text": "not reproduced: docker: \x1b[2Jgone", "ratio": None, "far": False,
           "differs": ["[link=http://e]x[/link]"], "verdict": None}  # fmt: skip
    doc = {"study": "s", "tables": [{"title": "t\x1b[31m", "conditions": "c", "rows": [row]}]}
    console = out_console()
    for table in render_reproduce(doc):
        console.print(table)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]52;c;" in out and "[link=http://e]x[/link]" in out


def test_durations_that_add_past_int64_do_not_wrap_into_a_small_cold_start(tmp_path: Path) -> None:
    """Each duration in range (0..2**63-1), their sum not: create + ready wrapped to a
    negative cold start, and a trial's total to 2 µs, in the report and so in reproduce's
    spread. Durations this long are no measurement (no timeout allows them): a crafted
    recording's. The fold's sums saturate at the largest int64 instead."""
    from rtax_tui.analysis.report import build_report, startup_figures
    from rtax_tui.model.fold import INT64_MAX
    from rtax_tui.model.recording import read_recording

    rec = read_recording(_crafted(tmp_path / "big.jsonl", {"stage": "stage"}, 2**63 - 1))
    top_ms = float(INT64_MAX) / 1e6
    starts = startup_figures(rec)
    assert [s["p50_ms"] for s in starts.values()] == [pytest.approx(top_ms)], starts
    (cell,) = build_report(rec)["cells"]
    assert cell["phases"]["total"]["p50_ms"] == pytest.approx(top_ms)
    assert cell["phases"]["ready"]["p50_ms"] == pytest.approx(top_ms)  # in range: as read
    # a phase recorded twice in one trial, each in range: its sum saturates too
    lines = (tmp_path / "big.jsonl").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if '"name": "create"' in ln)
    lines.insert(at + 1, lines[at].replace('"dur_ns": 1000000', f'"dur_ns": {2**63 - 1}'))
    lines.insert(at + 1, lines[at].replace('"dur_ns": 1000000', f'"dur_ns": {2**63 - 1}'))
    (tmp_path / "twice.jsonl").write_text("\n".join(lines) + "\n")
    cells = build_report(read_recording(tmp_path / "twice.jsonl"))["cells"]
    creates = cells[0]["phases"]["create"]
    assert creates["max_ms"] == pytest.approx(top_ms) and creates["min_ms"] > 0
