"""Reports over a recording: per-cell statistics, driver differences, projections.

One pass over the events groups them with plain dict lookups; numpy arrays are
built per cell at the end. Output is plain JSON-ready data (no rendering here).

Counting rules (docs/architecture.md, "Statistics"):
- trials are grouped by `trial_start.cell`; `warmup` counts warm-up trials;
- n counts measured (non-warm-up) trials; failed = measured trials that ended
  not `ok`, or never ended (no `trial_end`: the run was killed); invalid =
  measured trials that ended `ok` but not `valid`;
- statistics use only measured trials that are `ok` and `valid`;
- `errors` counts `trial_end.error.kind` over measured trials, plus
  "incomplete" for measured trials without `trial_end`.
"""

from __future__ import annotations

import gc
from typing import Any, cast

import numpy as np

from rtax_tui.analysis.pool_report import STARTUP_NOTE, pool_document, pooled_project_inputs
from rtax_tui.analysis.report_model import CellReport, DiffRow, Report
from rtax_tui.analysis.stats import clusters, median_diff, project, summarize
from rtax_tui.model.checks import build_document
from rtax_tui.model.fold import CapacityFold, TrialFold, TrialOutcome
from rtax_tui.model.recording import Recording
from rtax_tui.model.spec import PHASES, POOL_PHASES, REPORT_FORMAT, TIMED_PHASES

COMPARE_FORMAT = "rtax-compare/1"
PROJECT_FORMAT = "rtax-project/1"
DIFF_PHASES = ("total", "action")


class _CellData:
    """Everything gathered for one cell, samples as numpy arrays (ns)."""

    def __init__(self, cell: str, meta: dict[str, Any]) -> None:
        self.cell = cell
        self.meta = meta
        self.trials: list[TrialOutcome] = []
        self.capacity = CapacityFold()
        self.n = 0
        self.failed = 0
        self.invalid = 0
        self.warmup = 0
        self.errors: dict[str, int] = {}
        self.samples: dict[str, np.ndarray] = {}
        self.subsamples: dict[str, np.ndarray] = {}
        self.pool_events: list[dict[str, Any]] = []  # a pooled cell's background work
        # per measured trial, what it waited before its first action: create + ready
        # (cold) or acquire (pooled); `rtax compare` sets the two side by side
        self.startup = np.zeros(0, dtype=np.int64)

    @property
    def pooled(self) -> bool:
        return self.meta.get("mode") == "pool"


def _meta_from_id(cell: str) -> dict[str, Any]:
    # host may contain "/" (ssh://...), the last three parts never do.
    parts = cell.rsplit("/", 3)
    if len(parts) != 4:
        return {"host": None, "driver": None, "workload": None, "channel": None}
    return dict(zip(("host", "driver", "workload", "channel"), parts, strict=True))


