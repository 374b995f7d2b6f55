"""The `rtax/1` events: one place that builds, encodes and decodes each of them.

A recording is JSON Lines, one event a line; the first is `run`. Every event has
`type` and `t_ns` (ns since the run began, on the monotonic clock); the engine puts
`t_ns` second, and so does `rtax probe` now that it runs through the engine's session;
older probe recordings have it last (`stamp_last`: key order carries no meaning for
readers, but it is kept so that recordings stay byte-for-byte what they were). The builders below
return the event without `t_ns`: the clock that emits it adds it (`Emitter`).

Events are plain dicts at run time (a report reads a million of them; typed
objects would cost more than the reading itself); the `TypedDict`s give them
their shape for the type checker on both sides.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

import orjson

from rtax_tui.model.errors import ErrorObject, TrialError

# The recording's format. New event types and fields may be added within a version;
# renaming or removing one changes it. History of rtax/1:
# - the first version: run, trial_start, phase, action, trial_end, barrier, run_end;
# - added `probe` events (`rtax probe -o`: host, driver, channel, check, result,
#   evidence, promised, kind) and, in the `run` header,
#   `hosts.<host>.drivers.<driver>.boundary` (the last probe of that pair, or
#   {"status": "not probed"}). An older rtax rejects a recording that holds `probe`
#   events (an unknown event type); runs without them read as before;
# - added, in the `run` header, `hosts.<host>.drivers.<driver>.integrity`: per channel,
#   null where the driver states that a step's status, output and timing reach rtax
#   through nothing a step can write, else why not (`Driver.integrity`; the probe's
#   `result_integrity` measures it). Absent in older recordings: not stated;
# - added `prep` events (`rtax traj prepare -o`: file, format, k, steps, shell, rep,
#   dur_ns, ok): one timed preparation of a trajectory's first k steps; `rtax report`
#   adds per-format figures. An older rtax rejects such a recording the same way;
# - added `pool` events (a warm pool's own work, `engine.pool`: host, cell, env, op
#   `create`|`reset`|`teardown`, dur_ns, ok, cpu_ns, env_cpu_ns, error) and, for a
#   pooled trial, `trial_start.mode` ("pool"; absent means cold) and the phases
#   `acquire`, `acquire.wait`, `release` in place of create, ready and teardown.
#   An older rtax rejects a recording with `pool` events the same way;
# - added `run.limits` (optional): the limits every environment of the run was given,
#   {cpus, memory_mib, pids, workspace_mib}, each a number or "unlimited" (rtax gives
#   limits by default since; a profile lifts one only by saying "unlimited"). A
#   recording without it (made before) reports its limits as "unknown";
# - added `clock` events (issue 26): one synchronisation of a remote host's monotonic
#   clock with the run's (host, at_ns, offset_ns, err_ns, rtt_ns, samples, drift_ppb,
#   drift_err_ppb): at run time `at_ns`, the host's clock read `at_ns + offset_ns`, within
#   +-`err_ns` (half a round trip at most); made at connection, on a schedule and at the
#   run's end. They replace `action.remote_ns` on SSH hosts' shell actions, which no
#   longer read the remote clock (recordings made before have it; a VM's guest still
#   reports it). An older rtax rejects a recording with `clock` events the same way;
# - added `run.loop` (optional): the event loop the run's process ran on, which a timed
#   action's wake-up is part of (`uvloop 0.23.0`, `asyncio`; `engine.evloop`). Absent in
#   older recordings: asyncio's, the only loop rtax ran on before;
# - added, for a trial of an arrival pattern's episode (issue 25, `model.arrivals`),
#   `trial_start.arrival` (`burst:N`, `rate:R`), `trial_start.episode` (the episode's id,
#   `e1`, ...) and `trial_start.arrival_ns` (when it was due, on the run's clock: its
#   start's `t_ns` minus it is how late it began), and `run.profile.arrivals`; the
#   pattern is also the cell's suffix (`...@burst:8`). Absent: sequential, as before;
# - added `pool.idle_ns` and `pool.mem_bytes` (issue 25) on a reset or teardown: how long
#   the environment had waited ready in the pool before, and its memory as it went in
#   (null: the driver cannot tell). Absent in older recordings: not measured.
# - added `trial_start.replay.source` (what the workspace held: `NAME==VERSION (index)`,
#   a repository's name[@commit], or `attrs assets`), `.root` (the agent's directory,
#   when the trajectory has one) and `.at_root` (the environment showed the workspace
#   there). Absent in older recordings: the workspace was at /workspace only.
# - added image delivery (issue 24, `drivers.toolkit.delivery`): `trial_start.image`
#   (the trial's image mode: `cached`, `pull` or `lazy`; also the cell's suffix, `~pull`),
#   the `image` phase before `create` (zero for `cached`), `image` events (one per trial,
#   before its `trial_end`: trial, cell, warmup, mode, fetched: the bytes the content
#   server sent under the trial's prefix, headers included; requests; size: the image's
#   whole size) and `run.profile.images`. An older rtax rejects a recording with `image`
#   events (an unknown type). Absent in runs that list no image modes: the image was on
#   the host, and its delivery was not part of the run.
# - added `programs` events (issue 38, `model.programs`): once per cell, from its first
#   trial that got through its steps, which file each of the workload's programs
#   resolved to inside the environment, through the cell's own channel (trial, cell,
#   path: the PATH the steps had, programs: [{name, path, resolved, sha256 of the first
#   MiB, version}], error); the query's time is neither a phase nor orchestration. And,
#   in the `run` header, `hosts.<host>.drivers.local.env`: `sandbox` (the sandboxes'
#   PATH, the default since) or `host` (the host's own PATH, as before). An older rtax
#   rejects a recording with `programs` events (an unknown type). Absent: not asked.
# - added `noise` events (issue 38): what skews timings on the controller, sampled about
#   once a second by a process beside the run (`hosts.noise`): host, at_ns (the sample's
#   end on the run's clock), dur_ns (its window), cpus, and where visible busy, own, other
#   (shares of every core: all, rtax's process tree, the rest), steal, load1, freq_mhz,
#   freq_min_mhz, governor, turbo, psi_cpu, psi_memory (some avg10, %), mem_avail_bytes
#   (without PSI), swap_in/swap_out (pages in the window), temp_c (the hottest zone).
#   The report says per cell where they made it "may be unstable". An older rtax rejects
#   a recording with `noise` events (an unknown type).
# - added `precision` events (issue 38, `model.precision`): a run with `precision`
#   checks, after each round of trials, every cell's P50 of total against its 95%
#   bootstrap interval, one event per cell and check (round, cell, n: measured trials,
#   trials: measured trials run, p50_ns, lo_ns, hi_ns: null without a measured trial,
#   target: the precision as a fraction, verdict `precise`|`wide`|`failing`; on the
#   last check's events `end`, why the rounds ended: `precise`, `max_trials`,
#   `max_time`, `failing` or `stopped`), and `run.profile.precision`, `.max_trials`,
#   `.max_time`. An older rtax rejects a recording with `precision` events (an unknown
#   type). Absent: the run had its planned trials, as before.
# Optional fields added within rtax/1 (readers must not require them):
# `trial_start.steps`, `trial_start.batch_size`, `trial_start.deadline_s`, `trial_start.mode`,
# `action.remote_ns`, `barrier.warmup`, `barrier.release_ns`, `run_end.error`;
# replay workloads: `trial_start.replay` ({trajectory, format, steps, skipped}),
# `action.expect_rc` (the exit code the trajectory recorded for the step) and
# `action.timed_out` (true: killed at the action timeout, the replay went on);
# `barrier.release_dur_ns` (the release decision until the last arrived environment
# let go of what it held), `barrier.mem_peak_bytes`, `barrier.oom_kills` and
# `barrier.cpu_ns` (the batch's budget cgroup: peak memory, OOM kills, CPU time; null
# without a budget), with the `barrier.release` phase and the `oom` error kind;
# `action.out_dropped` (issue 19: rtax keeps a step's first `model.OUTPUT_LIMIT` bytes of
# output, `out_bytes` of them; the bytes it printed past them, read and not kept; absent
# when none were, and in older recordings, whose steps were kept whole);
# `prep.mode` (`rtax traj prepare --mode`: "file", one parse per sample, or "view", one
# parse per file shared by its prefixes; absent, in older recordings: "file"), and with
# "view" `prep.parse_ns` (the one parse) and `prep.view_ns` (the prefix's own time).
# `barrier.span` and `barrier.release_lag_ns` (issue 41: a capacity batch spread over a
# Ray cluster's nodes, one `barrier` event per node's cell, all of one batch id: `span` the
# whole batch's size, `size` and `arrived` this node's part; `release_ns` the controller's
# release decision; `release_lag_ns` from it until the node's engine woke its
# environments and `release_dur_ns` until its last one let go, both measured on the node
# and put on the run's clock through its offset; null lag: the node never answered).
FORMAT = "rtax/1"

# The schema of every event, declared once: per type, its required fields and its
# optional ones, each with its kind. The kinds (`_KINDS`): `int` a signed 64-bit integer,
# `count` an integer 0..2**63-1 (durations in ns, sizes), `num` a finite number >= 0
# (seconds), `id` (a trial's) an integer of 64 bits or a string, `str`, `name` a string
# without a newline (what a table row, a gate line or a summary row shows as one line:
# a cell, host, driver, phase or check; held to one line by readers since 2026-12, which
# rtax never wrote otherwise, so no earlier recording is refused), `bool`, `list`,
# `dict`, `any` (a field readers only show); a trailing `?` admits null. Readers check
# every event against it (`check_event`), so that what a report folds has these types;
# fields not named here pass through (a newer rtax/1 may add some).
EVENT_SCHEMA: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "run": (
        {"format": "name", "run_id": "name", "started_at": "str", "seed": "int", "argv": "list",
         "profile": "dict", "hosts": "dict"},
        {"t_ns": "count", "limits": "dict", "loop": "str"},
    ),
    "trial_start": (
        {"trial": "id", "cell": "name", "host": "name", "driver": "name", "workload": "name",
         "channel": "name", "warmup": "bool", "batch": "name?"},
        {"t_ns": "count", "steps": "count", "batch_size": "count", "deadline_s": "num",
         "replay": "dict", "mode": "name", "arrival": "name", "episode": "name",
         "arrival_ns": "count", "image": "name"},
    ),
    "phase": (
        {"trial": "id", "name": "name", "dur_ns": "count", "ok": "bool"},
        {"t_ns": "count"},
    ),
    "action": (
        {"trial": "id", "i": "count", "dur_ns": "count", "rc": "int?", "ok": "bool",
         "out_bytes": "count"},
        {"t_ns": "count", "remote_ns": "count", "expect_rc": "int", "timed_out": "bool",
         "out_dropped": "count"},
    ),
    "trial_end": (
        {"trial": "id", "ok": "bool", "valid": "bool", "error": "dict?"},
        {"t_ns": "count"},
    ),
    "barrier": (
        {"batch": "name", "cell": "name", "size": "count", "arrived": "count",
         "released": "any", "ok": "bool", "deadline_s": "num"},
        {"t_ns": "count", "warmup": "bool", "release_ns": "count", "release_dur_ns": "count",
         "mem_peak_bytes": "count?", "oom_kills": "count?", "cpu_ns": "count?",
         "span": "count", "release_lag_ns": "count?"},
    ),
    "run_end": ({"status": "str", "trials": "count"}, {"t_ns": "count", "error": "str"}),
    # one boundary check of `rtax probe` (rtax/1 since the format's first addition)
    "probe": (
        {"host": "name", "driver": "name", "channel": "name", "check": "name", "result": "name",
         "evidence": "str"},
        {"t_ns": "count", "promised": "bool", "kind": "str"},
    ),
    # one timed prefix preparation of `rtax traj prepare` (rtax/1, second addition)
    "prep": (
        {"file": "str", "format": "str", "k": "count", "steps": "count", "dur_ns": "count",
         "ok": "bool"},
        {"t_ns": "count", "shell": "count", "rep": "count", "mode": "str", "parse_ns": "count",
         "view_ns": "count"},
    ),
    # one piece of a warm pool's background work (rtax/1, third addition)
    "pool": (
        {"host": "name", "cell": "name", "env": "count", "op": "name", "dur_ns": "count",
         "ok": "bool"},
        {"t_ns": "count", "cpu_ns": "count", "env_cpu_ns": "count?", "error": "str?",
         "idle_ns": "count", "mem_bytes": "count?"},
    ),
    # what one trial's image delivery fetched (rtax/1, issue 24)
    "image": (
        {"trial": "id", "cell": "name", "warmup": "bool", "mode": "name", "fetched": "count",
         "requests": "count", "size": "count"},
        {"t_ns": "count"},
    ),
    # which file each program of a cell's workload resolved to, inside (rtax/1, issue 38)
    "programs": (
        {"trial": "id", "cell": "name", "programs": "list"},
        {"t_ns": "count", "path": "str?", "error": "str"},
    ),
    # what skewed timings on the controller over one window (rtax/1, issue 38)
    "noise": (
        {"host": "name", "at_ns": "count", "dur_ns": "count", "cpus": "count"},
        {"t_ns": "count", "busy": "num", "own": "num", "other": "num", "steal": "num",
         "load1": "num", "freq_mhz": "count", "freq_min_mhz": "count", "governor": "name",
         "turbo": "bool", "psi_cpu": "num", "psi_memory": "num", "mem_avail_bytes": "count",
         "swap_in": "count", "swap_out": "count", "temp_c": "num"},
    ),
    # one cell at one precision check between rounds (rtax/1, issue 38)
    "precision": (
        {"round": "count", "cell": "name", "n": "count", "trials": "count",
         "p50_ns": "count?", "lo_ns": "count?", "hi_ns": "count?", "target": "num",
         "verdict": "name"},
        {"t_ns": "count", "end": "name"},
    ),
    # one synchronisation of a remote host's clock with the run's (rtax/1, fourth addition)
    "clock": (
        {"host": "name", "at_ns": "int", "offset_ns": "int", "err_ns": "count",
         "rtt_ns": "count", "samples": "count"},
        {"t_ns": "count", "drift_ppb": "int", "drift_err_ppb": "count"},
    ),
}  # fmt: skip

# The fields a reader requires, per event type; an unknown type is an error.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    etype: tuple(required) for etype, (required, _) in EVENT_SCHEMA.items()
}

_INT_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 63)
# kind -> (the test that fails a value `v`, as Python source; what the kind is, in words)
_KINDS: dict[str, tuple[str, str]] = {
    "int": ("type(v) is not int or not MIN <= v <= MAX", "an integer of 64 bits"),
    "count": ("type(v) is not int or not 0 <= v <= MAX", "an integer 0..2**63-1"),
    "num": (
        "not ((type(v) is int and 0 <= v <= MAX) or (type(v) is float and 0.0 <= v < INF))",
        "a finite number >= 0",
    ),
    "id": (
        "type(v) is not str and (type(v) is not int or not MIN <= v <= MAX)",
        "an integer of 64 bits or a string",
    ),
    "str": ("type(v) is not str", "a string"),
    "name": ("type(v) is not str or '\\n' in v", "a string of one line"),
    "any": ("False", "anything"),
    "bool": ("type(v) is not bool", "true or false"),
    "list": ("type(v) is not list", "an array"),
    "dict": ("type(v) is not dict", "an object"),
}


def _compile_checks() -> dict[str, Callable[[dict[str, Any]], bool]]:
    """One function per event type, generated from `EVENT_SCHEMA`: True when the event fits.
    Generated, not interpreted: a report checks a million events with them."""
    env: dict[str, Any] = {"MIN": _INT_MIN, "MAX": _INT_MAX, "INF": float("inf")}
    checks: dict[str, Callable[[dict[str, Any]], bool]] = {}
    for etype, (required, optional) in EVENT_SCHEMA.items():
        lines = [
            f"def check_{etype}(ev, type=type, int=int, float=float, str=str, bool=bool, "
            "list=list, dict=dict, MIN=MIN, MAX=MAX, INF=INF):"
        ]
        for name, kind in (*required.items(), *optional.items()):
            test = _KINDS[kind.rstrip("?")][0]
            if kind.endswith("?"):
                test = f"v is not None and ({test})"
            if name in required:
                lines.append(f"    v = ev[{name!r}]")
            else:
                lines.append(f"    v = ev.get({name!r})")
                test = f"{name!r} in ev and ({test})"
            lines.append(f"    if {test}: return False")
        lines.append("    return True")
        exec("\n".join(lines), env)  # noqa: S102 - source built above from constants only
        checks[etype] = env[f"check_{etype}"]
    return checks


# event type -> its check (True: fits); a missing required field raises KeyError
EVENT_CHECKS = _compile_checks()


def check_event(ev: Any) -> str | None:
    """Why `ev` is not a valid event (naming the field), or None. The slow path: readers
    call the generated `EVENT_CHECKS` first and this only to word an error."""
    if not isinstance(ev, dict):
        return "an event must be a JSON object"
    etype = ev.get("type")
    if not isinstance(etype, str) or etype not in EVENT_SCHEMA:
        return f"unknown event type {etype!r}"
    required, optional = EVENT_SCHEMA[etype]
    missing = [f for f in required if f not in ev]
    if missing:
        return f"{etype} event lacks {', '.join(missing)}"
    for name, kind in (*required.items(), *optional.items()):
        if name not in ev:
            continue
        v = ev[name]
        if v is None and kind.endswith("?"):
            continue
        test, words = _KINDS[kind.rstrip("?")]
        env = {"v": v, "MIN": _INT_MIN, "MAX": _INT_MAX, "INF": float("inf")}
        if eval(test, env):  # noqa: S307 - the tests are the constants above
            null = " or null" if kind.endswith("?") else ""
            return f"{etype}.{name}: expected {words}{null}, got {_show(v)}"
    return None


def _show(v: Any) -> str:
    """A bad value, short: an error is one line (never the whole of a nested value, nor
    the digits of a huge integer, which Python refuses to print past 4300)."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, int) and not isinstance(v, bool) and not _INT_MIN <= v <= _INT_MAX:
        return f"an integer of {v.bit_length()} bits"
    text = "null" if v is None else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


