"""Ray hosts: a run's trials on the nodes of a Ray cluster, each node running rtax's engine.

`--host ray:auto`, `--host ray://ADDRESS` or a profile's `[hosts.NAME] ray = "ADDRESS"`
names a cluster, not a machine: it becomes one host per alive node (`NAME-<node id>`,
`ray-<node id>` from the command line; `nodes = N` takes the first N). On each, an actor
(`engine.nodeengine.NodeEngine`) is placed with node affinity (not soft: it runs there
or not at all) and runs the run's drivers on the node's own host, so every phase is
timed there with `time.monotonic_ns()`. The controller keeps the scheduling (the plan's
seeded order, its concurrency per host and for the run, warm-ups) and sends each trial
to its node's actor; the trial's events come back in one batch when it ends. Each
node's clock is synchronised as an SSH host's is (hosts.clocksync, samples over the
actor), recorded as `clock` events; the node stamps its events on the run's clock
through that offset. The recording is a local run's format, one `host` per node.

What a node sends is checked before it is recorded (`check_batch`): the events of the
trial asked for only, each fitting the schema, its start and end where they belong, no
duration longer than the controller saw the trial take, no time outside it. A batch
that fails is not recorded; the trial fails, saying why. A node (or its actor) that
dies makes its trial in flight `host_lost` with Ray's reason, and its later trials too
(a lost node is not reconnected); the run goes on with the others, and the node's own
reaper ends what the actor's environments left.

A capacity batch spans the nodes (`NodeTrials` is the batch's `BatchSpan`): `size`
environments of a cell group on every node, at one barrier on the controller. Each
node's part is followed by a `NodeBatch`: the node's engine logs its environments'
arrivals, failures and let-gos (engine.nodeengine.NodeBarrier), the controller reads the
log (a long poll) and takes from it only what concerns the trials it sent to that node,
each step once and in order (arrive or fail, then let go after the release): a node
cannot settle another node's trial, nor release the batch, which the controller does once
every trial has arrived or failed (a lost node's trials fail at once), or at the deadline.
The release goes to every node; the node answers its own time of it, and its
environments' let-go times come in its log, each put on the run's clock through the
node's offset and held within what the controller saw (after the node received the
release, before the controller heard of it). An arrival the node's clock puts after a
deadline's release is not counted (locally the deadline interrupts a trial on its way):
its trial fails, saying so.

Security (docs/remote-hosts.md): a Ray cluster has no authentication; whoever reaches
its GCS runs code as the cluster's user. rtax never starts a head (it only connects),
and connects only to a loopback address unless the profile's `[hosts.NAME]` says
`trusted = true`.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.lifecycle import PROGRAMS_TIMEOUT_S
from rtax_tui.hosts.base import CompletedProcess, Host
from rtax_tui.hosts.clocksync import ClockSync, RemoteClock, from_samples
from rtax_tui.model import events
from rtax_tui.model.errors import ErrorKind, TrialError
from rtax_tui.model.events import check_event, encode
from rtax_tui.model.fold import verdict
from rtax_tui.model.netaddr import address_host, is_loopback
from rtax_tui.model.spec import PhaseFailure, RtaxError

if TYPE_CHECKING:
    from rtax_tui.engine.capacity import Barrier
    from rtax_tui.engine.lifecycle import TrialRunner
    from rtax_tui.engine.plan import PlannedBatch, PlannedTrial
    from rtax_tui.engine.profile import Profile
    from rtax_tui.model.spec import Cell, Workload

INSTALL_HINT = "Ray is not installed here: pip install -e '.[ray]' (scripts/bootstrap does)"
CLOCK_SAMPLES = 8
CLOCK_SYNC_S = 30.0
ACTOR_START_S = 120.0  # placing an actor: a worker process started on its node
BATCH_EVENTS_MAX = 100_000  # the most events one trial's batch may hold
NODE_MARGIN_S = 10.0  # a trial's node answers within its timeouts' sum and this, or is lost
SLACK_NS = 5_000_000  # what a node's times may exceed the controller's view by, beyond err
NEWS_WAIT_S = 5.0  # a long poll of a node's batch log returns after this at the latest
NEWS_KINDS = frozenset({"arrive", "fail", "let_go"})
# the events a node's trial sends; anything else in its batch is refused
TRIAL_EVENTS = frozenset({"trial_start", "phase", "action", "trial_end", "programs"})


@dataclass(frozen=True)
class RaySpec:
    """A Ray cluster named as a host: its address (`auto`, `HOST:PORT` of its GCS, or a
    Ray Client `ray://HOST:PORT`), its nodes' name prefix and what the profile says."""

    name: str
    address: str
    trusted: bool = False
    nodes: int | None = None
    concurrency: int | None = None


def spec_of(name: str, tables: dict[str, dict[str, Any]]) -> RaySpec | None:
    """The cluster a host name stands for, or None (an SSH host, `local`)."""
    if name == "ray:auto":
        return RaySpec("ray", "auto")
    if name.startswith("ray://"):
        if not address_host(name):
            raise RtaxError(f"host {name!r}: expected ray://HOST:PORT")
        return RaySpec("ray", name)
    t = tables.get(name)
    if t is None or "ray" not in t:
        return None
    return RaySpec(
        name,
        str(t["ray"]),
        trusted=bool(t.get("trusted", False)),
        nodes=t.get("nodes"),
        concurrency=t.get("concurrency"),
    )


