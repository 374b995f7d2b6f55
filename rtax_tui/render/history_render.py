"""The trend of a profile's runs (`analysis.trends`) as tables: one per series, a run a
row, each phase's P50 with a mark where it stepped (its size in % and ms)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from rtax_tui.render.tables import fmt_ms, fmt_time

UP, DOWN = "▲", "▼"


def step_mark(step: dict[str, Any]) -> str:
    """`▲ +884% +45.2ms`: the direction, then the size against the level before."""
    pct = step.get("diff_pct")
    size = "" if pct is None else f"{pct:+.0f}% "
    arrow = UP if step["diff_ms"] > 0 else DOWN
    return f"{arrow} {size}{fmt_time(step['diff_ms'], signed=True)}"


def run_date(started_at: str) -> str:
    """`2026-12-06T03:10:02.123Z` as `2026-12-06 03:10:02`."""
    return started_at.replace("T", " ")[:19]


def step_line(series: dict[str, Any], step: dict[str, Any]) -> str:
    """One step as a sentence: where, what, how much."""
    return (
        f"{series['cell']} {step['phase']}: {step_mark(step)} at run {step['run'] + 1} "
        f"({run_date(step['started_at'])}, {step['run_id']}): "
        f"{fmt_time(step['before_ms'])} -> {fmt_time(step['after_ms'])}"
    )


def render_series(series: dict[str, Any], phases: list[str]) -> Table:
    """A series' runs, oldest first: date, run id, n, then P50 (ms) per phase."""
    marks = {(s["run"], s["phase"]): s for s in series["steps"]}
    title = f"{series['cell']}  ({series['definition']})"
    caption = [step_line(series, s) for s in series["steps"]] or ["no step"]
    if series.get("assumed"):
        caption.append(f"{series['definition']}: {series['assumed']}")
    table = Table(title=title, caption="\n".join(caption), caption_justify="left")
    for h in ("#", "run date (UTC)", "run", "n"):
        table.add_column(h, justify="right" if h in ("#", "n") else "left")
    for p in phases:
        table.add_column(f"{p} P50 ms", justify="right")
    for i, run in enumerate(series["runs"]):
        row: list[str | Text] = [
            str(i + 1),
            run_date(run["started_at"]),
            run["run_id"],
            str(run["n"]),
        ]
        for p in phases:
            cell = Text(fmt_ms(run["p50_ms"].get(p)))
            step = marks.get((i, p))
            if step is not None:
                style = "bold red" if step["diff_ms"] > 0 else "bold green"
                cell.append(f" {step_mark(step)}", style=style)
            row.append(cell)
        table.add_row(*row)
    return table
