"""Names and small value types shared by the engine, the drivers and the readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rtax_tui.model.errors import ErrorKind

# The recording's format (`rtax/1`) and its history live with its events, in `model.events`.
REPORT_FORMAT = "rtax-report/1"

PHASES = ("create", "ready", "action", "teardown", "orchestration", "total")
# The phases `rtax history` follows run after run unless told others.
TREND_PHASES = ("create", "ready", "action", "teardown", "total")
# Phases recorded as `phase` events; `action` and `total` are derived.
TIMED_PHASES = ("create", "ready", "teardown", "orchestration")
# A pooled trial's phases in place of create + ready and teardown (engine.pool): in a
# report only where a cell has them, so that a cold run's report keeps its shape.
POOL_PHASES = ("acquire", "release")
# Phases a report shows only where a cell has them: a pooled trial's, and the `image`
# phase of a run with image modes (drivers.toolkit.delivery). Timed: part of the total.
EXTRA_PHASES = POOL_PHASES + ("image",)
CHANNELS = ("exec", "shell")
# The built-in workloads (built in rtax_tui.engine.workloads), named here so that a
# reader of names (the console's launcher) needs no workload's assets.
WORKLOAD_NAMES: tuple[str, ...] = (
    "t0",
    "t1",
    "t2",
    "trajectory-10",
    "trajectory-50",
    "trajectory-150",
    "capacity",
)


class RtaxError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class OptionError(RtaxError):
    """A bad `[drivers_options.NAME]` value. `key` names the field and the message says
    only what is wrong with it: the profile layer names the rest, once, with its line
    (`FILE:LINE: drivers_options.NAME.KEY: message`)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class PhaseFailure(Exception):
    """A phase could not complete; `kind` (one of the closed set `ErrorKind`) is the
    machine-readable reason, `message` the human one. The engine decides by kind only."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = ErrorKind(kind)  # a plain string of a known kind is taken; others raise
        self.message = message


class ProbeFailed(PhaseFailure):
    """Ready's probe `true` returned `rc`, not 0: the status kept, so that the engine tells
    the OOM killer's SIGKILL in a batch with a memory budget from another failure."""

    def __init__(self, rc: int) -> None:
        super().__init__(ErrorKind.PROBE_FAILED, f"probe `true` returned {rc}")
        self.rc = rc


class SubstrateLost(PhaseFailure):
    """The substrate (daemon, host) went away; later trials of it may fail fast."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.SUBSTRATE_LOST, message)


class HostLost(PhaseFailure):
    """The connection to a remote host dropped; its trials fail until it is back."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.HOST_LOST, message)


def shell_rc(rc: int | None) -> int | None:
    """An exit status as a shell reports it: a process killed by signal N (which a
    parent sees as -N, e.g. the exec channel of `local`) is 128 + N, as agents record it.
    A replay's fidelity compares a step's status so (the report and the console)."""
    return 128 - rc if rc is not None and rc < 0 else rc


class StepTarget(Protocol):
    """What `Step.perform` needs of an environment: one action through its channel.
    `drivers.base.Environment` is one; the model, the bottom layer, imports no driver
    (pyproject's import-linter layers), so it names the method, not the class."""

    async def action(self, step: Step, timeout: float | None) -> ActionResult: ...


@dataclass(frozen=True)
class Step:
    """One action of a workload: argv run in the environment's workspace."""

    argv: tuple[str, ...]
    expect_rc: int | str = 0  # an int, or "nonzero"
    expect_out: str | None = None  # substring the output must contain
    timeout_s: float | None = None

    def matches(self, rc: int, output: bytes) -> bool:
        if self.expect_rc == "nonzero":
            rc_ok = rc != 0
        else:
            rc_ok = rc == self.expect_rc
        if not rc_ok:
            return False
        if self.expect_out is not None:
            return self.expect_out.encode() in output
        return True

    async def perform(self, env: StepTarget, timeout: float | None) -> ActionResult:
        """Run the step in `env` (an `Environment`): one action through its channel. A
        replayed file edit overrides this (a read, then a write, through the same channel)."""
        result: ActionResult = await env.action(self, timeout)
        return result

    def observed(self, rc: int | None, dur_ns: int, remote_ns: int | None) -> dict[str, Any]:
        """Fields the step adds to its `action` event beyond the common ones (a replayed
        step: the recorded exit code, whether it was killed at the timeout); none here.
        `remote_ns`: the environment's own duration of the step, where it has one."""
        return {}


