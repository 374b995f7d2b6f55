"""Each row of issue 42 beside its floor, measured in one run, interleaved: the ratios.

    python3 bench/limits.py [--rows local,ssh,stage,report] [--rounds 3] [--base TREE]

Rows (`--rows`, comma-separated; all by default; a row whose tools are missing is
skipped and says why):

- `local`: rtax's local exec action of `true` (one `rtax run`: local, exec, `true` x
  --actions a trial, the engine's action P50, on --loop) against `hyperfine -N
  --output=pipe true` (before and after it) and a bare `os.posix_spawn` + `waitpid`;
  the layers between (rtax's spawn blocking, `host.run` in the loop, each also on the
  ctypes fallback) come from the same round (bench/harness_bench.py's), and so do the
  engine's figure with RTAX_SUBREAPER=0 and with RTAX_SPAWN=ctypes.
- `ssh`: the engine's SSH shell action of `true` against a bare asyncssh round trip on one
  open shell of the same loopback sshd (bench/ssh_bench.py's; it starts its own sshd and
  removes it), and rtax's framing alone on that shell.
- `stage`: stage's create+ready per trial P50 on both channels (one `rtax run` of the
  stage driver) against bare bubblewrap with the same namespaces (user, pid, ipc, uts,
  net, cgroup, a read-only /usr, /proc, /dev, then `true`) and `unshare(1)` making the
  same namespaces (the kernel's share), both under hyperfine.
- `report`: `rtax report FILE --format json` of a generated 1M-event recording
  (bench/report_1m.py's generator), end to end, against `wc -l FILE`; wall, CPU and
  peak RSS from each process's rusage.

Per round the rows run in turn (their order reversed every other round), each row's
floor measured before and after its figure; the figures are medians over rounds. With
`--base TREE` (another checkout, with rtax_tui/drivers linked to its drivers/), the
local, stage and report rows also run that tree's rtax, interleaved, for a before/after
(the stage row with the tree's own .venv's python where it has one).
The machine's 1-minute load is printed: on a shared machine, read the ratios.
Needs root (stage, the sshd), hyperfine, bubblewrap, openssh-server. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import engine_bench  # noqa: E402
import harness_bench  # noqa: E402
import report_1m  # noqa: E402
import ssh_bench  # noqa: E402

ROWS = ("local", "ssh", "stage", "report")
GOALS = {"local": 1.10, "ssh": 1.20}  # ratios; stage (ms) and report (s, MB) below
STAGE_GOAL_MS = 3.0
REPORT_GOAL = (1.0, 300.0)

Got = dict[str, float]


def _mean(a: float, b: float) -> float:
    return (a + b) / 2


def _bwrap_floor() -> str:
    """bubblewrap with stage's namespaces and the least of a root, running `true`."""
    ns = "--unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-net"
    root = "--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib"
    root += " --symlink usr/lib64 /lib64 --proc /proc --dev /dev"
    return f"bwrap --die-with-parent --new-session {ns} --unshare-cgroup-try {root} -- /bin/true"


UNSHARE = "unshare --user --map-root-user --pid --fork --ipc --uts --net --mount --cgroup true"


class Local:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.rounds = 0

    def why_not(self) -> str | None:
        return None if shutil.which("hyperfine") else "hyperfine is not installed"

    def round(self) -> Got:
        a = self.a
        got = {"hyperfine before": harness_bench.hyperfine(a.runs)}
        # this tree and the base in turns, the order swapped every round: the first engine
        # run after hyperfine was the slower one of a pair in some rounds (issue 42)
        pair = [("rtax", None), ("base", a.base)] if a.base else [("rtax", None)]
        for name, tree in pair if self.rounds % 2 == 0 else reversed(pair):
            got[name] = harness_bench.engine(a.trials, a.actions, a.loop, pythonpath=tree)
        self.rounds += 1
        # the parts: the engine without its subreaper thread, and on the ctypes spawn
        got["no subreaper"] = harness_bench.engine(a.trials, a.actions, a.loop, RTAX_SUBREAPER="0")
        got["ctypes"] = harness_bench.engine(a.trials, a.actions, a.loop, RTAX_SPAWN="ctypes")
        got.update(harness_bench.layers(a.runs, [a.loop]))
        got["hyperfine after"] = harness_bench.hyperfine(a.runs)
        got["floor"] = _mean(got["hyperfine before"], got["hyperfine after"])
        return got


