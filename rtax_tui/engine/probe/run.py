"""Running the boundary checks in a driver's own environments, through its own channel.

For one host, driver and channel, three environments live, each as in a trial:

- **A** runs every escape attempt as an ordinary workload step (`env.action`),
  writes a marker in its workspace at the first action and reads it back at the
  last (`workspace_persists`), then, last, a bounded fork bomb and a memory hog;
- **B** is started while A is alive and looks for A's marker (`other_env`);
- **C** is started after A is torn down and looks for what A wrote in its
  workspace and in /tmp (`fresh_env`);
- **D** runs `result_integrity`'s attacks (engine.probe.reuse's pool runs the reuse
  checks, `pool_reuse_clean` and `reset_links`);
- **E**, with the default limits (`Limits()`), lives through the driver's `cleanup`
  of every run (`cleanup_spares_live`), makes a deep directory chain and is torn
  down (`deep_tree`), after a fork bomb of twice its default pids (`default_limits`);
- **F** has its pid 1 and every process killed, then one more action (`init_kill`).

A also fills its workspace past its size (`workspace_size`, PROBE_LIMITS' 64 MiB).

Every step is declared in the environment's workload before it is created (the
driver sees the same workload it would in a run: image choice, paths a workload
names), and every argument is fixed up front. The probe emits one `probe` event
per check through `emit`; it never raises for what the environment does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.probe import host as probe_host
from rtax_tui.engine.probe import scripts as S
from rtax_tui.engine.probe.classify import Context, Outcome, Verdict, classify, facts, trim
from rtax_tui.engine.probe.host import HostPlant
from rtax_tui.engine.probe.reuse import LinksTarget, check_reuse, in_place_reset
from rtax_tui.model import events, runlock
from rtax_tui.model.checks import (
    BY_NAME,
    CHECKS,
    INTEGRITY_CHECK,
    LINKS_CHECK,
    NA,
    POOL_CHECK,
    RESET_CHECKS,
    SENTINEL_CHECKS,
    SOCKET_CHECKS,
)
from rtax_tui.model.spec import Cell, EnvSpec, Limits, PhaseFailure, Step, Workload

if TYPE_CHECKING:  # the engine sits above the drivers and the hosts (pyproject's layers)
    from rtax_tui.drivers.base import Driver, Environment
    from rtax_tui.engine.profile import Profile
    from rtax_tui.engine.session import Session
    from rtax_tui.hosts.base import Host

# The probe's environments get these limits: the checks need limits to test.
PROBE_LIMITS = Limits(cpus=1, memory_mib=256, pids=128, workspace_mib=64)
STEP_TIMEOUT_S = 30.0
HOG_TIMEOUT_S = 90.0
ENV_TIMEOUT_S = 240.0  # create and ready each: a VM under TCG, a first libvirt connection
TEARDOWN_TIMEOUT_S = 120.0
BOMB_FACTOR = 3  # the fork bomb tries pids x 3 processes
BOMB_DRAIN_S = 1.0  # its processes, killed once counted, are reaped
DEFAULT_BOMB_FACTOR = 2  # default_limits: twice the default pids
BOMB_SLEEP_S = 60  # a bound on the bomb's processes should its script be cut short
FILL_PAST_MIB = 64  # workspace_size writes the limit and this much more
REMOTE_ASSETS = (
    "not measured on a remote host: rtax's assets are on the controller's machine, and no "
    "asset workload runs elsewhere"
)
DEEP_TREE_LEVELS = 1200
NO_PID_LIMIT = "pids: none applied"  # in a driver's facts()["limits"]: it states no pid limit
HOG_FACTOR = 2  # the memory hog asks for twice the limit
HOG_HOST_MARGIN_MIB = 1024  # never hog on a host with less free memory than this, beyond it
# Host directories the remount check writes into (a random dotfile, removed at once).
REMOUNT_DIRS = ("/", "/root", "/etc", "/usr", "/var", "/var/tmp", "/home", "/opt", "/srv", "/boot")
DOCKER_REQUEST = r"GET /version HTTP/1.0\r\nHost: rtax-probe\r\n\r\n"
# The checks that rest on the probe's host process (its listeners, its command line,
# its signal log): told when it died before or during their step (`listener_gone`).
LISTENER_CHECKS = frozenset({"probe_socket", "loopback_tcp", "host_processes", "host_signal"})
# The checks whose step looks for a path rtax planted on the host: still there after it?
PLANTED_CHECKS = frozenset({*SENTINEL_CHECKS, "probe_socket"})

Emit = Callable[[events.Event], None]  # an event without `t_ns`: the caller stamps it
# Checks decided after the escape attempts, in their own order (other environments, the
# guarantees, and last the fork bomb and the hog that may take environment A down).
_LATER = frozenset(
    {
        "workspace_persists",
        "other_env",
        "fresh_env",
        "pids_limit",
        "memory_limit",
        POOL_CHECK,
        LINKS_CHECK,
        INTEGRITY_CHECK,
        "default_limits",
        "workspace_size",
        "init_kill",
        "deep_tree",
        "cleanup_spares_live",
        "assets_view",
        "host_sinks",
    }
)
# host_sinks: the host directories where what a step writes could be kept (an engine's
# container logs, gVisor's and rtax's state under /run, journald and syslog), measured
# (`du`) before and after, besides rtax's cache. Not whole filesystems: the host is
# shared, and an image pull elsewhere would read as growth.
SINK_PATHS = (
    "/var/lib/docker/containers",
    "/var/lib/containers/storage/overlay-containers",
    "/run",
    "/var/log",
)
# The steps after result_integrity's attacks, and the status each really has. Each names
# its program by absolute path (no function, alias or `PATH` of the session applies: the
# frame writes such a word with a backslash before it) and runs it with an environment of
# its own (`env -i`): what an earlier step left in the session cannot change what they
# mean. A bare `false` would be the session's `false`, which a step may have redefined.
_FRESH = ("/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/bin/sh", "-c")
TRUTH: tuple[tuple[tuple[str, ...], int], ...] = (
    ((*_FRESH, "false"), 1),
    ((*_FRESH, "exit 3"), 3),
)


def _step(script: str, *args: str, timeout: float = STEP_TIMEOUT_S) -> Step:
    return Step(argv=("sh", "-c", script, S.ARG0, *args), timeout_s=timeout)


@dataclass
class _Names:
    """The random names and tokens of one (host, driver, channel) run."""

    mark: str
    mark_token: str
    fresh: str
    fresh_token: str
    rw: str
    pvm_token: str
    life: str
    life_token: str
    init: str
    init_token: str
    deep: str
    fill: str

    @classmethod
    def new(cls) -> _Names:
        h = os.urandom(6).hex()
        return cls(
            mark=f".rtax-probe-mark-{h}",
            mark_token=probe_host.token("mark"),
            fresh=f".rtax-probe-fresh-{h}",
            fresh_token=probe_host.token("fresh"),
            rw=f".rtax-probe-rw-{os.urandom(6).hex()}",  # its own: no earlier step names it
            pvm_token=probe_host.token("pvm"),
            life=f".rtax-probe-life-{h}",
            life_token=probe_host.token("life"),
            init=f".rtax-probe-init-{h}",
            init_token=probe_host.token("init"),
            deep=f".rtax-probe-deep-{h}",
            fill=f".rtax-probe-fill-{h}",
        )


class CellProbe:
    """The checks of one driver on one host through one channel."""

    def __init__(
        self,
        driver: Driver,
        host_name: str,
        channel: str,
        plant: HostPlant,
        *,
        limits: Limits = PROBE_LIMITS,
        label: str = "",
    ) -> None:
        self.drv = driver
        self.host_name = host_name
        self.channel = channel
        self.plant = plant
        self.limits = limits
        self.label = label or f"probe-{os.urandom(3).hex()}"
        self.n = _Names.new()
        self.ctx = Context(
            tokens={
                **plant.tokens,
                "other_env": self.n.mark_token,
                "workspace_persists": self.n.mark_token,
                "fresh_env": self.n.fresh_token,
                "process_vm": self.n.pvm_token,
                "cleanup_spares_live": self.n.life_token,
                "init_kill": self.n.init_token,
            },
            paths=dict(plant.paths),
            sockets=plant.sockets,
            shadow_md5=plant.shadow_md5,
            cmdline_md5=plant.cmdline_md5,
            blockdevs=[(name, size, md5) for _, _, name, size, md5 in plant.blockdevs],
            host_boot=plant.boot,
            host_mntns=plant.mntns,
        )
        self.verdicts: dict[str, Verdict] = {}
        self.steps = self._steps_of_a()
        self.marks_written = False  # A's first action wrote its markers (else: n/a)
        self.listener_gone: str | None = None  # the step after which the listener was dead
        self.marks_output = ""

    # -- the steps -------------------------------------------------------------
    def _remount_dirs(self) -> list[str]:
        dirs = list(REMOUNT_DIRS)
        if self.plant.cache:
            dirs.append(self.plant.cache)
        return dirs

    def _host_paths(self, env: Environment) -> list[str]:
        """Paths only the host knows (`host_paths`): the environment's workspace there,
        rtax's cache, and rtax's prefix in the host's temporary directory."""
        ws = getattr(env, "workspace", None) or getattr(env, "host_workspace", None)
        out = [str(ws)] if isinstance(ws, str) and ws.startswith("/") else []
        if self.plant.cache:
            out.append(self.plant.cache)
        if self.plant.tmp:
            out.append(self.plant.tmp.rstrip("/") + "/rtax-")
        return out

    def _steps_of_a(self) -> dict[str, Step]:
        p, n, lst = self.plant, self.n, self.plant.listener
        ns = (p.boot or "-", p.mntns or "-")
        steps: dict[str, Step] = {
            "identify": _step(S.IDENTIFY),
            "write_marks": _step(S.WRITE_MARKS, n.mark, n.mark_token, n.fresh, n.fresh_token),
        }
        for check in SENTINEL_CHECKS:
            if check in p.paths:
                steps[check] = _step(S.FILE_SENTINEL, p.paths[check])
        steps["etc_shadow"] = _step(S.SHADOW)
        steps["host_paths"] = _step(S.HOST_PATHS)
        steps["vsock"] = _step(S.VSOCK)
        steps["proc_cmdline"] = _step(S.PROC_CMDLINE)
        steps["process_vm"] = _step(S.PROCESS_VM, n.pvm_token)
        for check, kind in SOCKET_CHECKS.items():
            if p.sockets.get(kind):
                req = "" if kind == "libvirt" else DOCKER_REQUEST
                steps[check] = _step(S.UNIX_SOCKETS, req, *p.sockets[kind])
        if "probe_socket" in p.paths:
            steps["probe_socket"] = _step(S.UNIX_SOCKETS, "", p.paths["probe_socket"])
        steps["remount_rw"] = _step(S.REMOUNT, *ns, n.rw, *self._remount_dirs())
        specs = [f"{maj}:{mn}:{name}" for maj, mn, name, _, _ in p.blockdevs]
        if specs:
            steps["block_devices"] = _step(S.BLOCK_DEVICES, *specs)
        steps["proc_sys"] = _step(S.PROC_SYS, *ns)
        steps["sys_write"] = _step(S.SYS_WRITE, *ns)
        steps["module_load"] = _step(S.MODULE)
        steps["cgroup_escape"] = _step(S.CGROUP, *ns)
        if lst is not None:
            steps["loopback_tcp"] = _step(S.LOOPBACK_TCP, str(lst.port))
            rtax_pid = str(p.rtax_pid or "")
            steps["host_processes"] = _step(S.PROCESSES_SEE, rtax_pid, str(lst.pid))
            steps["host_signal"] = _step(S.PROCESSES_SIGNAL, rtax_pid, str(lst.pid))
        steps["workspace_persists"] = _step(S.READ_FILE, n.mark)
        if self.limits.workspace_mib:
            fill = str(self.limits.workspace_mib + FILL_PAST_MIB)
            steps["workspace_size"] = _step(S.WORKSPACE_FILL, fill, n.fill, timeout=HOG_TIMEOUT_S)
            steps["fill_remove"] = _step(S.FILL_REMOVE, n.fill)
        if self.limits.pids:
            steps["pids_limit"] = _step(
                S.FORK_BOMB, str(self.limits.pids * BOMB_FACTOR), timeout=HOG_TIMEOUT_S
            )
        if self.limits.memory_mib:
            mib = self.limits.memory_mib * HOG_FACTOR
            steps["memory_limit"] = _step(S.MEMORY_HOG, str(mib), timeout=HOG_TIMEOUT_S)
        return steps

    def _spec(self, role: str, steps: list[Step], limits: Limits | None = None) -> EnvSpec:
        return EnvSpec(
            cell=Cell(self.host_name, self.drv.name, f"probe-{role}", self.channel),
            workload=Workload(f"probe-{role}", tuple(steps)),
            limits=limits or self.limits,
            label=self.label,
        )

    def spec_a(self) -> EnvSpec:
        return self._spec("a", list(self.steps.values()))

    def workload_a(self) -> Workload:
        return self.spec_a().workload

    # -- running ----------------------------------------------------------------
    async def run(self, emit_verdict: Callable[[str, Verdict], None]) -> dict[str, Verdict]:
        """Every check, in the catalogue's order of emission as they are decided."""

        def decide(name: str, v: Verdict) -> None:
            self.verdicts[name] = v
            emit_verdict(name, v)

        try:
            env_a = await _up(self.drv, self.spec_a())
        except Exception as exc:
            why = _why(exc)
            for c in CHECKS:
                decide(c.name, Verdict(NA, trim(f"the environment did not start: {why}")))
            return self.verdicts
        try:
            await self._run_a(env_a, decide)
        finally:
            await _down(env_a)
        if self.marks_written:
            await self._run_fresh(decide)
        await self._run_reuse(decide)
        await self._run_integrity(decide)
        await self._run_life(decide)
        await self._run_init_kill(decide)
        await self._run_assets(decide)
        await self._run_sinks(decide)
        for c in CHECKS:  # anything not decided above (a step that was never run)
            if c.name not in self.verdicts:
                decide(c.name, Verdict(NA, "not measured (see the other checks' evidence)"))
        return self.verdicts

    async def _act(self, env: Environment, step: Step) -> Outcome:
        timeout = step.timeout_s or STEP_TIMEOUT_S
        try:
            res = await asyncio.wait_for(env.action(step, timeout), timeout + 15)
        except Exception as exc:
            return Outcome(error=_why(exc))
        return Outcome(output=res.output.decode(errors="replace"), rc=res.rc)

    async def _run_a(self, env: Environment, decide: Callable[[str, Verdict], None]) -> None:
        steps, lst = self.steps, self.plant.listener
        ident = await self._act(env, steps["identify"])
        f = facts(ident.output)
        self.ctx.env_boot = (f.get("boot") or [""])[0]
        self.ctx.env_mntns = (f.get("mntns") or [""])[0]
        pwd_a = (f.get("pwd") or [""])[0]
        for path in (f"{self.plant.tmp}/{self.n.fresh}", f"/tmp/{self.n.fresh}"):
            self.plant.extra_files.add(path)  # the local driver writes the host's /tmp
            probe_host.track(self.plant.host, path)
        marks = await self._act(env, steps["write_marks"])
        self.marks_written = all(
            f"wrote ./{m}" in marks.output for m in (self.n.mark, self.n.fresh)
        )
        self.marks_output = marks.error or marks.output
        rw = [os.path.join(d, self.n.rw) for d in self._remount_dirs()]  # remount_rw's names
        for c in CHECKS:
            name = c.name
            if name in _LATER:
                continue
            if name not in steps:
                decide(name, classify(name, Outcome(), self.ctx))
                continue
            seen = len(lst.lines) if lst is not None else 0
            if name == "remount_rw":  # the local driver writes the host's own /etc, /root:
                for path in rw:  # the reaper unlinks them if the probe dies before it looks
                    self.plant.host.track("file", path)
            out = await self._act(env, steps[name])
            observed: dict[str, Any] = {}
            if lst is not None and name in ("probe_socket", "loopback_tcp", "host_signal"):
                await probe_host.settle()
                new = lst.lines[seen:]
                observed = {
                    "unix_conns": new.count("conn unix"),
                    "tcp_conns": new.count("conn tcp"),
                    "signals": new.count("signal CONT"),
                }
            if name == "host_paths":
                observed = {"host_paths": self._host_paths(env)}
            if name == "remount_rw":
                # only the directories rtax named: a step's `@wrote=` chooses none of the
                # host's (a forged one of 200 KB once ended the probe with E2BIG)
                try:
                    found = await probe_host.reached_host(
                        self.plant, self.n.rw, self._remount_dirs()
                    )
                finally:
                    for path in rw:
                        self.plant.host.untrack("file", path)
                observed = {"reached_host": found}
            planted = self.plant.paths.get(name) if name in PLANTED_CHECKS else None
            if planted:  # a host file removed from inside is a write to the host
                observed["planted_left"] = await probe_host.path_exists(self.plant.host, planted)
            if lst is not None and self.listener_gone is None and lst.gone():
                self.listener_gone = name  # the first step after which it was found dead
            if name in LISTENER_CHECKS and self.listener_gone is not None:
                observed["listener_gone"] = self.listener_gone
            decide(name, classify(name, Outcome(out.output, out.rc, out.error, observed), self.ctx))
        if self.marks_written:
            out = await self._act(env, steps["workspace_persists"])
            decide("workspace_persists", classify("workspace_persists", out, self.ctx))
            await self._run_other(env, pwd_a, decide)
        else:
            why = trim(f"the first action could not write its markers: {self.marks_output}")
            for name in ("workspace_persists", "other_env", "fresh_env"):
                decide(name, Verdict(NA, why))
        await self._run_fill(env, decide)
        await self._run_bomb(env, decide)
        await self._run_hog(env, decide)

    async def _run_other(
        self, env_a: Environment, pwd_a: str, decide: Callable[[str, Verdict], None]
    ) -> None:
        host_path = getattr(env_a, "workspace", None) or getattr(env_a, "host_workspace", None)
        step = _step(S.OTHER_ENV, str(host_path or ""), pwd_a, self.n.mark)
        try:
            env_b = await _up(self.drv, self._spec("b", [step]))
        except Exception as exc:
            decide(
                "other_env", Verdict(NA, trim(f"a second environment did not start: {_why(exc)}"))
            )
            return
        try:
            out = await self._act(env_b, step)
            decide("other_env", classify("other_env", out, self.ctx))
        finally:
            await _down(env_b)

    async def _run_bomb(
        self,
        env: Environment,
        decide: Callable[[str, Verdict], None],
        name: str = "pids_limit",
        attempts: int = 0,
        step: Step | None = None,
    ) -> None:
        step = step or self.steps.get(name)
        attempts = attempts or (self.limits.pids or 0) * BOMB_FACTOR
        if step is None:
            decide(name, Verdict(NA, "no pid limit was asked for"))
            return

        async def host_during() -> dict[str, Any]:
            await asyncio.sleep(1.0)
            return await probe_host.host_answer(self.plant.host)

        act = asyncio.ensure_future(self._act(env, step))
        host = await host_during()
        out = await act
        observed = {**host, "attempts": attempts}
        decide(name, classify(name, Outcome(out.output, out.rc, out.error, observed), self.ctx))
        if name == "pids_limit":
            await asyncio.sleep(BOMB_DRAIN_S)

    async def _run_fill(self, env: Environment, decide: Callable[[str, Verdict], None]) -> None:
        """`workspace_size`: the host's free space on the workspace's filesystem before,
        and while the file past the size is there; then the file is removed."""
        step = self.steps.get("workspace_size")
        if step is None:
            decide("workspace_size", Verdict(NA, "no workspace size was asked for"))
            return
        path = _host_workspace(env)
        before, fs = await probe_host.free_mib(self.plant.host, path) if path else (None, "")
        out = await self._act(env, step)
        after = (await probe_host.free_mib(self.plant.host, path))[0] if path else None
        await self._act(env, self.steps["fill_remove"])
        drop = before - after if before is not None and after is not None else None
        observed = {"limit_mib": self.limits.workspace_mib, "host_drop_mib": drop, "host_fs": fs}
        decide(
            "workspace_size",
            classify("workspace_size", Outcome(out.output, out.rc, out.error, observed), self.ctx),
        )

    async def _run_life(self, decide: Callable[[str, Verdict], None]) -> None:
        """Environment E, with the default limits: `cleanup_spares_live`, `deep_tree`
        and `default_limits` (see the module's docstring)."""
        n, dl = self.n, Limits()
        mark, read = _step(S.WRITE_MARK, n.life, n.life_token), _step(S.READ_FILE, n.life)
        deep = _step(S.DEEP_TREE, str(DEEP_TREE_LEVELS), n.deep, timeout=HOG_TIMEOUT_S)
        stated = await _states_no_pid_limit(self.drv)
        bomb = None
        if dl.pids and not stated:
            bomb = _step(
                S.FORK_BOMB,
                str(dl.pids * DEFAULT_BOMB_FACTOR),
                str(BOMB_SLEEP_S),
                timeout=HOG_TIMEOUT_S,
            )
        names = ("cleanup_spares_live", "deep_tree", "default_limits")
        try:
            env = await _up(
                self.drv, self._spec("e", [mark, read, deep, *([bomb] if bomb else [])], dl)
            )
        except Exception as exc:
            why = trim(f"an environment with the default limits did not start: {_why(exc)}")
            for name in names:
                decide(name, Verdict(NA, why))
            return
        for path in (f"{self.plant.tmp}/{n.deep}", f"/tmp/{n.deep}"):
            self.plant.extra_files.add(path)  # the local driver writes the host's /tmp
            probe_host.track(self.plant.host, path)
        torn = False
        try:
            wrote = await self._act(env, mark)
            if wrote.error is None and f"wrote ./{n.life}" in wrote.output:
                try:  # as `rtax cleanup` would, from another process: ours are live
                    with runlock.as_another_process():
                        got = await self.drv.cleanup(None)
                    said = f"it removed {got} leftover(s), spared {runlock.take_spared()}"
                except Exception as exc:
                    said = f"it failed: {_why(exc)}"
                out = await self._act(env, read)
                out = Outcome(out.output, out.rc, out.error, {"cleanup": said})
                decide("cleanup_spares_live", classify("cleanup_spares_live", out, self.ctx))
            else:
                why = trim(f"the marker could not be written: {wrote.error or wrote.output}")
                decide("cleanup_spares_live", Verdict(NA, why))
            path = _host_workspace(env)
            made = await self._act(env, deep) if path else Outcome()
            if bomb is None:
                why = "no default pid limit" if not dl.pids else f"its facts: {stated}"
                decide(
                    "default_limits",
                    classify("default_limits", Outcome(observed={"stated_none": why}), self.ctx)
                    if stated
                    else Verdict(NA, why),
                )
            else:
                attempts = (dl.pids or 0) * DEFAULT_BOMB_FACTOR
                await self._run_bomb(env, decide, "default_limits", attempts, bomb)
            torn = True
            err = await _down_err(env)
            observed: dict[str, Any] = {"host_path": path, "teardown_error": err}
            if not path:
                observed["no_path"] = (
                    "the driver keeps the workspace at no host path rtax can look at (a VM's "
                    "disk image, a container's own layer: removed with them)"
                )
            else:  # also after a step that failed: the host's sight decides (classify)
                observed["left"] = await probe_host.path_exists(self.plant.host, path)
            decide(
                "deep_tree",
                classify(
                    "deep_tree", Outcome(made.output, made.rc, made.error, observed), self.ctx
                ),
            )
        finally:
            if not torn:
                await _down(env)

    async def _run_assets(self, decide: Callable[[str, Verdict], None]) -> None:
        """Environment G, whose workload needs assets and names one (`assets_view`): it
        looks for the cache sentinel and for the assets beside the named one."""
        local = getattr(self.plant.host, "controller_local", False)
        named = _probe_asset() if local else None
        sentinel = self.plant.paths.get("cache_sentinel")
        if named is None or not sentinel:
            if not local:
                why = REMOTE_ASSETS
            elif not named:
                why = "no prepared assets on this host (rtax assets prepare)"
            else:
                why = "no cache sentinel could be planted"
            decide("assets_view", classify("assets_view", Outcome(observed={"why": why}), self.ctx))
            return
        step = _step(S.ASSETS_VIEW, named, sentinel)
        spec = self._spec("g", [step])
        spec = EnvSpec(
            cell=spec.cell,
            workload=Workload("probe-g", (step,), needs_assets=True),
            limits=spec.limits,
            label=spec.label,
        )
        try:
            env = await _up(self.drv, spec)
        except Exception as exc:
            why = trim(f"an environment with assets did not start: {_why(exc)}")
            decide("assets_view", Verdict(NA, why))
            return
        try:
            out = await self._act(env, step)
            out = Outcome(out.output, out.rc, out.error, {"named": named})
            decide("assets_view", classify("assets_view", out, self.ctx))
        finally:
            await _down(env)

    async def _run_sinks(self, decide: Callable[[str, Verdict], None]) -> None:
        """Environment H (`host_sinks`): writes past its limits through every stream the
        host may keep; the host's filesystems' free space before and after."""
        mib = (self.limits.memory_mib or 256) + (self.limits.workspace_mib or 64)
        p = self.plant
        step = _step(
            S.SINKS, str(mib), self.channel, p.boot or "-", p.pidns or "-", timeout=HOG_TIMEOUT_S
        )
        cache = self.plant.cache
        try:
            env = await _up(self.drv, self._spec("h", [step]))
        except Exception as exc:
            decide("host_sinks", Verdict(NA, trim(f"an environment did not start: {_why(exc)}")))
            return
        try:
            before = await _held_mib(self.plant.host, list(SINK_PATHS), cache)
            out = await self._act(env, step)
            after = await _held_mib(self.plant.host, list(SINK_PATHS), cache)
            drops = {d: after[d] - before[d] for d in before if d in after}
            observed = {"wrote_mib": mib, "drops": drops}
            decide(
                "host_sinks",
                classify("host_sinks", Outcome(out.output, out.rc, out.error, observed), self.ctx),
            )
        finally:
            await _down(env)

    async def _run_init_kill(self, decide: Callable[[str, Verdict], None]) -> None:
        """Environment F: a marker, `kill -9 1` and `kill -9 -1`, then the marker read
        back by a later action (`init_kill`)."""
        n, p = self.n, self.plant
        mark, read = _step(S.WRITE_MARK, n.init, n.init_token), _step(S.READ_FILE, n.init)
        kill = _step(S.INIT_KILL, p.boot or "-", p.pidns or "-")
        try:
            env = await _up(self.drv, self._spec("f", [mark, kill, read]))
        except Exception as exc:
            decide("init_kill", Verdict(NA, trim(f"an environment did not start: {_why(exc)}")))
            return
        try:
            wrote = await self._act(env, mark)
            marked = wrote.error is None and f"wrote ./{n.init}" in wrote.output
            killed = await self._act(env, kill) if marked else Outcome()
            said = killed.output + (f"\n({killed.error})" if killed.error else "")
            out = await self._act(env, read) if marked else Outcome()
            observed = {"marked": marked, "killed": said}
            decide(
                "init_kill",
                classify("init_kill", Outcome(out.output, out.rc, out.error, observed), self.ctx),
            )
        finally:
            await _down(env)

    async def _run_hog(self, env: Environment, decide: Callable[[str, Verdict], None]) -> None:
        step = self.steps.get("memory_limit")
        limit = self.limits.memory_mib
        if step is None or not limit:
            decide("memory_limit", Verdict(NA, "no memory limit was asked for"))
            return
        need = limit * HOG_FACTOR + HOG_HOST_MARGIN_MIB
        avail = self.plant.memavail_mib
        if avail is not None and avail < need:
            why = f"the host has {avail} MiB free: a {limit * HOG_FACTOR} MiB hog is not safe"
            decide(
                "memory_limit",
                classify("memory_limit", Outcome(observed={"skipped": why}), self.ctx),
            )
            return
        out = await self._act(env, step)
        if out.error is None and "allocating" not in out.output:
            # the step did not start (the fork bomb's processes may still be ending): once more
            await asyncio.sleep(BOMB_DRAIN_S)
            out = await self._act(env, step)
        host = await probe_host.host_answer(self.plant.host)
        observed = {**host, "limit_mib": limit}
        decide(
            "memory_limit",
            classify("memory_limit", Outcome(out.output, out.rc, out.error, observed), self.ctx),
        )

    async def _run_fresh(self, decide: Callable[[str, Verdict], None]) -> None:
        step = _step(S.FRESH, self.n.fresh)
        try:
            env_c = await _up(self.drv, self._spec("c", [step]))
        except Exception as exc:
            decide(
                "fresh_env", Verdict(NA, trim(f"a fresh environment did not start: {_why(exc)}"))
            )
            return
        try:
            out = await self._act(env_c, step)
            decide("fresh_env", classify("fresh_env", out, self.ctx))
        finally:
            await _down(env_c)

    def integrity_steps(self) -> tuple[list[Step], list[Step]]:
        """result_integrity's attacks, then its checking steps (TRUTH). On the shell
        channel the attacks run in the persistent shell itself (`eval`), so what they
        define and start stays for the steps after them; on exec each is its own
        process (a background forger would hold the action's output open: none)."""
        if self.channel == "shell":
            attacks = [
                Step(("eval", S.FORGE_BACKGROUND), timeout_s=STEP_TIMEOUT_S),
                Step(("eval", S.FORGE_FUNCTIONS), timeout_s=STEP_TIMEOUT_S),
                _step(S.FORGE_MEMORY),
                # last: its names would take the `sh` of the step before
                Step(("eval", S.FORGE_SESSION), timeout_s=STEP_TIMEOUT_S),
            ]
        else:
            attacks = [_step(S.FORGE_FUNCTIONS), _step(S.FORGE_MEMORY)]
        return attacks, [Step(argv, timeout_s=STEP_TIMEOUT_S) for argv, _ in TRUTH]

    async def _run_integrity(self, decide: Callable[[str, Verdict], None]) -> None:
        """`result_integrity` in its own environment (the attacks may cost it its shell):
        the attacks, then steps whose real status is known; a status recorded as 0 for
        a step that failed is a breach, a channel that stops answering is not."""
        attacks, checking = self.integrity_steps()
        try:
            env = await _up(self.drv, self._spec("d", attacks + checking))
        except Exception as exc:
            decide(
                INTEGRITY_CHECK,
                Verdict(NA, trim(f"an environment for the attacks did not start: {_why(exc)}")),
            )
            return
        output: list[str] = []
        truth: list[tuple[str, int, int | str]] = []
        try:
            for step in attacks:
                out = await self._act(env, step)
                output.append(out.output if out.error is None else f"({out.error})")
            await asyncio.sleep(0.3)  # the background forger is printing by now
            for step, (argv, real) in zip(checking, TRUTH, strict=True):
                out = await self._act(env, step)
                got: int | str = (
                    out.rc
                    if out.error is None and out.rc is not None
                    else (out.error or "no status")
                )
                truth.append((" ".join(argv), real, got))
        finally:
            await _down(env)
        decide(
            INTEGRITY_CHECK,
            classify(
                INTEGRITY_CHECK,
                Outcome(output="\n".join(output), observed={"truth": truth}),
                self.ctx,
            ),
        )

    async def _run_reuse(self, decide: Callable[[str, Verdict], None]) -> None:
        """`pool_reuse_clean` through a real pool of one (engine.probe.reuse), with the
        driver's in-place reset for this channel: clean, else snapshot; n/a without one."""
        reset, why = in_place_reset(self.drv, self.channel)
        if reset is None:
            for name in (POOL_CHECK, LINKS_CHECK):
                decide(name, Verdict(NA, trim(why)))
            return
        p = self.plant
        links_dir = p.paths.get("links_dir")
        links = (
            LinksTarget(links_dir, p.tokens["tmp_sentinel"], p.boot, p.mntns) if links_dir else None
        )
        try:
            got = await check_reuse(
                self.drv, self.host_name, self.channel, reset, self.limits, links
            )
        except Exception as exc:
            why = trim(f"the pooled environment failed: {_why(exc)}")
            for name in (POOL_CHECK, LINKS_CHECK):
                decide(name, Verdict(NA, why))
            return
        decide(POOL_CHECK, Verdict(got.result, trim(got.evidence)))
        if got.links is not None:
            decide(LINKS_CHECK, got.links)
        elif links is None:
            decide(LINKS_CHECK, Verdict(NA, "the probe could not plant a directory on the host"))
        else:
            decide(LINKS_CHECK, Verdict(NA, trim(f"not measured: {got.evidence}")))


