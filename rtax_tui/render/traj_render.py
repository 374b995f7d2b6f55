"""Terminal rendering of trajectories (`rtax traj inspect`) and of prefix-preparation
figures (`rtax report` on a `rtax traj prepare -o` recording)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

PREP_HEADERS = [
    "format",
    "files",
    "prefixes",
    "n",
    "failed",
    "P50",
    "P95",
    "P99",
    "max",
    "clusters",
]


def _ms(v: float | None) -> str:
    from rtax_tui.render.tables import fmt_ms

    return fmt_ms(v)


def _clusters(c: list[dict[str, Any]] | None) -> str:
    if not c:
        return "-"
    return " | ".join(f"{x['n']}x {_ms(x['p50_ms'])}" for x in c)


def prep_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in doc["formats"]:
        s = r["summary"]
        rows.append(
            [
                r["format"],
                str(r["files"]),
                str(r["prefixes"]),
                str(r["n"]),
                str(r["failed"]),
                _ms(s["p50_ms"]),
                _ms(s["p95_ms"]),
                _ms(s["p99_ms"]),
                _ms(s["max_ms"]),
                _clusters(r.get("clusters")),
            ]
        )
    return rows


def render_prep(doc: dict[str, Any]) -> Table:
    modes = ",".join(sorted({str(r.get("mode", "file")) for r in doc["formats"]}))
    t = Table(title=f"prefix preparation per trajectory format (ms; --mode {modes}; no tool run)")
    for h in PREP_HEADERS:
        t.add_column(h, justify="left" if h in ("format", "clusters") else "right")
    for row in prep_rows(doc):
        t.add_row(*row)
    return t


def prep_markdown(doc: dict[str, Any]) -> str:
    from rtax_tui.render.tables import md_table as _md_table

    return _md_table(PREP_HEADERS, prep_rows(doc))


def _trim(s: str | None, width: int) -> str:
    if s is None:
        return "-"
    one = " ".join(s.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def render_steps(doc: dict[str, Any], width: int = 70) -> Table:
    kinds = ", ".join(f"{k} {v}" for k, v in doc["kinds"].items() if v)
    t = Table(
        title=f"{doc['path']}: {doc['format']}"
        + (f" ({doc['variant']})" if doc.get("variant") else "")
        + f", {len(doc['steps'])} steps ({kinds or 'none'}), "
        f"{doc['unpaired']} without a result, {doc['skipped_records']} records skipped"
    )
    for h in ("i", "kind", "tool", "command", "exit", "out bytes", "cwd"):
        t.add_column(h, justify="right" if h in ("i", "exit", "out bytes") else "left")
    for s in doc["steps"]:
        t.add_row(
            str(s["i"]),
            s["kind"],
            _trim(s["tool"], 18),
            _trim(s["command"], width),
            "-" if s["exit_code"] is None else str(s["exit_code"]),
            "no result" if not s["paired"] else str(s["output_bytes"] or 0),
            _trim(s["cwd"], 30),
        )
    return t


# -- replay fidelity (`rtax report` on a run with replay workloads) ---------------------

REPLAY_HEADERS = [
    "cell",
    "trials",
    "trajectories",
    "fidelity",
    "same rc",
    "steps run",
    "timed out",
    "skipped",
    "workspace",
    "at root",
]


def replay_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """Per replay cell: the fidelity (same exit code / steps with a recorded one), the
    steps run, killed at the timeout, and not replayed (summed over measured trials)."""
    rows = []
    for c in report["cells"]:
        r = c.get("replay")
        if not r:
            continue
        fid = "-" if r["fidelity"] is None else f"{100 * r['fidelity']:.0f}%"
        if not r.get("representative", True):
            fid += " (not representative)"
        root = r.get("root")
        at = "-" if root is None else f"{root} ({'yes' if r.get('at_root') else 'no'})"
        rows.append(
            [
                str(c["cell"]),
                str(r["trials"]),
                str(r["trajectories"]),
                fid,
                f"{r['matched']}/{r['with_rc']}",
                str(r["steps_run"]),
                str(r["timed_out"]),
                str(r["skipped"]),
                str(r.get("workspace", "-")),
                at,
            ]
        )
    return rows


def render_replay(report: Mapping[str, Any]) -> Table | None:
    rows = replay_rows(report)
    if not rows:
        return None
    table = Table(
        title="replay fidelity: steps that got the exit code the trajectory recorded",
        caption="skipped: steps not replayed (other tools, paths outside the trajectory's "
        "root); at root: the agent's directory, and whether the environments showed the "
        "workspace there; not representative: fidelity under `--fidelity-min`",
    )
    for i, h in enumerate(REPLAY_HEADERS):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table
