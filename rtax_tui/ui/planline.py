"""The launcher's plan line: what the form would run, how long it should take, and
which of its drivers do not work where it would run them."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from rtax_tui.analysis.history import RunSummary, estimate
from rtax_tui.engine.plan import build_capacity_plan, build_plan, make_cells
from rtax_tui.engine.profile_schema import CAPACITY, RUN
from rtax_tui.render.plaintext import styled

CHOSEN = ("drivers", "workloads", "channels", "hosts")


def planned_trials(data: dict[str, Any], names: dict[str, str] | None = None) -> dict[str, int]:
    """Trials per cell of a profile's tables, by the engine's own plan builders. `names`:
    the name a host goes by in recordings (`rtax doctor` says: `user@host:port` for
    `ssh://user@host:port`), so that cells match earlier recordings."""
    run = {**RUN.file_defaults(), **data.get("run", {})}
    hosts = tuple((names or {}).get(h, h) for h in run["hosts"])
    cells = make_cells(
        hosts, tuple(run["drivers"]), tuple(run["workloads"]), tuple(run["channels"])
    )
    counts: dict[str, int] = {c.id: 0 for c in cells}
    cap = data.get("capacity")
    if isinstance(cap, dict):
        cap = {**CAPACITY.file_defaults(), **cap}
        sizes = cap.get("sizes") or [cap["size"]]
        for size in sizes:  # a capacity curve runs its batches at every size
            for b in build_capacity_plan(cells, cap["batches"], size, run["warmup"], run["seed"]):
                counts[b.cell.id] += len(b.trials)
    else:
        for t in build_plan(cells, run["trials"], run["warmup"], run["seed"]):
            counts[t.cell.id] += 1
    return counts


def missing_choices(data: dict[str, Any]) -> list[str]:
    """The lists of `[run]` with nothing chosen (a run needs one of each)."""
    run = {**RUN.file_defaults(), **data.get("run", {})}
    return [k for k in CHOSEN if not run[k]]


class PlanLine(Static):
    """One line under the launcher's form, drawn again on every change of the form."""

    def show(
        self,
        data: dict[str, Any],
        error: str | None,
        host_names: dict[str, str],
        runs: list[RunSummary] | None,
        status: dict[tuple[str, str], str | None],
    ) -> None:
        """`error`: the form's, shown instead; `runs`: the earlier recordings the estimate
        comes from (None while they are read); `status`: doctor's per (host, driver)."""
        if error:
            self.update(styled((error, "red")))
            return
        missing = missing_choices(data)
        if missing:
            self.update(styled((f"choose at least one of: {', '.join(missing)}", "red")))
            return
        run = {**RUN.file_defaults(), **data.get("run", {})}
        counts = planned_trials(data, host_names)
        total = sum(counts.values())
        est = (
            estimate(counts, int(run["concurrency"]), runs).text()
            if runs is not None
            else "reading earlier recordings…"
        )
        bad = [f"{d} on {h}" for h in run["hosts"] for d in run["drivers"] if status.get((h, d))]
        warn = ("  not usable: " + ", ".join(bad), "yellow") if bad else ""
        self.update(
            styled(
                f"plan: {len(counts)} cells, {total} trials (concurrency {run['concurrency']}), "
                f"duration {est}",
                warn,
                "   ",
                ("enter", "b"),
                ": start",
            )
        )
