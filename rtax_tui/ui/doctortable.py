"""The launcher's table of drivers per host, as `rtax doctor --format json` answers."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from rtax_tui.render.plaintext import styled


class DoctorTable(DataTable[Text]):
    """A row per host and driver: checking, ok, or not with its reason and fix."""

    def on_mount(self) -> None:
        self.border_title = "drivers per host (rtax doctor)"
        for col, w in (("host", 22), ("driver", 8), ("status", 9), ("reason → fix", 200)):
            self.add_column(col, key=col, width=w)

    def show(self, status: dict[tuple[str, str], str | None]) -> None:
        """(host, driver) -> None while checking, "" when ok, or "reason → fix"."""
        self.clear()
        for (host, drv), st in sorted(status.items()):
            if st is None:
                mark = "[dim]checking[/dim]"
            elif st:
                mark = "[red]✗ no[/red]"
            else:
                mark = "[green]✓ ok[/green]"
            # a reason is shown as it is: "[Errno 111]" is not markup
            self.add_row(styled(host), styled(drv), Text.from_markup(mark), styled(st or ""))
