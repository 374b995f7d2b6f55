"""Runs across a real local Ray cluster (engine/raynodes.py): a head and 2 worker nodes on
this machine, on loopback, 1 CPU and 80 MB of object store each. `rtax run` joins it as
`--host ray:auto` (RAY_ADDRESS), one host per node; each node's actor runs the trials
there. The node-killing test goes last: it leaves the cluster one node short.

A backend test (tests/tiers.py: BACKEND_FILES): about 2.5 minutes here, the cluster's
start (~20 s) included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from leftovers import leftovers, processes

from rtax_tui.engine.plan import build_plan, make_cells

ray = pytest.importorskip("ray", reason="the extra rtax[ray] is not installed")
from ray.cluster_utils import Cluster  # noqa: E402

NODE = {"num_cpus": 1, "object_store_memory": 80 << 20, "node_ip_address": "127.0.0.1"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Ray's temp dir of its own (RAY_TMPDIR: sessions, logs, sockets, the current-cluster
    # file, which Ray writes to the default /tmp/ray even with a node's temp_dir, and
    # fails where /tmp/ray does not exist); short, for the sockets' path limit; removed
    # after. rtax joins the cluster by RAY_ADDRESS.
    tmp = tempfile.mkdtemp(prefix="rtax-ray-")
    os.mkdir(os.path.join(tmp, "ray"))
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp
    try:
        c = Cluster(initialize_head=True, head_node_args=dict(NODE, include_dashboard=False))
        try:
            c.add_node(**NODE)
            c.add_node(**NODE)
            c.wait_for_nodes()
            yield c
        finally:
            c.shutdown()
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        for _ in range(50):  # a process of the cluster may still write a log as it ends
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.exists(tmp):
                break
            time.sleep(0.1)


def _rtax(cluster: Cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="400", RAY_ADDRESS=cluster.address, RTAX_NOISE="0")
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _node_ids(cluster: Cluster) -> set[str]:
    nodes = [cluster.head_node, *cluster.worker_nodes]
    return {n.node_id for n in nodes}


def _engines_left() -> list[str]:
    """Node engines, and reapers started by one (a Ray worker's environment: RAY_*)."""
    left = processes("ray::NodeEngine")
    for name in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            if b"rtax_tui.hosts.reaper" in cmd and b"\0RAY_RAYLET_PID=" in (
                b"\0" + Path(f"/proc/{name}/environ").read_bytes()
            ):
                left.append(f"{name}: the reaper of a node engine")
        except OSError:
            continue
    return left


def _left_after(wait_s: float, *naps: str) -> list[str]:
    """What is still running after up to `wait_s`: the node engines (and their reapers)
    and processes whose command line holds one of `naps`. Ray ends an actor's process
    after `ray.kill` returns, so a controller that has exited may leave its engines a
    moment more; they must be gone within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        left = _engines_left() + [p for nap in naps for p in processes(nap)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def test_t0_runs_on_every_node_each_with_its_clock(cluster, tmp_path):
    rec = tmp_path / "t0.jsonl"
    res = _rtax(
        cluster, "run", "t0", "--host", "ray:auto", "--driver", "stage", "--trials", "2",
        "--warmup", "1", "--concurrency", "3", "--headless", "-o", str(rec),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    evs = _events(rec)
    head = evs[0]
    hosts = head["hosts"]
    assert len(hosts) == 3, hosts
    assert {h["ray"]["node_id"] for h in hosts.values()} == _node_ids(cluster)
    for name, facts in hosts.items():
        assert name == "ray-" + facts["ray"]["node_id"][:8]
        assert facts["drivers"]["stage"]["integrity"], facts  # answered on the node
    # each node's clock: synchronised at the start and at the end, recorded
    clocks = Counter(e["host"] for e in evs if e["type"] == "clock")
    assert set(clocks) == set(hosts) and min(clocks.values()) >= 2, clocks
    # the recording against the plan: every planned trial, its cell, warm-up and order
    prof = head["profile"]
    cells = make_cells(tuple(hosts), ("stage",), ("t0",), tuple(prof["channels"]))
    plan = build_plan(cells, 2, 1, head["seed"])
    starts = {e["trial"]: e for e in evs if e["type"] == "trial_start"}
    assert sorted(starts) == [pt.id for pt in plan]
    for pt in plan:
        assert (starts[pt.id]["cell"], starts[pt.id]["warmup"]) == (pt.cell.id, pt.warmup)
    ends = [e for e in evs if e["type"] == "trial_end"]
    assert len(ends) == len(plan) and all(e["ok"] and e["valid"] for e in ends), ends
    phases = Counter((e["trial"], e["name"]) for e in evs if e["type"] == "phase")
    for pt in plan:  # timed on the node, every phase
        for ph in ("create", "ready", "teardown", "orchestration"):
            assert phases[(pt.id, ph)] == 1, (pt.id, ph)
    # the report reads it like any run: one cell per node and channel
    rep = _rtax(cluster, "report", str(rec), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    got = {c["cell"] for c in json.loads(rep.stdout)["cells"]}
    assert got == {c.id for c in cells}
    assert _left_after(30) == [] and leftovers(head["run_id"]) == []


def test_pooled_t0_on_stage_keeps_a_pool_on_every_node(cluster, tmp_path):
    """Warm pools on the nodes: each node's engine keeps its own pool (stage, `clean`:
    the sandbox replaced, as locally), every pooled trial acquires from it and
    releases to it, each environment is made once and torn down once at the end, and
    `rtax report` reads the pools' figures per node."""
    prof = tmp_path / "pool.toml"
    prof.write_text(
        """
[run]
hosts = ["cluster"]
drivers = ["stage"]
workloads = ["t0"]
channels = ["exec"]
modes = ["pool"]
trials = 2
warmup = 0
concurrency = 3

[hosts.cluster]
ray = "auto"

[pool]
size = 1
reset = "clean"
"""
    )
    rec = tmp_path / "pool.jsonl"
    res = _rtax(cluster, "run", str(prof), "--headless", "-o", str(rec))
    assert res.returncode == 0, res.stderr[-3000:]
    evs = _events(rec)
    head = evs[0]
    hosts = head["hosts"]
    assert len(hosts) == 3, hosts
    resets = head["profile"]["pool"]["resets"]
    assert {r["reset"] for r in resets.values()} == {"clean"}, resets
    cells = make_cells(tuple(hosts), ("stage",), ("t0",), ("exec",), ("pool",))
    plan = build_plan(cells, 2, 0, head["seed"])
    starts = {e["trial"]: e for e in evs if e["type"] == "trial_start"}
    assert sorted(starts) == [pt.id for pt in plan]
    ends = [e for e in evs if e["type"] == "trial_end"]
    assert len(ends) == len(plan) and all(e["ok"] and e["valid"] for e in ends), ends
    phases = Counter((e["trial"], e["name"]) for e in evs if e["type"] == "phase")
    for pt in plan:
        assert phases[(pt.id, "acquire")] == phases[(pt.id, "release")] == 1, pt.id
        assert phases[(pt.id, "create")] == 0
    pools = [e for e in evs if e["type"] == "pool"]
    assert {e["host"] for e in pools} == set(hosts)
    for h in hosts:
        for n in {e["env"] for e in pools if e["host"] == h}:
            ops = [e["op"] for e in pools if e["host"] == h and e["env"] == n]
            assert ops[0] == "create" and ops[-1] == "teardown", (h, n, ops)
            assert ops.count("create") == ops.count("teardown") == 1, (h, n, ops)
        assert sum(e["op"] == "reset" for e in pools if e["host"] == h) >= 1
    rep = _rtax(cluster, "report", str(rec), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    per_host = json.loads(rep.stdout)["pools"]["hosts"]
    assert set(per_host) == set(hosts)
    for h, d in per_host.items():
        assert d["trials"] == 2 and d["pool_ops"]["create"] >= 1, (h, d)
    assert _left_after(30) == [] and leftovers(head["run_id"]) == []


def test_an_environment_reaches_the_cluster_from_local_but_not_from_stage(cluster, tmp_path):
    """An attack (docs/boundaries.md, "Ray nodes"): code in an environment connects to the
    Ray GCS on its node's loopback, from where it could submit work as the cluster's user.
    Under `stage` (a network namespace of its own) there is no route: the connect fails.
    Under `local` (no boundary, as its facts say) it gets through: pinned here, so that
    the docs' warning stays true."""
    port = int(cluster.address.rpartition(":")[2])
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3)"
    profile = tmp_path / "reach.toml"
    profile.write_text(
        f"""
[run]
hosts = ["ray:auto"]
drivers = ["stage", "local"]
workloads = ["reach"]
channels = ["exec"]
trials = 1
warmup = 0
concurrency = 3

[workloads.reach]
steps = [{{ argv = ["python3", "-c", "{probe}"], expect_rc = "nonzero" }}]
"""
    )
    rec = tmp_path / "reach.jsonl"
    res = _rtax(cluster, "run", str(profile), "--headless", "-o", str(rec))
    evs = _events(rec)
    assert evs[-1]["type"] == "run_end", res.stderr[-3000:]
    driver = {e["trial"]: e["driver"] for e in evs if e["type"] == "trial_start"}
    rcs = {(driver[e["trial"]], e["rc"]) for e in evs if e["type"] == "action"}
    assert len(driver) == 6
    assert {rc for d, rc in rcs if d == "stage"} == {1}, rcs  # no route: refused
    assert {rc for d, rc in rcs if d == "local"} == {0}, rcs  # connected
    assert _left_after(30) == []


