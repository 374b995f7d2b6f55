"""The gates of `rtax run` and `rtax report` (`[thresholds]`, `--threshold`), and the
Markdown step summary (`--summary FILE`) a CI job shows."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rtax_tui.analysis.gates import (
    Threshold,
    check_thresholds,
    parse_threshold,
    print_gates,
    table_texts,
)
from rtax_tui.model.spec import RtaxError


def parse_thresholds(resolved: Any, cli: Sequence[str]) -> list[Threshold]:
    """The `[thresholds]` of a resolved profile (a recording's header holds one), then
    each `--threshold`; a bad one is a one-line error naming it."""
    table = resolved.get("thresholds") if isinstance(resolved, Mapping) else None
    out = [parse_threshold(t, "[thresholds]") for t in table_texts(table)]
    out += [parse_threshold(t, "--threshold") for t in cli]
    return out


def gates_markdown(results: Sequence[Any]) -> str:
    lines = ["## Gates", ""]
    lines += [f"- {'✅' if r.ok else '❌'} {r.line()}" for r in sorted(results, key=lambda r: r.ok)]
    return "\n".join(lines + [""])


def append_summary(path: str, text: str) -> None:
    """Appended, as GitHub's $GITHUB_STEP_SUMMARY expects of each step."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n\n")
    except OSError as exc:
        raise RtaxError(f"{path}: --summary: cannot write ({exc.strerror})") from None


def apply_gates(
    report: Any, rec: Any, thresholds: Sequence[Threshold], summary: str | None
) -> bool:
    """Check the thresholds (each result a line on stderr, breaches first), and append
    the report and the gates to `summary`; True when every threshold held."""
    results = check_thresholds(report, thresholds, rec)
    held = print_gates(results, lambda line: print(line, file=sys.stderr))
    if summary:
        from rtax_tui.render.reporting import render_markdown

        text = render_markdown(report)
        if results:
            text += "\n" + gates_markdown(results)
        append_summary(summary, text)
    return held
