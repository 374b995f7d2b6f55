"""The gates of `rtax run` and `rtax report` (`[thresholds]`, `--threshold`), and the
Markdown step summary (`--summary FILE`) a CI job shows."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
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
    report: Any,
    load: Callable[[], Any],
    thresholds: Sequence[Threshold],
    summary: str | None,
    junit: str | None = None,
) -> bool:
    """Check the thresholds (each result a line on stderr, breaches first; `load`: the
    recording, read only for a figure the report has not), append the
    report and the gates to `summary`, write them to `junit` as JUnit XML (one testcase
    per threshold and cell); True when every threshold held."""
    results = check_thresholds(report, thresholds, load)
    held = print_gates(results, lambda line: print(line, file=sys.stderr))
    if junit:
        write_junit(junit, gates_junit(results))
    if summary:
        from rtax_tui.render.reporting import render_markdown

        text = render_markdown(report)
        if results:
            text += "\n" + gates_markdown(results)
        append_summary(summary, text)
    return held


def junit_xml(suite: str, cases: Sequence[tuple[str, str, str | None]]) -> str:
    """A JUnit XML document: one testcase per (name, what it measured, failure or None)."""
    from xml.etree import ElementTree as ET

    failures = sum(1 for _, _, f in cases if f is not None)
    root = ET.Element("testsuites", name="rtax", tests=str(len(cases)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)),
                       failures=str(failures))  # fmt: skip
    for name, out, failure in cases:
        tc = ET.SubElement(ts, "testcase", classname=suite, name=name)
        if failure is not None:
            ET.SubElement(tc, "failure", message=failure).text = failure
        ET.SubElement(tc, "system-out").text = out
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise RtaxError(f"{path}: --junit: cannot write ({exc.strerror})") from None


def gates_junit(results: Sequence[Any]) -> str:
    cases = [
        (f"{r.threshold.text} [{r.cell or 'no cell'}]", r.line(), None if r.ok else r.line())
        for r in results
    ]
    return junit_xml("rtax thresholds", cases)


def compare_junit(cmp: Mapping[str, Any]) -> str:
    cases = []
    for r in cmp["rows"]:
        line = (
            f"{r['cell']} {r['phase']}: {r['a_p50_ms']:.3f}ms -> {r['b_p50_ms']:.3f}ms "
            f"({r['diff_ms']:+.3f}ms, p Holm {r['p_holm']:.3g}): {r['verdict']}"
        )
        cases.append(
            (f"{r['cell']} {r['phase']}", line, line if r["verdict"] == "slower" else None)
        )
    return junit_xml("rtax compare", cases)
