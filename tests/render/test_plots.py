"""`rtax plot` for real: every kind drawn from the example recordings, read back.

The SVGs are parsed with xml.etree and checked for what a reader needs: the title,
axis labels with their units, one series per phase or per cell named as
`host/driver/workload/channel`, and figures that agree with `rtax report` (the
breakdown's totals are the report's mean totals; the plotted samples are the
report's). Bad input exits 2 with one line.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="matplotlib is not installed (a dependency of rtax)")

from rtax_tui.analysis.report import build_report  # noqa: E402
from rtax_tui.model.recording import read_recording  # noqa: E402
from rtax_tui.render.plots import (  # noqa: E402
    KINDS,
    PARTS,
    capacity_sizes,
    figure,
    kind_for,
    load_cells,
    plot,
)
from rtax_tui.render.tables import fmt_ms  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "recordings" / "examples"
T0 = EX / "t0-local-stage.jsonl"
T0_ALL = EX / "t0-stage-docker-libvirt-microvm.jsonl"
T2 = EX / "t2-local-stage.jsonl"
TRAJ = EX / "trajectory-local-stage.jsonl"
CAP = EX / "capacity-local-stage.jsonl"
LOAD = EX / "load-local-stage.jsonl"
IMAGE = EX / "image-stage.jsonl"
# the recordings each kind is drawn from in docs/plots.md (scripts/make-plots)
EXAMPLES = {
    "breakdown": (T0, T0_ALL),
    "cold-start": (T0, T0_ALL, T2),
    "cdf": (T0, T0_ALL),
    "trajectory": (TRAJ,),
    "capacity": (CAP,),
    "load": (LOAD,),
    "image": (IMAGE,),
}
SVG = "{http://www.w3.org/2000/svg}"


def rtax(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def draw(tmp_path: Path, kind: str, *recs: Path, suffix: str = ".svg") -> Path:
    out = tmp_path / f"{kind}{suffix}"
    res = rtax("plot", *map(str, recs), "--kind", kind, "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(out) and res.stderr == ""
    return out


class Svg:
    """What a reader of the figure sees: its texts, and its series by name."""

    def __init__(self, path: Path) -> None:
        self.root = ET.parse(path).getroot()  # raises on a malformed file
        assert self.root.tag == f"{SVG}svg"
        # a log axis' 10^k is "10" and a superscript "k": read as "10k"
        self.texts = [
            "".join(part.strip() for part in t.itertext()) for t in self.root.iter(f"{SVG}text")
        ]
        ids = [e.get("id", "") for e in self.root.iter()]
        assert len(ids) - ids.count("") == len(set(ids) - {""}), "an id is used twice"
        self.series: dict[str, int] = {}
        for i in ids:
            if i.startswith("series:"):
                name = i[len("series:") :].rsplit("#", 1)[0]
                self.series[name] = self.series.get(name, 0) + 1

    def has(self, fragment: str) -> bool:
        return any(fragment in t for t in self.texts)


def cells_of(*recs: Path) -> list[str]:
    return [c["cell"] for r in recs for c in build_report(read_recording(r))["cells"]]


def test_breakdown_stacks_the_five_phases_per_cell_and_totals_match_the_report(tmp_path):
    svg = Svg(draw(tmp_path, "breakdown", T0))
    report = build_report(read_recording(T0))
    assert set(svg.series) == set(PARTS)
    for p in PARTS:  # one bar segment per cell in each panel's series
        assert svg.series[p] == len(report["cells"])
    for c in report["cells"]:
        assert svg.has(c["cell"])  # the legend/axis names the cell host/driver/workload/channel
        total = c["phases"]["total"]["mean_ms"]
        assert svg.has(f"{fmt_ms(total)} ms (n={c['n']})"), (c["cell"], total)
    assert svg.has("Where a rollout's time goes")
    assert svg.has("time per trial, mean of measured trials (ms)")
    assert svg.has("cell (host/driver/workload/channel)")


def test_cold_start_has_a_series_per_tier_and_a_log_axis_in_ms(tmp_path):
    svg = Svg(draw(tmp_path, "cold-start", T0_ALL, T2))
    assert set(svg.series) == {"t0/exec", "t0/shell", "t2/exec"}
    assert svg.series["t0/exec"] == 4  # stage, docker, libvirt, microvm
    assert svg.series["t2/exec"] == 2  # local, stage
    for sub in ("local/local", "local/stage", "local/docker", "local/libvirt", "local/microvm"):
        assert sub in svg.texts
    assert svg.has("(ms, log)") and svg.has("Cold start")
    assert {"10", "100", "1,000"} <= set(svg.texts)  # the log axis' decades, plain
    # the bars are P50s of create + ready per trial, from the measured trials
    cell = next(c for c in load_cells([read_recording(T2)]) if c.cell == "local/stage/t2/exec")
    first = [(t.phases["create"] + t.phases["ready"]) / 1e6 for t in cell.trials]
    assert svg.has(fmt_ms(float(np.percentile(first, 50))))


def test_the_same_cell_in_two_recordings_is_told_apart(tmp_path):
    svg = Svg(draw(tmp_path, "cold-start", T0, T0_ALL))
    assert "t0/exec (t0-local-stage.jsonl)" in svg.series
    assert "t0/exec (t0-stage-docker-libvirt-microvm.jsonl)" in svg.series
    assert "t0/exec" in svg.series  # docker, libvirt, microvm: only in one


def test_cdf_has_a_panel_per_phase_and_a_line_per_cell(tmp_path):
    svg = Svg(draw(tmp_path, "cdf", T0_ALL))
    cells = cells_of(T0_ALL)
    assert set(svg.series) == set(cells) and len(cells) == 8
    for c in cells:
        assert svg.series[c] == 6  # create, ready, action, teardown, orchestration, total
    for title in ("create", "ready", "action (each)", "teardown", "orchestration", "total"):
        assert title in svg.texts
    assert svg.has("time (ms, log)") and svg.has("fraction of samples")
    assert svg.has("cell (host/driver/workload/channel)")


def test_the_plotted_samples_are_the_reports(tmp_path):
    """The figures use the one fold's measured trials: the same samples as `rtax report`."""
    for path in (T0, T0_ALL, T2, TRAJ):
        report = {c["cell"]: c for c in build_report(read_recording(path))["cells"]}
        for cell in load_cells([read_recording(path)]):
            for phase in ("create", "ready", "action", "teardown", "orchestration", "total"):
                x = cell.samples_ms(phase)
                want = report[cell.cell]["phases"][phase]
                assert x.size == want["n"], (path.name, cell.cell, phase)
                if x.size:
                    assert float(np.percentile(x, 50)) == pytest.approx(want["p50_ms"])


