"""What a recording says about image delivery (`report["image"]`, issue 24): per cell of
a run with image modes, the `image` phase and the start-up it adds to, beside the bytes
the content server sent for each trial.

A row is one cell (its mode is the cell's `~MODE`): the `image`, `create` and `ready`
phases and the start-up (image + create + ready) with P50/P95 (the report's
`summarize`), and, over the measured trials' `image` events, the median bytes fetched
and requests, the image's whole size and the fraction of it fetched (`fetched` counts
HTTP headers too, so a whole pull reads just over 100%). The figures leave out the
content server's first preparation (the run's, before any trial) and any network but
loopback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from rtax_tui.analysis.stats import summarize

PARTS = ("image", "create", "ready", "startup")


class ImageCell(Protocol):
    """What the report keeps of a cell (analysis.report's `_CellData`)."""

    cell: str
    n: int
    failed: int
    samples: dict[str, np.ndarray]
    image_events: list[dict[str, Any]]


def image_mode(cell: str) -> str | None:
    """A cell id's image mode (`...~pull`, before any `@PATTERN`), or None."""
    base = cell.split("@", 1)[0]
    last = base.rsplit("/", 1)[-1]
    return last.rsplit("~", 1)[1] if "~" in last else None


def image_document(cells: Sequence[ImageCell], seed: int = 0) -> list[dict[str, Any]] | None:
    """One row per cell that has an image mode, a cell's modes together (cached, pull,
    lazy), in the order the cells first ran; None without any."""
    rows = [_row(cd, seed) for cd in cells if image_mode(cd.cell) is not None]
    first: dict[str, int] = {}
    for r in rows:
        first.setdefault(_without_mode(r["cell"]), len(first))
    order = {m: i for i, m in enumerate(("cached", "pull", "lazy"))}
    rows.sort(key=lambda r: (first[_without_mode(r["cell"])], order.get(r["mode"], 9)))
    return rows or None


def _without_mode(cell: str) -> str:
    mode = image_mode(cell)
    return cell if mode is None else cell.replace(f"~{mode}", "", 1)


def _row(cd: ImageCell, seed: int) -> dict[str, Any]:
    evs = [e for e in cd.image_events if not e.get("warmup")]
    fetched = np.asarray([e["fetched"] for e in evs], dtype=np.int64)
    requests = np.asarray([e["requests"] for e in evs], dtype=np.int64)
    size = max((int(e["size"]) for e in evs), default=0)
    med = float(np.median(fetched)) if fetched.size else None
    row: dict[str, Any] = {
        "cell": cd.cell,
        "mode": image_mode(cd.cell),
        "n": cd.n,
        "failed": cd.failed,
        "fetched_p50": med,
        "fetched_max": int(fetched.max()) if fetched.size else None,
        "requests_p50": float(np.median(requests)) if requests.size else None,
        "size": size or None,
        "fraction": med / size if med is not None and size else None,
    }
    startup = sum(
        (cd.samples[p] for p in ("image", "create", "ready") if cd.samples.get(p) is not None
         and cd.samples[p].size == cd.samples["create"].size),
        np.zeros(cd.samples["create"].size, dtype=np.int64),
    )  # fmt: skip
    for part in PARTS:
        vals = startup if part == "startup" else cd.samples.get(part)
        if vals is not None and vals.size:
            row[part] = summarize(vals, seed=seed)
    return row
