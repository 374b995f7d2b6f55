"""Per-format figures of `prep` events (`rtax traj prepare -o`), for `rtax report`."""

from __future__ import annotations

from typing import Any

import numpy as np

from rtax_tui.analysis.stats import clusters, summarize


def prep_document(events: list[dict[str, Any]], *, seed: int = 0) -> dict[str, Any]:
    """{"formats": [{format, mode, files, prefixes, n, failed, max_steps, summary,
    clusters}]}; `mode` is what a sample timed (`rtax traj prepare --mode`: "file" or
    "view", "file" for events without one, joined with "," if a recording mixed them)."""
    by_fmt: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        by_fmt.setdefault(str(ev["format"]), []).append(ev)
    rows = []
    for fmt in sorted(by_fmt):
        evs = by_fmt[fmt]
        ok = [int(e["dur_ns"]) for e in evs if e.get("ok")]
        samples = np.asarray(ok, dtype=np.int64)
        rows.append(
            {
                "format": fmt,
                "mode": ",".join(sorted({str(e.get("mode", "file")) for e in evs})),
                "files": len({e["file"] for e in evs}),
                "prefixes": len({(e["file"], e["k"]) for e in evs}),
                "n": len(evs),
                "failed": len(evs) - len(ok),
                "max_steps": max(int(e["steps"]) for e in evs),
                "summary": summarize(samples, seed=seed),
                "clusters": clusters(samples),
            }
        )
    return {"formats": rows}