def test_trajectory_plots_time_and_composition_against_length(tmp_path):
    svg = Svg(draw(tmp_path, "trajectory", TRAJ))
    subs = {f"local/{d}/trajectory-S/{ch}" for d in ("local", "stage") for ch in ("exec", "shell")}
    assert subs <= set(svg.series)
    assert set(PARTS) <= set(svg.series)
    for p in PARTS:  # one 100% bar per substrate and length
        assert svg.series[p] == 4 * 3
    for steps in ("10", "50", "150"):
        assert steps in svg.texts and f"{steps} steps" in svg.texts
    assert svg.has("trajectory length (steps)")
    assert svg.has("completion time per trial (s)")
    assert svg.has("share of the mean trial's time (fraction)")


def test_the_trajectory_example_has_three_lengths_on_local_and_stage():
    rep = build_report(read_recording(TRAJ))
    cells = {c["cell"]: c for c in rep["cells"]}
    for d in ("local", "stage"):
        for n in (10, 50, 150):
            for ch in ("exec", "shell"):
                c = cells[f"local/{d}/trajectory-{n}/{ch}"]
                assert c["n"] >= 3 and c["failed"] == 0 and c["invalid"] == 0
                assert c["phases"]["action"]["n"] == c["n"] * n


def test_capacity_plots_passed_out_of_run_batches_per_size(tmp_path):
    svg = Svg(draw(tmp_path, "capacity", CAP))
    rep = build_report(read_recording(CAP))
    for c in rep["cells"]:
        cap = c["capacity"]
        assert svg.series[c["cell"]] == 1
        assert svg.has(f"{cap['passed_batches']}/{cap['batches']}")
    assert "8" in svg.texts  # the example's batch size
    assert svg.has("batch size (environments started at once)")
    assert svg.has("batches (filled: passed, dashed: run)")