class RunEvent(TypedDict):
    type: Literal["run"]
    t_ns: NotRequired[int]
    format: str
    run_id: str
    started_at: str
    seed: int
    argv: list[str]
    profile: dict[str, Any]
    hosts: dict[str, Any]
    limits: NotRequired[dict[str, Any]]
    loop: NotRequired[str]


class TrialStartEvent(TypedDict):
    type: Literal["trial_start"]
    t_ns: NotRequired[int]
    trial: int
    cell: str
    host: str
    driver: str
    workload: str
    channel: str
    warmup: bool
    batch: str | None
    steps: NotRequired[int]
    batch_size: NotRequired[int]
    deadline_s: NotRequired[float]
    replay: NotRequired[dict[str, Any]]
    mode: NotRequired[str]
    arrival: NotRequired[str]
    episode: NotRequired[str]
    arrival_ns: NotRequired[int]
    image: NotRequired[str]


class PhaseEvent(TypedDict):
    type: Literal["phase"]
    t_ns: NotRequired[int]
    trial: int
    name: str
    dur_ns: int
    ok: bool


class ActionEvent(TypedDict):
    type: Literal["action"]
    t_ns: NotRequired[int]
    trial: int
    i: int
    dur_ns: int
    rc: int | None
    ok: bool
    out_bytes: int
    remote_ns: NotRequired[int]
    expect_rc: NotRequired[int]
    timed_out: NotRequired[bool]
    out_dropped: NotRequired[int]


