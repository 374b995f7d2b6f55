"""The reaper process on its own: it reads registrations in batches (it sleeps between
reads so that the engine's writes do not wake it each time) and still ends, at the
pipe's end, exactly what is registered and not dropped, even after more lines than the
pipe holds."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from rtax_tui.hosts.reaper import Reaper


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_registered_things_end_and_dropped_ones_stay():
    r = Reaper()
    r.start()
    kept, ended = _sleeper(), _sleeper()
    d = tempfile.mkdtemp(prefix="rtax-reaper-test-")
    try:
        r.add_pgid(ended.pid)
        r.add_pgid(kept.pid)
        r.add_path(d)
        # far more than a pipe's 64 KiB while the reaper sleeps between reads: the
        # writer blocks at worst for one batch, nothing is lost
        for i in range(20000):
            r.add_pgid(4_000_000 + i)
            r.drop_pgid(4_000_000 + i)
        r.drop_pgid(kept.pid)
        t = time.monotonic()
        r.close()  # the engine's end: EOF on the pipe
        assert time.monotonic() - t < 5
        assert ended.wait(5) == -9
        assert kept.poll() is None
        assert not os.path.exists(d)
    finally:
        for p in (kept, ended):
            p.kill()
            p.wait()
