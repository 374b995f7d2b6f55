"""Red team (2026-12-06): a crafted recording's names in the console's report view
(the history's `r`: `rtax report FILE` drawn into the dialog). Its console read Rich
markup: a workload named `x[link=https://...]y[/link]` became a link in the dialog, and
one named `x[/]` ended the console with a MarkupError. It reads none now, as the
terminal's (`render.reporting.out_console`, `text_console`), and no emoji code (a name
`:white_check_mark: all passed` was shown with a ✅, in the terminal too)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import Static

from rtax_tui.ui.app import RtaxApp
from rtax_tui.ui.history import ReportPanel
from tests.hostile.test_hostile_markdown import _recording

NAMES = [
    "x[link=https://attacker.invalid]y[/link]", "x[/]", "[bold red]z[/bold red]",
    ":white_check_mark: all passed",  # Rich's emoji codes: a ✅ the recording wrote
]  # fmt: skip


async def _shown(rec: Path) -> Text:
    app = RtaxApp(ReportPanel(str(rec)))
    async with app.run_test(size=(160, 40)):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            assert app.is_running, "the console ended"
            got = app.screen.query("#report")
            text = got.first(Static).content if got else None
            if isinstance(text, Text) and "local/local/" in text.plain:
                return text
            assert loop.time() < deadline, "no report in time"
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("name", NAMES)
def test_a_crafted_name_is_text_in_the_consoles_report(tmp_path: Path, name: str) -> None:
    text = asyncio.run(_shown(_recording(tmp_path / "r.jsonl", name)))
    assert f"rtax {name} (completed)" in text.plain  # shown as it is, brackets and all
    assert not any(s.style.link for s in text.spans if not isinstance(s.style, str))


def test_an_emoji_code_is_text_in_the_terminals_report(tmp_path: Path) -> None:
    rec = _recording(tmp_path / "r.jsonl", ":white_check_mark: all passed")
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(rec)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "rtax :white_check_mark: all passed" in res.stdout and "\u2705" not in res.stdout
