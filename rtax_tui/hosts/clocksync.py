"""A remote host's monotonic clock against the controller's, as NTP relates two clocks.

Every timing rtax records is taken on the controller (`time.monotonic_ns()`); a remote
host's clock is another machine's, with its own origin and rate. Instead of reading the
remote clock around every action (two reads of /proc/timer_list in the shell frame, a
third of an SSH shell action's cost), the host reads it on a channel of its own, a few
times at connection and again on a schedule, and keeps the relation:

    remote = controller + offset (+ drift x time since the sync), within +-err

One sample is (a, r, b): the controller's clock when it asked, the remote's reading, the
controller's clock when the answer came. The reading was taken somewhere in [a, b], so
the offset lies in [r - b, r - a]: an interval as wide as the sample's round trip, whatever
the two directions' delays. A sync intersects its samples' intervals (the clocks cannot
drift apart measurably within a few milliseconds) and keeps the middle: its bound is at
most half the quickest sample's round trip. Drift is the offset's slope from the first
sync to the latest, with the bound those two syncs' errors give it; before there is a
second sync, the bound grows at NTP's assumed frequency tolerance (15 ppm).

Nothing a step prints reaches this: the samples come over their own channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

PHI_PPB = 15_000  # how fast an offset's bound grows when no drift is measured (NTP: 15 ppm)


@dataclass(frozen=True)
class ClockSync:
    """One synchronisation: at controller time `mono_ns`, remote - controller = `offset_ns`
    within +-`err_ns`. `rtt_ns`: the quickest sample's round trip; `drift_ppb` (and its
    bound) from the first sync to this one, None for the first."""

    mono_ns: int
    offset_ns: int
    err_ns: int
    rtt_ns: int
    samples: int
    drift_ppb: int | None = None
    drift_err_ppb: int | None = None


def from_samples(samples: Sequence[tuple[int, int, int]]) -> ClockSync:
    """One sync from samples (a, r, b) (see the module docstring). An empty intersection
    (a clock stepped while sampling) falls back to the quickest sample alone."""
    if not samples:
        raise ValueError("no clock samples")
    quick = min(samples, key=lambda s: s[2] - s[0])
    lo = max(r - b for a, r, b in samples)
    hi = min(r - a for a, r, b in samples)
    if lo > hi:
        a, r, b = quick
        lo, hi = r - b, r - a
    mid_ctrl = (quick[0] + quick[2]) // 2
    return ClockSync(
        mono_ns=mid_ctrl,
        offset_ns=(lo + hi) // 2,
        err_ns=(hi - lo + 1) // 2,
        rtt_ns=quick[2] - quick[0],
        samples=len(samples),
    )


class RemoteClock:
    """The syncs of one remote host's clock, oldest first; what they say at any time."""

    def __init__(self) -> None:
        self.syncs: list[ClockSync] = []

    def add(self, s: ClockSync) -> ClockSync:
        """Keep `s`, with the drift from the first sync to it; returns it so completed."""
        if self.syncs and s.mono_ns > self.syncs[0].mono_ns:
            first = self.syncs[0]
            span = s.mono_ns - first.mono_ns
            s = replace(
                s,
                drift_ppb=round((s.offset_ns - first.offset_ns) * 1e9 / span),
                drift_err_ppb=int(-(-(s.err_ns + first.err_ns) * 10**9 // span)),  # ceil
            )
        self.syncs.append(s)
        return s

    def offset_at(self, mono_ns: int) -> tuple[int, int]:
        """(offset, bound) at controller time `mono_ns`: the latest sync carried forward
        (or back) at the measured drift, its bound grown at the drift's bound (or at
        PHI_PPB while there is one sync)."""
        if not self.syncs:
            raise LookupError("the clock was never synchronised")
        s = self.syncs[-1]
        dt = mono_ns - s.mono_ns
        drift = s.drift_ppb or 0
        grow = PHI_PPB if s.drift_err_ppb is None else s.drift_err_ppb
        return s.offset_ns + dt * drift // 10**9, s.err_ns + -(-abs(dt) * grow // 10**9)
