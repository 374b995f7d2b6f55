"""What each part of stage's sandbox costs one sandbox (issue 36): bubblewrap as stage
starts it, and the same with one part taken out.

    sudo python3 bench/bwrap_cost.py [--sandboxes 40] [--rounds 6] [VARIANT ...]

Each variant starts `--sandboxes` sandboxes one after another through rtax-enter's
`--spawn` (the cgroup-less part of what stage runs: the filter, the sandbox uid, the
info descriptor), with stage's own init and shell, stdin at end of file so each exits as
soon as it is set up. Rounds alternate the variants (reversed every other round), so a
busy spell on the machine hits each. Prints per variant the median over rounds of the
wall time of one sandbox and of the CPU it took (the whole process tree's, from a
cgroup v1 cpuacct group this script runs in; "-" where there is none), with the range.

Variants (the argv is `bwrap_argv`'s, edited):
- `stage`: as stage starts a shell-channel sandbox now;
- `no-masks`: without the empty files over /proc/cmdline, kallsyms and keys and the
  empty read-only /usr/local (`_masks`);
- `file-binds`: the init and the shell bound one file at a time (before this change:
  two binds, not one of their directory);
- `7c45ed1`: the shape of 7c45ed1's sandbox: no masks, no init of rtax's (bubblewrap's
  own pid 1, then `sh`), the workspace a bound host directory.
Asserts nothing: the figures are for bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtax_tui.drivers.toolkit import sandbox  # noqa: E402

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _without(argv: list[str], part: list[str]) -> list[str]:
    """`argv` with the contiguous run `part` taken out (it must be there)."""
    for i in range(len(argv) - len(part) + 1):
        if argv[i : i + len(part)] == part:
            return argv[:i] + argv[i + len(part) :]
    raise SystemExit(f"bwrap_cost: {part[:4]} is not in stage's argv any more: update the bench")


def variants(support: sandbox.Support, ws: str) -> dict[str, list[str]]:
    root = sandbox.image_root("/")
    bwrap = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True, text=True)
    exe = bwrap.stdout.strip() or "bwrap"

    def argv(cmd: tuple[str, ...], mib: int | None = 2048) -> list[str]:
        return sandbox.bwrap_argv(
            exe,
            ws,
            cmd,
            workspace_mib=mib,
            root=root,
            etc=support.etc,
            bin_dir=support.bin,
            seccomp_fd=5,
            info_fd=3,
        )

    stage = argv(sandbox.INIT_CMD["shell"])
    masks = sandbox._masks(root, support.etc)
    dir_bind = ["--ro-bind", support.bin, os.path.dirname(sandbox.INIT_BIN)]
    file_binds = ["--ro-bind", f"{support.bin}/init", sandbox.INIT_BIN]
    file_binds += ["--ro-bind", f"{support.bin}/sh", sandbox.SHELL_BIN]
    i = stage.index(dir_bind[0], stage.index(masks[-1]) if masks else 0)
    old = _without(_without(argv(("sh",), None), masks), dir_bind)
    return {
        "stage": stage,
        "no-masks": _without(stage, masks),
        "file-binds": stage[:i] + file_binds + stage[i + len(dir_bind) :],
        "7c45ed1": _without(old, ["--as-pid-1"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sandboxes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("variant", nargs="*")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bwrap_cost: run as root (stage's sandboxes are started by root)")
    support = sandbox.local_support()
    ws = tempfile.mkdtemp(prefix="rtax-bwrap-cost-")
    os.chown(ws, sandbox.DEFAULT_UID, sandbox.DEFAULT_UID)
    table = variants(support, ws)
    chosen = args.variant or list(table)
    unknown = [v for v in chosen if v not in table]
    if unknown:
        raise SystemExit(f"bwrap_cost: no variant {unknown[0]!r} (have: {', '.join(table)})")
    acct = None
    if CPUACCT.is_dir():
        acct = CPUACCT / f"rtax-bwrap-cost-{os.getpid()}"
        acct.mkdir()
        (acct / "tasks").write_text(str(os.getpid()))
    wall: dict[str, list[float]] = {v: [] for v in chosen}
    cpu: dict[str, list[float]] = {v: [] for v in chosen}
    try:
        for r in range(args.rounds):
            for v in chosen if r % 2 == 0 else chosen[::-1]:
                cmd = sandbox.spawn_argv(support, sandbox.DEFAULT_UID, (), table[v], info=True)
                c0 = int((acct / "cpuacct.usage").read_text()) if acct else 0
                t0 = time.monotonic_ns()
                for _ in range(args.sandboxes):
                    subprocess.run(
                        cmd,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        check=True,
                        cwd="/",
                    )
                t1 = time.monotonic_ns()
                c1 = int((acct / "cpuacct.usage").read_text()) if acct else 0
                wall[v].append((t1 - t0) / args.sandboxes / 1e6)
                cpu[v].append((c1 - c0) / args.sandboxes / 1e6)
    finally:
        os.rmdir(ws)
        if acct is not None:
            (Path("/sys/fs/cgroup/cpuacct/tasks")).write_text(str(os.getpid()))
            acct.rmdir()
    print(f"one sandbox, {args.sandboxes} a round, {args.rounds} rounds (median, range):")
    for v in chosen:
        c = (
            f"cpu {statistics.median(cpu[v]):.2f} ms ({min(cpu[v]):.2f}-{max(cpu[v]):.2f})"
            if acct
            else "cpu -"
        )
        print(
            f"  {v:11s} wall {statistics.median(wall[v]):.2f} ms "
            f"({min(wall[v]):.2f}-{max(wall[v]):.2f}), {c}"
        )


if __name__ == "__main__":
    main()
