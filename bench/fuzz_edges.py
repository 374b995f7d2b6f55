"""A fuzz pass over the edges of the process (issue 35): standard streams that fail, paths
that cannot be named or written, and stop signals in a run's first moments.

Three kinds of case, drawn from one seeded random generator:

- streams: a command that prints (report in every format, compare, project, traj inspect)
  run in this process (`rtax_tui.commands.cli.main`) with a stdout whose writes fail
  with EPIPE, ENOSPC, EBADF or EIO after a random number of bytes. Expected: status 0
  (all of it fitted), 141 and nothing on stderr (EPIPE), or 1 and one line.
- paths: a random path (components: too long, `..`, a dangling link, a directory, a
  file, a read-only file system, a full 12 KiB tmpfs, random text with newlines and
  other control characters) given in this process to report, compare, traj inspect,
  project --steps-from, run PROFILE, traj prepare -o and plot -o. Expected: status 0 or
  2, one line on stderr; no `.part` file left anywhere; an output that exists is whole
  (a recording reads back to its `run_end`, a figure ends as an SVG or PNG ends).
- signals: a real `python -m rtax_tui run t0 --driver local` sent SIGTERM, SIGHUP or
  SIGINT at a random instant in its first 0.6 s after its handlers are installed.
  Expected: status 130 (or 0 when it finished first), no traceback, the recording absent
  or readable (never empty), no temporary file left.

Prints, per kind, the cases run and the counts of tracebacks, unexpected statuses, extra
stderr lines, empty recordings and partial files. The read-only and full file systems
are real tmpfs mounts, made when run as root (else those components are left out).

    python3 bench/fuzz_edges.py --streams 2000 --paths 2000 --signals 200 --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtax_tui.commands import cli  # noqa: E402
from rtax_tui.model.recording import RecordingError, read_recording  # noqa: E402

EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
TRAJ = next((ROOT / "tests" / "data" / "trajectories" / "codex").iterdir())
PRINTERS = [
    ["report", str(EXAMPLE)],
    ["report", str(EXAMPLE), "--format", "json"],
    ["report", str(EXAMPLE), "--format", "markdown"],
    ["report", str(EXAMPLE), "--format", "csv"],
    ["compare", str(EXAMPLE), str(EXAMPLE)],
    ["compare", str(EXAMPLE), str(EXAMPLE), "--format", "json"],
    ["project", str(EXAMPLE)],
    ["project", str(EXAMPLE), "--format", "json"],
    ["traj", "inspect", str(TRAJ)],
    ["traj", "inspect", str(TRAJ), "--format", "json"],
]


class Failing(io.RawIOBase):
    def __init__(self, err: int, after: int) -> None:
        self.err, self.left = err, after

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        if self.left <= 0:
            raise OSError(self.err, os.strerror(self.err))
        took = min(len(b), self.left)  # type: ignore[arg-type]
        self.left -= took
        return took


def run_main(args: list[str], stdout: object) -> tuple[int, str, bool]:
    """(status, stderr, whether an exception escaped main)."""
    old = sys.stdout, sys.stderr
    err = io.StringIO()
    sys.stdout, sys.stderr = stdout, err  # type: ignore[assignment]
    escaped = False
    try:
        status = cli.main(args)
    except SystemExit as exc:
        status = int(exc.code or 0)
    except BaseException as exc:  # what the fuzz counts as a traceback
        escaped = True
        status = -1
        err.write(f"Traceback: {type(exc).__name__}: {exc}\n")
    finally:
        sys.stdout, sys.stderr = old
    return status, err.getvalue(), escaped


def streams(rng: random.Random, n: int) -> Counter[str]:
    c: Counter[str] = Counter()
    for _ in range(n):
        args = rng.choice(PRINTERS)
        e = rng.choice([errno.EPIPE, errno.ENOSPC, errno.EBADF, errno.EIO])
        after = rng.choice([0, 1, rng.randint(0, 200), rng.randint(0, 20000)])
        out = io.TextIOWrapper(io.BufferedWriter(Failing(e, after), rng.choice([1, 512, 8192])))
        status, text, escaped = run_main(args, out)
        c["cases"] += 1
        c["tracebacks"] += escaped or "Traceback" in text
        if status == 0:
            c["fitted"] += 1
        elif e == errno.EPIPE:
            c["unexpected status"] += status != 141
            c["extra stderr"] += text != ""
        else:
            c["unexpected status"] += status != 1
            c["extra stderr"] += text.count("\n") != 1
    return c


@contextlib.contextmanager
def playground() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rtax-fuzz-") as d:
        top = Path(d)
        (top / "dir").mkdir()
        (top / "file").write_text("not a recording\n")
        (top / "dangling").symlink_to(top / "missing" / "x")
        mounts = []
        if os.geteuid() == 0:
            for name, opts in (("ro", "ro,size=64k"), ("full", "size=12k")):
                (top / name).mkdir()
                r = subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", opts, "rtaxfuzz", str(top / name)]
                )
                if r.returncode == 0:
                    mounts.append(top / name)
        try:
            yield top
        finally:
            for m in mounts:
                subprocess.run(["umount", "-l", str(m)], check=False)


def component(rng: random.Random, top: Path) -> str:
    kinds = ["a", "..", ".", "dangling", "dir", "file", "x" * 255, "y" * 256, "ro", "full"]
    if rng.random() < 0.4:
        alphabet = "ab./-_ \n\t\x01\x7fé٣\u200b"
        return (
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10))).replace("/", "") or "z"
        )
    return rng.choice(kinds)


def whole(path: Path) -> bool:
    """An output that exists is whole: a recording to its run_end, a figure to its end."""
    data = path.read_bytes()
    if path.suffix == ".svg":
        return data.rstrip().endswith(b"</svg>")
    if path.suffix == ".png":
        return data.endswith(b"IEND\xaeB`\x82")
    try:
        return read_recording(path).end is not None
    except RecordingError:
        return False


def paths(rng: random.Random, n: int) -> Counter[str]:
    c: Counter[str] = Counter()
    with playground() as top:
        for i in range(n):
            p = top.joinpath(*(component(rng, top) for _ in range(rng.randint(1, 3))))
            use = rng.choice(
                ["report", "compare", "traj", "steps", "profile", "prepare-o", "plot-o"]
            )
            if use in ("prepare-o", "plot-o") and rng.random() < 0.5:
                p = top / rng.choice(["ro", "full", "dir", "dangling", "."]) / f"out{i}"
            out = (
                Path(f"{p}.svg" if use == "plot-o" and rng.random() < 0.5 else f"{p}.png")
                if use == "plot-o"
                else p
            )
            args = {
                "report": ["report", str(p)],
                "compare": ["compare", str(p), str(EXAMPLE)],
                "traj": ["traj", "inspect", str(p)],
                "steps": ["project", str(EXAMPLE), "--steps-from", str(p)],
                "profile": ["run", f"{p}.toml", "--headless"],
                "prepare-o": [
                    "traj",
                    "prepare",
                    str(TRAJ),
                    "-o",
                    str(p),
                    "--repeat",
                    "1",
                    "--max-prefixes",
                    "3",
                ],
                "plot-o": ["plot", str(EXAMPLE), "--kind", "cdf", "-o", str(out)],
            }[use]
            target = out if use == "plot-o" else p
            try:
                before = os.path.lexists(target)
            except (OSError, ValueError):
                before = True
            status, text, escaped = run_main(args, io.StringIO())
            c["cases"] += 1
            c["tracebacks"] += escaped or "Traceback" in text
            c["unexpected status"] += status not in (0, 2)
            if status == 2:
                c["extra stderr"] += text.count("\n") != 1
            if use in ("prepare-o", "plot-o") and not before:  # a file this case made
                try:
                    exists = target.is_file() and not target.is_symlink()
                except OSError:
                    exists = False
                if status == 0:
                    c["written"] += 1
                if exists:
                    cut = not whole(target)
                    c["partial files"] += cut
                    if cut:
                        print(f"  partial: {args} -> {status} {text.strip()!r}", flush=True)
                    target.unlink()
            for left in top.rglob("*.part"):
                c["partial files"] += 1
                print(f"  left: {left} after {args} -> {status} {text.strip()!r}", flush=True)
                left.unlink()
    return c


def handles_term(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def signals(rng: random.Random, n: int) -> Counter[str]:
    c: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="rtax-fuzz-sig-") as d:
        for i in range(n):
            out = Path(d) / f"r{i}.jsonl"
            sig = rng.choice([signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
            delay = rng.uniform(0, 0.6)
            p = subprocess.Popen(
                [sys.executable, "-m", "rtax_tui", "run", "t0", "--driver", "local",
                 "--trials", "2", "--warmup", "0", "-o", str(out), "--quiet"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=d,
            )  # fmt: skip
            deadline = time.monotonic() + 30
            while not handles_term(p.pid) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(delay)
            p.send_signal(sig)
            _, err = p.communicate(timeout=300)
            c["cases"] += 1
            c["tracebacks"] += b"Traceback" in err
            if p.returncode not in (130, 0):
                c["unexpected status"] += 1
                print(
                    f"  status {p.returncode}: {sig.name} at {delay:.3f} s: {err.decode()[-300:]!r}"
                )
            c["completed first"] += p.returncode == 0
            if out.exists():
                c["kept"] += 1
                if out.stat().st_size == 0:
                    c["empty recordings"] += 1
                else:
                    try:
                        read_recording(out)
                    except RecordingError:
                        c["unreadable recordings"] += 1
            c["partial files"] += sum(1 for _ in Path(d).glob("*.part"))
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--paths", type=int, default=2000)
    ap.add_argument("--signals", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    total: Counter[str] = Counter()
    for name, fn, n in (("streams", streams, a.streams), ("paths", paths, a.paths),
                        ("signals", signals, a.signals)):  # fmt: skip
        t0 = time.monotonic_ns()
        got = fn(rng, n)
        s = (time.monotonic_ns() - t0) / 1e9
        print(f"{name}: {dict(sorted(got.items()))} ({s:.0f} s)", flush=True)
        total.update({k: v for k, v in got.items() if k in BAD or k == "cases"})
    print(f"total: {dict(sorted(total.items()))}")
    return 1 if any(total[k] for k in BAD) else 0


BAD = ("tracebacks", "unexpected status", "extra stderr", "empty recordings",
       "unreadable recordings", "partial files")  # fmt: skip

if __name__ == "__main__":
    raise SystemExit(main())
