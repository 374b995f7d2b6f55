"""A timed-out phase names the daemon call it was waiting on (model/waits.py): the engine's
`timed` and a driver's `waiting_on`, without a driver."""

from __future__ import annotations

import asyncio
import time

from rtax_tui.engine.lifecycle import timed
from rtax_tui.model.waits import Waits, waiting_on


async def _slow_call() -> None:
    with waiting_on("libvirtd (starting the domain)"):
        await asyncio.to_thread(lambda: __import__("time").sleep(0.5))


def test_a_timeout_names_the_call_it_cut_and_how_long_it_ran() -> None:
    dur, _, err = asyncio.run(timed("create", _slow_call, 0.2))
    assert err is not None and err.kind == "create_timeout"
    assert err.message.startswith("create did not finish within 0.2 s: ")
    assert "libvirtd (starting the domain) had taken 0.2 s when it was cut" in err.message


def test_a_shielded_call_still_running_is_named_as_still_waiting() -> None:
    async def create() -> None:  # as the drivers do: a create cut short keeps its call
        task = asyncio.ensure_future(_slow_call())
        try:
            await asyncio.shield(task)
        finally:
            await asyncio.sleep(0)

    async def main() -> str:
        _, _, err = await timed("create", create, 0.2)
        assert err is not None
        await asyncio.sleep(0.5)  # the shielded call ends on its own
        return err.message

    msg = asyncio.run(main())
    assert "still waiting on libvirtd (starting the domain) after 0.2 s" in msg


def test_a_timeout_outside_any_call_says_only_the_timeout() -> None:
    _, _, err = asyncio.run(timed("ready", lambda: asyncio.sleep(1), 0.05))
    assert err is not None and err.message == "ready did not finish within 0.05 s"


def test_waiting_on_outside_a_phase_records_nothing_and_calls_pass_through() -> None:
    with waiting_on("dockerd (ping)"):
        pass
    w = Waits()
    assert w.describe() is None
    w.open.append(("a", 0))
    w.open.append(("b", 5 * 10**9))
    assert w.describe(now_ns=7 * 10**9) == "still waiting on a after 7.0 s"


# -- rtax doctor: a slow daemon is named ---------------------------------------------------


class _Daemon:
    """A driver double whose daemon answers after `secs` (or never: None)."""

    def __init__(self, secs: float | None) -> None:
        self.secs = secs

    def daemon_call(self):  # type: ignore[no-untyped-def]
        async def call() -> None:
            # a loop's timer may fire up to its resolution early (uvloop's: 1 ms): sleep
            # again until the time has really passed, as a daemon's answer would take it
            end = time.monotonic() + (3600 if self.secs is None else self.secs)
            while (left := end - time.monotonic()) > 0:
                await asyncio.sleep(left)

        return "libvirtd", "domain capabilities", call


def test_doctor_times_one_daemon_call_and_names_a_slow_one() -> None:
    from rtax_tui.commands.doctor import SLOW_DAEMON_S, slow_note, time_daemon

    fast = asyncio.run(time_daemon(_Daemon(0.01)))
    assert fast is not None and fast[0] == "libvirtd (domain capabilities)"
    assert fast[1] is not None and 0.01 <= fast[1] < SLOW_DAEMON_S
    assert slow_note(fast) is None
    slow = asyncio.run(time_daemon(_Daemon(SLOW_DAEMON_S + 0.1)))
    note = slow_note(slow)
    assert note is not None and note.startswith("libvirtd (domain capabilities) took 1.1 s")
    gone = asyncio.run(time_daemon(_Daemon(None), timeout=0.1))
    assert gone == ("libvirtd (domain capabilities)", None)
    assert "did not answer" in (slow_note(gone) or "")


def test_a_driver_without_a_daemon_is_not_timed() -> None:
    from rtax_tui.drivers.local import LocalDriver

    from rtax_tui.commands.doctor import time_daemon
    from rtax_tui.hosts import LocalHost

    assert asyncio.run(time_daemon(LocalDriver(LocalHost(), {}))) is None
