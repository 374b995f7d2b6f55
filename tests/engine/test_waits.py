"""A timed-out phase names the daemon call it was waiting on (model/waits.py): the engine's
`timed` and a driver's `waiting_on`, without a driver."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time

from rtax_tui.engine.lifecycle import timed
from rtax_tui.model.waits import Waits, covers, own_timeout, waiting_on


async def _slow_call() -> None:
    with waiting_on("libvirtd (starting the domain)"):
        await asyncio.to_thread(lambda: __import__("time").sleep(0.5))


def test_a_timeout_names_the_call_it_cut_and_how_long_it_ran() -> None:
    dur, _, err = asyncio.run(timed("create", _slow_call, 0.2))
    assert err is not None and err.kind == "create_timeout"
    assert err.message.startswith("create did not finish within 0.2 s: ")
    # how long it ran, measured: the timeout's 0.2 s or more (a loaded machine's timer
    # fired late once: "0.3 s")
    m = re.search(
        r"libvirtd \(starting the domain\) had taken (\d+\.\d+) s when it was cut", err.message
    )
    assert m is not None and 0.2 <= float(m.group(1)) < 5, err.message


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


def test_a_call_keeps_its_own_timeout_unless_the_phases_ends_it_no_later() -> None:
    """`own_timeout` leaves a call's timer out only where the engine's phase timeout
    cancels that very task, no later: not outside a phase, not with a shorter timeout of
    its own, and not in a task the phase started (the phase's timeout would not end it)."""
    seen: dict[str, bool] = {}

    async def phase() -> None:
        seen["same task, same timeout"] = covers(5.0)
        seen["same task, longer"] = covers(9.0)
        seen["same task, shorter"] = covers(1.0)
        seen["no timeout of its own"] = covers(None)
        seen["another task"] = await asyncio.ensure_future(_covers_in_task())

    async def _covers_in_task() -> bool:
        return covers(5.0)

    async def main() -> None:
        seen["outside a phase"] = covers(5.0)
        _, _, err = await timed("action", phase, 5.0)
        assert err is None
        seen["after the phase"] = covers(5.0)

    asyncio.run(main())
    assert seen == {
        "outside a phase": False,
        "same task, same timeout": True,
        "same task, longer": True,
        "same task, shorter": False,
        "no timeout of its own": False,
        "another task": False,
        "after the phase": False,
    }


def test_a_task_the_phase_started_still_times_out_on_its_own() -> None:
    """A shielded task started in the phase (a spawn finishing in the background) keeps
    its own, shorter timeout: it ends at 0.1 s, not at the phase's 5 s."""

    async def inner() -> float:
        t = time.monotonic()
        try:
            async with own_timeout(0.1):
                await asyncio.sleep(3)
        except TimeoutError:
            return time.monotonic() - t
        return -1.0

    async def phase() -> float:
        return await asyncio.shield(asyncio.ensure_future(inner()))

    _, took, err = asyncio.run(timed("action", phase, 5.0))
    assert err is None and 0.05 < took < 1.0


def test_an_action_under_the_phase_timeout_is_still_cut_and_killed() -> None:
    """The exec channel's run with no timer of its own under `timed`: the phase's timeout
    cuts it all the same, and the step's process group is killed (no `sleep` left)."""
    from rtax_tui.hosts.local import LocalHost

    host = LocalHost()
    marker = f"sleep 30.{os.getpid()}{time.monotonic_ns() % 100000}"  # its own argv

    async def act() -> object:
        return await host.run(marker.split(), timeout=0.3, merge_stderr=True, capped=True)

    dur, _, err = asyncio.run(timed("action", act, 0.3))
    assert err is not None and err.kind == "action_timeout", err
    assert 0.25e9 < dur < 5e9
    time.sleep(0.1)
    left = subprocess.run(["pgrep", "-fx", marker], capture_output=True, text=True).stdout
    assert left == "", left