def _collect(rec: Recording) -> tuple[dict[str, _CellData], int]:
    """Group the events of `rec` by cell; returns (cells in order, trial_start count).

    The pass allocates many small acyclic objects; the cyclic garbage collector
    is paused meanwhile (it would rescan the recording's million dicts for nothing).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _collect_events(rec)
    finally:
        if gc_was_enabled:
            gc.enable()


def _collect_events(rec: Recording) -> tuple[dict[str, _CellData], int]:
    cells: dict[str, _CellData] = {}

    def started(t: TrialOutcome) -> None:
        cd = cells.get(t.cell)
        if cd is None:
            meta = {k: t.meta[k] for k in ("host", "driver", "workload", "channel")}
            if "mode" in t.meta:  # a pooled cell (a cold one's meta keeps its shape)
                meta["mode"] = t.meta["mode"]
            cd = cells[t.cell] = _CellData(t.cell, meta)
        cd.trials.append(t)

    def other(ev: dict[str, Any]) -> None:
        if ev["type"] == "barrier":
            cell = ev["cell"]
            cd = cells.get(cell)
            if cd is None:
                cd = cells[cell] = _CellData(cell, _meta_from_id(cell))
            cd.capacity.add(ev)
        elif ev["type"] == "pool":
            cd = cells.get(ev["cell"])
            if cd is not None:
                cd.pool_events.append(ev)
            else:
                orphan_pool.append(ev)

    orphan_pool: list[dict[str, Any]] = []  # events of a pool before its cell's first trial
    fold = TrialFold(on_start=started, on_other=other)
    fold.feed(rec.events)
    for ev in orphan_pool:
        if ev["cell"] in cells:
            cells[ev["cell"]].pool_events.append(ev)
    for cd in cells.values():
        _finish(cd)
    return cells, fold.starts


def _finish(cd: _CellData) -> None:
    phase_lists: dict[str, list[int]] = {p: [] for p in TIMED_PHASES + POOL_PHASES}
    actions: list[int] = []
    totals: list[int] = []
    sub_lists: dict[str, list[int]] = {}
    remote: list[int] = []
    startup: list[int] = []
    for t in cd.trials:
        verdict = t.verdict
        if verdict == "warmup":
            cd.warmup += 1
            continue
        cd.n += 1
        if verdict == "incomplete":
            cd.failed += 1
            cd.errors["incomplete"] = cd.errors.get("incomplete", 0) + 1
            continue
        kind = t.error_kind
        if kind is not None:
            cd.errors[kind] = cd.errors.get(kind, 0) + 1
        if verdict == "failed":
            cd.failed += 1
            continue
        if verdict == "invalid":
            cd.invalid += 1
            continue
        total = 0
        for name, dur in t.phases.items():
            phase_lists[name].append(dur)
            total += dur
        for name, dur in t.subphases.items():
            lst = sub_lists.get(name)
            if lst is None:
                lst = sub_lists[name] = []
            lst.append(dur)
        actions.extend(t.actions)
        remote.extend(t.remote)
        totals.append(total + sum(t.actions))
        ph = t.phases
        startup.append(
            ph["acquire"] if "acquire" in ph else ph.get("create", 0) + ph.get("ready", 0)
        )
    samples = {p: np.asarray(v, dtype=np.int64) for p, v in phase_lists.items()}
    samples["action"] = np.asarray(actions, dtype=np.int64)
    samples["total"] = np.asarray(totals, dtype=np.int64)
    cd.samples = {p: samples[p] for p in PHASES}
    cd.startup = np.asarray(startup, dtype=np.int64)
    for p in POOL_PHASES:  # a pooled cell's acquire and release
        if samples[p].size:
            cd.samples[p] = samples[p]
    if remote:  # the same actions timed by the remote side: the rest is network + framing
        sub_lists["action.remote"] = remote
    cd.subsamples = {k: np.asarray(v, dtype=np.int64) for k, v in sub_lists.items()}


def _run_info(rec: Recording, n_starts: int) -> dict[str, Any]:
    h = rec.header
    profile = h.get("profile")
    end = rec.end
    info = {
        "run_id": h.get("run_id"),
        "started_at": h.get("started_at"),
        "seed": h.get("seed"),
        "argv": h.get("argv"),
        "profile": profile.get("name") if isinstance(profile, dict) else None,
        "status": end.get("status") if end is not None else "incomplete",
        "torn_tail": rec.torn_tail,
        "trials": n_starts,
        # the limits every environment got (run.limits); "unknown" in a recording made
        # before rtax recorded them
        "limits": h["limits"] if isinstance(h.get("limits"), dict) else "unknown",
    }
    hosts = _host_info(h.get("hosts"))
    if hosts:  # remote hosts only: a local run's report keeps its shape
        info["hosts"] = hosts
    applied = _limits_applied(h.get("hosts"))
    if applied:  # what each driver did with the limits (its facts say)
        info["limits_applied"] = applied
    bounds = _boundaries(h.get("hosts"))
    if bounds:  # recordings made before `rtax probe` existed keep their shape
        info["boundaries"] = bounds
    forgeable = _forgeable(h.get("hosts"))
    if forgeable:  # recordings made before the header said it keep their shape
        info["forgeable"] = forgeable
    return info


def _forgeable(hosts: Any) -> dict[str, str]:
    """`host/driver/channel` -> why a workload could forge a later step's result there,
    for every channel whose driver does not state that results hold (header's
    `integrity`)."""
    out: dict[str, str] = {}
    for key, facts in _driver_facts(hosts):
        got = facts.get("integrity")
        if isinstance(got, dict):
            for ch, why in got.items():
                if why is not None:
                    out[f"{key}/{ch}"] = str(why)
    return out


def _limits_applied(hosts: Any) -> dict[str, str]:
    """`host/driver` -> how the driver applied the limits (its `limits` fact)."""
    out: dict[str, str] = {}
    for key, facts in _driver_facts(hosts):
        if isinstance(facts.get("limits"), str):
            out[key] = facts["limits"]
    return out


def _driver_facts(hosts: Any) -> list[tuple[str, dict[str, Any]]]:
    """(`host/driver`, the driver's facts) for every driver the header describes."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(hosts, dict):
        return out
    for name, f in hosts.items():
        drivers = f.get("drivers") if isinstance(f, dict) else None
        if not isinstance(drivers, dict):
            continue
        for d, facts in drivers.items():
            if isinstance(facts, dict):
                out.append((f"{name}/{d}", facts))
    return out


def _boundaries(hosts: Any) -> dict[str, Any]:
    """`host/driver` -> the boundary the header recorded (the last probe, or not probed)."""
    return {
        key: facts["boundary"]
        for key, facts in _driver_facts(hosts)
        if isinstance(facts.get("boundary"), dict)
    }


def _host_info(hosts: Any) -> dict[str, Any]:
    """Per remote host: its network cost (to tell the network's share from the
    substrate's) or why it was left out. The local host has neither."""
    out: dict[str, Any] = {}
    if not isinstance(hosts, dict):
        return out
    for name, f in hosts.items():
        if not isinstance(f, dict):
            continue
        info = {k: f[k] for k in ("net", "unreachable", "drivers_left_out") if k in f}
        if info:
            out[name] = info
    return out


def build_report(rec: Recording, *, seed: int = 0) -> Report:
    """The `rtax-report/1` document of a recording (see the module docstring)."""
    cells, n_starts = _collect(rec)
    out_cells: list[CellReport] = []
    for cd in cells.values():
        clus = {}
        for p in PHASES:
            c = clusters(cd.samples[p])
            if c is not None:
                clus[p] = c
        fields: dict[str, Any] = {
            "cell": cd.cell,
            **cd.meta,  # host, driver, workload, channel and a pooled cell's mode
            "n": cd.n,
            "failed": cd.failed,
            "invalid": cd.invalid,
            "warmup": cd.warmup,
            "phases": {p: summarize(v, seed=seed) for p, v in cd.samples.items()},
            "subphases": {k: summarize(v, seed=seed) for k, v in cd.subsamples.items()},
            "errors": dict(cd.errors),
            "clusters": clus,
            "capacity": cd.capacity.summary(),
        }
        if cd.pooled:
            fields["startup"] = STARTUP_NOTE
        out_cells.append(cast(CellReport, fields))  # its keys in the order they always had
    if any("replay" in t.meta for cd in cells.values() for t in cd.trials):
        from rtax_tui.engine.traj.fidelity import replay_by_cell

        replays = replay_by_cell(rec.events)  # a replay's fidelity, per cell
        for row in out_cells:
            if row["cell"] in replays:
                row["replay"] = replays[row["cell"]]
    out: Report = {
        "format": REPORT_FORMAT,
        "run": _run_info(rec, n_starts),
        "cells": out_cells,
        "diffs": _diffs(cells, seed),
    }
    if any(cd.pooled for cd in cells.values()):
        out["pools"] = pool_document(
            (t for cd in cells.values() if cd.pooled for t in cd.trials),
            [ev for cd in cells.values() for ev in cd.pool_events],
        )
    preps = [ev for ev in rec.events if ev["type"] == "prep"]
    if preps:  # a `rtax traj prepare -o` recording: figures per trajectory format
        from rtax_tui.analysis.traj_report import prep_document

        out["prep"] = prep_document(preps, seed=seed)
    probes = [ev for ev in rec.events if ev["type"] == "probe"]
    if probes:  # a `rtax probe -o` recording: the driver x check matrix
        out["probe"] = build_document(
            probes,
            hosts=sorted({str(e["host"]) for e in probes}),
            channels=sorted({str(e["channel"]) for e in probes}),
        )
    return out


def _diffs(cells: dict[str, _CellData], seed: int) -> list[DiffRow]:
    """Each driver against the first driver of its host+workload+channel group."""
    groups: dict[tuple[Any, Any, Any], list[_CellData]] = {}
    for cd in cells.values():
        key = (cd.meta["workload"], cd.meta["channel"], cd.meta["host"])
        groups.setdefault(key, []).append(cd)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        base = members[0]
        for other in members[1:]:
            for p in DIFF_PHASES:
                a, b = base.samples[p], other.samples[p]
                if a.size == 0 or b.size == 0:
                    continue
                row: DiffRow = {
                    "a": base.cell,
                    "b": other.cell,
                    "phase": p,
                    **median_diff(a, b, seed=seed),
                }
                out.append(row)
    return out


def compare_reports(
    rec_a: Recording, rec_b: Recording, seed: int = 0, pairs: dict[str, str] | None = None
) -> dict[str, Any]:
    """Median differences (b - a) per cell present in both recordings, per phase.
    `pairs` (a cell -> b cell) also matches cells that differ (see `changed_cell_pairs`);
    such a row's cell reads `A → B`."""
    cells_a, _ = _collect(rec_a)
    cells_b, _ = _collect(rec_b)
    rows = []
    for cell, ca in cells_a.items():
        other = (pairs or {}).get(cell, cell)
        cb = cells_b.get(other)
        if cb is None:
            continue
        name = cell if other == cell else f"{cell} → {other}"
        for p in ca.samples:  # a pooled cell's acquire and release too
            if p not in cb.samples:
                continue
            a, b = ca.samples[p], cb.samples[p]
            if a.size == 0 or b.size == 0:
                continue
            rows.append({"cell": name, "phase": p, **median_diff(a, b, seed=seed)})
        if (ca.pooled or cb.pooled) and ca.startup.size and cb.startup.size:
            # cold against pooled: start-up is create + ready on one side, acquire on the other
            rows.append(
                {
                    "cell": name,
                    "phase": "startup",
                    "note": STARTUP_NOTE,
                    **median_diff(ca.startup, cb.startup, seed=seed),
                }
            )
    return {
        "format": COMPARE_FORMAT,
        "a": rec_a.header.get("run_id"),
        "b": rec_b.header.get("run_id"),
        "rows": rows,
    }


CELL_FIELDS = ("host", "driver", "workload", "channel", "mode")  # mode: None when cold


def changed_cell_pairs(rec_a: Recording, rec_b: Recording) -> dict[str, str]:
    """Cells of a matched to cells of b: the same cell, or, for a rerun that changed one
    thing (the channel, the host, a driver), the one cell of b that differs from it in
    exactly one of host/driver/workload/channel/mode, when no other cell could claim it."""

    def cells(rec: Recording) -> dict[str, tuple[str, ...]]:
        return {
            str(ev["cell"]): tuple(str(ev.get(k)) for k in CELL_FIELDS)
            for ev in rec.events
            if ev.get("type") == "trial_start"
        }

    a, b = cells(rec_a), cells(rec_b)
    pairs = {c: c for c in a if c in b}
    a_only = [c for c in a if c not in b]
    b_only = [c for c in b if c not in a]

    def near(x: tuple[str, ...], y: tuple[str, ...]) -> bool:
        return sum(i != j for i, j in zip(x, y, strict=True)) == 1

    for ca in a_only:
        cands = [cb for cb in b_only if near(a[ca], b[cb])]
        if len(cands) == 1 and sum(near(a[o], b[cands[0]]) for o in a_only) == 1:
            pairs[ca] = cands[0]
    return pairs


def project_report(
    rec: Recording,
    trajectories: int,
    steps: int,
    seed: int = 0,
    steps_dist: list[int] | None = None,
) -> dict[str, Any]:
    """Worker-hours for `trajectories` rollouts of `steps` steps, per cell; with
    `steps_dist` (real trajectories' step counts) S follows that distribution."""
    cells, _ = _collect(rec)
    out: dict[str, Any] = {
        "format": PROJECT_FORMAT,
        "trajectories": trajectories,
        "steps": steps if steps_dist is None else sum(steps_dist) / len(steps_dist),
        "cells": [
            _project_cell(cd, trajectories, steps, seed, steps_dist) for cd in cells.values()
        ],
    }
    if steps_dist is not None:
        d = sorted(steps_dist)
        out["steps_from"] = {
            "trajectories": len(d),
            "min": d[0],
            "p50": d[len(d) // 2] if len(d) % 2 else (d[len(d) // 2 - 1] + d[len(d) // 2]) / 2,
            "max": d[-1],
            "mean": sum(d) / len(d),
        }
    return out


def _project_cell(
    cd: _CellData,
    trajectories: int,
    steps: int,
    seed: int,
    steps_dist: list[int] | None = None,
) -> dict[str, Any]:
    """A cold cell: create + ready + teardown + S actions. A pooled cell: acquire as its
    start-up, release as its end, plus the pool's own worker-time per trajectory."""
    if not cd.pooled:
        return {
            "cell": cd.cell,
            **project(cd.samples, trajectories, steps, seed=seed, steps_dist=steps_dist),
        }
    served = sum(1 for t in cd.trials if "acquire" in t.phases)
    work = sum(int(ev["dur_ns"]) for ev in cd.pool_events)
    p = pooled_project_inputs(cd.samples, work, served)
    out = {
        "cell": cd.cell,
        **project(p["samples"], trajectories, steps, seed=seed, steps_dist=steps_dist),
    }
    extra = p["pool_s_per_trajectory"]
    out["startup"] = STARTUP_NOTE
    out["pool_s_per_trajectory"] = extra
    if extra is not None and out["worker_hours"] is not None:
        add = trajectories * extra / 3600.0
        out["worker_hours"] += add
        out["ci95"] = [None if v is None else v + add for v in out["ci95"]]
        if out.get("per_trajectory_s") is not None:
            out["per_trajectory_s"] += extra
    return out
