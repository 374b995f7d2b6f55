"""Rendering of reports (`rtax_tui.analysis.report`) as Rich tables, Markdown and CSV.

The figures are computed in `rtax_tui.analysis`; this module only formats them.
"""

from __future__ import annotations

import csv
import errno
import io
import sys
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rtax_tui.analysis.noise_report import FEW
from rtax_tui.model.events import one_line, visible
from rtax_tui.model.fidelity import not_representative
from rtax_tui.model.programs import cell_mark, differing_pairs
from rtax_tui.render.image_render import image_markdown, render_image
from rtax_tui.render.load_render import load_markdown, render_load
from rtax_tui.render.noise_render import (
    ROUGH,
    ROUGH_NOTE,
    any_rough,
    compare_unstable_lines,
    outlier_lines,
    rough,
    unstable_lines,
)
from rtax_tui.render.plaintext import styled
from rtax_tui.render.pool_render import pools_markdown, render_pools
from rtax_tui.render.tables import (
    Code,
    Md,
    fmt_interval,
    fmt_ms,
    fmt_num,
    fmt_ratio,
    fmt_seconds,
    fmt_time,
    md_code,
    md_escape,
)
from rtax_tui.render.tables import md_table as _md_table
from rtax_tui.render.traj_render import (
    REPLAY_HEADERS,
    prep_markdown,
    render_prep,
    render_replay,
    replay_rows,
)

TABLE_PHASES = ("create", "ready", "action", "teardown", "total")
SUMMARY_FIELDS = (
    "n",
    "min_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "mean_ms",
    "p50_ci95_lo_ms",
    "p50_ci95_hi_ms",
)

LEGEND = """\
n         measured trials of the cell (warm-up trials excluded); a trial killed
          before it ended counts as failed
failed    measured trials that did not complete (a phase failed or the run stopped)
invalid   trials that completed but failed the workload's own check
P50/P95   median and 95th percentile in milliseconds, over trials that are not
          warm-up, completed and valid; `action` pools every action of those
          trials, `total` is create + ready + all actions + teardown + orchestration
          of one trial
[lo, hi]  95% bootstrap interval of the median (fixed seed, reproducible)
capacity  passed/batches: batches in which all N environments reached the barrier;
          arrived/tasks: environments that arrived over all that were started;
          per size: the budget cgroup's peak memory (MiB, the largest of the
          size's batches) and its OOM kills; largest passing: the largest size
          whose batches all passed
diff      median(b) - median(a) with its 95% bootstrap interval; `faster` names
          the cell with the smaller median when the interval excludes 0
worker-h  N * (create + ready + teardown + S * action) / 3600 from the medians,
          with a 95% bootstrap interval
"""


# The cell table's caption in a terminal, which prints no legend (the Markdown ends
# with it, under "## Legend"; the JSON and CSV name their fields).
TABLE_LEGEND_HINT = "every column explained: rtax report FILE --format markdown (its legend)"


def _fmt_ci(ci: list[float | None]) -> str:
    return f"[{fmt_ms(ci[0])}, {fmt_ms(ci[1])}]"


CAPACITY_HEADS = [
    "cell",
    "size",
    "passed/batches",
    "arrived/tasks",
    "peak MiB",
    "OOM kills",
    "largest passing",
]


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):.0f}"


def capacity_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """pVisor's capacity table: per cell and size, passed/batches, arrived/tasks, the
    budget's peak memory and OOM kills; the largest passing size on the cell's first row."""
    rows: list[list[str]] = []
    for c in report["cells"]:
        cap = c.get("capacity") or {}
        sizes = cap.get("sizes") or []
        lp = cap.get("largest_passing_size")
        for i, s in enumerate(sizes):
            rows.append(
                [
                    cell_name(c) if i == 0 else "",
                    str(s["size"]),
                    f"{s['passed']}/{s['batches']}",
                    f"{s['arrived']}/{s['tasks']}",
                    _mib(s.get("mem_peak_bytes")),
                    "-" if s.get("oom_kills") is None else str(s["oom_kills"]),
                    ("-" if lp is None else str(lp)) if i == 0 else "",
                ]
            )
    return rows


def render_capacity(report: Mapping[str, Any]) -> Table | None:
    rows = capacity_rows(report)
    if not rows:
        return None
    table = Table(title="capacity per cell and size (measured batches)")
    for i, h in enumerate(CAPACITY_HEADS):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    return table


def _capacity_text(cap: dict[str, Any] | None) -> str:
    if not cap:
        return "-"
    return f"{cap['passed_batches']}/{cap['batches']}, {cap['arrived_tasks']}/{cap['tasks']}"


def _has_capacity(report: Mapping[str, Any]) -> bool:
    return any(c.get("capacity") for c in report["cells"])


def cell_name(c: Mapping[str, Any]) -> str:
    """A cell as every table of its figures names it: marked when it replays
    trajectories with a fidelity under the threshold (its steps did not do the agent's
    work), and when its programs differ from a compared cell's (model.programs: its
    difference is not only the substrate's)."""

    marks = [m for m in (not_representative(dict(c)), cell_mark(c)) if m is not None]
    return str(c["cell"]) if not marks else f"{c['cell']} ({'; '.join(marks)})"


