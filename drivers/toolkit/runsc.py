"""What rtax knows of gVisor's runsc that both of its ways of running it share: the
`gvisor` driver (runsc as rtax's own child) and docker or podman with
`runtime = "runsc"` (runsc under the engine).

The pid limit. Under gVisor every process of the sandbox is, on the host, a stub that the
sentry traces plus the sentry's and the gofer's threads: measured here (ptrace platform),
128 sleeping processes in a sandbox were 1,000-1,400 host tasks, an idle sandbox 36-49.
A host cgroup's `pids.max` of the sandbox's own limit is therefore hit long before the
sandbox has that many processes, and hitting it kills the sentry (the environment is
lost) instead of refusing a fork. So the limit is the sandbox's own `RLIMIT_NPROC`,
which the sentry enforces by refusing the fork past it, and the host cgroup holds a
backstop above it (`host_pids`).
"""

from __future__ import annotations

# The host cgroup's pid limit per pid the sandbox may have, plus the runtime's own.
HOST_PIDS_FACTOR = 16
HOST_PIDS_BASE = 512


def host_pids(pids: int | None) -> int | None:
    """The environment's host cgroup's pid limit: a backstop above the sandbox's own
    (RLIMIT_NPROC), for the sentry's stubs and threads and the gofer's."""
    return None if not pids else int(pids) * HOST_PIDS_FACTOR + HOST_PIDS_BASE


def limits_note(where: str) -> str:
    """How a pid limit is applied, for a driver's facts."""
    return (
        f"pids: the sandbox's RLIMIT_NPROC (gVisor refuses the fork), {where} holding "
        f"pids x {HOST_PIDS_FACTOR} + {HOST_PIDS_BASE} as a backstop"
    )
