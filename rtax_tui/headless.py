"""The terminal mode: run a profile with progress on stderr and a report at the end."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from rtax_tui.core import reaper
from rtax_tui.core.model import RtaxError
from rtax_tui.core.profile import Profile
from rtax_tui.core.recording import Recording, RecordingWriter
from rtax_tui.core.runner import build_session
from rtax_tui.core.session import Session
from rtax_tui.reporting import out_console


def default_output(profile: Profile, root: Path = Path("recordings")) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return root / f"{stamp}-{profile.name}.jsonl"


class _Collector:
    """Keeps the events in memory so the report needs no second read of the file."""

    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []

    def __call__(self, ev: dict[str, Any]) -> None:
        if ev["type"] == "run":
            self.header = ev
        else:
            self.events.append(ev)


def _progress_line(session: Session) -> str:
    p = session.progress
    elapsed = (time.monotonic_ns() - p.started_ns) / 1e9 if p.started_ns else 0.0
    eta = ""
    if p.done and p.planned > p.done:
        eta = f", ~{elapsed / p.done * (p.planned - p.done):.0f}s left"
    state = " (stopping)" if session.stopping else ""
    return (
        f"trials {p.done}/{p.planned}  failed {p.failed}  invalid {p.invalid}  "
        f"in flight {p.in_flight}  {elapsed:.1f}s{eta}{state}"
    )


async def _run(
    profile: Profile,
    writer: RecordingWriter,
    collector: _Collector,
    argv: list[str],
    err: Console,
) -> str:
    session = await build_session(
        profile,
        sinks=[writer.write, collector],
        argv=argv,
        log=lambda msg: err.print(f"[dim]{msg}[/dim]"),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, session.stop)
    reaper.start()  # cleans up after us even if we are killed with SIGKILL
    status_task = None
    if err.is_terminal:
        status = err.status(_progress_line(session))
        status.start()

        async def refresh() -> None:
            while True:
                status.update(_progress_line(session))
                await asyncio.sleep(0.1)

        status_task = asyncio.create_task(refresh())
    try:
        return await session.run()
    finally:
        if status_task is not None:
            status_task.cancel()
            status.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        # remote hosts: closing a connection makes its remote reaper end what is left
        await asyncio.gather(
            *(h.close() for h in session.hosts.values() if h), return_exceptions=True
        )
        reaper.stop()


def run_headless(profile: Profile, output: str | None, argv: list[str]) -> int:
    err = Console(stderr=True)
    to_stdout = output == "-"
    if to_stdout:
        path = None
        writer = RecordingWriter(sys.stdout.buffer)
    else:
        path = Path(output) if output else default_output(profile)
        try:
            writer = RecordingWriter.open(path)
        except FileExistsError:
            raise RtaxError(f"{path}: already exists; rtax never overwrites a recording") from None
        except OSError as exc:
            raise RtaxError(f"{path}: cannot write the recording ({exc.strerror})") from None
    collector = _Collector()
    try:
        status = asyncio.run(_run(profile, writer, collector, argv, err))
    except BaseException:
        writer.close()
        if path is not None and collector.header is None:
            path.unlink(missing_ok=True)  # failed before the first event: nothing to keep
        raise
    writer.close()
    if collector.header is not None:
        from rtax_tui.core.report import build_report
        from rtax_tui.reporting import print_report

        rec = Recording(str(path or "-"), collector.header, collector.events)
        out = err if to_stdout else out_console()
        print_report(build_report(rec), out)
    if path is not None:
        print(f"recording: {path}", file=sys.stderr)  # unwrapped: scripts read this line
    if status == "interrupted":
        err.print("run interrupted: finished trials are kept in the recording")
        return 130
    return 0
