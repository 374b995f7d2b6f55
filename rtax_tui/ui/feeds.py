"""Where the console's events come from: the engine's pipe, or a recording.

The engine runs as its own process (`rtax run --headless -o - --record FILE
--control`): its timestamps never wait for the console to draw, as they would if
it shared this process's GIL. Pause, resume and stop go to it as lines on its
stdin; when the console goes away its stdin closes and the engine stops and tears
down by itself. A replay feeds the same `ingest` from a file at the recorded pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from rtax_tui.model.events import EVENT_CHECKS
from rtax_tui.model.recording import Recording

Sink = Callable[[dict[str, Any]], None]

# As-fast-as-possible replays yield to the UI after this many events.
MAX_SPEED_CHUNK = 500


def engine_argv(profile: str, overrides: list[str], record: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rtax_tui",
        "run",
        profile,
        *overrides,
        "--headless",
        "-o",
        "-",
        "--record",
        record,
        "--control",
        "--quiet",
    ]


class EngineFeed:
    """The engine as a child process; its event stream goes to `sink`."""

    def __init__(self, argv: list[str], sink: Sink, on_log: Callable[[str], None]) -> None:
        self.argv = argv
        self.sink = sink
        self.on_log = on_log
        self.proc: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self.paused = False
        self.stopping = False
        self.bad_lines = 0

    async def run(self) -> int:
        """Start the engine and feed its events until it exits; returns its exit code."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # a ^C meant for the console never reaches it
            limit=1 << 24,
        )
        err_task = asyncio.create_task(self._read_stderr())
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            try:
                ev = orjson.loads(line)
                etype = ev.get("type")
                fits = isinstance(etype, str) and EVENT_CHECKS[etype](ev)  # the one schema
            except (orjson.JSONDecodeError, AttributeError, KeyError):
                fits = False
            if not fits:
                self.bad_lines += 1
                continue
            self.sink(ev)
        await err_task
        self.returncode = await self.proc.wait()
        return self.returncode

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            text = line.decode(errors="replace").rstrip()
            if text:
                self.on_log(text)

    def _send(self, cmd: str) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.write(cmd.encode() + b"\n")

    def pause(self) -> None:
        self.paused = True
        self._send("pause")

    def resume(self) -> None:
        self.paused = False
        self._send("resume")

    def stop(self) -> None:
        """Stop scheduling and interrupt trials; the engine still tears everything down."""
        self.stopping = True
        self._send("stop")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def shutdown(self, grace_s: float = 60.0) -> None:
        """Stop and wait for the engine's teardown; signal it only if it will not end."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        self.stop()
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
            return
        except TimeoutError:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(proc.wait(), 10)
                return
            except TimeoutError:
                continue


class ReplayFeed:
    """A recording played back at `speed` times the recorded pace (None: at once)."""

    def __init__(self, rec: Recording, sink: Sink, speed: float | None = 1.0) -> None:
        self.events: list[dict[str, Any]] = [rec.header, *rec.events]
        self.sink = sink
        self.speed = speed
        self.pos = 0
        self.paused = False
        self.end_t_ns = max((int(e.get("t_ns") or 0) for e in self.events), default=0)
        self._anchor_t = 0
        self._anchor_wall = time.monotonic()
        self._wake = asyncio.Event()

    # -- the play clock (pacing only; no measurement is taken here) ----------
    def _clock_ns(self) -> float:
        if self.paused or self.speed is None:
            return float(self._anchor_t)
        return self._anchor_t + (time.monotonic() - self._anchor_wall) * 1e9 * self.speed

    def _reanchor(self, t_ns: float | None = None) -> None:
        self._anchor_t = int(self._clock_ns() if t_ns is None else t_ns)
        self._anchor_wall = time.monotonic()

    @property
    def t_ns(self) -> int:
        if self.pos == 0:
            return 0
        return int(self.events[self.pos - 1].get("t_ns") or 0)

    @property
    def done(self) -> bool:
        return self.pos >= len(self.events)

    def set_speed(self, speed: float | None) -> None:
        self._reanchor(self.t_ns if self.speed is None else None)
        self.speed = speed
        self._wake.set()

    def pause(self) -> None:
        self._reanchor()
        self.paused = True

    def resume(self) -> None:
        self._reanchor(max(self._anchor_t, self.t_ns))
        self.paused = False
        self._wake.set()

    def step(self) -> None:
        """Pause, then play up to and including the next trial's end."""
        if not self.paused:
            self.pause()
        while not self.done:
            ev = self._next()
            if ev.get("type") in ("trial_end", "run_end"):
                break
        self._reanchor(self.t_ns)

    def _next(self) -> dict[str, Any]:
        ev = self.events[self.pos]
        self.pos += 1
        self.sink(ev)
        return ev

    async def run(self) -> None:
        self._reanchor(0)
        while not self.done:
            if self.paused:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.speed is None:
                for _ in range(MAX_SPEED_CHUNK):
                    if self.done:
                        break
                    self._next()
                await asyncio.sleep(0)
                continue
            now = self._clock_ns()
            n = 0
            while not self.done and n < MAX_SPEED_CHUNK:
                if int(self.events[self.pos].get("t_ns") or 0) > now:
                    break
                self._next()
                n += 1
            if n:
                await asyncio.sleep(0)
                continue
            ahead = (int(self.events[self.pos].get("t_ns") or 0) - now) / 1e9 / self.speed
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(max(ahead, 0.001), 0.05))
