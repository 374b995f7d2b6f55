"""Drivers are plugins: one installed from another package shows up in `rtax doctor` and
runs in a profile, and rtax's own come from the same entry-point group."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rtax_tui.drivers import DriverRegistryError, driver_class, names
from rtax_tui.drivers.registry import GROUP

from rtax_tui.model.recording import read_recording

PLUGIN = Path(__file__).parents[1] / "data" / "plugins" / "rtax-echo"


def test_builtins_come_from_the_entry_point_group():
    import tomllib
    from importlib.metadata import entry_points

    with open(Path(__file__).parents[2] / "pyproject.toml", "rb") as f:
        own = set(tomllib.load(f)["project"]["entry-points"][GROUP])
    assert own >= {"local", "stage", "docker", "podman", "libvirt", "microvm", "swerex"}
    eps = {ep.name for ep in entry_points(group=GROUP) if ep.dist and ep.dist.name == "rtax"}
    # the installed metadata names what pyproject.toml names (else: pip install -e . again)
    assert eps == own
    assert set(names()) >= eps
    assert driver_class("stage").name == "stage"


def test_a_driver_with_a_daemon_overrides_the_contract_s_hooks_by_name():
    """A hook misspelled in a subclass is a new method nobody calls: the container split
    renamed `daemon_call` to `daemoncall`, and doctor stopped timing dockerd and podman
    (tests/drivers/test_slow_daemons.py found it; it needs the daemons). Each driver with a daemon
    has its own `daemon_call`."""
    from rtax_tui.drivers.base import Driver

    for name in ("docker", "podman", "libvirt"):  # the drivers whose daemon doctor times
        assert driver_class(name).daemon_call is not Driver.daemon_call, name


def test_unknown_driver_is_a_clear_error():
    with pytest.raises(DriverRegistryError, match="unknown driver 'nope'.*registered: "):
        driver_class("nope")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """The plugin package built and installed into a directory of its own (no network,
    no build isolation; from a copy, so the build leaves nothing in tests/data)."""
    src = tmp_path_factory.mktemp("src") / "rtax-echo"
    shutil.copytree(PLUGIN, src)
    target = tmp_path_factory.mktemp("site")
    res = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
            "--disable-pip-version-check", "--no-index", "--target", str(target), str(src),
        ],
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    return target


def _rtax(site: Path, *args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )


def test_a_plugin_driver_shows_in_doctor_and_runs_in_a_profile(plugin_path, tmp_path):
    res = _rtax(plugin_path, "doctor")
    out = res.stdout.decode()
    assert "echo" in out and "rtax-echo-driver 0.1.0" in out, out
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 2\nwarmup = 0\ndrivers = ["echo"]\nworkloads = ["w"]\n'
        'channels = ["exec"]\n[workloads.w]\n'
        'steps = [{argv = ["sh", "-c", "echo hi > f && cat f"], expect_out = "hi"}]\n'
        '[drivers_options.echo]\nanswer = "yes"\n'
    )
    rec_path = tmp_path / "r.jsonl"
    res = _rtax(plugin_path, "run", str(prof), "--headless", "-o", str(rec_path))
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    rec = read_recording(rec_path)
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    assert len(ends) == 2 and all(e["ok"] and e["valid"] for e in ends), ends
    assert rec.header["hosts"]["local"]["drivers"]["echo"]["plugin"] == "rtax-echo-driver 0.1.0"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('answer = "no"', "drivers_options.echo.answer: 'no' (allowed: ok, yes)"),
        ("shell = 3", "drivers_options.echo.shell: expected string, got 3"),
        ('shel = "sh"', "drivers_options.echo.shel: unknown key (allowed: shell, answer)"),
    ],
)
def test_a_plugin_driver_s_options_are_checked_as_a_built_in_s(plugin_path, tmp_path, body, says):
    """A plugin declares its options as rtax's own drivers do (`model.schema`): a
    mistake in its table is one line naming the file, the line and the key."""
    prof = tmp_path / "p.toml"
    prof.write_text(f'[run]\ndrivers = ["echo"]\n[drivers_options.echo]\n{body}\n')
    res = _rtax(plugin_path, "run", str(prof), "--headless", "-o", str(tmp_path / "r.jsonl"))
    err = res.stderr.decode().strip().splitlines()
    assert res.returncode == 2 and len(err) == 1, err
    assert f"p.toml:4: {says}" in err[0], err
    assert not (tmp_path / "r.jsonl").exists()


def test_without_the_plugin_the_profile_names_an_unknown_driver(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\ndrivers = ["echo"]\n')
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless"],
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 2
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "drivers" in err[0] and "'echo'" in err[0], err


def test_a_plugin_driver_is_probed(plugin_path, tmp_path):
    """`rtax probe` measures a plugin's boundary like a built-in's: its checks come back
    with verdicts, and (it states it keeps nothing out) none is a broken promise."""
    rec_path = tmp_path / "p.jsonl"
    res = _rtax(plugin_path, "probe", "--driver", "echo", "--channel", "exec", "--format",
                "json", "-o", str(rec_path))  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    rec = read_recording(rec_path)
    probes = [e for e in rec.events if e["type"] == "probe"]
    assert probes and {e["driver"] for e in probes} == {"echo"}, probes[:3]
    # a driver with no isolation: another process of the host is seen, not blocked
    seen = {e["check"]: e["result"] for e in probes}
    assert seen.get("host_processes") == "breached", seen


def test_a_plugin_driver_is_collected_by_the_contract_suite(plugin_path):
    """The contract suite runs over every registered driver: the plugin's module and its
    entry point are all it takes (no test file names it)."""
    path = os.pathsep.join(p for p in (str(plugin_path), os.environ.get("PYTHONPATH")) if p)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "echo",
         str(Path(__file__).parent / "test_contract.py")],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=Path(__file__).parents[2],
        timeout=600,
    )  # fmt: skip
    out = res.stdout.decode()
    assert res.returncode == 0, out[-3000:]
    # every contract test ran on it (exec only: it has no shell channel), none skipped
    tail = out.strip().splitlines()[-1]
    assert " passed" in tail and "failed" not in tail and "error" not in tail, tail
    assert int(tail.split(" passed")[0].split()[-1]) >= 8, tail
