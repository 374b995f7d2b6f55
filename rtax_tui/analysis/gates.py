"""Gates: thresholds a run must hold (`[thresholds]`, `--threshold`), and the verdicts of
`rtax compare` (Holm-Bonferroni over all rows, a practical threshold `--min-effect`).

A threshold reads `[CELL] WHAT OP VALUE`:
- `[CELL] PHASE STAT OP NUMBER UNIT`: a phase's figure, e.g. `stage/t0/exec create+ready
  p95 < 20ms`; PHASE one of the report's phases, `create+ready` (a pooled cell: acquire);
  STAT one of min, p50, p95, p99, max, mean; UNIT ns, us, ms or s;
- `[CELL] failed|invalid OP N`: measured trials that failed, or ended ok but not valid;
- `[CELL] fidelity OP X`: a replay cell's fidelity, 0 to 1.
CELL is `host/driver/workload/channel` or its tail `driver/workload/channel`, `*` globs
allowed; without it every cell must hold. A threshold no cell can answer (no cell matches,
a cell without samples, no replay cell for `fidelity`) is breached: a gate never passes
by measuring nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtax_tui.model.spec import RtaxError
from rtax_tui.model.thresholds import (
    _NUMBER,
    COUNTS,
    STARTUP,
    UNITS_MS,
    Threshold,
    ThresholdError,
    parse_threshold,
    table_texts,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Threshold", "ThresholdError", "parse_threshold", "table_texts"]


@dataclass(frozen=True)
class GateResult:
    threshold: Threshold
    cell: str | None
    figure: float | None  # None: nothing measured to hold it against
    ok: bool
    why: str = ""

    def line(self) -> str:
        t = self.threshold
        state = "held" if self.ok else "BREACHED"
        if self.figure is None:
            got = self.why
        elif t.stat is not None:
            got = f"{t.stat} {self.figure:.3f}ms"
        else:
            got = f"{t.what} {self.figure:g}"
        return f"threshold {state}: {t.text}: {self.cell or 'no cell'}: {got}"


def _startup_ms(rec: Any, seed: int) -> dict[str, np.ndarray]:
    from rtax_tui.analysis.report import _collect

    cells, _ = _collect(rec)
    return {name: cd.startup for name, cd in cells.items()}


def check_thresholds(
    report: dict[str, Any],
    thresholds: Sequence[Threshold],
    load: Callable[[], Any] | None = None,
    seed: int = 0,
) -> list[GateResult]:
    """Each threshold against each cell it names (`load`: the recording, called only for
    `create+ready` figures, which the report has not)."""
    import numpy as np

    from rtax_tui.analysis.stats import summarize

    startup: dict[str, np.ndarray] | None = None
    out: list[GateResult] = []
    for t in thresholds:
        cells = [c for c in report.get("cells", []) if t.matches(str(c["cell"]))]
        if t.what == "fidelity":
            cells = [c for c in cells if c.get("replay")]
        if not cells:
            out.append(GateResult(t, None, None, False, "no cell matches"))
            continue
        for c in cells:
            name = str(c["cell"])
            figure: float | None
            if t.what in COUNTS:
                figure = float(c[t.what])
            elif t.what == "fidelity":
                figure = c["replay"].get("fidelity")
            else:
                if t.what == STARTUP:
                    if startup is None:
                        if load is None:
                            raise RtaxError(f"threshold {t.text!r}: needs the recording")
                        startup = _startup_ms(load(), seed)
                    summ: Any = summarize(startup.get(name, np.zeros(0)), seed=seed)
                else:
                    summ = c["phases"].get(t.what)
                figure = None if summ is None else summ.get(f"{t.stat}_ms")
            if figure is None:
                out.append(GateResult(t, name, None, False, "nothing measured"))
            else:
                out.append(GateResult(t, name, figure, t.holds(figure)))
    return out


def print_gates(results: Iterable[GateResult], write: Callable[[str], Any]) -> bool:
    """Each result a line (breaches first); True when every threshold held."""
    results = sorted(results, key=lambda r: r.ok)
    for r in results:
        write(r.line())
    return all(r.ok for r in results)


# -- rtax compare ---------------------------------------------------------------------

ALPHA = 0.05
DEFAULT_MIN_EFFECT = "5%,0.5ms"


@dataclass(frozen=True)
class MinEffect:
    """A difference is practical when it is at least `rel` of a's median and `abs_ms`."""

    rel: float
    abs_ms: float
    text: str

    def margin_ms(self, a_ms: float) -> float:
        """The smallest difference that counts, for a's median `a_ms`."""
        return max(self.rel * abs(a_ms), self.abs_ms)

    def practical(self, a_ms: float, diff_ms: float) -> bool:
        return abs(diff_ms) >= self.margin_ms(a_ms)


def parse_min_effect(text: str) -> MinEffect:
    rel, abs_ms = 0.0, 0.0
    for part in text.split(","):
        part = part.strip()
        m = _NUMBER.match(part)
        if m is None or (m["unit"] not in UNITS_MS and not part.endswith("%")):
            pm = _NUMBER.match(part[:-1]) if part.endswith("%") else None
            if pm is not None and not pm["unit"]:  # finite: checked below, as abs_ms is
                rel = float(pm["num"]) / 100
                continue
            raise ThresholdError(
                f"--min-effect: {part!r}: expected a percentage (5%), a time (0.5ms), or both "
                "comma-separated"
            )
        abs_ms = float(m["num"]) * UNITS_MS[m["unit"]]
    if not (math.isfinite(rel) and math.isfinite(abs_ms)):
        raise ThresholdError(f"--min-effect: {text!r}: must be finite")
    if rel < 0 or abs_ms < 0:
        raise ThresholdError(f"--min-effect: {text!r}: must not be negative")
    return MinEffect(rel, abs_ms, text)


def holm(ps: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def judge(cmp: dict[str, Any], min_effect: MinEffect, alpha: float = ALPHA) -> None:
    """Each row's `p_holm` and `verdict` (b against a): `slower`/`faster` when the
    difference is practical and the adjusted p (of "within the practical threshold":
    rows from `compare_reports(..., min_effect=)`) is below `alpha`; `same` when it is
    not practical whatever the p, else `unclear`."""
    rows = cmp["rows"]
    for r, p in zip(rows, holm([r["p"] for r in rows]), strict=True):
        r["p_holm"] = p
        if not min_effect.practical(r["a_p50_ms"], r["diff_ms"]):
            r["verdict"] = "same"
        elif p < alpha:
            r["verdict"] = "slower" if r["diff_ms"] > 0 else "faster"
        else:
            r["verdict"] = "unclear"
    cmp["correction"] = f"Holm-Bonferroni over {len(rows)} rows, alpha {alpha}"
    cmp["min_effect"] = {"text": min_effect.text, "rel": min_effect.rel, "ms": min_effect.abs_ms}


def regressions(cmp: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in cmp["rows"] if r.get("verdict") == "slower"]