class SSH:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.lab: ssh_bench.SSHLab | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="rtax-limits-ssh-"))

    def why_not(self) -> str | None:
        return ssh_bench.missing()

    def setup(self) -> None:
        self.lab = ssh_bench.SSHLab()
        self.url = self.lab.serve_loopback().url
        self.flags = ["--identity", self.lab.identity, "--known-hosts", self.lab.known_hosts]
        steps = ", ".join(['{argv = ["true"]}'] * self.a.ssh_actions)
        self.prof = self.tmp / "truesh.toml"
        self.prof.write_text(
            f'[run]\ntrials = {self.a.ssh_trials}\nwarmup = 3\ndrivers = ["local"]\n'
            f'workloads = ["truex"]\nchannels = ["shell"]\nconcurrency = 1\n'
            f"[workloads.truex]\nsteps = [{steps}]\n"
        )

    def round(self) -> Got:
        assert self.lab is not None
        before = asyncio.run(ssh_bench.bare_asyncssh(self.lab, self.a.ssh_bare))
        out = self.tmp / "r.jsonl"
        ssh_bench.rtax("run", str(self.prof), "--host", self.url, *self.flags, "-o", str(out))
        rtax = ssh_bench.report(out)["cells"][0]["phases"]["action"]["p50_ms"]
        after = asyncio.run(ssh_bench.bare_asyncssh(self.lab, self.a.ssh_bare))
        out.unlink()
        return {
            "rtax": rtax,
            "floor": _mean(before[1], after[1]),
            "framing": _mean(before[2], after[2]),
            "conn.run": _mean(before[0], after[0]),
        }

    def close(self) -> None:
        if self.lab is not None:
            self.lab.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Stage:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.tmp = Path(tempfile.mkdtemp(prefix="rtax-limits-stage-"))
        self.prof = self.tmp / "stage.toml"
        self.prof.write_text(
            f'[run]\ntrials = {args.stage_trials}\nwarmup = 3\ndrivers = ["stage"]\n'
            f'workloads = ["truex"]\nchannels = ["exec", "shell"]\n'
            f'[workloads.truex]\nsteps = [{{argv = ["true"]}}]\n'
        )

    def why_not(self) -> str | None:
        if os.geteuid() != 0:
            return "needs root (stage's sandboxes)"
        for tool in ("hyperfine", "bwrap", "unshare"):
            if not shutil.which(tool):
                return f"{tool} is not installed"
        return None

    def round(self) -> Got:
        runs = self.a.stage_runs
        got = {"bwrap before": harness_bench.hyperfine(runs, _bwrap_floor())}
        got["unshare before"] = harness_bench.hyperfine(runs, UNSHARE)
        out = self.tmp / "r.jsonl"
        trees = {"": None, "base ": self.a.base} if self.a.base else {"": None}
        for tag, tree in trees.items():
            cells = engine_bench.one_run(self.prof, out, self.a.loop, tree=tree)
            out.unlink()  # rtax run writes no recording over another
            for ch in ("exec", "shell"):
                c = cells[("stage", ch)]
                got[f"{tag}rtax {ch}"] = c["c+r"]
                got[f"{tag}create {ch}"], got[f"{tag}ready {ch}"] = c["create"], c["ready"]
        got["unshare after"] = harness_bench.hyperfine(runs, UNSHARE)
        got["bwrap after"] = harness_bench.hyperfine(runs, _bwrap_floor())
        got["floor"] = _mean(got["bwrap before"], got["bwrap after"])
        got["unshare"] = _mean(got["unshare before"], got["unshare after"])
        return got

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class Report:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        fd, self.path = tempfile.mkstemp(suffix=".jsonl", prefix="rtax-limits-")
        os.close(fd)

    def why_not(self) -> str | None:
        return None if shutil.which("wc") else "wc is not installed"

    def setup(self) -> None:
        t = time.monotonic()
        report_1m.generate(self.path, self.a.events)
        mb = os.path.getsize(self.path) / 1e6
        print(f"  (report: {self.a.events:,} events generated, {mb:.1f} MB, "
              f"in {time.monotonic() - t:.0f} s)", flush=True)  # fmt: skip

    def round(self) -> Got:
        cmd = [sys.executable, "-m", "rtax_tui", "report", self.path, "--format", "json"]
        env = dict(os.environ)
        wc0 = report_1m._run(["wc", "-l", self.path], env)
        wall, cpu, rss = report_1m._run(cmd, env)
        got = {"rtax": wall, "cpu": cpu, "rss": rss}
        if self.a.base:
            got["base"] = report_1m._run(cmd, {**env, "PYTHONPATH": self.a.base})[0]
        wc1 = report_1m._run(["wc", "-l", self.path], env)
        got["floor"] = _mean(wc0[0], wc1[0])
        return got

    def close(self) -> None:
        os.unlink(self.path)


