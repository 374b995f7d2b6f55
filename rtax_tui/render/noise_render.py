"""How steady a report's figures are: per cell, "may be unstable" with the reasons
(analysis.noise_report), its outliers, and a mark on figures from too few samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtax_tui.analysis.noise_report import FEW

ROUGH = "~"  # before a figure whose interval rests on fewer than FEW samples
ROUGH_NOTE = f"{ROUGH}: fewer than {FEW} samples: its interval is rough"


def rough(summary: Mapping[str, Any]) -> str:
    """ROUGH for a phase's summary of 1..FEW-1 samples, else ""."""
    return ROUGH if 0 < int(summary.get("n") or 0) < FEW else ""


def any_rough(report: Mapping[str, Any], phases: tuple[str, ...]) -> bool:
    return any(rough(c["phases"][p]) for c in report["cells"] for p in phases if p in c["phases"])


def unstable_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per cell whose figures may be unstable, with why."""
    return [
        f"{c['cell']}: may be unstable: {'; '.join(c['noise']['reasons'])}"
        for c in report["cells"]
        if (c.get("noise") or {}).get("unstable")
    ]


def outlier_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per cell with outliers in its total (Tukey's fences)."""
    out = []
    for c in report["cells"]:
        o = c.get("outliers") or {}
        if o.get("mild") or o.get("severe"):
            n = c["phases"]["total"]["n"]
            out.append(
                f"{c['cell']}: outliers in total: {o['mild']} mild (1.5 IQR), "
                f"{o['severe']} severe (3 IQR) of {n}"
            )
    return out


def compare_unstable_lines(cmp: Mapping[str, Any]) -> list[str]:
    """`rtax compare`: the paired cells whose figures may be unstable, per run."""
    return [
        f"{u['run']} ({cmp.get(u['run'])}): {u['cell']}: may be unstable: "
        + "; ".join(u["reasons"])
        for u in cmp.get("unstable") or ()
    ]