def resolved(spec: RaySpec) -> str:
    """The address rtax will connect to. `auto` is RAY_ADDRESS, else the address in Ray's
    current-cluster file (`ray start` writes it) if this user owns it and no one else can
    write it: Ray's temp directory is writable by every user, and Ray's own `auto` also
    joins any cluster whose GCS process it sees, another user's included."""
    if spec.address != "auto":
        return spec.address
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        return env
    _ray()
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:  # Ray before 2.47
        from ray._private.utils import get_ray_address_file

    path = str(get_ray_address_file(None))
    why = current_cluster_file_wrong(path)
    if why is not None:
        raise RtaxError(f"host ray:auto: no Ray cluster of yours found ({why}); set RAY_ADDRESS")
    with open(path) as f:
        addr = f.read().strip()
    if not addr:
        raise RtaxError(f"host ray:auto: {path} is empty; set RAY_ADDRESS")
    return addr


def current_cluster_file_wrong(path: str) -> str | None:
    """Why Ray's current-cluster file is not to be read (None: it is this user's own)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"no {path}"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid != os.getuid():
        return f"{path} belongs to uid {st.st_uid}, not to you"
    if st.st_mode & 0o022:
        return f"{path} is writable by others"
    return None


def refuse_untrusted(spec: RaySpec, address: str) -> None:
    """A Ray cluster has no authentication: only a loopback one, unless trusted."""
    host = address_host(address)
    if is_loopback(host) or spec.trusted:
        return
    where = f"[hosts.{spec.name}]" if spec.name != "ray" else "a profile's [hosts.NAME] (ray = ...)"
    raise RtaxError(
        f"host {spec.name}: Ray at {address} is not on loopback and Ray has no authentication; "
        f"set trusted = true in {where} only for a cluster reachable by you alone"
    )


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RtaxError(INSTALL_HINT) from None
    return ray


_connected: str | None = None  # the address this process joined (one cluster per process)


def join(spec: RaySpec) -> str:
    """Connect this process to the cluster (never starting one): its address."""
    global _connected
    address = resolved(spec)
    refuse_untrusted(spec, address)
    ray = _ray()
    if _connected is not None:
        if _connected != address:
            raise RtaxError(f"host {spec.name}: one Ray cluster per run ({_connected} already)")
        return address
    local = is_loopback(address_host(address))
    from ray._private import ray_constants

    # Ray turns a loopback address into the machine's own (reachable from other
    # machines) before connecting; a cluster kept on loopback is then not found there
    was = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = was and not local
    try:
        ray.init(
            address=address,
            namespace="rtax",
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
            **({"_node_ip_address": "127.0.0.1"} if local else {}),
        )
    except Exception as exc:
        raise RtaxError(f"host {spec.name}: cannot join Ray at {address}: {_why(exc)}") from None
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was
    _connected = address
    return address


def leave() -> None:
    """Disconnect this process from the cluster (after every actor was ended)."""
    global _connected
    if _connected is not None:
        _connected = None
        _ray().shutdown()


def node_hosts(spec: RaySpec, profile: Profile) -> list[RayNodeHost]:
    """One host per alive node of the joined cluster (the first `nodes` of them)."""
    ray = _ray()
    alive = sorted(
        (n for n in ray.nodes() if n.get("Alive")),
        key=lambda n: (not n.get("Resources", {}).get("node:__internal_head__"), n["NodeID"]),
    )
    if spec.nodes is not None:
        alive = alive[: spec.nodes]
    if not alive:
        raise RtaxError(f"host {spec.name}: the Ray cluster has no alive node")
    return [
        RayNodeHost(f"{spec.name}-{n['NodeID'][:8]}", n["NodeID"], spec, profile) for n in alive
    ]


def is_ray_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("ray.")


class RayNodeHost(Host):
    """One node of a Ray cluster, through its actor: its facts, its clock, its drivers'
    checks and the trials it runs (`NodeTrials`). It runs no command for a driver on the
    controller: the node's engine does, on the node."""

    def __init__(self, name: str, node_id: str, spec: RaySpec, profile: Profile) -> None:
        self.name = name
        self.node_id = node_id
        self.spec = spec
        self.concurrency = spec.concurrency
        self.profile = profile
        self.actor: Any = None
        self.dead: str | None = None  # why the node (its actor) was lost
        self.clock: RemoteClock | None = None
        self.clock_error: str | None = None
        self._watch: Callable[[ClockSync], None] | None = None
        self._resync: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def lost(self) -> bool:
        return self.dead is not None

    @property
    def path_env(self) -> str:
        return "/usr/local/bin:/usr/bin:/bin"

    async def connect(self) -> None:
        """Place the node's engine (node affinity, not soft) and sync its clock."""
        if self.dead is not None:
            raise RtaxError(f"host {self.name}: lost ({self.dead})")
        if self.actor is not None:
            return
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rtax_tui.engine.nodeengine import NodeEngine

        actor_cls = ray.remote(NodeEngine)
        self.actor = actor_cls.options(
            num_cpus=0,
            max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
        ).remote(self.name, self.profile, self.profile.drivers)
        try:
            async with asyncio.timeout(ACTOR_START_S):
                await self.actor.now.remote()
        except Exception as exc:
            await self.close()
            raise RtaxError(f"host {self.name}: its engine did not start: {_why(exc)}") from None
        if await self.sync_clock() is not None:
            self._resync = asyncio.ensure_future(self._resync_loop())

    async def _resync_loop(self) -> None:
        while self.dead is None and self.clock_error is None:
            await asyncio.sleep(CLOCK_SYNC_S)
            await self.sync_clock()

    async def sync_clock(self, n: int = CLOCK_SAMPLES) -> ClockSync | None:
        """`n` samples (a, node's clock, b) over the actor (hosts.clocksync)."""
        if self.actor is None or self.dead is not None:
            return None
        async with self._lock:
            samples = []
            try:
                async with asyncio.timeout(10):
                    for _ in range(n):
                        a = time.monotonic_ns()
                        r = await self.actor.now.remote()
                        b = time.monotonic_ns()
                        if type(r) is not int:
                            self.clock_error = "the node's clock answered no integer"
                            return None
                        samples.append((a, r, b))
            except Exception as exc:
                self.clock_error = f"clock sync failed: {_why(exc)}"
                return None
            if self.clock is None:
                self.clock = RemoteClock()
            s = self.clock.add(from_samples(samples))
        if self._watch is not None:
            self._watch(s)
        return s

    def watch_clock(self, fn: Callable[[ClockSync], None] | None) -> None:
        self._watch = fn

    async def measure_rtt(self, n: int = 5) -> float | None:
        return None  # the clock's samples say it (`clock.rtt_ns`)

    async def facts(self) -> dict[str, Any]:
        f: dict[str, Any] = dict(await self.actor.facts.remote())
        f["ray"] = dict(f.get("ray") or {}, node_id=self.node_id, cluster=self.spec.name)
        if self.clock_error is not None:
            f["clock_error"] = self.clock_error
        return f

    async def check_driver(self, driver: str) -> list[tuple[str, str]]:
        """The driver's check, run by the node's engine on the node."""
        got = await self.actor.check.remote(driver)
        return [(str(r), str(f)) for r, f in got]

    async def check_workloads(self, driver: str, wl: list[Workload]) -> list[tuple[str, str]]:
        got = await self.actor.check_workloads.remote(driver, wl)
        return [(str(r), str(f)) for r, f in got]

    async def driver_facts(self, driver: str) -> dict[str, Any]:
        return dict(await self.actor.driver_facts.remote(driver))

    async def close(self) -> None:
        """The actor's reaper ends what is left; then the actor (and its process) goes."""
        if self._resync is not None:
            self._resync.cancel()
            self._resync = None
        actor, self.actor = self.actor, None
        if actor is None:
            return
        ray = _ray()
        if self.dead is None:
            try:
                async with asyncio.timeout(40):  # the reaper's cgroup retries: 30 s
                    await actor.close.remote()
            except Exception:
                pass
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass

    # -- what drivers would call on the controller: the node's engine calls its own --
    def _no(self) -> PhaseFailure:
        return PhaseFailure(
            ErrorKind.NOT_SUPPORTED, f"{self.name}: a Ray node runs its drivers on the node"
        )

    async def run(self, argv: Any, **kw: Any) -> CompletedProcess:
        raise self._no()

    async def spawn(self, argv: Any, **kw: Any) -> Any:
        raise self._no()

    async def kill(self, proc: Any) -> None:
        raise self._no()

    def release(self, proc: Any) -> None:
        raise self._no()

    async def make_workspace(self, prefix: str, *a: Any, **kw: Any) -> str:
        raise self._no()

    async def remove_tree(self, path: str) -> None:
        raise self._no()

    def track(self, kind: Any, value: str) -> None:
        raise self._no()

    def untrack(self, kind: Any, value: str) -> None:
        raise self._no()


