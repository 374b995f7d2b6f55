"""The red team on the noise sampler (issue 38; docs/boundaries.md, "Red team: the noise
sampler (2026-12-06)"): code inside an environment that wants its cell to read steady,
another's unstable, or the machine blamed; recordings crafted to hang or mislead the
report; the sampler's switch.

Each test failed on the code as it was and names the rule that now holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from rtax_tui.analysis import noise_report
from rtax_tui.analysis.report import report_file
from rtax_tui.hosts.noise import Snapshot, sample
from tests.hosts.test_noise import _noise, _recording


def test_each_sample_is_read_once_however_many_cells_the_host_has(tmp_path, monkeypatch):
    """A recording of many cells and a long run's samples (a day is 86,400; a crafted
    one holds a million): `rtax report` read every sample once per kind per cell, cells x
    samples in Python (100,000 samples, 10 cells: 11 s; a million and 100 cells: an hour,
    twice for `compare`). Each sample's figures are now read once per host."""
    calls = {"n": 0}

    def counted(f: Callable[[Mapping[str, Any]], float | None]) -> Callable[..., float | None]:
        def g(s: Mapping[str, Any]) -> float | None:
            calls["n"] += 1
            return f(s)

        return g

    monkeypatch.setattr(
        noise_report,
        "REASONS",
        tuple((kind, counted(fig), words) for kind, fig, words in noise_report.REASONS),
    )
    cells = {f"local/local/w{i}/exec": [10_000_000] * 12 for i in range(8)}
    samples = 300
    noise = [_noise(1 + i * 0.01, dur_ns=10_000_000) for i in range(samples)]
    noise[5] = _noise(1.05, dur_ns=10_000_000, other=0.9)  # the first cell's trials
    noise[6] = _noise(1.06, dur_ns=10_000_000, other=0.9)
    path = tmp_path / "r.jsonl"
    path.write_bytes(_recording(cells, noise))
    rep = report_file(path)
    assert calls["n"] == len(noise_report.REASONS) * samples
    # and the matching is the same: the first cell touched, the others not
    got = {c["cell"]: c["noise"] for c in rep["cells"]}
    assert got["local/local/w0/exec"]["kinds"] == {"other_cpu": 0.25}  # 3 of its 12 trials
    assert not any(got[f"local/local/w{i}/exec"]["unstable"] for i in range(1, 8))


# a process whose children no one reaps (SIGCHLD ignored: the kernel reaps them at exit,
# and their CPU time is added to no parent's); each burns BURN_S of CPU, one after another
AUTOREAP = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
sys.stdin.readline()
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < float(sys.argv[2]):
            pass
        os._exit(0)
    while True:  # the child gone (reaped by the kernel), then the next
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        time.sleep(0.01)
print("done", flush=True)
sys.stdin.readline()
"""


def _ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    f = stat[stat.rfind(b")") + 2 :].split()
    return int(f[11]) + int(f[12])


def test_an_environments_unreaped_children_are_its_own_cpu_not_other_processes():
    """An environment that ignores SIGCHLD and does its work in short children: the
    kernel reaps them and adds their CPU time to no parent, so a count of rtax's tree
    (the sampler's `own`) lost it and the sample blamed it on "other processes", its
    cell (or, timed, another's) "may be unstable" at the environment's will. Other
    processes' CPU is now what processes outside rtax's tree were seen to use, and a
    busy loop outside the tree is still theirs."""
    env = subprocess.Popen(
        [sys.executable, "-c", AUTOREAP, "4", "0.25"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert env.stdin is not None and env.stdout is not None
        time.sleep(0.3)
        hog0 = _ticks(hog.pid)
        prev = Snapshot(env.pid)  # the environment as rtax's tree; the hog outside it
        env.stdin.write("go\n")
        env.stdin.flush()
        assert env.stdout.readline() == "done\n"
        cur = Snapshot(env.pid)
        hogged = _ticks(hog.pid) - hog0
    finally:
        hog.kill()
        hog.wait()
        env.kill()
        env.wait()
    tck = os.sysconf("SC_CLK_TCK")
    burned = int(4 * 0.25 * tck)
    assert prev.cpu is not None and cur.cpu is not None
    total = cur.cpu[2] - prev.cpu[2]
    got = sample(prev, cur)
    # the children's CPU is the tree's; the hog's is others' (the machine is shared:
    # others' may add to either side, never take from it)
    assert got["own"] * total >= 0.8 * burned, (got, total, burned)
    assert got["other"] * total >= 0.8 * hogged, (got, total, hogged)


@pytest.mark.parametrize("value", ["off", "false", "NO", " 0 "])
def test_rtax_noise_off_in_any_of_its_spellings_leaves_the_sampler_out(tmp_path, value):
    """`RTAX_NOISE=off` (or false, no, " 0 ") left the sampler on: only "0" was read,
    while `RTAX_SUBREAPER` takes them all. One reading for every switch now."""
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 2\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["w"]\n'
        'channels = ["exec"]\n[workloads.w]\nsteps = [{argv = ["sleep", "1.3"]}]\n'
    )
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "RTAX_NOISE": value},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    types = [orjson.loads(line)["type"] for line in out.read_bytes().splitlines()]
    assert types.count("trial_end") == 2  # the run ran, 2.6 s of it
    assert "noise" not in types


def test_a_huge_figure_is_averaged_without_overflow(tmp_path):
    """Figures of 1e308 (finite: the format takes them) overflowed numpy's mean: a
    RuntimeWarning on stderr and "CPU at inf C" in the report."""
    cells = {"local/local/w/exec": [100_000_000] * 20}
    noise = [_noise(s, temp_c=1e308, psi_memory=1e308) for s in (2.0, 3.0)]
    path = tmp_path / "r.jsonl"
    path.write_bytes(_recording(cells, noise))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = report_file(path)
    (cell,) = rep["cells"]
    assert set(cell["noise"]["kinds"]) == {"heat", "memory"}
    assert not any("inf" in r for r in cell["noise"]["reasons"]), cell["noise"]["reasons"]