@dataclass(frozen=True)
class Workload:
    name: str
    steps: tuple[Step, ...]
    files: str | None = None  # asset name copied into each fresh workspace
    needs_assets: bool = False
    description: str = ""
    # Run when a capacity batch's barrier releases, through the cell's channel: it makes
    # the environment let go of what it holds (the capacity workload's held memory).
    release: Step | None = None
    # A replay of real agent trajectories (`[workloads.NAME] trajectory = ...`): what its
    # trials record in `trial_start.replay`; with several trajectories, trial k of a cell
    # runs `variants[k % len(variants)]` (each a one-trajectory workload of the same name).
    replay: ReplaySource | None = None
    variants: tuple[Workload, ...] = ()


@dataclass(frozen=True)
class ReplaySource:
    """Where a replay workload comes from, and what of it is not replayed."""

    trajectory: str  # the file (or conversation directory), or the directory named
    format: str  # the trajectory format, or "mixed" for a directory of several
    steps: int  # the trajectory's steps (calls), replayed or not
    skipped: int  # steps not replayed (`other` steps, edits whose arguments say nothing)
    allow_unisolated: bool = False  # the profile lets it run on `local` (no boundary)
    repo: str | None = None  # the workspace's source (a git directory or tarball)
    commit: str | None = None
    project: str | None = None  # or NAME==VERSION's source distribution from `index`
    index: str | None = None
    # Where the agent worked (its first recorded cwd, else the common directory of the
    # files it named): the workspace is shown there too, when `at_root` and the path is
    # one an environment may have (`workspace_alias_problem`).
    root: str | None = None
    at_root: bool = True

    @property
    def source(self) -> str:
        """What the workspace holds, as the report names it."""
        if self.project is not None:
            return f"{self.project} (index)"
        if self.repo is not None:
            name = self.repo.rstrip("/").rsplit("/", 1)[-1]
            return f"{name}@{self.commit}" if self.commit else name
        return "attrs assets"

    @property
    def alias(self) -> str | None:
        """The path at which environments show the workspace too, or None."""
        if not self.at_root or self.root is None:
            return None
        return None if workspace_alias_problem(self.root) else self.root

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "trajectory": self.trajectory,
            "format": self.format,
            "steps": self.steps,
            "skipped": self.skipped,
            "source": self.source,
        }
        if self.root is not None:
            out["root"] = self.root
        return out


# The top directories an environment's own system lives in: the workspace is never
# shown at or under one of them (a link there would hide, or replace, what the
# environment runs on); under these, only deeper than the directory itself. `.rtax` is
# rtax's own (stage's init and shell, a VM's agent), read-only: a link there failed every
# environment of a replay.
SYSTEM_DIRS = frozenset(
    ".rtax bin boot dev etc lib lib32 lib64 libx32 proc run sbin sys tmp usr var workspace".split()
)
HOME_DIRS = frozenset("home media mnt opt root srv".split())
# What rtax puts at an environment's top level starts so (`/.rtax`, a container's
# `/.rtax-init`): one rule for every name rtax has or will add there, not a list.
RTAX_OWN = ".rtax"


