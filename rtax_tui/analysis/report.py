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

import heapq
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from rtax_tui.analysis.image_report import image_document
from rtax_tui.analysis.load_report import load_document
from rtax_tui.analysis.noise_report import Timeline, outliers, stability
from rtax_tui.analysis.pairing import cell_fields, pair_fields
from rtax_tui.analysis.pool_report import (
    STARTUP_NOTE,
    pool_document,
    pool_idle_per_trajectory,
    pooled_project_inputs,
)
from rtax_tui.analysis.precision_report import precision_document
from rtax_tui.analysis.report_model import CellReport, DiffRow, MedianDiff, PhaseSummary, Report
from rtax_tui.analysis.stats import clusters, median_diff, project, summarize
from rtax_tui.analysis.traj_report import prep_document
from rtax_tui.model.fidelity import FIDELITY_MIN, replay_by_cell
from rtax_tui.model.fold import (
    VERDICTS,
    CapacityFold,
    RowBuilder,
    Rows,
    TrialFold,
    TrialOutcome,
    add_sat,
)
from rtax_tui.model.probedoc import build_document
from rtax_tui.model.programs import Programs, compared, differences, from_event
from rtax_tui.model.recording import Recording, read_recording
from rtax_tui.model.spec import EXTRA_PHASES, PHASES, REPORT_FORMAT, TIMED_PHASES


class MinEffect(Protocol):
    """A practical threshold (analysis.gates.MinEffect): the smallest difference that
    counts, for a's median."""

    def margin_ms(self, a_ms: float) -> float: ...


COMPARE_FORMAT = "rtax-compare/1"
PROJECT_FORMAT = "rtax-project/1"
DIFF_PHASES = ("total", "action")


class _CellData:
    """Everything gathered for one cell, samples as numpy arrays (ns)."""

    def __init__(self, cell: str, meta: dict[str, Any], fold: TrialFold) -> None:
        self.cell = cell
        self.meta = meta
        self.fold = fold
        self.slots = np.zeros(0, dtype=np.int64)  # its trials' slots in the fold, in order
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
        self.served = 0  # trials that recorded an `acquire` (a pooled cell's)
        self.image_events: list[dict[str, Any]] = []  # what each trial's image fetched
        self.measured = np.zeros(0, dtype=np.int64)  # the slots of its measured trials

    @property
    def pooled(self) -> bool:
        return self.meta.get("mode") == "pool"

    @property
    def trials(self) -> list[TrialOutcome]:
        return [self.fold.outcome(s) for s in self.slots.tolist()]


def _meta_from_id(cell: str) -> dict[str, Any]:
    # host may contain "/" (ssh://...), the last three parts never do.
    parts = cell.rsplit("/", 3)
    if len(parts) != 4:
        return {"host": None, "driver": None, "workload": None, "channel": None}
    return dict(zip(("host", "driver", "workload", "channel"), parts, strict=True))


