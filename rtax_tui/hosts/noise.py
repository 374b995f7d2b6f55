"""What skews timings on this machine, sampled beside a run by a small process of its own.

A run's figures are only as steady as the machine under them: another process busy on
the cores, a load above the core count, a CPU clocked down (a powersave governor, heat),
steal time under a VM, memory pressure or swapping. The sampler reads them from /proc
and /sys about once a second and writes one JSON line per sample to its stdout; the
engine (`Noise`) turns each line into a `noise` event. It is a process of its own so
that its reads of /proc (a walk of every process, for whose CPU is whose) cost the engine's
event loop and the trials nothing but one short read a second.

It ends with the run however the run ends: the engine closes its stdin (then it writes
a last sample and exits); a kill -9 of rtax closes that pipe too (only rtax holds its
write end), and the sampler also sees its parent change. What it reads is the machine
it runs on: the controller's (local hosts'); an SSH host's noise is not sampled.
"""

from __future__ import annotations

import asyncio
import glob
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

INTERVAL_S = 1.0
# The sampler keeps itself under this share of one core: a sample that cost more (the
# walk of /proc with thousands of processes) stretches the wait before the next one.
MAX_SHARE = 0.01
_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Run as a script by its path: `-m` or an import would import the package's __init__
# (every host, 0.1 s of CPU at each run's start on a 2-core machine) for nothing
_SCRIPT = os.path.abspath(__file__)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_times() -> tuple[int, int, int] | None:
    """/proc/stat's `cpu` line: (busy, steal, total) jiffies over every core since boot.
    Busy is user + nice + system + irq + softirq (guest time is inside user)."""
    text = _read("/proc/stat")
    if text is None or not text.startswith("cpu "):
        return None
    f = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    f += [0] * (8 - len(f))
    user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


Key = tuple[int, int]  # a process: (pid, start time), so a pid used again is another


def processes(root: int | None) -> tuple[dict[Key, int], set[Key]]:
    """Every process's CPU time (jiffies: utime + stime + cutime + cstime, the children
    it reaped included), and which of them are `root` and below it (rtax's tree). One
    read of every /proc/<pid>/stat (raw `os` calls: a thousand environments are
    thousands of processes)."""
    parent: dict[int, int] = {}
    ticks: dict[Key, int] = {}
    key: dict[int, Key] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{d}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            raw = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        rest = raw[raw.rfind(b")") + 2 :].split(b" ", 20)  # after the name (may hold spaces)
        if len(rest) < 21:
            continue
        pid = int(d)
        parent[pid] = int(rest[1])
        key[pid] = (pid, int(rest[19]))
        ticks[key[pid]] = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    tree: set[Key] = set()
    if root is None:
        return ticks, tree
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in key:
            tree.add(key[pid])
        stack.extend(children.get(pid, ()))
    return ticks, tree


def other_cpu(prev: Snapshot, cur: Snapshot) -> int:
    """The CPU time (jiffies) processes outside rtax's tree were seen to use between two
    snapshots: what each used since the first (all of it when it started since), less
    what those gone had at the first (their parent's reaped-children time took it up).

    "Other" is counted, and rtax's own share is the rest of the busy time, not the other
    way round: a process that no one reaps (its parent ignores SIGCHLD) takes its CPU
    time with it, so a count of rtax's tree loses what an environment's such children
    used, and the environment's own work would be blamed on "other processes" (its cell
    or another marked "may be unstable" at will). The CPU that no process shows
    (interrupts, an unreaped process gone) is then rtax's, never others'."""
    seen = sum(t - prev.ticks.get(k, 0) for k, t in cur.ticks.items() if k not in cur.tree)
    gone = sum(t for k, t in prev.ticks.items() if k not in prev.tree and k not in cur.ticks)
    return max(seen - gone, 0)


def cpufreq() -> dict[str, Any]:
    """The cores' current frequency (MHz: mean and lowest), their governors and whether
    turbo/boost is on, where /sys shows them (not in most containers and VMs)."""
    out: dict[str, Any] = {}
    cur = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        v = _read(path)
        if v and v.strip().isdigit():
            cur.append(int(v) / 1000)
    if cur:
        out["freq_mhz"] = round(sum(cur) / len(cur))
        out["freq_min_mhz"] = round(min(cur))
    govs = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"):
        v = _read(path)
        if v:
            govs.add(v.strip())
    if govs:
        out["governor"] = ",".join(sorted(govs))
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo is not None and no_turbo.strip() in ("0", "1"):
        out["turbo"] = no_turbo.strip() == "0"
    elif boost is not None and boost.strip() in ("0", "1"):
        out["turbo"] = boost.strip() == "1"
    return out


