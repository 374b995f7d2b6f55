"""The run plan: warm-ups first, then every cell's measured trials in a seeded random order.

Interleaving spreads slow drifts of the machine (caches, other load) over all
cells instead of letting them land on whichever cell ran last.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rtax_tui.model.arrivals import SEQUENTIAL, parse_arrival
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
    episode: str | None = None  # an arrival pattern's episode (model.arrivals)
    offset_ns: int = 0  # when in its episode it is due


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
    arrivals: tuple[str, ...] = (SEQUENTIAL,),
    images: tuple[str, ...] = ("",),
) -> list[Cell]:
    return [
        Cell(h, d, w, c, m, a, i)
        for h in hosts
        for d in drivers
        for w in workloads
        for c in channels
        for m in modes
        for a in arrivals
        for i in images
    ]


def build_plan(cells: list[Cell], trials: int, warmup: int, seed: int) -> list[PlannedTrial]:
    """Warm-ups first (one at a time, whatever the cell's arrival pattern), then the
    measured trials in a seeded order. A cell with an arrival pattern other than
    sequential brings its trials as episodes (model.arrivals), each kept together and
    shuffled among the other cells' trials as one unit; an episode's offsets are drawn
    from the seed, the cell and the episode's place, so a plan is the same every time."""
    arrivals = [(c, parse_arrival(c.arrival, "cell")) for c in cells]
    n_measured = sum(sum(a.episodes(trials)) or trials for _, a in arrivals)
    _bounded(n_measured + len(cells) * warmup, "cells x (trials + warmup)")
    order: list[tuple[Cell, bool]] = [(c, True) for c in cells for _ in range(warmup)]
    # a unit: a sequential trial (its cell), or an episode (its cell and offsets)
    units: list[Cell | tuple[Cell, list[int]]] = []
    for c, arrival in arrivals:
        if arrival.kind == SEQUENTIAL:
            units.extend([c] * trials)
            continue
        for k, size in enumerate(arrival.episodes(trials)):
            rng = random.Random(f"{seed}/{c.id}/{k}")
            units.append((c, arrival.offsets_ns(size, rng)))
    random.Random(seed).shuffle(units)
    plan = [PlannedTrial(i + 1, cell, warm) for i, (cell, warm) in enumerate(order)]
    episodes = 0
    for unit in units:
        if isinstance(unit, Cell):
            plan.append(PlannedTrial(len(plan) + 1, unit, False))
            continue
        episodes += 1
        cell, offsets = unit
        for off in offsets:
            plan.append(PlannedTrial(len(plan) + 1, cell, False, None, f"e{episodes}", off))
    return plan


def build_round(
    counts: dict[Cell, int], seed: int, round_: int, first_id: int
) -> list[PlannedTrial]:
    """A later round of a precision run (engine.precision): `counts[cell]` measured trials
    of each cell, interleaved in an order drawn from the seed and the round's number, the
    ids going on from `first_id`. Sequential cells only (a precision run has no episodes)."""
    units = [c for c, n in counts.items() for _ in range(n)]
    _bounded(first_id - 1 + len(units), "rounds")
    random.Random(f"{seed}/round{round_}").shuffle(units)
    return [PlannedTrial(first_id + i, c, False) for i, c in enumerate(units)]


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


def build_spanning_plan(
    cells: list[Cell], batches: int, size: int | tuple[int, ...], warmup: int, seed: int
) -> list[PlannedBatch]:
    """Capacity batches that span hosts (Ray nodes: engine.raynodes): the cells that differ
    only in their host form one group, planned as `build_capacity_plan` plans a cell (the
    group's first cell standing for it, the same seeded order); each batch then holds
    `size` trials of every cell of its group, all at one barrier."""
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.driver, c.workload, c.channel, c.mode, c.arrival, c.image), []).append(
            c
        )
    members = {g[0]: g for g in groups.values()}
    _bounded(len(cells) * sum((size,) if isinstance(size, int) else size) * batches, "spans")
    plan: list[PlannedBatch] = []
    next_id = 1
    for b in build_capacity_plan(list(members), batches, size, warmup, seed):
        n = len(b.trials)
        trials: list[PlannedTrial] = []
        for cell in members[b.cell]:
            trials.extend(PlannedTrial(next_id + k, cell, b.warmup, b.id) for k in range(n))
            next_id += n
        plan.append(PlannedBatch(b.id, b.cell, b.warmup, tuple(trials)))
    return plan
