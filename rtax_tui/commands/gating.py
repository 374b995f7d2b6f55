"""The gates of `rtax run` and `rtax report` (`[thresholds]`, `--threshold`), and the
Markdown step summary (`--summary FILE`) a CI job shows."""

from __future__ import annotations

import argparse
import os
import stat
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
from rtax_tui.model.events import one_line, visible
from rtax_tui.model.inputs import same_file
from rtax_tui.model.paths import atomic_write, path_error
from rtax_tui.model.spec import RtaxError
from rtax_tui.render.tables import fmt_time, md_escape


def parse_thresholds(resolved: Any, cli: Sequence[str]) -> list[Threshold]:
    """The `[thresholds]` of a resolved profile (a recording's header holds one), then
    each `--threshold`; a bad one is a one-line error naming it."""
    table = resolved.get("thresholds") if isinstance(resolved, Mapping) else None
    out = [parse_threshold(t, "[thresholds]") for t in table_texts(table)]
    out += [parse_threshold(t, "--threshold") for t in cli]
    return out


def gates_markdown(results: Sequence[Any]) -> str:
    lines = ["## Gates", ""]
    ordered = sorted(results, key=lambda r: r.ok)
    lines += [f"- {'✅' if r.ok else '❌'} {md_escape(r.line())}" for r in ordered]
    return "\n".join(lines + [""])


def _text_bytes(text: str) -> bytes:
    """UTF-8; a byte of an argument that is not UTF-8 (a surrogate) as `\\xNN`."""
    shown: str = visible(text)
    return shown.encode("utf-8")


def append_summary(path: str, text: str) -> None:
    """Appended (`O_APPEND`: another step's append at the same time is kept; a symbolic
    link's target is written; mode and owner stay), as GitHub's $GITHUB_STEP_SUMMARY
    expects of each step. A write that fails (a full disk) is cut back to the file's
    size before it (a file it made is removed): the summary holds the whole report or
    none of it."""
    add = _text_bytes(text.rstrip("\n") + "\n\n")
    made = not os.path.lexists(path)  # a file this call makes is removed if it fails
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise path_error("--summary", path, exc) from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        before = os.lseek(fd, 0, os.SEEK_END) if regular else 0
        try:
            done = 0
            while done < len(add):
                done += os.write(fd, add[done:])
        except OSError as exc:
            if regular:
                try:
                    os.ftruncate(fd, before)
                    if made:
                        os.unlink(path)
                except OSError:
                    pass
            raise path_error("--summary", path, exc) from None
    finally:
        os.close(fd)


def refuse_inputs(outputs: dict[str, str | None], inputs: Sequence[str]) -> None:
    """A `--junit` or `--summary` naming one of the recordings read is refused: it would
    replace or append to the recording."""
    for flag, out in outputs.items():
        for rec in inputs:
            if out and same_file(out, rec):
                raise RtaxError(f"{flag} {one_line(out)}: is the recording {one_line(rec)}")


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
    held = print_gates(results, lambda line: print(one_line(line), file=sys.stderr))
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
    """Written whole (beside it, then renamed; through a symbolic link, its target)."""
    data = _text_bytes(text)
    atomic_write(os.path.realpath(path), lambda f: f.write(data), flag="--junit")


def gates_junit(results: Sequence[Any]) -> str:
    cases = [
        (f"{r.threshold.text} [{r.cell or 'no cell'}]", r.line(), None if r.ok else r.line())
        for r in results
    ]
    return junit_xml("rtax thresholds", cases)


def change_text(r: Mapping[str, Any]) -> str:
    """A compared row's change in the one style of the tables (`render.tables`):
    `4.48ms -> 13.6ms (+9.14ms, p Holm 0.012)`."""
    return (
        f"{fmt_time(r['a_p50_ms'])} -> {fmt_time(r['b_p50_ms'])} "
        f"({fmt_time(r['diff_ms'], signed=True)}, p Holm {r['p_holm']:.3f})"
    )


def compare_junit(cmp: Mapping[str, Any]) -> str:
    cases = []
    for r in cmp["rows"]:
        line = f"{r['cell']} {r['phase']}: {change_text(r)}: {r['verdict']}"
        cases.append(
            (f"{r['cell']} {r['phase']}", line, line if r["verdict"] == "slower" else None)
        )
    return junit_xml("rtax compare", cases)


def add_gate_flags(p: argparse.ArgumentParser) -> None:
    """`--threshold`, `--summary`, `--junit`: the gates of `rtax run` and `rtax report`."""
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate, e.g. 'stage/t0/exec create+ready p95 < 20ms', 'failed == 0', "
        "'fidelity >= 0.8' (repeatable; with the profile's [thresholds]): exit 1 on a breach",
    )
    p.add_argument(
        "--summary",
        metavar="FILE",
        help="append the report and the gates in Markdown to FILE (e.g. $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument(
        "--junit", metavar="FILE", help="write the gates as JUnit XML (a testcase per threshold)"
    )
