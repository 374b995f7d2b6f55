"""Running the boundary checks in a driver's own environments, through its own channel.

For one host, driver and channel, three environments live, each as in a trial:

- **A** runs every escape attempt as an ordinary workload step (`env.action`),
  writes a marker in its workspace at the first action and reads it back at the
  last (`workspace_persists`), then, last, a bounded fork bomb and a memory hog;
- **B** is started while A is alive and looks for A's marker (`other_env`);
- **C** is started after A is torn down and looks for what A wrote in its
  workspace and in /tmp (`fresh_env`).

Every step is declared in the environment's workload before it is created (the
driver sees the same workload it would in a run: image choice, paths a workload
names), and every argument is fixed up front. The probe emits one `probe` event
per check through `emit`; it never raises for what the environment does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtax_tui.core import events, probe_host
from rtax_tui.core import probe_scripts as S
from rtax_tui.core.model import Cell, EnvSpec, Limits, PhaseFailure, Step, Workload
from rtax_tui.core.probe import (
    BY_NAME,
    CHECKS,
    INTEGRITY_CHECK,
    NA,
    POOL_CHECK,
    SENTINEL_CHECKS,
    SOCKET_CHECKS,
    Context,
    Outcome,
    Verdict,
    classify,
    facts,
    trim,
)
from rtax_tui.core.probe_host import HostPlant
from rtax_tui.core.probe_reuse import check_reuse, in_place_reset

# The probe's environments get these limits: the checks need limits to test.
PROBE_LIMITS = Limits(cpus=1, memory_mib=256, pids=128)
STEP_TIMEOUT_S = 30.0
HOG_TIMEOUT_S = 90.0
ENV_TIMEOUT_S = 240.0  # create and ready each: a VM under TCG, a first libvirt connection
TEARDOWN_TIMEOUT_S = 120.0
BOMB_FACTOR = 3  # the fork bomb tries pids x 3 processes
BOMB_DRAIN_S = 3.5  # its `sleep 3` processes end by themselves
HOG_FACTOR = 2  # the memory hog asks for twice the limit
HOG_HOST_MARGIN_MIB = 1024  # never hog on a host with less free memory than this, beyond it
# Host directories the remount check writes into (a random dotfile, removed at once).
REMOUNT_DIRS = ("/", "/root", "/etc", "/usr", "/var", "/var/tmp", "/home", "/opt", "/srv", "/boot")
DOCKER_REQUEST = r"GET /version HTTP/1.0\r\nHost: rtax-probe\r\n\r\n"

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
        INTEGRITY_CHECK,
    }
)
# The steps after result_integrity's attacks, and the status each really has.
TRUTH: tuple[tuple[tuple[str, ...], int], ...] = ((("false",), 1), (("sh", "-c", "exit 3"), 3))


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

    @classmethod
    def new(cls) -> _Names:
        h = os.urandom(6).hex()
        return cls(
            mark=f".rtax-probe-mark-{h}",
            mark_token=probe_host.token("mark"),
            fresh=f".rtax-probe-fresh-{h}",
            fresh_token=probe_host.token("fresh"),
            rw=f".rtax-probe-rw-{h}",
            pvm_token=probe_host.token("pvm"),
        )


class CellProbe:
    """The checks of one driver on one host through one channel."""

    def __init__(
        self,
        driver: Any,
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
        self.marks_output = ""

    # -- the steps -------------------------------------------------------------
    def _remount_dirs(self) -> list[str]:
        dirs = list(REMOUNT_DIRS)
        if self.plant.cache:
            dirs.append(self.plant.cache)
        return dirs

    def _host_paths(self, env: Any) -> list[str]:
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
        if self.limits.pids:
            steps["pids_limit"] = _step(S.FORK_BOMB, str(self.limits.pids * BOMB_FACTOR))
        if self.limits.memory_mib:
            mib = self.limits.memory_mib * HOG_FACTOR
            steps["memory_limit"] = _step(S.MEMORY_HOG, str(mib), timeout=HOG_TIMEOUT_S)
        return steps

    def _spec(self, role: str, steps: list[Step]) -> EnvSpec:
        return EnvSpec(
            cell=Cell(self.host_name, self.drv.name, f"probe-{role}", self.channel),
            workload=Workload(f"probe-{role}", tuple(steps)),
            limits=self.limits,
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
        for c in CHECKS:  # anything not decided above (a step that was never run)
            if c.name not in self.verdicts:
                decide(c.name, Verdict(NA, "not measured (see the other checks' evidence)"))
        return self.verdicts

    async def _act(self, env: Any, step: Step) -> Outcome:
        timeout = step.timeout_s or STEP_TIMEOUT_S
        try:
            res = await asyncio.wait_for(env.action(step, timeout), timeout + 15)
        except Exception as exc:
            return Outcome(error=_why(exc))
        return Outcome(output=res.output.decode(errors="replace"), rc=res.rc)

    async def _run_a(self, env: Any, decide: Callable[[str, Verdict], None]) -> None:
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
        for c in CHECKS:
            name = c.name
            if name in _LATER:
                continue
            if name not in steps:
                decide(name, classify(name, Outcome(), self.ctx))
                continue
            seen = len(lst.lines) if lst is not None else 0
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
                wrote = facts(out.output).get("wrote") or []
                dirs = sorted(set(self._remount_dirs()) | set(wrote))
                observed = {
                    "reached_host": await probe_host.reached_host(self.plant, self.n.rw, dirs)
                }
            decide(name, classify(name, Outcome(out.output, out.rc, out.error, observed), self.ctx))
        if self.marks_written:
            out = await self._act(env, steps["workspace_persists"])
            decide("workspace_persists", classify("workspace_persists", out, self.ctx))
            await self._run_other(env, pwd_a, decide)
        else:
            why = trim(f"the first action could not write its markers: {self.marks_output}")
            for name in ("workspace_persists", "other_env", "fresh_env"):
                decide(name, Verdict(NA, why))
        await self._run_bomb(env, decide)
        await self._run_hog(env, decide)

    async def _run_other(
        self, env_a: Any, pwd_a: str, decide: Callable[[str, Verdict], None]
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

    async def _run_bomb(self, env: Any, decide: Callable[[str, Verdict], None]) -> None:
        step = self.steps.get("pids_limit")
        if step is None:
            decide("pids_limit", Verdict(NA, "no pid limit was asked for"))
            return

        async def host_during() -> dict[str, Any]:
            await asyncio.sleep(1.0)
            return await probe_host.host_answer(self.plant.host)

        act = asyncio.ensure_future(self._act(env, step))
        host = await host_during()
        out = await act
        observed = {**host, "attempts": (self.limits.pids or 0) * BOMB_FACTOR}
        decide(
            "pids_limit",
            classify("pids_limit", Outcome(out.output, out.rc, out.error, observed), self.ctx),
        )
        await asyncio.sleep(BOMB_DRAIN_S)

    async def _run_hog(self, env: Any, decide: Callable[[str, Verdict], None]) -> None:
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
            ]
        else:
            attacks = [_step(S.FORGE_FUNCTIONS)]
        attacks.append(_step(S.FORGE_MEMORY))
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
        """`pool_reuse_clean` through a real pool of one (core.probe_reuse), with the
        driver's in-place reset for this channel: clean, else snapshot; n/a without one."""
        reset, why = in_place_reset(self.drv, self.channel)
        if reset is None:
            decide(POOL_CHECK, Verdict(NA, trim(why)))
            return
        try:
            got = await check_reuse(self.drv, self.host_name, self.channel, reset, self.limits)
        except Exception as exc:
            decide(POOL_CHECK, Verdict(NA, trim(f"the pooled environment failed: {_why(exc)}")))
            return
        decide(POOL_CHECK, Verdict(got.result, trim(got.evidence)))


