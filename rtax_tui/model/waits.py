"""What a phase is waiting on, so that a timeout can say it.

A phase that times out while a daemon takes its time (libvirtd re-probing QEMU on every
call, a dockerd under load) used to end as "create did not finish within 30 s": true, and
no help. A driver wraps each call into a daemon in `waiting_on("libvirtd: defining the
domain")`; the engine opens a `Waits` for each phase it times (`phase_waits`), and on a
timeout names the call that was still running, or the one the timeout cut, and how long it
had taken.

A context variable carries the record, so that nothing is threaded through the driver
contract: tasks and threads a phase starts (`asyncio.ensure_future`, `asyncio.to_thread`)
copy the context and share the one mutable record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Waits:
    """The calls one phase is in, and the last one a cancellation ended."""

    open: list[tuple[str, int]] = field(default_factory=list)  # (what, monotonic_ns start)
    cut: tuple[str, int] | None = None  # (what, how long it had run, ns)
    # the engine's timeout around the phase and the task it cancels (`covers`)
    timeout: float | None = None
    task: asyncio.Task[Any] | None = None

    def describe(self, now_ns: int | None = None) -> str | None:
        """`waiting on WHAT for S s` (the oldest call still running), `WHAT had taken S s
        when it was cut`, or None when the phase was in no daemon call."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        if self.open:
            what, t0 = self.open[0]
            return f"still waiting on {what} after {(now - t0) / 1e9:.1f} s"
        if self.cut is not None:
            what, dur = self.cut
            return f"{what} had taken {dur / 1e9:.1f} s when it was cut"
        return None


_CURRENT: ContextVar[Waits | None] = ContextVar("rtax_waits", default=None)


class phase_waits:  # noqa: N801 (used as the function it was: a class is ~1 us cheaper a phase)
    """The engine's side: a fresh record for the phase run inside the block; `timeout`:
    the engine's own timeout around the phase, which cancels the running task (`covers`)."""

    __slots__ = ("_token", "waits")

    def __init__(self, timeout: float | None = None) -> None:
        task = asyncio.current_task() if timeout is not None else None
        self.waits = Waits(timeout=timeout, task=task)

    def __enter__(self) -> Waits:
        self._token = _CURRENT.set(self.waits)
        return self.waits

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


def covers(timeout: float | None) -> bool:
    """Whether the engine's timeout around the running phase ends a call begun now no
    later than `timeout` would: it cancels this very task (not one the phase started,
    which it would not cancel) and is no longer (it started earlier). The call's own
    `asyncio.timeout` could never fire first, and costs 3-4 us (its timer): `own_timeout`
    leaves it out.

    Not once a cancellation of the task is under way (`cancelling()`): the phase's
    timeout has fired (or a stop) and cancels nothing more, so a call made after it (a
    driver's cleanup that caught the cancellation) would have no bound at all."""
    waits = _CURRENT.get()
    if waits is None or waits.timeout is None or timeout is None or waits.timeout > timeout:
        return False
    task = waits.task
    return task is not None and task is asyncio.current_task() and not task.cancelling()


_NO_TIMEOUT = nullcontext()


def own_timeout(timeout: float | None) -> AbstractAsyncContextManager[Any]:
    """`asyncio.timeout(timeout)` for a call that must end by then, unless the engine's
    phase timeout `covers` it (an exec or shell action under `lifecycle.timed`)."""
    if covers(timeout):
        return _NO_TIMEOUT
    return asyncio.timeout(timeout)


@contextmanager
def waiting_on(what: str) -> Iterator[None]:
    """A driver's side: the block is a call into `what` (a daemon, and which call).
    Costs two clock reads; outside a timed phase it records nothing."""
    waits = _CURRENT.get()
    if waits is None:
        yield
        return
    entry = (what, time.monotonic_ns())
    waits.open.append(entry)
    try:
        yield
    except asyncio.CancelledError:  # a timeout (or a stop) ended the call
        waits.cut = (what, time.monotonic_ns() - entry[1])
        raise
    finally:
        waits.open.remove(entry)
