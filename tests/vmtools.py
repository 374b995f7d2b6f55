"""Helpers of the VM tests: the guest (built once), leftovers, runs through the CLI, and
what both VM drivers are tested for alike (T0's lifecycle, T1 on the root disk)."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from rtax_tui.drivers import get_driver

from rtax_tui.hosts import names
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload


def vm_spec(
    driver: str, label: str, channel: str, workload: Workload | None = None, src: str | None = None
) -> EnvSpec:
    """One trial's spec for a VM driver test (T0's `true` unless a workload is given)."""
    w = workload or Workload("t0", (Step(("true",)),))
    return EnvSpec(Cell("local", driver, w.name, channel), w, Limits(), src, label=label)


def vm_driver(name: str, **opts):
    """The driver on the local host, under TCG unless the test says otherwise."""
    return get_driver(name, LocalHost(), {"accel": "tcg", **opts})


class SubPhases:
    """A sub-phase timer for tests: records the names the driver marks, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @asynccontextmanager
    async def __call__(self, name: str) -> AsyncIterator[None]:
        self.names.append(name)
        yield


def ensure_guest(root: bool = False):
    """Build (or find) the guest; the root disk only when asked (it needs the rootfs)."""
    from rtax_tui.drivers.toolkit.vmimage import build_guest, guest_files

    g = guest_files(need_root=root)
    return g if g is not None else build_guest(root=root)


def qemu_pids(label: str) -> list[int]:
    """QEMU processes whose `-name` belongs to run `label`."""
    prefix = names.vm_prefix(label)
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
    return glob.glob(os.path.join(tempfile.gettempdir(), names.vm_dirs_prefix(label) + "*"))


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


@contextmanager
def cli_started(
    profile_text: str, tmp_path, **popen: Any
) -> Iterator[tuple[subprocess.Popen, Path]]:
    """`rtax run PROFILE -o REC` started in a child process, for a test to act on while it
    runs; (the process, REC). The child is killed on the way out if it still runs."""
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text)
    rec = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec)], **popen
    )
    try:
        yield proc, rec
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


BOTH_VMS_PROFILE = """
[run]
trials = 2
warmup = 0
concurrency = {concurrency}
drivers = ["libvirt", "microvm"]
workloads = ["t0"]
channels = ["shell"]
[timeouts]
ready = {ready}
teardown = 60
[drivers_options.libvirt]
accel = "tcg"
[drivers_options.microvm]
accel = "tcg"
"""


async def check_t0_lifecycle(
    d,
    env_spec: EnvSpec,
    *,
    create_s: float,
    sub_names: list[str],
    created: Callable[[Any], None],
    in_guest: Callable[[Any], Awaitable[None]],
) -> None:
    """T0's lifecycle on a VM driver `d`: its check passes; create (within `create_s`,
    then `created(env)`'s checks) and ready mark `sub_names`; the workspace is a disk of
    workspace_mib (2048 by default) with its own file system; an action's output (both
    streams), exit status and guest-side time come back; `in_guest(env)`'s checks of the
    driver's own guest; the shell channel keeps its cwd (one shell), exec starts afresh in
    /workspace; after teardown nothing of the spec's label is left."""
    assert await d.check() == []
    subs = SubPhases()
    env = d.environment(env_spec, subs)
    channel = env_spec.cell.channel
    try:
        await asyncio.wait_for(env.create(), create_s)
        created(env)
        await asyncio.wait_for(env.ready(), 120)
        assert subs.names == sub_names
        r = await env.action(Step(("sh", "-c", "df -m /workspace | tail -n 1")), 30)
        assert r.output.split()[-1] == b"/workspace", r.output
        assert 1800 < int(r.output.split()[1]) <= 2048, r.output
        r = await env.action(Step(("sh", "-c", "echo out; echo err >&2; exit 3")), 30)
        assert (r.rc, r.output) == (3, b"out\nerr\n")
        assert r.remote_ns is not None and r.remote_ns > 0
        await in_guest(env)
        await env.action(Step(("cd", "/tmp")) if channel == "shell" else Step(("true",)), 30)
        r = await env.action(Step(("pwd",)), 30)
        assert r.output == (b"/tmp\n" if channel == "shell" else b"/workspace\n")
    finally:
        await env.teardown()
    assert nothing_left(env_spec.label) == ([], [])


T1_PROFILE = """
[run]
trials = 1
warmup = 0
drivers = ["{driver}"]
workloads = ["t1"]
channels = {channels}
[timeouts]
ready = 120
[drivers_options.{driver}]
accel = "tcg"
"""


def check_t1_run(driver: str, channels: list[str], tmp_path) -> list[dict]:
    """T1 (five inspection steps in the repository) on the guest's root disk through the
    CLI, a trial per channel: every trial valid, every action ok, nothing left; the
    events."""
    ensure_guest(root=True)
    profile = T1_PROFILE.format(driver=driver, channels=json.dumps(channels))
    rc, events, err = run_cli(profile, tmp_path)
    assert rc == 0, err
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == len(channels) and all(e["ok"] and e["valid"] for e in ends), ends
    acts = [e for e in events if e["type"] == "action"]
    assert len(acts) == 5 * len(channels) and all(a["ok"] for a in acts), acts
    assert nothing_left(events[0]["run_id"]) == ([], [])
    return events


def snapshot_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"{names.VM_DIR}snapshot-*")))


RESTORE_PROFILE = """
[run]
trials = 2
warmup = 0
drivers = ["{driver}"]
workloads = ["t0"]
channels = ["shell"]
[timeouts]
ready = 60
[drivers_options.{driver}]
accel = "tcg"
start = "restore"
"""


def check_restore_run(driver: str, tmp_path) -> list[dict]:
    """Two restored trials through the CLI: valid, no boot in ready, nothing left."""
    before = snapshot_dirs()
    rc, events, err = run_cli(RESTORE_PROFILE.format(driver=driver), tmp_path)
    assert rc == 0, err
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 2 and all(e["ok"] and e["valid"] for e in ends), ends
    names = [e["name"] for e in events if e["type"] == "phase" and e["trial"] == ends[0]["trial"]]
    assert "ready.agent" in names and "ready.firmware_kernel" not in names, names
    assert events[0]["hosts"]["local"]["drivers"][driver]["start"] == "restore"
    assert snapshot_dirs() - before == set()  # the saved guest went with the run
    assert nothing_left(events[0]["run_id"]) == ([], [])
    return events


NEVER_READY_PROFILE = """
[run]
trials = 1
warmup = 0
drivers = ["{driver}"]
workloads = ["t0"]
channels = ["{channel}"]
[timeouts]
ready = 15
[drivers_options.{driver}]
accel = "tcg"
append = "rdinit=/bin/cat"
"""


def check_never_ready(driver: str, channel: str, tmp_path) -> str:
    """A guest whose first process is not rtax's /init (`rdinit=/bin/cat`: the kernel boots,
    the agent never says hello): the trial fails `ready_timeout`, nothing is left; the
    run id, for the driver's own leftover checks."""
    rc, events, err = run_cli(NEVER_READY_PROFILE.format(driver=driver, channel=channel), tmp_path)
    assert events, err
    run_id = events[0]["run_id"]
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 1 and not ends[0]["ok"], err
    assert ends[0]["error"]["kind"] == "ready_timeout", ends
    assert events[0]["hosts"]["local"]["drivers"][driver]["accel"] == "tcg"
    assert nothing_left(run_id) == ([], [])
    return run_id
