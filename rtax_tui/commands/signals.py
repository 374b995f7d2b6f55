"""The signals that stop rtax (SIGINT, SIGTERM, SIGHUP), handled from its first moment.

`install` runs first in `main`: until a command installs its own handlers (a run's event
loop stops its session on each), any of them raises KeyboardInterrupt, which every command
turns into its interrupted ending (status 130; a run removes a recording that has no
header yet, keeps one that has). Without it, a SIGTERM in a run's first half second
killed rtax by the default action, between making the recording and writing its header.
`restore` puts them back after an event loop's own handlers are removed (asyncio then
leaves the default action).
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install() -> None:
    """Each stop signal raises KeyboardInterrupt (one that is ignored stays ignored:
    `nohup rtax run ...` keeps running when the terminal goes)."""
    for sig in STOP_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue
            signal.signal(sig, _interrupt)
        except ValueError:  # not the main thread (rtax's main called from a test's thread)
            return


restore = install
