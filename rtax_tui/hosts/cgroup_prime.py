"""Start the kernel's wait before a cgroup move, so that it overlaps other work.

Moving a process into a cgroup (a write to `cgroup.procs`) takes the kernel's one
lock for moves, `cgroup_threadgroup_rwsem`. Unless the hierarchy is mounted with
`favordynmods`, taking it when no move happened in the last RCU grace period first
waits for a whole grace period (`rcu_sync_enter`): about 5 ms on an idle 2-core
machine, 10 ms or more under load, while a move inside that window takes 0.02 ms
(bench/README.md, "stage create+ready, part by part"). The sandbox's own move (its
spawner joining the new cgroup before bubblewrap runs) is the first one of a create,
so the whole wait falls on it.

`prime()` moves this process into the cgroup it is already in: a no-op move that
starts the same wait. Called at the start of a create (in a thread, not awaited), the
wait runs while the workspace and the cgroup are made and the spawner starts, and the
sandbox's move only waits for what is left of it. Nothing is moved anywhere; the lock is
taken once more than before, as by any move on the machine.
"""

from __future__ import annotations

import os

from rtax_tui.hosts.cgroups import DEFAULT_ROOT, V1_CONTROLLERS

# root -> the `cgroup.procs` of this process's own cgroup (None: none found)
_OWN: dict[str, str | None] = {}


def own_procs_file(root: str = DEFAULT_ROOT, self_cgroup: str = "/proc/self/cgroup") -> str | None:
    """The `cgroup.procs` of the cgroup this process is in, in one hierarchy under `root`
    (v2's, or the first of V1_CONTROLLERS mounted there); None where there is none."""
    try:
        with open(self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        _id, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            paths[c] = path
    # pids first: its move is the cheapest of the v1 controllers'
    order = sorted(V1_CONTROLLERS, key=lambda c: c != "pids")
    candidates = [(c, os.path.join(root, c)) for c in order if c in paths]
    if "" in paths:
        candidates.append(("", root))
    for c, base in candidates:
        procs = os.path.join(base + paths[c].rstrip("/"), "cgroup.procs")
        if os.path.exists(procs):
            return procs
    return None


def prime(root: str = DEFAULT_ROOT) -> bool:
    """Move this process into its own cgroup (blocks for the wait described above: run it
    in a thread). False where there is no such file or the kernel refused; nothing to
    undo either way."""
    if root not in _OWN:
        _OWN[root] = own_procs_file(root)
    procs = _OWN[root]
    if procs is None:
        return False
    try:
        fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True