def workspace_alias_problem(path: str) -> str | None:
    """Why the workspace may not also be shown at `path` inside an environment, or None.
    The path comes from a trajectory (what a model ran): it must be absolute and plain
    (no `.`, `..`, empty part or odd character), not a system directory or under one."""
    if not path.startswith("/") or len(path) > 255:
        return "not an absolute path"
    parts = path.split("/")[1:]
    if not parts or any(p in ("", ".", "..") for p in parts):
        return "not a plain absolute path (empty, `.` or `..` parts)"
    if any(not (c.isalnum() or c in "._-+@~,") for p in parts for c in p):
        return "has characters other than letters, digits and ._-+@~,"
    if parts[0] in SYSTEM_DIRS:
        return f"/{parts[0]} is the environment's own system"
    if parts[0].startswith(RTAX_OWN):
        return f"/{parts[0]} is rtax's own (every top-level name starting {RTAX_OWN})"
    if parts[0] in HOME_DIRS and len(parts) < 2:
        return f"/{parts[0]} itself is the environment's own"
    return None


# Every environment of every driver gets these unless the profile's `[limits]` says
# otherwise; "no limit" is never a silent default (red team B7: 5,000 `sleep`s all
# started on a profile without `[limits]`). Chosen for one coding agent's rollout:
# - pids 1024: a build (`make -j`, pytest-xdist) and an agent's shells stay far below
#   it; a fork bomb stops at it instead of at the host's pid table;
# - memory 4096 MiB: a test suite, a compiler or a language server fit; a runaway
#   allocation is OOM-killed in its environment instead of by the host's OOM killer;
# - cpus 1.0: an agent's tool calls run one at a time; what the shipped profiles use,
#   and a CPU count that docker accepts on any host (it refuses more than the host has);
# - workspace 2048 MiB: a repository checkout, its dependencies and build outputs; a
#   trial's writes stop there instead of filling the host's disk (B8).
DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MIB = 4096
DEFAULT_PIDS = 1024
DEFAULT_WORKSPACE_MIB = 2048
# the value that lifts a limit, in a profile and in the recording's header (None here)
UNLIMITED = "unlimited"
LIMIT_KEYS = ("cpus", "memory_mib", "pids", "workspace_mib")


@dataclass(frozen=True)
class Limits:
    """An environment's limits; None is unlimited (said so explicitly by a profile)."""

    cpus: float | None = DEFAULT_CPUS
    memory_mib: int | None = DEFAULT_MEMORY_MIB
    pids: int | None = DEFAULT_PIDS
    workspace_mib: int | None = DEFAULT_WORKSPACE_MIB  # the workspace's size

    @classmethod
    def none(cls) -> Limits:
        """No limit at all (a test's or a check's own environment)."""
        return cls(cpus=None, memory_mib=None, pids=None, workspace_mib=None)

    def unlimited(self) -> list[str]:
        """The keys without a limit."""
        return [k for k in LIMIT_KEYS if getattr(self, k) is None]

    def to_json(self) -> dict[str, Any]:
        """Every key, an unlimited one as "unlimited" (the header's and a profile's form)."""
        return {k: UNLIMITED if getattr(self, k) is None else getattr(self, k) for k in LIMIT_KEYS}


def vm_size(limit: float | None, default: float, option: int) -> int:
    """A VM's vCPUs or MiB of RAM: the limit (whole, at least one) when the profile set
    one; at the default limit, the driver's own option (`vcpus`, `memory_mib`) up to
    it, so that a guest sized by its options stays so and never exceeds the default;
    "unlimited": the option."""
    if limit is None:
        return option
    if limit == default:
        return min(option, max(1, int(limit)))
    return max(1, int(limit))


@dataclass(frozen=True)
class Timeouts:
    create: float = 60.0
    ready: float = 60.0
    action: float = 120.0
    teardown: float = 60.0
    barrier: float = 120.0


# How a cell's trials get their environment: `cold` (created and torn down by the
# trial) or `pool` (acquired ready from a warm pool, released for reset; engine.pool).
MODES = ("cold", "pool")


