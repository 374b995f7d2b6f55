"""The engine and the drivers must never pull in a terminal UI (Textual or Rich)."""

import subprocess
import sys

CORE_MODULES = [
    "rtax_tui.core.model",
    "rtax_tui.core.recording",
    "rtax_tui.core.profile",
    "rtax_tui.core.plan",
    "rtax_tui.core.session",
    "rtax_tui.core.runner",
    "rtax_tui.core.stats",
    "rtax_tui.core.report",
    "rtax_tui.core.assets",
    "rtax_tui.core.workloads",
    "rtax_tui.core.cgroups",
    "rtax_tui.core.hostfacts",
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


def test_core_sources_do_not_mention_ui_imports():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    for d in ("rtax_tui/core", "drivers", "rtax_tui/hosts"):
        for f in (root / d).glob("*.py"):
            text = f.read_text()
            for lib in ("textual", "rich"):
                assert f"import {lib}" not in text and f"from {lib}" not in text, f
