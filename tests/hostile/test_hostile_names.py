"""Names held to one line, text that cannot move, inputs read as inputs: what the edges'
second red-team pass left (docs/boundaries.md, the edges' second pass).

- a recording whose cell, host, driver, phase or check name holds a newline would split
  the report's table row, a gate line and a summary row: readers refuse such a line with
  the file and line (the schema's `name` kind), as any other event that does not fit;
- U+2028, U+2029 and the bidirectional controls (a name that reads as another,
  "Trojan Source") are shown as `\\uNNNN` by `visible`, emitted or read, raw or escaped;
- a profile's `[hosts.NAME]` is held to the rules `--host ssh://...` is held to when the
  profile loads (address, user, jump), not when asyncssh first sees them;
- `--known-hosts` is read as an input (regular, bounded, non-blocking), not handed over.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.engine.profile import ProfileError, load_profile
from rtax_tui.model.events import FORMAT, decode, visible
from rtax_tui.model.recording import RecordingError, read_recording

HEADER = {
    "type": "run", "t_ns": 1, "format": FORMAT, "run_id": "r1",
    "started_at": "2026-12-05T00:00:00+00:00", "seed": 1, "argv": ["rtax"],
    "profile": {"name": "p"}, "hosts": {"local": {}},
}  # fmt: skip


def _start(**over: object) -> dict[str, object]:
    ev: dict[str, object] = {
        "type": "trial_start", "t_ns": 2, "trial": 1, "cell": "local/t0/exec",
        "host": "local", "driver": "local", "workload": "t0", "channel": "exec",
        "warmup": False, "batch": None,
    }  # fmt: skip
    ev.update(over)
    return ev


def _write(path: Path, *events: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in (HEADER, *events)))
    return path


@pytest.mark.parametrize(
    "field", ["cell", "host", "driver", "workload", "channel", "batch", "mode", "arrival"]
)
def test_a_name_with_a_newline_is_refused_with_its_line(tmp_path: Path, field: str) -> None:
    rec = _write(tmp_path / "r.jsonl", _start(**{field: "local/t0\nexec | forged"}))
    with pytest.raises(RecordingError) as exc:
        read_recording(rec)
    msg = str(exc.value)
    assert msg.startswith(f"{rec}:2: trial_start.{field}: expected a string of one line")
    assert "\n" not in msg


def test_a_phase_or_barrier_name_with_a_newline_is_refused(tmp_path: Path) -> None:
    phase = {"type": "phase", "t_ns": 3, "trial": 1, "name": "create\nready", "dur_ns": 5,
             "ok": True}  # fmt: skip
    with pytest.raises(RecordingError, match=r":3: phase.name: expected a string of one line"):
        read_recording(_write(tmp_path / "p.jsonl", _start(), phase))
    barrier = {"type": "barrier", "t_ns": 3, "batch": "b\n1", "cell": "c", "size": 1,
               "arrived": 1, "released": True, "ok": True, "deadline_s": 1}  # fmt: skip
    with pytest.raises(RecordingError, match=r":2: barrier.batch: expected a string of one"):
        read_recording(_write(tmp_path / "b.jsonl", barrier))


def test_the_report_refuses_it_in_one_line(tmp_path: Path) -> None:
    rec = _write(tmp_path / "r.jsonl", _start(cell="a\nb"))
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(rec)], capture_output=True, timeout=120
    )
    assert res.returncode != 0
    err = res.stderr.decode()
    assert err.count("\n") == 1 and f"{rec}:2: trial_start.cell" in err, err
    assert res.stdout == b""


def test_a_name_without_a_newline_still_reads(tmp_path: Path) -> None:
    """The kind refuses newlines only: a tab, a non-ASCII name, an em dash are names."""
    rec = _write(tmp_path / "r.jsonl", _start(cell="local/t0\texec — café"))
    assert read_recording(rec).events[0]["cell"] == "local/t0\texec — café"


INVISIBLE = ["\u2028", "\u2029", "\u202e", "\u202a", "\u2066", "\u2069", "\u200e", "\u200f",
             "\u061c"]  # fmt: skip


@pytest.mark.parametrize("ch", INVISIBLE)
def test_invisible_format_characters_are_shown(ch: str) -> None:
    shown = f"\\u{ord(ch):04x}"
    assert visible({"k" + ch: ["a" + ch + "b"]}) == {"k" + shown: ["a" + shown + "b"]}
    raw = json.dumps({"evidence": "x" + ch + "y"}, ensure_ascii=False).encode()
    escaped = json.dumps({"evidence": "x" + ch.upper() + "y"}).encode()  # \\uXXXX in JSON
    escaped_upper = escaped.replace(b"\\u" + f"{ord(ch):04x}".encode(),
                                    b"\\u" + f"{ord(ch):04X}".encode())  # fmt: skip
    for line in (raw, escaped, escaped_upper):
        assert decode(line) == {"evidence": "x" + shown + "y"}, line


def test_ordinary_text_is_left_alone() -> None:
    text = "café — naïve → ✓ 日本語 \u200b"  # a zero-width space moves nothing
    assert visible(text) == text
    assert decode(json.dumps({"e": text}, ensure_ascii=False).encode()) == {"e": text}


def _profile(tmp_path: Path, host: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(
        '[run]\ndrivers = ["local"]\nworkloads = ["t0"]\nhosts = ["h"]\n[hosts.h]\n' + host
    )
    return p


@pytest.mark.parametrize(
    ("body", "field", "why"),
    [
        ('address = "example"\nuser = "a\\nb"\n', "user", "not a user name"),
        ('address = "example"\nuser = "-oProxyCommand=x"\n', "user", "not a user name"),
        ('address = "-oProxyCommand=x"\n', "address", "starts with '-'"),
        ('address = "a b"\n', "address", "a space or a control character"),
        ('address = "a\\u001b]0;t\\u0007"\n', "address", "a space or a control character"),
        ('address = "example"\njump = "-oProxyCommand=x"\n', "jump", "starts with '-'"),
        ('address = "example"\njump = "u\\n@j"\n', "jump", "not a"),
    ],
)
def test_a_profile_host_is_checked_when_it_loads(
    tmp_path: Path, body: str, field: str, why: str
) -> None:
    p = _profile(tmp_path, body)
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:") and f"hosts.h.{field}:" in msg and why in msg, msg
    assert "\n" not in msg and "\x1b" not in msg


def test_a_good_profile_host_loads(tmp_path: Path) -> None:
    p = _profile(tmp_path, 'address = "::1"\nuser = "rtax.bench"\njump = "me@gw:2222"\n')
    assert load_profile(p).host_tables["h"]["user"] == "rtax.bench"


def test_known_hosts_is_read_as_an_input_not_handed_over(tmp_path: Path) -> None:
    """`--known-hosts` names a FIFO, /dev/zero or a directory: one line naming the flag,
    at once (asyncssh, given the path, would have opened it on the loop's thread when a
    server answered); a real known_hosts file becomes asyncssh's entries."""
    import os

    from rtax_tui.hosts.ssh import SSHHost, SSHTarget
    from rtax_tui.model.spec import RtaxError

    fifo = tmp_path / "kh-fifo"
    os.mkfifo(fifo)
    for bad in (str(fifo), "/dev/zero", str(tmp_path), str(tmp_path / "missing")):
        host = SSHHost(SSHTarget(name="h", address="127.0.0.1", known_hosts=bad))
        with pytest.raises(RtaxError) as exc:
            host._options()
        assert str(exc.value).startswith(f"--known-hosts {bad}: "), exc.value
        assert "\n" not in str(exc.value)
    good = tmp_path / "known_hosts"
    good.write_text(
        "[127.0.0.1]:2222 ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    kw = SSHHost(SSHTarget(name="h", address="127.0.0.1", known_hosts=str(good)))._options()
    assert type(kw["known_hosts"]).__name__ == "SSHKnownHosts"