def _cell_row(c: Mapping[str, Any], capacity: bool) -> list[str]:
    row = [
        cell_name(c),
        str(c["n"]),
        str(c["failed"]),
        str(c["invalid"]),
    ]
    for p in TABLE_PHASES:
        s = c["phases"][p]
        row.append(f"{rough(s)}{fmt_ms(s['p50_ms'])} / {fmt_ms(s['p95_ms'])}")
    if capacity:
        row.append(_capacity_text(c.get("capacity")))
    return row


def _headers(capacity: bool) -> list[str]:
    heads = ["cell (host/driver/workload/channel)", "n", "failed", "invalid"]
    heads += [f"{p} P50/P95" for p in TABLE_PHASES]
    if capacity:
        heads.append("capacity")
    return heads


def render_table(report: Mapping[str, Any]) -> Table:
    """One row per cell: counts, then P50/P95 (ms) of the main phases."""
    run = report.get("run", {})
    capacity = _has_capacity(report)
    title = f"rtax {run.get('run_id') or ''} ({run.get('status', '?')})".strip()
    # the terminal prints no legend: the caption says where the columns are explained
    caption = f"times in ms; {TABLE_LEGEND_HINT}"
    if any_rough(report, TABLE_PHASES):
        caption += f"; {ROUGH_NOTE}"
    table = Table(title=title, caption=caption)
    for i, h in enumerate(_headers(capacity)):
        table.add_column(h, justify="left" if i < 1 else "right", no_wrap=True)
    for c in report["cells"]:
        table.add_row(*_cell_row(c, capacity))
    return table


_ENDS = {
    "precise": "every cell got there",
    "max_trials": "cells reached --max-trials",
    "max_time": "the run reached --max-time",
    "failing": "the cells left had no measured trial",
    "stopped": "the run was stopped",
    None: "the run ended before its last check",
}


def precision_lines(doc: Mapping[str, Any]) -> list[str]:
    """A precision run's verdict: the target, why the rounds ended, each cell's P50 and
    how far its interval reaches, and the cells that did not get there, named."""
    target = f"{doc['target'] * 100:g}%"
    out = [
        f"precision +-{target} (P50 total, 95% interval): {doc['rounds']} rounds; "
        + _ENDS.get(doc.get("end"), str(doc.get("end")))
    ]
    for c in doc["cells"]:
        lo, hi = c["ci95_ms"]
        reach = "-" if c["within"] is None else f"+-{c['within'] * 100:.1f}%"
        said = f" (the run recorded {c['recorded'] or 'none'})" if "recorded" in c else ""
        out.append(
            f"  {c['cell']}: {c['verdict']}{said}, n {c['n']} of {c['trials']}, P50 "
            f"{fmt_ms(c['p50_ms'])} ms [{fmt_ms(lo)}, {fmt_ms(hi)}] {reach}"
        )
    if doc["not_precise"]:
        out.append(f"not within +-{target}: " + ", ".join(doc["not_precise"]))
    else:
        out.append(f"every cell within +-{target}")
    return out


def _t_precision(report: Mapping[str, Any], console: Console) -> None:
    doc = report.get("precision")
    if not doc:
        return
    for i, line in enumerate(precision_lines(doc)):
        last = i == len(doc["cells"]) + 1
        color = "yellow" if doc["not_precise"] else "green"
        console.print(styled((line, color)) if last else line, soft_wrap=True)


