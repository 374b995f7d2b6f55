"""Figures of recordings (`rtax plot`, the console's `g` key): the five plots of the
rollout-tax paper (arXiv 2607.01415), a load plot and an image plot.

The paper: The Rollout Infrastructure Tax in Coding-Agent Reinforcement Learning (Peut,
Dageli, Juki, Burazin; Daytona; arXiv 2607.01415, SoCC 2026).

A presentation layer, like `reporting`: the trials come from the one fold
(`model.fold.TrialFold`, classified by `TrialOutcome.verdict`, so a plotted sample is
exactly a sample the report counts) and the capacity figures from the report
(`analysis.report.build_report`); nothing here reads events itself. Only drawing
happens here, with matplotlib's Agg backend (no display), imported on first use.

Each kind draws one figure:
- `breakdown`: per cell, the mean measured trial split into create, ready, actions
  (their sum), teardown and orchestration, stacked (means add up to the mean total;
  medians would not);
- `cold-start`: per substrate (host/driver) and tier (the workload) and channel, the
  P50 of create + ready, the time until the first command can run (a pooled cell's
  acquire: `exec+pool` beside `exec`), with its P95: a dot plot on a log axis (a bar
  on a log axis starts nowhere);
- `cdf`: the empirical distribution of every phase, one panel a phase, one line a cell;
- `trajectory`: per substrate, the completion time of each trial against its length
  in steps, and the normalized composition of the mean trial at each length;
- `capacity`: per cell and batch size, the passed batches out of those run;
- `load`: per cell, the start-up (create + ready, or a pooled cell's acquire) P50 with
  its P95 against the offered load: environments asked for at once (sequential: 1, a
  burst: its size), and arrivals a second (rates), one panel each (model.arrivals);
- `image`: per cell and image mode, the start-up P50 with its P95 against the bytes
  each trial's image delivery fetched.

Rules every figure keeps: a legend sits outside the panels (below them), never over a
bar or a label; a log axis has plain ticks (20, 1,000; never 2x10^1); a value's label
sits at the value it names; the same cell from two recordings keeps its colour and
changes its line style or marker (`_paired_styles`), so a before and an after pair up.

SVG text stays text (`svg.fonttype = none`) and ids are seeded, so a figure drawn
twice from the same recordings is the same file, and its series can be found by
name in the XML: each series is a group whose id is `series:<label>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtax_tui.model import paths
from rtax_tui.model.arrivals import SEQUENTIAL, arrival_of, base_cell, parse_arrival
from rtax_tui.model.fidelity import not_representative, replay_by_cell
from rtax_tui.model.fold import TrialFold, TrialOutcome
from rtax_tui.model.recording import Recording
from rtax_tui.model.spec import RtaxError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("breakdown", "cold-start", "cdf", "trajectory", "capacity", "load", "image")
SUFFIXES = (".svg", ".png")
# the five parts of a rollout, in the order they happen (docs/architecture.md, "The model")
PARTS = ("create", "ready", "actions", "teardown", "orchestration")
CDF_PHASES = ("create", "ready", "action", "teardown", "orchestration", "total")
NS_PER_MS = 1e6
PART_COLORS = {
    "create": "#4C72B0",
    "ready": "#55A868",
    "actions": "#C44E52",
    "teardown": "#8172B2",
    "orchestration": "#CCB974",
}


class PlotError(RtaxError):
    """Nothing to draw, or a bad output path: one line, exit status 2."""


@dataclass
class PlotCell:
    """One cell of one recording: its measured trials, and the report's capacity entry."""

    cell: str
    meta: dict[str, Any]  # host, driver, workload, channel (the trial_start event's)
    source: str  # the recording's file name, to tell a cell of two recordings apart
    trials: list[TrialOutcome] = field(default_factory=list)  # verdict "measured" only
    capacity: dict[str, Any] | None = None
    batched: bool = False  # some trial ran in a capacity batch
    label: str = ""
    # a replay whose fidelity is under the threshold: said beside its name in every plot
    mark: str | None = None
    fetched: dict[Any, int] = field(default_factory=dict)  # trial -> its image's bytes

    def samples_ms(self, phase: str) -> np.ndarray:
        """The report's samples of `phase` (`action`: every action; `total`: per trial)."""
        if phase == "action":
            vals = [a for t in self.trials for a in t.actions]
        elif phase == "total":
            vals = [t.total_ns() for t in self.trials]
        else:
            vals = [t.phases[phase] for t in self.trials if phase in t.phases]
        return np.asarray(vals, dtype=np.float64) / NS_PER_MS


