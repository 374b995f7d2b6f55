"""Per cell, how faithful a replay was: of the replayed steps with a recorded exit code,
how many got the same one (warm-up trials left out, as in docs/architecture.md).

Read from the events alone (`trial_start.replay`, `action.expect_rc`,
`action.timed_out`), so a recording says it without its profile. A step that did not
finish (the environment stopped answering) has no exit code: it counts as different.

A cell whose fidelity is under FIDELITY_MIN is *not representative*: its steps mostly
did something other than the agent's (failed fast where the agent's ran), so its action
figures are not the agent's; every table that shows the cell's figures marks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rtax_tui.model.spec import shell_rc

FIDELITY_MIN = 0.8  # `rtax report --fidelity-min`: under it, a cell is marked


def replay_by_cell(
    events: Iterable[dict[str, Any]], fidelity_min: float = FIDELITY_MIN
) -> dict[str, dict[str, Any]]:
    """`cell` -> {fidelity, matched, with_rc, timed_out, steps_run, skipped, trials,
    trajectories, workspace, root, at_root, representative}; only cells whose trials
    replayed a trajectory. `workspace`: what the workspaces held (`, `-joined); `root`:
    where the agents worked; `at_root`: every trial's environment showed the workspace
    there (null: no root recorded, as in older recordings); `representative`: fidelity
    at least `fidelity_min` (true where no step had an exit code to compare)."""
    trials: dict[Any, str] = {}  # measured replay trial -> its cell
    cells: dict[str, dict[str, Any]] = {}
    files: dict[str, set[str]] = {}
    sources: dict[str, set[str]] = {}
    roots: dict[str, set[str]] = {}
    placed: dict[str, list[bool]] = {}
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
                files[cell], sources[cell], roots[cell], placed[cell] = set(), set(), set(), []
            c["trials"] += 1
            c["skipped"] += int(replay.get("skipped") or 0)
            files[cell].add(str(replay.get("trajectory")))
            sources[cell].add(str(replay.get("source") or "attrs assets"))
            if replay.get("root") is not None:
                roots[cell].add(str(replay["root"]))
                placed[cell].append(bool(replay.get("at_root")))
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
        c["workspace"] = ", ".join(sorted(sources[cell]))
        c["root"] = ", ".join(sorted(roots[cell])) or None
        c["at_root"] = all(placed[cell]) if placed[cell] else None
        c["representative"] = c["fidelity"] is None or c["fidelity"] >= fidelity_min
    return cells


def not_representative(cell: dict[str, Any]) -> str | None:
    """A report cell's mark when its replay's fidelity is under the threshold, else None."""
    r = cell.get("replay")
    if not r or r.get("representative", True):
        return None
    return f"fidelity {100 * r['fidelity']:.0f}%: not representative"