class TrialEndEvent(TypedDict):
    type: Literal["trial_end"]
    t_ns: NotRequired[int]
    trial: int
    ok: bool
    valid: bool
    error: ErrorObject | None


class BarrierEvent(TypedDict):
    type: Literal["barrier"]
    t_ns: NotRequired[int]
    batch: str
    cell: str
    size: int
    arrived: int
    released: str | None
    ok: bool
    deadline_s: float
    warmup: bool
    release_ns: int
    release_dur_ns: NotRequired[int]
    mem_peak_bytes: NotRequired[int | None]
    oom_kills: NotRequired[int | None]
    cpu_ns: NotRequired[int | None]
    span: NotRequired[int]
    release_lag_ns: NotRequired[int | None]


class RunEndEvent(TypedDict):
    type: Literal["run_end"]
    t_ns: NotRequired[int]
    status: str
    trials: int
    error: NotRequired[str]


class PoolEvent(TypedDict):
    type: Literal["pool"]
    t_ns: NotRequired[int]
    host: str
    cell: str
    env: int
    op: str
    dur_ns: int
    ok: bool
    cpu_ns: int
    env_cpu_ns: int | None
    error: str | None
    idle_ns: NotRequired[int]
    mem_bytes: NotRequired[int | None]


class ImageEvent(TypedDict):
    type: Literal["image"]
    t_ns: NotRequired[int]
    trial: int
    cell: str
    warmup: bool
    mode: str
    fetched: int
    requests: int
    size: int


