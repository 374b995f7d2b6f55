"""The docker driver's profile options, through `rtax run`: network, workspace."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rtax_tui.drivers.toolkit.images import build_busybox_image

from rtax_tui.model.recording import read_recording

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images


@pytest.fixture(scope="module", autouse=True)
def busybox_image() -> None:
    build_busybox_image("docker")


def run_profile(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    prof = tmp_path / "p.toml"
    prof.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(tmp_path / "r.jsonl")],
        capture_output=True,
        timeout=300,
    )


def test_bind_workspace_and_network_none(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.txt").write_text("from the host\n")
    steps = (
        '{argv = ["cat", "hello.txt"], expect_out = "from the host"}, '
        '{argv = ["sh", "-c", "echo made > made.txt; ls /sys/class/net | tr -d \'\\\\n\'"], '
        'expect_out = "lo"}'
    )
    res = run_profile(
        tmp_path,
        '[run]\ntrials = 2\nwarmup = 0\ndrivers = ["docker"]\nworkloads = ["w"]\n'
        'channels = ["exec", "shell"]\n[drivers_options.docker]\nworkspace = "bind"\n'
        f'[workloads.w]\nfiles = "{src}"\nsteps = [{steps}]\n',
    )
    assert res.returncode == 0, res.stderr.decode()
    rec = read_recording(tmp_path / "r.jsonl")
    events = rec.events
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 4 and all(e["ok"] and e["valid"] for e in ends), ends
    outs = [e["out_bytes"] for e in events if e["type"] == "action" and e["i"] == 1]
    assert outs and all(n == 2 for n in outs)  # only `lo`: network mode none
    assert "create.workspace" in {e["name"] for e in events if e["type"] == "phase"}
    assert not (src / "made.txt").exists()  # a copy was bound, not the source
    # this run's workspaces are removed (other runs on the machine may have theirs)
    assert list(Path(tempfile.gettempdir()).glob(f"rtax-ws-*{rec.header['run_id']}*")) == []


@pytest.mark.parametrize(
    "options, message",
    [
        ('workspace = "both"', "drivers_options.docker.workspace: 'both' (allowed: copy, bind"),
        ('netwrk = "none"', "docker.netwrk: unknown key (allowed: socket, image"),
    ],
)
def test_bad_options_fail_before_any_trial(tmp_path, options, message):
    res = run_profile(
        tmp_path, f'[run]\ndrivers = ["docker"]\n[drivers_options.docker]\n{options}\n'
    )
    err = res.stderr.decode().strip()
    assert res.returncode == 2 and message in err and len(err.splitlines()) == 1


def test_workspace_none_refuses_a_workload_with_files(tmp_path):
    res = run_profile(
        tmp_path,
        '[run]\ndrivers = ["docker"]\nworkloads = ["w"]\n[drivers_options.docker]\n'
        f'workspace = "none"\n[workloads.w]\nfiles = "{tmp_path}"\nsteps = [{{argv = ["true"]}}]\n',
    )
    err = res.stderr.decode()
    assert res.returncode == 2 and 'workload w brings files, and workspace = "none"' in err