def _why(exc: BaseException) -> str:
    if isinstance(exc, PhaseFailure):
        return f"{exc.kind}: {exc.message}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


async def _up(drv: Driver, spec: EnvSpec) -> Environment:
    env = drv.environment(spec)
    try:
        await asyncio.wait_for(env.create(), ENV_TIMEOUT_S)
        await asyncio.wait_for(env.ready(), ENV_TIMEOUT_S)
    except BaseException:
        await _down(env)
        raise
    return env


def _probe_asset() -> str | None:
    """The asset `assets_view`'s workload names (the fix patch), if prepared here."""
    from rtax_tui.drivers.toolkit import assets as A

    got = A.find_prepared()
    return str(got.patch) if got is not None else None


async def _held_mib(host: Host, dirs: list[str], cache: str | None) -> dict[str, int]:
    """MiB held under each of `dirs` that exists on the host, and under rtax's `cache`
    there but for the stores its builders fill (`BUILT_STORES`)."""
    from rtax_tui.drivers.toolkit.assets import BUILT_STORES

    said = ""
    runs = [[S.HOST_DU, S.ARG0, *dirs]]
    if cache:
        runs.append([S.HOST_DU_CACHE, S.ARG0, cache, *BUILT_STORES])
    for args in runs:  # each on its own: one failing leaves the other's figures
        try:
            res = await host.run(["sh", "-c", *args], timeout=120)
            said += res.stdout.decode(errors="replace")
        except Exception:
            continue
    out: dict[str, int] = {}
    for v in facts(said).get("du") or []:
        d, _, kib = v.rpartition("=")
        if kib.isdigit():
            out[d] = int(kib) >> 10
    return out


