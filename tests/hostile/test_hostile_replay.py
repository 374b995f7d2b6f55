"""The red team on a replay's guard (`allow_unisolated`): a trajectory's commands were
written by a model, and a driver that keeps nothing out runs them on this machine.

The guard asked whether the profile named `local`. SWE-ReX's default deployment (`local`,
its runtime in rtax's own process) keeps nothing out either, and a profile may name an
instance of `local` as it likes (`[drivers_options.plain] driver = "local"`): both ran
a crafted trajectory's command on the host without `allow_unisolated`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _crafted(tmp_path: Path, mark: Path) -> Path:
    """A mini-swe-agent-1 trajectory whose one command writes `mark` on whatever runs it."""
    doc = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {"config": {"environment": {"cwd": "/repo"}}},
        "messages": [
            {"role": "assistant", "content": f"```bash\necho model-wrote-this > {mark}\n```"},
            {"role": "user", "content": "<returncode>0</returncode><output></output>"},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("drivers", "options", "named"),
    [
        ('["swerex"]', "", "swerex"),  # deployment `local`, the default
        ('["swerex"]', '[drivers_options.swerex]\ndeployment = "remote"\n', "swerex"),
        ('["plain"]', '[drivers_options.plain]\ndriver = "local"\n', "plain"),
    ],
)
def test_a_replay_is_refused_on_a_driver_that_keeps_nothing_out(
    tmp_path: Path, drivers: str, options: str, named: str
) -> None:
    mark = tmp_path / "written-on-the-host"
    traj = _crafted(tmp_path, mark)
    prof = tmp_path / "p.toml"
    prof.write_text(
        f'[run]\ntrials = 1\nwarmup = 0\ndrivers = {drivers}\nworkloads = ["evil"]\n'
        f'channels = ["exec"]\n{options}[workloads.evil]\ntrajectory = "{traj}"\n'
    )
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert not mark.exists(), "the model's command ran on this machine"
    assert res.returncode == 2, res.stderr
    assert f"replay refuses the `{named}` driver" in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr


def test_what_keeps_the_host_out_is_the_drivers_promise() -> None:
    from rtax_tui.engine.traj.workload import keeps_host_out

    assert not keeps_host_out("local")
    assert not keeps_host_out("swerex")  # deployment `local`
    assert keeps_host_out("swerex", {"deployment": "docker"})
    assert keeps_host_out("stage") and keeps_host_out("docker")
    assert keeps_host_out("sandbox", {"driver": "stage"})
    assert not keeps_host_out("no-such-driver")
