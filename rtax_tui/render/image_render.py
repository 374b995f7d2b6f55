"""The image table of a report (`report["image"]`, analysis.image_report) for a terminal
and for Markdown: per cell, its image mode, the phases it adds to and the bytes fetched."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rtax_tui.render.richtable import titled_table
from rtax_tui.render.tables import fmt_ms, md_table

TITLE = "image delivery: per cell and image mode (times in ms)"
HEADERS = [
    "cell", "mode", "n", "failed", "image P50/P95", "create P50", "ready P50/P95",
    "start-up P50/P95", "fetched (P50)", "requests", "of the image",
]  # fmt: skip
NOTE = (
    "fetched: the bytes the content server (nginx on 127.0.0.1) sent for a trial, HTTP "
    "headers included, median over measured trials; start-up: image + create + ready; the "
    "server's first preparation and any network but loopback are left out"
)


def _pcts(s: dict[str, Any] | None, keys: tuple[str, ...] = ("p50_ms", "p95_ms")) -> str:
    if not s:
        return "-"
    return " / ".join(fmt_ms(s.get(k)) for k in keys)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def image_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        frac = r.get("fraction")
        out.append([
            r["cell"], str(r["mode"]), str(r["n"]), str(r["failed"]), _pcts(r.get("image")),
            _pcts(r.get("create"), ("p50_ms",)), _pcts(r.get("ready")), _pcts(r.get("startup")),
            fmt_bytes(r.get("fetched_p50")),
            "-" if r.get("requests_p50") is None else f"{r['requests_p50']:.0f}",
            "-" if frac is None else f"{100 * frac:.2f}% of {fmt_bytes(r.get('size'))}",
        ])  # fmt: skip
    return out


def render_image(rows: list[dict[str, Any]]) -> Table:
    return titled_table(TITLE, NOTE, HEADERS, image_rows(rows), left=("cell", "mode"))


def image_markdown(rows: list[dict[str, Any]]) -> str:
    return f"### {TITLE}\n\n{md_table(HEADERS, image_rows(rows))}\n\n{NOTE}\n"