class ClockEvent(TypedDict):
    type: Literal["clock"]
    t_ns: NotRequired[int]
    host: str
    at_ns: int
    offset_ns: int
    err_ns: int
    rtt_ns: int
    samples: int
    drift_ppb: NotRequired[int]
    drift_err_ppb: NotRequired[int]


class ProgramsEvent(TypedDict):
    type: Literal["programs"]
    t_ns: NotRequired[int]
    trial: int
    cell: str
    path: str | None
    programs: list[dict[str, Any]]
    error: NotRequired[str]


class NoiseEvent(TypedDict):
    type: Literal["noise"]
    t_ns: NotRequired[int]
    host: str
    at_ns: int
    dur_ns: int
    cpus: int
    busy: NotRequired[float]
    own: NotRequired[float]
    other: NotRequired[float]
    steal: NotRequired[float]
    load1: NotRequired[float]
    freq_mhz: NotRequired[int]
    freq_min_mhz: NotRequired[int]
    governor: NotRequired[str]
    turbo: NotRequired[bool]
    psi_cpu: NotRequired[float]
    psi_memory: NotRequired[float]
    mem_avail_bytes: NotRequired[int]
    swap_in: NotRequired[int]
    swap_out: NotRequired[int]
    temp_c: NotRequired[float]


