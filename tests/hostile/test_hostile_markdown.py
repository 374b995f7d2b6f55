"""The red team on the report's Markdown (`rtax report --format markdown`, `--summary`,
the step summary a CI job renders): a crafted recording's names are text, never markup.

A recording handed to the user names its cells as it likes (a workload `<img ...>`).
The Markdown report puts those names in tables, in code spans and in the gate lines,
and a step summary is rendered as GitHub Markdown with its HTML subset.
"""

from __future__ import annotations

import html as html_text
import json
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from rtax_tui.model.events import FORMAT

HEADER = {
    "type": "run", "t_ns": 1, "format": FORMAT, "run_id": "r1",
    "started_at": "2026-12-05T00:00:00+00:00", "seed": 1, "argv": ["rtax"],
    "profile": {"name": "p"}, "hosts": {"local": {}},
}  # fmt: skip


def _recording(path: Path, workload: str) -> Path:
    cell = f"local/local/{workload}/exec"
    # the run's own names are the recording's too
    evs: list[dict[str, object]] = [{**HEADER, "run_id": workload, "profile": {"name": workload}}]
    t = 10
    for trial in (1, 2, 3):
        evs.append({
            "type": "trial_start", "t_ns": t, "trial": trial, "cell": cell, "host": "local",
            "driver": "local", "workload": workload, "channel": "exec", "warmup": False,
            "batch": None,
        })  # fmt: skip
        for name in ("create", "ready", "teardown"):
            t += 1000
            evs.append({"type": "phase", "t_ns": t, "trial": trial, "name": name,
                        "dur_ns": 1000, "ok": True})  # fmt: skip
        t += 1000
        evs.append({"type": "trial_end", "t_ns": t, "trial": trial, "ok": True, "valid": True,
                    "error": None})  # fmt: skip
    evs.append({"type": "run_end", "t_ns": t + 1, "status": "completed", "trials": 3})
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return path


def _html(md: str) -> str:
    """As GitHub renders a summary: CommonMark, GFM tables, raw HTML kept, and bare URLs
    and addresses linked (GFM's extended autolinks; linkify-it here, which leaves a name
    under `.invalid` alone unless a scheme starts it)."""
    opts = {"html": True, "linkify": True}
    return MarkdownIt("commonmark", opts).enable(["table", "linkify"]).render(md)


NAMES = [
    '<img src="https://attacker.invalid/seen.png">',
    "x`<a href=https://attacker.invalid>y</a>`",
    "[results: all passed](https://attacker.invalid)",
    # red team 2026-12-06: GitHub links a bare URL, a `www.` name and an address
    "details at https://attacker.invalid/all-passed",
    "mail results@example.com",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_crafted_cell_name_is_no_markup_in_the_markdown_report(tmp_path: Path, name: str) -> None:
    rec = _recording(tmp_path / "r.jsonl", name)
    summary = tmp_path / "summary.md"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", "--format", "markdown", str(rec),
         "--threshold", "failed == 0", "--summary", str(summary)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    for md in (res.stdout, summary.read_text()):
        html = _html(md)
        assert "<img" not in html and "<a " not in html and "<a>" not in html, html


@pytest.mark.parametrize("name", NAMES)
def test_a_crafted_cell_name_is_no_markup_in_the_comparison_summary(
    tmp_path: Path, name: str
) -> None:
    a = _recording(tmp_path / "a.jsonl", name)
    b = _recording(tmp_path / "b.jsonl", name)
    summary = tmp_path / "summary.md"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "compare", str(a), str(b), "--summary", str(summary)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    md = summary.read_text()
    assert "rtax compare" in md and "exec" in md  # the comparison is there, rows and all
    html = _html(md)
    assert "<img" not in html and "<a " not in html and "<a>" not in html, html


# -- red team 2026-12-06: md_escape wherever its text is put --------------------------

TEXTS = [
    "# all passed", "> quoted", "- item", "+ item", "---", "===", "1. first", "12) first",
    "    indented code", "x https://attacker.invalid/y", "www.example.com",
    "a@example.com", "x ### y ##", "ftp://attacker.invalid", "**b** _e_ ~~s~~ `c`",
]  # fmt: skip
PLACES = {
    "list item": ("- {} tail", "<ul>\n<li>{} tail</li>\n</ul>\n"),
    "table cell": ("| h |\n|---|\n| {} |", "<td>{}</td>"),
    "heading": ("# rtax report {}", "<h1>rtax report {}</h1>\n"),
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("text", TEXTS)
def test_an_escaped_text_renders_as_itself_and_nothing_more(text: str, place: str) -> None:
    # a block begun (a heading, a rule, a quote, a list, code) or a link made where the
    # text starts a line or a list item, or anywhere (GitHub's autolinks)
    from rtax_tui.render.tables import md_escape

    md, want = PLACES[place]
    html = _html(md.format(md_escape(text)))
    shown = html_text.escape(text, quote=False).replace("@", "\u200b@")
    assert want.format(shown) in html, html
    assert "<a" not in html and "<code" not in html and "<strong" not in html
