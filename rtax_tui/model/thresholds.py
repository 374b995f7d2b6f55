"""Thresholds as written (`[thresholds]` in a profile, `--threshold`), parsed and
checked; analysis.gates holds them against a report. The grammar: analysis.gates."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from rtax_tui.model.spec import EXTRA_PHASES, PHASES, RtaxError

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}  # fmt: skip
STATS = ("min", "p50", "p95", "p99", "max", "mean")
STARTUP = "create+ready"
GATE_PHASES = (*PHASES, *EXTRA_PHASES, STARTUP)
COUNTS = ("failed", "invalid")
UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}
# The first operator splits the text (a linear scan: a regular expression with a lazy
# group before it backtracks, quadratic in a long run of spaces); digits are ASCII only.
_OP = re.compile(r"<=|>=|==|!=|<|>")
_NUMBER = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>[a-zµ]*)$", re.ASCII
)


class ThresholdError(RtaxError):
    pass


@dataclass(frozen=True)
class Threshold:
    text: str
    cell: str | None  # a glob over cell ids, None: every cell
    what: str  # a phase, "failed", "invalid" or "fidelity"
    stat: str | None  # a phase's statistic
    op: str
    value: float  # ms for a phase's figure

    def holds(self, figure: float) -> bool:
        return OPS[self.op](figure, self.value)

    def matches(self, cell: str) -> bool:
        return (
            self.cell is None or fnmatchcase(cell, self.cell) or fnmatchcase(cell, "*/" + self.cell)
        )


def _split(text: str) -> dict[str, str] | None:
    """`lhs`, `op` and `rhs` (one word) of a threshold's text, or None."""
    m = _OP.search(text)
    if m is None:
        return None
    rhs = text[m.end() :].strip()
    if not rhs or len(rhs.split()) != 1:
        return None
    return {"lhs": text[: m.start()].strip(), "op": m.group(), "rhs": rhs}


def parse_threshold(text: str, where: str) -> Threshold:
    """One threshold; a mistake is a ThresholdError `WHERE: threshold "TEXT": why`."""

    def bad(why: str) -> ThresholdError:
        return ThresholdError(f"{where}: threshold {text!r}: {why}")

    m = _split(text)
    if m is None:
        raise bad("expected `[CELL] WHAT OP VALUE` with OP one of " + ", ".join(OPS))
    words = m["lhs"].split()
    cell = None
    if words and ("/" in words[0] or "*" in words[0]):
        cell, words = words[0], words[1:]
    num = _NUMBER.match(m["rhs"])
    if num is None:
        raise bad(f"value {m['rhs']!r} is not a number")
    value, unit = float(num["num"]), num["unit"]
    if not math.isfinite(value * UNITS_MS.get(unit, 1.0)):
        raise bad(f"value {m['rhs']!r} is not a finite number")
    if words in ([c] for c in COUNTS) or words == ["fidelity"]:
        if unit:
            raise bad(f"{words[0]} is a plain number, without a unit")
        if words[0] == "fidelity" and not 0 <= value <= 1:
            raise bad("fidelity is between 0 and 1")
        return Threshold(text, cell, words[0], None, m["op"], value)
    if len(words) != 2:
        raise bad("WHAT is `PHASE STAT` (e.g. `create p95`), `failed`, `invalid` or `fidelity`")
    phase, stat = words
    if phase not in GATE_PHASES:
        raise bad(f"unknown phase {phase!r} (allowed: {', '.join(GATE_PHASES)})")
    if stat not in STATS:
        raise bad(f"unknown statistic {stat!r} (allowed: {', '.join(STATS)})")
    if unit not in UNITS_MS:
        raise bad(f"a time needs its unit (allowed: {', '.join(UNITS_MS)}), got {m['rhs']!r}")
    return Threshold(text, cell, phase, stat, m["op"], value * UNITS_MS[unit])


def parse_table(body: Any, locate: Callable[[str], str]) -> dict[str, list[str]]:
    """A profile's `[thresholds]`: `"WHAT" = "OP VALUE"` or a list of them, each checked;
    returned as written, keys to lists."""
    if not isinstance(body, dict):
        raise ThresholdError(f"{locate('')}: thresholds: expected a table")
    out: dict[str, list[str]] = {}
    for key, value in body.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) for v in values):
            raise ThresholdError(
                f'{locate(key)}: thresholds.{key}: expected a string like "< 20ms" or a list'
            )
        for v in values:
            parse_threshold(f"{key} {v}", f"{locate(key)}: thresholds.{key}")
        out[key] = list(values)
    return out


def table_texts(table: dict[str, Any] | None) -> list[str]:
    """The thresholds of a `[thresholds]` table (as a profile, or a header, holds it:
    its shape checked where each is read, `parse_table` and `recording.thresholds_wrong`)."""
    out = []
    for key, value in (table or {}).items():
        for v in value if isinstance(value, list) else [value]:
            out.append(f"{key} {v}")
    return out
