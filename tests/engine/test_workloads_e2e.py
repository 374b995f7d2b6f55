"""The built-in workloads through the engine on both drivers, for real.

T2 is valid only when attrs' pinned tests fail before the patch and pass after it,
so a valid T2 trial on a driver proves the whole clone-inspect-patch-test cycle
ran inside that driver's environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.model.recording import read_recording


def run_and_report(tmp_path: Path, *args: str) -> tuple[dict, dict]:
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", *args, "-o", str(out)],
        capture_output=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr.decode()
    rep = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
        capture_output=True,
        check=True,
    )
    return json.loads(rep.stdout), read_recording(out).__dict__


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_t0_t1_t2_valid_on_local_and_stage(tmp_path, channel):
    rep, rec = run_and_report(
        tmp_path,
        "t0",
        "--driver",
        "local,stage",
        "--workload",
        "t0,t1,t2",
        "--channel",
        channel,
        "--trials",
        "2",
        "--warmup",
        "0",
    )
    cells = {(c["driver"], c["workload"]): c for c in rep["cells"]}
    assert set(cells) == {(d, w) for d in ("local", "stage") for w in ("t0", "t1", "t2")}
    for key, c in cells.items():
        assert (c["n"], c["failed"], c["invalid"]) == (2, 0, 0), (key, c["errors"])
        assert c["phases"]["action"]["n"] >= 2
    # T2 ran its tests twice per trial: the run before the patch returned non-zero
    t2_trials = {
        e["trial"] for e in rec["events"] if e["type"] == "trial_start" and e["workload"] == "t2"
    }
    rcs = [e["rc"] for e in rec["events"] if e["type"] == "action" and e["trial"] in t2_trials]
    assert any(rc != 0 for rc in rcs) and rcs[-1] == 0


def test_a_patch_that_does_not_fix_makes_t2_invalid_not_failed(tmp_path):
    # A copy of the prepared assets whose "fix" only adds a file: every step runs and
    # returns (the trial is ok) but the tests still fail after it (the trial is invalid).
    import os
    import shutil

    from rtax_tui.drivers.toolkit import assets

    real = assets.prepare()
    cache = tmp_path / "cache"
    shutil.copytree(real.root, cache / real.root.name, symlinks=True)
    (cache / real.root.name / real.patch.name).write_text(
        "diff --git a/NOTE b/NOTE\nnew file mode 100644\n--- /dev/null\n+++ b/NOTE\n"
        "@@ -0,0 +1 @@\n+not a fix\n"
    )
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtax_tui",
            "run",
            "t2",
            "--driver",
            "local",
            "--trials",
            "1",
            "--warmup",
            "0",
            "-o",
            str(out),
        ],
        capture_output=True,
        timeout=300,
        env={**os.environ, "RTAX_CACHE": str(cache)},
    )
    assert res.returncode == 0, res.stderr.decode()
    events = read_recording(out).events
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 1 and ends[0]["ok"] is True and ends[0]["valid"] is False
    acts = [e for e in events if e["type"] == "action"]
    assert acts[-2]["ok"] is True  # the "patch" applied
    assert acts[-1]["rc"] != 0 and acts[-1]["ok"] is False  # the tests still fail


def test_trajectory_10_on_both_drivers_shell(tmp_path):
    rep, _ = run_and_report(
        tmp_path,
        "trajectory",
        "--driver",
        "local,stage",
        "--workload",
        "trajectory-10",
        "--channel",
        "shell",
        "--trials",
        "1",
        "--warmup",
        "0",
    )
    for c in rep["cells"]:
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), c["errors"]
        assert c["phases"]["action"]["n"] == 10
