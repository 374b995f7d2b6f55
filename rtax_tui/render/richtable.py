"""One Rich table of a report's section (load, image): a title, a caption, the given
columns left-aligned (the cell's name folds), the rest right-aligned numbers."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table


def titled_table(
    title: str, caption: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
    left: Sequence[str] = ("cell",),
) -> Table:  # fmt: skip
    table = Table(title=title, caption=caption)
    for h in headers:
        table.add_column(
            h,
            justify="left" if h in left else "right",
            overflow="fold" if h == "cell" else "ellipsis",
        )
    for row in rows:
        table.add_row(*row)
    return table