def pressure(kind: str) -> float | None:
    """/proc/pressure/<kind>'s `some avg10`: the share (%) of the last 10 s in which some
    task waited for the resource; None without PSI."""
    text = _read(f"/proc/pressure/{kind}")
    if not text:
        return None
    for word in text.split("\n", 1)[0].split():
        if word.startswith("avg10="):
            return float(word[6:])
    return None


def meminfo(key: str) -> int | None:
    """A /proc/meminfo figure, in bytes."""
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


def swap_pages() -> tuple[int, int] | None:
    """(pages swapped in, out) since boot, from /proc/vmstat."""
    text = _read("/proc/vmstat")
    if text is None:
        return None
    got = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k in ("pswpin", "pswpout"):
            got[k] = int(v)
    return (got["pswpin"], got["pswpout"]) if len(got) == 2 else None


def temperature() -> float | None:
    """The hottest thermal zone (degrees C), where /sys/class/thermal shows one."""
    temps = []
    for path in glob.glob("/sys/class/thermal/thermal_zone*/temp"):
        v = _read(path)
        if v and v.strip().isdigit():  # a negative reading is a sensor's nonsense
            temps.append(int(v) / 1000)
    return max(temps) if temps else None


def load1() -> float | None:
    text = _read("/proc/loadavg")
    return float(text.split()[0]) if text else None


class Snapshot:
    """The counters a sample is the difference of, read at one moment."""

    def __init__(self, root: int | None) -> None:
        self.mono_ns = time.monotonic_ns()
        self.cpu = cpu_times()
        self.ticks, self.tree = processes(root)
        self.swap = swap_pages()


def sample(prev: Snapshot, cur: Snapshot) -> dict[str, Any]:
    """One sample over the window from `prev` to `cur` (shares are of every core: 0.5 is
    one core of two), and the gauges read now. Absent keys: not visible here."""
    out: dict[str, Any] = {"dur_ns": cur.mono_ns - prev.mono_ns, "cpus": os.cpu_count() or 1}
    if prev.cpu is not None and cur.cpu is not None:
        total = cur.cpu[2] - prev.cpu[2]
        if total > 0:
            busy = (cur.cpu[0] - prev.cpu[0]) / total
            other = min(other_cpu(prev, cur) / total, busy)
            out["busy"] = round(busy, 4)
            out["own"] = round(busy - other, 4)
            out["other"] = round(other, 4)
            out["steal"] = round((cur.cpu[1] - prev.cpu[1]) / total, 4)
    load = load1()
    if load is not None:
        out["load1"] = load
    out.update(cpufreq())
    for kind in ("cpu", "memory"):
        p = pressure(kind)
        if p is not None:
            out[f"psi_{kind}"] = p
    if "psi_memory" not in out:
        avail = meminfo("MemAvailable")
        if avail is not None:
            out["mem_avail_bytes"] = avail
    if prev.swap is not None and cur.swap is not None:
        out["swap_in"] = cur.swap[0] - prev.swap[0]
        out["swap_out"] = cur.swap[1] - prev.swap[1]
    temp = temperature()
    if temp is not None:
        out["temp_c"] = temp
    return out


def main(argv: list[str]) -> int:
    """`ROOT_PID T0_NS [INTERVAL_S]`: a sample a second on stdout (`at_ns` on the run's
    clock, origin T0_NS), until stdin ends (then a last one) or the parent is gone."""
    root, t0 = int(argv[0]), int(argv[1])
    interval = float(argv[2]) if len(argv) > 2 else INTERVAL_S
    parent = os.getppid()
    try:
        os.nice(5)  # behind the trials when the cores are short
    except OSError:
        pass
    prev = Snapshot(root)
    wait = interval
    ending = False
    while not ending:
        ready, _, _ = select.select([0], [], [], wait)
        if ready and not os.read(0, 4096):
            ending = True
        if os.getppid() != parent:  # rtax died (kill -9): nothing reads us any more
            return 0
        cpu0 = time.process_time()
        cur = Snapshot(root)
        if ending and cur.mono_ns - prev.mono_ns < 100_000_000:
            break  # a window too short to say anything
        ev = {"at_ns": cur.mono_ns - t0, **sample(prev, cur)}
        prev = cur
        wait = max(interval, (time.process_time() - cpu0) / MAX_SHARE)
        try:
            os.write(1, orjson.dumps(ev) + b"\n")
        except OSError:  # the reader is gone
            return 0
    return 0