def _nap_profile(path: Path, nap: str, driver: str) -> Path:
    path.write_text(
        f"""
[run]
hosts = ["cluster"]
drivers = ["{driver}"]
workloads = ["nap"]
channels = ["exec"]
trials = 2
warmup = 0
concurrency = 3

[hosts.cluster]  # one trial at a time per node: a trial in flight on each
ray = "auto"
concurrency = 1

[workloads.nap]
steps = [{{ argv = ["sleep", "{nap}"] }}]
"""
    )
    return path


def _start(cluster: Cluster, profile: Path, rec: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, RAY_ADDRESS=cluster.address, RTAX_NOISE="0")
    return subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(profile), "--headless", "-o", str(rec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _in_flight_everywhere(proc: subprocess.Popen[str], nap: str) -> None:
    deadline = time.monotonic() + 120
    # a trial in flight on every node: 3 sleeps (a sandbox's bwrap names it too)
    while len([p for p in processes(nap) if "b'sleep\\x00" in p]) < 3:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the trials never ran on 3 nodes at once"
        time.sleep(0.1)


def test_an_interrupted_run_stops_every_node_and_leaves_nothing(cluster, tmp_path):
    nap = "5.0419"
    rec = tmp_path / "intr.jsonl"
    proc = _start(cluster, _nap_profile(tmp_path / "intr.toml", nap, "stage"), rec)
    try:
        _in_flight_everywhere(proc, nap)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    evs = _events(rec)
    ends = [e for e in evs if e["type"] == "trial_end"]
    assert len(ends) == 3 and all(e["error"]["kind"] == "interrupted" for e in ends), ends
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "interrupted"
    assert _left_after(30, nap) == []
    assert leftovers(evs[0]["run_id"]) == []


def test_probe_and_cleanup_say_in_one_line_that_they_do_not_reach_ray_nodes(cluster, tmp_path):
    for args in (
        ["probe", "--host", "ray:auto", "--driver", "stage", "-o", str(tmp_path / "p.jsonl")],
        ["cleanup", "--host", "ray:auto"],
    ):
        res = _rtax(cluster, *args, timeout=120)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
        assert "does not run on Ray nodes yet" in lines[0]
    # a capacity budget is a cgroup on the controller's machine: refused, naming the field
    prof = _capacity_profile(tmp_path / "budget.toml", "pass", 60)
    budget = prof.read_text().replace("deadline_s = 60", "deadline_s = 60\nmemory_mib = 256")
    prof.write_text(budget)
    res = _rtax(cluster, "run", str(prof), "--headless", "-o", str(tmp_path / "b.jsonl"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "[capacity] memory_mib" in lines[0]
    assert _left_after(30) == []


def _capacity_profile(path: Path, step: str, deadline_s: int) -> Path:
    path.write_text(
        f"""
[run]
hosts = ["cluster"]
drivers = ["local"]
workloads = ["span"]
channels = ["exec"]
warmup = 0

[hosts.cluster]
ray = "auto"

[capacity]
size = 1
batches = 1
deadline_s = {deadline_s}

[workloads.span]
steps = [{{ argv = ["python3", "-c", {json.dumps(step)}] }}]
"""
    )
    return path


def test_a_capacity_batch_spread_over_the_nodes_reaches_one_barrier(cluster, tmp_path):
    """One batch, an environment on every node, one arriving 1.5 s after the others: none
    is woken before the last one of every node has arrived (one barrier, released by
    the controller), and each node's part of the batch is recorded with when its node
    received the release and when its environment let go, measured there."""
    # the first to take the marker naps 1.5 s, the others none: the batch's arrivals
    # differ by that much on any machine (random naps once came within 130 ms)
    marker = tmp_path / "late"
    nap = (
        "import os, time\n"
        f"try:\n    os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))\n"
        "except FileExistsError:\n    raise SystemExit(0)\n"
        "time.sleep(1.5)\n"
    )
    rec = tmp_path / "span.jsonl"
    res = _rtax(cluster, "run", str(_capacity_profile(tmp_path / "s.toml", nap, 60)),
                "--headless", "-o", str(rec))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    evs = _events(rec)
    hosts = evs[0]["hosts"]
    assert len(hosts) >= 3
    starts = {e["trial"]: e for e in evs if e["type"] == "trial_start"}
    assert sorted(e["host"] for e in starts.values()) == sorted(hosts)
    assert {(e["batch"], e["batch_size"]) for e in starts.values()} == {("b1", 1)}
    ends = [e for e in evs if e["type"] == "trial_end"]
    assert len(ends) == len(hosts) and all(e["ok"] and e["valid"] for e in ends), ends
    waits = [e for e in evs if e["type"] == "phase" and e["name"] == "barrier.wait"]
    assert len(waits) == len(hosts) and all(e["ok"] for e in waits)
    # each wait ends (its environment woken) after every node's environment arrived
    err = max(e["err_ns"] for e in evs if e["type"] == "clock")
    last_arrival = max(e["t_ns"] - e["dur_ns"] for e in waits)
    first_wake = min(e["t_ns"] for e in waits)
    assert first_wake >= last_arrival - 2 * err - 1_000_000, (first_wake, last_arrival, err)
    assert max(e["dur_ns"] for e in waits) > 300_000_000  # the naps differed: it bites
    bars = [e for e in evs if e["type"] == "barrier"]
    assert sorted(e["cell"].split("/")[0] for e in bars) == sorted(hosts)
    for b in bars:
        assert (b["batch"], b["size"], b["arrived"], b["span"]) == ("b1", 1, 1, len(hosts))
        assert b["released"] == "all_arrived" and b["ok"], b
        lag, dur = b["release_lag_ns"], b["release_dur_ns"]
        assert type(lag) is int and 0 <= lag <= dur + 2 * err + 1_000_000, b
        assert dur < 10_000_000_000, b
    assert len({b["release_ns"] for b in bars}) == 1  # one decision
    rep = _rtax(cluster, "report", str(rec), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    caps = [c["capacity"] for c in json.loads(rep.stdout)["cells"]]
    assert all(c is not None and c["arrived_tasks"] == 1 for c in caps), caps
    assert _left_after(30) == [] and leftovers(evs[0]["run_id"]) == []


def test_a_node_killed_mid_batch_leaves_its_trial_lost_and_the_others_released(cluster, tmp_path):
    """A node of its own (added for this test) killed while every node's environment of
    the batch is on its way: its trial is lost with the reason, the barrier does not wait
    for it (the others arrive and are released, `settled`, long before the deadline), the
    run ends, and nothing is left running on any node."""
    victim = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    victim_host = "cluster-" + victim.node_id[:8]
    nap = "import time; time.sleep(4.0413)"
    rec = tmp_path / "kill.jsonl"
    proc = _start(cluster, _capacity_profile(tmp_path / "k.toml", nap, 240), rec)
    t = time.monotonic()
    try:
        deadline = time.monotonic() + 120
        while len([p for p in processes("4.0413") if "python3\\x00-c" in p]) < 4:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the batch never ran on 4 nodes at once"
            time.sleep(0.1)
        cluster.remove_node(victim, allow_graceful=False)
        _, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - t
    assert proc.returncode == 0, err[-3000:]
    assert took < 200, took  # not the deadline's 240 s: the barrier was not hung
    evs = _events(rec)
    assert victim_host in evs[0]["hosts"] and len(evs[0]["hosts"]) == 4
    starts = {e["trial"]: e["host"] for e in evs if e["type"] == "trial_start"}
    ends = {e["trial"]: e for e in evs if e["type"] == "trial_end"}
    assert len(starts) == len(ends) == 4
    for trial, host in starts.items():
        end = ends[trial]
        if host == victim_host:
            assert not end["ok"] and end["error"]["kind"] == "host_lost", end
            assert f"node {victim_host} lost" in end["error"]["message"], end
        else:
            assert end["ok"] and end["valid"], end
    bars = {e["cell"].split("/")[0]: e for e in evs if e["type"] == "barrier"}
    assert len(bars) == 4 and {b["released"] for b in bars.values()} == {"settled"}, bars
    for host, b in bars.items():
        assert b["arrived"] == (0 if host == victim_host else 1), b
        assert (b["release_lag_ns"] is None) == (host == victim_host), b
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "completed"
    assert _left_after(30, "4.0413") == []
    assert leftovers(evs[0]["run_id"]) == []


STOP_MY_ENGINE = (
    "import os\n"
    "p = os.getppid()\n"
    "while p > 1:\n"
    "    if open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'ray::NodeEngine'):\n"
    "        os.kill(p, 19)\n"
    "        break\n"
    "    p = int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])\n"
)


def test_an_environment_that_stops_its_node_engine_does_not_hang_the_run(cluster, tmp_path):
    """An attack (docs/boundaries.md, "Ray nodes"): a `local` environment SIGSTOPs the
    node's engine, its ancestor (same user). Before, the controller waited for the
    trial's answer for ever; now a node that does not answer within the trial's
    timeouts and a margin is lost, its trials `host_lost`, and the run ends."""
    profile = tmp_path / "stop.toml"
    steps = f'[{{ argv = ["python3", "-c", {json.dumps(STOP_MY_ENGINE)}] }}]'  # a TOML string
    profile.write_text(
        f"""
[run]
hosts = ["one"]
drivers = ["local"]
workloads = ["stopper"]
channels = ["exec"]
trials = 2
warmup = 0

[timeouts]
create = 3
ready = 3
action = 2
teardown = 3

[hosts.one]
ray = "auto"
nodes = 1

[workloads.stopper]
steps = {steps}
"""
    )
    rec = tmp_path / "stop.jsonl"
    t = time.monotonic()
    res = _rtax(cluster, "run", str(profile), "--headless", "-o", str(rec), timeout=120)
    took = time.monotonic() - t
    assert res.returncode == 0, res.stderr[-3000:]
    evs = _events(rec)
    assert len(evs[0]["hosts"]) == 1  # nodes = 1: the head only
    ends = [e for e in evs if e["type"] == "trial_end"]
    assert len(ends) == 2 and all(e["error"]["kind"] == "host_lost" for e in ends), ends
    assert "no answer within 23 s" in ends[0]["error"]["message"], ends[0]
    assert took < 60, took
    assert _left_after(30) == [] and leftovers(evs[0]["run_id"]) == []


def test_a_node_killed_mid_run_leaves_its_trials_lost_and_nothing_running(cluster, tmp_path):
    nap = "3.0417"  # a duration no other process here sleeps
    rec = tmp_path / "nap.jsonl"
    victim = min(cluster.worker_nodes, key=lambda n: n.node_id)  # a worker, not the head
    victim_host = "cluster-" + victim.node_id[:8]
    proc = _start(cluster, _nap_profile(tmp_path / "nap.toml", nap, "local"), rec)
    try:
        _in_flight_everywhere(proc, nap)
        assert len(_engines_left()) >= 6  # 3 engines and their reapers: the check below bites
        cluster.remove_node(victim, allow_graceful=False)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    evs = _events(rec)
    starts = {e["trial"]: e["host"] for e in evs if e["type"] == "trial_start"}
    ends = {e["trial"]: e for e in evs if e["type"] == "trial_end"}
    assert len(starts) == len(ends) == 6  # every planned trial recorded
    assert evs[-1]["type"] == "run_end" and evs[-1]["trials"] == 6
    for t, host in starts.items():
        end = ends[t]
        if host == victim_host:  # in flight when it died, and the one after it
            assert not end["ok"] and end["error"]["kind"] == "host_lost", end
            assert f"node {victim_host} lost" in end["error"]["message"], end
        else:  # the run went on with the others
            assert end["ok"] and end["valid"], end
    # nothing left: the killed node's reaper ended its environment's process group
    assert _left_after(30, nap) == []
    assert leftovers(evs[0]["run_id"]) == []


def test_the_controller_killed_mid_batch_leaves_nothing_on_the_nodes(cluster, tmp_path):
    """The red team's (docs/boundaries.md, "Ray nodes and the spanning barrier"): the
    controller SIGKILLed while a capacity batch spans the nodes, every environment but
    one held at the barrier (the first to take a marker naps on). Ray ends the driver's
    actors; each node engine's detached reaper ends what its environments left: no
    environment, engine or reaper of the run is left on any node."""
    marker = tmp_path / "first"
    nap = (
        "import os, time\n"
        f"try:\n    os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))\n"
        "except FileExistsError:\n    raise SystemExit(0)\n"
        "time.sleep(60.0433)\n"
    )
    rec = tmp_path / "k9.jsonl"
    proc = _start(cluster, _capacity_profile(tmp_path / "k9.toml", nap, 120), rec)
    try:
        deadline = time.monotonic() + 120
        waits = 0
        while waits < 2 or not processes("60.0433"):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the batch never held its environments"
            time.sleep(0.2)
            waits = len(processes("ray::NodeEngine"))
        time.sleep(1.0)  # the others arrived: held at the barrier, on their nodes
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_id = _events(rec)[0]["run_id"]
    assert _left_after(60, "60.0433") == []
    assert leftovers(run_id) == []
