"""Ray nodes against SSH hosts (issue 41): the controller's cost per action with N hosts.

    python3 bench/ray_bench.py [--hosts 1,2] [--trials 4] [--actions 20] [--repeat 1]

For each N, the same run twice (then `--repeat` times more, the order alternating):
- SSH: N sshd in network namespaces of their own, as bench/fleet_bench.py makes them
  (its `Fleet`), joined as `[hosts.hK]` SSH hosts: the controller runs every command of
  every trial over SSH and times it;
- Ray: a local Ray cluster of N nodes on loopback (a head and N - 1 workers,
  `ray.cluster_utils.Cluster`, 1 CPU and 80 MB of object store each), joined as one
  `[hosts.ray] ray = "HOST:PORT"` table: each node's actor runs the trials on its node
  and sends their events back, one batch a trial.
Both: driver `stage`, shell channel, `--trials` trials per host of `--actions` `true`
steps, one trial in flight per host, all hosts at once. It measures the rtax process's
CPU (its rusage at exit, and /proc/PID/stat every 50 ms: fleet_bench's `Sampler`) from
the header to the last trial_end written, per action (each trial's create, ready and
teardown included, as in fleet_bench: 1 + `--actions` shell commands a trial), its start-up
CPU (until the header: imports, joining, N hosts' checks, facts and clock syncs), and
events and actions per second over the trials (first trial_start to last trial_end, by
the recording's t_ns).

Every "host" is this same 2-core machine: the nodes' actors and environments, the sshd,
Ray's head (GCS, raylets) and the controller share its cores. The controller's own
CPU per action is the figure that carries over to real hosts; Ray's head and the
nodes' actors are not the controller's (on a real cluster they are other machines').
Stops what it started (the run, the cluster, the fleet) however it ends. Prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet_bench  # noqa: E402
from fleet_bench import Fleet, Sampler, profile_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NODE = {"num_cpus": 1, "object_store_memory": 80 << 20, "node_ip_address": "127.0.0.1"}


def ray_profile(address: str, trials: int, actions: int, n: int) -> str:
    steps = ", ".join(['{argv = ["true"]}'] * actions)
    return (
        f'[run]\nseed = 1\ntrials = {trials}\nwarmup = 0\ndrivers = ["stage"]\n'
        f'workloads = ["truex"]\nchannels = ["shell"]\nconcurrency = {n}\n'
        'hosts = ["ray"]\n'
        "[timeouts]\ncreate = 300\nready = 300\naction = 120\nteardown = 300\n"
        f"[workloads.truex]\nsteps = [{steps}]\n"
        f'[hosts.ray]\nray = "{address}"\nconcurrency = 1\n'
    )


def measure(argv: list[str], rec: Path, err_path: Path, n: int, trials: int) -> dict[str, Any]:
    """One `rtax run` (argv), its controller's CPU and the recording's rates."""
    env = dict(os.environ, RTAX_NOISE="0")
    with open(err_path, "wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        sampler = Sampler(proc.pid, rec)
        sampler.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        finally:
            sampler.stop.set()
            sampler.join()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"rtax run exited {proc.returncode}: {err_path.read_text()[-2000:]}")
    evs = [json.loads(line) for line in rec.read_text().splitlines()]
    ends = [e for e in evs if e["type"] == "trial_end"]
    acts = [e for e in evs if e["type"] == "action" and e["ok"]]
    starts = [e["t_ns"] for e in evs if e["type"] == "trial_start"]
    t_first, t_last = min(starts), max(e["t_ns"] for e in ends)
    span = (t_last - t_first) / 1e9
    in_trials = sum(1 for e in evs if t_first <= e.get("t_ns", -1) <= t_last)
    cpu = ru.ru_utime + ru.ru_stime
    cpu_hdr = sampler.header[1] if sampler.header else float("nan")
    # the CPU from the header to the last trial_end written (closing the hosts apart)
    last = next((s for s in sampler.samples if s[3] >= len(ends)), None)
    cpu_run = last[1] - cpu_hdr if last else float("nan")
    return {
        "n": n,
        "trials": f"{sum(1 for e in ends if e['ok'])}/{n * trials}",
        "actions": len(acts),
        "wall_s": wall,
        "cpu_total_s": cpu,
        "cpu_startup_s": cpu_hdr,
        "cpu_run_s": cpu_run,
        "cpu_per_action_ms": cpu_run / len(acts) * 1e3 if acts else float("nan"),
        "events_per_s": in_trials / span if span else float("nan"),
        "actions_per_s": len(acts) / span if span else float("nan"),
        "action_p50_ms": statistics.median(e["dur_ns"] for e in acts) / 1e6,
        "rss_mib": ru.ru_maxrss / 1024,
    }


_runs = iter(range(1, 1 << 30))


def run_ssh(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    tmp = tmp / f"run{next(_runs)}"
    tmp.mkdir()
    fleet = Fleet(n)
    try:
        fleet.open()
        prof = tmp / f"ssh{n}.toml"
        prof.write_text(profile_text(fleet, args.trials, args.actions, 1))
        rec = tmp / f"ssh{n}.jsonl"
        argv = [
            sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet",
            "--identity", fleet.identity, "--known-hosts", fleet.known_hosts, "-o", str(rec),
        ]  # fmt: skip
        return measure(argv, rec, tmp / f"ssh{n}.err", n, args.trials)
    finally:
        fleet.close()


def run_ray(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    tmp = tmp / f"run{next(_runs)}"
    tmp.mkdir()
    # Ray's temp dir of its own (sessions, logs, its current-cluster file), removed after
    ray_tmp = tempfile.mkdtemp(prefix="rtax-ray-")
    os.mkdir(os.path.join(ray_tmp, "ray"))
    os.environ["RAY_TMPDIR"] = ray_tmp
    cluster = Cluster(initialize_head=True, head_node_args=dict(NODE, include_dashboard=False))
    try:
        for _ in range(n - 1):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        prof = tmp / f"ray{n}.toml"
        prof.write_text(ray_profile(cluster.address, args.trials, args.actions, n))
        rec = tmp / f"ray{n}.jsonl"
        argv = [
            sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet",
            "-o", str(rec),
        ]  # fmt: skip
        return measure(argv, rec, tmp / f"ray{n}.err", n, args.trials)
    finally:
        cluster.shutdown()
        del os.environ["RAY_TMPDIR"]
        for _ in range(50):  # a process of the cluster may still write a log as it ends
            shutil.rmtree(ray_tmp, ignore_errors=True)
            if not os.path.exists(ray_tmp):
                break
            time.sleep(0.1)


HEAD = (
    f"{'how':>4} {'N':>2} {'trials':>7} {'acts':>5} {'wall s':>7} {'CPU s':>6} "
    f"{'CPUst s':>7} {'CPUrun s':>8} {'CPU/act ms':>10} {'ev/s':>6} {'act/s':>6} "
    f"{'act P50 ms':>10} {'RSS MiB':>7}"
)


def row(how: str, r: dict[str, Any]) -> str:
    return (
        f"{how:>4} {r['n']:>2} {r['trials']:>7} {r['actions']:>5} {r['wall_s']:7.1f} "
        f"{r['cpu_total_s']:6.2f} {r['cpu_startup_s']:7.2f} {r['cpu_run_s']:8.2f} "
        f"{r['cpu_per_action_ms']:10.3f} "
        f"{r['events_per_s']:6.0f} {r['actions_per_s']:6.0f} {r['action_p50_ms']:10.2f} "
        f"{r['rss_mib']:7.0f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", default="1,2", help="the N to run, comma-separated")
    ap.add_argument("--trials", type=int, default=4, help="trials per host")
    ap.add_argument("--actions", type=int, default=20, help="`true` steps per trial")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each kind per N")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()
    why = fleet_bench.missing()
    if why:
        print(f"cannot run: {why}")
        return 1
    try:
        import ray  # noqa: F401
    except ImportError:
        print("cannot run: Ray is not installed (pip install -e '.[ray]')")
        return 1
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, fleet_bench._on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="rtax-raybench-"))
    rows: list[dict[str, Any]] = []
    print(
        f"stage driver, shell channel, {args.trials} trials x {args.actions} `true` per host, "
        f"1 per host in flight; all hosts on this machine ({os.cpu_count()} cores)"
    )
    print(f"uptime: {fleet_bench._sh('uptime').stdout.strip()}")
    print(HEAD, flush=True)
    try:
        for i, n in enumerate(int(x) for x in args.hosts.split(",")):
            for k in range(args.repeat):
                kinds = [("ssh", run_ssh), ("ray", run_ray)]
                if (i + k) % 2:
                    kinds.reverse()
                for how, fn in kinds:
                    r = fn(n, args, tmp)
                    r["how"] = how
                    rows.append(r)
                    print(row(how, r), flush=True)
        print(f"uptime: {fleet_bench._sh('uptime').stdout.strip()}")
    except (KeyboardInterrupt, fleet_bench.Interrupted) as exc:
        print(f"\ninterrupted ({str(exc) or 'SIGINT'}): torn down", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.json and rows:
            args.json.write_text(json.dumps(rows, indent=1))
        left = fleet_bench.leftovers()
        if left:
            print(f"LEFT BEHIND: {left}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
