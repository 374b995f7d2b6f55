"""The red team on `rtax reproduce` (2026-12-06): its output directory.

`rtax reproduce` runs as root (stage, VMs) and writes `--root`/reproduce-<study>-<time>/
for minutes to hours. Another user who can rename entries of `--root` (its owner, or
anyone where it is writable without the sticky bit) swaps that directory for one of
their own after rtax made it, with `report.json` a link to a file of root's: rtax
wrote its report through the link. Such a `--root` is refused, in one line.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rtax_tui.analysis import studies
from rtax_tui.commands import cli

TINY = """\
title = "tiny"
source = "a test's own study"

[experiments.start]
what = "T0 on local"
profile = "t0"
drivers = ["local"]
channels = ["exec"]
quick = { trials = 3, warmup = 0 }
full = { trials = 3, warmup = 0 }

[[tables]]
id = "t"
title = "start"
conditions = "N = 3"

[[rows]]
table = "t"
label = "local completion"
experiment = "start"
driver = "local"
figure = "total"
published = 1.0
unit = "s"
"""

OTHER = 65534  # nobody


def _swap(root: Path, victim: Path, stop: threading.Event) -> None:
    """The other user: once rtax made its directory, put theirs in its place."""
    while not stop.is_set():
        made = [p for p in root.iterdir() if p.name.startswith("reproduce-tiny-")]
        if made:
            made[0].rename(root / "moved")
            made[0].mkdir()
            (made[0] / "report.json").symlink_to(victim)
            os.chown(made[0], OTHER, OTHER)
            return
        time.sleep(0.001)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's directory needs root to make")
@pytest.mark.parametrize(("owner", "mode"), [(OTHER, 0o755), (0, 0o777)])
def test_a_root_another_user_can_rename_in_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    owner: int, mode: int,
) -> None:  # fmt: skip
    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny.toml").write_text(TINY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "root-only"
    victim.write_text("root's own\n")
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, owner, owner)
    root.chmod(mode)
    stop = threading.Event()
    other = threading.Thread(target=_swap, args=(root, victim, stop), daemon=True)
    other.start()
    try:
        rc = cli.main(["reproduce", "tiny", "--driver", "local", "--root", str(root)])
    finally:
        stop.set()
        other.join()
    err = capsys.readouterr().err
    assert victim.read_text() == "root's own\n"
    assert rc == 2, err
    assert f"--root {root}: " in err and len(err.strip().splitlines()) == 1, err
    assert list(root.iterdir()) == []


def test_the_directory_is_said_without_its_escapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `--root` named with terminal sequences (a title, a colour) is shown as text."""
    data = tmp_path / "studies"
    data.mkdir()
    (data / "tiny.toml").write_text(TINY)
    monkeypatch.setattr(studies, "studies_dir", lambda: data)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "r\x1b]0;PWNED\x07\x1b[31m"
    rc = cli.main(["reproduce", "tiny", "--driver", "local", "--root", str(root)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "\x1b" not in captured.err and "\x07" not in captured.err, captured.err
    assert "reproduce: " in captured.err
