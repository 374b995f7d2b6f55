"""The console's live model agrees with `rtax report` on the same recording."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtax_tui.analysis.report import build_report
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import PHASES
from rtax_tui.ui.histogram import Layout, draw
from rtax_tui.ui.livestate import N_BINS, LiveState, bin_edges_ns, bin_of
from tests.consolerecs import OTHER, SHAKY, STEADY, marked_run, noise

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
RECORDINGS = sorted(EXAMPLES.glob("*.jsonl"))


def _fed(path: Path) -> LiveState:
    rec = read_recording(path)
    st = LiveState()
    for ev in (rec.header, *rec.events):
        st.ingest(ev)
    return st


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_live_figures_equal_the_report(path: Path) -> None:
    st = _fed(path)
    report = build_report(read_recording(path))
    assert len(report["cells"]) == len(st.cells) > 0
    for cell in report["cells"]:
        cs = st.cells[cell["cell"]]
        assert (cs.n, cs.failed, cs.invalid, cs.warmup) == (
            cell["n"],
            cell["failed"],
            cell["invalid"],
            cell["warmup"],
        )
        for p in PHASES:
            p50, p95 = cs.phases[p].percentiles_ms(exact=True)
            want = cell["phases"][p]
            assert len(cs.phases[p].samples) == want["n"]
            if want["n"]:
                assert p50 == pytest.approx(want["p50_ms"], rel=1e-9)
                assert p95 == pytest.approx(want["p95_ms"], rel=1e-9)
            assert sum(cs.phases[p].counts) == want["n"]


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_planned_count_matches_the_trials_of_a_complete_run(path: Path) -> None:
    rec = read_recording(path)
    assert rec.end is not None and rec.end["status"] == "completed"
    st = _fed(path)
    starts = sum(1 for e in rec.events if e["type"] == "trial_start")
    assert st.planned == starts == st.ended
    assert st.status == "completed" and st.eta_s() is None


def test_barrier_marks_follow_a_batch() -> None:
    rec = read_recording(EXAMPLES / "capacity-local-stage.jsonl")
    st = LiveState()
    st.ingest(rec.header)
    first_batch = None
    seen_working = False
    for ev in rec.events:
        if ev["type"] == "trial_start":  # as the engine now writes them
            ev = {**ev, "steps": 2, "batch_size": 8, "deadline_s": 60}
        st.ingest(ev)
        if ev["type"] == "trial_start" and first_batch is None:
            first_batch = ev["batch"]
        if ev["type"] == "barrier":
            break
        marks = st.batch_marks()
        assert len(marks) == 8  # the batch's size is known from its first trial
        if "working" in marks:
            seen_working = True
    assert seen_working
    assert st.batch is not None and st.batch.batch == first_batch
    assert st.batch.released == "all_arrived"
    assert st.batch_marks() == ["arrived"] * 8
    assert st.batches_per_cell() == 3


def test_a_failed_trial_is_logged_with_phase_and_reason() -> None:
    st = LiveState()
    st.ingest({"type": "run", "t_ns": 0, "profile": {"trials": 2, "drivers": ["x"]}})
    st.ingest(
        {"type": "trial_start", "t_ns": 1, "trial": 1, "cell": "h/x/t0/exec", "host": "h",
         "driver": "x", "workload": "t0", "channel": "exec", "warmup": False, "batch": None}
    )  # fmt: skip
    st.ingest({"type": "phase", "t_ns": 2, "trial": 1, "name": "create", "dur_ns": 5, "ok": False})
    err = {"phase": "create", "kind": "substrate_lost", "message": "dockerd went away"}
    st.ingest(
        {"type": "trial_end", "t_ns": 3, "trial": 1, "ok": False, "valid": False, "error": err}
    )
    cs = st.cells["h/x/t0/exec"]
    assert (cs.n, cs.failed) == (1, 1)
    assert len(cs.phases["create"]) == 0  # failed trials never reach the statistics
    [f] = st.failures
    assert (f.trial, f.phase, f.kind, f.message) == (
        1,
        "create",
        "substrate_lost",
        "dockerd went away",
    )
    assert st.planned == 2 and st.eta_s() is not None


def test_bins_are_log_spaced_and_cover_each_value() -> None:
    for ns in (1_500, 12_345, 999_999, 1_000_000, 2_500_000_000):
        lo, hi = bin_edges_ns(bin_of(ns))
        assert lo <= ns < hi * 1.000001
    assert bin_of(10**15) == N_BINS - 1
    assert bin_of(0) == 0


def test_histogram_marks_the_median_where_it_falls() -> None:
    counts = [0] * N_BINS
    for ns in (1_000_000,) * 10 + (10_000_000,) * 3:  # 1 ms x10, 10 ms x3
        counts[bin_of(ns)] += 1
    out = draw(counts, 40, 6, p50_ms=1.0, p95_ms=10.0, log=True).plain.split("\n")
    assert len(out) == 6
    marker = out[-2]
    col50 = Layout(counts, 40, True).col_of_ns(1e6)
    assert marker[col50] == "▲"
    bars = out[:-2]
    assert bars[0][col50] == "█"  # the tallest bar is the median's bin
    assert (
        "log" in out[-1] and "lin" in draw(counts, 40, 6, p50_ms=1.0, p95_ms=10.0, log=False).plain
    )
    assert "no samples" in draw([0] * N_BINS, 40, 6, p50_ms=None, p95_ms=None).plain


def test_linear_axis_puts_equal_gaps_at_equal_distances() -> None:
    counts = [0] * N_BINS
    for ns in (10_000_000, 20_000_000, 30_000_000):
        counts[bin_of(ns)] += 1
    lay = Layout(counts, 100, log=False)
    c1, c2, c3 = (lay.col_of_ns(v) for v in (1e7, 2e7, 3e7))
    assert abs((c2 - c1) - (c3 - c2)) <= 1
    log = Layout(counts, 100, log=True)
    l1, l2, l3 = (log.col_of_ns(v) for v in (1e7, 2e7, 3e7))
    assert (l2 - l1) > (l3 - l2) + 3  # on a log axis the gap shrinks


def _batch_events(batch: str, first: int, size: int, arrive: int, peak: int) -> list[dict]:
    cell = "local/stage/capacity/exec"
    evs: list[dict] = []
    for k in range(size):
        evs.append(
            {"type": "trial_start", "t_ns": 1, "trial": first + k, "cell": cell, "host": "local",
             "driver": "stage", "workload": "capacity", "channel": "exec", "warmup": False,
             "batch": batch, "steps": 1, "batch_size": size, "deadline_s": 60}
        )  # fmt: skip
    for k in range(arrive):
        evs.append({"type": "action", "t_ns": 2, "trial": first + k, "i": 0, "dur_ns": 5,
                    "rc": 0, "ok": True, "out_bytes": 1})  # fmt: skip
    evs.append(
        {"type": "barrier", "t_ns": 3, "batch": batch, "cell": cell, "size": size,
         "arrived": arrive, "released": "settled", "ok": arrive == size, "deadline_s": 60,
         "warmup": False, "release_ns": 9, "release_dur_ns": 4, "mem_peak_bytes": peak,
         "oom_kills": size - arrive, "cpu_ns": 1}
    )  # fmt: skip
    return evs


def test_capacity_curve_per_size_and_a_dense_barrier_view() -> None:
    from rtax_tui.ui.widgets import DENSE_OVER, density_bar

    st = LiveState()
    prof = {"drivers": ["stage"], "workloads": ["capacity"], "warmup": 0,
            "capacity": {"size": 8, "sizes": [2, 1000], "batches": 1}}  # fmt: skip
    st.ingest({"type": "run", "t_ns": 0, "profile": prof})
    assert st.planned == 1002
    for ev in _batch_events("b1", 1, 2, 2, 70 << 20) + _batch_events("b2", 3, 1000, 990, 2 << 30):
        st.ingest(ev)
    sizes = st.cells["local/stage/capacity/exec"].capacity.sizes
    assert (sizes[2].passed, sizes[2].batches, sizes[2].arrived, sizes[2].tasks) == (1, 1, 2, 2)
    assert (sizes[1000].passed, sizes[1000].arrived, sizes[1000].oom_kills) == (0, 990, 10)
    assert sizes[1000].mem_peak_bytes == 2 << 30
    # a batch of 1,000: counts per state on two lines, not a thousand marks
    marks = st.batch_marks()
    assert len(marks) == 1000 > DENSE_OVER
    counts = {k: marks.count(k) for k in set(marks)}
    text = density_bar(counts, 1000).plain
    assert len(text.splitlines()) == 2 and max(len(line) for line in text.splitlines()) < 80
    assert "arrived 990" in text and "working 10" in text


def test_planned_count_of_a_run_with_modes_and_arrival_patterns(tmp_path: Path) -> None:
    """The live view's count follows the engine's plan: every mode, and a burst's trials
    rounded up to whole bursts."""
    import subprocess
    import sys

    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ndrivers = ["local"]\nworkloads = ["t0"]\ntrials = 5\nwarmup = 1\n'
        'modes = ["cold", "pool"]\narrivals = ["sequential", "burst:4", "rate:50"]\n'
        "[pool]\nsize = 2\n"
    )
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet",
         "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rec = read_recording(out)
    starts = sum(1 for e in rec.events if e["type"] == "trial_start")
    assert starts == 2 * ((5 + 1) + (8 + 1) + (5 + 1))  # burst:4 of 5 trials: 2 bursts
    st = _fed(out)
    assert st.planned == starts == st.ended


def test_marks_agree_with_the_report(tmp_path: Path) -> None:
    """Stability, programs that differ and the precision verdict: the live state says
    what `rtax report` says of the same recording, folding each event once."""
    path = marked_run(tmp_path / "marks.jsonl")
    st = _fed(path)
    report = build_report(read_recording(path))
    for cell in report["cells"]:
        cid = cell["cell"]
        assert st.stability(cid, exact=True) == cell.get("noise")
        want = [(d["cell"], d["diffs"]) for d in cell["programs"]["differ"]] if (
            "programs" in cell
        ) else []  # fmt: skip
        assert st.programs_differ(cid) == want
    assert st.stability(SHAKY)["unstable"] and not st.stability(STEADY)["unstable"]
    assert [c for c, _ in st.programs_differ(STEADY)] == [OTHER]
    prec = {c["cell"]: c for c in report["precision"]["cells"]}
    for cid in (STEADY, SHAKY, OTHER):
        verdict, reach = st.precision_of(cid)
        assert (verdict, reach) == (prec[cid]["verdict"], prec[cid]["within"])
    assert st.precision_end == "max_trials" and st.is_precision


def test_noise_samples_added_in_pieces_give_the_stability_of_all_at_once() -> None:
    """The live timeline grows as samples come (out of order too): the same verdict as
    one built from all of them."""
    from rtax_tui.analysis.noise_report import Timeline, stability

    samples = [noise(float(s), load1=4.0 if s % 3 == 0 else 0.5) for s in range(2, 40)]
    starts = np.arange(1, 40, dtype=np.int64) * 1_000_000_000
    durs = np.full(starts.size, 500_000_000, dtype=np.int64)
    grown = Timeline()
    for part in (samples[10:20], samples[:10], samples[30:], samples[20:30]):
        grown.extend(part)
    assert stability(starts, durs, grown) == stability(starts, durs, samples)
    assert stability(starts, durs, samples)["unstable"]
