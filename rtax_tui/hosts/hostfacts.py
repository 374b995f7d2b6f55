"""Facts about the machine a cell runs on, for the recording's header."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from rtax_tui.hosts.subreaper import is_subreaper


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def local_facts() -> dict[str, Any]:
    cpu_model = None
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kib = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
            break
    return {
        "kernel": platform.release(),
        "os": _os_name(),
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_mib": mem_kib // 1024 if mem_kib else None,
        "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "python": sys.version.split()[0],
        "cgroup": _cgroup_version(),
        # whether the engine reaps orphans itself (hosts/subreaper.py): teardowns that
        # wait for orphans to be reaped differ by it
        "subreaper": is_subreaper(),
    }


def _os_name() -> str | None:
    for line in (_read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return None


def _cgroup_version() -> str | None:
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "v2"
    if os.path.isdir("/sys/fs/cgroup/memory"):
        return "v1"
    return None
