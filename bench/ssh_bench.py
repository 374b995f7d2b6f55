"""Remote-host benchmark: what SSH adds to an action, and trials per second over 3 hosts.

    python3 bench/ssh_bench.py [--trials 30] [--actions 20] [--cap-trials 40] [--rounds 3]

Needs root, openssh-server and iproute2: it starts its own sshd on loopback and in a
network namespace (tests/sshhosts.py) and removes them at the end. Prints figures;
asserts nothing.

1. Per-action latency of `true` (rtax run, driver `local`, 20 `true` actions a trial,
   concurrency 1): local vs SSH-on-loopback, exec and shell channels. Target: the
   shell channel over SSH within 1.5x of the local shell channel. Checked a second
   way with bare asyncssh on the same server: `conn.run("true")` and a round trip on
   one open shell channel, against which the engine's SSH shell action is put as a
   ratio (issue 26's target: 1.2x); on that same shell, rtax's framing as it is and
   with the two per-action remote clock reads it had before issue 26, interleaved.
2. Trials per second sustained by one run of T0 (`local` driver, both channels) over
   1 local + 2 SSH hosts (loopback, network namespace) with concurrency 8.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sshhosts import SSHLab, missing  # noqa: E402


def rtax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, check=True, cwd=ROOT
    )


def report(path: Path) -> dict:
    return json.loads(rtax("report", str(path), "--format", "json").stdout)


# The frame SSH shell actions had before issue 26: the remote clock read twice around
# the command (dash reads /proc/timer_list's third line a byte at a time), kept here
# only to measure what dropping it saved.
_OLD_CLOCK = "{ \\read _r _r; \\read _r _r; \\read _r _r %s _r; } 2>/dev/null </proc/timer_list"


def _old_frame_timed(argv, sentinel: str) -> bytes:
    """rtax's frame with the two clock reads in front of it (both inside the measured round
    trip, as they were around the command). Until issue 42 this column put `_TAIL` in
    unformatted (no shell parses it) and set the module's `frame`, which a FramedShell
    made before never used: the column measured the plain frame."""
    from rtax_tui.drivers.toolkit.shellframe import frame

    t0 = _OLD_CLOCK % "__rtax_t0"
    t1 = _OLD_CLOCK % "__rtax_t1"
    return (
        f"__rtax_t0=; __rtax_t1=; \\unset -f read; {t0}; {t1}; "
        f'__rtax_d="$(( ${{__rtax_t1:-0}} - ${{__rtax_t0:-0}} ))"\n'  # computed, as it was
    ).encode() + frame(argv, sentinel)


async def bare_asyncssh(lab: SSHLab, n: int) -> tuple[float, float, float, float]:
    """Median ms of `conn.run("true")`, of one bare round trip on an open shell, and on
    the same shell of rtax's framing (drivers/toolkit/shellframe.py) as it is and with the
    two per-action remote clock reads of before issue 26, interleaved with the bare round
    trip so that load falls on all three alike: what each layer adds over the bare one."""
    import asyncssh
    from rtax_tui.drivers.toolkit import shellframe
    from rtax_tui.drivers.toolkit.shellframe import FramedShell

    h = lab.hosts[0]
    conn = await asyncssh.connect(
        h.address, port=h.port, username=lab.user, client_keys=[lab.identity],
        known_hosts=lab.known_hosts,
    )  # fmt: skip
    try:
        execs = []
        for _ in range(n):
            t = time.monotonic_ns()
            await conn.run("true")
            execs.append((time.monotonic_ns() - t) / 1e6)
        # the shell as the local driver starts it: its own stderr stays on the host
        proc = await conn.create_process("exec sh 2>/dev/null", encoding=None)
        shells = []
        framed: dict[bool, list[float]] = {False: [], True: []}
        # `frame_apart` where it exists (the local driver sent it for a while in issue 42;
        # it sends `frame` again since the red team: docs/boundaries.md)
        apart = {"stderr_apart": True} if hasattr(shellframe, "frame_apart") else {}
        shell_fr = FramedShell(proc.stdin, proc.stdout, **apart)
        plain = shell_fr._frame
        for _ in range(n):  # interleaved, so that load falls on all alike
            t = time.monotonic_ns()
            proc.stdin.write(b"true; echo __x $?\n")
            await proc.stdout.readuntil(b"__x 0\n")
            shells.append((time.monotonic_ns() - t) / 1e6)
            for timed in framed:
                # on the instance: FramedShell takes its frame when it is made
                shell_fr._frame = _old_frame_timed if timed else plain
                t = time.monotonic_ns()
                await shell_fr.run(("true",))
                framed[timed].append((time.monotonic_ns() - t) / 1e6)
            shell_fr._frame = plain
        proc.stdin.write_eof()
        await proc.wait()
    finally:
        conn.close()
    return (
        statistics.median(execs),
        statistics.median(shells),
        statistics.median(framed[False]),
        statistics.median(framed[True]),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--actions", type=int, default=20)
    ap.add_argument(
        "--cap-trials", type=int, default=40, help="T0 trials per cell in part 2 (0: skip it)"
    )
    ap.add_argument("--rounds", type=int, default=3, help="bare/engine rounds in part 1")
    args = ap.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="rtax-sshbench-"))
    lab = SSHLab()
    try:
        lo = lab.serve_loopback()
        ns = lab.serve_netns(0)
        flags = ["--identity", lab.identity, "--known-hosts", lab.known_hosts]

        # 1. per-action latency
        prof = tmp / "truex.toml"
        steps = ", ".join(['{argv = ["true"]}'] * args.actions)
        prof.write_text(
            f'[run]\ntrials = {args.trials}\nwarmup = 3\ndrivers = ["local"]\n'
            f'workloads = ["truex"]\nchannels = ["exec", "shell"]\nconcurrency = 1\n'
            f"[workloads.truex]\nsteps = [{steps}]\n"
        )
        out = tmp / "truex.jsonl"
        rtax("run", str(prof), "--host", f"local,{lo.url}", *flags, "-o", str(out))
        rep = report(out)
        p50 = {(c["host"], c["channel"]): c["phases"]["action"]["p50_ms"] for c in rep["cells"]}
        net = json.loads(out.read_text().splitlines()[0])["hosts"][lo.name]["net"]
        print(
            f"1. action `true`, P50 ms ({args.trials} trials x {args.actions} actions, "
            "driver local, concurrency 1)"
        )
        print(f"   {'':24} {'exec':>8} {'shell':>8}")
        for host, label in (("local", "local"), (lo.name, "ssh loopback")):
            print(f"   {label:24} {p50[(host, 'exec')]:8.3f} {p50[(host, 'shell')]:8.3f}")
        ratio = p50[(lo.name, "shell")] / p50[("local", "shell")]
        print(
            f"   ssh shell / local shell = {ratio:.2f}x (target <= 1.5x: "
            f"{'met' if ratio <= 1.5 else 'NOT met'}); "
            f"ssh exec / ssh shell = {p50[(lo.name, 'exec')] / p50[(lo.name, 'shell')]:.1f}x"
        )
        print(
            f"   network cost recorded for the ssh host: connect {net['connect_ms']:.1f} ms, "
            f"empty command {net['exec_rtt_ms']:.2f} ms"
        )
        # 1b. the engine's SSH shell action against a bare round trip, in rounds: a bare
        # measurement (with the framings interleaved), a run of the ssh host's shell cell,
        # a bare measurement again; the ratio is to the mean of the two bare medians
        sprof = tmp / "truesh.toml"
        sprof.write_text(
            prof.read_text().replace('channels = ["exec", "shell"]', 'channels = ["shell"]')
        )
        print(
            f"   second way, bare asyncssh on the same sshd ({args.rounds} rounds; each "
            "200 round trips before and after a run of the ssh shell cell, medians; ms):"
        )
        print(
            f"   {'round':>5} {'run()':>8} {'bare':>8} {'framing':>8} {'+clock':>8} "
            f"{'engine':>8} {'engine/bare':>12}"
        )
        rows = []
        clocks: list[dict] = []
        for r in range(args.rounds):
            before = asyncio.run(bare_asyncssh(lab, 200))
            sout = tmp / f"truesh{r}.jsonl"
            rtax("run", str(sprof), "--host", lo.url, *flags, "-o", str(sout))
            after = asyncio.run(bare_asyncssh(lab, 200))
            engine = report(sout)["cells"][0]["phases"]["action"]["p50_ms"]
            mean = [(a + b) / 2 for a, b in zip(before, after, strict=True)]
            rows.append((*mean, engine, engine / mean[1]))
            print(
                f"   {r + 1:5d} {mean[0]:8.3f} {mean[1]:8.3f} {mean[2]:8.3f} {mean[3]:8.3f} "
                f"{engine:8.3f} {engine / mean[1]:11.2f}x"
            )
            clocks += [
                json.loads(line)
                for line in sout.read_text().splitlines()
                if '"type":"clock"' in line
            ]
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(
            f"   {'P50':>5} {med[0]:8.3f} {med[1]:8.3f} {med[2]:8.3f} {med[3]:8.3f} "
            f"{med[4]:8.3f} {med[5]:11.2f}x"
        )
        print(
            f"   framing / bare {med[2] / med[1]:.2f}x; with the per-action remote clock reads "
            f"of before issue 26 {med[3] / med[1]:.2f}x; the engine's SSH shell action "
            f"{med[5]:.2f}x the bare round trip (target <= 1.2x: "
            f"{'met' if med[5] <= 1.2 else 'NOT met'})"
        )
        if clocks:
            print(
                f"   the ssh host's clock: {len(clocks)} syncs over {args.rounds} runs, bound "
                f"{statistics.median(c['err_ns'] for c in clocks) / 1e3:.1f} us (median), "
                f"quickest round trip {min(c['rtt_ns'] for c in clocks) / 1e3:.1f} us"
            )

        # 2. trials per second over three hosts
        if args.cap_trials <= 0:
            return 0
        out2 = tmp / "t0.jsonl"
        hosts = f"local,{lo.url},{ns.url}"
        t = time.monotonic()
        rtax(
            "run", "t0", "--host", hosts, *flags, "--driver", "local", "--channel",
            "exec,shell", "--trials", str(args.cap_trials), "--warmup", "0",
            "--concurrency", "8", "-o", str(out2),
        )  # fmt: skip
        wall = time.monotonic() - t
        events = [json.loads(line) for line in out2.read_text().splitlines()]
        ends = [e for e in events if e["type"] == "trial_end"]
        run_s = events[-1]["t_ns"] / 1e9
        starts = {e["trial"]: e["host"] for e in events if e["type"] == "trial_start"}
        per_host: dict[str, int] = {}
        for e in ends:
            if e["ok"]:
                per_host[starts[e["trial"]]] = per_host.get(starts[e["trial"]], 0) + 1
        ok = sum(per_host.values())
        print(
            f"2. T0, driver local, exec+shell, 1 local + 2 ssh hosts, concurrency 8: "
            f"{len(ends)} trials ({ok} ok) in {run_s:.2f} s of run "
            f"({wall:.2f} s with start-up) = {ok / run_s:.1f} trials/s"
        )
        for host, n in per_host.items():
            print(f"   {host}: {n} ok")
        rep2 = report(out2)
        for c in rep2["cells"]:
            ph = c["phases"]
            print(
                f"   {c['cell']:48} total P50 {ph['total']['p50_ms']:7.2f} ms  "
                f"create {ph['create']['p50_ms']:6.2f}  teardown {ph['teardown']['p50_ms']:6.2f}"
            )
    finally:
        lab.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
