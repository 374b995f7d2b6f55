"""Many hosts (issue 25): how the controller's cost and its clock error grow with N hosts.

    python3 bench/fleet_bench.py [--hosts 1,4,16,64] [--trials 3] [--actions 10]

For each N it makes N network namespaces (`rtax-fleet-K`), each joined to this one by
a veth pair with a /30 of its own in 10.252.0.0/16, and starts an OpenSSH server in
each (its own ed25519 host key; the client key and known_hosts are the bench's, so host
keys are checked). Then one `rtax run --headless` of the `stage` driver, shell channel,
`--trials` trials per host of `--actions` `true` steps, with every host's trials in
flight at once (concurrency N, one trial per host at a time). It measures:

- the controller's CPU (utime + stime of the rtax process, /proc/PID/stat sampled every
  50 ms, and its rusage at exit): at start-up (until the first trial starts: imports,
  N connections, N hosts' facts, N clock syncs), and over the trials, per action;
- events written per second, and actions per second, over the trials;
- per host the P50 action time, and across hosts their median and range;
- the clock: every host is this machine, so every host's true offset is the same
  number; the spread of the recorded offsets (max - min over all hosts' syncs) is the
  sync's error, to put beside the bounds it claims (`err_ns`), and all hosts'
  intervals (offset +- err) must share a point (`consistent`);
- the controller's peak RSS.

`--compare TREE` runs each N twice on the same fleet, with rtax from TREE (a
`git archive` of another commit) and from this tree, in turn: a before/after under
the same load.

Every "host" is this same 2-core machine: the stage environments of all N hosts, and
the N sshd, run on the cores the controller uses. Needs root, openssh-server,
iproute2, util-linux (nsenter) and bubblewrap. Whatever way it ends (an error, Ctrl-C,
SIGTERM, SIGHUP), it stops the run, kills the sshd it started by PID, deletes its
namespaces, veths, login alias and temp dir, and says if anything was left behind.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
NS_PREFIX = "rtax-fleet-"
VETH_PREFIX = "rfl-"  # the controller's end; the namespace's end is `eth0` in there
NET = (10, 252)  # 10.252.0.0/16: a /30 per host, K-th at 10.252.(4K / 256).(4K % 256)
MAX_HOSTS = 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def missing() -> str | None:
    """None when the bench can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (sshd, network namespaces, the stage driver on the hosts)"
    for tool in (SSHD, "ssh-keygen", "ip", "nsenter", "bwrap", "useradd"):
        if not shutil.which(tool) and not os.path.exists(tool):
            return f"{tool} is missing"
    return None


def _addresses(k: int) -> tuple[str, str]:
    """(the controller's end, the host's) of host k's /30."""
    base = 4 * k
    hi, lo = base // 256, base % 256
    return f"{NET[0]}.{NET[1]}.{hi}.{lo + 1}", f"{NET[0]}.{NET[1]}.{hi}.{lo + 2}"


def leftovers() -> list[str]:
    """What a fleet leaves behind if its teardown failed: namespaces, veths, sshd
    listening in 10.252/16, login aliases. Empty when clean."""
    out: list[str] = []
    ns = _sh("ip", "netns", "list", check=False).stdout.split()
    out += [f"netns {n}" for n in ns if n.startswith(NS_PREFIX)]
    links = _sh("ip", "-o", "link", "show", check=False).stdout.splitlines()
    for line in links:
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(VETH_PREFIX):
            out.append(f"veth {name}")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        # sshd retitles itself ("sshd: /usr/sbin/sshd -D -f /tmp/rtax-fleet-.../sshd.conf")
        head = cmd[0].split(b" ")[0] if cmd else b""
        if head.rstrip(b":").endswith(b"sshd") and b"/rtax-fleet-" in b" ".join(cmd):
            out.append(f"sshd pid {pid}")
    with open("/etc/passwd") as f:
        out += [f"user {ln.split(':')[0]}" for ln in f if ln.startswith("rtaxfleet")]
    return out


@dataclass
class Host:
    name: str
    netns: str
    veth: str
    address: str
    port: int
    pid: int = 0


