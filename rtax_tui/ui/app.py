"""The console app: a monitor screen on a live run or a replay, and what it opens."""

from __future__ import annotations

import gc
from pathlib import Path

from textual.app import App

from rtax_tui.core.recording import read_recording
from rtax_tui.ui.monitor import MonitorScreen

SPEED_ARG: dict[str, float | None] = {"1": 1.0, "2": 2.0, "10": 10.0, "max": None}


class RtaxApp(App[int]):
    CSS_PATH = "rtax.tcss"
    TITLE = "rtax"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, first: MonitorScreen) -> None:
        super().__init__()
        self.first = first

    def on_mount(self) -> None:
        self.push_screen(self.first)


def replay_screen(path: str, speed: float | None = 1.0) -> MonitorScreen:
    rec = read_recording(path)  # a bad file fails here, before the terminal is taken
    gc.freeze()  # the recording stays for the app's life: no GC pass should rescan it
    prof = (rec.header.get("profile") or {}).get("name", "?")
    return MonitorScreen(
        "replay", recording=rec, speed=speed, title=f"replay {Path(path).name} ({prof})"
    )


def open_replay(app: App, path: str) -> None:
    try:
        screen = replay_screen(path)
    except Exception as exc:
        app.notify(f"cannot replay {path}: {exc}", severity="error")
        return
    app.push_screen(screen)


def run_console_replay(path: str, speed: str = "1") -> int:
    app = RtaxApp(replay_screen(path, SPEED_ARG[speed]))
    app.run()
    return app.return_code or 0


def run_console_live(profile_name: str, argv: list[str], record: str) -> int:
    screen = MonitorScreen(
        "run", engine_argv=argv, record_path=record, title=f"run {profile_name} → {record}"
    )
    app = RtaxApp(screen)
    app.run()
    rc = app.return_code
    if rc is None:
        rc = screen.returncode or 0
    print(f"recording: {record}")
    return rc