def _resets_wrong(got: Any, cells: set[str], wanted: str) -> str | None:
    """Why a node's answer of its pools' resets is not taken, or None."""
    if not isinstance(got, dict) or set(got) != cells:
        return f"not one reset per pooled cell of the node: {got!r:.120}"
    for c, v in got.items():
        if not (isinstance(v, (tuple, list)) and len(v) == 2):
            return f"{c}: not (reset, why): {v!r:.80}"
        r, why = v
        if type(r) is not str or r not in (wanted, "recreate"):
            return f"{c}: reset {r!r:.40}, not {wanted} or recreate"
        if why is not None and type(why) is not str:
            return f"{c}: why {why!r:.40} is not a string"
        if (r == wanted) != (why is None):
            return f"{c}: reset {r} with why {why!r:.80}"
    return None


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def check_wire(ev: Any) -> str | None:
    """Why a node's event `ev` is not taken (`check_event`), or None; also an event the
    recording cannot hold: a node's answer is unpickled, so a field the schema does not
    name may be anything (a set, a tuple key, an int past 64 bits), and the writer's
    encoding would raise in the controller (the trial never recorded, the run said
    completed)."""
    why = check_event(ev)
    if why is not None:
        return why
    try:
        encode(ev)
    except (TypeError, ValueError) as exc:
        return f"not a JSON object: {str(exc)[:80]}"
    return None


def check_batch(
    batch: Any,
    pt: PlannedTrial,
    *,
    lo_ns: int,
    hi_ns: int,
    err_ns: int,
) -> str | None:
    """Why a node's batch for trial `pt` is not recorded, or None. `lo_ns`..`hi_ns`: the
    trial's time on the run's clock as the controller saw it (scheduled, answered);
    `err_ns`: the node clock's bound."""
    if not isinstance(batch, list) or not batch:
        return "no events"
    if len(batch) > BATCH_EVENTS_MAX:
        return f"{len(batch)} events (at most {BATCH_EVENTS_MAX})"
    slack = 2 * err_ns + SLACK_NS
    wall = hi_ns - lo_ns + slack
    top = 0
    for k, ev in enumerate(batch):
        why = check_wire(ev)
        if why is not None:
            return f"event {k}: {why}"
        if ev["type"] not in TRIAL_EVENTS:
            return f"event {k}: a {ev['type']!r} event is not a trial's"
        if ev.get("trial") != pt.id:
            return f"event {k}: of trial {ev.get('trial')!r}, not {pt.id}"
        t = ev.get("t_ns")
        if type(t) is not int or not lo_ns - slack <= t <= hi_ns + slack:
            return f"event {k}: t_ns {t!r} outside the trial's time ({lo_ns}..{hi_ns})"
        dur = ev.get("dur_ns")
        if dur is not None and (type(dur) is not int or not 0 <= dur <= wall):
            return f"event {k}: dur_ns {dur!r} longer than the trial took ({wall - slack} ns)"
        if ev["type"] == "phase" and "." not in ev["name"]:
            top += ev["dur_ns"]
    first, last = batch[0], batch[-1]
    cell = pt.cell
    if first["type"] != "trial_start" or last["type"] != "trial_end":
        return "not a trial_start ... trial_end"
    if sum(ev["type"] in ("trial_start", "trial_end") for ev in batch) != 2:
        return "more than one trial_start or trial_end"
    said = (first["cell"], first["host"], first["driver"], first["warmup"])
    if said != (cell.id, cell.host, cell.driver, pt.warmup):
        return f"trial_start says {said}, the plan {(cell.id, cell.host, cell.driver, pt.warmup)}"
    if top > wall:
        return f"its phases add up to {top} ns, more than the trial took ({wall - slack} ns)"
    return None