class _Collect:
    """The report's pass over a recording, batch by batch (`Rows`): the trial fold, plus
    what the report keeps of the other events (cells in order of first appearance,
    capacity batches, pool work, the last run_end, prep and probe events). Nothing per
    event is kept but those few events and the fold's columns."""

    def __init__(self) -> None:
        self.fold = TrialFold()
        self.cells: dict[str, _CellData] = {}
        self.slot_cell: list[int] = []  # per slot: its cell's index in `cells`
        self._cell_ix: dict[str, int] = {}
        self._names: list[str] = []
        self.orphan_pool: list[dict[str, Any]] = []  # a pool's events before its cell's trial
        self.end: dict[str, Any] | None = None
        self.preps: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []
        self.clocks: list[dict[str, Any]] = []  # remote hosts' clock syncs
        self.noises: list[dict[str, Any]] = []  # what skewed timings (hosts.noise)
        self.start_ns: list[int] = []  # per slot: its trial_start's t_ns
        self.replay = False  # a trial replayed a trajectory
        self.programs: dict[str, Programs] = {}  # per cell, its first `programs` event
        self.precision: list[dict[str, Any]] = []  # the last precision check's events

    def _cell(self, cell: str, meta: Any) -> int:
        ix = self._cell_ix.get(cell)
        if ix is None:
            self._names.append(cell)
            if isinstance(meta, dict):
                m = {k: meta[k] for k in ("host", "driver", "workload", "channel")}
                if "mode" in meta:  # a pooled cell (a cold one's meta keeps its shape)
                    m["mode"] = meta["mode"]
            else:
                m = _meta_from_id(cell)
            ix = self._cell_ix[cell] = len(self.cells)
            self.cells[cell] = _CellData(cell, m, self.fold)
        return ix

    def feed(self, rows: Rows) -> None:
        others = self.fold.feed_rows(rows)
        cell_of = self._cell
        slot_cell = self.slot_cell
        cells = self.cells
        if not others:  # trial starts only (most batches): the same, in a tighter loop
            known = self._cell_ix.get
            start_ns = self.start_ns
            for ev in rows.starts:
                ix = known(ev["cell"])
                slot_cell.append(cell_of(ev["cell"], ev) if ix is None else ix)
                start_ns.append(ev.get("t_ns", 0))
                if "replay" in ev:
                    self.replay = True
            return
        # cells, barriers and pool events in recording order
        evs = heapq.merge(zip(rows.start_pos, rows.starts, strict=True), others, key=lambda o: o[0])
        for _, ev in evs:
            etype = ev["type"]
            if etype == "trial_start":
                slot_cell.append(cell_of(ev["cell"], ev))
                self.start_ns.append(ev.get("t_ns", 0))
                if "replay" in ev:
                    self.replay = True
            elif etype == "barrier":
                cells[self._names[cell_of(ev["cell"], None)]].capacity.add(ev)
            elif etype == "pool":
                cd = cells.get(ev["cell"])
                if cd is not None:
                    cd.pool_events.append(ev)
                else:
                    self.orphan_pool.append(ev)
            elif etype == "run_end":
                self.end = ev
            elif etype == "prep":
                self.preps.append(ev)
            elif etype == "probe":
                self.probes.append(ev)
            elif etype == "clock":
                self.clocks.append(ev)
            elif etype == "programs":
                self.programs.setdefault(ev["cell"], from_event(ev))
            elif etype == "noise":
                self.noises.append(ev)
            elif etype == "precision":  # the highest round's check, wherever its events lie
                top = self.precision[0]["round"] if self.precision else -1
                if ev["round"] > top:
                    self.precision = [ev]
                elif ev["round"] == top:
                    self.precision.append(ev)
            elif etype == "image":  # after its trial's trial_start: its cell is known
                cd = cells.get(ev["cell"])
                if cd is not None:
                    cd.image_events.append(ev)

    def finish(self) -> dict[str, _CellData]:
        for ev in self.orphan_pool:
            if ev["cell"] in self.cells:
                self.cells[ev["cell"]].pool_events.append(ev)
        _finish_all(
            self.fold, list(self.cells.values()), np.asarray(self.slot_cell, dtype=np.int64)
        )
        return self.cells


def _collect(rec: Recording) -> tuple[dict[str, _CellData], int]:
    """Group the events of `rec` by cell; returns (cells in order, trial_start count)."""
    c = _collected(rec)
    return c.cells, c.fold.starts


def _collected(rec: Recording) -> _Collect:
    """The report's pass over `rec`, finished."""
    c = _Collect()
    b = RowBuilder(c.fold)
    for pos, ev in enumerate(rec.events):
        b.add(pos, ev)
    c.feed(b.build())
    c.finish()
    return c


def cell_samples(rec: Recording) -> dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]]:
    """Per cell of `rec`, in order: its host, driver, workload, channel (and mode), and
    per phase the samples (ns) of its measured trials: what the report's statistics are
    made of, counted by the same rule (`rtax history` takes each run's P50 from them)."""
    cells, _ = _collect(rec)
    return {name: (cd.meta, cd.samples) for name, cd in cells.items()}


def startup_figures(rec: Recording, *, seed: int = 0) -> dict[str, PhaseSummary]:
    """Per cell, its cold start: create + ready of each measured trial (a pooled cell's
    acquire), summarized as a phase is: what `rtax compare` and the cold-start plot
    call start-up, and what `rtax reproduce` compares with a study's cold start."""
    cells, _ = _collect(rec)
    return {name: summarize(cd.startup, seed=seed) for name, cd in cells.items()}


