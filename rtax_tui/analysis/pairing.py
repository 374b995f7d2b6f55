"""Which cells of two runs measure the same thing: the one pairing rule of `rtax compare`,
its console screen and the console's picker of recordings to compare with.

Kept apart from the report (numpy, the statistics) so the picker can ask it of every
recording's summary (`analysis.history`) without reading any recording twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CELL_FIELDS = ("host", "driver", "workload", "channel", "mode")  # mode: None when cold
# what a changed-cell pair may differ in: never the workload (another program measured)
CHANGEABLE = ("host", "driver", "channel", "mode")
# parts of a cell's id that CELL_FIELDS leave out (None: no image modes, sequential): a
# changed-cell pair never differs in them either (red team 2026-12-06: `d1/w/exec~pull`
# paired with `d2/w/exec~cached`, `w/exec@burst:8` with `w/shell`, as "one thing
# changed" while two had)
FIXED = ("workload", "image", "arrival")


def cell_fields(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Each cell of a run (its trial starts) with its CELL_FIELDS, then its image mode
    and arrival pattern, as text."""
    return {
        str(ev["cell"]): tuple(str(ev.get(k)) for k in (*CELL_FIELDS, "image", "arrival"))
        for ev in events
        if ev.get("type") == "trial_start"
    }


def pair_fields(
    a: Mapping[str, tuple[str, ...]], b: Mapping[str, tuple[str, ...]], changed: bool = False
) -> dict[str, str]:
    """Cells of a matched to cells of b that measure the same thing. A cell pairs with
    the cell of the same host, driver, workload, channel and mode (its id). With
    `changed` (the user asks to compare a rerun that changed one thing), a cell left
    unpaired also pairs with the one unpaired cell of b that differs from it in exactly
    one of host, driver, channel or mode, when no other cell could claim it; never
    across workloads (`local/t0` and `local/mine` run different programs), image modes
    or arrival patterns."""
    pairs = {c: c for c in a if c in b}
    if not changed:
        return pairs
    a_only = [c for c in a if c not in b]
    b_only = [c for c in b if c not in a]
    names = (*CELL_FIELDS, "image", "arrival")
    fixed = [names.index(k) for k in FIXED]

    def near(x: tuple[str, ...], y: tuple[str, ...]) -> bool:
        if len(x) != len(y) or any(x[i] != y[i] for i in fixed if i < len(x)):
            return False
        return sum(i != j for i, j in zip(x, y, strict=True)) == 1

    for ca in a_only:
        cands = [cb for cb in b_only if near(a[ca], b[cb])]
        if len(cands) == 1 and sum(near(a[o], b[cands[0]]) for o in a_only) == 1:
            pairs[ca] = cands[0]
    return pairs