class PrecisionEvent(TypedDict):
    type: Literal["precision"]
    t_ns: NotRequired[int]
    round: int
    cell: str
    n: int
    trials: int
    p50_ns: int | None
    lo_ns: int | None
    hi_ns: int | None
    target: float
    verdict: str
    end: NotRequired[str]


class ProbeEvent(TypedDict):
    type: Literal["probe"]
    t_ns: NotRequired[int]
    host: str
    driver: str
    channel: str
    check: str
    result: str
    evidence: str
    promised: bool
    kind: str


Event = (
    RunEvent
    | TrialStartEvent
    | PhaseEvent
    | ActionEvent
    | TrialEndEvent
    | BarrierEvent
    | RunEndEvent
    | ProbeEvent
    | PoolEvent
    | ClockEvent
    | ImageEvent
    | ProgramsEvent
    | NoiseEvent
    | PrecisionEvent
)

# What sinks receive: an event as a plain dict, `t_ns` included.
Sink = Callable[[dict[str, Any]], None]


class SinkError(Exception):
    """A sink can take no more events (its disk is full, its reader went away).

    The sink raises it after leaving what it already holds consistent; the `Emitter` then
    drops that sink, keeps feeding the others and tells its owner (`on_failure`), so that a
    fault in one place to write never becomes an exception inside a trial.
    """


# -- builders (the key order is the recorded one) ----------------------------
def run(
    *,
    run_id: str,
    started_at: str,
    seed: int,
    argv: Sequence[str],
    profile: dict[str, Any],
    hosts: dict[str, Any],
    limits: dict[str, Any] | None = None,
    loop: str | None = None,
) -> RunEvent:
    ev: RunEvent = {
        "type": "run",
        "format": FORMAT,
        "run_id": run_id,
        "started_at": started_at,
        "seed": seed,
        "argv": list(argv),
        "profile": profile,
        "hosts": hosts,
    }
    if limits is not None:
        ev["limits"] = limits
    if loop is not None:
        ev["loop"] = loop
    return ev


