"""Arrival patterns: how the trials of a cell are asked for (`[run] arrivals`).

A fleet does not ask for environments one after another: a training step asks for a
batch at once, and a service sees requests arrive at a rate. The pattern is a
dimension of the run, like the channel, so the same substrate is measured under each
pattern in one interleaved run:

- `sequential`: the plan's trials as before, under the run's `concurrency` (closed
  loop: the next trial starts when one ends);
- `burst:N`: episodes of N trials asked for at the same instant;
- `rate:R`: episodes of open-loop arrivals at R a second, with exponential gaps (a
  Poisson process) drawn from the run's seed; an arrival does not wait for earlier
  ones to end.

An episode runs alone: the trials in flight end first, then its arrivals start at their
instants, the run's and the hosts' `concurrency` aside (the pattern is the load), at
most `IN_FLIGHT_MAX` at once (an arrival past it waits, and is late). A trial's
scheduled time is its arrival instant, so a late start is part of its orchestration
and `trial_start.arrival_ns` says when it was due.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from rtax_tui.model.spec import RtaxError

SEQUENTIAL = "sequential"
BURST_MAX = 1024  # environments asked for at one instant
RATE_MAX = 1000.0  # arrivals a second
RATE_EPISODE = 32  # arrivals of a `rate` cell per episode (at most)
IN_FLIGHT_MAX = 1024  # trials of an episode in flight at once
ALLOWED = "sequential, burst:N (N at once), rate:R (R a second, Poisson)"

# ASCII digits only: `\d` alone would take any script's (burst:٣ read as 3)
_PATTERN = re.compile(r"(sequential)|burst:(\d{1,5})|rate:(\d{1,6}(?:\.\d{1,6})?)", re.ASCII)


@dataclass(frozen=True)
class Arrival:
    """A parsed pattern; `name` is its normal spelling (what cells and recordings carry)."""

    kind: str  # sequential | burst | rate
    n: int = 1  # burst: trials per episode
    rate: float = 0.0  # rate: arrivals a second

    @property
    def name(self) -> str:
        if self.kind == "burst":
            return f"burst:{self.n}"
        if self.kind == "rate":
            return f"rate:{self.rate:g}"
        return SEQUENTIAL

    def episodes(self, trials: int) -> list[int]:
        """The sizes of a cell's episodes for `trials` measured trials: bursts of N (so
        the count is rounded up to a multiple of N), or at most `RATE_EPISODE` arrivals
        of a rate, split evenly."""
        if self.kind == "burst":
            return [self.n] * math.ceil(trials / self.n)
        if self.kind == "rate":
            k = math.ceil(trials / RATE_EPISODE)
            base, extra = divmod(trials, k)
            return [base + (1 if i < extra else 0) for i in range(k)]
        return []

    def offsets_ns(self, n: int, rng: random.Random) -> list[int]:
        """When each of an episode's `n` arrivals is due, from the episode's start: all at
        0 for a burst; for a rate, the first at 0 and exponential gaps of mean 1/R."""
        if self.kind != "rate":
            return [0] * n
        out, t = [0], 0.0
        for _ in range(n - 1):
            t += rng.expovariate(self.rate)
            out.append(round(t * 1e9))
        return out


def parse_arrival(text: object, where: str) -> Arrival:
    """`sequential`, `burst:N` or `rate:R`; `where` names the field in the error."""
    m = _PATTERN.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise RtaxError(f"{where}: unknown arrival {text!r} (allowed: {ALLOWED})")
    if m.group(1):
        return Arrival(SEQUENTIAL)
    if m.group(2):
        n = int(m.group(2))
        if not 1 <= n <= BURST_MAX:
            raise RtaxError(f"{where}: {text}: a burst of 1 to {BURST_MAX}")
        return Arrival("burst", n=n)
    rate = float(m.group(3))
    if not 0 < rate <= RATE_MAX:
        raise RtaxError(f"{where}: {text}: a rate above 0 and at most {RATE_MAX:g} a second")
    return Arrival("rate", rate=rate)


def check_arrivals(values: object, where: str) -> tuple[str, ...]:
    """`[run] arrivals` (or `--arrival`): a non-empty list of patterns, each once, in
    their normal spelling."""
    if not isinstance(values, (list, tuple)) or not values:
        raise RtaxError(f"{where}: arrivals: a non-empty list (allowed: {ALLOWED})")
    names = tuple(parse_arrival(v, f"{where}: arrivals").name for v in values)
    if len(set(names)) != len(names):
        raise RtaxError(f"{where}: arrivals: a pattern is named twice")
    return names


def split_cell(cell_id: str) -> tuple[str, str]:
    """A cell's id as (the id without its pattern, the pattern): `.../exec@burst:8` ->
    (`.../exec`, `burst:8`). The pattern follows the channel, in the id's last part (a
    host's part may hold an `@` of its own: `ssh://user@host`)."""
    head, sep, last = cell_id.rpartition("/")
    last, at, pattern = last.partition("@")
    return (head + sep + last, pattern) if at else (cell_id, SEQUENTIAL)


def base_cell(cell_id: str) -> str:
    """A cell's id without its arrival pattern (`...@burst:8` -> `...`)."""
    return split_cell(cell_id)[0]


def arrival_of(cell_id: str) -> str:
    """The pattern a cell id carries (`...@burst:8`), sequential without one."""
    return split_cell(cell_id)[1]


def order_key(name: str) -> tuple[int, float]:
    """Patterns from the lightest load: sequential, bursts by size, rates by rate."""
    a = parse_arrival(name, "arrival")
    return (0, 0.0) if a.kind == SEQUENTIAL else (1, a.n) if a.kind == "burst" else (2, a.rate)