def _m_precision(report: Mapping[str, Any]) -> list[str]:
    doc = report.get("precision")
    if not doc:
        return []
    lines = [md_escape(x.strip()) for x in precision_lines(doc)]  # names are the recording's
    return ["## Precision", "", lines[0], ""] + [f"- {x}" for x in lines[1:]] + [""]


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: the run's facts, then each section of MARKDOWN_SECTIONS
    that the report has (the cell table, what a kind of run adds, the driver
    differences), then the legend."""
    run = report.get("run", {})
    out = [f"# rtax report {md_escape(str(run.get('run_id') or ''))}".rstrip(), ""]
    facts = {k: md_escape(str(run.get(k))) for k in ("started_at", "profile", "status", "trials")}
    meta = [
        f"- started: {facts['started_at']}",
        f"- profile: {facts['profile']}",
        f"- status: {facts['status']}" + (" (torn last line)" if run.get("torn_tail") else ""),
        f"- trials: {facts['trials']}",
        f"- seed: {md_escape(str(run.get('seed')))}",
    ]
    out += meta + [""]
    for section in MARKDOWN_SECTIONS:
        out += section(report)
    out += ["## Legend", "", "```", LEGEND.rstrip(), "```", ""]
    return "\n".join(out)


# -- the Markdown's sections (as the terminal's: each [] when the report has none) ----


def _m_prep(report: Mapping[str, Any]) -> list[str]:
    if not report.get("prep"):  # a `rtax traj prepare -o` recording
        return []
    return [
        "## Prefix preparation per trajectory format (ms)",
        "",
        prep_markdown(report["prep"]),
        "",
    ]


def _m_cells(report: Mapping[str, Any]) -> list[str]:
    """The cell table and the capacity table (not for a probe's or a preparation's own
    recording, which has no cells), then one line per cell id."""
    out: list[str] = []
    if report["cells"] or not (report.get("probe") or report.get("prep")):
        capacity = _has_capacity(report)
        out += ["## Cells (times in ms; every column in the legend at the end)", ""]
        rows = [_cell_row(c, capacity) for c in report["cells"]]
        out += [_md_table(_headers(capacity), rows), ""]
        if any_rough(report, TABLE_PHASES):
            out += [ROUGH_NOTE, ""]
        if capacity_rows(report):
            out += ["## Capacity per cell and size", ""]
            out += [_md_table(CAPACITY_HEADS, capacity_rows(report)), ""]
        out += ["## Cell ids", ""]
    for c in report["cells"]:
        errs = ", ".join(f"{k}: {v}" for k, v in c.get("errors", {}).items())
        line = f"- {md_code(c['cell'])}: total P50 {fmt_ms(c['phases']['total']['p50_ms'])} ms"
        line += f" {rough(c['phases']['total'])}{_fmt_ci(c['phases']['total']['p50_ci95_ms'])}"
        if errs:
            line += f"; errors: {md_escape(errs)}"
        for phase, cl in c.get("clusters", {}).items():
            parts = "; ".join(f"{k['n']} around {fmt_ms(k['p50_ms'])}" for k in cl)
            line += f"; {md_escape(phase)} clusters: {parts}"
        out.append(line)
    return out + [""]


def _m_replay(report: Mapping[str, Any]) -> list[str]:
    replays = replay_rows(report)
    if not replays:
        return []
    return ["## Replay fidelity (same exit code as recorded)", "",
            _md_table(REPLAY_HEADERS, replays), ""]  # fmt: skip


def _m_part(key: str, draw: Callable[[Any], str]) -> Callable[[Mapping[str, Any]], list[str]]:
    """A section that is `draw(report[key])` when the report has it."""
    return lambda report: [draw(report[key])] if report.get(key) else []


def _m_boundaries(report: Mapping[str, Any]) -> list[str]:
    bounds = report.get("run", {}).get("boundaries") or {}
    if not bounds:
        return []
    out = ["## Boundaries (the last `rtax probe` when the run began)", ""]
    return out + [f"- {md_escape(boundary_line(k, b))}" for k, b in bounds.items()] + [""]


def _m_forgeable(report: Mapping[str, Any]) -> list[str]:
    forgeable = report.get("run", {}).get("forgeable") or {}
    if not forgeable:
        return []
    out = ["## Results a workload could forge (the driver does not state they hold)", ""]
    return out + [f"- {md_escape(f'{k}: {why}')}" for k, why in forgeable.items()] + [""]


def _m_programs(report: Mapping[str, Any]) -> list[str]:
    lines = programs_lines(differing_pairs(report["cells"]))
    if not lines:
        return []
    out = ["## Programs that differ between compared cells (resolved inside each)", ""]
    return out + [f"- {md_escape(line)}" for line in lines] + [""]


def _m_probe(report: Mapping[str, Any]) -> list[str]:
    if not report.get("probe"):
        return []
    return ["## Boundary checks (rtax probe)", "", probe_markdown(report["probe"])]


def _m_stability(report: Mapping[str, Any]) -> list[str]:
    lines = unstable_lines(report) + outlier_lines(report)
    if not lines:
        return []
    return ["## Stability", ""] + [f"- {md_escape(line)}" for line in lines] + [""]


def _m_diffs(report: Mapping[str, Any]) -> list[str]:
    if not report.get("diffs"):
        return []
    rows = [_diff_row(d) for d in report["diffs"]]
    return ["## Differences between drivers (b - a, ms)", "", _md_table(DIFF_HEADS, rows), ""]


MARKDOWN_SECTIONS: tuple[Callable[[Mapping[str, Any]], list[str]], ...] = (
    _m_prep,
    _m_cells,
    _m_replay,
    _m_stability,
    _m_part("pools", pools_markdown),  # a run with pooled cells
    _m_part("load", load_markdown),  # a run with arrival patterns
    _m_part("image", image_markdown),  # a run with image modes
    _m_boundaries,
    _m_forgeable,
    _m_programs,
    _m_probe,
    _m_precision,
    _m_diffs,
)


def _diff_row(d: Mapping[str, Any]) -> list[str]:
    return [
        d["a"],
        d["b"] + (" (programs differ)" if d.get("programs_differ") else ""),
        d["phase"],
        fmt_ms(d["a_p50_ms"]),
        fmt_ms(d["b_p50_ms"]),
        fmt_ms(d["diff_ms"]),
        _fmt_ci(d["ci95_ms"]),
        fmt_ratio(d["ratio"]),
        d["faster"],
    ]


def render_csv(report: Mapping[str, Any]) -> str:
    """One row per cell x phase (the six phases, then sub-phases) with all summary fields."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["cell", "host", "driver", "workload", "channel", "trials", "failed", "invalid", "phase"]
        + list(SUMMARY_FIELDS)
    )
    for c in report["cells"]:
        head = [
            c["cell"],
            c["host"],
            c["driver"],
            c["workload"],
            c["channel"],
            c["n"],
            c["failed"],
            c["invalid"],
        ]
        for phase, s in list(c["phases"].items()) + list(c.get("subphases", {}).items()):
            lo, hi = s["p50_ci95_ms"]
            vals = [s[k] for k in SUMMARY_FIELDS[:7]] + [lo, hi]
            w.writerow(head + [phase] + ["" if v is None else v for v in vals])
    return buf.getvalue()


