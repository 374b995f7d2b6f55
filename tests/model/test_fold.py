"""The one fold from events to trial outcomes, shared by the report and the console."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtax_tui.analysis.report import build_report
from rtax_tui.model import events
from rtax_tui.model.errors import TrialError
from rtax_tui.model.fold import TrialFold
from rtax_tui.model.recording import read_recording
from rtax_tui.ui.livestate import LiveState

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
RECORDINGS = sorted(EXAMPLES.glob("*.jsonl"))


def _start(trial: int, warmup: bool = False) -> dict[str, Any]:
    return dict(
        events.trial_start(
            trial=trial, cell="h/d/w/exec", host="h", driver="d", workload="w",
            channel="exec", warmup=warmup, batch=None, steps=1,
        )
    )  # fmt: skip


def test_verdicts_follow_the_counting_rule() -> None:
    ended: list[int] = []
    fold = TrialFold(on_end=lambda t: ended.append(t.trial))
    evs: list[dict[str, Any]] = [
        _start(1, warmup=True),
        _start(2),
        dict(events.phase(2, "create", 10, True)),
        dict(events.phase(2, "create.image", 4, True)),
        dict(events.action(2, 0, 5, 0, True, 0, remote_ns=3)),
        dict(events.trial_end(2, True, None)),
        _start(3),
        dict(events.trial_end(3, False, TrialError("ready", "ready_timeout", "slow"))),
        _start(4),
        dict(events.action(4, 0, 5, 1, False, 0)),
        dict(events.trial_end(4, False, None)),
        _start(5),  # never ends: the run was killed
        dict(events.phase(99, "create", 1, True)),  # a trial that never started: ignored
    ]
    fold.feed(evs)
    t = fold.trials
    assert [t[i].verdict for i in (1, 2, 3, 4, 5)] == [
        "warmup", "measured", "failed", "invalid", "incomplete",
    ]  # fmt: skip
    assert ended == [2, 3, 4]
    assert t[2].phases == {"create": 10} and t[2].subphases == {"create.image": 4}
    assert t[2].actions == [5] and t[2].remote == [3] and t[2].total_ns() == 15
    assert t[3].error_kind == "ready_timeout" and t[2].error_kind is None
    assert t[4].actions == [5] and 99 not in t


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_report_and_console_count_what_the_fold_classifies(path: Path) -> None:
    rec = read_recording(path)
    fold = TrialFold()
    fold.feed(rec.events)
    want: dict[str, dict[str, int]] = {}
    for t in fold.trials.values():
        c = want.setdefault(t.cell, {"n": 0, "failed": 0, "invalid": 0, "warmup": 0})
        v = t.verdict
        if v == "warmup":
            c["warmup"] += 1
            continue
        c["n"] += 1
        if v in ("failed", "incomplete"):
            c["failed"] += 1
        elif v == "invalid":
            c["invalid"] += 1
    report = build_report(rec)
    live = LiveState()
    for ev in (rec.header, *rec.events):
        live.ingest(ev)
    for cell in report["cells"]:
        got = {k: cell[k] for k in ("n", "failed", "invalid", "warmup")}
        cs = live.cells[cell["cell"]]
        assert got == want[cell["cell"]] == {
            "n": cs.n, "failed": cs.failed, "invalid": cs.invalid, "warmup": cs.warmup
        }  # fmt: skip


def test_live_progress_counts_as_the_report_does() -> None:
    """The engine's live counters (what the headless progress line and the console show
    while a run goes) follow the fold's rule: a failed warm-up is not a failed trial."""
    from rtax_tui.analysis.report import build_report
    from rtax_tui.model.recording import Recording
    from tests.enginetools import W_BAD, W_OK, prof, run
    from tests.fakes import FakeDriver

    drv = FakeDriver()
    drv.fail["create"] = True
    s, ev = run(prof(trials=2, warmup=2), drv, {"w": W_OK})
    (cell,) = build_report(Recording("-", ev[0], ev[1:]))["cells"]
    assert (s.progress.done, s.progress.failed) == (4, cell["failed"]) == (4, 2)
    s, ev = run(prof(trials=2, warmup=1, workloads=("bad",)), FakeDriver(), {"bad": W_BAD})
    (cell,) = build_report(Recording("-", ev[0], ev[1:]))["cells"]
    assert (s.progress.failed, s.progress.invalid) == (cell["failed"], cell["invalid"]) == (0, 2)