def startup_ns(t: TrialOutcome) -> int:
    """A trial's start-up as the report's `startup_figures` has it: create + ready, or
    a pooled trial's acquire (its wait for a ready environment)."""
    if "acquire" in t.phases:
        return t.phases["acquire"]
    return t.phases.get("create", 0) + t.phases.get("ready", 0)


def parts_ms(t: TrialOutcome) -> list[float]:
    """A trial's five parts (ms), in PARTS order; a phase not recorded counts 0."""
    return [
        sum(t.actions) / NS_PER_MS if p == "actions" else t.phases.get(p, 0) / NS_PER_MS
        for p in PARTS
    ]


def load_cells(recs: Sequence[Recording], *, capacity: bool = False) -> list[PlotCell]:
    """The cells of the recordings, in order; `capacity` also builds each report (its
    bootstrap costs time, and only the capacity figure needs it)."""
    cells: list[PlotCell] = []
    for rec in recs:
        source = Path(rec.path).name
        by_cell: dict[str, PlotCell] = {}
        fold = TrialFold()
        fold.feed(rec.events)
        for t in fold.trials.values():
            pc = by_cell.get(t.cell)
            if pc is None:
                meta = {k: t.meta.get(k) for k in ("host", "driver", "workload", "channel")}
                pc = by_cell[t.cell] = PlotCell(t.cell, meta, source)
            if t.verdict == "measured":
                pc.trials.append(t)
            if t.batch is not None:
                pc.batched = True
        if capacity:
            from rtax_tui.analysis.report import build_report

            for c in build_report(rec)["cells"]:
                if c.get("capacity") is None:
                    continue
                pc = by_cell.get(c["cell"])
                if pc is None:  # barriers of a cell whose trials are all gone
                    meta = {k: c.get(k) for k in ("host", "driver", "workload", "channel")}
                    pc = by_cell[c["cell"]] = PlotCell(c["cell"], meta, source)
                pc.capacity = c["capacity"]
        _mark_replays(rec, by_cell)
        for ev in rec.events:  # what each trial's image delivery fetched (issue 24)
            if ev.get("type") == "image" and ev["cell"] in by_cell:
                by_cell[ev["cell"]].fetched[ev["trial"]] = int(ev["fetched"])
        cells.extend(by_cell.values())
    seen: dict[str, int] = {}
    for pc in cells:
        seen[pc.cell] = seen.get(pc.cell, 0) + 1
    for pc in cells:  # the same cell in two recordings: name the recording too
        pc.label = pc.cell if seen[pc.cell] == 1 else f"{pc.cell} ({pc.source})"
        if pc.mark is not None:
            pc.label += f" [{pc.mark}]"
    return cells


def _mark_replays(rec: Recording, by_cell: dict[str, PlotCell]) -> None:
    """The report's mark on each replay cell whose fidelity is under the threshold."""

    for cell, r in replay_by_cell(rec.events).items():
        if cell in by_cell:
            by_cell[cell].mark = not_representative({"replay": r})


def capacity_sizes(cap: dict[str, Any]) -> list[dict[str, int]]:
    """A cell's capacity per batch size: the report's `sizes` list when it has one,
    else its totals as one size (every batch of a run of today's profiles has the
    profile's one size, so tasks / batches is that size)."""
    sizes = cap.get("sizes")
    if isinstance(sizes, list):
        return [
            {"size": int(s["size"]), "batches": int(s["batches"]), "passed": int(s["passed"])}
            for s in sizes
        ]
    batches = int(cap.get("batches") or 0)
    size = int(cap.get("tasks") or 0) // batches if batches else 0
    return [{"size": size, "batches": batches, "passed": int(cap.get("passed_batches") or 0)}]


# -- drawing -------------------------------------------------------------------------