COMPARE_HEADS = ("cell", "phase", "a P50", "b P50", "diff", "95% CI", "ratio", "p Holm", "b is")


def rough_pair(r: Mapping[str, Any]) -> str:
    """ROUGH when either side of a compared row has 1..FEW-1 samples (its interval is
    rough); a row of an older comparison, without counts, is not marked."""
    ns = [int(r[k]) for k in ("n_a", "n_b") if isinstance(r.get(k), int)]
    return ROUGH if any(0 < n < FEW for n in ns) else ""


def compare_figures(r: Mapping[str, Any]) -> dict[str, str]:
    """A compared row's figures by column (COMPARE_HEADS but the cell), in the one
    style of `render.tables` (a unit on every time, no exponent, a rough interval
    marked): what `rtax compare` prints and the console's compare shows."""
    p = r.get("p_holm")
    lo, hi = r["ci95_ms"]
    return {
        "phase": str(r["phase"]),
        "a P50": fmt_time(r["a_p50_ms"]),
        "b P50": fmt_time(r["b_p50_ms"]),
        "diff": fmt_time(r["diff_ms"], signed=True),
        "95% CI": rough_pair(r) + fmt_interval(lo, hi, signed=True),
        "ratio": fmt_ratio(r["ratio"]),
        "p Holm": "-" if p is None else f"{p:.3f}",
        "b is": str(r.get("verdict", r["faster"])),
    }


def _compare_row(r: Mapping[str, Any]) -> list[str]:
    figures = compare_figures(r)
    cell = r["cell"] + (" (programs differ)" if r.get("programs_differ") else "")
    return [cell, *(figures[h] for h in COMPARE_HEADS[1:])]


def compare_caption(cmp: Mapping[str, Any]) -> str:
    """How the verdicts were reached: the pairing, the correction, the practical threshold."""
    eff = cmp.get("min_effect") or {}
    pairing = (
        "cells paired by id, or differing in one of host/driver/channel/mode (--changed)"
        if cmp.get("pairing") == "changed"
        else "cells paired by id (same host/driver/workload/channel/mode)"
    )
    rough = any(rough_pair(r) for r in cmp.get("rows") or [])
    return (
        f"{pairing}; p: two-sided bootstrap, {cmp.get('correction', 'uncorrected')}; "
        f"a difference under {eff.get('rel', 0) * 100:g}% of a's P50 or under "
        f"{eff.get('ms', 0):g}ms is `same` whatever its p; `unclear`: large enough but not "
        "significant after the correction" + (f"; {ROUGH_NOTE}" if rough else "")
    )


def programs_lines(pairs: list[tuple[str, str, list[str]]]) -> list[str]:
    """One line per pair of compared cells whose programs differ (model.programs)."""
    return [f"{a} vs {b}: programs differ: {'; '.join(d)}" for a, b, d in pairs]


def compare_programs_lines(cmp: Mapping[str, Any]) -> list[str]:
    """`rtax compare`'s pairs whose programs differ, a line each."""
    pairs = [(f["a"], f["b"], f["diffs"]) for f in cmp.get("programs_differ") or []]
    return programs_lines(pairs)


def render_compare(cmp: dict[str, Any]) -> Table:
    """Per cell and phase: median in run a, in run b, b - a with its interval, the
    Holm-adjusted p-value and the verdict for b."""
    table = Table(
        title=f"rtax compare: a = {cmp.get('a')}, b = {cmp.get('b')}",
        caption=compare_caption(cmp),
    )
    for h in COMPARE_HEADS:
        table.add_column(h, justify="left" if h in ("cell", "phase", "b is") else "right")
    for r in cmp["rows"]:
        table.add_row(*_compare_row(r))
    return table


def compare_markdown(cmp: dict[str, Any]) -> str:
    a, b = md_escape(str(cmp.get("a"))), md_escape(str(cmp.get("b")))
    out = [f"# rtax compare: a = {a}, b = {b}", ""]
    out += [_md_table(list(COMPARE_HEADS), [_compare_row(r) for r in cmp["rows"]]), ""]
    out += [compare_caption(cmp), ""]
    lines = [*compare_programs_lines(cmp), *compare_unstable_lines(cmp)]
    out += [f"- {md_escape(line)}" for line in lines]
    return "\n".join(out)


PROJECT_PHASES = ("image", "create", "ready", "action", "teardown")


def project_rough(c: Mapping[str, Any]) -> str:
    """ROUGH when a projected cell's medians rest on 1..FEW-1 samples (its interval was
    given from 3 samples with no word on it)."""
    ns = [int(i.get("n") or 0) for i in (c.get("inputs") or {}).values() if isinstance(i, dict)]
    return ROUGH if any(0 < n < FEW for n in ns) else ""