@dataclass
class Fleet:
    """N sshd, each in a network namespace of its own; `close()` undoes everything,
    including a half-made set-up (each resource is noted before it is made)."""

    n: int
    dir: str = ""
    user: str = ""
    identity: str = ""
    known_hosts: str = ""
    hosts: list[Host] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    user_made: bool = False

    def open(self) -> None:
        if not 1 <= self.n <= MAX_HOSTS:
            raise ValueError(f"1 <= N <= {MAX_HOSTS}")
        stale = leftovers()
        if stale:  # another fleet bench, or one that died without its teardown
            raise RuntimeError(
                "a fleet is already there (another bench, or one killed -9): "
                + ", ".join(stale[:8])
            )
        self.dir = tempfile.mkdtemp(prefix="rtax-fleet-")
        os.chmod(self.dir, 0o755)
        self.identity = os.path.join(self.dir, "client_ed25519")
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        authorized = os.path.join(self.dir, "authorized_keys")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.identity)
        shutil.copy(self.identity + ".pub", authorized)
        os.makedirs("/run/sshd", exist_ok=True)
        # root's login shell (bash and its start-up files) adds ~100 ms to every command:
        # a uid-0 alias whose shell is /bin/sh (root: the stage driver needs it), as the
        # tests do (tests/sshhosts.py)
        self.user = f"rtaxfleet{os.getpid() % 100000}"
        home = os.path.join(self.dir, "home")
        os.mkdir(home)
        self.user_made = True
        _sh("useradd", "-o", "-u", "0", "-g", "0", "-M", "-N", "-d", home,
            "-s", "/bin/sh", self.user)  # fmt: skip
        _sh("usermod", "-p", "*", self.user)
        conf = os.path.join(self.dir, "sshd.conf")
        with open(conf, "w") as f:  # per host: ListenAddress, HostKey, PidFile by -o/-h
            f.write(
                f"Port 22\nAuthorizedKeysFile {authorized}\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "StrictModes no\nMaxSessions 200\nMaxStartups 100\n"
                "PermitRootLogin prohibit-password\n"
                "ClientAliveInterval 5\nClientAliveCountMax 6\n"
            )
        known: list[str] = []
        for k in range(self.n):
            h = self._make_host(k, conf)
            with open(os.path.join(self.dir, f"host{k}.pub")) as f:
                known.append(f"{h.address} {' '.join(f.read().split()[:2])}\n")
        with open(self.known_hosts, "w") as f:
            f.writelines(known)
        for h, p in zip(self.hosts, self.procs, strict=True):
            self._wait_listening(h, p)

    def _make_host(self, k: int, conf: str) -> Host:
        ns, veth = f"{NS_PREFIX}{k}", f"{VETH_PREFIX}{k}"
        mine, theirs = _addresses(k)
        self.netns.append(ns)
        _sh("ip", "netns", "add", ns)
        self.veths.append(veth)
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _sh("ip", "addr", "add", f"{mine}/30", "dev", veth)
        _sh("ip", "link", "set", veth, "up")
        _sh("ip", "-n", ns, "addr", "add", f"{theirs}/30", "dev", "eth0")
        _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        key = os.path.join(self.dir, f"host{k}")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        # only the network namespace: `ip netns exec` also remounts /sys, which would
        # hide the cgroups the stage driver makes (tests/sshhosts.py does the same)
        # (the paths in /tmp/rtax-fleet-*: how leftovers() knows a stray one)
        argv = [
            "nsenter", f"--net=/run/netns/{ns}", SSHD, "-D", "-f", conf, "-h", key,
            "-o", f"ListenAddress={theirs}", "-o", f"PidFile={self.dir}/sshd{k}.pid",
            "-E", os.path.join(self.dir, f"sshd{k}.log"),
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        h = Host(f"h{k:02d}", ns, veth, theirs, 22, proc.pid)
        self.hosts.append(h)
        return h

    @staticmethod
    def _wait_listening(h: Host, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd of {h.name} exited with {proc.returncode}")
            try:
                with socket.create_connection((h.address, h.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd of {h.name} does not listen on {h.address}")

    def close(self) -> None:
        """Kill every sshd started here (the per-connection ones first: their sessions'
        commands then see EOF, as when a server drops a connection), then delete the
        veths, namespaces, alias and directory. Safe to call twice."""
        for p in self.procs:
            for pid in _descendants(p.pid):
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().strip() != "sshd":
                            continue
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, FileNotFoundError):
                    pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs.clear()
        for v in self.veths:  # deleting one end deletes the pair
            _sh("ip", "link", "del", v, check=False)
        self.veths.clear()
        for ns in self.netns:
            _sh("ip", "netns", "del", ns, check=False)
        self.netns.clear()
        if self.user_made:
            _sh("userdel", "-f", self.user, check=False)
            self.user_made = False
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out: list[int] = []
    todo = [root]
    while todo:
        cur = todo.pop()
        kids = [p for p, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


def _cpu_s(pid: int) -> float | None:
    """utime + stime + cutime + cstime of `pid` (all its threads, its waited children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


class Sampler(threading.Thread):
    """Every 50 ms: the controller's CPU, and how many trials its recording has started
    and ended so far (the recording is flushed a line at a time): where start-up ends
    and the trials end, by CPU."""

    def __init__(self, pid: int, rec: Path) -> None:
        super().__init__(daemon=True)
        self.pid, self.rec = pid, rec
        self.stop = threading.Event()
        self.samples: list[tuple[float, float, int, int]] = []  # (mono s, cpu s, starts, ends)
        self.header: tuple[float, float] | None = None  # (mono s, cpu s) when it was written

    def run(self) -> None:
        pos, starts, ends, tail = 0, 0, 0, b""
        while not self.stop.is_set():
            cpu = _cpu_s(self.pid)
            lines: list[bytes] = []
            try:
                with open(self.rec, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                pos += len(chunk)
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if b'"type":"trial_start"' in line:
                        starts += 1
                    elif b'"type":"trial_end"' in line:
                        ends += 1
            except OSError:
                pass
            if cpu is not None and self.header is None and (lines or starts):
                self.header = (time.monotonic(), cpu)
            if cpu is not None:
                self.samples.append((time.monotonic(), cpu, starts, ends))
            self.stop.wait(0.05)


class Interrupted(Exception):
    pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def profile_text(fleet: Fleet, trials: int, actions: int, per_host: int) -> str:
    steps = ", ".join(['{argv = ["true"]}'] * actions)
    n = len(fleet.hosts)
    names = ", ".join(f'"{h.name}"' for h in fleet.hosts)
    text = (
        f'[run]\nseed = 1\ntrials = {trials}\nwarmup = 0\ndrivers = ["stage"]\n'
        f'workloads = ["truex"]\nchannels = ["shell"]\nconcurrency = {n * per_host}\n'
        f"hosts = [{names}]\n"
        "[timeouts]\ncreate = 300\nready = 300\naction = 120\nteardown = 300\n"
        f"[workloads.truex]\nsteps = [{steps}]\n"
    )
    for h in fleet.hosts:
        text += (
            f'[hosts.{h.name}]\naddress = "{h.address}"\nport = {h.port}\n'
            f'user = "{fleet.user}"\nconcurrency = {per_host}\n'
        )
    return text


def _us(stat: Callable[[list[int]], float], ns: list[int]) -> float:
    return stat(ns) / 1e3 if ns else float("nan")


# Runs rtax from another source tree (--compare): its package and drivers mapped in first,
# as the worktree shims do.
_SHIM = """import importlib.abc, importlib.util, sys
T = {tree!r}
import rtax_tui
rtax_tui.__path__[:] = [T + "/rtax_tui"]
class _F(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "rtax_tui.drivers":
            return importlib.util.spec_from_file_location(
                name, T + "/drivers/__init__.py", submodule_search_locations=[T + "/drivers"])
        return None
sys.meta_path.insert(0, _F())
"""


def _env_for(tree: Path | None, tmp: Path) -> dict[str, str] | None:
    if tree is None:
        return None  # this process's: this tree (or its shim)
    shim = tmp / "shim-compare"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM.format(tree=str(tree.resolve())))
    return {**os.environ, "PYTHONPATH": str(shim)}


def run_once(
    fleet: Fleet, args: argparse.Namespace, tmp: Path, tree: Path | None = None
) -> dict[str, object]:
    """One rtax run over the fleet (rtax from `tree`, else this one's); one table row."""
    n = len(fleet.hosts)
    tag = f"{n}{'c' if tree else ''}"
    prof = tmp / f"fleet{tag}.toml"
    prof.write_text(profile_text(fleet, args.trials, args.actions, args.per_host))
    rec = tmp / f"fleet{tag}.jsonl"
    argv = [
        sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet",
        "--identity", fleet.identity, "--known-hosts", fleet.known_hosts, "-o", str(rec),
    ]  # fmt: skip
    err = open(tmp / f"fleet{tag}.err", "wb")
    load0 = os.getloadavg()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=_env_for(tree, tmp), stdout=subprocess.DEVNULL, stderr=err
    )
    sampler = Sampler(proc.pid, rec)
    sampler.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    except BaseException as exc:
        # Ctrl-C reached rtax too (same process group); SIGTERM/SIGHUP only the bench:
        # either way rtax ends its run and tears its environments down before the sshd go
        if not isinstance(exc, KeyboardInterrupt):
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
        err.close()
    wall = time.monotonic() - t0
    load1 = os.getloadavg()
    cpu_total = ru.ru_utime + ru.ru_stime
    if proc.returncode == 130:  # rtax was stopped (a signal to it alone)
        raise Interrupted("rtax run interrupted")
    if proc.returncode != 0:
        raise RuntimeError(
            f"rtax run exited {proc.returncode}: {(tmp / f'fleet{tag}.err').read_text()[-2000:]}"
        )
    events = [json.loads(line) for line in rec.read_text().splitlines()]
    total = n * args.trials
    first = next((s for s in sampler.samples if s[2] > 0), None)
    last = next((s for s in sampler.samples if s[3] >= total), None)
    host_of = {e["trial"]: e["host"] for e in events if e["type"] == "trial_start"}
    acts: dict[str, list[int]] = {h.name: [] for h in fleet.hosts}
    for e in events:
        if e["type"] == "action" and e["ok"]:
            acts[host_of[e["trial"]]].append(e["dur_ns"])
    ends = [e for e in events if e["type"] == "trial_end"]
    ok = sum(1 for e in ends if e["ok"])
    n_actions = sum(len(v) for v in acts.values())
    starts_t = [e["t_ns"] for e in events if e["type"] == "trial_start"]
    t_first, t_last = min(starts_t), max(e["t_ns"] for e in ends)
    span = (t_last - t_first) / 1e9
    in_trials = sum(1 for e in events if t_first <= e.get("t_ns", -1) <= t_last)
    p50s = [statistics.median(v) / 1e6 for v in acts.values() if v]
    clocks = [e for e in events if e["type"] == "clock"]
    offs = [c["offset_ns"] for c in clocks]
    lo = max(c["offset_ns"] - c["err_ns"] for c in clocks) if clocks else 0
    hi = min(c["offset_ns"] + c["err_ns"] for c in clocks) if clocks else 0
    cpu_trials = (last[1] - first[1]) if first and last else float("nan")
    errors: dict[str, int] = {}
    for e in ends:
        if not e["ok"] and e.get("error"):
            kind = e["error"].get("kind", "?")
            errors[kind] = errors.get(kind, 0) + 1
    return {
        "n": n,
        "trials": f"{ok}/{len(ends)}",
        "errors": errors,
        "unreachable": [
            h.name for h in fleet.hosts if events[0]["hosts"].get(h.name, {}).get("unreachable")
        ],
        "actions": n_actions,
        "wall_s": wall,
        "header_s": (sampler.header[0] - t0) if sampler.header else float("nan"),
        "cpu_header_s": sampler.header[1] if sampler.header else float("nan"),
        "startup_s": (first[0] - t0) if first else float("nan"),
        "trials_s": span,
        "cpu_total_s": cpu_total,
        "rss_mib": ru.ru_maxrss / 1024,  # the peak of rtax or of a child it waited for
        "cpu_startup_s": first[1] if first else float("nan"),
        "cpu_per_action_ms": cpu_trials / n_actions * 1e3 if n_actions else float("nan"),
        "cpu_share": cpu_trials / span if span else float("nan"),
        "events_per_s": in_trials / span if span else float("nan"),
        "actions_per_s": n_actions / span if span else float("nan"),
        "p50_median_ms": statistics.median(p50s) if p50s else float("nan"),
        "p50_min_ms": min(p50s) if p50s else float("nan"),
        "p50_max_ms": max(p50s) if p50s else float("nan"),
        "syncs": len(clocks),
        "offset_spread_us": (max(offs) - min(offs)) / 1e3 if offs else float("nan"),
        "err_median_us": _us(statistics.median, [c["err_ns"] for c in clocks]),
        "err_max_us": _us(max, [c["err_ns"] for c in clocks]),
        "rtt_median_us": _us(statistics.median, [c["rtt_ns"] for c in clocks]),
        "consistent": lo <= hi,
        "load": (load0[0], load1[0]),
    }


HEAD = (
    f"{'N':>3} {'trials':>7} {'acts':>5} {'wall s':>7} {'hdr s':>6} {'start s':>7} "
    f"{'CPU s':>6} {'CPUhdr':>6} {'CPUst s':>7} {'CPU/act ms':>10} {'ctl CPU':>7} "
    f"{'ev/s':>6} {'act/s':>6} {'RSS MiB':>7} "
    f"{'P50 ms med':>10} {'[min-max]':>13} {'syncs':>5} {'off spread us':>13} "
    f"{'err med/max us':>14} {'rtt us':>6} {'cons':>4} {'load':>9}"
)


def row(r: dict[str, object]) -> str:
    g = r.get
    return (
        f"{g('n'):>3} {g('trials'):>7} {g('actions'):>5} {g('wall_s'):7.1f} "
        f"{g('header_s'):6.1f} {g('startup_s'):7.1f} {g('cpu_total_s'):6.2f} "
        f"{g('cpu_header_s'):6.2f} {g('cpu_startup_s'):7.2f} "
        f"{g('cpu_per_action_ms'):10.2f} {g('cpu_share'):6.0%} {g('events_per_s'):6.0f} "
        f"{g('actions_per_s'):6.0f} {g('rss_mib'):7.0f} {g('p50_median_ms'):10.2f} "
        f"[{g('p50_min_ms'):5.1f}-{g('p50_max_ms'):5.1f}] {g('syncs'):>5} "
        f"{g('offset_spread_us'):13.0f} "
        f"{g('err_median_us'):6.0f}/{g('err_max_us'):<7.0f} {g('rtt_median_us'):6.0f} "
        f"{'yes' if g('consistent') else 'NO':>4} "
        f"{g('load')[0]:4.1f}>{g('load')[1]:4.1f}"  # type: ignore[index]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", default="1,4,16,64", help="the N to run, comma-separated")
    ap.add_argument("--trials", type=int, default=3, help="trials per host")
    ap.add_argument("--actions", type=int, default=10, help="`true` steps per trial")
    ap.add_argument("--per-host", type=int, default=1, help="trials in flight per host")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument(
        "--compare",
        type=Path,
        help="another rtax source tree (e.g. `git archive` of a commit): each N is run\n"
        "with it and with this one, in turn on the same fleet",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per N (and per tree)")
    args = ap.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}")
        return 1
    ns = [int(x) for x in args.hosts.split(",")]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="rtax-fleetbench-"))
    rows: list[dict[str, object]] = []
    print(
        f"stage driver, shell channel, {args.trials} trials x {args.actions} `true` per host, "
        f"{args.per_host} per host in flight; all hosts on this machine ({os.cpu_count()} cores)"
    )
    print(f"uptime: {_sh('uptime').stdout.strip()}")
    print(HEAD, flush=True)
    code = 0
    try:
        for i, n in enumerate(ns):
            fleet = Fleet(n)
            try:
                t = time.monotonic()
                fleet.open()
                made = time.monotonic() - t
                # --compare: both trees on the same fleet, in turn, the first alternating
                trees: list[Path | None] = [None]
                if args.compare:
                    trees = [args.compare, None] if i % 2 == 0 else [None, args.compare]
                for _ in range(args.repeat):
                    for tree in trees:
                        r = run_once(fleet, args, tmp, tree)
                        r["fleet_s"] = made
                        r["rtax"] = str(tree) if tree else "this tree"
                        rows.append(r)
                        print(row(r) + (f"  ({tree})" if tree else ""), flush=True)
                        if r["errors"] or r["unreachable"]:
                            print(f"    failed: {r['errors']} unreachable: {r['unreachable']}")
                    trees.reverse()
            finally:
                fleet.close()
        print(f"uptime: {_sh('uptime').stdout.strip()}")
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"\ninterrupted ({str(exc) or 'SIGINT'}): torn down", file=sys.stderr)
        code = 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        left = leftovers()
        if left:
            print(f"LEFT BEHIND: {left}", file=sys.stderr)
            code = code or 2
        if args.json and rows:
            args.json.write_text(json.dumps(rows, indent=1))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