def _host_workspace(env: Environment) -> str:
    """The environment's workspace on the host, when the driver keeps one there."""
    ws = getattr(env, "workspace", None) or getattr(env, "host_workspace", None)
    return ws if isinstance(ws, str) and ws.startswith("/") else ""


async def _states_no_pid_limit(drv: Driver) -> str:
    """What the driver's facts say of its limits, where they state no pid limit."""
    try:
        got = (await drv.facts()).get("limits")
    except Exception:
        return ""
    return got if isinstance(got, str) and NO_PID_LIMIT in got else ""


async def _down_err(env: Environment) -> str | None:
    """The teardown, and what went wrong with it (None: nothing)."""
    try:
        await asyncio.wait_for(asyncio.shield(env.teardown()), TEARDOWN_TIMEOUT_S)
    except Exception as exc:
        return _why(exc)
    return None


async def _down(env: Environment) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(env.teardown()), TEARDOWN_TIMEOUT_S)
    except Exception:
        pass


def na_verdicts(why: str) -> dict[str, Verdict]:
    """Every check `n/a` for the same reason (a driver or host that cannot run here)."""
    return {c.name: Verdict(NA, trim(why)) for c in CHECKS}


def integrity_of(driver: Driver, channel: str) -> str | None:
    """None where the driver states that a step's result reaches rtax through nothing a
    step can write on `channel` (`Driver.integrity`), else why it does not."""
    fn = getattr(driver, "integrity", None)
    if fn is None:
        return "not stated by this driver"
    got: str | None = fn(channel)
    return got