def project_figures(c: Mapping[str, Any]) -> dict[str, str]:
    """A projected cell's figures by column, in the one style of `render.tables`: each
    phase's P50 and the time per trajectory with its unit, worker-hours without an
    exponent, a rough interval marked; what `rtax project` prints and the console's
    project panel shows."""
    inp = c["inputs"]
    lo, hi = c["ci95"]
    out = {p: fmt_seconds((inp.get(p) or {}).get("p50_s")) for p in PROJECT_PHASES}
    out["per traj"] = fmt_seconds(c["per_trajectory_s"])
    out["worker-h"] = fmt_num(c["worker_hours"])
    out["95% CI"] = "-" if lo is None else f"{project_rough(c)}[{fmt_num(lo)}, {fmt_num(hi)}]"
    out["pool idle env-h"] = fmt_num(c.get("pool_idle_env_hours"))
    out["pool idle GiB-h"] = fmt_num(c.get("pool_idle_gib_hours"))
    return out


def render_project(proj: dict[str, Any]) -> Table:
    """Worker-hours per cell for N trajectories of S steps."""
    n, s = proj["trajectories"], proj["steps"]
    sf = proj.get("steps_from")
    if sf:  # S from real trajectories
        s = (
            f"{s:.1f} steps (mean of {sf['trajectories']} trajectories: "
            f"min {sf['min']}, P50 {sf['p50']:g}, max {sf['max']})"
        )
    else:
        s = f"{s} steps"
    table = Table(title=f"rtax project: {n:,} trajectories x {s}")
    imaged = any("image" in c["inputs"] for c in proj["cells"])  # a run with image modes
    heads = ["cell", *PROJECT_PHASES[0 if imaged else 1 :], "per traj", "worker-h", "95% CI"]
    pooled = any("pool_idle_env_hours" in c for c in proj["cells"])
    if pooled:  # what a warm pool held idle: capacity, beside the worker-hours
        heads += ["pool idle env-h", "pool idle GiB-h"]
    for h in heads:
        table.add_column(h, justify="left" if h == "cell" else "right")
    notes = ["P50s of the measured trials; worker-h and its 95% interval in hours"]
    if pooled:
        notes.append(
            "pooled cells: worker-h includes the pool's own work; its idle environments "
            "(env-h) and their memory (GiB-h) are capacity held, shown beside"
        )
    if any(project_rough(c) for c in proj["cells"]):
        notes.append(ROUGH_NOTE)
    table.caption = "; ".join(notes)
    for c in proj["cells"]:
        figures = project_figures(c)
        table.add_row(cell_name(c), *(figures[h] for h in heads[1:]))
    return table


class _OutConsole(Console):
    """A closed pipe is the caller's to end (rtax's one writer, `commands/output.py`:
    status 141, quietly); Rich's own answer is SystemExit(1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # Rich calls this while it handles the write's own error: that one is raised on,
        # as it came (stdout's writer marked it stdout's)
        exc = sys.exc_info()[1]
        if isinstance(exc, BrokenPipeError):
            raise exc
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def out_console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when writing to a pipe or file,
    and reads no markup: a string is printed as it is (a recording's or a trajectory's
    text, e.g. `[link=...]`, never becomes a link, a hidden span or a style, and
    `:white_check_mark:` no emoji); rtax's own styles are `Text` spans
    (`plaintext.styled`)."""
    c = _OutConsole(stderr=stderr, markup=False, emoji=False)
    if not c.is_terminal:
        c = _OutConsole(stderr=stderr, width=180, markup=False, emoji=False)
    return c


def text_console(width: int) -> Console:
    """A console that draws into text of `width` columns with its styles (the console's
    report dialog), reading no markup as `out_console`: a recording's name in the dialog
    was a link (`[link=...]`), or a MarkupError that ended the console (`[/]`)."""
    return Console(
        width=width,
        record=True,
        file=io.StringIO(),
        color_system="truecolor",
        markup=False,
        emoji=False,
    )


_LIMIT_UNITS = {"cpus": "", "memory_mib": " MiB", "pids": "", "workspace_mib": " MiB"}


def limits_lines(limits: Any) -> list[str | Text]:
    """The run's limits as a line, and a warning line when any was lifted ("unlimited");
    nothing for a report without a `run` (a probe's)."""
    if limits is None:
        return []
    if not isinstance(limits, dict):
        return ["limits: unknown (the recording predates recorded limits)"]
    parts = [
        f"{k} {v}{_LIMIT_UNITS.get(k, '') if v != 'unlimited' else ''}" for k, v in limits.items()
    ]
    out: list[str | Text] = ["limits: " + ", ".join(parts)]
    lifted = [k for k, v in limits.items() if v == "unlimited"]
    if lifted:
        out.append(
            styled(
                ("warning", "bold yellow"),
                f": unlimited {', '.join(lifted)}: "
                "an environment could take all of the host's share of it",
            )
        )
    return out


def print_report(report: Mapping[str, Any], console: Console) -> None:
    """The table, the reasons of failed trials, and the driver differences, for a terminal:
    a recording of its own kind (a probe's, a preparation's) drawn whole, else each
    section of TERMINAL_SECTIONS that the report has, in order."""
    for applies, draw in TERMINAL_KINDS:
        if applies(report):
            draw(report, console)
            return
    for section in TERMINAL_SECTIONS:
        section(report, console)


# -- the terminal's sections --------------------------------------------------------
# Each draws its part of a report, or nothing when the report has none (a run without
# pools has no pool table). A new kind of run adds a section here (and its Markdown in
# MARKDOWN_SECTIONS), beside its builder in analysis.report's SECTIONS: never a branch
# in print_report.


