"""Prefix preparation, timed: rebuild a validated history prefix of a trajectory with no
tool executed and the workspace unchanged (checked with a hash before and after).

For each trajectory and prefix length k, one timed sample covers reading the file from
disk, detecting its format, parsing it, normalizing it, and validating the first k steps
with their arguments and observations exactly as recorded. Each sample is a `prep` event
of an rtax/1 recording.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtax_tui.engine.traj import find_trajectories, read_trajectories
from rtax_tui.engine.traj.model import KINDS, Trajectory, TrajError

DEFAULT_MAX_PREFIXES = 60


def prefix_lengths(n: int, max_prefixes: int = DEFAULT_MAX_PREFIXES) -> list[int]:
    """Every k in 1..n, or `max_prefixes` of them spread evenly (n always included)."""
    if n <= 0:
        return [0]
    if n <= max_prefixes:
        return list(range(1, n + 1))
    return sorted({max(1, round(j * n / max_prefixes)) for j in range(1, max_prefixes + 1)})


def validate_prefix(traj: Trajectory, k: int) -> list[tuple[Any, str | None]]:
    """The history up to step k as (arguments, observation), exactly as recorded; raises
    TrajError where a step breaks the normalized shape."""
    if k > len(traj.steps):
        raise TrajError(f"{traj.path}:1: prefix {k} is longer than its {len(traj.steps)} steps")
    history: list[tuple[Any, str | None]] = []
    seen: set[str] = set()
    for n, s in enumerate(traj.steps[:k]):
        where = f"{traj.path}:{s.line or 1}: step {n}"
        if s.i != n or s.kind not in KINDS:
            raise TrajError(f"{where}: index or kind out of shape")
        if s.kind == "shell" and (not isinstance(s.command, str) or not s.command.strip()):
            raise TrajError(f"{where}: a shell step without a command")
        if s.exit_code is not None and not isinstance(s.exit_code, int):
            raise TrajError(f"{where}: exit code {s.exit_code!r} is not an integer")
        if s.output is not None and not isinstance(s.output, str):
            raise TrajError(f"{where}: output is not text")
        if s.output is not None and not s.paired:
            raise TrajError(f"{where}: an output without a result")
        if s.call_id is not None:
            if s.call_id in seen:
                raise TrajError(f"{where}: call id {s.call_id} twice")
            seen.add(s.call_id)
        history.append((s.args if s.kind != "shell" else s.command, s.output))
    return history


def tree_digest(paths: Iterable[Path]) -> str:
    """sha256 over every file under `paths`: relative name, mode, size and content."""
    h = hashlib.sha256()
    for root in sorted(set(paths)):
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            st = f.stat()
            h.update(f"{f}\0{st.st_mode}\0{st.st_size}\0".encode())
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
    return h.hexdigest()


@dataclass
class PrepTask:
    path: Path
    index: int  # which trajectory of the file (an eval output.jsonl holds several)
    fmt: str
    steps: int
    k: int
    rep: int


# the most samples one `rtax traj prepare` takes (each is a PrepTask in memory)
SAMPLES_MAX = 1_000_000


def plan_tasks(
    paths: list[str], repeat: int, shuffle: bool, seed: int, max_prefixes: int
) -> tuple[list[PrepTask], list[Trajectory]]:
    tasks: list[PrepTask] = []
    trajs: list[Trajectory] = []
    for p in find_trajectories(paths):
        for idx, t in enumerate(read_trajectories(p)):
            trajs.append(t)
            lengths = prefix_lengths(len(t.steps), max_prefixes)
            if len(tasks) + len(lengths) * repeat > SAMPLES_MAX:  # before the list grows
                raise TrajError(
                    f"{p}:1: more than {SAMPLES_MAX} samples (prefixes x --repeat); "
                    "lower --repeat or --max-prefixes"
                )
            for k in lengths:
                for rep in range(repeat):
                    tasks.append(PrepTask(p, idx, t.format, len(t.steps), k, rep))
    if not tasks:
        raise TrajError(f"{' '.join(paths)}:1: no trajectory found")
    if shuffle:
        random.Random(seed).shuffle(tasks)
    return tasks, trajs


def time_prefix(task: PrepTask) -> tuple[int, int]:
    """(duration ns, shell steps in the prefix) of one preparation."""
    t0 = time.monotonic_ns()
    traj = read_trajectories(task.path)[task.index]
    history = validate_prefix(traj, task.k)
    dur = time.monotonic_ns() - t0
    if len(history) != task.k:  # pragma: no cover - validate_prefix guarantees it
        raise TrajError(f"{task.path}:1: prefix {task.k} rebuilt with {len(history)} steps")
    return dur, sum(1 for s in traj.steps[: task.k] if s.kind == "shell")


def run_prepare(
    paths: list[str],
    *,
    repeat: int = 3,
    shuffle: bool = False,
    seed: int = 0,
    max_prefixes: int = DEFAULT_MAX_PREFIXES,
    workspace: Path | None = None,
    emit: Callable[[dict[str, Any]], None],
    clock0: int | None = None,
    tasks: list[PrepTask] | None = None,
) -> dict[str, Any]:
    """Time every (trajectory, k, repeat) (`tasks`, or those planned from `paths`); `emit`
    gets one `prep` event each. Returns {"samples", "unchanged", "digest_before",
    "digest_after"}."""
    start = time.monotonic_ns() if clock0 is None else clock0
    if tasks is None:
        tasks, _ = plan_tasks(paths, repeat, shuffle, seed, max_prefixes)
    watched = {t.path for t in tasks} | ({workspace} if workspace is not None else set())
    before = tree_digest(watched)
    for t in tasks:
        dur, shell = time_prefix(t)
        emit(
            {
                "type": "prep",
                "t_ns": time.monotonic_ns() - start,
                "file": str(t.path) if t.index == 0 else f"{t.path}#{t.index}",
                "format": t.fmt,
                "k": t.k,
                "steps": t.steps,
                "shell": shell,
                "rep": t.rep,
                "dur_ns": dur,
                "ok": True,
            }
        )
    after = tree_digest(watched)
    return {
        "samples": len(tasks),
        "unchanged": before == after,
        "digest_before": before,
        "digest_after": after,
    }
