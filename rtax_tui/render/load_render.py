"""The load table of a report (`report["load"]`, analysis.load_report) for a terminal and
for Markdown: per cell and arrival pattern, the offered and achieved load and the
start-up's percentiles."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rtax_tui.render.richtable import titled_table
from rtax_tui.render.tables import fmt_ms, md_table

TITLE = "load: start-up per arrival pattern (times in ms)"
HEADERS = [
    "cell", "arrival", "n", "failed", "offered/s", "achieved/s", "spread", "late P95",
    "create P50/P95/P99", "ready P50/P95/P99", "acquire P50/P95/P99", "start-up P50/P95/P99",
]  # fmt: skip
NOTE = (
    "start-up: create + ready (cold) or acquire (pooled); spread: a burst's last start minus "
    "its first (median over bursts); late: a start minus the instant it was due"
)


def _pcts(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return " / ".join(fmt_ms(s.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms"))


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def load_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        offered = f"{r['burst']} at once" if r.get("burst") else _rate(r.get("offered_per_s"))
        out.append([
            r["cell"], r["arrival"], str(r["n"]), str(r["failed"]), offered,
            _rate(r.get("achieved_per_s")), fmt_ms(r.get("spread_p50_ms")),
            fmt_ms(r.get("late_p95_ms")), _pcts(r.get("create")), _pcts(r.get("ready")),
            _pcts(r.get("acquire")), _pcts(r.get("startup")),
        ])  # fmt: skip
    return out


def render_load(rows: list[dict[str, Any]]) -> Table:
    return titled_table(TITLE, NOTE, HEADERS, load_rows(rows), left=("cell", "arrival"))


def load_markdown(rows: list[dict[str, Any]]) -> str:
    return f"### {TITLE}\n\n{md_table(HEADERS, load_rows(rows))}\n\n{NOTE}\n"