def _t_cells(report: Mapping[str, Any], console: Console) -> None:
    console.print(render_table(report))


def _t_stability(report: Mapping[str, Any], console: Console) -> None:
    for line in unstable_lines(report):
        console.print(styled((line, "yellow")), soft_wrap=True)
    for line in outlier_lines(report):
        console.print(line, soft_wrap=True)


def _t_replay(report: Mapping[str, Any], console: Console) -> None:
    replay = render_replay(report)
    if replay is not None:
        console.print(replay)


def _t_capacity(report: Mapping[str, Any], console: Console) -> None:
    cap_table = render_capacity(report)
    if cap_table is not None:
        console.print(cap_table)


def _t_part(key: str, draw: Callable[[Any], Any]) -> Callable[[Mapping[str, Any], Console], None]:
    """A section that draws `report[key]` with `draw` when the report has it."""

    def section(report: Mapping[str, Any], console: Console) -> None:
        if report.get(key):
            console.print(draw(report[key]))

    return section


def _t_hosts(report: Mapping[str, Any], console: Console) -> None:
    """Per remote host: its network cost, its clock, what of it was left out."""
    for name, h in (report.get("run", {}).get("hosts") or {}).items():
        net = h.get("net") or {}
        if "connect_ms" in net and "exec_rtt_ms" in net:
            console.print(
                f"host {name}: network cost: connect {net['connect_ms']:.1f} ms, "
                f"empty command {net['exec_rtt_ms']:.2f} ms a round trip"
            )
        clock = h.get("clock")
        if clock:
            drift = (
                f", drift {clock['drift_ppm']:+.2f} ±{clock['drift_err_ppm']:.2f} ppm"
                if "drift_ppm" in clock
                else ""
            )
            console.print(
                f"host {name}: clock synchronised {clock['syncs']} times: its times are on "
                f"this run's timeline within ±{clock['err_us']:.0f} us (quickest round trip "
                f"{clock['rtt_us']:.0f} us){drift}"
            )
        elif h.get("clock_error"):
            console.print(f"host {name}: clock not synchronised: {h['clock_error']}")
        if h.get("unreachable"):
            console.print(styled((f"host {name}: left out", "red"), f": {h['unreachable']}"))
        for d, why in (h.get("drivers_left_out") or {}).items():
            console.print(styled((f"{name}/{d} left out", "yellow"), f": {why}"))


def _t_limits(report: Mapping[str, Any], console: Console) -> None:
    for line in limits_lines(report.get("run", {}).get("limits")):
        console.print(line, soft_wrap=True)
    for key, how in (report.get("run", {}).get("limits_applied") or {}).items():
        console.print(f"  {key}: {how}", soft_wrap=True)


def _t_boundaries(report: Mapping[str, Any], console: Console) -> None:
    bounds = report.get("run", {}).get("boundaries") or {}
    if bounds:
        console.print("boundaries (the last `rtax probe` of each host/driver when the run began):")
        for key, b in bounds.items():
            console.print("  " + boundary_line(key, b), soft_wrap=True)


def _t_forgeable(report: Mapping[str, Any], console: Console) -> None:
    forgeable = report.get("run", {}).get("forgeable") or {}
    if forgeable:
        console.print("results a workload could forge (the driver does not state they hold):")
        for key, why in forgeable.items():
            console.print(styled("  ", (key, "yellow"), f": {why}"), soft_wrap=True)


def _t_programs(report: Mapping[str, Any], console: Console) -> None:
    lines = programs_lines(differing_pairs(report["cells"]))
    if lines:
        console.print("programs that differ between compared cells (resolved inside each):")
        for line in lines:
            console.print(styled("  ", (line, "yellow")), soft_wrap=True)


def _t_probe(report: Mapping[str, Any], console: Console) -> None:
    if report.get("probe"):
        print_probe(report["probe"], console)


def _t_failures(report: Mapping[str, Any], console: Console) -> None:
    for c in report["cells"]:
        errors = c.get("errors") or {}
        if errors:
            kinds = ", ".join(f"{k} x{v}" for k, v in sorted(errors.items()))
            console.print(styled((c["cell"], "red"), f": failures: {kinds}"))


DIFF_HEADS = ["a", "b", "phase", "a P50", "b P50", "diff", "95% CI", "ratio", "faster"]


def _t_diffs(report: Mapping[str, Any], console: Console) -> None:
    if report.get("diffs"):
        table = Table(title="differences between drivers (b - a, ms, P50)")
        for h in DIFF_HEADS:
            table.add_column(h, justify="left" if h in ("a", "b", "phase", "faster") else "right")
        for d in report["diffs"]:
            table.add_row(*_diff_row(d))
        console.print(table)