def _finish_all(fold: TrialFold, cells: list[_CellData], slot_cell: np.ndarray) -> None:
    """Per cell: the counts and the samples of its measured trials, from the fold's
    columns (the counting rule is the fold's `verdict`, over every trial at once)."""
    vc = fold.verdict_codes()
    warm, incomplete, failed, invalid, measured = (
        VERDICTS.index(v) for v in ("warmup", "incomplete", "failed", "invalid", "measured")
    )
    cols = {pc.name: pc for pc in fold.phase_cols}
    absent = np.iinfo(np.int64).max
    # per slot: its actions' sum; per action: whether its trial is measured, its cell
    ac_slot = fold.ac_slot.view
    # the actions of measured trials grouped by cell, each group in recording order
    ac_mine = np.flatnonzero(vc[ac_slot] == measured)
    ac_cell = slot_cell[ac_slot[ac_mine]]
    by_cell = np.argsort(ac_cell, kind="stable")
    ac_mine = ac_mine[by_cell]
    ac_bounds = np.searchsorted(ac_cell[by_cell], np.arange(len(cells) + 1)).tolist()
    totals = fold.totals()
    for ix, cd in enumerate(cells):
        slots = np.flatnonzero(slot_cell == ix)
        cd.slots = slots
        v = vc[slots]
        cd.warmup = int(np.count_nonzero(v == warm))
        cd.n = int(slots.size) - cd.warmup
        cd.failed = int(np.count_nonzero((v == incomplete) | (v == failed)))
        cd.invalid = int(np.count_nonzero(v == invalid))
        # errors, in trial order: "incomplete", or trial_end.error.kind
        with_error = [s for s in slots.tolist() if s in fold.errors] if fold.errors else []
        noted = np.union1d(slots[v == incomplete], np.asarray(with_error, dtype=np.int64))
        for s in noted.tolist():
            if vc[s] == warm:
                continue
            if vc[s] == incomplete:
                kind = "incomplete"
            else:
                kind = fold.outcome(s).error_kind or "unknown"
            cd.errors[kind] = cd.errors.get(kind, 0) + 1
        ms = slots[v == measured]
        cd.measured = ms
        samples: dict[str, np.ndarray] = {}
        for p in TIMED_PHASES + EXTRA_PHASES:
            got = cols.get(p)
            samples[p] = (
                got.sum[ms][got.first[ms] != absent] if got is not None else np.zeros(0, np.int64)
            )
        mine = ac_mine[ac_bounds[ix] : ac_bounds[ix + 1]]
        samples["action"] = fold.ac_dur.view[mine]
        samples["total"] = totals[ms]
        cd.samples = {p: samples[p] for p in PHASES}
        for p in EXTRA_PHASES:  # a pooled cell's acquire and release, an image phase
            if samples[p].size:
                cd.samples[p] = samples[p]
        acq = cols.get("acquire")
        if acq is not None:
            has_acq = acq.first[ms] != absent
            cd.served = int(np.count_nonzero(acq.first[slots] != absent))
        else:
            has_acq = np.zeros(ms.size, dtype=bool)

        acq_c, create_c, ready_c = (
            cols[p].sum[ms] if p in cols else np.zeros(ms.size, dtype=np.int64)
            for p in ("acquire", "create", "ready")
        )
        cd.startup = np.where(has_acq, acq_c, add_sat(create_c, ready_c))
        # sub-phases in the order first recorded: by first measured trial, then by event
        order = []
        for pc in fold.phase_cols:
            if pc.timed:
                continue
            present = np.flatnonzero(pc.first[ms] != absent)
            if present.size:
                first = int(present[0])
                order.append((first, int(pc.first[ms[first]]), pc.name, pc.sum[ms][present]))
        cd.subsamples = {name: vals for _, _, name, vals in sorted(order, key=lambda o: o[:2])}
        remote = fold.ac_remote.view[mine]
        remote = remote[remote != -1]
        if remote.size:  # the same actions timed by the remote side: the rest is network
            cd.subsamples["action.remote"] = remote


