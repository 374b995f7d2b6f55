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
from rtax_tui.model.events import one_line

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


def _promised_results(c: Mapping[str, Any]) -> list[str]:
    """The results of the runs that promised a check (all, when none says)."""
    runs = [r for r in c.get("runs") or [] if r.get("promised", True)]
    return [r["result"] for r in runs] if runs else [c["result"]]


def promise_broken(name: str, c: Mapping[str, Any]) -> bool:
    """A check the driver promises that a run which promised it measured and did not
    pass (a channel that does not promise it, e.g. without an in-place reset, says n/a
    without breaking it). A run that could not measure it (n/a: no libvirt socket on
    the host, no python3 inside) broke nothing: `promise_unchecked` names it."""
    if not c.get("promised"):
        return False
    return not all(passed(name, r) for r in _promised_results(c) if r != NA)


def promise_unchecked(c: Mapping[str, Any]) -> bool:
    """A promised check that no run could measure: neither kept nor broken. An
    environment can make a check n/a (delete python3), so it is named, never counted
    as kept."""
    return bool(c.get("promised")) and all(r == NA for r in _promised_results(c))


def summarize(checks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per result, the breached checks, and the promises kept, broken and
    unchecked (`unchecked_promises`, only when there are some: a summary of a host
    where every promise was measured keeps its shape)."""
    counts = {r: 0 for r in RESULTS}
    breached, broken, unchecked, promised = [], [], [], 0
    for name, c in checks.items():
        counts[c["result"]] = counts.get(c["result"], 0) + 1
        if c["result"] == BREACHED:
            breached.append(name)
        if c.get("promised"):
            promised += 1
            if promise_broken(name, c):
                broken.append(name)
            elif promise_unchecked(c):
                unchecked.append(name)
    out = {
        **counts,
        "breached_checks": breached,
        "promised": promised,
        "broken_promises": broken,
    }
    if unchecked:
        out["unchecked_promises"] = unchecked
    return out


def honest_summary(s: Mapping[str, Any], results: Mapping[str, Any] | None) -> dict[str, Any]:
    """A stored summary (`~/.cache/rtax/probe/last.json`, a recording's header) read by
    today's rule: a promise its `results` (check -> result) say was n/a is unchecked,
    not broken, whatever the older summary counted (every run recorded after a probe
    on a host without libvirt repeated `broken: libvirt_socket`)."""
    out = dict(s)
    broken = [str(n) for n in s.get("broken_promises") or []]
    na = {n for n in broken if isinstance(results, Mapping) and results.get(n) == NA}
    if na:
        out["broken_promises"] = [n for n in broken if n not in na]
        old = [str(n) for n in s.get("unchecked_promises") or []]
        out["unchecked_promises"] = old + [n for n in broken if n in na and n not in old]
    return out


def summary_text(s: Mapping[str, Any]) -> str:
    """`15 blocked, 3 held, 4 breached, 0 n/a; promises kept 18/22`; with promised
    checks that could not be measured, `kept 34/34 measured, 1 n/a (libvirt_socket)`."""
    counts = ", ".join(f"{s.get(r, 0)} {r}" for r in RESULTS)
    if not s.get("promised"):
        return counts + "; promises nothing"
    # a stored summary is its writer's words (a crafted recording's header): each name
    # counted once, never both broken and unchecked, shown one line (red team 2026-12-06:
    # `kept -2/0 measured`, and a name's newline began a line of its own)
    broken = set(map(str, s.get("broken_promises") or []))
    unchecked = [
        one_line(n)
        for n in dict.fromkeys(map(str, s.get("unchecked_promises") or []))
        if n not in broken
    ]
    measured = int(s["promised"]) - len(unchecked)
    kept = measured - len(broken)
    if not unchecked:
        return counts + f"; promises kept {kept}/{measured}"
    return counts + (
        f"; promises kept {kept}/{measured} measured, {len(unchecked)} n/a ({', '.join(unchecked)})"
    )


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
