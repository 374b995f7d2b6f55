"""Helpers of the probe tests: one probe through the core API, its results by channel."""

from __future__ import annotations

import asyncio
from typing import Any

from rtax_tui.engine.probe.run import run_probe
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.probedoc import build_document


def probe(
    drivers: list[str],
    channels: list[str],
    *,
    host: Any = None,
    options: dict[str, dict[str, Any]] | None = None,
    label: str = "",
) -> dict[str, Any]:
    """The `rtax-probe/1` document of one probe (no state file is written). `host`: a
    host, or a function that makes one (an SSH host must live in the probe's loop)."""

    async def go() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        h = host() if callable(host) else host or LocalHost()  # made in this event loop
        await h.connect()
        try:
            await run_probe(
                {h.name: h}, drivers, channels, events.append, options=options, label=label
            )
        finally:
            await h.close()
        return events

    return build_document(asyncio.run(go()))


def by_run(doc: dict[str, Any], driver: str) -> dict[tuple[str, str], dict[str, str]]:
    """(host, channel) -> check -> result, for one driver."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for name, c in doc["drivers"][driver]["checks"].items():
        for r in c["runs"]:
            out.setdefault((r["host"], r["channel"]), {})[name] = r["result"]
    return out


def failures(doc: dict[str, Any], driver: str) -> list[str]:
    """Every run of a check that did not pass (blocked/held), with its evidence."""
    from rtax_tui.model.probedoc import passed

    bad = []
    for name, c in doc["drivers"][driver]["checks"].items():
        for r in c["runs"]:
            if name in ("pool_reuse_clean", "reset_links") and "no in-place reset" in r["evidence"]:
                # nothing to measure: a pool here recreates (tests/engine/test_pool_reuse.py)
                continue
            if not passed(name, r["result"]):
                bad.append(f"{r['host']}/{r['channel']} {name}: {r['result']}: {r['evidence']}")
    return bad
