"""`rtax reproduce`'s tables: a study's published figures beside ours, in the terminal
(Rich) and in Markdown (`report.md`, every text through `md_table`'s escaping)."""

from __future__ import annotations

import re
from typing import Any

from rich.table import Table
from rich.text import Text

from rtax_tui.model.events import one_line
from rtax_tui.render.tables import Code, md_escape, md_table

HEADERS = ["row", "published", "ours", "ours / published", "conditions that differ"]


def _ratio(row: dict[str, Any]) -> str:
    r = row["ratio"]
    if r is None:
        return "-"
    return f"{r:.2f}x" + (" (more than 2x)" if row["far"] else "")


def _cells(row: dict[str, Any]) -> list[str]:
    differs = row["verdict"] if row["far"] else "; ".join(row["differs"])
    if not row["far"] and row.get("measured"):  # within 2x: what was measured, still said
        differs += ("; " if differs else "") + "measured here: " + "; ".join(row["measured"])
    published = row["published_text"] + (f" ({row['note']})" if row.get("note") else "")
    return [row["label"], published, row["ours_text"], _ratio(row), differs or "-"]


def _figures_md(figures: list[dict[str, Any]]) -> list[str]:
    """Each figure as an image of its file (a name rtax chose: `plots/<id>-<kind>.svg`),
    or the line saying why it is not there."""
    if not figures:
        return []
    lines = ["", "## Figures", "", "Drawn from the recordings in this directory by `rtax plot`'s "
             "code (`rtax plot REC --kind KIND` draws the same)."]  # fmt: skip
    for f in figures:
        lines += ["", f"### {md_escape(f['title'])}", ""]
        if f.get("file"):
            lines.append(f"![{md_escape(f['kind'])}]({_link(f['file'])})")
        if f.get("why"):
            lines += ["", md_escape(f["why"])]
    return lines


def _link(name: str) -> str:
    """A figure's relative link: only the characters of the names rtax gives them."""
    if not re.fullmatch(r"plots/[a-z0-9-]+\.svg", name):
        raise ValueError(f"not a figure's name: {name!r}")
    return name


def _machine_md(machine: dict[str, Any]) -> list[str]:
    if not machine:
        return []
    aff = machine.get("affinity") or []
    load = machine.get("load_avg")
    loads = ", ".join(f"{v:.2f}" for v in load) if load else "-"
    rows = [
        ["CPUs online", str(machine.get("cpus_online"))],
        ["CPU affinity", ",".join(map(str, aff)) or "-"],
        ["load average at start (1, 5, 15 min)", loads],
        ["/dev/kvm", "present" if machine.get("kvm") else "absent"],
    ]
    return ["", "## This machine as the run found it", "", md_table(["condition", "here"], rows)]


def render_reproduce(doc: dict[str, Any]) -> list[Table]:
    """One Rich table per published table: the terminal's at the end, the console's as
    the study runs (its rows waiting, running, then ours). Every cell is Text on one
    line: a terminal sequence in a reason is shown, not acted on, and a `[...]` in a
    label or an error is drawn, never read as markup."""
    out = []
    for t in doc["tables"]:
        title = Text(one_line(f"{doc['study']}: {t['title']}"))
        table = Table(*HEADERS, title=title, caption=Text(one_line(t["conditions"])))
        for row in t["rows"]:
            table.add_row(*(Text(one_line(c)) for c in _cells(row)),
                          style="yellow" if row["far"] else None)  # fmt: skip
        out.append(table)
    return out


def reproduce_markdown(doc: dict[str, Any]) -> str:
    """`report.md`: the study, its source, each table with ours beside it, and the rtax
    command of each experiment."""
    lines = [
        f"# rtax reproduce {md_escape(doc['study'])}: {md_escape(doc['title'])}",
        "",
        f"Source: {md_escape(doc['source'])}. Size: {md_escape(doc['size'])}.",
        "",
        "Ours is the P50 with its 95% bootstrap interval and n, from the recordings in this "
        "directory (`rtax report` on each shows the same). A ratio is not a like-for-like "
        "claim where the conditions differ: each row names what differs.",
    ]
    for t in doc["tables"]:
        lines += ["", f"## {md_escape(t['title'])}", "", f"Study's conditions: "
                  f"{md_escape(t['conditions'])}.", ""]  # fmt: skip
        lines.append(md_table(HEADERS, [_cells(r) for r in t["rows"]]))
    lines += ["", "## Experiments", ""]
    rows = []
    for eid, e in doc["experiments"].items():
        how = Code("rtax " + " ".join(e["rtax"])) if e["rtax"] else (e["why"] or e["kind"])
        why = doc["not_run"].get(eid, "")
        rows.append([eid, e["what"], how, why or "-"])
    lines.append(md_table(["experiment", "what", "rtax", "not run because"], rows))
    lines += _figures_md(doc.get("figures") or [])
    lines += _machine_md(doc.get("machine") or {})
    if doc["drivers_out"]:
        lines += ["", "## Drivers that cannot run here", ""]
        lines.append(md_table(["driver", "why"], [[d, w] for d, w in doc["drivers_out"].items()]))
    return "\n".join(lines) + "\n"
