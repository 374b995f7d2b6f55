"""The engine and the drivers must never pull in a terminal UI (Textual or Rich), at run
time (the import-linter contracts of tests/house/test_checks.py check the sources)."""

import subprocess
import sys

CORE_MODULES = [
    "rtax_tui.model.spec",
    "rtax_tui.model.recording",
    "rtax_tui.engine.profile",
    "rtax_tui.engine.plan",
    "rtax_tui.engine.session",
    "rtax_tui.model.events",
    "rtax_tui.model.errors",
    "rtax_tui.model.fold",
    "rtax_tui.engine.control",
    "rtax_tui.engine.scheduling",
    "rtax_tui.engine.lifecycle",
    "rtax_tui.engine.health",
    "rtax_tui.engine.capacity",
    "rtax_tui.engine.runner",
    "rtax_tui.analysis.stats",
    "rtax_tui.analysis.report",
    "rtax_tui.drivers.toolkit.assets",
    "rtax_tui.engine.workloads",
    "rtax_tui.hosts.cgroups",
    "rtax_tui.hosts.hostfacts",
    "rtax_tui.model.checks",
    "rtax_tui.model.probedoc",
    "rtax_tui.engine.probe.classify",
    "rtax_tui.engine.probe.scripts",
    "rtax_tui.engine.probe.host",
    "rtax_tui.engine.probe.run",
    "rtax_tui.engine.probe.state",
    "rtax_tui.drivers",
    "rtax_tui.drivers.local",
    "rtax_tui.drivers.stage",
    "rtax_tui.drivers.docker",
    "rtax_tui.drivers.toolkit.images",
    "rtax_tui.drivers.toolkit.shellframe",
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
        "from rtax_tui.commands.cli import main\n"
        f"rc = main(['run', {str(prof)!r}, '--headless', '-o', {str(out)!r}, '--quiet'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print(rc, ','.join(bad))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[-2].strip() == "0"  # rc 0, and no textual module
    assert out.exists()