TERMINAL_SECTIONS: tuple[Callable[[Mapping[str, Any], Console], None], ...] = (
    _t_cells,
    _t_stability,
    _t_replay,
    _t_capacity,
    _t_part("pools", render_pools),  # a run with pooled cells
    _t_part("load", render_load),  # a run with arrival patterns
    _t_part("image", render_image),  # a run with image modes
    _t_hosts,
    _t_limits,
    _t_boundaries,
    _t_forgeable,
    _t_programs,
    _t_probe,
    _t_failures,
    _t_precision,
    _t_diffs,
)
# recordings of their own kind, drawn whole: (is it one, how to draw it)
TERMINAL_KINDS: tuple[
    tuple[Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any], Console], None]],
    ...,
] = (
    # a `rtax probe -o` recording
    (lambda r: bool(r.get("probe")) and not r["cells"], lambda r, c: print_probe(r["probe"], c)),
    # a `rtax traj prepare -o` recording
    (
        lambda r: bool(r.get("prep")) and not r["cells"],
        lambda r, c: c.print(render_prep(r["prep"])),
    ),
)


# -- boundaries (rtax probe) --------------------------------------------------------

RESULT_STYLE = {"blocked": "green", "held": "green", "breached": "bold red", "n/a": "dim"}
PROBE_LEGEND = (
    "blocked / held: the boundary kept (an escape refused / a guarantee held); breached: it "
    "did not; n/a: not measurable here (see the evidence; a promise n/a is neither kept nor "
    "broken); (exec): only on that channel; "
    "!: a check the driver promises, broken"
)


def probe_cell_text(name: str, c: dict[str, Any]) -> str:
    """A check's cell for one driver: its combined result, and where the channels (or
    hosts) disagree, each result with where it came from (`blocked (exec), breached
    (shell)`, the combined one first); ` !` when a run that promised it failed."""
    from rtax_tui.model.probedoc import promise_broken

    result = str(c["result"])
    runs = c.get("runs") or []
    text = result
    if len({r["result"] for r in runs}) > 1:  # the channels (or hosts) disagree: say where
        one_host = len({r["host"] for r in runs}) == 1
        where: dict[str, list[str]] = {result: []}
        for r in runs:
            where.setdefault(r["result"], []).append(
                r["channel"] if one_host else f"{r['host']}/{r['channel']}"
            )
        text = ", ".join(f"{res} ({','.join(w)})" for res, w in where.items())
    if promise_broken(name, c):
        text += " !"
    return text


def _probe_cell(name: str, c: dict[str, Any]) -> Text:
    return styled((probe_cell_text(name, c), RESULT_STYLE.get(c["result"], "")))


