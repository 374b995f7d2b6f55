"""Number and table formatting shared by the terminal reports (no Rich here)."""

from __future__ import annotations

import math
import re

from rtax_tui.model.events import one_line


def fmt_ms(v: float | None) -> str:
    """A time in ms where the table says the unit: about 3 significant digits, never in
    exponent notation (`2.5e-04` beside `0.0631` read as another kind of number); "-"
    for None."""
    if v is None:
        return "-"
    return _sig3(v)


# Beyond these magnitudes a figure is a crafted recording's (10^15 s is 30 million
# years): written with an exponent, 3 digits, rather than as its 300 digits, which pushed
# every column after it off the screen (red team 2026-12-06: 1e300 ms, 5e-324 ms)
_HUGE, _TINY = 1e15, 1e-9


def _sig3(v: float) -> str:
    """About 3 significant digits, thousands separated, never an exponent but past
    _HUGE and under _TINY (a crafted recording's inf or nan: as Python writes it). The
    digits follow the value as rounded (99.96 is `100`, not `100.0`)."""
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    a = abs(float(f"{v:.3g}"))
    if a >= _HUGE or a < _TINY:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.001:
        return f"{v:.3g}"
    digits = 2 - math.floor(math.log10(a))
    return f"{v:.{digits}f}".rstrip("0")


# a time's unit by its size: the first whose threshold (in ms) it reaches
_UNITS = ((1000.0, "s"), (1.0, "ms"), (0.001, "µs"), (0.0, "ns"))
_PER_MS = {"s": 1e-3, "ms": 1.0, "µs": 1e3, "ns": 1e6}  # that unit's count in a ms


def fmt_time(ms: float | None, signed: bool = False) -> str:
    """A time with its unit, the one style of every figure the console and the compare
    and project tables show: `168µs`, `3.44ms`, `21.8ms`, `1.25s`, `+26.4ms` (`signed`:
    a difference); about 3 significant digits, never an exponent; "-" for None."""
    if ms is None:
        return "-"
    if not math.isfinite(ms):
        return f"{ms}ms"
    if ms == 0:
        return "0ms"
    i = next(i for i, (lim, _) in enumerate(_UNITS) if abs(ms) >= lim)
    if i and abs(float(f"{ms * _PER_MS[_UNITS[i][1]]:.3g}")) >= 1000:
        i -= 1  # 999.96µs rounds to 1.00ms, not `1,000µs`
    unit = _UNITS[i][1]
    return ("+" if signed and ms > 0 else "") + _sig3(ms * _PER_MS[unit]) + unit


def fmt_seconds(s: float | None, signed: bool = False) -> str:
    """`fmt_time` of a figure kept in seconds (the projection's)."""
    return fmt_time(None if s is None else s * 1000.0, signed)


def fmt_interval(lo: float | None, hi: float | None, signed: bool = False) -> str:
    """A 95% interval of times, each end with its unit: `[+11.6ms, +40.1ms]`."""
    if lo is None or hi is None:
        return "-"
    return f"[{fmt_time(lo, signed)}, {fmt_time(hi, signed)}]"


def fmt_num(v: float | None) -> str:
    """A count or a quantity whose unit the column names (worker-hours): about 3
    significant digits, never an exponent; "-" for None."""
    return "-" if v is None else _sig3(v)


def fmt_ratio(r: float | None) -> str:
    """b over a: `1.43×`."""
    if r is None:
        return "-"
    return f"{r:.2f}×" if math.isfinite(r) and abs(r) < _HUGE else f"{r:.3g}×"


# Every ASCII character that can open markup in CommonMark, GFM or the HTML GitHub keeps
# in a rendered summary (emphasis, code, links, raw HTML, entities, tables,
# strikethrough, a heading's `#`, also its closing one; an image's `!` is nothing without
# its `[`, a `>` mid-line is text). CommonMark lets a backslash escape any ASCII
# punctuation, so escaping these keeps what a reader sees the same and leaves no markup
# to a text. GitHub also renders `$...$` as math (red team 2026-12-06: a cell named
# `$\Huge x$` would draw as a formula in a report on GitHub): `\$` is a dollar sign.
_MD_SPECIAL = frozenset("\\`*_[]<|~&#$")
# Where GitHub's autolinks begin (GFM's "extended autolinks": a bare `https://...` or
# `www.` becomes a link in a summary, red team 2026-12-06): the `:` of `scheme://` and
# the `.` after `www`, escaped, leave the text a text (cmark-gfm finds no link there).
# An address (`me@example.com`) is linked whatever its escapes or references: a zero-width
# space before its `@` (ZWSP, the one character this adds) leaves no address.
ZWSP_AT = "&#8203;@"
_AUTOLINK = re.compile(r"(?<=[A-Za-z0-9])(?=:/)|(?<=[Ww]{3})(?=\.)")
# What opens a block where a text begins a line or a list item (`- TEXT`): a quote's
# `>`, a list's `-`, `+`, `1.` or `1)` (a space or the end after it), a rule's or a setext
# heading's `---`, `===`; leading spaces (four make code), written as character
# references that indent nothing. A number (`-5`, `12.5`) begins none: left as it is.
_BLOCK_START = re.compile(r"^(?:(?=>)|(?=[+=-](?:[ +=-]|$))|(\d{1,9})(?=[.)](?: |$)))")
_LEADING = re.compile(r"^ +")


def md_escape(text: str) -> str:
    """Text from a recording (a cell's name, a reason) as Markdown that renders as that
    text and nothing more, wherever it is put (a table's cell, a list item, after a
    heading's `#`): one line (`one_line`: controls and newlines shown as `\\xNN`, a
    line break would end a table row or a list item), every markup character escaped,
    no autolink and no block begun (see the patterns above). The Markdown reports pass
    every text through this or `md_code`."""
    line = "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in one_line(text))
    line = _AUTOLINK.sub("\\\\", line).replace("@", ZWSP_AT)
    line = _BLOCK_START.sub(lambda m: (m.group(1) or "") + "\\", line, count=1)
    return _LEADING.sub(lambda m: "&#32;" * len(m.group(0)), line, count=1)


def md_code(text: str) -> str:
    """Text as an inline code span whatever it holds: fenced by more backticks than its
    longest run (a backtick in a name cannot end the span early), one line."""
    line = one_line(text)
    run = longest = 0
    for ch in line:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if line.startswith("`") or line.endswith("`") or not line.strip() else ""
    return f"{fence}{pad}{line}{pad}{fence}"


class Code(str):
    """A table cell to show as code (`md_table` draws it with `md_code`)."""


class Md(str):
    """A table cell already Markdown, made of `md_code` spans and plain words."""


def _md_cell(value: str) -> str:
    if isinstance(value, Code):
        value = Md(md_code(value))
    if isinstance(value, Md):  # GFM splits a row at a `|` even inside a code span
        return value.replace("|", "\\|")
    return md_escape(value)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GFM table; every header and cell is text (`md_escape`), or code (`Code`)."""
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)
