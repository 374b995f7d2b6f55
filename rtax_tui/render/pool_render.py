"""The warm pools of a report (`report["pools"]`, analysis.pool_report), for a terminal
and in Markdown: per host the hit rate and the time trials waited, per pooled cell its start-up
(`acquire`), what the pool spent, and what it held idle (environment-time waiting ready,
and an environment's memory as it went in)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rtax_tui.render.tables import fmt_ms, md_table


def _ms(v: float | None) -> str:
    """Seconds (the report's unit for pools) as the tables' milliseconds."""
    return fmt_ms(None if v is None else v * 1000)


TITLE = "warm pools (a pooled cell's start-up is acquire; times in ms)"
HEADERS = ["host / cell", "trials", "hit rate", "acquire P50", "waited", "waited P50",
           "pool work", "pool CPU", "idle", "idle MiB P50", "pool ops"]  # fmt: skip


def pool_rows(pools: dict[str, Any]) -> list[list[str]]:
    """Per host, then per pooled cell: the table's cells as text."""
    rows = [(f"host {h}", d) for h, d in pools.get("hosts", {}).items()]
    rows += [(f"  {c}", d) for c, d in pools.get("cells", {}).items()]
    out = []
    for name, d in rows:
        rate = d.get("hit_rate")
        ops = ", ".join(f"{k} {v}" for k, v in sorted((d.get("pool_ops") or {}).items()))
        if d.get("pool_failed"):
            ops += f" ({d['pool_failed']} failed)"
        out.append([
            name, str(d.get("trials")), "-" if rate is None else f"{rate:.0%}",
            _ms(d.get("acquire_p50_s")), _ms(d.get("waited_s")), _ms(d.get("waited_p50_s")),
            _ms(d.get("pool_work_s")), _ms(d.get("pool_cpu_s")), _ms(d.get("pool_idle_s")),
            fmt_ms(d.get("pool_idle_mem_p50_mib")), ops,
        ])  # fmt: skip
    return out


def render_pools(pools: dict[str, Any]) -> Table:
    table = Table(title=TITLE)
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("host / cell", "pool ops") else "right")
    for row in pool_rows(pools):
        table.add_row(*row)
    return table


def pools_markdown(pools: dict[str, Any]) -> str:
    """The same table in Markdown (a cell's name without the terminal's indent)."""
    rows = [[r[0].strip(), *r[1:]] for r in pool_rows(pools)]
    return f"### {TITLE}\n\n{md_table(HEADERS, rows)}\n"
