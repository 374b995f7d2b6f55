"""`rtax serve` against a local flooder: stderr grows without bound.

`servegate.RefusalLog` bounds the lines a flood of refused requests writes (10 a minute,
then a count). A request that aiohttp's parser rejects before any route (a duplicate
`Host`, `Content-Length` with `Transfer-Encoding`, a control byte in the path) never
reaches the gate: aiohttp logs "Error handling request" with a whole traceback and the
offending bytes, for every such request. A process on the host's loopback (a workload
of a container on the host network, any local process) sends a few thousand of them
and fills whatever keeps `rtax serve`'s stderr (a terminal's scrollback, a log file).
The design says a flood cannot grow stderr without bound; this shows it can.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.hostile.test_hostile_serve import Served, served  # noqa: F401  (the module's fixture)

pytest.importorskip("textual_serve", reason="textual-serve is not installed (rtax[serve])")


def test_a_flood_of_malformed_requests_leaves_bounded_stderr(served: Served) -> None:  # noqa: F811
    before = served.log.read_text().count("\n")
    bad = f"GET /ws HTTP/1.1\r\nHost: {served.here}\r\nHost: evil.example\r\n\r\n".encode()
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
            s.sendall(bad)
            s.recv(4096)  # its 400
    time.sleep(0.5)
    lines = served.log.read_text().count("\n") - before
    # the refusal log's bound: 10 lines a minute, and one line of the rest's count
    assert lines <= 12, f"100 malformed requests wrote {lines} lines to stderr"
    assert served.tree() == []
