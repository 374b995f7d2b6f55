"""Why a trial failed, as typed data: the engine decides by `kind`, never by message text.

A `TrialError` is what `trial_end.error` records (`{"phase", "kind", "message"}`).
Every kind is an `ErrorKind` member, whose value is the string `rtax/1` has always
recorded; a driver raises `PhaseFailure` with one of them (the set is closed: an unknown
kind is refused where it is raised). `TrialError.kind` is a string because a phase's
timeout (`create_timeout`, ...) is made from the phase's name; an `ErrorKind` compares
equal to its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict


class ErrorKind(StrEnum):
    """Every kind a phase can fail with: the closed set `trial_end.error.kind` records
    (besides `<phase>_timeout`, made by `timeout_kind`). A driver raises
    `PhaseFailure(ErrorKind.X, message)`; a plugin picks from these too (`ERROR` when none
    fits). The values are the strings `rtax/1` has always recorded."""

    # the engine's own
    ERROR = "error"  # an unexpected exception in a phase
    INTERRUPTED = "interrupted"  # the run was stopped
    BARRIER_DEADLINE = "barrier_deadline"  # a capacity batch's deadline passed first
    SUBSTRATE_LOST = "substrate_lost"  # the substrate went away (SubstrateLost)
    HOST_LOST = "host_lost"  # the connection to a remote host dropped (HostLost)
    OOM = "oom"  # killed by the OOM killer under a capacity batch's memory budget
    TIMEOUT = "timeout"  # a pooled environment's create + ready did not finish in time
    POOL_CLOSED = "pool_closed"  # a trial waited on a pool the run was closing
    RESET_FAILED = "reset_failed"  # a pool's in-place reset failed (the env is recreated)
    RESET_UNSUPPORTED = "reset_unsupported"  # a reset the driver does not offer
    NOT_SUPPORTED = "not_supported"  # an operation this host or driver cannot do
    PROBE_FAILED = "probe_failed"  # ready's probe command `true` returned non-zero
    # the environment and its channel
    NOT_CREATED = "not_created"  # a phase found its environment was never made
    ENV_LOST = "env_lost"  # the environment's init is gone: its later actions cannot run
    SHELL_LOST = "shell_lost"  # the shell channel's shell ended or stopped answering
    INTEGRITY = "integrity"  # the channel can no longer be trusted (a step tampered with it)
    NO_EXIT_CODE = "no_exit_code"  # the substrate returned no exit status for a step
    TEARDOWN_INCOMPLETE = "teardown_incomplete"  # something could not be removed
    CLEANUP_FAILED = "cleanup_failed"  # a host-side removal command failed
    IMAGE_MISSING = "image_missing"  # the workload's image (or the VM guest) is not built
    # per substrate
    SANDBOX_FAILED = "sandbox_failed"  # stage: bubblewrap or its init did not start
    CGROUP_FAILED = "cgroup_failed"  # a cgroup could not be made, joined or limited
    DOCKER_ERROR = "docker_error"  # the engine's API refused a call (docker, podman)
    LIBVIRT_ERROR = "libvirt_error"  # libvirtd refused a call
    VM_ERROR = "vm_error"  # QEMU could not be started or driven
    VM_DIED = "vm_died"  # the VM's QEMU exited
    QMP_ERROR = "qmp_error"  # QEMU's monitor refused a command
    NO_SNAPSHOT = "no_snapshot"  # a restore was asked for and no snapshot exists
    RESTORE_FAILED = "restore_failed"  # a VM could not be restored from its snapshot
    AGENT_LOST = "agent_lost"  # the VM guest's agent channel closed
    AGENT_ERROR = "agent_error"  # the VM guest's agent answered out of protocol
    SERVER_EXITED = "server_exited"  # swerex: its server exited before listening
    SESSION_SETUP = "session_setup"  # swerex: the session's cd/export failed


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
        """The `trial_end.error` object; `kind` as a plain string for the encoder; the
        message cut to ERROR_CHARS (an environment can make it as long as it likes)."""
        return {"phase": self.phase, "kind": str(self.kind), "message": cap(self.message)}


# The longest error message a recording keeps (its start and end): a message can carry
# what an environment wrote (a runtime's stderr, a step's output).
ERROR_CHARS = 2000


def cap(message: str, limit: int = ERROR_CHARS) -> str:
    """`message` cut to `limit` characters, its start and its end kept."""
    if len(message) <= limit:
        return message
    half = (limit - 20) // 2
    return f"{message[:half]} [... cut ...] {message[-half:]}"


def interrupted(phase: str, barrier_expired: bool) -> TrialError:
    """A cancelled phase: the batch's deadline when its barrier expired, else a stop."""
    if barrier_expired:
        return TrialError(phase, ErrorKind.BARRIER_DEADLINE, "the batch's deadline passed first")
    return TrialError(phase, ErrorKind.INTERRUPTED, "the run was stopped")
