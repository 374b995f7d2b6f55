"""The launcher's table of drivers per host, as `rtax doctor --format json` answers."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from rtax_tui.render.plaintext import styled

WIDTHS = (
    ("host (rtax doctor)", 18),
    ("driver", 8),
    ("status", 8),
    ("drivers, or reason → fix", 60),
)


class DoctorTable(DataTable[Text]):
    """A row per host and driver: checking, ok, or not with its reason and fix."""

    def on_mount(self) -> None:
        self.border_title = "drivers per host (rtax doctor)"
        for col, w in WIDTHS:
            self.add_column(col, key=col, width=w)
        self._status: dict[tuple[str, str], str | None] = {}

    def on_resize(self) -> None:
        """The last column gets the width the others leave; a long reason wraps."""
        col = self.columns[ColumnKey(WIDTHS[-1][0])]
        fixed = sum(w + 2 for _, w in WIDTHS[:-1])
        col.width = max(20, self.size.width - fixed - 3)
        self.show(self._status)

    def show(self, status: dict[tuple[str, str], str | None]) -> None:
        """(host, driver) -> None while checking, "" when ok, or "reason → fix": per
        host one row for the drivers that work (their names), then a row for each
        other, so that every driver shows on a terminal 30 lines tall."""
        self._status = dict(status)
        self.clear()
        works: dict[str, list[str]] = {}
        for (host, drv), st in sorted(status.items()):
            if st == "":
                works.setdefault(host, []).append(drv)
        for host, drivers in works.items():
            self.add_row(
                styled(host),
                styled(f"{len(drivers)} ok"),
                Text.from_markup("[green]✓ ok[/green]"),
                styled(" ".join(drivers)),
                height=None,
            )
        for (host, drv), st in sorted(status.items()):
            if st == "":
                continue
            if st is None:
                mark = "[dim]checking[/dim]"
            elif st:
                mark = "[red]✗ no[/red]"
            else:
                mark = "[green]✓ ok[/green]"
            # a reason is shown as it is: "[Errno 111]" is not markup
            self.add_row(
                styled(host), styled(drv), Text.from_markup(mark), styled(st or ""), height=None
            )
