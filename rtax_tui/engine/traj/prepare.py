"""Prefix preparation, timed: rebuild a validated history prefix of a trajectory with no
tool executed and the workspace unchanged (checked with a hash before and after).

Two ways to take a sample (`--mode`), each a `prep` event of an rtax/1 recording:

- `file` (the default): each (trajectory, k) sample is timed alone from the file: read it
  from disk, detect its format from the content, parse and normalize the whole of it
  (every line: a step's result and, in Codex, its `exec_command_end` may come anywhere
  after it), check every step's types, then validate the first k steps with their
  arguments and observations as recorded. Nothing is carried between samples but the
  page cache. This is the figure to set beside pVisor's, which includes reading and
  parsing for each prefix.
- `view`: the file is read, detected, parsed, normalized and checked once per
  (file, repetition), timed (`parse_ns`); each of its prefixes is then a view on that one
  parse, validated in O(k) with no copy of the steps (`view_ns`). A sample's `dur_ns` is
  its `view_ns` plus its share of the one parse, `parse_ns` / the prefixes taken from it
  (every k of every trajectory of the file, as planned), so reading and parsing stay
  inside every sample, counted once per file instead of once per prefix.
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
from rtax_tui.engine.traj.model import KINDS, Step, Trajectory, TrajError

DEFAULT_MAX_PREFIXES = 60
MODES = ("file", "view")  # what one sample times: see the module's docstring


def prefix_lengths(n: int, max_prefixes: int = DEFAULT_MAX_PREFIXES) -> list[int]:
    """Every k in 1..n, or `max_prefixes` of them spread evenly (n always included)."""
    if n <= 0:
        return [0]
    if n <= max_prefixes:
        return list(range(1, n + 1))
    return sorted({max(1, round(j * n / max_prefixes)) for j in range(1, max_prefixes + 1)})


def validate_prefix(traj: Trajectory, k: int) -> list[tuple[Any, str | None]]:
    """The history up to step k as (arguments, observation), exactly as recorded; raises
    TrajError where a step breaks the normalized shape. O(k), no copy of the steps: a
    prefix is a view on the parsed trajectory (the error text is built only on error)."""
    steps = traj.steps
    if k > len(steps):
        raise TrajError(f"{traj.path}:1: prefix {k} is longer than its {len(steps)} steps")
    history: list[tuple[Any, str | None]] = []
    seen: set[str] = set()
    for n in range(k):
        s = steps[n]
        why = _step_problem(s, n, seen)
        if why is not None:
            raise TrajError(f"{traj.path}:{s.line or 1}: step {n}: {why}")
        history.append((s.args if s.kind != "shell" else s.command, s.output))
    return history


def _step_problem(s: Step, n: int, seen: set[str]) -> str | None:
    if s.i != n or s.kind not in KINDS:
        return "index or kind out of shape"
    if s.kind == "shell" and (not isinstance(s.command, str) or not s.command.strip()):
        return "a shell step without a command"
    if s.exit_code is not None and not isinstance(s.exit_code, int):
        return f"exit code {s.exit_code!r} is not an integer"
    if s.output is not None:
        if not isinstance(s.output, str):
            return "output is not text"
        if not s.paired:
            return "an output without a result"
    if s.call_id is not None:
        if s.call_id in seen:
            return f"call id {s.call_id} twice"
        seen.add(s.call_id)
    return None


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
    """(duration ns, shell steps in the prefix) of one preparation from the file."""
    t0 = time.monotonic_ns()
    traj = read_trajectories(task.path)[task.index]
    history = validate_prefix(traj, task.k)
    dur = time.monotonic_ns() - t0
    if len(history) != task.k:  # pragma: no cover - validate_prefix guarantees it
        raise TrajError(f"{task.path}:1: prefix {task.k} rebuilt with {len(history)} steps")
    return dur, _shell(traj, task.k)


def _shell(traj: Trajectory, k: int) -> int:
    return sum(1 for n in range(k) if traj.steps[n].kind == "shell")


@dataclass
class ViewSample:
    task: PrepTask
    dur_ns: int  # view_ns + this prefix's share of parse_ns
    parse_ns: int  # the one parse its group shares
    view_ns: int
    shell: int


def view_groups(tasks: list[PrepTask]) -> list[list[PrepTask]]:
    """The tasks of one (file, repetition) together, in the order they first come (the
    planned, maybe shuffled, order), each group's prefixes in their planned order."""
    groups: dict[tuple[Path, int], list[PrepTask]] = {}
    for t in tasks:
        groups.setdefault((t.path, t.rep), []).append(t)
    return list(groups.values())


def time_views(group: list[PrepTask]) -> list[ViewSample]:
    """One timed parse of the group's file, then each of its prefixes timed as a view."""
    t0 = time.monotonic_ns()
    trajs = read_trajectories(group[0].path)
    parse = time.monotonic_ns() - t0
    share = round(parse / len(group))
    out = []
    for task in group:
        traj = trajs[task.index]
        v0 = time.monotonic_ns()
        history = validate_prefix(traj, task.k)
        view = time.monotonic_ns() - v0
        if len(history) != task.k:  # pragma: no cover - validate_prefix guarantees it
            raise TrajError(f"{task.path}:1: prefix {task.k} rebuilt with {len(history)} steps")
        out.append(ViewSample(task, view + share, parse, view, _shell(traj, task.k)))
    return out


def run_prepare(
    paths: list[str],
    *,
    repeat: int = 3,
    shuffle: bool = False,
    seed: int = 0,
    max_prefixes: int = DEFAULT_MAX_PREFIXES,
    mode: str = "file",
    workspace: Path | None = None,
    emit: Callable[[dict[str, Any]], None],
    clock0: int | None = None,
    tasks: list[PrepTask] | None = None,
) -> dict[str, Any]:
    """Time every (trajectory, k, repeat) (`tasks`, or those planned from `paths`) as
    `mode` says (module docstring); `emit` gets one `prep` event each. Returns
    {"samples", "unchanged", "digest_before", "digest_after"}."""
    if mode not in MODES:
        raise TrajError(f"--mode {mode}:1: expected one of {', '.join(MODES)}")
    start = time.monotonic_ns() if clock0 is None else clock0
    if tasks is None:
        tasks, _ = plan_tasks(paths, repeat, shuffle, seed, max_prefixes)
    watched = {t.path for t in tasks} | ({workspace} if workspace is not None else set())
    before = tree_digest(watched)

    def event(t: PrepTask, dur: int, shell: int) -> dict[str, Any]:
        return {
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
            "mode": mode,
        }

    if mode == "file":
        for t in tasks:
            dur, shell = time_prefix(t)
            emit(event(t, dur, shell))
    else:
        for group in view_groups(tasks):
            for v in time_views(group):
                emit(
                    event(v.task, v.dur_ns, v.shell)
                    | {"parse_ns": v.parse_ns, "view_ns": v.view_ns}
                )
    after = tree_digest(watched)
    return {
        "samples": len(tasks),
        "unchanged": before == after,
        "digest_before": before,
        "digest_after": after,
    }
