"""The red team on `rtax traj inspect --format json`: a trajectory is what the agent (the
model under training) wrote, and its JSON goes to a terminal (or the browser's xterm.js).

JSON escapes the C0 controls (ESC included) but leaves the C1 controls raw (U+009B is a
CSI to xterm.js and to a terminal that reads C1 in UTF-8) and the bidirectional controls
(U+202E shows a command reversed, "Trojan Source"). The table path shows them through
`events.visible`; the JSON path wrote them as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SAMPLE = (
    Path(__file__).parents[1] / "data/trajectories/mini-swe-agent/astropy__astropy-12907.traj.json"
)
EVIL = "\u009b2J\u009d0;PWN\u0007\u202egnp.exe\u2066\u2028\u007f"
RAW = [c.encode() for c in "\u0080\u009b\u009d\u202e\u2066\u2028\u007f"]


def _crafted(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: (v + EVIL if k == "command" and isinstance(v, str) else _crafted(v))
                for k, v in o.items()}  # fmt: skip
    if isinstance(o, list):
        return [_crafted(v) for v in o]
    return o


def test_traj_inspect_json_writes_no_raw_c1_or_bidi_control(tmp_path: Path) -> None:
    traj = tmp_path / "crafted.traj.json"
    traj.write_text(json.dumps(_crafted(json.loads(SAMPLE.read_text()))))
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "traj", "inspect", "--format", "json", str(traj)],
        capture_output=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    shown = [c for c in RAW if c in res.stdout]
    assert not shown, shown
    # escaped, not changed: a JSON reader gets the agent's text as it was
    doc = json.loads(res.stdout)
    assert any(EVIL in (s.get("command") or "") for s in doc["steps"])