@dataclass(frozen=True)
class Cell:
    host: str
    driver: str
    workload: str
    channel: str
    mode: str = "cold"
    arrival: str = "sequential"  # model.arrivals: sequential, burst:N, rate:R
    image: str = ""  # drivers.toolkit.delivery: cached, pull, lazy ("": no image modes)

    @property
    def id(self) -> str:
        """`host/driver/workload/channel`, with `+pool` on the channel's part for a pooled
        cell, `~MODE` for an image mode (in a run that lists them) and `@PATTERN` at the end
        for an arrival pattern other than sequential: the mode and the pattern are parts of
        the cell's name, and a cold sequential cell's id is what it was."""
        base = f"{self.host}/{self.driver}/{self.workload}/{self.channel}"
        if self.mode != "cold":
            base += f"+{self.mode}"
        if self.image:
            base += f"~{self.image}"
        return base if self.arrival == "sequential" else f"{base}@{self.arrival}"


@dataclass(frozen=True)
class EnvSpec:
    """What a driver needs to build one environment."""

    cell: Cell
    workload: Workload
    limits: Limits
    workspace_src: str | None = None  # a directory copied into the workspace
    env: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str | None = None  # a budget cgroup to nest under (capacity)
    label: str = ""  # run id, carried by everything the driver creates
    # Where the environment shows its workspace too (a link to /workspace), for a replay
    # whose agent worked at that path; checked by `workspace_alias_problem`. Drivers that
    # say `places_workspace_alias` honour it; the others leave it out.
    workspace_alias: str | None = None
    # The image mode of the environment's root (drivers.toolkit.delivery), in a run that
    # lists image modes; None: the driver's usual root, delivered before the run.
    image: str | None = None

    def __post_init__(self) -> None:
        # held before anything carrying the label exists: `rtax cleanup` spares it
        from rtax_tui.model import runlock

        runlock.hold(self.label)


# What rtax keeps of one action's output, on every driver and channel (issue 19: a step
# is hostile, and output kept whole would let `yes` grow rtax until the host runs out of
# memory): its first OUTPUT_LIMIT bytes. The rest is still read, so the step is never
# blocked on a full pipe and ends on its own with its real exit status, then discarded
# and counted (`ActionResult.dropped`, the action event's `out_dropped`); the shell
# channel reads on to its frame's end, so the next step runs as after any other. Read at
# each action (an `OutputSink` made then), so a test may patch it.
OUTPUT_LIMIT = 16 << 20
# What a channel's reader (a shell's stdout, a VM agent's socket) holds at most before
# the reading side takes it (`drivers.shellframe.read_frame`): asyncio's StreamReader
# limit, a CredReader's and the SSH reader's buffer. Read when a reader is made.
READ_LIMIT = 16 << 20
# What `Host.run` keeps of rtax's own commands (not an action's output): all of it.
UNCAPPED = 1 << 62


def sink_limit(capped: bool) -> int | None:
    """An `OutputSink`'s limit for `Host.run(capped=...)`: None (OUTPUT_LIMIT, read when
    the sink is made) for an action's output, UNCAPPED for rtax's own commands."""
    return None if capped else UNCAPPED


@dataclass
class ActionResult:
    rc: int
    output: bytes  # the first OUTPUT_LIMIT bytes of what the step printed
    remote_ns: int | None = None
    dropped: int = 0  # the bytes it printed past OUTPUT_LIMIT: read, counted, not kept


class OutputSink:
    """One action's output as it is read: the first `limit` bytes (OUTPUT_LIMIT by
    default) kept, the rest only counted (`dropped`)."""

    __slots__ = ("_buf", "dropped", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = OUTPUT_LIMIT if limit is None else limit
        self._buf = bytearray()
        self.dropped = 0

    def add(self, data: bytes | bytearray | memoryview) -> None:
        room = self.limit - len(self._buf)
        if len(data) <= room:
            self._buf += data
            return
        if room > 0:
            self._buf += data[:room]
            self.dropped += len(data) - room
        else:
            self.dropped += len(data)

    @property
    def full(self) -> bool:
        return len(self._buf) >= self.limit

    def kept(self) -> bytes:
        return bytes(self._buf)
