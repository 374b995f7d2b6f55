"""Podman's `conmon` monitors, found by scanning /proc: the podman driver ends those of
its containers at teardown, and the reaper those of a killed run's containers (some
outlive their container's removal). No SDK here: the reaper imports it."""

from __future__ import annotations

import os

__all__ = ["conmon_processes"]


def conmon_processes(ids: set[str] | None = None) -> list[int]:
    """PIDs of the live `conmon` processes (zombies have no command line), or only of
    those whose command line names one of `ids` (container ids or names) after
    `-c` (container id) or `-n` (container name)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != b"conmon":
            continue
        if ids is not None:
            named = {
                argv[i + 1].decode(errors="replace")
                for i in range(len(argv) - 1)
                if argv[i] in (b"-c", b"-n", b"--cid", b"--name")
            }
            if not named & ids:
                continue
        pids.append(int(entry))
    return pids
