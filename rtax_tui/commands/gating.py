"""The gates of `rtax run` and `rtax report` (`[thresholds]`, `--threshold`), and the
Markdown step summary (`--summary FILE`) a CI job shows."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from rtax_tui.analysis.gates import (
    Threshold,
    check_thresholds,
    parse_threshold,
    print_gates,
    table_texts,
)
from rtax_tui.model.events import visible
from rtax_tui.model.inputs import read_input
from rtax_tui.model.paths import atomic_write, path_error


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


SUMMARY_MAX = 64 << 20  # a step summary rtax appends to (GitHub's own limit is 1 MiB)


def _text_bytes(text: str) -> bytes:
    """UTF-8; a byte of an argument that is not UTF-8 (a surrogate) as `\\xNN`."""
    shown: str = visible(text)
    return shown.encode("utf-8")


def _put(f: IO[bytes], data: bytes) -> None:
    f.write(data)


def append_summary(path: str, text: str) -> None:
    """Appended, as GitHub's $GITHUB_STEP_SUMMARY expects of each step. A regular file (or
    none yet) is rewritten whole, beside it, and renamed: a full disk or a signal leaves
    it as it was; anything else (a pipe, /dev/stdout) is appended to."""
    add = _text_bytes(text.rstrip("\n") + "\n\n")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise path_error("--summary", path, exc) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(path, "ab") as f:
                f.write(add)
        except OSError as exc:
            raise path_error("--summary", path, exc) from None
        return
    old = read_input(path, "the summary", SUMMARY_MAX, prefix="") if st is not None else b""
    atomic_write(path, lambda f: _put(f, old + add), flag="--summary")


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
    """Written whole (beside it, then renamed)."""
    data = _text_bytes(text)
    atomic_write(path, lambda f: _put(f, data), flag="--junit")


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
