r"""The `shell` channel: one persistent shell, each command framed with a sentinel.

Each command is sent as

    { CMD
    } </dev/null 9>&1 >&9 2>&1 9>&-; { \eval "\\trap - 0 1 .. 64; \\set +ev;
      \\unset -f printf read; \\printf '\n%s %d\n' SENTINEL $?"; } 2>/dev/null

(on one line; inside the double quotes, `\\` is one backslash). Every driver sends it,
`local` too. `frame_apart` (the same without the tail's `2>/dev/null` and with `<&2` for
the step's stdin, 21 system calls of dash's per frame, not 32) was sent by `local` for a
while in issue 42 and is kept for the benches only: it trusts the shell's fd 2 to still
be the /dev/null the driver gave it, and a step can close that descriptor (`ulimit -S -n
12`: the group's save of fd 2 fails and dash closes it, so every later step's `<&2`
fails and the step is recorded with status 2, not run) or move it (a trap fired between
the group's restore and the `eval`: `exec 2<&0` there gives every later step rtax's
frames as stdin, `exec 2>&1` puts the frame's `set -x` trace, sentinel included, in the
output); docs/boundaries.md, "The shell frame apart from stderr (issue 42)".

The output is every byte before the newline that precedes the sentinel, so output
that does not end in a newline is returned exactly. The command runs in the shell
itself (no subshell), so builtins cost no fork and `cd` persists, as in an agent's
shell.

What is promised (docs/drivers.md, "What the shell channel promises"): the status a
frame reports is the status of what the shell ran, and no step can make it read
otherwise. Which program a bare command name runs is the session's: the aliases,
functions and `PATH` that earlier steps left, as in any shell; a command word that is
an absolute path is written with a backslash before it (dash and busybox ash let an
alias be named `/bin/sh`), so it is that file. A grader that must not depend on the
session takes its reward from the exec channel or names its programs that way.

The shell runs code written by a model under training, which may try to make a later
step's failure read as a success. The frame therefore trusts nothing a step can
redefine or leave behind:
- the status is expanded into the text of one `eval` (a POSIX special builtin: found
  before any function, and no function may take its name) by the first simple command
  after the step, so no trap can run in between, and none can change a number already
  written in the text (a trap that set `$1`, where the status used to wait for
  `printf`, forged about one failing step in 40 while a signal kept firing:
  bench/frame_cost.py);
- inside it every trap is reset (a step's traps do not outlive it), `-e` and `-v` are
  turned off (`-e` would end the shell at the next failure before its status is
  written; `-v` would echo the next frame, sentinel included, as the shell reads it),
  functions named `printf` and `read` are removed before the builtins run, and the
  backslashes stop alias expansion; its stderr is /dev/null, so a step's `set -x`
  (which stays, the session's) traces none of it;
- the step's redirections are the group's, undone after it: a step's `exec >/dev/null`
  or `exec 9>&-` does not reach the frame or a later step.
The sentinel is new for every command (16 random bytes), so a step that prints a
frame cannot know the one its own command, or a later one, will be answered with.
This holds where `sh` is dash or busybox ash (the stage root and the images rtax
builds). Where `sh` is bash, it does not: bash's DEBUG trap sees each command's text
before it runs (the sentinel included) and may print a frame of its own, and after
`set +o posix` a function may take a special builtin's name. What the frame cannot stop
(a step that replaces the shell with `exec`, reads the frame from the shell's stdin, or
rewrites its memory) is for the driver to rule out: `CredReader` tells which process
wrote the answer, and `FramedShell`'s `verify` lets the driver check the shell is still
the one it started (the stage driver does both; see drivers/stage.py). The probe's
`result_integrity` check measures it.

A step's output is read to the frame's end however long it is, and only its first
`model.OUTPUT_LIMIT` bytes kept (issue 19): `read_frame` takes what a reader holds once
it holds `model.READ_LIMIT` bytes with no separator (the reader raises
`LimitOverrunError`, as asyncio's does), keeps or counts it, and reads on; a CredReader
stops reading its socket while it holds that much, so a step's output left unread
between actions is bounded too. The separator is still found only where the shell
wrote it whole.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rtax_tui.model import spec as model
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.spec import ActionResult, OutputSink, PhaseFailure
from rtax_tui.model.waits import own_timeout

# Every signal a trap may be set on, and EXIT (0): reset after each step (dash, busybox
# ash and bash all take numbers; an unknown one is ignored).
_SIGNALS = " ".join(str(n) for n in range(65))
# What follows a command, inside a group whose stderr is /dev/null (so that a step's
# `set -x` traces none of it into the output): one `eval` (a special builtin, found
# before any function) of a text in which the status is already a literal number: `$?`
# is expanded when that one simple command is read, before any trap could run, and no
# trap can change a number written in the text. The text resets every trap, turns `-e`
# and `-v` off (`-v` would echo the next frame as the shell reads it; `-e` would end the
# shell at a later step's failure before its status is written), removes any function
# named printf or read, then the builtin printf writes the frame. `trap`, `set` and
# `unset` are special builtins too; the backslashes stop alias expansion.
_TAIL = (
    '{{ \\eval "\\\\trap - {signals}; \\\\set +ev; \\\\unset -f printf read; '
    "\\\\printf '\\n%s %d\\n' {sentinel} $?\"; }} 2>/dev/null"
)
# The same `eval`, cut around the sentinel once (formatting the whole text per action
# cost more than the rest of the frame's Python), and the step's group before it.
_EVAL_HEAD, _EVAL_END = _TAIL.format(signals=_SIGNALS, sentinel="\0").removeprefix("{ ").split("\0")
_EVAL_END = _EVAL_END.removesuffix("; } 2>/dev/null")
_GROUP_END = "\n} </dev/null 9>&1 >&9 2>&1 9>&-; "
# For a shell whose stderr is /dev/null opened for reading and writing (`frame_apart`):
# the step's stdin is a copy of it, so /dev/null is not opened again per step.
_GROUP_END_APART = "\n} <&2 9>&1 >&9 2>&1 9>&-; "


def _command(argv: Sequence[str]) -> str:
    words = [shlex.quote(a) for a in argv]
    if words and words[0].startswith("/"):
        words[0] = "\\" + words[0]
    return " ".join(words)


def frame(argv: Sequence[str], sentinel: str) -> bytes:
    """The text the shell is sent for `argv`. The command runs in a group that gives it
    /dev/null as stdin and the shell's stdout as stdout and stderr; the group's
    redirections are undone after it, so a step's `exec >/dev/null` (or `exec 9>&-`)
    does not outlive it. A command word that is an absolute path is written with a
    backslash before it: that file, whatever alias a step defined (dash and busybox let
    an alias be named `/bin/sh`); a bare name is resolved by the session, as in any
    shell (aliases, functions, then `PATH`)."""
    return (
        f"{{ {_command(argv)}{_GROUP_END}{{ {_EVAL_HEAD}{sentinel}{_EVAL_END}; }} 2>/dev/null\n"
    ).encode()


def frame_apart(argv: Sequence[str], sentinel: str) -> bytes:
    """Not sent by any driver (the benches compare it): see the module's docstring for
    why. `frame`, for a shell whose own stderr is not read: the driver started it with
    stderr on /dev/null, opened for reading and writing (subprocess.DEVNULL; `2<>` over
    SSH). The `eval` needs no `2>/dev/null` of its own, as the step's group gives the step
    the shell's stdout as stderr and puts the shell's own back after it: a step's `set -x`
    still traces none of the frame into the output (that trace goes where the shell's
    stderr goes). The step's stdin is a copy of that same /dev/null (`<&2`, read before
    the group's `2>&1`), not a new open of it. No descriptor a step can leave behind is
    used: fd 2 is one of the group's, put back after every step as stdout is. 10 system
    calls fewer per step than `frame` (the tail's open, save and restore, and the open
    and close of /dev/null for stdin)."""
    return f"{{ {_command(argv)}{_GROUP_END_APART}{_EVAL_HEAD}{sentinel}{_EVAL_END}\n".encode()


def new_sentinel() -> str:
    return "__RTAX_" + os.urandom(16).hex() + "__"


class CredReader:
    """The reading end of a unix stream socket whose every byte comes with the pid of the
    process that wrote it (SO_PASSCRED: the kernel's word, in the reader's pid namespace,
    that no process without CAP_SYS_ADMIN can change; the kernel never joins two writers'
    bytes in one read). `readuntil(sep, writer)` finds `sep` only where `writer` wrote all
    of it: the same bytes written by any other process are output like any other."""

    def __init__(self, sock: socket.socket, limit: int | None = None) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock = sock
        self._buf = bytearray()
        self._pids: list[tuple[int, int]] = []  # (end offset in _buf, writer pid)
        self._eof = False
        self._limit = model.READ_LIMIT if limit is None else limit
        self._paused = False  # holding `limit` bytes: the socket is not read until taken
        self._waiter: asyncio.Future[None] | None = None
        self.matched_by: int | None = None  # who wrote the last `readuntil`'s separator
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _flags, _addr = self._sock.recvmsg(1 << 16, socket.CMSG_SPACE(12))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, anc = b"", []
        if not data:
            self._eof = True
            self._loop.remove_reader(self._sock.fileno())
        else:
            pid = 0
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("i", payload[:4])[0]
            self._buf += data
            if self._pids and self._pids[-1][1] == pid:
                self._pids[-1] = (len(self._buf), pid)
            else:
                self._pids.append((len(self._buf), pid))
            if len(self._buf) >= self._limit:
                self._paused = True
                self._loop.remove_reader(self._sock.fileno())
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        if self._eof:
            raise asyncio.IncompleteReadError(bytes(self._buf), None)
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _writers(self, start: int, end: int) -> set[int]:
        """The pids that wrote bytes [start, end) of the buffer."""
        out = set()
        begin = 0
        for stop, pid in self._pids:
            if stop > start and begin < end:
                out.add(pid)
            begin = stop
        return out

    def _take(self, n: int) -> bytes:
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._pids = [(stop - n, pid) for stop, pid in self._pids if stop > n]
        if self._paused and len(self._buf) < self._limit and not self._eof:
            self._paused = False
            self._loop.add_reader(self._sock.fileno(), self._readable)
        return data

    async def readuntil(self, sep: bytes, writer: int | None = None) -> bytes:
        """Everything up to and including the first `sep` that `writer` wrote whole (any
        writer when None). Holding the limit's bytes with no such `sep`, raises
        `asyncio.LimitOverrunError` (as asyncio's StreamReader), whose `consumed` bytes
        can hold no part of it: `readexactly` takes them."""
        start = 0
        while True:
            i = self._buf.find(sep, start)
            while i >= 0:
                who = self._writers(i, i + len(sep))
                if writer is None or who == {writer}:
                    self.matched_by = who.pop() if len(who) == 1 else None
                    return self._take(i + len(sep))
                i = self._buf.find(sep, i + 1)
            start = max(0, len(self._buf) - len(sep) + 1)
            if len(self._buf) >= self._limit and start > 0:
                raise asyncio.LimitOverrunError("separator not found within the limit", start)
            await self._wait()

    async def readexactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buf)), n)
            await self._wait()
        return self._take(n)

    async def readline(self) -> bytes:
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            self._take(len(self._buf))
            return exc.partial

    async def read(self, n: int) -> bytes:
        while not self._buf and not self._eof:
            await self._wait()
        return self._take(min(n, len(self._buf)))

    def close(self) -> None:
        if not self._eof:
            self._eof = True
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()


Reader = asyncio.StreamReader | CredReader


async def read_frame(r: Any, sep: bytes, sink: OutputSink, writer: int | None = None) -> None:
    """Read `r` through the next `sep` (on a CredReader: the next one `writer` wrote whole,
    any writer when None), the bytes before it into `sink`: what `r` holds past its limit
    is taken as it comes (`LimitOverrunError`), so however much comes first, no more than
    the reader's limit and the sink's is held. `r`: an asyncio StreamReader, a CredReader,
    or a reader with their `readuntil` and `readexactly` (hosts.ssh)."""
    while True:
        try:
            if isinstance(r, CredReader):
                data = await r.readuntil(sep, writer)
            else:
                data = await r.readuntil(sep)
        except asyncio.LimitOverrunError as exc:
            sink.add(await r.readexactly(exc.consumed))
            continue
        sink.add(memoryview(data)[: len(data) - len(sep)])
        return


_STATUS_KEPT = 4096  # of the shell's own status line, the bytes kept


async def _status_line(r: Any, writer: int | None) -> bytes:
    """The rest of the frame's line after its marker (the status), read to its newline
    (on a CredReader: the newline `writer` wrote), its first `_STATUS_KEPT` bytes kept.
    The printf wrote the line with the marker, so the reader nearly always holds it
    already and one `readuntil` takes it; a line that overruns the reader's limit is
    taken as `read_frame` takes output."""
    try:
        if isinstance(r, CredReader):
            data = await r.readuntil(b"\n", writer)
        else:
            data = await r.readuntil(b"\n")
    except asyncio.LimitOverrunError as exc:
        tail = OutputSink(_STATUS_KEPT)
        tail.add(await r.readexactly(exc.consumed))
        await read_frame(r, b"\n", tail, writer)
        return tail.kept()
    return data[: min(len(data) - 1, _STATUS_KEPT)]


class FramedShell:
    """One persistent shell. The stale-channel rule lives here, for every driver: once
    a command did not come back whole (timed out, cancelled, the shell died, its result
    could not be trusted), the stream is out of step with the frames, so the shell is
    never used again (`shell_lost`, or `integrity` when the driver's check failed)."""

    def __init__(
        self,
        stdin: asyncio.StreamWriter,
        stdout: Reader,
        verify: Callable[[int | None], Awaitable[None]] | None = None,
        *,
        stderr_apart: bool = False,
    ) -> None:
        """`stdout` a CredReader: the frame is read only where one process wrote it: the
        first answer's writer (the shell, before any step ran) from then on.
        `verify(writer)`: awaited after every answer, with that writer's pid (None on a
        plain stream); raises PhaseFailure("integrity") when the shell can no longer be
        trusted (the driver knows how to tell).
        `stderr_apart`: send `frame_apart` (the benches' comparison only: no driver does,
        as a step can close or move the fd 2 it trusts; see the module's docstring)."""
        self._w = stdin
        self._r = stdout
        # how a command is framed: one seam, so that the probe's tests can put back the
        # frame rtax used before issue 19 and watch result_integrity catch it
        self._frame: Callable[[Sequence[str], str], bytes] = frame_apart if stderr_apart else frame
        self._verify = verify
        self._lock = asyncio.Lock()
        self.broken = False
        self.writer: int | None = None  # the shell's pid, as its CredReader reports it

    async def run(self, argv: Sequence[str]) -> ActionResult:
        if self.broken:
            raise PhaseFailure(
                ErrorKind.SHELL_LOST, "an earlier action did not finish: the shell is stale"
            )
        async with self._lock:
            sentinel = new_sentinel()
            marker = b"\n" + sentinel.encode() + b" "
            out = OutputSink()
            try:
                self._w.write(self._frame(argv, sentinel))
                await self._w.drain()
                if isinstance(self._r, CredReader):
                    await read_frame(self._r, marker, out, self.writer)
                    if self.writer is None:  # the first answer: the shell itself wrote it
                        self.writer = self._r.matched_by
                    status = await _status_line(self._r, self.writer)
                else:
                    await read_frame(self._r, marker, out)
                    status = await _status_line(self._r, None)
                if self._verify is not None:
                    await self._verify(self.writer)
            except asyncio.IncompleteReadError as exc:
                self.broken = True
                raise PhaseFailure(ErrorKind.SHELL_LOST, "the environment's shell exited") from exc
            except (BrokenPipeError, ConnectionResetError) as exc:
                self.broken = True
                raise PhaseFailure(
                    ErrorKind.SHELL_LOST, f"the environment's shell is gone: {exc}"
                ) from exc
            except BaseException:
                self.broken = True  # cancelled (a timeout) mid-answer, or not to be trusted
                raise
            return ActionResult(rc=int(status), output=out.kept(), dropped=out.dropped)


async def shell_action(
    shell: FramedShell | None, argv: Sequence[str], timeout: float | None, what: str
) -> ActionResult:
    """A step on a driver's `shell` channel: one framed command on its persistent shell
    (FramedShell keeps the stale-channel rule) under `asyncio.timeout`, not `wait_for`:
    no task per action (3.11's wait_for makes one). NOT_CREATED, naming `what`, when
    the create never started the shell."""
    if shell is None:
        raise PhaseFailure(ErrorKind.NOT_CREATED, f"{what} was never started")
    async with own_timeout(timeout):  # under the action's own timeout: that one
        return await shell.run(argv)
