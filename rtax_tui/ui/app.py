"""The console app: a monitor screen on a live run or a replay, and what it opens."""

from __future__ import annotations

from textual.app import App

from rtax_tui.ui.monitor import MonitorScreen, replay_screen

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
