"""A TCP relay that holds every chunk for a fixed delay each way (a netem stand-in).

Used by the SSH lab when the kernel has no `sch_netem` (CONFIG_NET_SCH_NETEM off):
`python -m tests.delayrelay LISTEN_ADDR LISTEN_PORT TO_ADDR TO_PORT DELAY_MS` adds
DELAY_MS / 2 to each direction, so a round trip pays DELAY_MS more, like
`tc qdisc add dev VETH root netem delay DELAY_MS` on one end. Order is kept.
"""

from __future__ import annotations

import asyncio
import sys
import time


async def _pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay: float) -> None:
    q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await q.get()
            if not chunk:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            w.write(chunk)
            await w.drain()
        w.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            chunk = await r.read(65536)
            q.put_nowait((time.monotonic() + delay, chunk))
            if not chunk:
                break
    except OSError:
        q.put_nowait((0.0, b""))
    try:
        await sender
    except OSError:
        pass


async def main(listen: str, lport: int, to: str, tport: int, delay_ms: float) -> None:
    half = delay_ms / 2000.0

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(to, tport)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pump(cr, uw, half), _pump(ur, cw, half), return_exceptions=True)

    server = await asyncio.start_server(handle, listen, lport)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], int(a[1]), a[2], int(a[3]), float(a[4])))
