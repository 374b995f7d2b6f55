"""Capacity batches for real: a budget cgroup around the batch, the barrier, the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.core.cgroups import Cgroup
from rtax_tui.core.recording import read_recording

pytestmark = pytest.mark.skipif(Cgroup.version() is None, reason="no cgroups mounted")


def run(tmp_path: Path, profile: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    prof = tmp_path / "cap.toml"
    prof.write_text(profile)
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(out), *extra],
        capture_output=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr.decode()
    return res, out


def leftover_cgroups(run_id: str) -> list[str]:
    return [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/rtax/*{run_id}*")]


@pytest.mark.parametrize("driver", ["local"])
def test_capacity_batches_pass_with_the_builtin_workload(tmp_path, driver):
    _, out = run(
        tmp_path,
        f'[run]\nwarmup = 0\ndrivers = ["{driver}"]\nworkloads = ["capacity"]\n'
        "[capacity]\nsize = 8\nbatches = 2\ndeadline_s = 120\ncpus = 2.0\nmemory_mib = 2048\n",
    )
    rec = read_recording(out)
    bars = [e for e in rec.events if e["type"] == "barrier"]
    assert len(bars) == 2 and all(b["ok"] and b["arrived"] == 8 for b in bars)
    starts = [e for e in rec.events if e["type"] == "trial_start"]
    assert len(starts) == 16 and {s["batch"] for s in starts} == {b["batch"] for b in bars}
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    cap = rep["cells"][0]["capacity"]
    assert cap == {"batches": 2, "passed_batches": 2, "tasks": 16, "arrived_tasks": 16}
    assert leftover_cgroups(rec.header["run_id"]) == []


def test_a_batch_over_its_memory_budget_fails_and_keeps_its_denominator(tmp_path):
    # Four environments each hold 32 MiB for a second inside a 48 MiB budget: the OOM
    # killer ends some of them, they never arrive, and the batch does not pass.
    hold = (
        '{argv = ["python3", "-c", "import time; b = bytearray(32 << 20); '
        "b[::4096] = b'x' * len(b[::4096]); time.sleep(1); print('held')\"], "
        'expect_out = "held"}'
    )
    _, out = run(
        tmp_path,
        '[run]\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["hold"]\n'
        "[capacity]\nsize = 4\nbatches = 1\ndeadline_s = 60\nmemory_mib = 48\n"
        f"[workloads.hold]\nsteps = [{hold}]\n",
    )
    rec = read_recording(out)
    bar = next(e for e in rec.events if e["type"] == "barrier")
    assert bar["ok"] is False and bar["size"] == 4 and bar["arrived"] < 4
    assert bar["released"] == "settled"  # every environment arrived or failed: no deadline
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    assert sum(not e["valid"] for e in ends) == 4 - bar["arrived"]
    assert leftover_cgroups(rec.header["run_id"]) == []


def test_an_environment_that_never_arrives_fails_the_batch_at_the_deadline(tmp_path):
    # exactly one environment wins the atomic mkdir and hangs; the deadline releases the rest
    lock = tmp_path / "lock"
    _, out = run(
        tmp_path,
        '[run]\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["w"]\n'
        "[timeouts]\naction = 120\n"
        "[capacity]\nsize = 3\nbatches = 1\ndeadline_s = 2\ncpus = 1.0\n"
        "[workloads.w]\n"
        f'steps = [{{argv = ["sh", "-c", "mkdir {lock} && exec sleep 301; true"]}}]\n',
    )
    rec = read_recording(out)
    bar = next(e for e in rec.events if e["type"] == "barrier")
    assert bar["ok"] is False and bar["released"] == "deadline" and bar["arrived"] == 2
    assert 2e9 <= bar["release_ns"] < 10e9
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    failed = [e for e in ends if not e["ok"]]
    assert len(failed) == 1 and failed[0]["error"]["kind"] == "barrier_deadline"
    assert leftover_cgroups(rec.header["run_id"]) == []
    assert subprocess.run(["pgrep", "-f", "sleep 301"], capture_output=True).stdout == b""