class NodeTrials:
    """The launcher of a run with Ray hosts: a trial of a node goes to its actor, any
    other to the local engine (`TrialRunner.run`)."""

    def __init__(self, nodes: dict[str, RayNodeHost], trials: TrialRunner) -> None:
        self.nodes = nodes
        self.trials = trials
        self.batches: dict[str, dict[str, NodeBatch]] = {}  # open batch -> node -> its part
        self._part: dict[int, NodeBatch] = {}  # a batch's trial -> its node's part
        self.pools: dict[str, NodePools] = {}  # node -> its warm pools, as followed here

    async def setup(self, workloads: dict[str, Workload]) -> None:
        """Give every node the run's id and workloads (a node that fails is lost)."""

        async def one(h: RayNodeHost) -> None:
            try:
                await h.actor.setup.remote(self.trials.run_id, workloads)
            except Exception as exc:
                h.dead = f"its engine failed to start the run: {_why(exc)}"

        await asyncio.gather(*(one(h) for h in self.nodes.values()))

    async def pool_resets(self, cells: list[Cell], wanted: str) -> dict[str, dict[str, str | None]]:
        """Per pooled cell of a node: the reset its node's pool will use (the node's
        driver decides, as a local pool's does), and why not `wanted`. A node may fall
        back to `recreate` (a fresh environment, never a weaker reset) and to nothing
        else: one that answers otherwise is lost."""
        out: dict[str, dict[str, str | None]] = {}

        async def one(h: RayNodeHost) -> None:
            mine = {c.id for c in cells if c.mode == "pool" and c.host == h.name}
            if not mine or h.dead is not None or h.actor is None:
                return
            try:
                async with asyncio.timeout(NODE_MARGIN_S):
                    got = await h.actor.pool_resets.remote(cells)
            except Exception as exc:
                if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                    raise
                h.dead = f"its pools' resets: {_why(exc)}"
                return
            why = _resets_wrong(got, mine, wanted)
            if why is not None:
                h.dead = f"its pools' resets: {why}"
                return
            for c, (r, fallback) in got.items():
                out[c] = {"reset": r, "fallback": fallback}

        await asyncio.gather(*(one(h) for h in self.nodes.values()))
        return out

    async def start_pools(self, cells: list[Cell], resets: dict[str, str], fill: bool) -> None:
        """Each node's warm pools of its pooled cells (`resets`: the reset each cell gets,
        as the controller decided it; a node that would give another refuses and is
        lost). `fill`: made now (eager ones filled), else each at its first trial."""
        emit = self.trials.emit

        async def one(h: RayNodeHost) -> None:
            if h.dead is not None or h.actor is None or h.clock is None:
                return
            mine = {c.id: resets[c.id] for c in cells if c.mode == "pool" and c.host == h.name}
            if not mine:
                return
            started = time.monotonic_ns()
            offset, _ = h.clock.offset_at(started)
            track = self.pools[h.name] = NodePools(h, mine, started - emit.t0)
            try:
                async with asyncio.timeout(NODE_MARGIN_S):
                    said = await h.actor.start_pools.remote(cells, resets, emit.t0 + offset, fill)
            except Exception as exc:
                if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                    raise
                if h.dead is None:
                    h.dead = f"its pools were not made: {_why(exc)}"
                return
            if said != mine:
                h.dead = f"its pools' resets {said!r:.200} are not the run's {mine!r:.200}"
                track.refused = h.dead

        await asyncio.gather(*(one(h) for h in self.nodes.values()))

    async def _pool_news(self, track: NodePools, method: str = "pool_news") -> str | None:
        """The node's pool events since the last answer, checked and recorded (None), or
        why not: then none is recorded and the node is lost."""
        host = track.host
        if host.dead is not None or host.actor is None or host.clock is None:
            return host.dead or "not connected"
        emit = self.trials.emit
        async with track.lock:  # the node's answers are taken in the order it gave them
            try:
                async with asyncio.timeout(NODE_MARGIN_S + self.trials.profile.timeouts.teardown):
                    got = await getattr(host.actor, method).remote()
            except Exception as exc:
                if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                    raise
                if host.dead is None:
                    host.dead = _why(exc) if is_ray_error(exc) else "its pools hang"
                return host.dead
            _, err = host.clock.offset_at(time.monotonic_ns())
            why = track.take(got, hi_ns=time.monotonic_ns() - emit.t0, err_ns=err)
            if why is not None:
                why = f"its pool sent events not recorded: {why}"
                if host.dead is None:
                    host.dead = why
                return why
            for ev in got:
                emit.forward(ev)
        return None

    async def close_pools(self) -> None:
        """Every node's pools torn down, their last events recorded (a lost node's
        environments are its reaper's). Again is nothing."""
        tracks = [t for t in self.pools.values() if not t.closed]
        for t in tracks:
            t.closed = True
        whys = await asyncio.gather(*(self._pool_news(t, "close_pools") for t in tracks))
        for t, why in zip(tracks, whys, strict=True):
            # an environment its node never said torn down (lost, refused, hung, or an
            # answer that left it out) is recorded so, with why: not gone in silence
            said = why or "its pools closed without a teardown of it"
            for cell, env in t.left():
                self.trials.emit(
                    events.pool(
                        host=t.host.name,
                        cell=cell,
                        env=env,
                        op="teardown",
                        dur_ns=0,
                        ok=False,
                        cpu_ns=0,
                        env_cpu_ns=None,
                        error=f"not torn down by node {t.host.name} ({said}): its reaper's",
                    )  # fmt: skip
                )

    def stop(self) -> None:
        for h in self.nodes.values():
            if h.actor is not None and h.dead is None:
                h.actor.stop.remote()

    async def launch(self, pt: PlannedTrial, scheduled_ns: int) -> None:
        host = self.nodes.get(pt.cell.host)
        if host is None:
            await self.trials.run(pt, scheduled_ns)
            return
        if self.trials.control.stopping:
            return
        prog = self.trials.progress
        prog.started += 1  # started and in flight from now, as a local trial's `_start`
        prog.in_flight += 1
        try:
            await self._on_node(host, pt, scheduled_ns)
        finally:
            prog.in_flight -= 1

    # -- capacity batches across the nodes (engine.capacity.BatchSpan) ------------------
    def open(self, batch: PlannedBatch, barrier: Barrier) -> None:
        """Follow each node's part of `batch` (before any of its trials is sent)."""
        parts: dict[str, NodeBatch] = {}
        for pt in batch.trials:
            host = self.nodes.get(pt.cell.host)
            if host is None:
                continue
            part = parts.get(host.name)
            if part is None:
                part = parts[host.name] = NodeBatch(host, batch.id, barrier)
            part.trials.add(pt.id)
            self._part[pt.id] = part
        self.batches[batch.id] = parts
        for part in parts.values():
            part.start()

    async def released(self, batch: PlannedBatch) -> dict[str, int | None]:
        """Each node's release lag (None: it never answered the release)."""
        parts = self.batches.get(batch.id, {})
        await asyncio.gather(*(p.release_answered() for p in parts.values()))
        return {name: p.release_lag_ns for name, p in parts.items()}

    async def close(self, batch: PlannedBatch) -> None:
        parts = self.batches.pop(batch.id, {})
        for pt in batch.trials:
            self._part.pop(pt.id, None)
        await asyncio.gather(*(p.close() for p in parts.values()))

    async def launch_in_batch(
        self, pt: PlannedTrial, scheduled_ns: int, barrier: Barrier, cgroup_parent: str | None
    ) -> None:
        """A capacity batch's trial: on its node, its part of the batch followed there."""
        part = self._part.get(pt.id)
        if part is None:  # not a node's: the local engine's barrier is the batch's own
            await self.trials.run(pt, scheduled_ns, barrier, cgroup_parent)
            return
        try:
            if self.trials.control.stopping:
                return
            prog = self.trials.progress
            prog.started += 1
            prog.in_flight += 1
            try:
                await self._on_node(part.host, pt, scheduled_ns, part)
            finally:
                prog.in_flight -= 1
        finally:
            part.settle(pt.id)

    async def _on_node(
        self,
        host: RayNodeHost,
        pt: PlannedTrial,
        scheduled_ns: int,
        part: NodeBatch | None = None,
    ) -> None:
        if host.dead is not None or host.actor is None or host.clock is None:
            why = host.dead or host.clock_error or "not connected"
            self._failed(
                pt, scheduled_ns, ErrorKind.HOST_LOST, f"node {host.name} lost: {why}", part
            )
            return
        emit = self.trials.emit
        offset, err = host.clock.offset_at(scheduled_ns)
        bound = self.bound_s(pt)
        args: tuple[Any, ...] = (pt, scheduled_ns + offset, emit.t0 + offset)
        if pt.cell.mode == "pool" and host.name in self.pools:
            self.pools[host.name].sent(pt.cell.id)
        if part is not None:
            args += (part.share,)
        try:
            async with asyncio.timeout(bound):
                batch = await host.actor.run_trial.remote(*args)
        except Exception as exc:
            if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                raise
            if host.dead is None:
                host.dead = (
                    f"no answer within {bound:g} s (the trial's timeouts and "
                    f"{NODE_MARGIN_S:g} s): its engine hangs"
                    if isinstance(exc, TimeoutError)
                    else _why(exc)
                )
            self._failed(
                pt, scheduled_ns, ErrorKind.HOST_LOST, f"node {host.name} lost: {host.dead}", part
            )
            return
        if batch == [] and self.trials.control.stopping:  # stopped before it began there
            self.trials.progress.started -= 1
            return
        lo, hi = scheduled_ns - emit.t0, time.monotonic_ns() - emit.t0
        refused = check_batch(batch, pt, lo_ns=lo, hi_ns=hi, err_ns=err)
        track = self.pools.get(host.name)
        if refused is None and pt.cell.mode == "pool":
            refused = await self._pooled(track, pt, batch)
        if refused is None and part is not None:
            await part.catch_up()  # what the node logged of the trial before it answered
            refused = part.check_trial(pt.id, batch)
        if refused is not None:
            self._failed(
                pt,
                scheduled_ns,
                ErrorKind.ERROR,
                f"node {host.name} sent events not recorded: {refused}",
                part,
            )
            return
        for ev in batch:
            emit.forward(ev)
        end = batch[-1]
        error = end["error"]
        self._count(
            pt,
            ok=bool(end["ok"]),
            valid=bool(end["valid"]),
            error=None if error is None else f"{error.get('kind')}: {error.get('message')}",
        )

    async def _pooled(
        self, track: NodePools | None, pt: PlannedTrial, batch: list[dict[str, Any]]
    ) -> str | None:
        """A pooled trial's answer: the environment it acquired was made or reset by the
        node's pool before (its events come first, each checked), or it is not recorded."""
        if track is None:
            return "a pooled trial of a node without pools"
        why = await self._pool_news(track)
        if why is not None:
            return why
        if any(e["type"] == "phase" and e["name"] == "acquire" and e["ok"] for e in batch):
            return track.acquired(pt.cell.id)
        return None

    def bound_s(self, pt: PlannedTrial) -> float:
        """How long a node may take to answer for a trial: every timeout the trial's
        phases run under on the node (its longest variant's steps), and a margin. Past
        it the node is lost: an engine that hangs (a stopped actor) must not hang the run."""
        to = self.trials.profile.timeouts
        wl = self.trials.workloads.get(pt.cell.workload)
        steps = 0.0
        for w in (wl, *(wl.variants if wl is not None else ())):
            if w is not None:
                total = sum(st.timeout_s or to.action for st in w.steps)
                if w.release is not None:
                    total += w.release.timeout_s or to.action
                steps = max(steps, total)
        programs = min(PROGRAMS_TIMEOUT_S, to.action)
        cap = self.trials.profile.capacity  # a batch's trial also waits at its barrier
        wait = 0.0 if pt.batch is None or cap is None else cap.deadline_s
        return to.create + to.ready + steps + programs + to.teardown + wait + NODE_MARGIN_S

    def _failed(
        self,
        pt: PlannedTrial,
        scheduled_ns: int,
        kind: str,
        message: str,
        part: NodeBatch | None = None,
    ) -> None:
        """A trial that a node did not (or could not) account for: its start (the
        lifecycle's own, `TrialRunner.start_event`), its time as orchestration, its end
        with the reason."""
        trials = self.trials
        emit = trials.emit
        wl = trials.workloads[pt.cell.workload]
        spec = trials.spec_for(pt.cell, None, wl)
        size = None
        if part is not None:
            size = part.share
            part.spoiled.add(pt.id)
        emit(trials.start_event(pt, scheduled_ns, wl, spec, size))
        emit(events.phase(pt.id, "orchestration", time.monotonic_ns() - scheduled_ns, True))
        err = TrialError("create", kind, message)
        emit(events.trial_end(pt.id, False, err))
        self._count(pt, ok=False, valid=False, error=f"{kind}: {message}")

    def _count(self, pt: PlannedTrial, *, ok: bool, valid: bool, error: str | None) -> None:
        """The progress counters a local trial's `_end` keeps (`launch` counted it started)."""
        prog = self.trials.progress
        cell = pt.cell
        prog.done += 1
        self.trials.ended += 1
        prog.per_cell_done[cell.id] = prog.per_cell_done.get(cell.id, 0) + 1
        if error is not None:
            prog.last_error = f"trial {pt.id} {cell.id}: {error}"
        v = verdict(pt.warmup, True, ok, valid)
        if v == "failed":
            prog.failed += 1
        elif v == "invalid":
            prog.invalid += 1