def promised_of(driver: Driver) -> frozenset[str]:
    """The checks a driver states it keeps (`Driver.promised_checks()`); none if unstated.
    On a host other than the controller's machine `assets_view` is not promised: rtax's
    assets are on the controller's machine, and no asset workload runs elsewhere."""
    fn = getattr(driver, "promised_checks", None)
    if fn is None:
        return frozenset()
    got = frozenset(n for n in fn() if n in BY_NAME)
    if not getattr(getattr(driver, "host", None), "controller_local", False):
        got -= {"assets_view"}
    return got


async def run_probe(
    hosts: dict[str, Host],
    drivers: list[str],
    channels: list[str],
    emit: Emit,
    *,
    options: dict[str, dict[str, Any]] | None = None,
    limits: Limits = PROBE_LIMITS,
    left_out: dict[str, str] | None = None,
    log: Callable[[str], None] | None = None,
    label: str = "",
    made: Mapping[tuple[str, str], Driver] | None = None,
) -> None:
    """Every check for every host x driver x channel, one `probe` event per check.

    `emit` gets events without `t_ns` (the caller's clock adds it). A host left out
    (unreachable), a driver that cannot run on a host, or a channel it lacks gives
    `n/a` for every check, with the reason: the matrix has no holes. `made`: drivers
    already made, by (host, driver) (a session's); the others are made here."""
    from rtax_tui.drivers import get_driver
    from rtax_tui.engine.runner import remote_aware_check

    options = options or {}

    def send(host: str, drv: str, ch: str, name: str, v: Verdict, promised: frozenset[str]) -> None:
        emit(
            events.probe(
                host=host,
                driver=drv,
                channel=ch,
                check=name,
                result=v.result,
                evidence=v.evidence,
                promised=name in promised,
                kind=BY_NAME[name].kind,
            )
        )

    for host_name, why in (left_out or {}).items():
        for d in drivers:
            for ch in channels:
                for name, v in na_verdicts(f"host {host_name} left out: {why}").items():
                    send(host_name, d, ch, name, v, frozenset())
    for host_name, host in hosts.items():
        plant = await probe_host.plant(host)
        try:
            for d in drivers:
                try:
                    drv = (made or {}).get((host_name, d)) or get_driver(
                        d, host, options.get(d, {})
                    )
                except Exception as exc:
                    for ch in channels:
                        for name, v in na_verdicts(f"{d}: {_why(exc)}").items():
                            send(host_name, d, ch, name, v, frozenset())
                    continue
                promised = promised_of(drv)
                try:
                    problems = await remote_aware_check(host_name, drv)
                    if not problems:
                        cell = CellProbe(drv, host_name, channels[0], plant, limits=limits)
                        problems = await drv.check_workloads([cell.workload_a()])
                    broken = None
                except Exception as exc:  # a driver whose own check fails cannot be probed
                    problems, broken = [], f"its check failed: {_why(exc)}"
                for ch in channels:
                    if log is not None:
                        log(f"probe: {host_name}/{d}/{ch}")
                    if broken is not None:
                        for name, v in na_verdicts(
                            f"{d} cannot run on {host_name}: {broken}"
                        ).items():
                            send(host_name, d, ch, name, v, promised)
                        continue
                    if problems:
                        why = "; ".join(f"{p.reason} (fix: {p.fix})" for p in problems)
                        for name, v in na_verdicts(f"{d} cannot run on {host_name}: {why}").items():
                            send(host_name, d, ch, name, v, promised)
                        continue
                    if ch not in drv.channels:
                        for name, v in na_verdicts(f"{d} has no {ch} channel").items():
                            send(host_name, d, ch, name, v, promised)
                        continue
                    cell = CellProbe(drv, host_name, ch, plant, limits=limits, label=label)

                    pr_ch = promised  # the reuse checks: promised only with an in-place reset
                    if in_place_reset(drv, ch)[0] is None:
                        pr_ch = pr_ch - RESET_CHECKS
                    if integrity_of(drv, ch) is not None:  # and integrity where stated
                        pr_ch = pr_ch - {INTEGRITY_CHECK}

                    def verdict(
                        name: str,
                        v: Verdict,
                        h: str = host_name,
                        dd: str = d,
                        c: str = ch,
                        pr: frozenset[str] = pr_ch,
                    ) -> None:
                        send(h, dd, c, name, v, pr)

                    await cell.run(verdict)
        finally:
            await probe_host.cleanup(plant)


