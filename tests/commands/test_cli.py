"""The command line for real: runs, streams, reports, errors, Ctrl-C and kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from rtax_tui.model.recording import read_recording

ROOT = Path(__file__).resolve().parents[2]


def rtax(
    *args: str, cwd: Path | None = None, timeout: float = 300, **kw
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        cwd=cwd,
        timeout=timeout,
        **kw,
    )


def custom_profile(tmp_path: Path, steps: str, trials: int = 5, extra: str = "") -> Path:
    p = tmp_path / "p.toml"
    p.write_text(
        f'[run]\ntrials = {trials}\nwarmup = 1\ndrivers = ["local"]\nworkloads = ["w"]\n'
        f'channels = ["exec", "shell"]\n{extra}\n[workloads.w]\nsteps = [{steps}]\n'
    )
    return p


def test_run_writes_recording_and_report(tmp_path):
    prof = custom_profile(tmp_path, '{argv = ["echo", "hi"], expect_out = "hi"}')
    out = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(out), "--seed", "5")
    assert res.returncode == 0, res.stderr
    assert f"recording: {out}" in res.stderr.decode()
    assert "local/local/w/exec" in res.stdout.decode()
    rec = read_recording(out)
    assert rec.header["seed"] == 5 and rec.header["profile"]["trials"] == 5
    assert rec.header["hosts"]["local"]["cpus"] == os.cpu_count()
    assert rec.end == {**rec.end, "status": "completed", "trials": 12}
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    assert rep["format"] == "rtax-report/1"
    cells = {c["cell"]: c for c in rep["cells"]}
    assert set(cells) == {"local/local/w/exec", "local/local/w/shell"}
    for c in cells.values():
        assert c["n"] == 5 and c["failed"] == 0 and c["invalid"] == 0
        for ph in ("create", "ready", "action", "teardown", "orchestration", "total"):
            assert c["phases"][ph]["n"] == 5 and c["phases"][ph]["p50_ms"] > 0
    # the report's P50 is recomputed from the raw recording, a second way
    import numpy as np

    exec_trials = {
        e["trial"]
        for e in rec.events
        if e["type"] == "trial_start" and e["channel"] == "exec" and not e["warmup"]
    }
    creates = [
        e["dur_ns"]
        for e in rec.events
        if e["type"] == "phase" and e["name"] == "create" and e["trial"] in exec_trials
    ]
    assert cells["local/local/w/exec"]["phases"]["create"]["p50_ms"] == pytest.approx(
        float(np.median(creates)) / 1e6
    )
    for fmt, needle in (("markdown", "| local/local/w/shell |"), ("csv", "local/local/w/exec,")):
        res = rtax("report", str(out), "--format", fmt)
        assert res.returncode == 0 and needle in res.stdout.decode()


def test_stream_to_stdout_is_line_by_line_events(tmp_path):
    prof = custom_profile(tmp_path, '{argv = ["true"]}', trials=3)
    res = rtax("run", str(prof), "-o", "-")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    events = [orjson.loads(x) for x in lines]
    assert events[0]["type"] == "run" and events[-1]["type"] == "run_end"
    assert sum(e["type"] == "trial_end" for e in events) == 8
    assert "local/local/w/exec" in res.stderr.decode()  # the report goes to stderr


def test_compare_and_project(tmp_path):
    prof = custom_profile(tmp_path, '{argv = ["true"]}', trials=5)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert rtax("run", str(prof), "-o", str(a)).returncode == 0
    assert rtax("run", str(prof), "-o", str(b), "--seed", "2").returncode == 0
    cmp = json.loads(rtax("compare", str(a), str(b), "--format", "json").stdout)
    assert {r["cell"] for r in cmp["rows"]} == {"local/local/w/exec", "local/local/w/shell"}
    proj = json.loads(
        rtax(
            "project", str(a), "--trajectories", "1000000", "--steps", "150", "--format", "json"
        ).stdout
    )
    cell = proj["cells"][0]
    inp = cell["inputs"]
    expect = (
        1e6
        * (
            inp["create"]["p50_s"]
            + inp["ready"]["p50_s"]
            + inp["teardown"]["p50_s"]
            + 150 * inp["action"]["p50_s"]
        )
        / 3600
    )
    assert cell["worker_hours"] == pytest.approx(expect, rel=1e-6)
    assert "worker-h" in rtax("project", str(a)).stdout.decode()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "PROFILE", "--driver", "nope"], "command line: drivers: unknown 'nope'"),
        (["run", "PROFILE", "--workload", "t7"], "command line: workloads: unknown 't7'"),
        (["run", "PROFILE", "--channel", "pipe"], "command line: channels: unknown 'pipe'"),
        (["run", "missing.toml"], "missing.toml: cannot open profile"),
        (["report", "BADREC"], "bad.jsonl:2: not JSON"),
        (["run", "PROFILE", "-o", "BADREC"], "bad.jsonl: already exists; rtax never overwrites"),
        (["run", "PROFILE", "-o", "/proc/x.jsonl"], "/proc/x.jsonl: cannot write the recording"),
    ],
)
def test_errors_are_one_line_exit_2(tmp_path, args, needle):
    prof = custom_profile(tmp_path, '{argv = ["true"]}')
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type":"run","t_ns":0,"format":"rtax/1","run_id":"r","started_at":"x",'
        '"seed":1,"argv":[],"profile":{},"hosts":{}}\nnope\n{}\n'
    )
    args = [str(prof) if a == "PROFILE" else str(bad) if a == "BADREC" else a for a in args]
    res = rtax(*args, cwd=tmp_path)
    err = res.stderr.decode().strip()
    assert res.returncode == 2, err
    assert needle in err and len(err.splitlines()) == 1
    assert not list(tmp_path.glob("recordings/*.jsonl"))  # nothing half-made


def _wait_for_trials(path: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b'"trial_end"') >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} trials in {path}")


def _leftovers(marker: str) -> str:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout


@pytest.mark.parametrize("channel", ["exec", "shell"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupt_keeps_finished_trials_and_leaves_nothing(tmp_path, sig, channel):
    # Trials are quick until FLAG exists; then the next action hangs in `sleep`, and the
    # signal arrives while that process runs. Enough trials that the run cannot end first
    # (500 local trials once ended before a loaded test process touched FLAG).
    flag = tmp_path / "FLAG"
    marker = f"sleep 60.{os.getpid()}{sig.value}{len(channel)}"
    step = f"[ -e {flag} ] && exec {marker}; true"
    prof = custom_profile(tmp_path, f'{{argv = ["sh", "-c", "{step}"]}}', trials=50_000)
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(out), "--channel", channel],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _wait_for_trials(out, 5)
    flag.touch()
    deadline = time.monotonic() + 30
    while not _leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(marker), "the hanging action never started"
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    rec = read_recording(out)
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    starts = [e for e in rec.events if e["type"] == "trial_start"]
    assert len(ends) >= 5 and all(e["ok"] for e in ends[:5])
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert rec.end["status"] == "interrupted" and rec.end["trials"] == len(ends)
        assert len(starts) == len(ends)
        assert ends[-1]["error"]["kind"] == "interrupted"
    else:
        assert proc.returncode == -signal.SIGKILL
        assert rec.end is None and len(starts) == len(ends) + 1
        rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
        measured = len([s for s in starts if not s["warmup"]])
        assert sum(c["n"] for c in rep["cells"]) == measured
        assert sum(c["failed"] for c in rep["cells"]) == 1  # the trial cut short
    deadline = time.monotonic() + 10
    while _leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(marker) == ""
    while (
        list(Path("/tmp").glob(f"rtax-ws-{rec.header['run_id']}-*")) and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert list(Path("/tmp").glob(f"rtax-ws-{rec.header['run_id']}-*")) == []


def test_cleanup_of_one_run_leaves_other_runs_alone():
    from rtax_tui.hosts.cgroups import Cgroup

    if Cgroup.version() is None:
        pytest.skip("no cgroups mounted")
    mine = Cgroup.create(f"batch-clean{os.getpid()}a-b1", cpus=1, memory_mib=64)
    other = Cgroup.create(f"batch-clean{os.getpid()}b-b1", cpus=1, memory_mib=64)
    try:
        res = rtax("cleanup", "--run", f"clean{os.getpid()}a")
        assert res.returncode == 0, res.stderr
        assert not mine.exists() and other.exists()
    finally:
        other.remove()
        if mine.exists():
            mine.remove()


# -- limits: given by default, recorded, reported; "unlimited" only when said --------


def test_limits_default_and_unlimited_in_header_and_report(tmp_path):
    from rtax_tui.hosts.cgroups import Cgroup

    if os.geteuid() != 0 or Cgroup.version() is None:
        pytest.skip("stage needs root and cgroups")
    prof = tmp_path / "p.toml"
    body = (
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["stage"]\nworkloads = ["w"]\n'
        'channels = ["exec"]\n{extra}\n[workloads.w]\nsteps = [{{argv = ["true"]}}]\n'
    )
    for extra, want_pids in (("", 1024), ('[limits]\npids = "unlimited"\n', "unlimited")):
        prof.write_text(body.format(extra=extra))
        out = tmp_path / f"r-{want_pids}.jsonl"
        res = rtax("run", str(prof), "--headless", "-o", str(out))
        assert res.returncode == 0, res.stderr
        limits = read_recording(out).header["limits"]
        assert limits == {"cpus": 1.0, "memory_mib": 4096, "pids": want_pids, "workspace_mib": 2048}
        rep = rtax("report", str(out))
        text = rep.stdout.decode()
        assert f"pids {want_pids}" in text
        assert ("warning: unlimited pids" in text) == (want_pids == "unlimited"), text
        assert "local/stage: cpus, memory_mib, pids: the environment's cgroup" in text
        rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
        assert rep["run"]["limits"] == limits


@pytest.mark.parametrize(
    "line, needle",
    [
        ("pids = -1", "limits.pids: must be at least 1"),
        ("pids = 0", "limits.pids: must be at least 1"),
        ('memory_mib = "lots"', "limits.memory_mib: expected a positive integer or"),
        ("pids = 2.5", "limits.pids: expected a positive integer or"),
        ("memory_mib = 9223372036854775808", "limits.memory_mib: at most"),
    ],
)
def test_bad_limits_exit_2_with_one_line(tmp_path, line, needle):
    prof = custom_profile(tmp_path, '{argv = ["true"]}', extra=f"[limits]\n{line}\n")
    res = rtax("run", str(prof), "--headless", cwd=tmp_path)
    err = res.stderr.decode().strip()
    assert res.returncode == 2, err
    assert f"p.toml:8: {needle}" in err and len(err.splitlines()) == 1, err


def test_images_build_reads_what_each_driver_declares(capsys):
    """`rtax images build --driver` knows the drivers' images from their declarations
    (`Driver.image_recipe`): both VM drivers share one image, a driver that starts from
    no image is skipped with a word, an unknown name is one line and exit 2."""
    from rtax_tui.drivers.registry import daemon_of, image_recipes

    from rtax_tui.commands.cli import main

    recipes = image_recipes()
    assert recipes["libvirt"] == recipes["microvm"] == recipes["vm"]
    assert recipes["docker"].kind == "docker" and recipes["podman"].kind == "podman"
    assert "stage" not in recipes and "local" not in recipes
    assert daemon_of("docker").start == "bash scripts/start-dockerd"
    assert daemon_of("vm").name == "libvirtd" and daemon_of("stage") is None

    assert main(["images", "build", "--driver", "stage", "--driver", "local"]) == 0
    err = capsys.readouterr().err
    assert "stage: starts from no image" in err and "local: starts from no image" in err

    assert main(["images", "build", "--driver", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0] and "microvm" in err[0], err


def test_doctor_rows_carry_what_each_driver_declares():
    """`rtax doctor --format json` rows say each driver's image and daemon, from the
    driver's own declaration."""
    from rtax_tui.commands.doctor import _declared

    assert _declared("libvirt") == ("vm", "bash scripts/start-libvirtd")
    assert _declared("podman") == ("podman", "bash scripts/start-podman")
    assert _declared("stage") == (None, None)
    assert _declared("nope") == (None, None)
