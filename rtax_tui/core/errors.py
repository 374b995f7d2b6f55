"""Why a trial failed, as typed data: the engine decides by `kind`, never by message text.

A `TrialError` is what `trial_end.error` records (`{"phase", "kind", "message"}`).
The engine's own kinds are the `ErrorKind` members, whose values are the strings
`rtax/1` has always recorded; a driver may raise `PhaseFailure` with a kind of its
own, so `TrialError.kind` is any string and an `ErrorKind` compares equal to its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict


class ErrorKind(StrEnum):
    """The kinds the engine itself gives; `<phase>_timeout` is made by `timeout_kind`."""

    ERROR = "error"  # an unexpected exception in a phase
    INTERRUPTED = "interrupted"  # the run was stopped
    BARRIER_DEADLINE = "barrier_deadline"  # a capacity batch's deadline passed first
    SUBSTRATE_LOST = "substrate_lost"  # the substrate went away (SubstrateLost)
    HOST_LOST = "host_lost"  # the connection to a remote host dropped (HostLost)
    OOM = "oom"  # killed by the OOM killer under a capacity batch's memory budget


def timeout_kind(phase: str) -> str:
    """`create_timeout`, `ready_timeout`, ...: one kind per phase, as recorded since rtax/1."""
    return f"{phase}_timeout"


class ErrorObject(TypedDict):
    """`trial_end.error` as recorded."""

    phase: str
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class TrialError:
    """The first thing that went wrong in a trial.

    `reconnect_failed` is engine-only (never recorded): the trial was refused before
    it began because its lost host's reconnect failed, so the host is already
    marked lost and the error needs no rewording.
    """

    phase: str
    kind: str
    message: str
    reconnect_failed: bool = False

    def to_event(self) -> ErrorObject:
        """The `trial_end.error` object; `kind` as a plain string for the encoder."""
        return {"phase": self.phase, "kind": str(self.kind), "message": self.message}


def interrupted(phase: str, barrier_expired: bool) -> TrialError:
    """A cancelled phase: the batch's deadline when its barrier expired, else a stop."""
    if barrier_expired:
        return TrialError(phase, ErrorKind.BARRIER_DEADLINE, "the batch's deadline passed first")
    return TrialError(phase, ErrorKind.INTERRUPTED, "the run was stopped")
