"""Long work started from the console (driver checks, image builds, asset preparation).

Each runs as an `rtax` command in its own process, inside a Textual worker, so the
console stays responsive and never loads a driver (the layers: the console reads
what the engine's commands print). Its progress is one line that replaces itself
(`WorkLine`); a failure keeps the command's last words and says what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable

from textual.widgets import Static

from rtax_tui.render.plaintext import styled

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def rtax_argv(*args: str) -> list[str]:
    """An `rtax` command run by the same Python as the console."""
    return [sys.executable, "-m", "rtax_tui", *args]


async def stream_command(
    argv: list[str],
    on_out: Callable[[str], None] | None = None,
    on_err: Callable[[str], None] | None = None,
) -> int:
    """Run `argv`, handing each line of its stdout and stderr over as it comes;
    returns its exit status. A cancelled worker ends the process."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=1 << 22,
    )

    async def pump(stream: asyncio.StreamReader | None, sink: Callable[[str], None] | None) -> None:
        assert stream is not None
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            if text and sink is not None:
                sink(text)

    try:
        await asyncio.gather(pump(proc.stdout, on_out), pump(proc.stderr, on_err))
        return await proc.wait()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        # reaped even when the worker is cancelled (the screen or the app closing): a
        # killed process is gone in milliseconds, and nothing of it outlives the console
        cancelled = False
        while proc.returncode is None:
            try:
                await asyncio.shield(proc.wait())
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError


class WorkLine(Static):
    """One line of progress that replaces itself: `⠹ what: the latest news`, then
    `✓ what` or `✗ what failed: why — what to do`."""

    def on_mount(self) -> None:
        self._frame = 0
        self._what = ""
        self._news = ""
        self._busy = 0
        self._failure: str | None = None
        self.set_interval(0.1, self._tick)

    def start(self, what: str) -> None:
        if not self._busy:
            self._failure = None
        self._busy += 1
        self._what, self._news = what, ""
        self._draw()

    def news(self, text: str) -> None:
        self._news = text
        self._draw()

    def finish(self, text: str, ok: bool = True) -> None:
        """A task ended. With several at once (hosts checked side by side), a failure
        stays on the line once they all ended: what needs doing is not overwritten by
        another task's success."""
        self._busy = max(0, self._busy - 1)
        if not ok:
            self._failure = text
        if not ok or self._failure is None:
            mark = ("✓", "green") if ok else ("✗", "red")
            self.update(styled(mark, f" {text}"))
        elif not self._busy:
            self.update(styled(("✗", "red"), f" {self._failure}"))

    async def follow(self, what: str, argv: list[str], fix: str) -> bool:
        """Run `argv` (in a worker), its lines as news; True when it exits 0, else its
        last words and `fix` (what to do) stay on the line."""
        self.start(what)
        last: dict[str, str] = {}

        def news(stream: str) -> Callable[[str], None]:
            def said(text: str) -> None:
                last[stream] = text
                self.news(text)

            return said

        rc = await stream_command(argv, news("out"), news("err"))
        if rc == 0:
            self.finish(f"{what}: done")
            return True
        # its last words are its last line on stderr (the error), else on stdout: the two
        # pipes are read side by side, so which one's last line comes last is chance
        why = last.get("err") or last.get("out") or f"exit {rc}"
        self.finish(f"{what} failed (exit {rc}): {why} — {fix}", ok=False)
        return False

    def _tick(self) -> None:
        if self._busy:
            self._frame = (self._frame + 1) % len(SPINNER)
            self._draw()

    def _draw(self) -> None:
        if not self._busy:
            return
        news = f": {self._news}" if self._news else "…"
        line = f"{SPINNER[self._frame]} {self._what}{news}"
        width = max(20, self.size.width or 100)
        self.update(styled(line[: width - 1]))

    @property
    def busy(self) -> bool:
        return self._busy > 0
