"""docs/architecture.md names every module of the tree, each with what its docstring says
(issue 37: the house as a reader sees it); the index is made by tests/moduleindex.py."""

from __future__ import annotations

from tests import moduleindex


def test_the_module_index_is_the_tree() -> None:
    text = moduleindex.DOC.read_text()
    have = moduleindex.current(text)
    assert have is not None, "docs/architecture.md lost its module-index markers"
    assert have == moduleindex.index(), "stale: run python3 -m tests.moduleindex"


def test_every_module_says_what_it_holds() -> None:
    bare = [str(p) for p in moduleindex.modules() if not moduleindex.sentence(p)]
    assert bare == [], f"modules without a docstring: {bare}"


def test_a_module_added_or_renamed_makes_the_index_stale(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: a tree with one module fewer (or one the document does not
    name) gives another index than the document's."""
    real = moduleindex.modules()
    monkeypatch.setattr(moduleindex, "modules", lambda: real[:-1])
    assert moduleindex.current(moduleindex.DOC.read_text()) != moduleindex.index()
