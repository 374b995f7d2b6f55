"""Red team (2026-12-06): `rtax history PROFILE` over a directory of recordings that
anyone may have filled (a recording is a file handed to a user): a file's name with a
terminal's escapes, a kernel file linked in as a recording, more runs than step detection
can take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.analysis import trends
from tests.test_history import history, write_run

CELL = "local/local/t0/exec"


def test_a_file_name_reaches_the_terminal_as_visible_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "r.jsonl", "2026-12-01T00:00:00+00:00", {CELL: [1.0]})
    (tmp_path / "x\x1b]0;PWNED\x07\x1b[2J.jsonl").write_text("not json\n")
    code, _, err = history(capsys, "p", "--dir", str(tmp_path))
    assert code == 0 and "skipped" in err
    assert "\x1b" not in err and "\x07" not in err
    assert "x\\x1b]0;PWNED\\x07\\x1b[2J.jsonl" in err


@pytest.mark.skipif(not os.access("/proc/kmsg", os.R_OK), reason="/proc/kmsg is read by root alone")
def test_a_kernel_file_linked_in_is_empty_not_read(tmp_path: Path) -> None:
    # /proc/kmsg says 0 bytes: read, it blocked until the kernel logged a line, and
    # took that line from the system's log
    write_run(tmp_path / "r.jsonl", "2026-12-01T00:00:00+00:00", {CELL: [1.0]}, profile="p")
    (tmp_path / "k.jsonl").symlink_to("/proc/kmsg")
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "history", "p", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path}/k.jsonl: empty recording (no `run` header)" in res.stderr


def test_only_the_newest_runs_are_read_and_the_rest_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = trends.RUNS_MAX + 3
    for i in range(n):  # the names' order is not the runs' order
        write_run(tmp_path / f"r{n - i:04}.jsonl", f"2026-12-01T{i // 60:02}:{i % 60:02}:00+00:00",
                  {CELL: [1.0]})  # fmt: skip
    code, out, _ = history(capsys, "p", "--dir", str(tmp_path), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["runs"] == trends.RUNS_MAX and doc["left_out"] == 3
    starts = [r["started_at"] for r in doc["series"][0]["runs"]]
    assert starts[0] == "2026-12-01T00:03:00+00:00" and starts == sorted(starts)
    code, out, _ = history(capsys, "p", "--dir", str(tmp_path))
    assert code == 0 and f"{trends.RUNS_MAX} runs (the newest; 3 older left out)" in out
