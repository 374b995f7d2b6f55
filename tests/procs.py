"""Process checks shared by the tests."""

from __future__ import annotations


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its (foreign) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
