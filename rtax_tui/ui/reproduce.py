"""The reproduce screen: a study's published tables filling as `rtax reproduce` runs it.

The study runs as `rtax reproduce STUDY --live FILE` in its own process (the console
never loads a driver): that process keeps FILE the tables as `rtax reproduce` builds
them (`reproduce_document`, the function of the terminal's and `report.md`'s tables),
rewritten whole as each experiment starts and ends. The screen only draws them, with
`render_reproduce` (the terminal's tables): a row whose experiment runs says
`running: k of n trials` (`ours_text`), k counted from the `trial_end` lines its
recording holds so far. A timer reads and draws at about 10 Hz; stderr's progress lines
replace each other on one line. `q`/`escape` leave: mid-study the process is
interrupted as ^C interrupts it (what was recorded is kept, report.json written),
then ended if it will not end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from typing import Any

import orjson
from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Label, OptionList, Static
from textual.widgets.option_list import Option

from rtax_tui.model.events import one_line
from rtax_tui.ui.tasks import rtax_argv

REFRESH_S = 0.1
STOP_GRACE_S = 60.0  # the engine's teardown of the trials in flight, as a run's `q`
TRIAL_END = b'"type":"trial_end"'
READ_AT_MOST = 1 << 22  # of the running recording, per look


class ReproduceScreen(Screen[int]):
    """`rtax reproduce STUDY --size SIZE [--driver D,..]` run here, its tables live."""

    BINDINGS = [
        Binding("escape", "back", "back",
                tooltip="leave; mid-study the study is stopped first (what was recorded "
                "is kept, report.json written)"),
    ]  # fmt: skip

    def __init__(
        self, study: str, size: str = "quick", drivers: list[str] | None = None, root: str = "."
    ) -> None:
        super().__init__()
        self.study = study
        self.study_size = size
        self.drivers = drivers
        self.root = root
        # made when the screen is shown (on_mount): one made and never shown leaves nothing
        self._tmp: Path | None = None
        self.live: Path | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self.doc: dict[str, Any] | None = None
        self.news = ""
        self._seen: tuple[int, int] | None = None
        # recording, bytes read, trial_ends, inside a line longer than a read
        self._tail: tuple[str, int, int, bool] | None = None
        self._drawn: Any = None
        self._leaving = False
        self._stopping: asyncio.Future[None] | None = None

    def argv(self) -> list[str]:
        args = ["reproduce", self.study, "--size", self.study_size, "--root", self.root]
        if self.drivers:
            args += ["--driver", ",".join(self.drivers)]
        return rtax_argv(*args, "--live", str(self.live), "--control")

    def compose(self) -> ComposeResult:
        what = f"reproduce {self.study} --size {self.study_size}"
        if self.drivers:
            what += f" --driver {','.join(self.drivers)}"
        yield Static(Text(one_line(what)), id="reproduce-title")
        yield Static(Text("starting…"), id="reproduce-progress")
        with VerticalScroll(id="reproduce-scroll"):
            yield Static(Text("the tables appear as the study starts"), id="reproduce-tables")
        yield Footer()

    def on_mount(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="rtax-reproduce-"))
        self.live = self._tmp / "live.json"
        self.run_worker(self._run(), exclusive=True, group="reproduce")
        self.set_interval(REFRESH_S, self.redraw)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def _run(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv(),
                # held open, never written: its end (this console gone, even killed)
                # stops the study (--control), nothing of it left running alone
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,  # its tables: drawn here from the live file
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # a ^C meant for the console never reaches it
                limit=1 << 20,
            )
        except OSError as exc:
            self.news = f"cannot start rtax reproduce: {exc}"
            return
        try:
            assert self.proc.stderr is not None
            while line := await self.proc.stderr.readline():
                text = line.decode(errors="replace").rstrip()
                if text:
                    self.news = text  # each replaces the one before
            self.returncode = await self.proc.wait()
        finally:
            # the screen or the app closing cancels this worker: the study is stopped
            # and reaped even then, and nothing of it outlives the console
            if self.proc.returncode is None:
                await asyncio.shield(self.stop())
        self.redraw()

    async def stop(self) -> None:
        """Interrupt the study as ^C does (its trials torn down, what was recorded kept
        and report.json written); signal its whole session harder if it will not end.
        Once, however many ask (`q`, the worker cancelled, the screen unmounted): a
        second ^C ends `rtax reproduce` at once, before it writes report.json."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            # told just before its ^C (no await between: the pipe's write is made at once),
            # so that this console ending during the stop sends it no second ^C (--control)
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.write(b"stop\n")
        for sig, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGTERM, 10.0),
                            (signal.SIGKILL, 10.0)):  # fmt: skip
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(proc.wait(), wait_s)
                break
            except TimeoutError:
                continue
        self.returncode = proc.returncode

    def _read_live(self) -> None:
        if self.live is None:
            return
        try:
            st = self.live.stat()
        except OSError:
            return
        key = (st.st_mtime_ns, st.st_size)
        if key == self._seen:
            return
        try:
            doc = orjson.loads(self.live.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return  # replaced whole by rename: read again at the next tick
        if isinstance(doc, dict) and isinstance(doc.get("tables"), list):
            self._seen, self.doc = key, doc

    def _trials_ended(self, recording: str) -> int:
        """The `trial_end` lines the running experiment's recording holds so far, read
        from where the last look stopped (whole lines only)."""
        path, offset, count, inside = (
            self._tail if self._tail and self._tail[0] == recording else (recording, 0, 0, False)
        )
        # a regular file only, opened without waiting and not through a symlink: a FIFO
        # there would block this, the console's only thread, and /dev/zero never ends
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (OSError, ValueError):
            return count
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return count
            chunk = os.pread(fd, READ_AT_MOST, offset)
        except OSError:
            return count
        finally:
            os.close(fd)
        if inside:  # the rest of a line longer than a read, already looked at
            cut = chunk.find(b"\n")
            if cut < 0:
                self._tail = (path, offset + len(chunk), count, len(chunk) > 0)
                return count
            chunk, offset, inside = chunk[cut + 1 :], offset + cut + 1, False
        whole = chunk.rfind(b"\n") + 1
        count += sum(1 for ln in chunk[:whole].split(b"\n") if TRIAL_END in ln)
        if whole == 0 and len(chunk) == READ_AT_MOST:
            # one line longer than a whole read: its start said whether it is a trial's end
            # (`type` comes first), the rest skipped; counting stays on the lines after it
            count += TRIAL_END in chunk
            self._tail = (path, offset + len(chunk), count, True)
            return count
        self._tail = (path, offset + whole, count, False)
        return count

    def shown_doc(self) -> dict[str, Any] | None:
        """The live tables, each running row's `ours_text` with the trials ended so far
        (`ours_text`, the report's own words)."""
        from rtax_tui.analysis.studies import ours_text

        doc = self.doc
        running = (doc or {}).get("running")
        if doc is None or not isinstance(running, dict):
            return doc
        done = self._trials_ended(str(running.get("recording")))
        tables = []
        for t in doc["tables"]:
            rows = []
            for row in t["rows"]:
                ours = row.get("ours") or {}
                if ours.get("status") == "running":
                    ours = {**ours, "done": done}
                    row = {**row, "ours": ours, "ours_text": ours_text(ours)}
                rows.append(row)
            tables.append({**t, "rows": rows})
        return {**doc, "tables": tables}

    def redraw(self) -> None:
        from rtax_tui.render.reproduce_render import render_reproduce

        if not self.query("#reproduce-progress"):
            return  # the screen torn down (the console closing with it beneath another)
        self._read_live()
        try:
            doc = self.shown_doc()
            key = (id(self.doc), orjson.dumps(doc) if doc else b"", self._state_line())
            if key == self._drawn:
                return
            tables = Group(*render_reproduce(doc)) if doc is not None else None
        except Exception as exc:  # a live file not as reproduce writes it: said, not fatal
            self.doc, self._drawn = None, None
            self.news = f"the live tables cannot be drawn ({type(exc).__name__}: {exc})"
            self.query_one("#reproduce-progress", Static).update(Text(one_line(self.news)))
            return
        self._drawn = key
        self.query_one("#reproduce-progress", Static).update(Text(one_line(key[2])))
        if tables is not None:
            self.query_one("#reproduce-tables", Static).update(tables)

    def _state_line(self) -> str:
        doc = self.doc or {}
        if self.returncode is not None or doc.get("state") == "done":
            rc = self.returncode
            how = ("stopped: what was recorded is kept" if rc == 130 else
                   f"ended (exit {rc})" if rc not in (0, None) else "done")  # fmt: skip
            where = doc.get("directory")
            return f"{how}{f': {where}' if where else ''}" + (
                f" — {self.news}" if rc not in (0, 130, None) else "")  # fmt: skip
        if self._leaving:
            return f"stopping the study… {self.news}"
        return self.news or "starting…"

    async def action_back(self) -> None:
        """Leave; a study still running is stopped first, and its files kept."""
        if self._leaving:
            return
        self._leaving = True
        self.redraw()
        await self.stop()
        self.workers.cancel_group(self, "reproduce")
        self._drop_tmp()
        self.dismiss(self.returncode or 0)

    async def on_unmount(self) -> None:
        """The app closing (not by `q`): the study is stopped and waited for here too,
        so that the console ends after it."""
        await self.stop()
        self._drop_tmp()

    def _drop_tmp(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


STUDY_CHOICES = (
    ("pvisor", "quick"),
    ("paper", "quick"),
    ("pvisor", "full"),
    ("paper", "full"),
)


class PickStudy(ModalScreen[tuple[str, str] | None]):
    """Which study to reproduce here, at which size (`rtax reproduce`'s)."""

    BINDINGS = [Binding("escape,q", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        from rtax_tui.analysis.studies import load_study

        with Vertical(id="dialog"):
            yield Label("Reproduce which study? (enter: run it here, escape: cancel)")
            options = []
            for name, size in STUDY_CHOICES:
                title = load_study(name).title
                long = "minutes" if size == "quick" else "the study's own counts: hours"
                options.append(Option(Text(one_line(f"{name} --size {size}: {title} ({long})")),
                                      id=f"{name}:{size}"))  # fmt: skip
            yield OptionList(*options, id="studies")

    def on_mount(self) -> None:
        self.query_one("#studies", OptionList).focus()

    @on(OptionList.OptionSelected, "#studies")
    def _chosen(self, ev: OptionList.OptionSelected) -> None:
        name, size = str(ev.option.id).split(":")
        self.dismiss((name, size))

    def action_cancel(self) -> None:
        self.dismiss(None)
