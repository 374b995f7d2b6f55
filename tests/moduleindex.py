"""The module index of docs/architecture.md ("Every module"): each module of `rtax_tui/`
and `drivers/` with the first sentence of its docstring, between two markers, made from
the tree so that the document names every module and says of each what the module says
of itself. `python3 -m tests.moduleindex` writes it; tests/house/test_architecture_doc.py fails
when the document and the tree disagree."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
BEGIN = "<!-- module-index: made by python3 -m tests.moduleindex -->"
END = "<!-- /module-index -->"
WIDTH = 150  # a line's sentence, at most


def modules() -> list[Path]:
    """Every module of the two packages, in the layers' order, then by path."""
    order = ["model", "hosts", "drivers", "engine", "analysis", "render", "ui", "commands"]
    found = [p for root in ("rtax_tui", "drivers") for p in (REPO / root).rglob("*.py")]
    found = [p for p in found if "__pycache__" not in p.parts]

    def key(p: Path) -> tuple[int, str]:
        rel = p.relative_to(REPO)
        top = rel.parts[0] if rel.parts[0] == "drivers" else (rel.parts[1:2] or ("",))[0]
        return (order.index(top) if top in order else -1, str(rel))

    return sorted(found, key=key)


def sentence(path: Path) -> str:
    """The first sentence of the module's docstring, on one line, at most WIDTH long."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.search(r"(?<=[.!?])\s", text)
    text = text[: m.start()] if m else text
    if len(text) > WIDTH:
        text = text[: text.rfind(" ", 0, WIDTH - 1)].rstrip(",;:") + " …"
    return text


def index() -> str:
    lines = [BEGIN, ""]
    for p in modules():
        lines.append(f"- `{p.relative_to(REPO)}`: {sentence(p) or '(no docstring)'}")
    return "\n".join([*lines, "", END])


def current(text: str) -> str | None:
    """The index as the document has it (None: no markers)."""
    i, j = text.find(BEGIN), text.find(END)
    return None if i < 0 or j < 0 else text[i : j + len(END)]


def main() -> None:
    text = DOC.read_text()
    old = current(text)
    if old is None:
        sys.exit(f"{DOC}: no {BEGIN} ... {END} markers")
    DOC.write_text(text.replace(old, index()))


if __name__ == "__main__":
    main()
