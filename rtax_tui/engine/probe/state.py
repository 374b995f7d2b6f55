"""The last `rtax probe` result of each host/driver, kept in rtax's cache directory.

`rtax run` writes the summary into its recording's header
(`hosts.<host>.drivers.<driver>.boundary`), so every cost figure can be shown next
to what the substrate kept out when it was last measured, with that date; a pair
never probed says so (`{"status": "not probed"}`). The file is rewritten whole
(write, then rename), so a reader never sees half of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from rtax_tui.model.probedoc import build_document, honest_summary

STATE_FORMAT = "rtax-probe-last/1"
NOT_PROBED = {"status": "not probed"}


def state_path() -> Path:
    from rtax_tui.drivers.toolkit.assets import cache_dir

    return cache_dir() / "probe" / "last.json"


def load(path: Path | None = None) -> dict[str, Any]:
    """Entries by `host/driver`; an unreadable or foreign file reads as empty."""
    p = path or state_path()
    try:
        data = orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def entries_from_events(
    events: Iterable[Mapping[str, Any]], probed_at: str
) -> dict[str, dict[str, Any]]:
    """One entry per host/driver: its checks' results, the channels, the summary."""
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for ev in events:
        if ev.get("type", "probe") == "probe":
            by_key.setdefault(f"{ev['host']}/{ev['driver']}", []).append(ev)
    out: dict[str, dict[str, Any]] = {}
    for key, evs in by_key.items():
        doc = build_document(evs)
        (drv,) = doc["drivers"].values()
        out[key] = {
            "probed_at": probed_at,
            "channels": sorted({str(e["channel"]) for e in evs}),
            "checks": {k: c["result"] for k, c in drv["checks"].items()},
            "summary": drv["summary"],
        }
    return out


def save(entries: Mapping[str, Any], path: Path | None = None) -> Path:
    """Merge `entries` into the file (newer replace older ones of the same pair)."""
    p = path or state_path()
    merged = load(p)
    merged.update(entries)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_bytes(
        orjson.dumps({"format": STATE_FORMAT, "entries": merged}, option=orjson.OPT_INDENT_2)
    )
    os.replace(tmp, p)
    return p


def boundary(host: str, driver: str, path: Path | None = None) -> dict[str, Any]:
    """What `rtax run` records for a host/driver: the last probe, or "not probed"."""
    e = load(path).get(f"{host}/{driver}")
    if not isinstance(e, dict):
        return dict(NOT_PROBED)
    if isinstance(e.get("summary"), dict):  # an older probe's: an n/a was a broken promise
        return {**e, "summary": honest_summary(e["summary"], e.get("checks"))}
    return dict(e)
