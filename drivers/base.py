"""The driver contract: an environment goes create -> ready -> actions -> teardown.

The engine times every call; drivers only do the work. A driver that can see
finer steps wraps them in `self.sub("name")`, which the engine times too.
"""

from __future__ import annotations

import asyncio
import shutil
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from rtax_tui.hosts import Host
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Table, options_table, read_options
from rtax_tui.model.spec import (
    ActionResult,
    Cell,
    EnvSpec,
    Limits,
    PhaseFailure,
    ProbeFailed,
    Step,
    Workload,
)

SubTimer = Callable[[str], AbstractAsyncContextManager[None]]


@asynccontextmanager
async def _no_timer(name: str) -> AsyncIterator[None]:
    yield


@dataclass(frozen=True)
class Problem:
    """Why a driver cannot run here, and what would fix it."""

    reason: str
    fix: str


PROBE = Step(argv=("true",))

ImageLog = Callable[[str], None]


@dataclass(frozen=True)
class ImageRecipe:
    """The image a driver's environments start from, built on this machine (no registry).

    `kind` names the image for `rtax images build --driver`: drivers that share one image
    share its kind (both VM drivers boot the one guest, `vm`). `build(force, log)` builds
    it (or finds it built, unless `force`) and returns what it made (tags or paths);
    raises `RtaxError` with the reason when it cannot."""

    kind: str
    build: Callable[[bool, ImageLog | None], list[str]]


@dataclass(frozen=True)
class DaemonNeed:
    """The daemon a driver's environments are made through: its name (as `ps` shows it)
    and the command a person runs to start it (doctor's fix, the console's hint, and what
    the tests run when it does not answer)."""

    name: str
    start: str


@dataclass(frozen=True)
class NoOptions:
    """A driver without options: its `[drivers_options.NAME]` table takes no key."""


