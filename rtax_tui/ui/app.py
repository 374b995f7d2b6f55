"""The console app: a monitor screen on a live run or a replay, and what it opens.

From any screen, `n` opens the launcher (a new run), `h` the run history, `R` a
published study reproduced here (its tables filling as it runs) and `q`
goes back to the screen before (from the first screen: quits); ctrl+p is Textual's
command palette, listing every key's action of the screen below by name, and `?`
the same keys as help. The app owns the stack of screens: a screen asks for another
with a message (`navigation`) and leaves by `dismiss()` (its `action_back`, which
`q` calls, may do something first: a run is stopped); when the first one leaves,
the console ends with its result as the exit status.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen

from rtax_tui.model.events import visible
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.monitor import MonitorScreen, open_replay, replay_screen
from rtax_tui.ui.navigation import OpenCompare, OpenReplay, OpenRun

SPEED_ARG: dict[str, float | None] = {"1": 1.0, "2": 2.0, "10": 10.0, "max": None}
SCREENSHOTS = Path("recordings") / "screenshots"  # ignored by git, as all of recordings/

__all__ = ["RtaxApp", "replay_screen", "run_console_home", "run_console_live"]


class RtaxApp(App[int]):
    CSS_PATH = "rtax.tcss"
    TITLE = "rtax"
    BINDINGS = [
        Binding("n", "launcher", "new", tooltip="the launcher: choose, change and start a run"),
        Binding("h", "history", "history",
                tooltip="the run history: replay, compare, report, rerun with changes"),
        Binding("R", "reproduce", "reproduce", show=False,
                tooltip="reproduce a published study here (rtax reproduce): its tables fill "
                "as the experiments run"),
        Binding("question_mark", "help", "help", show=False, tooltip="these keys"),
        Binding("q", "back", "back",
                tooltip="back to the screen before; on the first, quit (a running run is "
                "stopped and torn down first)"),
    ]  # fmt: skip

    def __init__(self, first: Screen[Any]) -> None:
        super().__init__()
        self.first = first
        self.ssh_flags: list[str] = []  # `rtax home --identity ...`: for every launch

    def on_mount(self) -> None:
        self.push_screen(self.first, self._first_left)

    def _first_left(self, result: object) -> None:
        """The first screen was left: a run's exit status, else 0."""
        rc = result if isinstance(result, int) else 0
        self.exit(rc, return_code=rc)

    @on(OpenRun)
    def _open_run(self, msg: OpenRun) -> None:
        screen = MonitorScreen(
            "run", engine_argv=msg.engine_argv, record_path=msg.record_path, title=msg.title
        )
        screen.compare_with = msg.compare_with
        self.push_screen(screen)

    @on(OpenReplay)
    def _open_replay(self, msg: OpenReplay) -> None:
        open_replay(self, msg.path)

    @on(OpenCompare)
    def _open_compare(self, msg: OpenCompare) -> None:
        self.push_screen(CompareScreen(msg.a, msg.b))

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification of the console (a screen's `notify` comes here) is plain
        text: its message often holds an error's text, a path or a command's last line,
        which markup would read (`[ @click=...]` an action); control characters shown."""
        super().notify(
            visible(message), title=visible(title), severity=severity, timeout=timeout,
            markup=False,
        )  # fmt: skip

    def deliver_screenshot(
        self,
        filename: str | None = None,
        path: str | None = None,
        time_format: str | None = None,
    ) -> str | None:
        """The palette's Screenshot. Textual saves it to the user's Downloads folder,
        which need not exist (it failed there, saying only "Failed to save screenshot");
        here it goes to `recordings/screenshots/`, made if missing, and the note says the
        file or why not. In a browser (`rtax serve`) the browser downloads it, as Textual
        does."""
        if self.is_web:
            return super().deliver_screenshot(filename, path, time_format)
        folder = Path(path) if path else SCREENSHOTS
        try:
            folder.mkdir(parents=True, exist_ok=True)
            saved = self.save_screenshot(filename, str(folder), time_format)
        except OSError as exc:
            self.notify(f"no screenshot: {exc}", severity="error")
            return None
        self.notify(f"screenshot: {saved}")
        return None

    def action_launcher(self) -> None:
        """A new run; on a run that ended (or a replay), the launcher is filled in from
        it, and the run it starts is compared with it at the end: the loop of change
        one thing, run again, compare."""
        from rtax_tui.ui.launcher import LauncherScreen, launcher_for_recording

        scr = self.screen
        if isinstance(scr, LauncherScreen):
            return
        if isinstance(scr, MonitorScreen) and (scr.ended or scr.mode == "replay"):
            path = scr.recording_file()
            if path and Path(path).exists() and scr.state.header is not None:
                try:
                    self.push_screen(launcher_for_recording(path, ssh_flags=self.ssh_flags))
                    return
                except Exception as exc:
                    self.notify(f"cannot fill the launcher from {path}: {exc}", severity="error")
        self.push_screen(LauncherScreen(ssh_flags=self.ssh_flags))

    def action_reproduce(self) -> None:
        """A study to reproduce (`PickStudy`), then its tables filling live."""
        from rtax_tui.ui.reproduce import PickStudy, ReproduceScreen

        if isinstance(self.screen, (ReproduceScreen, PickStudy)):
            return
        if any(isinstance(s, ReproduceScreen) and s.running for s in self.screen_stack):
            # reached from a screen opened above it (n, h): a second study would measure
            # under the first's load, and both under each other's
            self.notify("a study is already running here: leave it first (q on its screen)",
                        severity="warning")  # fmt: skip
            return

        def chosen(pick: tuple[str, str] | None) -> None:
            if pick is not None:
                self.push_screen(ReproduceScreen(*pick))

        self.push_screen(PickStudy(), chosen)

    def action_history(self) -> None:
        from rtax_tui.ui.history import HistoryScreen

        if not isinstance(self.screen, HistoryScreen):
            self.push_screen(HistoryScreen())

    async def action_back(self) -> None:
        """`q`: the screen's own way out (`action_back`), else it is dismissed."""
        screen = self.screen
        if len(self.screen_stack) < 2:  # Textual's default screen alone: nothing to leave
            self.exit(0)
        elif callable(getattr(screen, "action_back", None)):
            await self.run_action("back", screen)
        else:
            screen.dismiss()

    def action_help(self) -> None:
        from rtax_tui.ui.modals import HelpScreen, show_help

        if not isinstance(self.screen, HelpScreen):
            show_help(self.screen)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every action a key does on this screen, by name, then Textual's own."""
        seen: set[str] = set()
        for ab in screen.active_bindings.values():
            b = ab.binding
            if not ab.enabled or b.system or b.action in seen:
                continue
            seen.add(b.action)
            keys = self.get_key_display(b)
            title = f"{b.description or b.action} ({keys})"
            yield SystemCommand(title, b.tooltip or title, _runner(self, b.action, ab.node))
        yield from super().get_system_commands(screen)


def _runner(app: App[Any], action: str, node: Any) -> Any:
    async def run() -> None:
        await app.run_action(action, node)

    return run


def run_console_replay(path: str, speed: str = "1") -> int:
    app = RtaxApp(replay_screen(path, SPEED_ARG[speed]))
    app.run()
    return app.return_code or 0


def run_console_live(
    profile_name: str, argv: list[str], record: str, ssh_flags: list[str] | None = None
) -> int:
    screen = MonitorScreen(
        "run", engine_argv=argv, record_path=record, title=f"run {profile_name} → {record}"
    )
    app = RtaxApp(screen)
    app.ssh_flags = list(ssh_flags or [])  # for the runs the launcher starts later
    app.run()
    rc = app.return_code
    if rc is None:
        rc = screen.returncode or 0
    print(f"recording: {record}")
    return rc


def run_console_home(
    profile: str | None = None, hosts: list[str] | None = None, ssh_flags: list[str] | None = None
) -> int:
    """`rtax home`: the launcher first."""
    from rtax_tui.ui.launcher import LauncherScreen

    app = RtaxApp(LauncherScreen(profile, hosts=hosts, ssh_flags=ssh_flags))
    app.ssh_flags = ssh_flags or []
    app.run()
    return app.return_code or 0
