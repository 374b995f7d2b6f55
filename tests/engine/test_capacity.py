"""Capacity batches for real: a budget cgroup around the batch, the barrier, the report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model.recording import read_recording

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


ENGINES = ("docker", "podman")


def _engine_client(name: str):
    import docker
    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts.local import LocalHost

    return docker.DockerClient(
        base_url=get_driver(name, LocalHost(), {}).socket, version="auto", timeout=30
    )


def _labelled(client, run_id: str) -> list[str]:
    found = client.containers.list(all=True, filters={"label": f"rtax.run={run_id}"})
    return [c.name for c in found]


class Watcher:
    """Polls, during a run, the engine and the cgroup tree for the containers of its
    capacity batches: `seen` maps each container the engine listed to its
    HostConfig.CgroupParent; `placed` maps each container id whose cgroup (a directory
    named after the id) held processes under a budget cgroup (in the memory hierarchy
    on v1) to that budget's name."""

    def __init__(self, client, out: Path) -> None:
        self.client, self.out = client, out
        self.seen: dict[str, str] = {}
        self.placed: dict[str, str] = {}
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._engine, daemon=True),
            threading.Thread(target=self._cgroups, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _run_id(self) -> str | None:
        try:
            with open(self.out) as f:
                return json.loads(f.readline())["run_id"]
        except (OSError, ValueError, KeyError):
            return None

    def _engine(self) -> None:
        while not self.stop.is_set():
            run_id = self._run_id()
            try:
                found = self.client.api.containers(filters={"label": f"rtax.run={run_id}"})
            except Exception:
                found = []
            for c in found if run_id else ():
                if c["Id"] not in self.seen:
                    try:
                        info = self.client.api.inspect_container(c["Id"])
                    except Exception:
                        continue
                    self.seen[c["Id"]] = info["HostConfig"].get("CgroupParent") or ""
            time.sleep(0.02)

    def _cgroups(self) -> None:
        base = Path("/sys/fs/cgroup/memory" if Cgroup.version() == "v1" else "/sys/fs/cgroup")
        while not self.stop.is_set():
            run_id = self._run_id()
            for budget in base.glob(f"rtax/batch-{run_id}-*") if run_id else ():
                try:
                    subs = list(budget.iterdir())
                except OSError:
                    continue
                for d in subs:
                    m = re.search(r"[0-9a-f]{64}", d.name)
                    if not m or m[0] in self.placed:
                        continue
                    try:
                        if (d / "cgroup.procs").read_text().split():
                            self.placed[m[0]] = budget.name
                    except OSError:
                        pass
            time.sleep(0.005)

    def finish(self) -> tuple[dict[str, str], dict[str, str]]:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        return self.seen, self.placed


@pytest.mark.parametrize("driver", ["local", "stage", *ENGINES])
def test_capacity_batches_pass_with_the_builtin_workload(tmp_path, driver, request):
    client = watcher = None
    if driver in ENGINES:
        request.getfixturevalue(f"{driver}_engine")  # conftest: the engine and its images
        client = _engine_client(driver)
        watcher = Watcher(client, tmp_path / "r.jsonl")
    try:
        _, out = run(
            tmp_path,
            f'[run]\nwarmup = 0\ndrivers = ["{driver}"]\nworkloads = ["capacity"]\n'
            "[capacity]\nsize = 8\nbatches = 2\ndeadline_s = 120\ncpus = 2.0\nmemory_mib = 2048\n",
        )
    finally:
        seen, placed = watcher.finish() if watcher else ({}, {})
    rec = read_recording(out)
    bars = [e for e in rec.events if e["type"] == "barrier"]
    assert len(bars) == 2 and all(b["ok"] and b["arrived"] == 8 for b in bars)
    starts = [e for e in rec.events if e["type"] == "trial_start"]
    assert len(starts) == 16 and {s["batch"] for s in starts} == {b["batch"] for b in bars}
    # what the console's barrier view needs before the batch ends
    assert {(s["batch_size"], s["deadline_s"]) for s in starts} == {(8, 120)}
    assert all(s["steps"] >= 1 for s in starts)
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    cap = rep["cells"][0]["capacity"]
    assert {k: cap[k] for k in ("batches", "passed_batches", "tasks", "arrived_tasks")} == {
        "batches": 2,
        "passed_batches": 2,
        "tasks": 16,
        "arrived_tasks": 16,
    }
    [point] = cap["sizes"]
    assert (point["size"], point["passed"], point["arrived"], point["oom_kills"]) == (8, 2, 16, 0)
    assert point["mem_peak_bytes"] >= 8 * (32 << 20)  # every environment held its 32 MiB
    assert cap["largest_passing_size"] == 8
    run_id = rec.header["run_id"]
    assert leftover_cgroups(run_id) == []
    if client is not None:
        try:
            assert _labelled(client, run_id) == []
        finally:
            client.close()
        # The engine was given each batch's budget cgroup as the parent, and every one of
        # the 16 containers ran (had processes) in a cgroup under its batch's budget.
        budgets = {f"batch-{run_id}-{b['batch']}" for b in bars}
        assert seen and {p for p in seen.values()} == {f"/rtax/{b}" for b in budgets}, seen
        assert len(placed) == 16 and set(placed.values()) == budgets, placed
        assert all(placed.get(cid) == parent.rsplit("/", 1)[1] for cid, parent in seen.items())


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
    # the OOM killer's victims fail as such; their neighbours went on and arrived
    assert bar["oom_kills"] >= 4 - bar["arrived"] >= 1
    assert {e["error"]["kind"] for e in ends if not e["ok"]} == {"oom"}
    assert bar["mem_peak_bytes"] >= 40 << 20  # the budget filled up before the kills
    assert leftover_cgroups(rec.header["run_id"]) == []


def _capacity_run(tmp_path: Path, driver: str, channel: str, cap: str):
    _, out = run(
        tmp_path,
        f'[run]\nwarmup = 0\ndrivers = ["{driver}"]\nworkloads = ["capacity"]\n'
        f'channels = ["{channel}"]\n[capacity]\nbatches = 1\ndeadline_s = 120\n{cap}',
    )
    rec = read_recording(out)
    return rec, next(e for e in rec.events if e["type"] == "barrier")


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_held_memory_stays_until_the_release_and_the_peak_covers_it(tmp_path, channel):
    # Four stage environments hold 64 MiB each: the budget's peak shows them all held at
    # once (three holders and every process's own overhead stay well below 4 x 64 MiB),
    # and each let go through its channel after the release.
    rec, bar = _capacity_run(
        tmp_path, "stage", channel, "size = 4\ntouch_mib = 64\ncpus = 2.0\nmemory_mib = 1024\n"
    )
    assert bar["ok"] and bar["arrived"] == 4 and bar["oom_kills"] == 0
    assert bar["mem_peak_bytes"] >= 4 * (64 << 20)
    assert bar["cpu_ns"] > 0
    releases = [e for e in rec.events if e["type"] == "phase" and e["name"] == "barrier.release"]
    assert len(releases) == 4 and all(e["ok"] for e in releases)
    # timed from the release decision until the last one let go: covers every release step
    assert max(e["dur_ns"] for e in releases) <= bar["release_dur_ns"] < 30e9
    assert all(e["ok"] and e["valid"] for e in rec.events if e["type"] == "trial_end")
    assert leftover_cgroups(rec.header["run_id"]) == []


def test_a_batch_holding_more_than_its_budget_fails_with_oom_and_one_within_it_passes(tmp_path):
    # 4 x 64 MiB held cannot fit in 160 MiB: some environments are OOM-killed (kind oom),
    # the others go on and arrive; the batch fails. The same batch within 1 GiB passes.
    # The kernel kills the biggest process of the budget: a holder still filling its memory
    # when the budget is full (it never arrives: the barrier releases as `settled`), or,
    # when the environments started further apart, one that already holds its 64 MiB at
    # the barrier (every one arrived: `all_arrived`; it fails at its release, having lost
    # what it held). Both happen on the same machine, from one run to the next.
    (tmp_path / "over").mkdir()
    rec, bar = _capacity_run(
        tmp_path / "over",
        "stage",
        "exec",
        "size = 4\ntouch_mib = 64\ncpus = 2.0\nmemory_mib = 160\n",
    )
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    failed = [e for e in ends if not e["ok"]]
    assert failed and {e["error"]["kind"] for e in failed} == {"oom"}
    where = {e["error"]["phase"] for e in failed}
    assert where <= {"action", "barrier.release"}, where
    assert bar["ok"] is False
    assert bar["released"] == ("settled" if "action" in where else "all_arrived"), (bar, where)
    assert 1 <= bar["arrived"] == 4 - len(failed) and bar["oom_kills"] >= len(failed)
    assert bar["mem_peak_bytes"] <= 160 << 20
    assert leftover_cgroups(rec.header["run_id"]) == []
    (tmp_path / "within").mkdir()
    rec, bar = _capacity_run(
        tmp_path / "within",
        "stage",
        "exec",
        "size = 4\ntouch_mib = 64\ncpus = 2.0\nmemory_mib = 1024\n",
    )
    assert bar["ok"] and bar["arrived"] == 4 and bar["oom_kills"] == 0


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


def test_a_capacity_curve_finds_the_largest_passing_size(tmp_path):
    # 64 MiB held per environment in a 200 MiB budget: 2 fit, 4 do not. `--sizes`
    # replaces the profile's `size`; the report gives pVisor's table per size.
    prof = (
        '[run]\nwarmup = 0\ndrivers = ["stage"]\nworkloads = ["capacity"]\n'
        "[capacity]\nsize = 8\nbatches = 2\ndeadline_s = 120\ntouch_mib = 64\n"
        "cpus = 2.0\nmemory_mib = 200\n"
    )
    _, out = run(tmp_path, prof, "--sizes", "2,4")
    rec = read_recording(out)
    bars = [e for e in rec.events if e["type"] == "barrier"]
    assert sorted(b["size"] for b in bars) == [2, 2, 4, 4]
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    cap = rep["cells"][0]["capacity"]
    small, large = cap["sizes"]
    assert (small["size"], small["batches"], small["passed"], small["tasks"]) == (2, 2, 2, 4)
    assert small["arrived"] == 4 and small["oom_kills"] == 0
    assert small["mem_peak_bytes"] >= 2 * (64 << 20)
    assert (large["size"], large["batches"], large["passed"], large["tasks"]) == (4, 2, 0, 8)
    assert large["arrived"] < 8 and large["oom_kills"] >= 2
    assert cap["largest_passing_size"] == 2
    md = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "markdown"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert "| local/stage/capacity/exec | 2 | 2/2 | 4/4 |" in md
    assert f"|  | 4 | 0/2 | {large['arrived']}/8 |" in md
    assert leftover_cgroups(rec.header["run_id"]) == []


@pytest.mark.parametrize("driver", ["microvm", "libvirt"])
def test_a_vm_batch_runs_inside_its_budget(tmp_path, driver, request):
    # The budget cgroup holds nothing but the batch's QEMU processes: its peak memory
    # and CPU time are the guests', the 32 MiB each guest holds included.
    request.getfixturevalue("vm_guest")
    if driver == "libvirt":
        request.getfixturevalue("libvirtd")
    _, out = run(
        tmp_path,
        f'[run]\nwarmup = 0\ndrivers = ["{driver}"]\nworkloads = ["capacity"]\n'
        # create too: libvirtd starting two TCG domains at once took over 60 s here
        "[timeouts]\ncreate = 300\nready = 300\naction = 300\n"
        "[capacity]\nsize = 2\nbatches = 1\ndeadline_s = 600\ncpus = 2.0\nmemory_mib = 2048\n"
        f'[drivers_options.{driver}]\naccel = "tcg"\nmemory_mib = 256\n',
    )
    rec = read_recording(out)
    bar = next(e for e in rec.events if e["type"] == "barrier")
    why = [e["error"] for e in rec.events if e["type"] == "trial_end" and e.get("error")]
    assert bar["ok"] and bar["arrived"] == 2 and bar["oom_kills"] == 0, (bar, why)
    assert bar["mem_peak_bytes"] >= 2 * (32 << 20) + (64 << 20)
    assert bar["cpu_ns"] >= 1e9  # booting two guests under TCG: seconds of CPU
    releases = [e for e in rec.events if e["type"] == "phase" and e["name"] == "barrier.release"]
    assert len(releases) == 2 and all(e["ok"] for e in releases)
    assert leftover_cgroups(rec.header["run_id"]) == []
