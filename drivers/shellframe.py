"""The `shell` channel: one persistent shell, commands framed with a sentinel.

Each command is sent as `{ CMD
} </dev/null 2>&1; printf '\\n%s %d\\n' SENTINEL "$?"`. The output is every
byte before the newline that precedes the sentinel, so output that does not
end in a newline is returned exactly. The command runs in the shell itself (no
subshell), so builtins cost no fork and `cd` persists, as in an agent's shell.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Sequence

from rtax_tui.core.model import ActionResult, PhaseFailure


def frame(argv: Sequence[str], sentinel: str) -> bytes:
    cmd = shlex.join(argv)
    return f"{{ {cmd}\n}} </dev/null 2>&1; printf '\\n%s %d\\n' {sentinel} \"$?\"\n".encode()


# The remote side's own clock, with no process started: the kernel's monotonic "now"
# from the third line of /proc/timer_list (root only; ~25 us a read). Empty if unreadable.
_CLOCK = "{ read _r _r; read _r _r; read _r _r %s _r; } 2>/dev/null </proc/timer_list"


def frame_timed(argv: Sequence[str], sentinel: str) -> bytes:
    """`frame`, plus the command's duration on the remote side's monotonic clock."""
    cmd = shlex.join(argv)
    t0 = _CLOCK % "__rtax_t0"
    t1 = _CLOCK % "__rtax_t1"
    return (
        f"__rtax_t0=; __rtax_t1=; {t0}; {{ {cmd}\n}} </dev/null 2>&1; __rtax_rc=$?; {t1}; "
        f"printf '\\n%s %d %s\\n' {sentinel} \"$__rtax_rc\" "
        f'"$(( ${{__rtax_t1:-0}} - ${{__rtax_t0:-0}} ))"\n'
    ).encode()


class FramedShell:
    """One persistent shell. The stale-channel rule lives here, for every driver: once
    a command did not come back whole (timed out, cancelled, the shell died), the stream
    is out of step with the frames, so the shell is never used again (`shell_lost`)."""

    def __init__(
        self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, timed: bool = False
    ) -> None:
        """`timed`: also take the remote side's own duration of each command
        (`ActionResult.remote_ns`, None where /proc/timer_list is unreadable)."""
        self._w = stdin
        self._r = stdout
        self._frame = frame_timed if timed else frame
        self.sentinel = "__RTAX_" + os.urandom(8).hex() + "__"
        self._marker = b"\n" + self.sentinel.encode() + b" "
        self._lock = asyncio.Lock()
        self.broken = False

    async def run(self, argv: Sequence[str]) -> ActionResult:
        if self.broken:
            raise PhaseFailure("shell_lost", "an earlier action did not finish: the shell is stale")
        async with self._lock:
            try:
                self._w.write(self._frame(argv, self.sentinel))
                await self._w.drain()
                out = await self._r.readuntil(self._marker)
                tail = await self._r.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                self.broken = True
                raise PhaseFailure("shell_lost", "the environment's shell exited") from exc
            except (BrokenPipeError, ConnectionResetError) as exc:
                self.broken = True
                raise PhaseFailure("shell_lost", f"the environment's shell is gone: {exc}") from exc
            except BaseException:
                self.broken = True  # cancelled (a timeout) mid-answer
                raise
            words = tail.split()
            remote = int(words[1]) if len(words) > 1 and int(words[1]) > 0 else None
            return ActionResult(
                rc=int(words[0]), output=out[: -len(self._marker)], remote_ns=remote
            )
