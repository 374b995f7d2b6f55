"""The terminal mode: run a profile with progress on stderr and a report at the end."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rtax_tui.commands import output as stdout_guard
from rtax_tui.engine import evloop
from rtax_tui.engine.profile import Profile
from rtax_tui.engine.runner import opened, refuse_ray_nodes
from rtax_tui.engine.session import Session
from rtax_tui.model import paths, signals
from rtax_tui.model.events import SinkError, error_line, one_line
from rtax_tui.model.recording import Recording, RecordingWriter, read_recording
from rtax_tui.model.spec import RtaxError
from rtax_tui.render.plaintext import styled
from rtax_tui.render.reporting import out_console

if TYPE_CHECKING:
    from rtax_tui.analysis.gates import Threshold

# Each stops the run the same way: no new trial, what runs is interrupted and torn down,
# finished trials stay recorded (exit 130). SIGHUP: the terminal or the SSH session went.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


def _listen_for_commands(session: Session, loop: asyncio.AbstractEventLoop) -> None:
    """The console's control channel: `pause`, `resume`, `stop` lines on stdin.

    End of input (the console went away) stops the run: nothing keeps running alone.
    Read on a thread with plain blocking reads, so that any readable stdin works: a pipe,
    a terminal, a file or /dev/null (which the loop's readers refuse: EPERM). A daemon
    thread: a read still blocked when the run ends holds nothing up.
    """
    fd = sys.stdin.fileno()

    commands = {"pause": session.pause, "resume": session.resume, "stop": session.stop}

    def read() -> None:
        buf = bytearray()
        while True:
            try:
                chunk = os.read(fd, 4096)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf.extend(chunk)
            while b"\n" in buf:
                line, _, rest = bytes(buf).partition(b"\n")
                buf[:] = rest
                act = commands.get(line.decode(errors="replace").strip())
                if act is None:
                    continue  # no command: nothing to wake the loop for
                try:
                    loop.call_soon_threadsafe(act)
                except RuntimeError:  # the loop is closed: the run is over
                    return
            if len(buf) > 1 << 16:
                # a line that never ends is no console (`--control </dev/zero`): reading it
                # would spin a core beside the trials, so it ends the input like EOF does
                break
        try:
            loop.call_soon_threadsafe(session.stop)
        except RuntimeError:
            pass

    threading.Thread(target=read, name="rtax-control", daemon=True).start()


async def _run(
    profile: Profile,
    sinks: list[Any],
    argv: list[str],
    err: Console,
    control: bool = False,
) -> tuple[str, str | None]:
    """The run's status, and the fault that stopped it (None: none did)."""

    def log(msg: str) -> None:
        err.print(styled((one_line(msg), "dim")))

    async with opened(profile, sinks=sinks, argv=argv, log=log) as session:
        return await _run_open(session, err, control)


async def _run_open(session: Session, err: Console, control: bool) -> tuple[str, str | None]:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, session.stop)
    if evloop.take_stop():  # one came while the session was built: stop before a trial
        session.stop()
    if control:
        _listen_for_commands(session, loop)
    status_task = None
    if err.is_terminal and not control:
        status = err.status(_progress_line(session))
        status.start()

        async def refresh() -> None:
            while True:
                status.update(_progress_line(session))
                await asyncio.sleep(0.1)

        status_task = asyncio.create_task(refresh())
    try:
        return await session.run(), session.fault
    finally:
        if status_task is not None:
            status_task.cancel()
            status.stop()
        with signals.held():  # never the default action in between
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            evloop.guard_signals()  # a signal from now on: KeyboardInterrupt, once out of the loop
        # then `opened` closes the hosts (a remote host's reaper ends what is left there)
        # and stops the reaper


