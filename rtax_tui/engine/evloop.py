"""The event loop `rtax run` and `rtax probe` run on: uvloop where it is installed, else
asyncio's own.

Why it matters: on the exec channel every action is one process whose output pipe (and,
rarely, pidfd) the loop waits on, and the timed action includes that wait's wake-up.
asyncio's loop is Python (a selector, a handle per callback, its ready queue); uvloop's
is libuv, in C. On Python 3.11 the difference was about 100 us of a local exec action of
`true` (bench/README.md, "The harness at the limit"), so the loop is part of what a figure
measures: the run's header records the loop that took it (`run.loop`, `describe`).

`RTAX_LOOP=asyncio|uvloop` chooses; unset, uvloop if it imports (a platform without a
uvloop wheel falls back to asyncio). Asking for uvloop where it is missing, or for
anything else, is an error rather than a silent fallback: the figures would not be what
was asked for. The console's own process keeps Textual's loop; the runs it starts are
`rtax run` processes, which choose here.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, TypeVar

from rtax_tui.model.spec import RtaxError

ENV = "RTAX_LOOP"
CHOICES = ("uvloop", "asyncio")
T = TypeVar("T")


def _uvloop() -> ModuleType | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def chosen() -> str:
    """The loop `run` will use: RTAX_LOOP's, else uvloop when it is installed."""
    want = os.environ.get(ENV, "").strip().lower()
    if want and want not in CHOICES:
        raise RtaxError(f"{ENV}={want!r}: expected one of {', '.join(CHOICES)}")
    if want == "asyncio":
        return "asyncio"
    if _uvloop() is None:
        if want == "uvloop":
            raise RtaxError(f"{ENV}=uvloop, but uvloop is not installed (pip install uvloop)")
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the chosen loop (None: asyncio's default)."""
    uv = _uvloop() if chosen() == "uvloop" else None
    if uv is None:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uv.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the chosen loop (the same runner: SIGINT cancels `main`,
    async generators and the default executor are shut down at the end)."""
    try:
        factory = loop_factory()
    except BaseException:
        main.close()  # never started: no "never awaited" warning on top of the error
        raise
    if factory is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def describe(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """The running loop (or `loop`), as a recording's header says it: `uvloop 0.23.0`,
    `asyncio`, or another loop's module and class (a loop rtax did not choose)."""
    loop = loop if loop is not None else asyncio.get_running_loop()
    mod = type(loop).__module__
    if mod.startswith("uvloop"):
        uv = _uvloop()
        return f"uvloop {uv.__version__}" if uv is not None else "uvloop"
    if mod.startswith("asyncio."):
        return "asyncio"
    return f"{mod}.{type(loop).__qualname__}"
