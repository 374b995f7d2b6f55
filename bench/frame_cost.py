"""What the hardened shell frame (issue 34, H7) costs per step, against the frame before it.

    python3 bench/frame_cost.py [--steps 2000] [--rounds 5] [--shell sh] [--aged 20000]

Three frames: the one before issue 34, the hardened one, and the hardened one as the local
driver sends it since issue 42 ("apart": the shell's stderr on /dev/null, so the frame
redirects less).

One persistent shell (`sh`: dash here) driven by rtax's FramedShell over pipes, as the
local driver drives it; the step is `true`. Rounds alternate the two frames on the same
shell so that load falls on both alike; each round's figure is the mean of its steps
(time.monotonic_ns around `FramedShell.run`), and the median of the rounds is printed.
Then the hardened frame again after `--aged` earlier steps' statuses are kept in the
shell (each step leaves one readonly variable): what a long session costs. Then the race
the hardening closes: a trap that sets `$1` on a signal a background process keeps
sending, and how many of `--steps` failing steps each frame recorded as a success.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtax_tui.drivers.toolkit import shellframe  # noqa: E402
from rtax_tui.drivers.toolkit.shellframe import FramedShell  # noqa: E402

OLD_TAIL = '\\set -- "$?"; \\unset -f printf read; '


def old_frame(argv: Sequence[str], sentinel: str) -> bytes:
    """The frame before issue 34 (status in `$1`, no trap reset, traced by -x)."""
    cmd = shlex.join(argv)
    return (
        f"{{ {cmd}\n}} </dev/null 2>&1; {OLD_TAIL}\\printf '\\n%s %d\\n' {sentinel} \"$1\"\n"
    ).encode()


# "apart": the hardened frame as the local driver sends it since issue 42, to a shell
# whose stderr is /dev/null (read-write): no redirection of the tail's own, the step's
# stdin a copy of that /dev/null (shellframe.frame_apart)
FRAMES = {"before": old_frame, "hardened": shellframe.frame, "apart": shellframe.frame_apart}


async def shell(sh: str, apart: bool = False) -> tuple[asyncio.subprocess.Process, FramedShell]:
    err = subprocess.DEVNULL if apart else subprocess.STDOUT
    proc = await asyncio.create_subprocess_exec(
        sh, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
    )
    assert proc.stdin is not None and proc.stdout is not None
    return proc, FramedShell(proc.stdin, proc.stdout, stderr_apart=apart)


async def close(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def per_step(fs: FramedShell, n: int) -> float:
    """Mean µs of `n` steps of `true`."""
    t = time.monotonic_ns()
    for _ in range(n):
        res = await fs.run(("true",))
        assert res.rc == 0
    return (time.monotonic_ns() - t) / n / 1e3


async def cost(sh: str, steps: int, rounds: int) -> dict[str, float]:
    got: dict[str, list[float]] = {k: [] for k in FRAMES}
    for name, fr in FRAMES.items():  # a fresh shell per frame, warmed up
        proc, fs = await shell(sh, name == "apart")
        fs._frame = fr
        await per_step(fs, 200)
        await close(proc)
    for _ in range(rounds):
        for name, fr in FRAMES.items():
            proc, fs = await shell(sh, name == "apart")
            fs._frame = fr
            got[name].append(await per_step(fs, steps))
            await close(proc)
    return {k: statistics.median(v) for k, v in got.items()}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


async def aged(sh: str, steps: int, before: int) -> tuple[float, float, int, int]:
    """µs/step of the hardened frame and the shell's RSS (KiB), in a fresh shell and
    after `before` more steps: nothing a frame leaves may pile up."""
    proc, fs = await shell(sh)
    fresh = await per_step(fs, steps)
    rss0 = rss_kib(proc.pid)
    await per_step(fs, before)
    old = await per_step(fs, steps)
    rss1 = rss_kib(proc.pid)
    await close(proc)
    return fresh, old, rss0, rss1


KILLER = "( while kill -s WINCH $$ 2>/dev/null; do :; done ) </dev/null >/dev/null 2>&1 &"
# the trap is set again each step: the hardened frame resets every trap after a step
ARMED_FALSE = "trap 'set -- 0' WINCH; /bin/false"


async def race(sh: str, steps: int) -> dict[str, int]:
    """Failing steps recorded as rc 0 while a trap that sets `$1` keeps firing."""
    forged = {}
    for name, fr in FRAMES.items():
        proc, fs = await shell(sh, name == "apart")
        fs._frame = fr
        await fs.run(("eval", KILLER))
        n = 0
        for _ in range(steps):
            res = await fs.run(("eval", ARMED_FALSE))
            n += res.rc == 0
        forged[name] = n
        proc.kill()  # the killer's `kill` fails then, and it ends
        await proc.wait()
    return forged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shell", default="sh")
    ap.add_argument("--aged", type=int, default=20000)
    a = ap.parse_args()
    c = asyncio.run(cost(a.shell, a.steps, a.rounds))
    print(f"per step, `true`, {a.shell}, median of {a.rounds} rounds of {a.steps}:")
    for k, v in c.items():
        print(f"  {k:9s} {v:8.1f} µs")
    print(f"  hardened - before: {c['hardened'] - c['before']:+.1f} µs")
    print(f"  apart - hardened: {c['apart'] - c['hardened']:+.1f} µs")
    fresh, old, rss0, rss1 = asyncio.run(aged(a.shell, a.steps, a.aged))
    print(
        f"hardened, fresh shell {fresh:.1f} µs/step, RSS {rss0} KiB; "
        f"after {a.aged} more steps {old:.1f} µs/step, RSS {rss1} KiB"
    )
    forged = asyncio.run(race(a.shell, a.steps))
    print(f"a trap setting $1 on a signal sent nonstop, {a.steps} failing steps, forged:")
    for k, v in forged.items():
        print(f"  {k:9s} {v}")


if __name__ == "__main__":
    main()
