"""Driving the console in a test without an asyncio plugin: each async test runs in its
own event loop, and waits for what the user would see by polling, never by fixed sleeps."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


def aio(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Run an async test in its own event loop (no pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))  # type: ignore[arg-type]

    return wrapper


async def until(cond: Callable[[], object], timeout: float = 20.0) -> None:
    """Wait until `cond()` is true, polling every 20 ms; fail the test after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def own_workdir(tmp_path: Path, monkeypatch: Any, shipped: Path, *, home: bool = False) -> Path:
    """Make `tmp_path` the console's whole world: its working directory (./recordings,
    ./profiles), its user config (ctrl+s saves there), `shipped` as the shipped examples,
    and with `home` its own $HOME too."""
    from rtax_tui.analysis import history

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    if home:
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(history, "SHIPPED", shipped)
    return tmp_path
