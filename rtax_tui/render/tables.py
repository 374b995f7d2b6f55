"""Number and table formatting shared by the terminal reports (no Rich here)."""

from __future__ import annotations


def fmt_ms(v: float | None) -> str:
    """About 3 significant digits, never in exponent notation; "-" for None."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    if a >= 0.001:
        return f"{v:.3g}"
    return f"{v:.1e}"


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)