def _matplotlib() -> Any:
    """matplotlib, set up once: the Agg backend, text kept as text, seeded SVG ids.
    No pyplot: a `Figure` of our own has no global state, so the console can draw in
    a worker thread."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",  # text as <text>, searchable and small
            "svg.hashsalt": "rtax",  # the same ids on every draw
            # a label is text: a cell named `$\\nosuch$` (a recording's names are
            # anyone's) was parsed as mathtext, and raised, or drew as a formula
            "text.parse_math": False,
            "font.size": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    )
    return matplotlib


def _need(cells: list[PlotCell], what: str, names: Sequence[str]) -> list[PlotCell]:
    have = [c for c in cells if c.trials]
    if not have:
        raise PlotError(f"{', '.join(names)}: no measured trial to plot ({what})")
    return have


def _colors(n: int) -> list[Any]:
    cmap = _matplotlib().colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
HATCHES = (None, "//", "..", "xx")


@dataclass(frozen=True)
class Style:
    """How one series is drawn: its colour says which series (the same cell, or tier,
    in every recording), its line style and marker which recording it comes from, so a
    before and an after of one cell read as a pair."""

    color: Any
    linestyle: Any  # one of LINESTYLES
    marker: str


def _paired_styles(
    series: Sequence[tuple[str, str]], group: Any = lambda key: key
) -> dict[tuple[str, str], Style]:
    """A style per (key, source): one colour per key, related keys (the same
    `group(key)`, e.g. one substrate's exec and shell) in shades of one hue; one line
    style and marker per source, in the order the recordings were given."""
    from matplotlib.colors import to_rgb

    keys = list(dict.fromkeys(k for k, _ in series))
    sources = list(dict.fromkeys(src for _, src in series))
    groups = list(dict.fromkeys(group(k) for k in keys))
    hues = _colors(len(groups))
    color: dict[str, Any] = {}
    for g, hue in zip(groups, hues, strict=True):
        members = [k for k in keys if group(k) == g]
        for j, k in enumerate(members):  # the first in full colour, the last lightest
            mix = 0.6 * j / max(1, len(members) - 1) if len(members) > 1 else 0.0
            color[k] = tuple(c + (1.0 - c) * mix for c in to_rgb(hue))
    return {
        (k, src): Style(
            color[k],
            LINESTYLES[sources.index(src) % len(LINESTYLES)],
            MARKERS[sources.index(src) % len(MARKERS)],
        )
        for k, src in series
    }


def _paired_legend(
    fig: Figure, style: dict[tuple[str, str], Style], title: str, *, markers: bool = True
) -> None:
    """Below the panels: a colour a series, then (from two recordings on) a line style
    and marker a recording, in grey."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    labels: list[str] = []
    for key in dict.fromkeys(k for k, _ in style):
        st = next(v for (k, _), v in style.items() if k == key)
        handles.append(Line2D([], [], color=st.color, linewidth=2.5))
        labels.append(key)
    sources = list(dict.fromkeys(src for _, src in style))
    if len(sources) > 1:
        for src in sources:
            st = next(v for (_, s), v in style.items() if s == src)
            mark = st.marker if markers else "none"
            handles.append(Line2D([], [], color="0.35", linestyle=st.linestyle, marker=mark))
            labels.append(f"recording {src}")
    fig.legend(
        handles,
        labels,
        title=title,
        loc="outside lower center",
        fontsize=7,
        ncols=min(4, len(labels)),
    )


def _tick_text(v: float, _pos: object = None) -> str:
    """A tick in plain figures (0.5, 20, 1,000): never 2x10^1."""
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _log_axis(ax: Any, which: str, values: Sequence[float], pad: tuple[float, float]) -> None:
    """A log axis over `values` (ms) with readable ticks: 1-2-5 steps, every integer
    multiple when the range is narrow (at least three ticks), in plain figures, limits
    `values` widened by the factors in `pad` (room for the labels beside the points)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    pos = [v for v in values if v > 0] or [1.0]
    lo, hi = min(pos) / pad[0], max(pos) * pad[1]
    ticks: list[float] = []
    for subs in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = [
            m * 10.0**k
            for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
            for m in subs
            if lo <= m * 10.0**k <= hi
        ]
        if len(ticks) >= 3:
            break
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(lo, hi)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(_tick_text))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def _breakdown(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    cells = _need(cells, "breakdown", names)
    ax, share_ax = fig.subplots(1, 2, sharey=True, width_ratios=[1.6, 1])
    labels = [c.label for c in cells]
    # rows: cells, columns: PARTS; the mean measured trial of each cell
    means = np.asarray([np.mean([parts_ms(t) for t in c.trials], axis=0) for c in cells])
    totals = means.sum(axis=1)
    shares = means / np.where(totals > 0, totals, 1.0)[:, None]
    y = np.arange(len(cells))
    left = np.zeros(len(cells))
    share_left = np.zeros(len(cells))
    for k, p in enumerate(PARTS):
        ax.barh(y, means[:, k], left=left, label=p, color=PART_COLORS[p], gid=f"series:{p}")
        share_ax.barh(y, shares[:, k], left=share_left, color=PART_COLORS[p])
        left += means[:, k]
        share_left += shares[:, k]
    for i, total in enumerate(totals):
        ax.annotate(
            f" {_fmt(total)} ms (n={len(cells[i].trials)})",
            (total, i),
            va="center",
            fontsize=7,
        )
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, float(totals.max()) * 1.3 or 1.0)
    ax.set_xlabel("time per trial, mean of measured trials (ms)")
    ax.set_ylabel("cell (host/driver/workload/channel)")
    ax.set_title("Mean trial, by phase (ms)")
    # below both panels, never over a bar or its label
    fig.legend(title="phase", loc="outside lower center", ncols=len(PARTS), fontsize=7)
    share_ax.set_xlim(0, 1)
    share_ax.set_xlabel("share of the mean trial (fraction)")
    share_ax.set_title("The same, normalized")
    fig.suptitle("Where a rollout's time goes: create, ready, actions, teardown, orchestration")
    fig.set_size_inches(12, 1.8 + 0.38 * len(cells))


def _cold_start(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    """A dot plot on a log axis: a row band per substrate, a point per tier (and
    recording) at its P50, a whisker out to its P95; each figure written at the value
    it names. Points, not bars: a bar on a log axis starts nowhere."""
    cells = _need(cells, "cold start", names)
    ax = fig.add_subplot(1, 1, 1)
    substrates = list(dict.fromkeys(_substrate(c) for c in cells))
    style = _paired_styles(
        [(_tier(c, with_source=False), c.source) for c in cells], lambda k: k.split("/")[0]
    )
    values: list[float] = []
    band = 0.8 / max(sum(1 for c in cells if _substrate(c) == sub) for sub in substrates)
    for i, sub in enumerate(substrates):
        members = [c for c in cells if _substrate(c) == sub]  # one above the other, centred
        for j, c in enumerate(members):
            first = [startup_ns(t) / NS_PER_MS for t in c.trials]
            p50, p95 = (float(v) for v in np.percentile(first, [50, 95]))
            y = i + band * (j + 0.5 - len(members) / 2)
            st = style[(_tier(c, with_source=False), c.source)]
            name = _tier(c)
            ax.plot([p50, p95], [y, y], color=st.color, linewidth=1.2, linestyle=st.linestyle)
            ax.plot([p95], [y], "|", color=st.color, markersize=8)
            ax.plot([p50], [y], st.marker, color=st.color, markersize=6, gid=f"series:{name}")
            # the P50 before its point, the P95 after its whisker's tip: on the row
            ax.annotate(_fmt(p50), (p50, y), ha="right", va="center", fontsize=7,
                        xytext=(-5, 0), textcoords="offset points")  # fmt: skip
            ax.annotate(_fmt(p95), (p95, y), ha="left", va="center", fontsize=7,
                        xytext=(5, 0), textcoords="offset points")  # fmt: skip
            values += [p50, p95]
    _log_axis(ax, "x", values, pad=(2.2, 2.2))
    ax.set_yticks(range(len(substrates)), substrates)
    ax.set_ylim(len(substrates) - 0.5, -0.5)  # the first substrate on top
    ax.grid(axis="y", visible=False)
    ax.set_ylabel("substrate (host/driver)")
    ax.set_xlabel("create + ready (pooled: acquire): P50 (point), P95 (whisker's end) (ms, log)")
    ax.set_title("Cold start: time until the first command runs, per substrate and tier")
    _paired_legend(fig, style, "tier/channel (workload/channel)")
    points = len(cells)
    fig.set_size_inches(9.0, 1.9 + 0.3 * points + 0.15 * len(substrates))


def _cdf(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    cells = _need(cells, "distributions", names)
    style = _paired_styles([(_key(c), c.source) for c in cells], _substrate_of)
    axes = fig.subplots(2, 3).ravel()
    for ax, phase in zip(axes, CDF_PHASES, strict=True):
        for c in cells:
            st = style[(_key(c), c.source)]
            x = np.sort(c.samples_ms(phase))
            if x.size == 0:
                continue
            # from 0 at the smallest sample up to 1 at the largest
            x = np.concatenate([x[:1], x])
            y = np.arange(0, x.size) / (x.size - 1)
            ax.step(
                x,
                y,
                where="post",
                color=st.color,
                linestyle=st.linestyle,
                gid=f"series:{c.label}",
                linewidth=1.4,
            )
        _log_axis(ax, "x", [v for c in cells for v in c.samples_ms(phase)], pad=(1.15, 1.15))
        ax.set_ylim(0, 1.02)
        ax.set_title(phase if phase != "action" else "action (each)")
        ax.set_xlabel("time (ms, log)")
        ax.set_ylabel("fraction of samples")
    _paired_legend(fig, style, "cell (host/driver/workload/channel)", markers=False)
    fig.suptitle("Distribution per cell and phase (empirical CDF of measured trials)")
    rows = (len(style) + len({c.source for c in cells}) + 3) // 4
    fig.set_size_inches(12, 7 + 0.22 * rows)


def _trajectory(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    cells = _need(cells, "trajectory", names)
    groups: dict[str, dict[int, list[TrialOutcome]]] = {}
    for c in cells:
        by_len = groups.setdefault(_family(c), {})
        for t in c.trials:
            steps = t.steps if t.steps is not None else len(t.actions)
            by_len.setdefault(steps, []).append(t)
    lengths = sorted({s for g in groups.values() for s in g})
    if len(lengths) < 2:
        raise PlotError(
            f"{', '.join(names)}: trajectory needs trials of at least two lengths "
            f"(found {', '.join(map(str, lengths))} steps); record the trajectory profile"
        )
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.5])
    colors = _colors(len(groups))
    for (name, by_len), color in zip(groups.items(), colors, strict=True):
        ls = sorted(by_len)
        for s in ls:
            tot = [t.total_ns() / 1e9 for t in by_len[s]]
            ax1.plot([s] * len(tot), tot, ".", color=color, alpha=0.45, markersize=4)
        med = [float(np.median([t.total_ns() / 1e9 for t in by_len[s]])) for s in ls]
        num = f"{list(groups).index(name) + 1}  {name}"
        ax1.plot(ls, med, "-o", color=color, label=num, gid=f"series:{name}", markersize=4)
    ax1.set_xticks(lengths)
    ax1.set_xlabel("trajectory length (steps)")
    ax1.set_ylabel("completion time per trial (s); line: P50, dots: trials")
    ax1.set_title("Completion time against trajectory length")

    # normalized composition: one 100% bar per substrate at each length
    width = 0.8 / len(groups)
    for j, (_name, by_len) in enumerate(groups.items()):
        xs, shares = [], []
        for i, s in enumerate(lengths):
            trials = by_len.get(s)
            if not trials:
                continue
            parts = np.asarray([parts_ms(t) for t in trials]).mean(axis=0)
            xs.append(i - 0.4 + width * (j + 0.5))
            shares.append(parts / parts.sum() if parts.sum() > 0 else parts)
        bottom = np.zeros(len(xs))
        for k, p in enumerate(PARTS):
            vals = np.asarray([sh[k] for sh in shares])
            ax2.bar(
                xs,
                vals,
                width * 0.92,
                bottom=bottom,
                color=PART_COLORS[p],
                label=p if j == 0 else None,
                gid=f"series:{p}",
            )
            bottom += vals
        for x in xs:
            ax2.annotate(
                str(j + 1),
                (x, 1.0),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax2.set_xticks(range(len(lengths)), [f"{s} steps" for s in lengths])
    ax2.set_ylim(0, 1.1)
    ax2.set_xlabel("trajectory length (bars numbered as the substrates on the left)")
    ax2.set_ylabel("share of the mean trial's time (fraction)")
    ax2.set_title("Normalized composition against trajectory length")
    # below the panels, off the dots and the 100% bars: the substrates, then the phases
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(
        handles, labels, title="substrate (host/driver/workload/channel)",
        loc="outside lower left", ncols=2, fontsize=7,
    )  # fmt: skip
    handles, labels = ax2.get_legend_handles_labels()
    fig.legend(
        handles, labels, title="phase", loc="outside lower right", ncols=len(PARTS), fontsize=7
    )
    fig.suptitle("Trajectories: completion time and composition against length")
    fig.set_size_inches(14, 5.2)


def _capacity(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    cells = [c for c in cells if c.capacity is not None]
    if not cells:
        raise PlotError(f"{', '.join(names)}: no capacity batch to plot (record a capacity run)")
    ax = fig.add_subplot(1, 1, 1)
    per_cell = [(c, capacity_sizes(c.capacity or {})) for c in cells]
    sizes = sorted({s["size"] for _, ss in per_cell for s in ss})
    width = min(0.8 / len(cells), 0.25)
    style = _paired_styles([(_key(c), c.source) for c in cells], _substrate_of)
    sources = list(dict.fromkeys(c.source for c in cells))
    top = 1
    for j, (c, ss) in enumerate(per_cell):
        color = style[(_key(c), c.source)].color
        hatch = HATCHES[sources.index(c.source) % len(HATCHES)]  # the recording
        by_size = {s["size"]: s for s in ss}
        x0 = -width * len(cells) / 2
        xs = [sizes.index(z) + x0 + width * (j + 0.5) for z in sizes if z in by_size]
        rows = [by_size[z] for z in sizes if z in by_size]
        runs = [r["batches"] for r in rows]
        passed = [r["passed"] for r in rows]
        top = max(top, *runs)
        ax.bar(
            xs, passed, width * 0.9, color=color, hatch=hatch, edgecolor="white", linewidth=0,
            label=c.label, gid=f"series:{c.label}",
        )  # fmt: skip
        ax.bar(xs, runs, width * 0.9, fill=False, edgecolor=color, linestyle="--", zorder=3)
        for x, p, r in zip(xs, passed, runs, strict=True):
            ax.annotate(
                f"{p}/{r}",
                (x, r),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.set_xticks(range(len(sizes)), [str(z) for z in sizes])
    ax.set_ylim(0, top * 1.2)
    ax.set_xlabel("batch size (environments started at once)")
    ax.set_ylabel("batches (filled: passed, dashed: run)")
    ax.set_title("Capacity: passed batches per batch size (all N must reach the barrier)")
    fig.legend(
        title="cell (host/driver/workload/channel)", loc="outside lower center", fontsize=7,
        ncols=min(3, len(cells)),
    )  # fmt: skip
    fig.set_size_inches(max(6.0, 1.5 + 1.4 * len(sizes) * max(1, len(cells) / 2)), 4.5)


def _load(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:

    cells = _need(cells, "load", names)

    def series_of(c: PlotCell) -> str:  # the cell without its pattern (and its recording)
        return base_cell(c.cell) + ("" if c.label == c.cell else f" ({c.source})")

    bases = {series_of(c) for c in cells if arrival_of(c.cell) != SEQUENTIAL}
    if not bases:
        raise PlotError(
            f"{', '.join(names)}: no arrival pattern to plot (a run with [run] arrivals "
            "burst:N or rate:R)"
        )
    series = [b for b in dict.fromkeys(series_of(c) for c in cells) if b in bases]
    style = _paired_styles(
        [(base_cell(c.cell), c.source) for c in cells if series_of(c) in bases], _substrate_of
    )
    at_once, per_s = fig.subplots(1, 2, sharey=True)
    ys: list[float] = []
    rates: list[float] = []
    for s in series:
        st = next(style[(base_cell(c.cell), c.source)] for c in cells if series_of(c) == s)
        points: dict[Any, list[tuple[float, float, float]]] = {at_once: [], per_s: []}
        for c in cells:
            if series_of(c) != s:
                continue
            a = parse_arrival(arrival_of(c.cell), c.cell)
            up = [
                t.phases["acquire"] if "acquire" in t.phases
                else t.phases.get("create", 0) + t.phases.get("ready", 0)
                for t in c.trials
            ]  # fmt: skip
            p50, p95 = (float(v) / NS_PER_MS for v in np.percentile(up, [50, 95]))
            ax, x = (per_s, a.rate) if a.kind == "rate" else (at_once, float(a.n))
            points[ax].append((x, p50, p95))
            ys += [p50, p95]
            rates += [x] if a.kind == "rate" else []
        for ax, pts in points.items():
            if not pts:
                continue
            pts.sort()
            xs, p50s, p95s = (np.asarray(v) for v in zip(*pts, strict=True))
            ax.errorbar(
                xs, p50s, yerr=[np.zeros(len(xs)), p95s - p50s], marker=st.marker, capsize=3,
                color=st.color, linestyle=st.linestyle, label=s, gid=f"series:{s}",
            )  # fmt: skip
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")  # 1, 32: not 2^5
    at_once.set_xscale("log", base=2)
    at_once.xaxis.set_major_formatter(plain)
    _log_axis(at_once, "y", ys, pad=(1.3, 1.3))  # shared with the rates' panel
    if rates:
        _log_axis(per_s, "x", rates, pad=(1.5, 1.5))
    at_once.set_xlabel("environments asked for at once (sequential: 1, burst:N: N)")
    per_s.set_xlabel("arrivals a second (rate:R, Poisson)")
    at_once.set_ylabel("start-up: P50 (point), P95 (whisker) (ms, log)")
    for ax in (at_once, per_s):
        if not ax.has_data():
            ax.text(0.5, 0.5, "no pattern of this kind", ha="center", transform=ax.transAxes)
    _paired_legend(fig, style, "cell (host/driver/workload/channel)")
    fig.suptitle("Start-up against offered load (create + ready; pooled: acquire)")
    fig.set_size_inches(11.0, 5.0)


def _image(fig: Figure, cells: list[PlotCell], names: Sequence[str]) -> None:
    from rtax_tui.analysis.image_report import image_mode

    cells = [c for c in _need(cells, "image", names) if image_mode(c.cell) is not None]
    if not cells:
        raise PlotError(f"{', '.join(names)}: no image mode to plot (a run with [run] images)")

    def series_of(c: PlotCell) -> str:  # the cell without its mode (and its recording)
        base = c.cell.replace(f"~{image_mode(c.cell)}", "", 1)
        return base + ("" if c.label == c.cell else f" ({c.source})")

    series = list(dict.fromkeys(series_of(c) for c in cells))
    color = dict(zip(series, _colors(len(series)), strict=True))
    marker = {"cached": "o", "pull": "s", "lazy": "^"}
    ax = fig.subplots()
    ys: list[float] = []
    for c in cells:
        mode = str(image_mode(c.cell))
        up = [sum(t.phases.get(p, 0) for p in ("image", "create", "ready")) for t in c.trials]
        got = [c.fetched[t.trial] for t in c.trials if t.trial in c.fetched]
        if not up or not got:
            continue
        p50, p95 = (float(v) / NS_PER_MS for v in np.percentile(up, [50, 95]))
        ys += [p50, p95]
        x = float(np.median(got)) / 1e6
        ax.errorbar(
            [x], [p50], yerr=[[0.0], [p95 - p50]], marker=marker.get(mode, "D"), capsize=3,
            color=color[series_of(c)], label=f"{series_of(c)} {mode}", gid=f"series:{c.label}",
            linestyle="none",
        )  # fmt: skip
    ax.set_xscale("symlog", linthresh=0.1)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    _log_axis(ax, "y", ys, pad=(1.3, 1.3))
    ax.set_xlabel("bytes fetched per trial, median (MB; cached: 0; linear below 0.1)")
    ax.set_ylabel("start-up: image + create + ready, P50 (point), P95 (whisker) (ms, log)")
    fig.legend(title="cell and image mode", loc="outside lower center", fontsize=7, ncols=3)
    fig.suptitle("Start-up against the bytes an image delivery fetched (server on loopback)")
    fig.set_size_inches(9.0, 5.5)


DRAW = {
    "breakdown": _breakdown,
    "cold-start": _cold_start,
    "cdf": _cdf,
    "trajectory": _trajectory,
    "capacity": _capacity,
    "load": _load,
    "image": _image,
}


def _substrate(c: PlotCell) -> str:
    return f"{c.meta.get('host')}/{c.meta.get('driver')}"


def _tier(c: PlotCell, *, with_source: bool = True) -> str:
    """The workload (T0, T1, ...: the tier) and channel; the recording too when the
    same cell comes from two of them (unless `with_source` is false)."""
    # the channel as the cell names it: with its mode (`exec+pool`), so a warm pool's
    # acquire and the cold start it hides are two series
    channel = c.cell.rsplit("/", 1)[-1] if c.cell.count("/") >= 3 else c.meta.get("channel")
    base = f"{c.meta.get('workload')}/{channel}"
    return base if c.label == c.cell or not with_source else f"{base} ({c.source})"


def _key(c: PlotCell) -> str:
    """A cell as its series' colour knows it: the same in every recording."""
    return c.cell if c.mark is None else f"{c.cell} [{c.mark}]"


def _substrate_of(key: str) -> str:
    """`host/driver` of a cell id (`local/stage/t0/exec` -> `local/stage`)."""
    return "/".join(key.split("/")[:2])


def _family(c: PlotCell) -> str:
    """The cell with its length left out: `local/stage/trajectory-S/exec`."""
    workload = re.sub(r"-\d+$", "-S", str(c.meta.get("workload")))
    base = f"{c.meta.get('host')}/{c.meta.get('driver')}/{workload}/{c.meta.get('channel')}"
    return base if c.label == c.cell else f"{base} ({c.source})"


def _fmt(v: float) -> str:
    from rtax_tui.render.tables import fmt_ms

    return fmt_ms(v)


def check_output(out: str | Path) -> Path:
    """The output path, checked before any drawing: a known suffix, an existing folder."""
    path = Path(out)
    if path.suffix.lower() not in SUFFIXES:
        raise PlotError(f"-o {out}: the file name must end in .svg or .png")
    if not path.parent.is_dir():
        raise PlotError(f"-o {out}: no folder {path.parent}")
    return path


DPI = 120  # the figure's and the PNG's: one inch is the same number of pixels in both


def figure(recs: Sequence[Recording], kind: str) -> Figure:
    """`kind` drawn from the recordings, on an Agg canvas, not yet saved."""
    if kind not in DRAW:
        raise PlotError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    names = [Path(r.path).name for r in recs]
    cells = load_cells(recs, capacity=kind == "capacity")
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained", dpi=DPI)
    FigureCanvasAgg(fig)
    DRAW[kind](fig, cells, names)
    _unique_ids(fig)
    return fig


def plot(recs: Sequence[Recording], kind: str, out: str | Path) -> Path:
    """Draw `kind` from the recordings into `out` (.svg or .png); returns the path."""
    if kind not in DRAW:
        raise PlotError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    path = check_output(out)
    fig = figure(recs, kind)
    meta = {"Date": None} if path.suffix.lower() == ".svg" else {}
    fmt = path.suffix.lower().lstrip(".")
    try:  # whole or not at all: a full disk leaves no cut figure (nor replaces one)
        paths.atomic_write(path, lambda f: fig.savefig(f, format=fmt, metadata=meta, dpi=DPI))
    except RtaxError as exc:
        raise PlotError(f"cannot write the figure: {exc}") from None
    return path


def _unique_ids(fig: Figure) -> None:
    """`series:<label>` on each artist of a series becomes `series:<label>#<k>`: one
    id per SVG element, as XML wants, the label still found by prefix."""
    seen: dict[str, int] = {}
    for artist in fig.findobj(lambda a: str(a.get_gid() or "").startswith("series:")):
        gid = str(artist.get_gid())
        k = seen.get(gid, 0)
        seen[gid] = k + 1
        artist.set_gid(f"{gid}#{k}")


def plot_view(rec: Recording, folder: str | Path = "recordings/plots") -> Path:
    """The console's `g`: the figure that fits `rec` (see `kind_for`), as
    `<folder>/<recording name>-<kind>.svg` (a figure is derived: it is replaced)."""
    kind = kind_for([rec])
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return plot([rec], kind, out / f"{Path(rec.path).stem or 'console'}-{kind}.svg")


def kind_for(recs: Sequence[Recording]) -> str:
    """The figure that fits what a recording holds (the console's `g` key): capacity
    batches, trajectories of several lengths, or else the distributions."""
    cells = load_cells(recs)
    if any(c.batched for c in cells):
        return "capacity"
    lengths: dict[str, set[int | None]] = {}
    for c in cells:
        lengths.setdefault(_family(c), set()).update(t.steps for t in c.trials)
    return "trajectory" if any(len(v) >= 2 for v in lengths.values()) else "cdf"