class NodeBatch:
    """One node's part of a capacity batch, as the controller follows it: the trials sent
    there (`trials`), what the node's log said of each (`apply`, checked: engine.raynodes'
    docstring), the release taken there and when the node received it."""

    def __init__(self, host: RayNodeHost, batch: str, barrier: Barrier) -> None:
        self.host = host
        self.batch = batch
        self.barrier = barrier
        self.trials: set[int] = set()
        self.arrived: set[int] = set()  # arrived, by the node's log
        self.settled: set[int] = set()  # arrived or failed, here
        self.cursor = 0  # the node's log entries taken so far
        self.release_lag_ns: int | None = None
        self.received_ns: int | None = None  # when the node received the release (our clock)
        self.late: set[int] = set()  # arrived, by the node's clock after a deadline's release
        self.refused: str | None = None  # the first log entry not taken, and why
        self.spoiled: set[int] = set()  # trials whose events were not recorded
        self._tasks: list[asyncio.Task[None]] = []
        self._released = asyncio.Event()  # the release answered (or never will be)

    @property
    def share(self) -> int:
        return len(self.trials)

    def start(self) -> None:
        self._tasks = [
            asyncio.ensure_future(self._follow()),
            asyncio.ensure_future(self._release()),
        ]

    async def _news(self, wait_s: float) -> None:
        actor = self.host.actor
        if actor is None or self.host.dead is not None:
            return
        at = self.cursor
        try:
            async with asyncio.timeout(wait_s + NODE_MARGIN_S):
                got = await actor.barrier_news.remote(self.batch, at, wait_s, self.share)
        except Exception as exc:
            if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                raise
            if self.host.dead is None:
                self.host.dead = _why(exc) if is_ray_error(exc) else "its batch log hangs"
            self.lost()
            return
        self.apply(at, got)

    async def _follow(self) -> None:
        """The node's log, as it grows, until the node is lost or the batch closed."""
        while self.host.dead is None:
            await self._news(NEWS_WAIT_S)
            if self.settled == self.trials and not self.trials & self.barrier.holding:
                return

    async def catch_up(self) -> None:
        """What the node logged so far (a trial's answer may overtake the long poll)."""
        await self._news(0.0)

    async def _release(self) -> None:
        """The controller's release, taken to the node; its time there is the answer."""
        try:
            await self.barrier.released.wait()
            decided = self.barrier.released_ns
            actor, clock = self.host.actor, self.host.clock
            if actor is None or clock is None or self.host.dead is not None or decided is None:
                return
            try:
                async with asyncio.timeout(NODE_MARGIN_S):
                    at = await actor.release_batch.remote(
                        self.batch, self.barrier.expired, self.share
                    )
            except Exception as exc:
                if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                    raise
                if self.host.dead is None:
                    self.host.dead = _why(exc) if is_ray_error(exc) else "its release hangs"
                self.lost()
                return
            heard = time.monotonic_ns()
            if type(at) is int:
                offset, _ = clock.offset_at(decided)
                self.release_lag_ns = min(max(0, at - offset - decided), heard - decided)
                self.received_ns = decided + self.release_lag_ns
                self._no_let_go_before(self.received_ns)
        finally:
            self._released.set()

    async def release_answered(self) -> None:
        try:
            async with asyncio.timeout(NODE_MARGIN_S):
                await self._released.wait()
        except TimeoutError:
            pass

    def apply(self, at: int, got: Any) -> None:
        """The node's log entries from `at` on, each taken once, checked: a trial of this
        node's part, a step in its order (arrive or fail, let go only after the release),
        a time put on the run's clock within what the controller saw."""
        if not isinstance(got, list):
            self._refuse(f"its batch log is a {type(got).__name__}")
            return
        for k, entry in enumerate(got, at):
            if k < self.cursor:
                continue
            self.cursor = k + 1
            why = self._take(entry)
            if why is not None:
                self._refuse(f"log entry {k}: {why}")

    def _take(self, entry: Any) -> str | None:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 4):
            return "not (kind, trial, time, held)"
        kind, trial, node_ns, held = entry
        if type(kind) is not str or kind not in NEWS_KINDS:  # a list: unhashable
            return f"not (kind, trial, time, held): {entry!r:.80}"
        if type(trial) is not int or type(node_ns) is not int:
            return f"not (kind, trial, time, held): {entry!r:.80}"
        if type(held) is not bool:
            return "held is not a bool"
        if trial not in self.trials:
            return f"trial {trial} is not of this node's part"
        b = self.barrier
        if kind == "arrive" or kind == "fail":
            if trial in self.settled:
                return f"trial {trial} {kind}s, already settled"
            self.settled.add(trial)
            if kind == "arrive":
                self.arrived.add(trial)
                b.arrive(trial)
                if self._after_deadline(node_ns):  # locally, the deadline interrupts it
                    self.late.add(trial)
                    b.lost_trials.add(trial)  # arrived, but not counted
            else:
                b.fail(trial)
            return None
        if trial not in self.arrived or trial not in b.holding:
            return f"trial {trial} lets go without holding"
        if b.released_ns is None or self.host.clock is None:
            return f"trial {trial} lets go before the release"
        offset, _ = self.host.clock.offset_at(b.released_ns)
        floor = b.released_ns if self.received_ns is None else self.received_ns
        at = min(max(node_ns - offset, floor), time.monotonic_ns())
        b.let_go(trial, held, at_ns=at)
        return None

    def _after_deadline(self, node_ns: int) -> bool:
        """An arrival the node's clock puts after a deadline's release (beyond its error):
        the deadline found the trial on its way (its engine had not yet heard of it)."""
        b, clock = self.barrier, self.host.clock
        if not b.expired or b.released_ns is None or clock is None:
            return False
        offset, err = clock.offset_at(b.released_ns)
        return node_ns - offset - err > b.released_ns

    def _no_let_go_before(self, received: int) -> None:
        """No let-go of this node's trials before the node received the release (those
        taken before its answer came were held only to the decision)."""
        b = self.barrier
        for trial in self.trials:
            at = b.let_go_at.get(trial)
            if at is not None and at < received:
                b.let_go_at[trial] = received
                b.let_go_ns = max(b.let_go_ns or received, received)

    def _refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why

    def check_trial(self, trial: int, events: list[dict[str, Any]]) -> str | None:
        """A node's trial of the batch, answered: its events and the node's log agree
        (a trial that waited at the barrier arrived there, one that arrived waited)."""
        waited = any(e["type"] == "phase" and e["name"] == "barrier.wait" for e in events)
        if waited != (trial in self.arrived):
            said = "arrived" if trial in self.arrived else "did not arrive"
            return f"its log says the trial {said}, its events the opposite"
        if trial in self.late:
            return "the trial arrived at the barrier after the batch's deadline had released it"
        return None

    def settle(self, trial: int) -> None:
        """The trial is over (answered, refused or lost): its place in the batch settled,
        so that the barrier waits for it no longer, and let go if it still held."""
        if trial not in self.settled:
            self.settled.add(trial)
            self.barrier.fail(trial)
        if trial in self.barrier.holding:  # arrived, never heard letting go
            kept = trial not in self.spoiled and self.host.dead is None
            self.barrier.let_go(trial, held=kept)
        elif trial in self.spoiled and trial in self.barrier.arrivals:
            self.barrier.lost_trials.add(trial)  # its arrival is not recorded: not counted

    def lost(self) -> None:
        """The node is lost: every trial of its part settled at once (its environments
        are the node's reaper's), the barrier no longer waiting for any of them."""
        for trial in sorted(self.trials):
            if trial not in self.settled:
                self.settled.add(trial)
                self.barrier.fail(trial)
            if trial in self.barrier.holding:
                self.barrier.let_go(trial, held=False)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        actor = self.host.actor
        if actor is not None and self.host.dead is None:
            try:
                async with asyncio.timeout(NODE_MARGIN_S):
                    await actor.forget_batch.remote(self.batch)
            except Exception as exc:
                if not is_ray_error(exc) and not isinstance(exc, TimeoutError):
                    raise