def test_capacity_reads_a_list_of_sizes_when_the_report_has_one(tmp_path, monkeypatch):
    sizes = [
        {
            "size": 2,
            "batches": 3,
            "passed": 3,
            "tasks": 6,
            "arrived": 6,
            "mem_peak_bytes": 1,
            "oom_kills": 0,
        },
        {
            "size": 16,
            "batches": 3,
            "passed": 1,
            "tasks": 48,
            "arrived": 40,
            "mem_peak_bytes": 1,
            "oom_kills": 2,
        },
    ]
    assert capacity_sizes({"sizes": sizes, "largest_passing_size": 2}) == [
        {"size": 2, "batches": 3, "passed": 3},
        {"size": 16, "batches": 3, "passed": 1},
    ]
    assert capacity_sizes({"batches": 3, "passed_batches": 2, "tasks": 24}) == [
        {"size": 8, "batches": 3, "passed": 2}
    ]
    import rtax_tui.analysis.report as report_mod

    real = report_mod.build_report

    def with_sizes(rec, **kw):
        rep = real(rec, **kw)
        for c in rep["cells"]:
            c["capacity"] = {"sizes": sizes, "largest_passing_size": 2}
        return rep

    monkeypatch.setattr(report_mod, "build_report", with_sizes)
    out = plot([read_recording(CAP)], "capacity", tmp_path / "sizes.svg")
    svg = Svg(out)
    assert "2" in svg.texts and "16" in svg.texts
    assert svg.has("1/3") and svg.has("3/3")
    assert svg.series["local/local/capacity/exec"] == 2  # one bar per size