class Noise:
    """The engine's end of the sampler: starts it, turns its lines into events on the
    event loop (one short read a second), and ends it, its last sample read, before the
    run's last event."""

    def __init__(self, on_sample: Callable[[dict[str, Any]], None]) -> None:
        self.on_sample = on_sample
        self.proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, t0: int, interval: float = INTERVAL_S) -> None:
        self.proc = subprocess.Popen(
            # -P: not the script's directory first on sys.path (hosts' modules by their
            # bare names)
            [sys.executable, "-P", _SCRIPT, str(os.getpid()), str(t0), str(interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C to rtax's group is rtax's to handle
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        try:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self.proc.stdout.fileno(), self._readable)
        except RuntimeError:
            self._loop = None

    def _readable(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            data = os.read(self.proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._unwatch()
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(ev, dict):
                self.on_sample(ev)

    def _unwatch(self) -> None:
        if self._loop is not None and self.proc is not None and self.proc.stdout is not None:
            self._loop.remove_reader(self.proc.stdout.fileno())
            self._loop = None

    def stop(self, timeout: float = 3.0) -> None:
        """End the sampler; its last sample (the window up to now) is taken first."""
        proc = self.proc
        if proc is None:
            return
        self._unwatch()
        self.proc = None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.close()
        except OSError:
            pass
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not data:
                break
            self._take(data)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def advice(window_s: float = 1.0) -> list[tuple[str, str]]:
    """What to change on this machine for steadier figures (`rtax doctor`, as `pyperf
    system show` says it): (what was measured, what to do), each from a reading taken
    now over `window_s`, never assumed; empty when nothing was found to change."""
    prev = Snapshot(os.getpid())
    time.sleep(window_s)
    s = sample(prev, Snapshot(os.getpid()))
    out: list[tuple[str, str]] = []
    cpus = int(s["cpus"])
    gov = s.get("governor")
    if gov is None:
        out.append(
            (
                "CPU governor and frequency: not visible here (no cpufreq in /sys: a "
                "container or VM)",
                "set them on the machine that runs this one, if you can",
            )
        )
    elif gov != "performance":
        out.append(
            (
                f"CPU governor: {gov}",
                "`sudo cpupower frequency-set -g performance` (the clock then does not "
                "ramp up under each trial)",
            )
        )
    if s.get("turbo"):
        out.append(
            (
                "turbo boost: on",
                "turn it off for runs you compare (`echo 1 | sudo tee "
                "/sys/devices/system/cpu/intel_pstate/no_turbo`, or 0 to "
                "/sys/devices/system/cpu/cpufreq/boost): the clock varies with heat and load",
            )
        )
    other = float(s.get("other", 0.0))
    if other >= 0.10:
        out.append(
            (
                f"other processes: {other * 100:.0f}% of the {cpus} cores' CPU over {window_s:g} s",
                "stop what else runs here, or run rtax where nothing else does",
            )
        )
    load = s.get("load1")
    if load is not None and load >= cpus / 2:
        out.append(
            (
                f"load: {load:.1f} on {cpus} cores (1-minute average)",
                "wait for the machine to settle, or use one with spare cores",
            )
        )
    if float(s.get("steal", 0.0)) >= 0.01:
        out.append(
            (
                f"steal time: {s['steal'] * 100:.0f}% (the hypervisor ran another guest)",
                "a dedicated host or instance (steal makes every phase slower at random)",
            )
        )
    swap_used = (meminfo("SwapTotal") or 0) - (meminfo("SwapFree") or 0)
    moved = int(s.get("swap_in", 0)) + int(s.get("swap_out", 0))
    if moved or swap_used > 0:
        out.append(
            (
                f"swap: {swap_used >> 20} MiB in use, {moved} pages moved over {window_s:g} s",
                "free memory or `sudo swapoff -a` (a page swapped in during a trial costs ms)",
            )
        )
    if float(s.get("psi_memory", 0.0)) >= 1.0:
        out.append(
            (
                f"memory pressure: tasks waited for memory {s['psi_memory']:.0f}% of the last 10 s",
                "free memory (stop what holds it) before a run",
            )
        )
    temp = s.get("temp_c")
    if temp is not None and temp >= 80:
        out.append(
            (
                f"temperature: {temp:.0f} C (the hottest thermal zone)",
                "let it cool; the CPU throttles near its limit",
            )
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
