"""The prepared prefixes of every real trajectory file, pinned: one sha256 per (file,
trajectory, k) over the first k steps as `rtax traj prepare` rebuilds them (every field of
each step, its arguments and observation as recorded, and `validate_prefix`'s history),
plus one over the whole normalized trajectory (`rtax traj inspect --format json`).

The pinned digests (tests/data/traj_prefix_digests.json) were generated from main's code
at 202c4eb, before prefix preparation was made faster (issue 26, item 4): a reader that
parses once, stops early or shares decoded lines must rebuild exactly the same prefixes.
Regenerate only when a reader's rules change on purpose:
`python -m tests.test_traj_prefix_digests > tests/data/traj_prefix_digests.json`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine.traj import find_trajectories, read_trajectories
from rtax_tui.engine.traj.model import Trajectory
from rtax_tui.engine.traj.prepare import validate_prefix

DATA = Path(__file__).parents[1] / "data" / "trajectories"
PINNED = Path(__file__).parents[1] / "data" / "traj_prefix_digests.json"


def _sha(value: Any) -> str:
    # sort_keys: a digest of the values, not of a dict's insertion order
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _prefix(t: Trajectory, k: int) -> Any:
    steps = [
        {**s.to_json(), "output": s.output, "line": s.line, "args": s.args} for s in t.steps[:k]
    ]
    return {"steps": steps, "history": validate_prefix(t, k)}


@functools.cache
def digests() -> dict[str, dict[str, Any]]:
    """{file#index: {"whole": sha, "prefixes": [sha for k in 0..steps]}} for every file."""
    out: dict[str, dict[str, Any]] = {}
    for p in find_trajectories([str(DATA)]):
        for idx, t in enumerate(read_trajectories(p)):
            key = f"{p.relative_to(DATA).as_posix()}#{idx}"
            out[key] = {
                "whole": _sha(t.to_json() | {"path": None}),
                "prefixes": [_sha(_prefix(t, k)) for k in range(len(t.steps) + 1)],
            }
    return out


PINS: dict[str, dict[str, Any]] = json.loads(PINNED.read_text())


def test_every_file_pinned() -> None:
    assert sorted(digests()) == sorted(PINS)


@pytest.mark.parametrize("key", sorted(PINS))
def test_prefixes_as_pinned(key: str) -> None:
    got = digests()[key]
    assert got["whole"] == PINS[key]["whole"]
    want = PINS[key]["prefixes"]
    assert len(got["prefixes"]) == len(want)
    for k, (g, w) in enumerate(zip(got["prefixes"], want, strict=True)):
        assert g == w, f"{key}: prefix k={k} differs from main's"


if __name__ == "__main__":
    json.dump(digests(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