def trial_start(
    *,
    trial: int,
    cell: str,
    host: str,
    driver: str,
    workload: str,
    channel: str,
    warmup: bool,
    batch: str | None,
    steps: int | None,
    batch_size: int | None = None,
    deadline_s: float | None = None,
    replay: dict[str, Any] | None = None,
    mode: str = "cold",
    arrival: str | None = None,
    episode: str | None = None,
    arrival_ns: int | None = None,
    image: str | None = None,
) -> TrialStartEvent:
    """`steps` (None only in recordings made before it existed), and `batch_size` and
    `deadline_s` (capacity runs) let a live view draw the barrier before the batch's
    `barrier` event. `arrival`, `episode` and `arrival_ns` (the run's clock) belong to a
    trial of an arrival pattern's episode."""
    ev: TrialStartEvent = {
        "type": "trial_start",
        "trial": trial,
        "cell": cell,
        "host": host,
        "driver": driver,
        "workload": workload,
        "channel": channel,
        "warmup": warmup,
        "batch": batch,
    }
    if steps is not None:
        ev["steps"] = steps
    if batch_size is not None and deadline_s is not None:
        ev["batch_size"] = batch_size
        ev["deadline_s"] = deadline_s
    if replay is not None:
        ev["replay"] = replay
    if mode != "cold":
        ev["mode"] = mode
    if arrival is not None and episode is not None and arrival_ns is not None:
        ev["arrival"] = arrival
        ev["episode"] = episode
        ev["arrival_ns"] = arrival_ns
    if image is not None:
        ev["image"] = image
    return ev


def phase(trial: int, name: str, dur_ns: int, ok: bool) -> PhaseEvent:
    return {"type": "phase", "trial": trial, "name": name, "dur_ns": dur_ns, "ok": ok}


def action(
    trial: int,
    i: int,
    dur_ns: int,
    rc: int | None,
    ok: bool,
    out_bytes: int,
    remote_ns: int | None = None,
    expect_rc: int | None = None,
    timed_out: bool = False,
    out_dropped: int = 0,
) -> ActionEvent:
    ev: ActionEvent = {
        "type": "action",
        "trial": trial,
        "i": i,
        "dur_ns": dur_ns,
        "rc": rc,
        "ok": ok,
        "out_bytes": out_bytes,
    }
    if remote_ns is not None:
        ev["remote_ns"] = remote_ns
    if expect_rc is not None:
        ev["expect_rc"] = expect_rc
    if timed_out:
        ev["timed_out"] = True
    if out_dropped:
        ev["out_dropped"] = out_dropped
    return ev


def clock(
    host: str,
    *,
    at_ns: int,
    offset_ns: int,
    err_ns: int,
    rtt_ns: int,
    samples: int,
    drift_ppb: int | None = None,
    drift_err_ppb: int | None = None,
) -> ClockEvent:
    """A sync of `host`'s clock, on the run's clock: `at_ns` run time, the host's clock
    then `at_ns + offset_ns`, within +-`err_ns` (hosts.clocksync)."""
    ev: ClockEvent = {
        "type": "clock",
        "host": host,
        "at_ns": at_ns,
        "offset_ns": offset_ns,
        "err_ns": err_ns,
        "rtt_ns": rtt_ns,
        "samples": samples,
    }
    if drift_ppb is not None and drift_err_ppb is not None:
        ev["drift_ppb"] = drift_ppb
        ev["drift_err_ppb"] = drift_err_ppb
    return ev


def trial_end(trial: int, valid: bool, error: TrialError | None) -> TrialEndEvent:
    """`ok` is "no error"; `valid` also needs every step's expectation met."""
    err = None if error is None else error.to_event()
    return {"type": "trial_end", "trial": trial, "ok": error is None, "valid": valid, "error": err}


def barrier(
    *,
    batch: str,
    cell: str,
    size: int,
    arrived: int,
    released: str | None,
    deadline_s: float,
    warmup: bool,
    release_ns: int,
    release_dur_ns: int | None = None,
    mem_peak_bytes: int | None = None,
    oom_kills: int | None = None,
    cpu_ns: int | None = None,
    span: int | None = None,
    release_lag_ns: int | None = None,
) -> BarrierEvent:
    """`release_dur_ns` and the budget's figures are written whenever the engine gives
    `release_dur_ns` (the budget's as null when the batch had none)."""
    ev: BarrierEvent = {
        "type": "barrier",
        "batch": batch,
        "cell": cell,
        "size": size,
        "arrived": arrived,
        "released": released,
        "ok": arrived == size,
        "deadline_s": deadline_s,
        "warmup": warmup,
        "release_ns": release_ns,
    }
    if release_dur_ns is not None:
        ev["release_dur_ns"] = release_dur_ns
        ev["mem_peak_bytes"] = mem_peak_bytes
        ev["oom_kills"] = oom_kills
        ev["cpu_ns"] = cpu_ns
    if span is not None:  # a batch spread over hosts: this event is one host's part
        ev["span"] = span
        ev["release_lag_ns"] = release_lag_ns
    return ev


def image(
    trial: int, cell: str, warmup: bool, mode: str, fetched: int, requests: int, size: int
) -> ImageEvent:
    """What trial `trial`'s image delivery fetched (`drivers.toolkit.delivery`): the bytes
    and requests the content server counted under its prefix (0 for `cached`), and the
    image's whole size."""
    return {"type": "image", "trial": trial, "cell": cell, "warmup": warmup, "mode": mode,
            "fetched": fetched, "requests": requests, "size": size}  # fmt: skip