POOL_OPS = frozenset({"create", "reset", "teardown"})


class NodePools:
    """One node's warm pools as the controller follows them: each pool event the node
    sends is checked (`take`) before it is recorded. An environment's events go in their
    order (create, resets, teardown, nothing after it), of a pooled cell of this node,
    at a time within what the controller saw; a reset only where the run's reset is
    `clean` or `snapshot` (never under `recreate`), and never more of a cell than its
    trials sent to the node (each reset follows a trial's release). Each trial that
    acquired an environment had one made or reset for it (`acquired`): a node that
    hands out more than its pool made and reset is refused."""

    def __init__(self, host: RayNodeHost, resets: dict[str, str], lo_ns: int) -> None:
        self.host = host
        self.resets = resets  # pooled cell -> the run's reset for it
        self.lo_ns = lo_ns  # when the pools were asked for, on the run's clock
        self.envs: dict[tuple[str, int], str] = {}  # (cell, env) -> made, failed, gone
        self.ready: dict[str, int] = dict.fromkeys(resets, 0)  # created or reset, ok
        self.handed: dict[str, int] = dict.fromkeys(resets, 0)  # acquired by trials
        self.resets_ok: dict[str, int] = dict.fromkeys(resets, 0)
        self.trials: dict[str, int] = dict.fromkeys(resets, 0)  # pooled trials sent
        self.refused: str | None = None
        self.closed = False
        self.lock = asyncio.Lock()

    def sent(self, cell: str) -> None:
        self.trials[cell] = self.trials.get(cell, 0) + 1

    def acquired(self, cell: str) -> str | None:
        self.handed[cell] = self.handed.get(cell, 0) + 1
        if self.handed[cell] > self.ready.get(cell, 0):
            return (
                f"{self.handed[cell]} environments of {cell} handed out, only "
                f"{self.ready.get(cell, 0)} made or reset"
            )
        return None

    def take(self, got: Any, *, hi_ns: int, err_ns: int) -> str | None:
        """Why the node's pool events `got` are not recorded (then none is), or None."""
        if self.refused is not None:
            return self.refused
        why = self._check(got, hi_ns, err_ns)
        if why is not None:
            self.refused = why
        return why

    def _check(self, got: Any, hi_ns: int, err_ns: int) -> str | None:
        if not isinstance(got, list):
            return f"a {type(got).__name__}, not a list of events"
        if len(got) > BATCH_EVENTS_MAX:
            return f"{len(got)} events (at most {BATCH_EVENTS_MAX})"
        slack = 2 * err_ns + SLACK_NS
        for k, ev in enumerate(got):
            why = check_wire(ev)
            if why is not None:
                return f"event {k}: {why}"
            if ev["type"] != "pool":
                return f"event {k}: a {ev['type']!r} event is not a pool's"
            if ev["host"] != self.host.name:
                return f"event {k}: of host {ev['host']!r:.80}, not {self.host.name}"
            cell, env, op = ev["cell"], ev["env"], ev["op"]
            if type(cell) is not str or cell not in self.resets:
                return f"event {k}: cell {cell!r:.80} is no pooled cell of this node"
            if type(env) is not int or type(op) is not str or op not in POOL_OPS:
                return f"event {k}: not (env, op) of a pool: {env!r:.40}, {op!r:.40}"
            t, dur = ev["t_ns"], ev["dur_ns"]
            if type(t) is not int or not self.lo_ns - slack <= t <= hi_ns + slack:
                return f"event {k}: t_ns {t!r} outside the pools' time ({self.lo_ns}..{hi_ns})"
            if type(dur) is not int or not 0 <= dur <= hi_ns - self.lo_ns + slack:
                return f"event {k}: dur_ns {dur!r} longer than the pools have been"
            if t - dur < self.lo_ns - slack:  # t_ns is its end: the work began in time too
                return f"event {k}: began at {t - dur}, before the pools were asked for"
            idle = ev.get("idle_ns")
            if idle is not None and not 0 <= idle <= hi_ns - self.lo_ns + slack:
                return f"event {k}: idle_ns {idle!r} longer than the pools have been"
            why = self._step(cell, env, op, ev["ok"] is True)
            if why is not None:
                return f"event {k}: {cell} environment {env}: {why}"
        return None

    def _step(self, cell: str, env: int, op: str, ok: bool) -> str | None:
        key = (cell, env)
        state = self.envs.get(key)
        if op == "create":
            if state is not None:
                return "created twice"
            self.envs[key] = "made" if ok else "failed"
            if ok:
                self.ready[cell] += 1
            return None
        if state is None:
            return f"{op} before its create"
        if state == "gone":
            return f"{op} after its teardown"
        if op == "teardown":
            self.envs[key] = "gone"
            return None
        if state != "made":
            return "reset of an environment never made"
        if self.resets[cell] not in ("clean", "snapshot"):
            return f"a reset where the run's reset is {self.resets[cell]}"
        if ok:
            self.resets_ok[cell] += 1
            if self.resets_ok[cell] > self.trials.get(cell, 0):
                return (
                    f"{self.resets_ok[cell]} resets, more than the "
                    f"{self.trials.get(cell, 0)} trials sent"
                )
            self.ready[cell] += 1
        return None

    def left(self) -> list[tuple[str, int]]:
        """The environments the node's events never said torn down."""
        return sorted(k for k, v in self.envs.items() if v != "gone")


def nodes_of(hosts: dict[str, Host]) -> dict[str, RayNodeHost]:
    return {n: h for n, h in hosts.items() if isinstance(h, RayNodeHost)}