def _fmt_ms(v: float) -> str:
    return f"{v * 1000:.0f} us" if v < 1 else f"{v:.2f} ms"


def summary(row: str, med: Got, rounds: list[Got], base: bool) -> list[str]:
    """The table's line for `row` and the parts measured with it."""
    ratios = [g["rtax"] / g["floor"] for g in rounds if "rtax" in g]
    per_round = ", ".join(f"{x:.2f}x" for x in ratios)
    if row == "local":
        ratio = med["rtax"] / med["floor"]
        line = (
            f"| local exec of `true` / `hyperfine -N --output=pipe true` | {_fmt_ms(med['rtax'])} "
            f"| {_fmt_ms(med['floor'])} | **{ratio:.2f}x** (rounds {per_round}) "
            f"| <= {GOALS['local']:.2f} | {'met' if ratio <= GOALS['local'] else 'not met'} |"
        )
        lp = [k for k in med if k.startswith("host.run") and not k.endswith("ctypes")][0]
        parts = [
            f"bare posix_spawn+waitpid {_fmt_ms(med['posix_spawn'])} "
            f"({med['posix_spawn'] / med['floor']:.2f}x hyperfine); rtax's spawn, blocking "
            f"{_fmt_ms(med['rtax spawn'])} ({(med['rtax spawn'] - med['posix_spawn']) * 1e3:+.0f}"
            f" us); {lp} {_fmt_ms(med[lp])} ({(med[lp] - med['rtax spawn']) * 1e3:+.0f} us); "
            f"the engine {_fmt_ms(med['rtax'])} ({(med['rtax'] - med[lp]) * 1e3:+.0f} us); "
            f"rtax / bare spawn {med['rtax'] / med['posix_spawn']:.2f}x",
            f"the engine with RTAX_SUBREAPER=0 {_fmt_ms(med['no subreaper'])} "
            f"({med['no subreaper'] / med['floor']:.2f}x hyperfine); on the ctypes spawn "
            f"(RTAX_SPAWN=ctypes) {_fmt_ms(med['ctypes'])} ({med['ctypes'] / med['floor']:.2f}x)",
        ]
        if "rtax spawn ctypes" in med:
            parts.append(
                f"the ctypes fallback in the same layers: spawn {_fmt_ms(med['rtax spawn ctypes'])}"
                f", {lp} {_fmt_ms(med[lp + ' ctypes'])}"
            )
        if base:
            parts.append(
                f"base tree: {_fmt_ms(med['base'])} ({med['base'] / med['floor']:.2f}x hyperfine;"
                " per round " + ", ".join(f"{g['base'] / g['floor']:.2f}x" for g in rounds) + ")"
            )
        return [line, *(f"  - {p}" for p in parts)]
    if row == "ssh":
        ratio = med["rtax"] / med["floor"]
        return [
            f"| SSH shell action / bare asyncssh round trip | {med['rtax']:.3f} ms "
            f"| {med['floor']:.3f} ms | **{ratio:.2f}x** (rounds {per_round}) "
            f"| <= {GOALS['ssh']:.2f} | {'met' if ratio <= GOALS['ssh'] else 'not met'} |",
            f"  - framing alone {med['framing']:.3f} ms ({med['framing'] / med['floor']:.2f}x); "
            f"the engine over it {(med['rtax'] - med['framing']) * 1e3:+.0f} us; asyncssh "
            f"conn.run('true') {med['conn.run']:.3f} ms",
        ]
    if row == "stage":
        ex, sh = med["rtax exec"], med["rtax shell"]
        ok = max(ex, sh) <= STAGE_GOAL_MS
        out = [
            f"| stage create+ready P50, exec / shell | {ex:.2f} / {sh:.2f} ms | bwrap "
            f"{med['floor']:.2f} ms | **{ex / med['floor']:.2f}x / {sh / med['floor']:.2f}x** "
            f"| <= {STAGE_GOAL_MS:.0f} ms | {'met' if ok else 'not met'} |",
            f"  - create {med['create exec']:.2f} / {med['create shell']:.2f} ms, ready "
            f"{med['ready exec']:.2f} / {med['ready shell']:.2f} ms (exec / shell); "
            f"unshare(1) of the same namespaces {med['unshare']:.2f} ms",
        ]
        if base:
            bex, bsh = med["base rtax exec"], med["base rtax shell"]
            pairs = ", ".join(
                "/".join(
                    f"{g[f'rtax {ch}'] - g[f'base rtax {ch}']:+.2f}" for ch in ("exec", "shell")
                )
                for g in rounds
            )
            out.append(
                f"  - base tree: {bex:.2f} / {bsh:.2f} ms (create {med['base create exec']:.2f} / "
                f"{med['base create shell']:.2f}, ready {med['base ready exec']:.2f} / "
                f"{med['base ready shell']:.2f}); this - base per round (exec/shell) {pairs}"
            )
        return out
    s, mb = REPORT_GOAL
    ok = med["rtax"] <= s and med["rss"] <= mb
    out = [
        f"| `rtax report` of 1M events / `wc -l` | {med['rtax']:.2f} s, {med['rss']:.0f} MB "
        f"| {med['floor']:.3f} s | **{med['rtax'] / med['floor']:.0f}x** "
        f"| <= {s:.1f} s, <= {mb:.0f} MB | {'met' if ok else 'not met'} |",
        f"  - CPU {med['cpu']:.2f} s",
    ]
    if base:
        ratio = med["rtax"] / med["base"]
        out.append(f"  - base tree: {med['base']:.2f} s (this / base {ratio:.2f})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every row (default 3)")
    ap.add_argument("--loop", default="uvloop", help="the engine's loop: uvloop, asyncio")
    ap.add_argument(
        "--base",
        metavar="TREE",
        help="also run this checkout's rtax (local, stage, report)",
    )
    g = ap.add_argument_group("local")
    g.add_argument("--runs", type=int, default=1000, help="hyperfine and layer runs (1000)")
    g.add_argument("--trials", type=int, default=10, help="trials of the engine's run (10)")
    g.add_argument("--actions", type=int, default=100, help="`true` actions a trial (100)")
    g = ap.add_argument_group("ssh")
    g.add_argument("--ssh-trials", type=int, default=10, help="trials (10)")
    g.add_argument("--ssh-actions", type=int, default=20, help="actions a trial (20)")
    g.add_argument("--ssh-bare", type=int, default=200, help="bare round trips (200)")
    g = ap.add_argument_group("stage")
    g.add_argument("--stage-trials", type=int, default=20, help="trials a channel (20)")
    g.add_argument("--stage-runs", type=int, default=100, help="hyperfine runs of a floor (100)")
    g = ap.add_argument_group("report")
    g.add_argument("--events", type=int, default=1_000_000, help="events generated (1M)")
    args = ap.parse_args()
    chosen = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in chosen if r not in ROWS]
    if bad:
        ap.error(f"no row {bad[0]!r} (rows: {', '.join(ROWS)})")
    makers: dict[str, Callable[[argparse.Namespace], Local | SSH | Stage | Report]] = {
        "local": Local, "ssh": SSH, "stage": Stage, "report": Report,
    }  # fmt: skip
    rows = {}
    for r in chosen:
        row = makers[r](args)
        why = row.why_not()
        if why:
            print(f"{r}: skipped ({why})")
            if hasattr(row, "close"):
                row.close()
            continue
        rows[r] = row
    got: dict[str, list[Got]] = {r: [] for r in rows}
    loads = [os.getloadavg()[0]]
    t0 = time.monotonic()
    try:
        for row in rows.values():
            if hasattr(row, "setup"):
                row.setup()
        for n in range(args.rounds):
            order = list(rows) if n % 2 == 0 else list(rows)[::-1]
            for r in order:
                g1 = rows[r].round()
                got[r].append(g1)
                print(f"round {n + 1} {r}: " + ", ".join(
                    f"{k} {v:.3f}" for k, v in g1.items()), flush=True)  # fmt: skip
            loads.append(os.getloadavg()[0])
    finally:
        for row in rows.values():
            if hasattr(row, "close"):
                row.close()
    print(
        f"\n{args.rounds} rounds in {time.monotonic() - t0:.0f} s, medians over rounds; "
        f"1-minute load {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores; "
        f"loop {args.loop}\n"
    )
    print("| figure | rtax | floor | ratio | goal | |")
    print("|---|---|---|---|---|---|")
    lines: list[str] = []
    for r, rounds in got.items():
        med = {k: statistics.median(g[k] for g in rounds) for k in rounds[0]}
        table, *parts = summary(r, med, rounds, bool(args.base))
        print(table)
        lines += [f"{r}:", *parts]
    print()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