def programs(
    trial: int,
    cell: str,
    path: str | None,
    programs: list[dict[str, Any]],
    error: str | None = None,
) -> ProgramsEvent:
    """Which file each program of `cell`'s workload is, as trial `trial`'s environment
    answered (`model.programs`: already bounded and made text)."""
    ev: ProgramsEvent = {"type": "programs", "trial": trial, "cell": cell, "path": path,
                         "programs": programs}  # fmt: skip
    if error is not None:
        ev["error"] = error
    return ev


def pool(
    *,
    host: str,
    cell: str,
    env: int,
    op: str,
    dur_ns: int,
    ok: bool,
    cpu_ns: int,
    env_cpu_ns: int | None,
    error: str | None,
    idle_ns: int | None = None,
    mem_bytes: int | None = None,
) -> PoolEvent:
    """One piece of a pool's background work on environment `env` (the pool's own number):
    `create` (create + ready), `reset` (clean or snapshot), `teardown`. `cpu_ns` is
    rtax's process CPU time over the work (shared with whatever else ran meanwhile: an
    upper bound), `env_cpu_ns` what the driver attributes to the environment, if it can.
    On a reset or teardown, `idle_ns`: how long the environment had waited ready in the
    pool before (taken by a trial, or the pool's close), with `mem_bytes`, its memory as
    it went in (null when the driver cannot tell)."""
    ev: PoolEvent = {
        "type": "pool",
        "host": host,
        "cell": cell,
        "env": env,
        "op": op,
        "dur_ns": dur_ns,
        "ok": ok,
        "cpu_ns": cpu_ns,
        "env_cpu_ns": env_cpu_ns,
        "error": error,
    }
    if idle_ns is not None:
        ev["idle_ns"] = idle_ns
        ev["mem_bytes"] = mem_bytes
    return ev


def noise(host: str, sample: Mapping[str, Any]) -> NoiseEvent | None:
    """A sampler's line (`hosts.noise`) as a `noise` event of `host`: the schema's fields
    only, each of its kind; None for a line that lacks the required ones."""
    ev: dict[str, Any] = {"type": "noise", "host": host}
    required, optional = EVENT_SCHEMA["noise"]
    for name, kind in (*required.items(), *optional.items()):
        if name in ("host", "t_ns") or name not in sample:
            continue
        v = sample[name]
        if kind == "name" and isinstance(v, str):
            ev[name] = one_line(v)
        elif kind in ("count", "num") and type(v) in (int, float) and 0 <= v < float("inf"):
            ev[name] = int(v) if kind == "count" else v
        elif kind == "bool" and type(v) is bool:
            ev[name] = v
    if any(k not in ev for k in required):
        return None
    return ev  # type: ignore[return-value]


def precision(
    round_: int,
    cell: str,
    *,
    n: int,
    trials: int,
    p50_ns: int | None,
    lo_ns: int | None,
    hi_ns: int | None,
    target: float,
    verdict: str,
    end: str | None = None,
) -> PrecisionEvent:
    """Cell `cell` at the precision check after round `round_` (model.precision); `end`
    on the last check's events: why the rounds ended."""
    ev: PrecisionEvent = {"type": "precision", "round": round_, "cell": cell, "n": n,
                          "trials": trials, "p50_ns": p50_ns, "lo_ns": lo_ns, "hi_ns": hi_ns,
                          "target": target, "verdict": verdict}  # fmt: skip
    if end is not None:
        ev["end"] = end
    return ev


def run_end(status: str, trials: int, error: str | None = None) -> RunEndEvent:
    ev: RunEndEvent = {"type": "run_end", "status": status, "trials": trials}
    if error is not None:
        ev["error"] = error
    return ev


def probe(
    *,
    host: str,
    driver: str,
    channel: str,
    check: str,
    result: str,
    evidence: str,
    promised: bool,
    kind: str,
) -> ProbeEvent:
    return {
        "type": "probe",
        "host": host,
        "driver": driver,
        "channel": channel,
        "check": check,
        "result": result,
        "evidence": evidence,
        "promised": promised,
        "kind": kind,
    }


# -- the clocks that stamp them ----------------------------------------------
class Emitter:
    """Stamps events with `t_ns` (second, after `type`) and hands them to the sinks.

    Sinks are called for every event, in order, from the event loop's thread.
    """

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self.t0 = time.monotonic_ns()
        self.failures: list[SinkError] = []
        self.on_failure: Callable[[SinkError], None] | None = None

    def start(self) -> int:
        """Begin the run's clock; returns its origin (time.monotonic_ns())."""
        self.t0 = time.monotonic_ns()
        return self.t0

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    def __call__(self, event: Event) -> None:
        ev: dict[str, Any] = {
            "type": event["type"],
            "t_ns": time.monotonic_ns() - self.t0,
            **event,
        }
        self._fan_out(visible(ev))  # an error's message may hold what a step wrote

    def forward(self, event: dict[str, Any]) -> None:
        """An event already stamped on the run's clock elsewhere (a Ray node's engine,
        engine.raynodes, which checked it first): to the sinks as it is."""
        self._fan_out(visible(dict(event)))

    def _fan_out(self, ev: dict[str, Any]) -> None:
        """`ev` to every sink; a sink that fails is dropped, the others go on."""
        failed = []
        for sink in self.sinks:
            try:
                sink(ev)
            except SinkError as exc:
                failed.append(sink)
                self.failures.append(exc)
                if self.on_failure is not None:
                    self.on_failure(exc)
        for sink in failed:
            self.sinks.remove(sink)


