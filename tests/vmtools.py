"""Helpers of the VM tests: the guest (built once), leftovers, runs through the CLI."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from rtax_tui.drivers.vmguest import DIR_PREFIX, safe


def ensure_guest(root: bool = False):
    """Build (or find) the guest; the root disk only when asked (it needs the rootfs)."""
    from rtax_tui.core.vmimage import build_guest, guest_files

    g = guest_files(need_root=root)
    return g if g is not None else build_guest(root=root)


def qemu_pids(label: str) -> list[int]:
    """QEMU processes whose `-name` belongs to run `label`."""
    prefix = f"rtax-{safe(label)}-"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        if argv and b"qemu-system" in argv[0] and b"-name" in argv:
            name = argv[argv.index(b"-name") + 1].decode(errors="replace")
            name = name.split(",")[0].removeprefix("guest=")  # libvirt: guest=NAME,...
            if name.startswith(prefix):
                found.append(int(entry))
    return found


def trial_dirs(label: str) -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), f"{DIR_PREFIX}rtax-{safe(label)}-*"))


def nothing_left(label: str, wait_s: float = 3.0) -> tuple[list[int], list[str]]:
    """(QEMU pids, trial dirs) of `label` still there after up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        left = (qemu_pids(label), trial_dirs(label))
        if left == ([], []) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def run_cli(profile_text: str, tmp_path, timeout: float = 600) -> tuple[int, list[dict], str]:
    """`rtax run PROFILE -o REC` in a child process; (rc, events, stderr)."""
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text)
    rec = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = [json.loads(line) for line in rec.read_text().splitlines()] if rec.exists() else []
    return res.returncode, events, res.stderr + res.stdout
