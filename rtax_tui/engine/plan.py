"""The run plan: warm-ups first, then every cell's measured trials in a seeded random order.

Interleaving spreads slow drifts of the machine (caches, other load) over all
cells instead of letting them land on whichever cell ran last.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rtax_tui.model.spec import Cell, RtaxError

# the most trials one run plans (each is an object in memory before the first one runs)
PLAN_MAX = 2_000_000


def _bounded(total: int, what: str) -> None:
    if total > PLAN_MAX:
        raise RtaxError(f"{what}: {total} trials in one run; at most {PLAN_MAX}")


@dataclass(frozen=True)
class PlannedTrial:
    id: int
    cell: Cell
    warmup: bool
    batch: str | None = None


@dataclass(frozen=True)
class PlannedBatch:
    id: str
    cell: Cell
    warmup: bool
    trials: tuple[PlannedTrial, ...]


def make_cells(
    hosts: tuple[str, ...],
    drivers: tuple[str, ...],
    workloads: tuple[str, ...],
    channels: tuple[str, ...],
    modes: tuple[str, ...] = ("cold",),
) -> list[Cell]:
    return [
        Cell(h, d, w, c, m)
        for h in hosts
        for d in drivers
        for w in workloads
        for c in channels
        for m in modes
    ]


def build_plan(cells: list[Cell], trials: int, warmup: int, seed: int) -> list[PlannedTrial]:
    _bounded(len(cells) * (trials + warmup), "cells x (trials + warmup)")
    order: list[tuple[Cell, bool]] = [(c, True) for c in cells for _ in range(warmup)]
    measured = [(c, False) for c in cells for _ in range(trials)]
    random.Random(seed).shuffle(measured)
    order.extend(measured)
    return [PlannedTrial(i + 1, cell, warm) for i, (cell, warm) in enumerate(order)]


def build_capacity_plan(
    cells: list[Cell], batches: int, size: int | tuple[int, ...], warmup: int, seed: int
) -> list[PlannedBatch]:
    """Warm-up batches (one per cell, at the smallest size, when warmup > 0), then
    `batches` measured batches per cell and size, interleaved in a seeded order, so that
    a capacity curve's sizes and cells share the machine's drifts."""
    curve = (size,) if isinstance(size, int) else tuple(size)
    _bounded(len(cells) * (sum(curve) * batches + min(curve)), "cells x sizes x batches")
    order: list[tuple[Cell, bool, int]] = [(c, True, min(curve)) for c in cells if warmup > 0]
    measured = [(c, False, n) for c in cells for n in curve for _ in range(batches)]
    random.Random(seed).shuffle(measured)
    order.extend(measured)
    plan: list[PlannedBatch] = []
    next_id = 1
    for b, (cell, warm, n) in enumerate(order, 1):
        bid = f"b{b}"
        trials = tuple(PlannedTrial(next_id + k, cell, warm, bid) for k in range(n))
        next_id += n
        plan.append(PlannedBatch(bid, cell, warm, trials))
    return plan
