"""The signals that stop rtax (SIGINT, SIGTERM, SIGHUP), handled from its first moment.

Three stages, so that no signal finds the default action (killed half-way through making
a file) and none prints a traceback:

- `early()`, the first thing the `rtax` executable does, before the command line is even
  imported: wherever rtax makes nothing (parsing, reading, printing), a signal ends it at
  once with status 130 (a KeyboardInterrupt in the middle of importing a C extension
  could leave the interpreter unable to finish cleanly).
- `armed()`, around whatever makes something that must not be left half-made (a run, a
  recording, a temporary file): a signal raises KeyboardInterrupt, which the command
  turns into its interrupted ending (status 130; a run's recording exists only once its
  header is whole, and is kept; a temporary file is removed). A run's event loop installs
  its own handlers meanwhile (they stop the session) and puts these back when it removes
  them (asyncio and uvloop leave the default action behind).
- after that block, the handlers before it again; once the command has ended (`done`),
  none: the status is known, and the interpreter's shutdown would otherwise put the
  default action back.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED = 130


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(INTERRUPTED)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _install(handler: Any) -> dict[int, Any]:
    """`handler` for each stop signal that is not ignored (`nohup rtax run` keeps running
    when its terminal goes); returns the handlers it replaced."""
    before: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        try:
            old = signal.getsignal(sig)
            if old == signal.SIG_IGN:
                continue
            signal.signal(sig, handler)
            before[sig] = old
        except ValueError:  # not the main thread: leave the signals alone
            break
    return before


def early() -> None:
    _install(_exit_now)


def done() -> None:
    """The command has ended and its status is known: a stop signal from now on changes
    nothing (the interpreter's shutdown puts the default action back for every signal
    with a Python handler, which would end rtax by the signal after its work was done)."""
    for sig in STOP_SIGNALS:
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:
            return


@contextmanager
def held() -> Iterator[None]:
    """The stop signals held back (blocked) in the block, delivered after it: around a
    change of handlers that passes through the default action (asyncio's
    `remove_signal_handler` sets it before the next handler is in place)."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def handlers() -> dict[int, Any]:
    """The stop signals' handlers now (to put back with `put_back`)."""
    got: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not None:
            got[sig] = handler
    return got


def put_back(saved: dict[int, Any]) -> None:
    for sig, handler in saved.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread
            pass


@contextmanager
def armed() -> Iterator[None]:
    before = _install(_interrupt)
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