def test_png_output(tmp_path):
    out = draw(tmp_path, "breakdown", T0, suffix=".png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_the_same_input_draws_the_same_svg(tmp_path):
    a = plot([read_recording(T0)], "cdf", tmp_path / "a.svg").read_bytes()
    b = plot([read_recording(T0)], "cdf", tmp_path / "b.svg").read_bytes()
    assert a == b


def test_the_readme_and_the_docs_show_one_figure_of_each_kind():
    readme = (ROOT / "README.md").read_text()
    docs = (ROOT / "docs" / "plots.md").read_text()
    script = (ROOT / "scripts" / "make-plots").read_text()
    for kind in KINDS:
        path = ROOT / "docs" / "plots" / f"{kind}.svg"
        assert f"](docs/plots/{kind}.svg)" in readme, kind
        assert f"](plots/{kind}.svg)" in docs, kind
        assert f"--kind {kind} " in script, kind
        Svg(path)  # committed, and parses
    assert script.count("--kind") == len(KINDS)
    assert "|".join(KINDS) in readme.replace("\\|", "|")  # the command line lists them all


def test_the_console_key_picks_the_figure_of_the_recording():
    assert kind_for([read_recording(CAP)]) == "capacity"
    assert kind_for([read_recording(TRAJ)]) == "trajectory"
    assert kind_for([read_recording(T0)]) == "cdf"
    assert kind_for([read_recording(T2)]) == "cdf"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "pie", "-o", "x.svg", str(T0)], "rtax plot: error: argument --kind: invalid"),
        (["--kind", "cdf", "-o", "x.svg", "missing.jsonl"], "missing.jsonl: cannot open"),
        (["--kind", "cdf", "-o", "x.pdf", str(T0)], "-o x.pdf: the file name must end in .svg"),
        (["--kind", "cdf", "-o", "nodir/x.svg", str(T0)], "-o nodir/x.svg: no folder nodir"),
        (["--kind", "capacity", "-o", "x.svg", str(T0)], "no capacity batch to plot"),
        (["--kind", "trajectory", "-o", "x.svg", str(T0)], "needs trials of at least two"),
        (["--kind", "cdf", "-o", "x.svg", "bad.jsonl"], "bad.jsonl:2: not JSON"),
        (["--kind", "cdf", "-o", "x.svg", "empty.jsonl"], "empty.jsonl: empty recording"),
        (["--kind", "cdf", str(T0)], "the following arguments are required: -o"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "bad.jsonl").write_bytes(T0.read_bytes().split(b"\n")[0] + b"\n{not json\n{}\n")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    res = rtax("plot", *args, cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not (tmp_path / "x.svg").exists()


def test_the_console_key_g_writes_the_views_figure(tmp_path, monkeypatch):
    """`g` in a replay: the figure of the events so far, under recordings/plots/."""
    import asyncio

    from rtax_tui.ui.app import RtaxApp, replay_screen
    from rtax_tui.ui.monitor import MonitorScreen

    monkeypatch.chdir(tmp_path)
    want = tmp_path / "recordings" / "plots" / "capacity-local-stage-capacity.svg"

    async def go() -> None:
        app = RtaxApp(replay_screen(str(CAP), None))
        async with app.run_test(size=(120, 40)) as pilot:
            scr = app.screen
            assert isinstance(scr, MonitorScreen)
            while not scr.ended:
                await asyncio.sleep(0.02)
            await pilot.press("g")
            for _ in range(1500):
                if want.exists():
                    break
                await asyncio.sleep(0.02)
            await app.workers.wait_for_complete()
            await pilot.pause(0.1)
            notes = [n.message for n in app._notifications]
            assert f"plot: recordings/plots/{want.name}" in notes, notes
            await pilot.press("q")

    asyncio.run(go())
    svg = Svg(want)
    assert svg.series["local/stage/capacity/exec"] == 1


# -- geometry: what a reader sees on the canvas (issue 39) --------------------------


def drawn(kind: str, *recs: Path):
    """The figure as saved, laid out: its renderer gives every artist's pixels."""
    fig = figure([read_recording(r) for r in recs], kind)
    fig.canvas.draw()
    return fig, fig.canvas.get_renderer()


def overlap(a, b) -> float:
    """The area two boxes share (pixels^2), 0 when they only touch or are apart."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_draws_from_a_shipped_example(tmp_path, kind):
    recs = EXAMPLES[kind]
    assert all(r.parent == EX for r in recs)
    svg = Svg(draw(tmp_path, kind, *recs))
    assert svg.series  # something named was drawn


def test_the_load_and_image_examples_were_recorded_by_rtax():
    """Real runs with `[run] arrivals` and `[run] images`: the cells carry the pattern
    and mode, and the image example has the content server's byte counts."""
    load = read_recording(LOAD)
    assert load.header["argv"][:3] == ["rtax", "run", "t0"] and "--arrival" in load.header["argv"]
    cells = {c["cell"] for c in build_report(load)["cells"]}
    assert {c.split("@")[1] for c in cells if "@" in c} >= {"burst:4", "burst:8", "rate:4"}
    image = read_recording(IMAGE)
    assert "--image" in image.header["argv"]
    modes = {c["cell"].split("~")[1] for c in build_report(image)["cells"]}
    assert modes == {"cached", "pull", "lazy"}
    fetched = [e for e in image.events if e["type"] == "image"]
    assert fetched and any(e["fetched"] > 0 for e in fetched)


@pytest.mark.parametrize("kind", KINDS)
def test_no_legend_covers_a_panel_or_a_label(kind):
    fig, r = drawn(kind, *EXAMPLES[kind])
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for leg in legends:
        box = leg.get_window_extent(r)
        for ax in fig.axes:
            assert overlap(box, ax.bbox) < 1, (kind, "legend over a panel")
            for t in ax.texts:  # the value labels
                assert overlap(box, t.get_window_extent(r)) < 1, (kind, t.get_text())


def test_the_breakdown_legend_covers_no_total_label():
    fig, r = drawn("breakdown", T0, T0_ALL)
    labels = [t for ax in fig.axes for t in ax.texts]
    assert len(labels) == len(cells_of(T0, T0_ALL))
    (leg,) = fig.legends
    for t in labels:
        assert overlap(leg.get_window_extent(r), t.get_window_extent(r)) < 1, t.get_text()


@pytest.mark.parametrize(
    ("kind", "recs"), [(k, v) for k, v in EXAMPLES.items()] + [("cold-start", (T0,))]
)
def test_the_figure_fills_its_canvas(tmp_path, kind, recs):
    """The panels with their labels take >= 80% of the canvas each way, and the PNG
    has ink from edge to edge (no blank third)."""
    fig, r = drawn(kind, *recs)
    canvas = fig.bbox
    boxes = [ax.get_tightbbox(r) for ax in fig.axes]
    x0, x1 = min(b.x0 for b in boxes), max(b.x1 for b in boxes)
    y0, y1 = min(b.y0 for b in boxes), max(b.y1 for b in boxes)
    assert (x1 - x0) >= 0.8 * canvas.width, (kind, x1 - x0, canvas.width)
    assert (y1 - y0) >= 0.8 * canvas.height, (kind, y1 - y0, canvas.height)
    import matplotlib.image

    png = draw(tmp_path, kind, *recs, suffix=".png")
    px = matplotlib.image.imread(png)[:, :, :3].min(axis=2)
    ink = np.argwhere(px < 0.9)
    (top, left), (bottom, right) = ink.min(axis=0), ink.max(axis=0)
    assert bottom - top >= 0.9 * px.shape[0] and right - left >= 0.9 * px.shape[1], kind


@pytest.mark.parametrize("kind", KINDS)
def test_log_axes_have_readable_ticks(kind):
    """Plain figures (20, 1,000): no mathtext 2x10^1, and at least two labels."""
    fig, r = drawn(kind, *EXAMPLES[kind])
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            shown = [t.get_text() for t in axis.get_ticklabels(which="both") if t.get_visible()]
            shown = [t for t in shown if t]
            assert not any("$" in t or "times" in t for t in shown), (kind, shown)
            if scale == "log":
                lo, hi = sorted(axis.get_view_interval())
                inside = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
                assert len(inside) >= 2, (kind, shown)


@pytest.mark.parametrize("recs", [(T0,), (T0, T0_ALL, T2)])
def test_cold_start_is_a_dot_plot_labelled_at_its_values(recs):
    """Points on a log axis (no bars), each P50 and P95 written at the value it names."""
    from matplotlib.patches import Rectangle

    fig, _r = drawn("cold-start", *recs)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert not [p for p in ax.patches if isinstance(p, Rectangle)]  # no bar
    cells = load_cells([read_recording(p) for p in recs])
    assert len(ax.texts) == 2 * len(cells)
    want = set()
    for c in cells:
        first = [(t.phases["create"] + t.phases["ready"]) / 1e6 for t in c.trials]
        want |= {fmt_ms(float(v)) for v in np.percentile(first, [50, 95])}
    for t in ax.texts:
        assert t.get_text() == fmt_ms(t.xy[0]), t.get_text()  # at its value
    assert {t.get_text() for t in ax.texts} == want


def series_lines(fig, name: str):
    return [
        a
        for ax in fig.axes
        for a in ax.get_lines()
        if str(a.get_gid() or "").startswith(f"series:{name}#")
    ]


def test_the_same_cell_in_two_recordings_keeps_its_colour_in_the_cdf():
    fig, _r = drawn("cdf", T0, T0_ALL)
    cell = "local/stage/t0/exec"
    before = series_lines(fig, f"{cell} (t0-local-stage.jsonl)")
    after = series_lines(fig, f"{cell} (t0-stage-docker-libvirt-microvm.jsonl)")
    assert len(before) == len(after) == 6
    assert {b.get_color() for b in before} == {a.get_color() for a in after}
    assert {b.get_linestyle() for b in before} != {a.get_linestyle() for a in after}
    shell = series_lines(fig, "local/stage/t0/shell (t0-local-stage.jsonl)")
    docker = series_lines(fig, "local/docker/t0/exec")
    colours = {b.get_color() for b in before}
    assert colours.isdisjoint({x.get_color() for x in shell + docker})  # other cells differ


def test_the_same_tier_in_two_recordings_keeps_its_colour_in_the_cold_start():
    fig, _r = drawn("cold-start", T0, T0_ALL)
    before = series_lines(fig, "t0/exec (t0-local-stage.jsonl)")
    after = series_lines(fig, "t0/exec (t0-stage-docker-libvirt-microvm.jsonl)")
    assert before and after
    assert {b.get_color() for b in before} == {a.get_color() for a in after}
    assert {b.get_marker() for b in before} != {a.get_marker() for a in after}