class _StreamSink:
    """The events to stdout (`-o -`). A write that fails (the reader went away: EPIPE; a
    full disk; a closed stdout) ends this sink and nothing more is written there. With
    `--record` the run goes on into its file (the console that read the stream is gone;
    the recording is what it keeps); alone, the run stops (`SinkError`) and rtax ends as
    `output.stream_failed` says: quietly with 141 for a closed pipe, one line else."""

    def __init__(self, writer: RecordingWriter, keep_going: bool) -> None:
        self.writer = writer
        self.keep_going = keep_going
        self.error: OSError | None = None

    def __call__(self, ev: dict[str, Any]) -> None:
        if self.error is not None:
            return
        try:
            self.writer.write(ev)
        except OSError as exc:
            self.error = exc
            stdout_guard.silence_stdout()
            if not self.keep_going:
                raise SinkError(f"standard output: {exc.strerror or exc}") from None


def _open_recording(path: Path) -> RecordingWriter:
    try:
        return RecordingWriter.open(path)
    except FileExistsError:
        if path.is_symlink() and not path.exists():
            why = "a symbolic link that points nowhere; name another file"
            raise RtaxError(f"{path}: {why}") from None
        raise RtaxError(f"{path}: already exists; rtax never overwrites a recording") from None
    except OSError as exc:
        raise RtaxError(f"{path}: cannot write the recording ({paths.reason(exc)})") from None


def run_headless(
    profile: Profile,
    output: str | None,
    argv: list[str],
    *,
    record: str | None = None,
    control: bool = False,
    quiet: bool = False,
    thresholds: Sequence[Threshold] = (),
    summary: str | None = None,
    junit: str | None = None,
) -> int:
    """`_run_headless`, where a stop signal is a KeyboardInterrupt (model/signals.py):
    before the run's loop takes them, and after, the recording is closed (kept once it
    has its header, else its temporary file removed) and rtax ends with 130."""
    with signals.armed():
        return _run_headless(
            profile,
            output,
            argv,
            record=record,
            control=control,
            quiet=quiet,
            thresholds=thresholds,
            summary=summary,
            junit=junit,
        )


def _run_headless(
    profile: Profile,
    output: str | None,
    argv: list[str],
    *,
    record: str | None = None,
    control: bool = False,
    quiet: bool = False,
    thresholds: Sequence[Threshold] = (),
    summary: str | None = None,
    junit: str | None = None,
) -> int:
    """`output` "-" streams the events to stdout; `record` then also writes them to a file
    (the console reads the stream and keeps the file). `control` reads commands on stdin.
    `thresholds` are checked at the end (exit 1 on a breach); `summary`: a file the report
    and the gates are appended to in Markdown; `junit`: the gates as JUnit XML."""
    gated = bool(thresholds) or summary is not None or junit is not None
    err = out_console(stderr=True)
    to_stdout = output == "-"
    writers: list[RecordingWriter] = []
    path: Path | None = None
    if to_stdout:
        writers.append(RecordingWriter(sys.stdout.buffer))
        if record:
            path = Path(record)
    else:
        if record:
            raise RtaxError("--record needs -o - (it names the file kept beside the stream)")
        path = Path(output) if output else default_output(profile)
    file_writer = _open_recording(path) if path is not None else None
    if file_writer is not None:
        writers.append(file_writer)
    # The report at the end is read back from the file when there is one: a long run then
    # holds no event in memory (a soak's RSS stays flat); a stream alone is collected.
    collector = _Collector() if file_writer is None and (not quiet or gated) else None
    sinks: list[Any] = [w.write for w in writers]
    stream: _StreamSink | None = None
    if to_stdout:  # a reader that went away must not lose the file
        stream = sinks[0] = _StreamSink(writers[0], keep_going=path is not None)
    if collector is not None:
        sinks.append(collector)
    try:
        status, fault = evloop.run(_run(profile, sinks, argv, err, control))
    except BaseException:
        for w in writers:
            w.close()  # before its header, a recording is only a temporary file: removed
        raise
    for w in writers:
        w.close()
    if stream is not None and stream.error is not None and path is None:
        return stdout_guard.stream_failed(stream.error)  # nothing else to keep or say
    held = True
    if not quiet or gated:
        rec: Recording | None = None
        if path is not None and file_writer is not None and file_writer.lines:
            rec = read_recording(path)  # what the file holds, to its last complete line
        elif collector is not None and collector.header is not None:
            rec = Recording("-", collector.header, collector.events)
        if rec is not None:
            from rtax_tui.analysis.report import build_report
            from rtax_tui.render.reporting import print_report

            report = build_report(rec)
            if not quiet:
                print_report(report, err if to_stdout else out_console())
            if gated and fault is None:
                from rtax_tui.commands.gating import apply_gates

                loaded = rec
                held = apply_gates(report, lambda: loaded, thresholds, summary, junit)
        elif thresholds:
            print("threshold BREACHED: the run recorded no trial to check", file=sys.stderr)
            held = False
    if path is not None and file_writer is not None and file_writer.published:
        print(f"recording: {one_line(str(path))}", file=sys.stderr)  # unwrapped: scripts read it
    if fault is not None:  # not even the header fitted: no file was kept (close removed it)
        print(f"rtax: error: {error_line(str(fault))}", file=sys.stderr)
        return 1
    if status == "interrupted":
        err.print("run interrupted: finished trials are kept in the recording")
        return 130
    return 0 if held else 1