def stamp_last(event: Event, t_ns: int) -> dict[str, Any]:
    """The event with `t_ns` last: the order `rtax probe` recorded before it ran through
    the engine's session; its strings `visible` (a probe's evidence holds what a step
    printed)."""
    return {**visible(event), "t_ns": t_ns}


# -- encoding and decoding ---------------------------------------------------
def encode(event: Mapping[str, Any]) -> bytes:
    """One recording line."""
    return orjson.dumps(event) + b"\n"


DecodeError = orjson.JSONDecodeError

# A control character in a line: JSON's escapes for C0, DEL and C1, DEL and C1 as they
# are (JSON allows them raw), and `\\b`, `\\f`, `\\r`. A false alarm (an escaped
# backslash before a `b`) only costs the walk below, which changes nothing then. A raw
# DEL in an ASCII line is not looked for (terminals ignore it); an emitted event's is
# made visible all the same. Then the format characters that move text without being
# seen: the line and paragraph separators (U+2028, U+2029: a new line to some terminals
# and every browser) and the bidirectional marks, embeddings, overrides and isolates
# (U+061C, U+200E-F, U+202A-E, U+2066-9: "Trojan Source", a name that reads as another),
# raw in UTF-8 or as JSON escapes.
# What JSON leaves raw of these, as UTF-8: DEL, the C1 controls and the format characters
# (also what `rtax_tui.commands.output.print_json` escapes).
RAW_CONTROL_UTF8 = rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]|\xd8\x9c"
_CONTROL_IN_LINE = re.compile(
    rb"\\u00[0-1][0-9A-Fa-f]|\\u00[7-9][0-9A-Fa-f]|\\[bfr]|"
    + RAW_CONTROL_UTF8
    + rb"|\\u(?:20[026]|061)[0-9A-Fa-f]"
)
# and a lone surrogate: a byte of a name that is not UTF-8 (a path or an argument, as
# Python's surrogateescape holds it), which no JSON encoder or UTF-8 file can take
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def _shown(m: re.Match[str]) -> str:
    o = ord(m.group())
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape's byte: shown as that byte
        o -= 0xDC00
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def visible(value: Any) -> Any:
    """`value` with every control character of its strings (keys included), but newline
    and tab, written as a visible `\\xNN` (and the invisible format characters above as
    `\\uNNNN`). Text in an event comes from places a step
    controls (an error's message, a command's stderr, a crafted recording): on a
    terminal, or in the browser's xterm.js, an escape sequence in it would act (set the
    clipboard through OSC 52, retitle the window, rewrite the screen). Every event is
    made visible once, where it enters rtax: when the engine emits it and when a reader
    decodes it; so no screen, report or recording shows one."""
    if isinstance(value, str):
        return _CONTROL.sub(_shown, value) if _CONTROL.search(value) else value
    if isinstance(value, dict):
        return {visible(k): visible(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible(v) for v in value]
    return value


def one_line(text: str) -> str:
    """`text` as one line of a terminal (an error, a name): `visible`, and its newlines
    too, as `\\x0a`."""
    return str(visible(text)).replace("\n", "\\x0a")


# An error's line at most this long: a value quoted from an input (a profile's 5,000-character
# option, a key as long) is cut in its middle, both ends kept, the count of what went said.
ERROR_LINE_MAX = 1000


def error_line(text: str) -> str:
    """`one_line(text)`, and at most ERROR_LINE_MAX characters: the one rule for an
    error's message on a terminal, whatever the input quoted in it."""
    line = one_line(text)
    if len(line) <= ERROR_LINE_MAX:
        return line
    head, tail = ERROR_LINE_MAX * 2 // 3, ERROR_LINE_MAX // 4
    return f"{line[:head]}[... {len(line) - head - tail:,} characters ...]{line[-tail:]}"


def decode(raw: bytes) -> Any:
    """One line (bytes) to its value (a dict for an event; `missing_fields` checks its
    shape), its strings `visible`. The check for a control character is one scan of the
    line's bytes, so a line without one (nearly every line) costs only orjson's parse."""
    value = orjson.loads(raw)
    if (b"\\" in raw or not raw.isascii()) and _CONTROL_IN_LINE.search(raw):
        return visible(value)
    return value


def missing_fields(event: Mapping[str, Any]) -> list[str] | None:
    """None for an unknown event type, else the required fields `event` lacks."""
    fields = EVENT_FIELDS.get(event.get("type"))  # type: ignore[arg-type]
    if fields is None:
        return None
    return [f for f in fields if f not in event]
