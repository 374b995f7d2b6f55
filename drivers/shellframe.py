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


class FramedShell:
    def __init__(self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader) -> None:
        self._w = stdin
        self._r = stdout
        self.sentinel = "__RTAX_" + os.urandom(8).hex() + "__"
        self._marker = b"\n" + self.sentinel.encode() + b" "
        self._lock = asyncio.Lock()

    async def run(self, argv: Sequence[str]) -> ActionResult:
        async with self._lock:
            self._w.write(frame(argv, self.sentinel))
            try:
                await self._w.drain()
                out = await self._r.readuntil(self._marker)
                tail = await self._r.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                raise PhaseFailure("shell_lost", "the environment's shell exited") from exc
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise PhaseFailure("shell_lost", f"the environment's shell is gone: {exc}") from exc
            return ActionResult(rc=int(tail.strip()), output=out[: -len(self._marker)])
