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
import signal
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, TypeVar

from rtax_tui.model import signals
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
    """`asyncio.run(main)` on the chosen loop (the same runner: async generators and the
    default executor are shut down at the end). A stop signal (SIGINT, SIGTERM, SIGHUP)
    cancels `main` (`guard_signals`), which then raises KeyboardInterrupt: never an
    exception raised in the middle of one of the loop's callbacks."""
    try:
        factory = loop_factory()
    except BaseException:
        main.close()  # never started: no "never awaited" warning on top of the error
        raise
    before = signals.handlers()
    _deferred.clear()
    _deferring.clear()
    _deferring.extend(s for s, h in before.items() if h != signal.SIG_IGN)  # nohup's stay
    try:
        if factory is None:
            return asyncio.run(_guarded(main))
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_guarded(main))
    finally:  # the loop's handlers removed leave the default action: the caller's again
        signals.put_back(before)
        if _deferred:  # came while the loop shut down: the caller's to act on now
            sig = _deferred[0]
            _deferred.clear()
            raise KeyboardInterrupt(signal.Signals(sig).name)


# A stop signal while the loop shuts down (its tasks cancelled, its executor joined) is
# noted and raised once it is closed: raised in the middle, it left the executor's thread
# calling into a closed loop (a traceback).
_deferred: list[int] = []
_deferring: list[int] = []  # the stop signals noted so (not those ignored before)


def _defer(signum: int, frame: Any) -> None:
    _deferred.append(signum)


class _Stopped:
    signal: int | None = None
    taken = False  # a part of the program took it (`take_stop`): its to act on


async def _guarded(main: Coroutine[Any, Any, T]) -> T:
    stopped = _Stopped()
    task = asyncio.current_task()
    assert task is not None
    task.rtax_stopped = stopped  # type: ignore[attr-defined]
    guard_signals()
    try:
        got = await main
    except asyncio.CancelledError:
        if stopped.signal is None:
            raise
        raise KeyboardInterrupt(signal.Signals(stopped.signal).name) from None
    finally:
        loop = asyncio.get_running_loop()
        with signals.held():  # never the default action in between
            for sig in signals.STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            signals.put_back(dict.fromkeys(_deferring, _defer))  # until it is closed
    if stopped.signal is not None and not stopped.taken:  # a part swallowed the cancel
        raise KeyboardInterrupt(signal.Signals(stopped.signal).name)
    return got


def _main_task() -> tuple[asyncio.Task[Any], _Stopped] | None:
    """`run`'s main task on the running loop, with its stop signal's record."""
    for t in asyncio.all_tasks():
        stopped = getattr(t, "rtax_stopped", None)
        if isinstance(stopped, _Stopped):
            return t, stopped
    return None


def _stopped() -> _Stopped | None:
    got = _main_task()
    return None if got is None else got[1]


def take_stop() -> bool:
    """Whether a stop signal came before a part installed its own handlers (which are
    then its to act on: a run stops its session); taken, it raises nothing more."""
    stopped = _stopped()
    if stopped is None or stopped.signal is None:
        return False
    stopped.taken = True
    return True


def guard_signals() -> None:
    """On the running loop of `run`: each stop signal cancels its main task (which then
    raises KeyboardInterrupt). A part that installs its own handlers calls this again
    when it removes them."""
    loop = asyncio.get_running_loop()
    got = _main_task()
    if got is None:
        return
    task, stopped = got

    def stop(sig: int) -> None:
        if stopped.signal is None:
            stopped.signal = sig
            task.cancel()

    for sig in signals.STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, stop, sig)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
            return


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
