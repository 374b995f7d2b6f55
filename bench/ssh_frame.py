"""The shell frame over SSH, per action, against the bare round trip on the same shell.

    python3 bench/ssh_frame.py [--actions 400] [--rounds 5]

Needs root and openssh-server: it starts its own sshd on loopback (tests/sshhosts.py) and
removes it at the end. One remote shell, started as the local driver starts it (`sh` with
its stderr on the host's /dev/null, read-write), read through rtax's own channel reader.
Per action, interleaved so that load falls on all alike: a bare `true; echo __x $?`
round trip, `true` in the hardened frame as every driver sends it (`shellframe.frame`:
the tail's own `2>/dev/null`, the step's stdin a new open of /dev/null), and in the frame
the local driver sends since issue 42 (`frame_apart`), the order of the two alternating.
Prints each round's medians (µs) and the median of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sshhosts import SSHLab, missing  # noqa: E402


async def rounds(lab: SSHLab, actions: int, n: int) -> dict[str, list[float]]:
    import asyncssh
    from rtax_tui.drivers.toolkit.shellframe import FramedShell

    from rtax_tui.hosts.ssh import _Reader, _Writer

    h = lab.hosts[0]
    conn = await asyncssh.connect(
        h.address, port=h.port, username=lab.user, client_keys=[lab.identity],
        known_hosts=lab.known_hosts,
    )  # fmt: skip
    try:
        proc = await conn.create_process("exec sh 2<>/dev/null", encoding=None)
        w, r = _Writer(proc.stdin, h.name), _Reader(proc.stdout, h.name)
        shells = {"frame": FramedShell(w, r), "apart": FramedShell(w, r, stderr_apart=True)}
        got: dict[str, list[float]] = {"bare": [], "frame": [], "apart": []}
        for k in range(n):
            per: dict[str, list[int]] = {name: [] for name in got}
            for i in range(actions):
                t = time.monotonic_ns()
                w.write(b"true; echo __x $?\n")
                await r.readuntil(b"__x 0\n")
                per["bare"].append(time.monotonic_ns() - t)
                for name in ("frame", "apart") if i % 2 else ("apart", "frame"):
                    t = time.monotonic_ns()
                    res = await shells[name].run(("true",))
                    per[name].append(time.monotonic_ns() - t)
                    assert res.rc == 0 and res.output == b""
            for name, v in per.items():
                got[name].append(statistics.median(v) / 1e3)
            b = got["bare"][-1]
            print(
                f"  round {k + 1}: bare {b:.1f}  frame {got['frame'][-1]:.1f} "
                f"({got['frame'][-1] / b:.3f}x)  apart {got['apart'][-1]:.1f} "
                f"({got['apart'][-1] / b:.3f}x)",
                flush=True,
            )
        proc.stdin.write_eof()
        await proc.wait()
        return got
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actions", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}")
        return 1
    lab = SSHLab()
    try:
        lab.serve_loopback()
        print(f"`true` per action over SSH on loopback, µs, {a.rounds} rounds of {a.actions}:")
        got = asyncio.run(rounds(lab, a.actions, a.rounds))
    finally:
        lab.close()
    m = {k: statistics.median(v) for k, v in got.items()}
    print(
        f"  median: bare {m['bare']:.1f}, frame {m['frame']:.1f} ({m['frame'] / m['bare']:.3f}x), "
        f"apart {m['apart']:.1f} ({m['apart'] / m['bare']:.3f}x); "
        f"apart - frame {m['apart'] - m['frame']:+.1f} µs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
