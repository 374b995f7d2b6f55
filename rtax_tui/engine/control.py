"""What every part of the engine shares while a run goes: stop/pause, tasks, counters.

Kept apart from the parts (scheduling, trial lifecycle, health, capacity) so that
each takes exactly this and nothing of the others.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    """Plain counters the engine updates and any UI may read at its own pace."""

    planned: int = 0
    started: int = 0
    done: int = 0
    failed: int = 0
    invalid: int = 0
    in_flight: int = 0
    last_error: str | None = None
    started_ns: int = 0
    per_cell_done: dict[str, int] = field(default_factory=dict)


class RunControl:
    """Stop, pause and the tasks of a run.

    A trial is in `interruptible` only until its teardown begins, so that stopping a
    run (or a batch's deadline) never cuts a teardown short.
    """

    def __init__(self) -> None:
        self.stopping = False
        self.gate = asyncio.Event()  # cleared while paused
        self.gate.set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.interruptible: dict[int, asyncio.Task[Any]] = {}

    def stop(self) -> bool:
        """Stop scheduling and interrupt what runs; False when already stopping."""
        if self.stopping:
            return False
        self.stopping = True
        self.gate.set()
        for task in list(self.interruptible.values()):
            task.cancel()
        return True

    def interrupt(self, trial: int) -> None:
        """Cancel one trial, unless it has reached its teardown."""
        task = self.interruptible.get(trial)
        if task is not None:
            task.cancel()

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        """Wait for every tracked task, including those started while waiting."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