class Environment(ABC):
    """One trial's environment. `teardown` must undo whatever was done, even partly."""

    def __init__(self, driver: Driver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        self.driver = driver
        self.spec = spec
        self.sub: SubTimer = sub or _no_timer
        self.channel = spec.cell.channel

    async def before_image(self) -> None:
        """Put the host in the state the trial's image mode starts from (a pull's local
        copy removed, a cached one present), before `deliver_image`: not the trial's cost,
        recorded as the `image.before` sub-phase and left out of its phases and
        orchestration. By default nothing. Raises `PhaseFailure`."""
        return None

    async def deliver_image(self) -> None:
        """Deliver the environment's root by `spec.image` (`drivers.toolkit.delivery`:
        cached, pull or lazy), before `create`: only called, timed as the `image` phase,
        in a run that lists image modes, and only with a mode in `Driver.image_modes`.
        Whatever it mounted or fetched, `teardown` removes. Raises `PhaseFailure`."""
        raise PhaseFailure(ErrorKind.ERROR, f"{self.driver.name}: no image modes")

    def image_report(self) -> dict[str, Any] | None:
        """After teardown, what the image phase delivered: the `image` event's {mode,
        fetched, requests, size} (the bytes counted by the content server), or None."""
        return None

    @abstractmethod
    async def create(self) -> None:
        """Make the environment: what it runs in, its workspace (`spec.workspace_src`
        copied in), its limits (`spec.limits`; "unlimited" only where asked) and, for the
        shell channel, the channel itself. Returns nothing; the engine times it.

        Raises `PhaseFailure(kind, message)` for a failure the driver understands (an
        image missing, a daemon error), `SubstrateLost` when the daemon or host went away
        (later trials then fail fast until `Driver.check()` passes again). May be
        cancelled at any await (a timeout, a stop): whatever it made so far must then
        still be found by `teardown`, so record a resource before awaiting its creation.
        A call into a daemon goes inside `model.waits.waiting_on(...)`, so that a timeout
        names it."""

    async def ready(self) -> None:
        """Return once a first command can run (by default: the probe command `true`
        returns 0 through the cell's channel). Raises and may be cancelled as `create`."""
        res = await self.action(PROBE, None)
        if res.rc != 0:
            raise ProbeFailed(res.rc)

    @abstractmethod
    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        """Run one step through the cell's channel and return its exit status and output
        (`ActionResult`). A step that fails is a result (rc != 0), not an exception; the
        channel stays usable after it.

        The status must reach rtax through something no step can write (see
        `Driver.integrity`): a workload is hostile and will try to make a later step's
        failure read as a success. `timeout` is the engine's for this step (None: none);
        the engine enforces it by cancelling, and after a timeout the shell channel is not
        reused (its state is unknown) while the exec channel is. Raises `PhaseFailure`
        when the channel broke (`env_lost`: the environment's init is gone),
        `SubstrateLost` as `create`."""

    @abstractmethod
    async def teardown(self) -> None:
        """Remove everything the environment made, even partly (after a failed or
        cancelled create, after a timeout, with a step's children still running):
        processes, cgroups, workspaces, containers, VMs. Idempotent: a second call does
        nothing. Never acts as root on a path the environment controls (hosts.safefs).
        Raises `PhaseFailure` when something could not be removed, naming it."""

    # -- warm pools (engine.pool) ---------------------------------------------
    async def reset_clean(self) -> None:
        """Give the next trial a fresh environment under the same pool entry: a new
        instance of every surface a step can write (filesystems, /dev, IPC namespace,
        init with its starting limits and priority), not a walk over the old ones, so
        nothing the last trial changed remains (the probe's `pool_reuse_clean` compares
        the environment's fingerprint fresh and after the reset, engine.probe
        .fingerprint). A driver that cannot replace does not offer `clean`. Only called
        when `Driver.pool_resets` says `clean` is supported for this channel."""
        raise PhaseFailure(ErrorKind.RESET_UNSUPPORTED, f"{self.driver.name}: no clean reset")

    async def reset_snapshot(self) -> None:
        """Restore this environment from its snapshot, in place (as `reset_clean`)."""
        raise PhaseFailure(ErrorKind.RESET_UNSUPPORTED, f"{self.driver.name}: no snapshot reset")

    def cpu_ns(self) -> int | None:
        """CPU time the substrate attributes to this environment so far (e.g. its cgroup's
        usage), or None when the driver cannot tell. The pool records it per piece of work."""
        return None

    def memory_bytes(self) -> int | None:
        """Memory the substrate charges to this environment now (e.g. its cgroup's usage,
        page cache and tmpfs included), or None when the driver cannot tell. The pool
        records it for an environment waiting ready (what a warm pool holds)."""
        return None


# Why a reset is not offered, per reset; None means supported. `recreate` needs nothing of
# a driver (create and teardown), so every driver has it.
RESET_UNSUPPORTED = "not supported by this driver (the pool uses recreate)"


class Driver(ABC):
    name: str = ""
    channels: tuple[str, ...] = ("exec", "shell")
    # True when the driver does all its work through `self.host` (so it runs on an SSH
    # host); a driver that touches the controller's own files or sockets leaves it False.
    runs_remote: bool = False
    # The boundary checks (`rtax_tui.model.checks.CHECKS`) this driver states that it keeps:
    # escape attempts blocked, guarantees held. `rtax probe` measures every check and
    # reports each promise it finds broken. A driver that states nothing promises nothing.
    boundary: frozenset[str] = frozenset()
    # -- what the driver says about itself, read by the commands, the console (through the
    # commands), the images, doctor and the tests; nothing else names a concrete driver.
    # The image it starts from (None: none, e.g. a process on the host).
    image_recipe: ClassVar[ImageRecipe | None] = None
    # The daemon its environments are made through (None: none).
    daemon: ClassVar[DaemonNeed | None] = None
    # After an action's timeout the shell channel is never reused (its state is unknown);
    # the exec channel is, unless it shares one stream with every action (a VM's agent).
    exec_reusable_after_timeout: ClassVar[bool] = True
    # Its environments boot a kernel (a create takes seconds): the contract suite
    # cancels such a create at fewer points.
    boots_a_kernel: ClassVar[bool] = False
    # What its environments leave on the host to look for, besides workspaces, cgroups and
    # processes under a workspace: "containers" (labelled `rtax.run=<label>` on an engine),
    # "domains" (libvirt's, named after the label), "monitors" (a process named
    # `rtax-<label>-...`: QEMU, conmon). Tests and the contract suite read it.
    leaves: ClassVar[frozenset[str]] = frozenset()
    # The option that picks how the driver runs, with its values: the contract suite runs
    # the driver once per value (e.g. SWE-ReX's deployment). None: one way.
    variants: ClassVar[tuple[str, tuple[str, ...]] | None] = None
    # It shows the workspace at `EnvSpec.workspace_alias` too (a link to /workspace made
    # as the environment is created), so that a replay's `cd /testbed` finds it.
    places_workspace_alias: bool = False
    # The image modes `Environment.deliver_image` delivers (drivers.toolkit.delivery.MODES); none:
    # the driver's root is on the host before the run, and a run with image modes refuses it.
    image_modes: ClassVar[tuple[str, ...]] = ()
    # Its pull fetches from a registry (on loopback, behind the run's content server).
    image_registry: ClassVar[bool] = False

    # Its options, declared once: a frozen dataclass of `model.schema.option` fields (each
    # with its type, default, allowed values and help). A profile's
    # `[drivers_options.NAME]` table is checked against it and becomes `self.opts`, of
    # that type (a subclass narrows the annotation); docs/drivers.md's options tables are
    # generated from it (scripts/driver-options-doc).
    options_type: ClassVar[type] = NoOptions
    opts: Any

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        self.host = host
        self.opts = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> Any:
        """The `[drivers_options.NAME]` table checked against `options_type`, as one:
        a mistake is an `OptionError` naming the key, before any host is reached (the
        profile layer adds the file and the line)."""
        return read_options(cls.options_type, options)

    @classmethod
    def options_table(cls) -> Table:
        """The options it declares, as the schema's `Table`."""
        return options_table(cls.options_type, cls.name)

    async def prepare_images(self, workloads: list[Workload], modes: tuple[str, ...]) -> None:
        """Before a run with image modes, once: what its trials' image phases deliver from
        made ready (an image built, pushed to the run's registry, mounted for `cached`), so
        that no trial pays for the server's first preparation. Raises RtaxError. By
        default nothing (a driver without image modes)."""
        return None

    @abstractmethod
    async def check(self) -> list[Problem]:
        """Empty when the driver can run on its host, else each reason with its fix
        (`rtax doctor` prints them; a run refuses the driver before any trial). Never
        raises for a machine that lacks something: that is a `Problem`."""

    async def check_workloads(self, workloads: list[Workload]) -> list[Problem]:
        """Empty when the driver can run these workloads (after `check()` passed);
        e.g. the images they need exist."""
        return []

    def daemon_call(self) -> tuple[str, str, Callable[[], Awaitable[object]]] | None:
        """The daemon this driver's creates wait on, and one cheap call into it that a
        create pays too: (daemon, call, the call). `rtax doctor` times it and says when the
        daemon is slow. None (the default): no daemon."""
        return None

    def integrity(self, channel: str) -> str | None:
        """None when a step's exit status, output and timing reach rtax on `channel`
        through something no step can write (so no step can make a later one's failure
        read as a success; the probe's `result_integrity` checks it), else why not. The
        default states nothing."""
        return "not stated by this driver"

    def promised_checks(self) -> frozenset[str]:
        """The checks promised with this driver's options (`boundary` unless an option
        opens a hole, e.g. a container with a network)."""
        return self.boundary

    async def facts(self) -> dict[str, Any]:
        """Versions of the substrate software, for the recording header."""
        return {}

    def pool_resets(self, channel: str) -> dict[str, str | None]:
        """The warm pool's resets for `channel`: `recreate`, `clean`, `snapshot`, each
        None when supported, else why not (`rtax doctor` prints it). A driver that
        offers `clean` or `snapshot` overrides the Environment's `reset_*` too."""
        return {"recreate": None, "clean": RESET_UNSUPPORTED, "snapshot": RESET_UNSUPPORTED}

    @abstractmethod
    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        """A new, not yet created environment for one trial (`spec`: its cell, workload,
        limits and run label); `sub` times its sub-phases. Does no I/O."""

    async def first_channel_failing(self, hostname: str) -> tuple[str, str] | None:
        """For `check()` of a sandbox that names itself `hostname`: (channel, what went
        wrong) for the first channel whose throw-away environment (`try_environment`)
        could not write its workspace and say that name; None when every channel could."""
        for channel in ("exec", "shell"):
            err = await self.try_environment(
                channel,
                Step(("sh", "-c", "test -w /workspace && hostname")),
                lambda r: r.rc == 0 and r.output.strip() == hostname.encode(),
            )
            if err:
                return channel, err
        return None

    async def try_environment(
        self, channel: str, step: Step, ok: Callable[[ActionResult], bool]
    ) -> str | None:
        """One throw-away environment through create, ready and `step`, for `check()`:
        None when `ok` accepts the step's result, else what went wrong."""
        from rtax_tui.model import runlock

        spec = EnvSpec(
            cell=Cell("local", self.name, "check", channel),
            workload=Workload("check", ()),
            limits=Limits(),
            # this process's own: a label shared by every rtax would let one run's reaper
            # (after a kill -9) remove another live run's check environment by its label
            label=f"check-{runlock.owner()}",
        )
        env = self.environment(spec)
        try:
            await asyncio.wait_for(env.create(), 30)
            await asyncio.wait_for(env.ready(), 30)
            res = await env.action(step, 30)
            if not ok(res):
                return f"a command in the environment gave rc {res.rc}: {res.output[-300:]!r}"
            return None
        except PhaseFailure as exc:
            return exc.message
        except (OSError, TimeoutError) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            try:
                await env.teardown()
            except Exception:
                pass

    async def cleanup(self, label: str | None = None) -> int:
        """Remove leftovers of earlier runs (all rtax's, or one run's); return how many."""
        return 0


def which(cmd: str) -> str | None:
    return shutil.which(cmd)
