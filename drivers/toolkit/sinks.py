"""Bounded host-side sinks: what a process inside an environment can make rtax keep.

A stream that code inside an environment can write to (the gVisor sandbox init's stderr,
which `/proc/1/fd/2` reaches; a FUSE client's error output) is never a host file: it is
a pipe that rtax drains, keeping its first and last KEEP bytes for error messages and
counting the rest. What the host keeps of it is 2 x KEEP bytes whatever is written.
"""

from __future__ import annotations

import asyncio

KEEP = 1024  # bytes kept from each end of a drained stream


class HeadTail:
    """The first and last `keep` bytes of a stream, and how many bytes it carried."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.head = b""
        self.tail = b""
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-self.keep :]

    def text(self) -> str:
        """Both ends as text, with what was dropped between them said."""
        dropped = self.total - len(self.head) - len(self.tail)
        mid = f" [... {dropped} bytes dropped ...] " if dropped > 0 else ""
        return (self.head + mid.encode() + self.tail).decode(errors="replace").strip()


async def drain(reader: asyncio.StreamReader | None, into: HeadTail) -> None:
    """Read `reader` to its end into `into` (nothing else keeps what it carried)."""
    if reader is None:
        return
    while True:
        data = await reader.read(1 << 16)
        if not data:
            return
        into.feed(data)