def render_probe(doc: dict[str, Any]) -> Table:
    """Checks down, drivers across: each cell the combined result of every host and
    channel; `!` marks a promise the driver states and the measurement breaks."""
    from rtax_tui.model.checks import BY_NAME, CHECKS

    drivers = doc.get("drivers") or {}
    hosts = ", ".join(doc.get("hosts") or []) or "-"
    chans = ", ".join(doc.get("channels") or []) or "-"
    table = Table(
        title=f"rtax probe: what each driver keeps out (hosts: {hosts}; channels: {chans})"
    )
    table.add_column("check", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    for d in drivers:
        table.add_column(d, no_wrap=True)
    names = [c.name for c in CHECKS]
    names += sorted({k for d in drivers.values() for k in d["checks"]} - set(names))
    for name in names:
        kind = BY_NAME[name].kind if name in BY_NAME else "?"
        row: list[str | Text] = [name, kind]
        for d in drivers.values():
            c = d["checks"].get(name)
            row.append("-" if c is None else _probe_cell(name, c))
        table.add_row(*row)
    return table


def print_probe(doc: dict[str, Any], console: Console) -> None:
    """The matrix, one summary line per driver, and the evidence of every breach."""
    from rtax_tui.model.probedoc import summary_text

    console.print(render_probe(doc))
    console.print(PROBE_LEGEND)
    drivers = doc.get("drivers") or {}
    for d, dd in drivers.items():
        broken = dd["summary"].get("broken_promises") or []
        line = styled((d, "b"), f": {summary_text(dd['summary'])}")
        if broken:
            line.append(visible(f" (broken: {', '.join(broken)})"), style="red")
        console.print(line)
    for d, dd in drivers.items():
        for name, c in dd["checks"].items():
            if c["result"] == "breached":
                console.print(styled((f"{d}/{name}", "red"), f": {c['evidence']}"), soft_wrap=True)


def boundary_line(key: str, b: dict[str, Any]) -> str:
    """`local/stage: probed 2026-..: 12 blocked, ...` from a header's boundary entry."""
    from rtax_tui.model.probedoc import honest_summary, summary_text

    # one line whatever the header says (its names are its writer's words)
    key = one_line(key)
    if not b.get("summary"):
        return f"{key}: {one_line(str(b.get('status') or 'not probed'))}"
    summary = honest_summary(b["summary"], b.get("checks"))
    line = f"{key}: probed {one_line(str(b.get('probed_at', '?')))}: {summary_text(summary)}"
    breached = [one_line(str(n)) for n in summary.get("breached_checks") or []]
    if breached:
        line += f"; breached: {', '.join(breached)}"
    return line


def _run_key(run: dict[str, Any], one_host: bool) -> str:
    return str(run["channel"]) if one_host else f"{run['host']}/{run['channel']}"


def _reason(evidence: str) -> str:
    """The verdict's own words: a run's evidence up to the step's output."""
    return evidence.split(" | ", 1)[0]


def _probe_summary_rows(doc: dict[str, Any]) -> list[list[str]]:
    """One row per driver, or one per channel (host/channel) where they differ: the
    counts of `summarize` over that channel's own runs."""
    from rtax_tui.model.checks import RESULTS
    from rtax_tui.model.probedoc import summarize

    rows = []
    for d, dd in (doc.get("drivers") or {}).items():
        runs = [r for c in dd["checks"].values() for r in c.get("runs") or []]
        one_host = len({r["host"] for r in runs}) <= 1
        per: dict[str, dict[str, Any]] = {}
        for name, c in dd["checks"].items():
            for r in c.get("runs") or []:
                one = {"result": r["result"], "promised": r.get("promised"), "runs": [r]}
                per.setdefault(_run_key(r, one_host), {})[name] = one
        results = {k: {n: c["result"] for n, c in checks.items()} for k, checks in per.items()}
        if len({tuple(sorted(v.items())) for v in results.values()}) <= 1:
            groups = [(", ".join(per) or "-", dd["summary"])]
        else:
            groups = [(k, summarize(checks)) for k, checks in per.items()]
        for where, s in groups:
            breached = s.get("breached_checks") or []
            broken = set(s.get("broken_promises") or [])
            names = [md_code(n) + (" !" if n in broken else "") for n in breached]
            measured = int(s["promised"]) - len(s.get("unchecked_promises") or [])
            kept = f"{measured - len(broken)}/{measured}"
            if measured < int(s["promised"]):  # the rest could not be measured here
                kept += f" ({int(s['promised']) - measured} n/a)"
            rows.append(
                [Code(d), where, *(str(s.get(r, 0)) for r in RESULTS)]
                + [kept if s.get("promised") else "none", Md(", ".join(names) or "none")]
            )
    return rows


def probe_markdown(doc: dict[str, Any]) -> str:
    """The boundary tables of a probe document (`model.probedoc.build_document`) as Markdown:
    per driver (and channel, where they differ) the counts, promises kept and breached
    checks; the check x driver matrix (as `render_probe`); the reason of every `n/a`
    and the evidence of every broken promise. docs/boundaries.md holds this output for
    the example recording (`boundary_doc`, scripts/boundary-tables)."""
    from rtax_tui.model.checks import CHECKS, RESULTS

    drivers = doc.get("drivers") or {}
    heads = ["driver", "channel", *RESULTS, "promises kept", "breached checks"]
    out = [_md_table(heads, _probe_summary_rows(doc)), ""]
    names = [c.name for c in CHECKS]
    names += sorted({k for d in drivers.values() for k in d["checks"]} - set(names))
    rows = []
    for name in names:
        row: list[str] = [Code(name)]
        for d in drivers.values():
            c = d["checks"].get(name)
            row.append("-" if c is None else probe_cell_text(name, c))
        rows.append(row)
    out += [_md_table(["check", *drivers], rows), ""]
    out += _run_notes(drivers, "n/a (not measurable there), and why", _not_measured)
    out += _run_notes(drivers, "broken promises (`!`), and why", _broken)
    return "\n".join(out).rstrip("\n") + "\n"


def _not_measured(name: str, run: dict[str, Any]) -> bool:
    return bool(run["result"] == "n/a")


def _broken(name: str, run: dict[str, Any]) -> bool:
    from rtax_tui.model.probedoc import passed

    return bool(run.get("promised")) and not passed(name, run["result"])


def _run_notes(
    drivers: dict[str, Any], title: str, pick: Callable[[str, dict[str, Any]], bool]
) -> list[str]:
    """A list of the runs `pick` selects, by driver: the checks, where, and the verdict's
    reason (one line for the checks and channels that give the same)."""
    lines: list[str] = []
    for d, dd in drivers.items():
        by_reason: dict[tuple[str, str], list[str]] = {}
        for name, c in dd["checks"].items():
            runs = c.get("runs") or []
            one_host = len({r["host"] for r in runs}) <= 1
            why: dict[str, list[str]] = {}
            for r in runs:
                if pick(name, r):
                    why.setdefault(_reason(r["evidence"]), []).append(_run_key(r, one_host))
            for reason, where in why.items():
                by_reason.setdefault((reason, ", ".join(where)), []).append(md_code(name))
        for (reason, place), names in by_reason.items():
            text = f"{md_code(d)} {', '.join(names)} ({md_escape(place)}): {md_escape(reason)}"
            lines.append(f"- {text}")
    return [f"{title}:", "", *lines, ""] if lines else []


PROBE_TABLES_BEGIN = "<!-- probe-tables: begin (generated by scripts/boundary-tables) -->"
PROBE_TABLES_END = "<!-- probe-tables: end -->"


def boundary_doc(text: str, doc: dict[str, Any]) -> str:
    """`text` (docs/boundaries.md) with what lies between its two probe-tables markers
    replaced by `probe_markdown(doc)`: unchanged when the tables already match."""
    begin, end = text.find(PROBE_TABLES_BEGIN), text.find(PROBE_TABLES_END)
    if begin < 0 or end < begin or text.count(PROBE_TABLES_BEGIN) != 1:
        raise ValueError(f"expected one {PROBE_TABLES_BEGIN} before one {PROBE_TABLES_END}")
    head = text[: begin + len(PROBE_TABLES_BEGIN)]
    return head + "\n\n" + probe_markdown(doc) + "\n" + text[end:]
