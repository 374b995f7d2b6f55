"""The engine and the drivers must never pull in a terminal UI (Textual or Rich), at run
time (the import-linter contracts of tests/test_checks.py check the sources)."""

import subprocess
import sys

CORE_MODULES = [
    "rtax_tui.core.model",
    "rtax_tui.core.recording",
    "rtax_tui.core.profile",
    "rtax_tui.core.plan",
    "rtax_tui.core.session",
    "rtax_tui.core.events",
    "rtax_tui.core.errors",
    "rtax_tui.core.fold",
    "rtax_tui.core.control",
    "rtax_tui.core.scheduling",
    "rtax_tui.core.lifecycle",
    "rtax_tui.core.health",
    "rtax_tui.core.capacity",
    "rtax_tui.core.runner",
    "rtax_tui.core.stats",
    "rtax_tui.core.report",
    "rtax_tui.core.assets",
    "rtax_tui.core.workloads",
    "rtax_tui.core.cgroups",
    "rtax_tui.core.hostfacts",
    "rtax_tui.core.probe",
    "rtax_tui.core.probe_scripts",
    "rtax_tui.core.probe_host",
    "rtax_tui.core.probe_run",
    "rtax_tui.core.probe_state",
    "rtax_tui.drivers",
    "rtax_tui.drivers.local",
    "rtax_tui.drivers.stage",
    "rtax_tui.drivers.docker",
    "rtax_tui.core.images",
    "rtax_tui.drivers.shellframe",
    "rtax_tui.hosts",
]


def test_core_and_drivers_import_no_ui():
    code = (
        "import sys\n"
        f"for m in {CORE_MODULES!r}: __import__(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_headless_engine_never_imports_textual(tmp_path):
    """The process the console starts (and scripts use) runs without the UI library."""
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\ntrials = 2\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["t0"]\n')
    out = tmp_path / "r.jsonl"
    code = (
        "import sys\n"
        "from rtax_tui.cli import main\n"
        f"rc = main(['run', {str(prof)!r}, '--headless', '-o', {str(out)!r}, '--quiet'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print(rc, ','.join(bad))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[-2].strip() == "0"  # rc 0, and no textual module
    assert out.exists()
