"""What a recording says about its warm pools: per host and cell, the hit rate, the
time trials waited, and the pool's own work; and a pooled cell's inputs to a projection.

A pooled cell's start-up cost is its `acquire` (from asking the pool until a ready
environment was in hand), its end `release`; the pool's create, ready, reset and
teardown ran in the background, off the trial's clock, so they are counted apart as
the pool's worker-time (`pool` events) and added back per trajectory in `rtax project`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rtax_tui.model.fold import TrialOutcome

NS_PER_S = 1e9
MIB = float(1 << 20)
GIB = float(1 << 30)
STARTUP_NOTE = (
    "pooled: start-up is acquire (the wait for a ready environment); the pool's own "
    "create/ready/reset work is its worker-time, counted apart"
)


def _new() -> dict[str, Any]:
    return {"trials": 0, "hits": 0, "misses": 0, "waited": [], "acquire": []}


def pool_document(
    trials: Iterable[TrialOutcome], pool_events: list[dict[str, Any]]
) -> dict[str, Any]:
    """`{"hosts": {host: ...}, "cells": {cell: ...}}`: per host and per pooled cell the
    measured pooled trials, hits (an environment was ready), misses (the trial waited),
    the hit rate, the time waited (total and P50 over the misses), and the pool's own
    work: seconds of create/reset/teardown, rtax CPU seconds, the environments' CPU."""
    hosts: dict[str, dict[str, Any]] = {}
    cells: dict[str, dict[str, Any]] = {}
    for t in trials:
        if t.warmup or "acquire" not in t.phases:
            continue
        for key, table in ((t.meta.get("host"), hosts), (t.cell, cells)):
            d = table.setdefault(str(key), _new())
            d["trials"] += 1
            d["acquire"].append(t.phases["acquire"])
            wait = t.subphases.get("acquire.wait")
            if wait is None:
                d["hits"] += 1
            else:
                d["misses"] += 1
                d["waited"].append(wait)
    work: dict[str, dict[str, Any]] = {}
    for ev in pool_events:
        for key in (f"host:{ev['host']}", ev["cell"]):
            w = work.setdefault(key, _new_work())
            w["ops"][ev["op"]] = w["ops"].get(ev["op"], 0) + 1
            w["work_ns"] += int(ev["dur_ns"])
            w["cpu_ns"] += int(ev.get("cpu_ns") or 0)
            w["env_cpu_ns"] += int(ev.get("env_cpu_ns") or 0)
            w["failed"] += 0 if ev.get("ok") else 1
            idle, mem = _idle(ev)
            w["idle_known"] = w["idle_known"] or "idle_ns" in ev
            w["idle_ns"] += idle
            if mem is not None:
                w["mem"].append(mem)
                w["idle_gib_s"] += _gib_s(idle, mem)
    return {
        "hosts": {h: _finish(d, work.get(f"host:{h}")) for h, d in hosts.items()},
        "cells": {c: _finish(d, work.get(c)) for c, d in cells.items()},
    }


def _finish(d: dict[str, Any], w: dict[str, Any] | None) -> dict[str, Any]:
    waited = np.asarray(d["waited"], dtype=np.int64)
    acq = np.asarray(d["acquire"], dtype=np.int64)
    n = d["trials"]
    w = w or _new_work()
    mem = np.asarray(w["mem"], dtype=np.int64)
    return {
        "trials": n,
        "hits": d["hits"],
        "misses": d["misses"],
        "hit_rate": d["hits"] / n if n else None,
        "acquire_p50_s": float(np.median(acq)) / NS_PER_S if acq.size else None,
        "waited_s": float(waited.sum()) / NS_PER_S,
        "waited_p50_s": float(np.median(waited)) / NS_PER_S if waited.size else None,
        "pool_ops": w["ops"],
        "pool_failed": w["failed"],
        "pool_work_s": w["work_ns"] / NS_PER_S,
        "pool_cpu_s": w["cpu_ns"] / NS_PER_S,
        "pool_env_cpu_s": w["env_cpu_ns"] / NS_PER_S,
        # what the pool held while it waited: environment-seconds ready and unused, the
        # memory of an environment as it went in (P50), and GiB-seconds held idle
        "pool_idle_s": w["idle_ns"] / NS_PER_S if w["idle_known"] else None,
        "pool_idle_mem_p50_mib": float(np.median(mem)) / MIB if mem.size else None,
        "pool_idle_gib_s": w["idle_gib_s"] if mem.size else None,
    }


def _new_work() -> dict[str, Any]:
    # idle_known: some event said how long its environment waited (older recordings: none)
    return {"ops": {}, "work_ns": 0, "cpu_ns": 0, "env_cpu_ns": 0, "failed": 0, "idle_ns": 0,
            "idle_known": False, "mem": [], "idle_gib_s": 0.0}  # fmt: skip


def pool_idle_per_trajectory(
    pool_events: list[dict[str, Any]], served: int
) -> tuple[float | None, float | None]:
    """What a pooled cell's warm pool held idle per trajectory it served: environment-
    seconds waiting ready, and GiB-seconds of their memory (None where not measured)."""
    if not served or not any("idle_ns" in ev for ev in pool_events):
        return None, None  # nothing served, or a recording made before the pool measured it
    idle_ns = 0
    gib_s = 0.0
    known = False
    for ev in pool_events:
        idle, mem = _idle(ev)
        idle_ns += idle
        if mem is not None:
            known = True
            gib_s += _gib_s(idle, mem)
    return idle_ns / NS_PER_S / served, (gib_s / served if known else None)


def _idle(ev: dict[str, Any]) -> tuple[int, int | None]:
    """A pool event's idle time (0: none, or not measured) and, with some, the memory the
    environment held meanwhile (None: the driver could not tell)."""
    idle = int(ev.get("idle_ns") or 0)
    mem = ev.get("mem_bytes") if idle else None
    return idle, None if mem is None else int(mem)


def _gib_s(idle_ns: int, mem_bytes: int) -> float:
    return idle_ns / NS_PER_S * mem_bytes / GIB


def pooled_project_inputs(
    samples: dict[str, Any], pool_work_ns: int, served: int
) -> dict[str, Any]:
    """A pooled cell's samples as `stats.project` reads them: start-up is `acquire`
    (ready is then zero), the end is `release`; the pool's worker-time per trajectory
    (its background work over the trials it served) is returned apart, in seconds."""
    acquire = samples.get("acquire", np.zeros(0, dtype=np.int64))
    out = dict(samples)
    out["create"] = acquire
    out["ready"] = np.zeros(acquire.shape[0], dtype=np.int64)
    out["teardown"] = samples.get("release", np.zeros(0, dtype=np.int64))
    per_traj_s = pool_work_ns / served / NS_PER_S if served else None
    return {"samples": out, "pool_s_per_trajectory": per_traj_s}
