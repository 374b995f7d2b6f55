"""hosts.clocksync: a remote clock's offset and drift from NTP-style samples, each bound
by what the samples can prove (tests against a real sshd: tests/hosts/test_ssh_host.py)."""

from __future__ import annotations

import random

import pytest

from rtax_tui.hosts.clocksync import PHI_PPB, ClockSync, RemoteClock, from_samples


def _samples(rng: random.Random, offset: int, t: int, n: int, drift_ppb: int = 0):
    """n samples of a remote clock `offset` (+ drift) ahead, each with its own delays in
    either direction (asymmetric, as a loaded link's are)."""
    out = []
    for _ in range(n):
        up, down = rng.randint(20_000, 900_000), rng.randint(20_000, 900_000)
        a = t
        c = a + up  # when the remote read its clock, on the controller's clock
        r = c + offset + c * drift_ppb // 10**9
        b = c + down
        out.append((a, r, b))
        t = b + rng.randint(0, 50_000)
    return out


def test_one_sync_bounds_the_true_offset_and_beats_the_quickest_sample() -> None:
    rng = random.Random(7)
    for _ in range(500):
        offset = rng.randint(-(10**15), 10**15)
        samples = _samples(rng, offset, rng.randint(0, 10**12), rng.randint(1, 10))
        s = from_samples(samples)
        assert abs(s.offset_ns - offset) <= s.err_ns
        quickest = min(b - a for a, _r, b in samples)
        assert s.rtt_ns == quickest and s.err_ns <= (quickest + 1) // 2
        assert s.samples == len(samples)


def test_samples_that_disagree_fall_back_to_the_quickest() -> None:
    # the remote clock stepped by 1 s between the two samples: no offset fits both
    s = from_samples([(0, 500, 1000), (2000, 1_000_002_500, 4000)])
    assert (s.offset_ns, s.err_ns, s.rtt_ns) == (0, 500, 1000)
    with pytest.raises(ValueError):
        from_samples([])


def test_drift_measured_within_its_bound_and_the_offset_carried_with_it() -> None:
    rng = random.Random(3)
    for drift in (0, 40_000, -250_000):  # 0, 40 ppm, -250 ppm
        clock = RemoteClock()
        for k in range(5):
            t = 10**12 + k * 30 * 10**9  # a sync every 30 s
            s = clock.add(from_samples(_samples(rng, 5 * 10**9, t, 8, drift)))
            if k == 0:
                assert s.drift_ppb is None and s.drift_err_ppb is None
            else:
                assert s.drift_ppb is not None and s.drift_err_ppb is not None
                assert abs(s.drift_ppb - drift) <= s.drift_err_ppb, (drift, s)
        later = clock.syncs[-1].mono_ns + 20 * 10**9
        off, err = clock.offset_at(later)
        assert abs(off - (5 * 10**9 + later * drift // 10**9)) <= err


def test_one_sync_alone_grows_its_bound_at_phi() -> None:
    clock = RemoteClock()
    clock.add(ClockSync(mono_ns=0, offset_ns=100, err_ns=10, rtt_ns=20, samples=8))
    assert clock.offset_at(0) == (100, 10)
    assert clock.offset_at(10**9) == (100, 10 + PHI_PPB)  # 15 us after a second
    assert clock.offset_at(-(10**9)) == (100, 10 + PHI_PPB)
    with pytest.raises(LookupError):
        RemoteClock().offset_at(0)
