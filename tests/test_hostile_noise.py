"""The red team on the noise sampler (issue 38; docs/boundaries.md, "Red team: the noise
sampler (2026-12-06)"): code inside an environment that wants its cell to read steady,
another's unstable, or the machine blamed; recordings crafted to hang or mislead the
report; the sampler's switch.

Each test failed on the code as it was and names the rule that now holds.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from rtax_tui.analysis import noise_report
from rtax_tui.analysis.report import report_file

sys.path.insert(0, str(Path(__file__).parent))
from test_noise import _noise, _recording  # noqa: E402


def test_each_sample_is_read_once_however_many_cells_the_host_has(tmp_path, monkeypatch):
    """A recording of many cells and a long run's samples (a day is 86,400; a crafted
    one holds a million): `rtax report` read every sample once per kind per cell, cells x
    samples in Python (100,000 samples, 10 cells: 11 s; a million and 100 cells: an hour,
    twice for `compare`). Each sample's figures are now read once per host."""
    calls = {"n": 0}

    def counted(f: Callable[[Mapping[str, Any]], float | None]) -> Callable[..., float | None]:
        def g(s: Mapping[str, Any]) -> float | None:
            calls["n"] += 1
            return f(s)

        return g

    monkeypatch.setattr(
        noise_report,
        "REASONS",
        tuple((kind, counted(fig), words) for kind, fig, words in noise_report.REASONS),
    )
    cells = {f"local/local/w{i}/exec": [10_000_000] * 12 for i in range(8)}
    samples = 300
    noise = [_noise(1 + i * 0.01, dur_ns=10_000_000) for i in range(samples)]
    noise[5] = _noise(1.05, dur_ns=10_000_000, other=0.9)  # the first cell's trials
    noise[6] = _noise(1.06, dur_ns=10_000_000, other=0.9)
    path = tmp_path / "r.jsonl"
    path.write_bytes(_recording(cells, noise))
    rep = report_file(path)
    assert calls["n"] == len(noise_report.REASONS) * samples
    # and the matching is the same: the first cell touched, the others not
    got = {c["cell"]: c["noise"] for c in rep["cells"]}
    assert got["local/local/w0/exec"]["kinds"] == {"other_cpu": 0.25}  # 3 of its 12 trials
    assert not any(got[f"local/local/w{i}/exec"]["unstable"] for i in range(1, 8))
