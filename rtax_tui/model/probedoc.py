"""The `rtax-probe/1` document, folded from `probe` events (live in the engine's probe,
or read from a recording), its summaries, and the driver x check matrix the console
draws: what the probe, the report, the CLI and the console all build or read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rtax_tui.model.checks import (
    BLOCKED,
    BREACHED,
    BY_NAME,
    CHECKS,
    HELD,
    NA,
    PROBE_FORMAT,
    RESULTS,
)

# -- combining runs: channels and hosts ----------------------------------------------


def combine(results: Iterable[str]) -> str:
    """One result for a check over several runs: breached anywhere is breached; a run
    that could not measure (n/a) makes the whole n/a; else the check passed."""
    rs = list(results)
    if not rs:
        return NA
    if BREACHED in rs:
        return BREACHED
    if NA in rs:
        return NA
    return rs[0]


def passed(name: str, result: str) -> bool:
    return result == BY_NAME[name].passed if name in BY_NAME else result in (BLOCKED, HELD)


def build_document(events: Iterable[Mapping[str, Any]], **meta: Any) -> dict[str, Any]:
    """The `rtax-probe/1` document from `probe` events (live, or read from a recording).

    `drivers.<driver>.checks.<check>` holds the combined `result` and `evidence` (of a
    breaching run, when one breached) and every run (host, channel) in `runs`;
    `promised` says whether the driver states that it keeps this check; `summary`
    counts results and names broken promises (promised, not passed)."""
    drivers: dict[str, dict[str, Any]] = {}
    for ev in events:
        if ev.get("type", "probe") != "probe":
            continue
        d = drivers.setdefault(str(ev["driver"]), {"checks": {}})
        c = d["checks"].setdefault(
            str(ev["check"]), {"result": NA, "evidence": "", "promised": False, "runs": []}
        )
        c["runs"].append(
            {
                "host": ev["host"],
                "channel": ev["channel"],
                "result": ev["result"],
                "evidence": ev["evidence"],
                "promised": bool(ev.get("promised")),
            }
        )
        c["promised"] = c["promised"] or bool(ev.get("promised"))
    order = {c.name: i for i, c in enumerate(CHECKS)}
    for d in drivers.values():
        checks = d["checks"]
        d["checks"] = {k: checks[k] for k in sorted(checks, key=lambda k: order.get(k, 999))}
        for c in d["checks"].values():
            c["result"] = combine(r["result"] for r in c["runs"])
            src = next((r for r in c["runs"] if r["result"] == c["result"]), c["runs"][0])
            tag = f"[{src['host']}/{src['channel']}] " if len(c["runs"]) > 1 else ""
            c["evidence"] = tag + src["evidence"]
        d["summary"] = summarize(d["checks"])
    return {"format": PROBE_FORMAT, **meta, "drivers": drivers}


def promise_broken(name: str, c: Mapping[str, Any]) -> bool:
    """A check the driver promises that a run which promised it did not pass (a channel
    that does not promise it, e.g. without an in-place reset, says n/a without breaking
    it)."""
    if not c.get("promised"):
        return False
    runs = [r for r in c.get("runs") or [] if r.get("promised", True)]
    results = [r["result"] for r in runs] if runs else [c["result"]]
    return not all(passed(name, r) for r in results)


def summarize(checks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per result, the breached checks, and the promises kept and broken."""
    counts = {r: 0 for r in RESULTS}
    breached, broken, promised = [], [], 0
    for name, c in checks.items():
        counts[c["result"]] = counts.get(c["result"], 0) + 1
        if c["result"] == BREACHED:
            breached.append(name)
        if c.get("promised"):
            promised += 1
            if promise_broken(name, c):
                broken.append(name)
    return {
        **counts,
        "breached_checks": breached,
        "promised": promised,
        "broken_promises": broken,
    }


def summary_text(s: Mapping[str, Any]) -> str:
    """`15 blocked, 3 held, 4 breached, 0 n/a; promises kept 18/22`."""
    counts = ", ".join(f"{s.get(r, 0)} {r}" for r in RESULTS)
    if s.get("promised"):
        kept = int(s["promised"]) - len(s.get("broken_promises") or [])
        counts += f"; promises kept {kept}/{s['promised']}"
    else:
        counts += "; promises nothing"
    return counts


def matrix(
    header: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Columns of a driver x check matrix for a recording: its own `probe` events when it
    has them (a `rtax probe -o` recording), else the boundaries its header carries (the
    last probe of each host/driver when the run started). Each column: `checks`
    (check -> result, missing when unknown) and `note` (where the results come from)."""
    probes = [e for e in events if e.get("type") == "probe"]
    cols: dict[str, dict[str, Any]] = {}
    if probes:
        hosts = {e["host"] for e in probes}
        for e in probes:
            key = str(e["driver"]) if len(hosts) == 1 else f"{e['host']}/{e['driver']}"
            col = cols.setdefault(key, {"runs": {}, "note": "measured in this recording"})
            col["runs"].setdefault(e["check"], []).append(e["result"])
        for col in cols.values():
            col["checks"] = {k: combine(v) for k, v in col.pop("runs").items()}
        return cols
    hosts_f = (header or {}).get("hosts") or {}
    if not isinstance(hosts_f, dict):
        return cols
    names = [h for h, f in hosts_f.items() if isinstance(f, dict) and f.get("drivers")]
    for host in names:
        for drv, f in (hosts_f[host].get("drivers") or {}).items():
            b = f.get("boundary") if isinstance(f, dict) else None
            if not isinstance(b, dict):
                continue
            key = drv if len(names) == 1 else f"{host}/{drv}"
            if b.get("checks"):
                chans = ", ".join(b.get("channels") or [])
                note = f"probed {b.get('probed_at', '?')}" + (f" ({chans})" if chans else "")
                cols[key] = {"checks": dict(b["checks"]), "note": note}
            else:
                cols[key] = {"checks": {}, "note": str(b.get("status") or "not probed")}
    return cols
