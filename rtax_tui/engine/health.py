"""Substrate and host health during a run: lost drivers, lost hosts, rechecks, backoff.

When a trial meets `substrate_lost`, its (host, driver) is marked lost: later trials
of it re-run the driver's check (at most every LOST_RECHECK_S, shared by the trials
waiting for it) and fail at once while it fails, instead of each waiting out its
own timeouts. When a remote host's connection drops, the host is marked lost:
its trials wait for a reconnect, attempted with an exponential backoff.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtax_tui.model.errors import ErrorKind, TrialError

if TYPE_CHECKING:  # the engine sits above the drivers and the hosts (pyproject's layers)
    from rtax_tui.drivers.base import Driver
    from rtax_tui.hosts.base import Host

# After a trial of a (host, driver) fails with `substrate_lost`, later trials of it
# re-run the driver's check at most this often, and fail at once while it fails.
LOST_RECHECK_S = 5.0
LOST_CHECK_TIMEOUT_S = 30.0

# A lost remote host is reconnected with exponential backoff between these bounds.
HOST_RETRY_MIN_S = 0.5
HOST_RETRY_MAX_S = 10.0

DriverKey = tuple[str, str]  # (host, driver)


@dataclass
class _Lost:
    """A (host, driver) whose substrate went away during this run."""

    reason: str
    checked: float | None = None  # time.monotonic() of the last check, None: never
    checking: asyncio.Future[str | None] | None = None


@dataclass
class _HostLost:
    """A remote host whose connection dropped during this run."""

    reason: str
    delay: float = HOST_RETRY_MIN_S
    next_try: float = 0.0  # time.monotonic() of the next reconnect attempt
    trying: asyncio.Future[str | None] | None = None
    losses: int = 1


class SubstrateHealth:
    """The (host, driver) pairs lost during this run, and their shared rechecks."""

    def __init__(self, drivers: dict[DriverKey, Driver]) -> None:
        self._drivers = drivers
        self._lost: dict[DriverKey, _Lost] = {}

    def is_lost(self, key: DriverKey) -> bool:
        return key in self._lost

    def mark_lost(self, key: DriverKey, message: str) -> None:
        if key not in self._lost:
            self._lost[key] = _Lost(reason=message)

    async def still_lost(self, key: DriverKey) -> str | None:
        """None when `key` is not (or no longer) lost; else why its trials fail fast.

        The driver's check runs at most every LOST_RECHECK_S, shared by the trials
        that wait for it; once it passes, trials of the driver run normally again.
        """
        st = self._lost.get(key)
        if st is None:
            return None
        if st.checking is None:
            if st.checked is not None and time.monotonic() - st.checked < LOST_RECHECK_S:
                return self._message(key, st)
            st.checking = asyncio.ensure_future(self._recheck(key, st))
        return await asyncio.shield(st.checking)

    async def _recheck(self, key: DriverKey, st: _Lost) -> str | None:
        try:
            try:
                problems = await asyncio.wait_for(self._drivers[key].check(), LOST_CHECK_TIMEOUT_S)
            except Exception as exc:  # a check that cannot even run: still lost
                problems = None
                st.reason = f"its check failed: {type(exc).__name__}: {exc}"
            if problems == []:
                self._lost.pop(key, None)
                return None
            if problems:
                st.reason = "; ".join(p.reason for p in problems)
            st.checked = time.monotonic()
            return self._message(key, st)
        finally:
            st.checking = None

    @staticmethod
    def _message(key: DriverKey, st: _Lost) -> str:
        return (
            f"{key[0]}/{key[1]} was lost earlier in this run and its check still fails "
            f"({st.reason}); the trial was not attempted"
        )


class HostHealth:
    """The remote hosts lost during this run, and their reconnects with backoff."""

    def __init__(self, hosts: dict[str, Host]) -> None:
        self._hosts = hosts
        self._lost: dict[str, _HostLost] = {}

    def is_lost(self, name: str) -> bool:
        return name in self._lost

    @property
    def any_lost(self) -> bool:
        return bool(self._lost)

    def dropped(self, name: str, error: TrialError) -> bool:
        """Whether a failed trial's host is a remote one that dropped (it is marked lost)."""
        host = self._hosts.get(name)
        if name == "local" or host is None:
            return False
        if error.kind != ErrorKind.HOST_LOST and not host.lost:
            return False
        if error.reconnect_failed:  # refused before it began: the host is marked already
            return True
        if name not in self._lost:
            self._lost[name] = _HostLost(
                reason=error.message, next_try=time.monotonic() + HOST_RETRY_MIN_S
            )
        return True

    async def back(self, name: str) -> str | None:
        """None when the host is connected again; else why this trial fails.

        The trial waits for the host's next reconnect attempt; attempts are shared by
        the trials waiting for them and spaced by an exponential backoff
        (HOST_RETRY_MIN_S doubling up to HOST_RETRY_MAX_S). The scheduler lets one
        trial of a lost host in at a time, so each failed attempt fails one trial
        and the rest stay planned until the host is back or the attempts run on.
        """
        st = self._lost.get(name)
        if st is None:
            return None
        if st.trying is None:
            st.trying = asyncio.ensure_future(self._reconnect(name, st))
        return await asyncio.shield(st.trying)

    async def _reconnect(self, name: str, st: _HostLost) -> str | None:
        try:
            wait = st.next_try - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await asyncio.wait_for(self._hosts[name].connect(), LOST_CHECK_TIMEOUT_S)
            except Exception as exc:
                st.reason = str(exc) or type(exc).__name__
                st.next_try = time.monotonic() + st.delay
                st.delay = min(st.delay * 2, HOST_RETRY_MAX_S)
                return self._message(name, st)
            self._lost.pop(name, None)
            return None
        finally:
            st.trying = None

    @staticmethod
    def _message(name: str, st: _HostLost) -> str:
        return (
            f"host {name} is lost ({st.reason}); the reconnect before this trial "
            "failed (retried with backoff); the trial was not attempted"
        )
