"""What a profile's `[pool]` table may say, checked with the file's line.

Kept apart from `profile.py` (which only calls `parse_pool`) so that the pool's
vocabulary lives in one place beside `engine.pool`, which acts on it.

- `size`: environments kept ready per cell and host (at least 1);
- `reset`: what happens to an environment a trial released: `recreate` (a fresh one
  is made in the background, the old one torn down), `clean` (the same one, cleaned:
  the driver's `reset_clean`), `snapshot` (restored from a snapshot: `reset_snapshot`);
- `refill`: `eager` (the pool makes a replacement as soon as one is taken) or `lazy`
  (only when a trial finds the pool empty).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtax_tui.engine.profile_schema import POOL
from rtax_tui.model.inputs import number_error
from rtax_tui.model.spec import MODES, RtaxError

RESETS: tuple[str, ...] = POOL["reset"].choices
REFILLS: tuple[str, ...] = POOL["refill"].choices


@dataclass(frozen=True)
class PoolSpec:
    """A `[pool]` table (its keys, defaults and bounds: profile_schema.POOL)."""

    size: int = POOL["size"].default
    reset: str = POOL["reset"].default
    refill: str = POOL["refill"].default

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "reset": self.reset, "refill": self.refill}


def parse_pool(body: Any, where: Callable[[str | None], str]) -> PoolSpec:
    """A `[pool]` table as a PoolSpec; `where(key)` is `FILE:LINE` of the key."""
    if not isinstance(body, dict):
        raise RtaxError(f"{where(None)}: pool: expected a table ({POOL.allowed})")
    for key, value in body.items():
        if key not in POOL:
            raise RtaxError(f"{where(key)}: pool.{key}: unknown key (allowed: {POOL.allowed})")
        types = POOL[key].types
        if not isinstance(value, types) or isinstance(value, bool):
            raise RtaxError(f"{where(key)}: pool.{key}: expected {types[0].__name__}")
    size = body.get("size", PoolSpec.size)
    assert POOL["size"].bounds is not None
    why = number_error(size, *POOL["size"].bounds, integer=True)
    if why is not None:
        raise RtaxError(f"{where('size')}: pool.size: {why}")
    reset = body.get("reset", PoolSpec.reset)
    if reset not in RESETS:
        raise RtaxError(f"{where('reset')}: pool.reset: {reset!r} (allowed: {', '.join(RESETS)})")
    refill = body.get("refill", PoolSpec.refill)
    if refill not in REFILLS:
        raise RtaxError(
            f"{where('refill')}: pool.refill: {refill!r} (allowed: {', '.join(REFILLS)})"
        )
    return PoolSpec(size=size, reset=reset, refill=refill)


def check_modes(modes: Any, where: str) -> tuple[str, ...]:
    """`[run] modes`: a non-empty list of `cold` and `pool`, each at most once."""
    if not isinstance(modes, (list, tuple)) or not modes:
        raise RtaxError(f"{where}: run.modes: a non-empty list (allowed: {', '.join(MODES)})")
    for m in modes:
        if m not in MODES:
            raise RtaxError(f"{where}: run.modes: unknown {m!r} (allowed: {', '.join(MODES)})")
    if len(set(modes)) != len(modes):
        raise RtaxError(f"{where}: run.modes: a mode is named twice")
    return tuple(modes)
