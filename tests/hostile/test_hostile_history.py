"""Red team (2026-12-06): `rtax history PROFILE` over a directory of recordings that
anyone may have filled (a recording is a file handed to a user): a file's name with a
terminal's escapes, a kernel file linked in as a recording, more runs than step detection
can take."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.analysis import trends
from tests.analysis.test_history import history, write_run

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


@pytest.mark.parametrize("reader", ["history", "report"])
def test_a_line_of_gigabytes_is_refused_before_it_is_read_whole(tmp_path, reader) -> None:
    """Red team (programs/history, left open): a recording of a header and then one line
    of 8 GiB (a sparse file: no disk used) was read whole, by `rtax history` (1 GiB: 3.2 GB
    of memory) and by `rtax report`'s chunked scan (1 GiB: 2.1 GB). A line longer than
    the longest rtax writes (recording.LINE_MAX) is an error naming the file and line."""
    from rtax_tui.model.recording import LINE_MAX

    d = tmp_path / "recordings"
    d.mkdir()
    rec = d / "20261206T000000Z-p.jsonl"
    header = {
        "type": "run", "t_ns": 1, "format": "rtax/1", "run_id": "r1",
        "started_at": "2026-12-06T00:00:00+00:00", "seed": 1, "argv": ["rtax"],
        "profile": {"name": "p"}, "hosts": {"local": {}},
    }  # fmt: skip
    with open(rec, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        f.truncate(8 << 30)  # 8 GiB of NULs after the header, sparse
    argv = ["history", "p", "--dir", str(d)] if reader == "history" else ["report", str(rec)]
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", *argv],
        capture_output=True, text=True, timeout=120,
        # the child may hold at most a few chunks and one line beyond rtax's longest
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)),
    )  # fmt: skip
    assert res.returncode != 0
    assert f"{rec}:2: a line longer than rtax reads ({LINE_MAX >> 20} MiB)" in res.stderr


def _starts(*cells: tuple[str, str, str, str, str | None, str | None]) -> list[dict]:
    """trial_start events: (cell id, driver, channel, mode, image, arrival)."""
    out = []
    for cell, driver, channel, mode, image, arrival in cells:
        ev = {"type": "trial_start", "cell": cell, "host": "local", "driver": driver,
              "workload": "t0", "channel": channel}  # fmt: skip
        for k, v in (("mode", mode), ("image", image), ("arrival", arrival)):
            if v is not None:
                ev[k] = v
        out.append(ev)
    return out


def test_a_changed_pair_never_differs_in_an_image_mode_or_arrival_pattern_too() -> None:
    """Red team 2026-12-06 (the console's compare and picker pair by `rtax compare
    --changed`'s rule): the rule compared host, driver, workload, channel and mode, not
    the image mode or the arrival pattern, both parts of a cell's id. A rerun on another
    driver with another image mode, or on another channel with a burst of 8 arrivals,
    paired as "one thing changed": a burst's queueing read as the channel's cost."""
    from rtax_tui.analysis.pairing import cell_fields, pair_fields

    a = cell_fields(_starts(("local/stage/t0/exec~pull", "stage", "exec", None, "pull", None)))
    b = cell_fields(_starts(("local/gvisor/t0/exec~cached", "gvisor", "exec", None, "cached",
                             None)))  # fmt: skip
    assert pair_fields(a, b, changed=True) == {}
    a = cell_fields(_starts(("local/stage/t0/exec@burst:8", "stage", "exec", None, None,
                             "burst:8")))  # fmt: skip
    b = cell_fields(_starts(("local/stage/t0/shell", "stage", "shell", None, None, None)))
    assert pair_fields(a, b, changed=True) == {}
    # one thing changed still pairs: the driver, the same image mode and arrivals
    a = cell_fields(_starts(("local/stage/t0/exec~pull", "stage", "exec", None, "pull", None)))
    b = cell_fields(_starts(("local/gvisor/t0/exec~pull", "gvisor", "exec", None, "pull", None)))
    assert pair_fields(a, b, changed=True) == {
        "local/stage/t0/exec~pull": "local/gvisor/t0/exec~pull"
    }