# -- rtax probe ------------------------------------------------------------------


def run_probe_command(
    drivers: list[str],
    channels: list[str],
    profile: Profile,
    *,
    fmt: str | None,
    output: str | None,
    argv: list[str],
) -> int:
    """`rtax probe`: the boundary checks, printed as a table or JSON (`fmt` None: not
    printed, as `rtax reproduce` runs it), optionally recorded.

    The exit status is 0 whatever the checks find (a breach is a measurement); the
    last result of each host/driver is kept for the headers of later runs."""
    with signals.armed():
        return _probe_command(drivers, channels, profile, fmt=fmt, output=output, argv=argv)


def _probe_command(
    drivers: list[str],
    channels: list[str],
    profile: Profile,
    *,
    fmt: str | None,
    output: str | None,
    argv: list[str],
) -> int:
    from rtax_tui.engine.probe import state as probe_state
    from rtax_tui.engine.probe.run import probe_profile
    from rtax_tui.model.probedoc import build_document

    err = out_console(stderr=True)
    path = Path(output) if output else None
    if path is not None and path.exists():
        raise RtaxError(f"{path}: already exists; rtax never overwrites a recording")
    events: list[dict[str, Any]] = []
    writer = _open_recording(path) if path is not None else None
    sinks: list[Any] = [events.append] + ([writer.write] if writer is not None else [])
    profile = probe_profile(profile, drivers, channels)
    try:
        status = evloop.run(_probe(profile, sinks, argv, err))
    finally:
        if writer is not None:
            writer.close()
    if status != "completed":
        err.print("probe interrupted: nothing was kept as the last probe result")
        return 130
    started_at = str(events[0]["started_at"])  # the header's: when the probe began
    probes = [e for e in events if e.get("type") == "probe"]
    probe_state.save(probe_state.entries_from_events(probes, started_at))
    doc = build_document(
        probes,
        started_at=started_at,
        hosts=list(profile.hosts),
        channels=channels,
        limits=vars(profile.limits).copy(),
    )
    if fmt == "json":
        import orjson

        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    elif fmt == "markdown":
        from rtax_tui.render.reporting import probe_markdown

        sys.stdout.write(probe_markdown(doc))
    elif fmt is not None:
        from rtax_tui.render.reporting import print_probe

        print_probe(doc, out_console())
    if path is not None and fmt is not None:
        print(f"recording: {path}", file=sys.stderr)
    return 0


async def _probe(profile: Profile, sinks: list[Any], argv: list[str], err: Console) -> str:
    """The probe's run: opened as every run of the engine is (engine/runner.py), then
    its checks (engine/probe/run.py `probe_session`); a stop signal interrupts it."""
    from rtax_tui.engine.probe.run import probe_session

    def log(msg: str) -> None:
        err.print(styled((one_line(msg), "dim")))

    async with opened(profile, sinks=sinks, argv=argv, log=log, ready=False) as session:
        refuse_ray_nodes(session, "rtax probe")
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await probe_session(session, log=log)
        finally:
            with signals.held():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                evloop.guard_signals()