def _why(exc: BaseException) -> str:
    if isinstance(exc, PhaseFailure):
        return f"{exc.kind}: {exc.message}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


async def _up(drv: Any, spec: EnvSpec) -> Any:
    env = drv.environment(spec)
    try:
        await asyncio.wait_for(env.create(), ENV_TIMEOUT_S)
        await asyncio.wait_for(env.ready(), ENV_TIMEOUT_S)
    except BaseException:
        await _down(env)
        raise
    return env


async def _down(env: Any) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(env.teardown()), TEARDOWN_TIMEOUT_S)
    except Exception:
        pass


def na_verdicts(why: str) -> dict[str, Verdict]:
    """Every check `n/a` for the same reason (a driver or host that cannot run here)."""
    return {c.name: Verdict(NA, trim(why)) for c in CHECKS}


def integrity_of(driver: Any, channel: str) -> str | None:
    """None where the driver states that a step's result reaches rtax through nothing a
    step can write on `channel` (`Driver.integrity`), else why it does not."""
    fn = getattr(driver, "integrity", None)
    if fn is None:
        return "not stated by this driver"
    got: str | None = fn(channel)
    return got


def promised_of(driver: Any) -> frozenset[str]:
    """The checks a driver states it keeps (`Driver.promised_checks()`); none if unstated."""
    fn = getattr(driver, "promised_checks", None)
    if fn is None:
        return frozenset()
    return frozenset(n for n in fn() if n in BY_NAME)


async def run_probe(
    hosts: dict[str, Any],
    drivers: list[str],
    channels: list[str],
    emit: Emit,
    *,
    options: dict[str, dict[str, Any]] | None = None,
    limits: Limits = PROBE_LIMITS,
    left_out: dict[str, str] | None = None,
    log: Callable[[str], None] | None = None,
    label: str = "",
) -> None:
    """Every check for every host x driver x channel, one `probe` event per check.

    `emit` gets events without `t_ns` (the caller's clock adds it). A host left out
    (unreachable), a driver that cannot run on a host, or a channel it lacks gives
    `n/a` for every check, with the reason: the matrix has no holes."""
    from rtax_tui.core.runner import remote_aware_check
    from rtax_tui.drivers import get_driver

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
                    drv = get_driver(d, host, options.get(d, {}))
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

                    pr_ch = promised  # the reuse check: promised only with an in-place reset
                    if in_place_reset(drv, ch)[0] is None:
                        pr_ch = pr_ch - {POOL_CHECK}
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
