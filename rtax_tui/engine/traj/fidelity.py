"""Per cell, how faithful a replay was: of the replayed steps with a recorded exit code,
how many got the same one (warm-up trials left out, as in docs/architecture.md).

Read from the events alone (`trial_start.replay`, `action.expect_rc`,
`action.timed_out`), so a recording says it without its profile. A step that did not
finish (the environment stopped answering) has no exit code: it counts as different.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def shell_rc(rc: int | None) -> int | None:
    """An exit status as a shell reports it: a process killed by signal N (which a
    parent sees as -N, e.g. the exec channel of `local`) is 128 + N, as agents record it."""
    return 128 - rc if rc is not None and rc < 0 else rc


def replay_by_cell(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`cell` -> {fidelity, matched, with_rc, timed_out, steps_run, skipped, trials,
    trajectories}; only cells whose trials replayed a trajectory."""
    trials: dict[Any, str] = {}  # measured replay trial -> its cell
    cells: dict[str, dict[str, Any]] = {}
    files: dict[str, set[str]] = {}
    for ev in events:
        etype = ev["type"]
        if etype == "trial_start":
            replay = ev.get("replay")
            if replay is None or ev.get("warmup"):
                continue
            cell = ev["cell"]
            trials[ev["trial"]] = cell
            c = cells.get(cell)
            if c is None:
                c = cells[cell] = {
                    "fidelity": None,
                    "matched": 0,
                    "with_rc": 0,
                    "timed_out": 0,
                    "steps_run": 0,
                    "skipped": 0,
                    "trials": 0,
                }
                files[cell] = set()
            c["trials"] += 1
            c["skipped"] += int(replay.get("skipped") or 0)
            files[cell].add(str(replay.get("trajectory")))
        elif etype == "action":
            cell = trials.get(ev["trial"])
            if cell is None:
                continue
            c = cells[cell]
            c["steps_run"] += 1
            if ev.get("timed_out"):
                c["timed_out"] += 1
            if "expect_rc" in ev:
                c["with_rc"] += 1
                if shell_rc(ev["rc"]) == ev["expect_rc"]:
                    c["matched"] += 1
    for cell, c in cells.items():
        if c["with_rc"]:
            c["fidelity"] = c["matched"] / c["with_rc"]
        c["trajectories"] = len(files[cell])
    return cells