def _run_info(
    h: dict[str, Any],
    end: dict[str, Any] | None,
    torn_tail: bool,
    n_starts: int,
    clocks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    profile = h.get("profile")
    info = {
        "run_id": h.get("run_id"),
        "started_at": h.get("started_at"),
        "seed": h.get("seed"),
        "argv": h.get("argv"),
        "profile": profile.get("name") if isinstance(profile, dict) else None,
        "status": end.get("status") if end is not None else "incomplete",
        "torn_tail": torn_tail,
        "trials": n_starts,
        # the limits every environment got (run.limits); "unknown" in a recording made
        # before rtax recorded them
        "limits": h["limits"] if isinstance(h.get("limits"), dict) else "unknown",
    }
    hosts = _host_info(h.get("hosts"))
    for name, clock in _clock_info(clocks or []).items():
        hosts.setdefault(name, {})["clock"] = clock
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
    """`host/driver` -> the boundary the header recorded (the last probe, or not probed),
    its summary read by today's rule: a promise that was n/a is not broken
    (`probedoc.honest_summary`; a recording made after an older probe says so)."""
    from rtax_tui.model.probedoc import honest_summary

    out: dict[str, Any] = {}
    for key, facts in _driver_facts(hosts):
        b = facts.get("boundary")
        if not isinstance(b, dict):
            continue
        if isinstance(b.get("summary"), dict):
            b = {**b, "summary": honest_summary(b["summary"], b.get("checks"))}
        out[key] = b
    return out


def _clock_info(clocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per remote host, its clock's syncs (`clock` events): how many, the widest bound
    (a remote time is on the run's timeline within it), the quickest round trip, and
    the drift the last sync measured with its bound (none with one sync)."""
    out: dict[str, Any] = {}
    for ev in clocks:
        c = out.setdefault(ev["host"], {"syncs": 0, "err_us": 0.0, "rtt_us": None})
        c["syncs"] += 1
        c["err_us"] = max(c["err_us"], round(ev["err_ns"] / 1e3, 1))
        rtt = round(ev["rtt_ns"] / 1e3, 1)
        c["rtt_us"] = rtt if c["rtt_us"] is None else min(c["rtt_us"], rtt)
        if "drift_ppb" in ev:
            c["drift_ppm"] = round(ev["drift_ppb"] / 1e3, 3)
            c["drift_err_ppm"] = round(ev["drift_err_ppb"] / 1e3, 3)
    return out


def _host_info(hosts: Any) -> dict[str, Any]:
    """Per remote host: its network cost (to tell the network's share from the
    substrate's) or why it was left out. The local host has neither."""
    out: dict[str, Any] = {}
    if not isinstance(hosts, dict):
        return out
    for name, f in hosts.items():
        if not isinstance(f, dict):
            continue
        keys = ("net", "unreachable", "drivers_left_out", "clock_error")
        info = {k: f[k] for k in keys if k in f}
        if info:
            out[name] = info
    return out


def build_report(rec: Recording, *, seed: int = 0, fidelity_min: float | None = None) -> Report:
    """The `rtax-report/1` document of a recording read whole (see the module docstring)."""
    c = _Collect()
    b = RowBuilder(c.fold)
    for pos, ev in enumerate(rec.events):
        b.add(pos, ev)
    c.feed(b.build())
    return _document(c, rec.header, rec.torn_tail, seed, rec.events, fidelity_min)


def report_file(path: str | Path, *, seed: int = 0, fidelity_min: float | None = None) -> Report:
    """`build_report(read_recording(path))`, read and folded a chunk at a time as columns
    (`model.scan`): no event is held as a dict but the few the report keeps, so a
    recording larger than memory is reported too. A recording that replays trajectories
    is read whole (the replay's fidelity reads each action's recorded exit code)."""
    from rtax_tui.model.scan import RecordingScan

    c = _Collect()
    scan = RecordingScan(path, c.fold)
    for rows in scan:
        c.feed(rows)
        if c.replay:
            return build_report(read_recording(path), seed=seed, fidelity_min=fidelity_min)
    return _document(c, scan.header, scan.torn_tail, seed, None)


def _document(
    c: _Collect,
    header: dict[str, Any],
    torn_tail: bool,
    seed: int,
    events: list[dict[str, Any]] | None,
    fidelity_min: float | None = None,
) -> Report:
    cells = c.finish()
    out_cells: list[CellReport] = []
    for cd in cells.values():
        clus = {}
        for p in PHASES:
            cl = clusters(cd.samples[p])
            if cl is not None:
                clus[p] = cl
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
    for key, part in CELL_PARTS:
        values = part(c, events, fidelity_min)
        for row in out_cells:
            if row["cell"] in values:
                row[key] = values[row["cell"]]  # type: ignore[literal-required]
    out: Report = {
        "format": REPORT_FORMAT,
        "run": _run_info(header, c.end, torn_tail, c.fold.starts, c.clocks),
        "cells": out_cells,
        "diffs": _flag_programs(_diffs(cells, seed), c.programs),
    }
    for key, build in SECTIONS:
        value = build(c, list(cells.values()), seed)
        if value is not None:
            out[key] = value  # type: ignore[literal-required]
    return out


# -- the parts a kind of run adds ---------------------------------------------------
# A report holds the cells' table and the drivers' differences always; what a kind of
# run adds (pools, image modes, arrival patterns, a replay's fidelity, a preparation's
# or a probe's own figures) is registered here, each part a builder that answers None
# (or nothing) for a run without it. A new kind adds its builder to these tuples, not a
# branch to `_document`; its drawing goes the same way (render.reporting's SECTIONS).


def _replay_part(
    c: _Collect, events: list[dict[str, Any]] | None, fidelity_min: float | None
) -> dict[str, Any]:
    """Per cell that replayed trajectories: its fidelity (model.fidelity)."""
    if not c.replay or events is None:
        return {}
    return replay_by_cell(events, FIDELITY_MIN if fidelity_min is None else fidelity_min)


def _programs_part(
    c: _Collect, events: list[dict[str, Any]] | None, fidelity_min: float | None
) -> dict[str, Any]:
    """Per cell that recorded its programs: them, and how they differ from those of the
    cells it is compared with (`_groups`: the first cell of its group against each other
    one, as the driver differences): `differ`, [{cell, diffs}], marks its figures."""
    out: dict[str, Any] = {name: {**p.to_json(), "differ": []} for name, p in c.programs.items()}
    for base, other in _compared(c.cells):
        pa, pb = c.programs.get(base.cell), c.programs.get(other.cell)
        if pa is None or pb is None:
            continue
        ab, ba = differences(pb, pa), differences(pa, pb)
        if ab:
            out[other.cell]["differ"].append({"cell": base.cell, "diffs": ab})
            out[base.cell]["differ"].append({"cell": other.cell, "diffs": ba})
    return out


def _noise_part(
    c: _Collect, events: list[dict[str, Any]] | None, fidelity_min: float | None
) -> dict[str, Any]:
    """Per cell of a sampled host: whether its figures may be unstable, and why
    (analysis.noise_report); nothing for a run without `noise` events."""
    if not c.noises:
        return {}
    by_host: dict[str, list[dict[str, Any]]] = {}
    for ev in c.noises:
        by_host.setdefault(str(ev["host"]), []).append(ev)
    timelines = {host: Timeline(evs) for host, evs in by_host.items()}  # once per host
    start_ns = np.asarray(c.start_ns, dtype=np.int64)
    out = {}
    for cd in c.cells.values():
        mine = timelines.get(str(cd.meta.get("host")))
        if mine is None or cd.measured.size == 0:
            continue
        got = stability(start_ns[cd.measured], cd.samples["total"], mine)
        if got is not None:
            out[cd.cell] = got
    return out


def _outliers_part(
    c: _Collect, events: list[dict[str, Any]] | None, fidelity_min: float | None
) -> dict[str, Any]:
    """Per cell with samples: its `total`'s outliers, mild and severe (Tukey's fences)."""
    return {cd.cell: outliers(cd.samples["total"]) for cd in c.cells.values() if cd.n}


# cell field -> its values per cell name
CELL_PARTS: tuple[
    tuple[
        str,
        Callable[[_Collect, list[dict[str, Any]] | None, float | None], dict[str, Any]],
    ],
    ...,
] = (
    ("replay", _replay_part),
    ("programs", _programs_part),
    ("outliers", _outliers_part),
    ("noise", _noise_part),
)


def _pools_part(c: _Collect, cells: list[_CellData], seed: int) -> Any:
    """A run with pooled cells: what the pools did (analysis.pool_report)."""
    if not any(cd.pooled for cd in cells):
        return None
    return pool_document(
        (t for cd in cells if cd.pooled for t in cd.trials),
        [ev for cd in cells for ev in cd.pool_events],
    )


def _prep_part(c: _Collect, cells: list[_CellData], seed: int) -> Any:
    """A `rtax traj prepare -o` recording: figures per trajectory format."""
    return prep_document(c.preps, seed=seed) if c.preps else None


def _probe_part(c: _Collect, cells: list[_CellData], seed: int) -> Any:
    """A `rtax probe -o` recording: the driver x check matrix (model.probedoc)."""
    if not c.probes:
        return None
    return build_document(
        c.probes,
        hosts=sorted({str(e["host"]) for e in c.probes}),
        channels=sorted({str(e["channel"]) for e in c.probes}),
    )


# report key -> its builder (None: the run has no such part), in the order a report
# holds them
SECTIONS: tuple[tuple[str, Callable[[_Collect, list[_CellData], int], Any]], ...] = (
    ("pools", _pools_part),
    ("image", lambda c, cells, seed: image_document(cells, seed=seed)),  # image modes
    ("load", lambda c, cells, seed: load_document(cells, seed=seed)),  # arrival patterns
    ("prep", _prep_part),
    ("probe", _probe_part),
    (
        "precision",
        lambda c, cells, seed: precision_document(  # rounds
            c.precision, [(cd.cell, cd.samples["total"], cd.n) for cd in cells]
        ),
    ),
)


def _compared(cells: dict[str, _CellData]) -> list[tuple[_CellData, _CellData]]:
    """The pairs of cells a report compares (`model.programs.compared`: each driver
    against the first driver of its host+workload+channel+arrival group)."""
    pairs = compared((cd.cell, cd.meta) for cd in cells.values())
    return [(cells[a], cells[b]) for a, b in pairs]


def _diffs(cells: dict[str, _CellData], seed: int) -> list[DiffRow]:
    """Each driver against the first driver of its group (`_compared`)."""
    out = []
    for base, other in _compared(cells):
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


def _flag_programs(rows: list[Any], progs: dict[str, Programs], a: str = "a", b: str = "b") -> Any:
    """`rows` (pairs of cells, named by their `a` and `b` fields), each whose two cells'
    programs differ flagged with how (`programs_differ`, model.programs)."""
    for row in rows:
        pa, pb = progs.get(row[a]), progs.get(row[b])
        got = differences(pa, pb) if pa is not None and pb is not None else []
        if got:
            row["programs_differ"] = got
    return rows


def compare_reports(
    rec_a: Recording,
    rec_b: Recording,
    seed: int = 0,
    changed: bool = False,
    min_effect: MinEffect | None = None,
) -> dict[str, Any]:
    """Median differences (b - a) per pair of cells that measure the same thing
    (`pair_cells`, with `changed` its changed-cell rule), per phase; a pair of cells
    that differ reads `A → B`. Each row has its uncorrected bootstrap p-value `p` of
    "b - a is within `min_effect` of 0" (without one, of "no difference"), which
    `analysis.gates.judge` corrects over all rows."""

    def diff(a: np.ndarray, b: np.ndarray) -> MedianDiff:
        margin = 0.0 if min_effect is None else min_effect.margin_ms(float(np.median(a)) / 1e6)
        return median_diff(a, b, seed=seed, margin_ns=margin * 1e6)

    col_a, col_b = _collected(rec_a), _collected(rec_b)
    cells_a, cells_b = col_a.cells, col_b.cells
    progs_a, progs_b = col_a.programs, col_b.programs
    shaky = {"a": _shaky(col_a), "b": _shaky(col_b)}
    pairs = pair_cells(rec_a, rec_b, changed=changed)
    rows: list[dict[str, Any]] = []
    flagged: list[dict[str, Any]] = []
    for cell, ca in cells_a.items():
        other = pairs.get(cell)
        cb = cells_b.get(other) if other is not None else None
        if cb is None or other is None:
            continue
        name = cell if other == cell else f"{cell} → {other}"
        pa, pb = progs_a.get(cell), progs_b.get(other)
        differ = differences(pa, pb) if pa is not None and pb is not None else []
        if differ:  # the pair ran other programs: its differences are not the substrate's
            flagged.append({"a": cell, "b": other, "diffs": differ})
        first = len(rows)
        for p in ca.samples:  # a pooled cell's acquire and release too
            if p not in cb.samples:
                continue
            a, b = ca.samples[p], cb.samples[p]
            if a.size == 0 or b.size == 0:
                continue
            rows.append({"cell": name, "phase": p, **diff(a, b), "n_a": a.size, "n_b": b.size})
        if (ca.pooled or cb.pooled) and ca.startup.size and cb.startup.size:
            # cold against pooled: start-up is create + ready on one side, acquire on the other
            rows.append(
                {
                    "cell": name,
                    "phase": "startup",
                    "note": STARTUP_NOTE,
                    **diff(ca.startup, cb.startup),
                    "n_a": ca.startup.size,
                    "n_b": cb.startup.size,
                }
            )
        for row in rows[first:] if differ else ():
            row["programs_differ"] = differ
    out: dict[str, Any] = {
        "format": COMPARE_FORMAT,
        "a": rec_a.header.get("run_id"),
        "b": rec_b.header.get("run_id"),
        "pairing": "changed" if changed else "same",
        "rows": rows,
    }
    if flagged:
        out["programs_differ"] = flagged
    unstable = [
        {"run": side, "cell": cell, "reasons": reasons}
        for side, cells in shaky.items()
        for cell, reasons in cells.items()
        if cell in (pairs if side == "a" else pairs.values())
    ]
    if unstable:  # a comparison of steady runs keeps its shape
        out["unstable"] = unstable
    return out


def _shaky(c: _Collect) -> dict[str, list[str]]:
    """The cells of a run whose figures may be unstable, with the reasons."""
    return {
        cell: list(got["reasons"])
        for cell, got in _noise_part(c, None, None).items()
        if got["unstable"]
    }


def pair_cells(rec_a: Recording, rec_b: Recording, changed: bool = False) -> dict[str, str]:
    """The one pairing rule of `rtax compare` and the console's compare
    (`analysis.pairing.pair_fields`) over two recordings' cells."""
    return pair_fields(cell_fields(rec_a.events), cell_fields(rec_b.events), changed)


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

    replays = replay_by_cell(rec.events)  # the report's replay entry, and so its mark
    for row in out["cells"]:
        if row["cell"] in replays:
            row["replay"] = replays[row["cell"]]
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
    served = cd.served
    work = sum(int(ev["dur_ns"]) for ev in cd.pool_events)
    p = pooled_project_inputs(cd.samples, work, served)
    out = {
        "cell": cd.cell,
        **project(p["samples"], trajectories, steps, seed=seed, steps_dist=steps_dist),
    }
    extra = p["pool_s_per_trajectory"]
    out["startup"] = STARTUP_NOTE
    out["pool_s_per_trajectory"] = extra
    # what the pool held idle, beside the worker-hours (capacity held, not a rollout's
    # time): environment-hours and GiB-hours per `trajectories`
    idle_s, gib_s = pool_idle_per_trajectory(cd.pool_events, served)
    out["pool_idle_env_hours"] = None if idle_s is None else trajectories * idle_s / 3600.0
    out["pool_idle_gib_hours"] = None if gib_s is None else trajectories * gib_s / 3600.0
    if extra is not None and out["worker_hours"] is not None:
        add = trajectories * extra / 3600.0
        out["worker_hours"] += add
        out["ci95"] = [None if v is None else v + add for v in out["ci95"]]
        if out.get("per_trajectory_s") is not None:
            out["per_trajectory_s"] += extra
    return out