# -- `rtax probe`: a run of the engine ---------------------------------------------


def probe_profile(profile: Profile, drivers: list[str], channels: list[str]) -> Profile:
    """The profile a probe runs as: its hosts, drivers' options and SSH settings, these
    drivers and channels, no workload, no trial, PROBE_LIMITS (what its header says)."""
    return replace(
        profile,
        drivers=tuple(drivers),
        channels=tuple(channels),
        workloads=(),
        trials=0,
        warmup=0,
        seed=0,
        limits=PROBE_LIMITS,
        capacity=None,
        pool=None,
        modes=None,
        images=(),
    )


async def probe_session(session: Session, log: Callable[[str], None] | None = None) -> str:
    """`rtax probe` as a run of the engine: an open session (engine/runner.py `opened`:
    its hosts connected, the reaper up) begins as every run does (its header: every
    host's and driver's facts; its clock), then every check of its profile's drivers and
    channels on its hosts, one `probe` event each, then `run_end`. Its status:
    `completed`, or `interrupted` when cancelled (a stop signal)."""
    p = session.profile
    await session.begin()
    status = "completed"
    try:
        await run_probe(
            session.hosts,
            list(p.drivers),
            list(p.channels),
            session.emit,
            options=p.driver_options,
            limits=p.limits,
            left_out={
                h: why["unreachable"]
                for h, why in session.left_out_hosts.items()
                if "unreachable" in why
            },
            log=log,
            made=session.drivers,
        )
    except asyncio.CancelledError:
        status = "interrupted"
    session.finish(status)
    return status
