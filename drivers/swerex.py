"""`swerex`: SWE-ReX, the runtime SWE-agent uses, as a substrate (an optional extra).

SWE-ReX (`pip install 'rtax[swerex]'`: swe-rex, and aiohttp for its remote client) is
imported only when this driver is used; `check()` says how to install it when it is
missing. Option `deployment` picks how SWE-ReX runs (`[drivers_options.swerex]`):

- `local`: its `LocalRuntime` in rtax's own process: the object its server wraps.
  Its async methods block (pexpect, subprocess.run), as they block the server's event
  loop, so each environment gets a thread with its own event loop and calls cross to
  it (`_Worker`). Keeps nothing out: a workspace directory, as the `local` driver.
- `remote`: its server (`python -m swerex.server`, what `swerex-remote` runs) started
  per environment on 127.0.0.1, an ephemeral port (uvicorn prints the one it bound),
  a token; rtax talks to it through SWE-ReX's `RemoteRuntime` (aiohttp, one
  connection per request, as SWE-ReX does). Keeps nothing out either.
- `docker`: its `DockerDeployment` as SWE-ReX ships it (`docker run -p PORT:8000`, the
  server inside, polled until alive), on `rtax/swerex:<hash>` (`rtax images build
  --driver swerex`: the Debian workload image plus swe-rex, built with no network).
  Keeps out what Docker's defaults keep out, with rtax's limits passed as `docker run`
  flags; its published port needs a bridge network, so the host's loopback is not
  promised.

Limits: deployment `docker` passes cpus, memory_mib and pids as `--cpus`, `--memory`
(and `--memory-swap`), `--pids-limit`; deployments `local` and `remote` apply none
(no cgroup, as the `local` driver). `workspace_mib` is applied by none of them.

Channels: `shell` is a SWE-ReX bash session (`create_session`, then `run_in_session`
per action: pexpect on a pty, a `bash -n` syntax check and a second round trip for the
exit code, all SWE-ReX's own); `exec` is `execute` (a `subprocess.run` per action on
SWE-ReX's side). Output comes back as text (SWE-ReX decodes it), re-encoded as UTF-8.

Phases: create = the workspace and SWE-ReX's deployment started (`create.server`: the
server answers; `create.container`: the container's server answers; `create.upload`:
the workload's files sent through SWE-ReX's upload); ready = the bash session
(`ready.session`, then its working directory and variables) and the probe `true`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from rtax_tui.drivers.base import (
    DaemonNeed,
    Driver,
    Environment,
    ImageRecipe,
    Problem,
    SubTimer,
    which,
)
from rtax_tui.drivers.toolkit.images import swerex_images
from rtax_tui.drivers.toolkit.workspace import (
    base_env,
    drop_workspace,
    start_workspace,
    workspace_cleanup,
)

from rtax_tui.hosts import Host, names
from rtax_tui.model import runlock
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, EnvSpec, OutputSink, PhaseFailure, Step

if TYPE_CHECKING:
    from swerex.deployment.docker import DockerDeployment
    from swerex.runtime.abstract import AbstractRuntime

T = TypeVar("T")


def _capped(rc: int, text: str) -> ActionResult:
    """An action's result as every driver gives it: the output's first OUTPUT_LIMIT bytes
    kept, the rest counted. Only the record is bounded here: SWE-ReX itself gathers the
    whole output first (in its server, or in rtax's process with deployment `local`), and
    rtax can't read it as it comes (issue 19)."""
    sink = OutputSink()
    sink.add(text.encode())
    return ActionResult(rc=rc, output=sink.kept(), dropped=sink.dropped)


DEPLOYMENTS = ("local", "remote", "docker")
INSTALL_FIX = "pip install 'rtax[swerex]' (swe-rex and aiohttp)"
LABEL_KEY = "rtax.run"
DRIVER_LABEL = "rtax.driver=swerex"  # which rtax.run containers are this driver's
DOCKER_SOCK = "/var/run/docker.sock"
CONTAINER_WORKSPACE = "/workspace"
SESSION = "rtax"
STARTUP_S = 30.0
# the prompt variables SWE-ReX's session set for itself: kept when the rest is unset
_KEEP = '[ "$v" = PS1 ] || [ "$v" = PS2 ] || [ "$v" = PS0 ]'
# uvicorn's line once the server listens: the port it bound (we ask for port 0).
_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_LOG = logging.getLogger("rtax.swerex")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


def _missing() -> str | None:
    """Why SWE-ReX cannot be imported here, or None."""
    try:  # all of it, once, here: not in the first trial's create
        import aiohttp  # noqa: F401  (its RemoteRuntime's client; not a declared dependency)
        import swerex.deployment.docker  # noqa: F401
        import swerex.runtime.local  # noqa: F401
        import swerex.runtime.remote  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _quiet_swerex() -> None:
    """SWE-ReX's loggers print rich-formatted DEBUG lines to stderr (over the console):
    give the ones it makes by name a handler that drops everything, before it does."""
    for name in ("rex-session", "rex-session-rtax", "rex-runtime", "rex-deploy", "free_port"):
        lg = logging.getLogger(name)
        if not lg.handlers:
            lg.addHandler(logging.NullHandler())
        lg.propagate = False


class _Worker:
    """A thread running its own event loop, for SWE-ReX calls that block their caller's
    loop (the local runtime, the Docker deployment's start and stop). One per environment,
    so one environment's blocked call never holds up another's or the engine."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.pending: concurrent.futures.Future[Any] | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        from swerex.utils.log import register_thread_name

        register_thread_name("rtax")  # SWE-ReX's logger names: one quiet set, not one a thread
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self.pending = fut
        return await asyncio.wrap_future(fut)

    async def settle(self, within_s: float) -> None:
        """Wait (bounded) for a call still running in the thread, e.g. one whose caller
        gave up: the thread finishes it before it can run the next."""
        fut = self.pending
        if fut is not None and not fut.done():
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), within_s)
            except BaseException:
                pass

    async def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, 10)


def _pids_in(path: str) -> list[int]:
    """Processes whose working directory is `path` or below (the server, its bash
    session, what an action started): what a SWE-ReX environment runs here."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd == path or cwd.startswith(path + "/") or cwd == f"{path} (deleted)":
            found.append(int(name))
    return found


def _kill_in(path: str) -> None:
    for _ in range(5):  # a process may fork while the last ones are killed
        pids = _pids_in(path)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


async def _end_in(path: str) -> None:
    """What still runs in a workspace about to be removed, killed (off the loop)."""
    await asyncio.to_thread(_kill_in, path)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class SwerexEnvironment(Environment):
    driver: SwerexDriver

    def __init__(self, driver: Driver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.deployment: str = self.driver.deployment
        self.workspace: str | None = None  # on the host (local, remote)
        self._ws: asyncio.Future[str] | None = None
        self.cwd = CONTAINER_WORKSPACE  # where commands run
        self.env: dict[str, str] = {}
        self.runtime: AbstractRuntime | None = None
        self.worker: _Worker | None = None
        self.server: Any = None  # the remote deployment's server process
        self.drain: asyncio.Task[None] | None = None
        self.docker: DockerDeployment | None = None
        self.session_pgids: list[int] = []
        self.broken = False  # a session action that did not finish: never reused

    # -- create ----------------------------------------------------------------------

    async def create(self) -> None:
        if self.spec.cgroup_parent and self.deployment != "remote":
            raise PhaseFailure(
                ErrorKind.NOT_SUPPORTED,
                f"swerex deployment {self.deployment!r} cannot join a budget cgroup "
                "(capacity batches): use deployment = 'remote'",
            )
        _quiet_swerex()
        if self.deployment == "docker":
            await self._create_docker()
            return
        host = self.driver.host
        async with self.sub("workspace"):
            self._ws = start_workspace(host, self.spec)
            self.workspace = await asyncio.shield(self._ws)
            self.cwd = self.workspace
            self.env = base_env(self.workspace, self.spec.env, host.path_env)
        if self.deployment == "local":
            from swerex.runtime.local import LocalRuntime

            self.worker = _Worker(names.swerex_worker(self.spec.label))
            self.runtime = LocalRuntime(logger=_LOG)
        else:
            async with self.sub("server"):
                await self._start_server()

    async def _start_server(self) -> None:
        """`swerex-remote` on 127.0.0.1, port 0, in the workspace; up when uvicorn says
        which port it bound. The token carries the workspace's name, so that the server
        is found by its command line (leftover scans) as by its working directory."""
        from swerex.runtime.remote import RemoteRuntime

        assert self.workspace is not None
        host = self.driver.host
        token = f"{os.path.basename(self.workspace)}-{secrets.token_hex(16)}"
        argv = [sys.executable, "-m", "swerex.server", "--host", "127.0.0.1", "--port", "0"]
        cgroup = host.cgroup_procs(self.spec.cgroup_parent) if self.spec.cgroup_parent else []
        self.server = await host.spawn(
            [*argv, "--auth-token", token],
            cwd=self.workspace,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # uvicorn logs to stderr
            cgroup_procs=cgroup,
        )
        assert self.server.stdout is not None
        port = await self._listening_port(self.server.stdout)
        # uvicorn logs every request: keep reading, or its pipe fills and it blocks
        self.drain = asyncio.ensure_future(self._discard(self.server.stdout))
        self.runtime = RemoteRuntime(
            host="http://127.0.0.1", port=port, auth_token=token, timeout=10, logger=_LOG
        )

    async def _listening_port(self, out: asyncio.StreamReader) -> int:
        seen = b""
        while True:
            line = await out.readline()
            if not line:
                raise PhaseFailure(
                    ErrorKind.SERVER_EXITED,
                    f"swerex-remote exited before listening: {seen[-300:]!r}",
                )
            seen += line
            m = _LISTENING.search(line)
            if m:
                return int(m.group(1))

    @staticmethod
    async def _discard(out: asyncio.StreamReader) -> None:
        while await out.read(1 << 16):
            pass

    async def _create_docker(self) -> None:
        from swerex.deployment.docker import DockerDeployment

        limits = self.spec.limits
        args = ["--label", f"{LABEL_KEY}={self.spec.label}", "--label", DRIVER_LABEL]
        args += ["--workdir", CONTAINER_WORKSPACE, "--log-driver", "none"]  # no host log
        if limits.cpus:
            args += ["--cpus", str(limits.cpus)]
        if limits.memory_mib:
            args += ["--memory", f"{limits.memory_mib}m", "--memory-swap", f"{limits.memory_mib}m"]
        if limits.pids:
            args += ["--pids-limit", str(limits.pids)]
        self.driver.track_label(self.spec.label)  # the reaper finds it by label, kill -9 too
        self.env = base_env(CONTAINER_WORKSPACE, self.spec.env, self.driver.container_path)
        self.worker = _Worker(names.swerex_worker(self.spec.label))
        self.docker = DockerDeployment(
            image=self.driver.image,
            pull="never",
            python_standalone_dir=None,
            docker_args=args,
            startup_timeout=60.0,
            logger=_LOG,
        )
        async with self.sub("container"):
            await self.worker.call(self.docker.start())  # type: ignore[no-untyped-call,unused-ignore]
        self.runtime = self.docker.runtime
        if self.spec.workspace_src:
            from swerex.runtime.abstract import UploadRequest

            async with self.sub("upload"):
                await self.runtime.upload(
                    UploadRequest(source_path=self.spec.workspace_src, target_path=self.cwd)
                )

    # -- ready and actions ----------------------------------------------------------

    async def _rex(self, coro: Coroutine[Any, Any, T]) -> T:
        """A runtime call: through the worker thread for the local runtime, else here."""
        if self.deployment == "local":
            assert self.worker is not None
            return await self.worker.call(coro)
        return await coro

    async def ready(self) -> None:
        if self.runtime is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "SWE-ReX's runtime was never started")
        if self.channel == "shell":
            from swerex.runtime.abstract import CreateBashSessionRequest

            async with self.sub("session"):
                # its default of 1 s for bash to print its prompt is missed on a loaded
                # machine when bash sources a ~/.bashrc (the local runtime's bash has
                # rtax's HOME): the engine's ready timeout is the limit instead
                req = CreateBashSessionRequest(session=SESSION, startup_timeout=STARTUP_S)
                await self._rex(self.runtime.create_session(req))
                self._note_session()
                # SWE-ReX's bash starts where its runtime runs, with its environment (the
                # local runtime: rtax's own, TERM included, which makes readline add
                # \r\n to every output): move it to the workspace with only a plain
                # workspace's variables, as the server's (SWE-agent too sends its own
                # `cd` and `export` after starting a session)
                setup = (
                    shlex.join(["cd", self.cwd])
                    + f" && for v in $(compgen -e); do {_KEEP} || unset -v $v; done"
                    + "".join(f" && export {k}={shlex.quote(v)}" for k, v in self.env.items())
                )
                res = await self._session(setup, 30)
                if res.rc != 0:
                    raise PhaseFailure(
                        ErrorKind.SESSION_SETUP, f"cd/export in the session gave rc {res.rc}"
                    )
        await super().ready()

    def _note_session(self) -> None:
        """The local runtime's bash is our child, in its own session (pexpect): its group
        is killed at teardown whatever state the session is in."""
        if self.deployment != "local" or self.runtime is None:
            return
        from swerex.runtime.local import BashSession, LocalRuntime

        assert isinstance(self.runtime, LocalRuntime)
        sess = self.runtime.sessions.get(SESSION)
        if isinstance(sess, BashSession) and sess._shell is not None:
            pid = int(sess._shell.pid)
            self.session_pgids.append(pid)
            self.driver.host.track("pgid", str(pid))

    async def _session(self, command: str, timeout: float | None) -> ActionResult:
        from swerex.exceptions import CommandTimeoutError
        from swerex.runtime.abstract import BashAction

        assert self.runtime is not None
        action = BashAction(command=command, session=SESSION, timeout=timeout, check="silent")
        try:
            obs = await self._rex(self.runtime.run_in_session(action))
        except CommandTimeoutError as exc:
            raise TimeoutError(str(exc)) from None
        if obs.exit_code is None:
            raise PhaseFailure(
                ErrorKind.NO_EXIT_CODE, f"SWE-ReX found no exit code: {obs.failure_reason}"
            )
        return _capped(obs.exit_code, obs.output)

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.runtime is None:
            raise PhaseFailure(ErrorKind.NOT_CREATED, "SWE-ReX's runtime was never started")
        if self.channel == "shell":
            if self.broken:  # the stale-channel rule: its prompt may still be coming
                raise PhaseFailure(ErrorKind.SHELL_LOST, "an earlier action did not finish; stale")
            try:
                return await self._session(shlex.join(step.argv), timeout)
            except BaseException:
                self.broken = True
                raise
        from swerex.exceptions import CommandTimeoutError
        from swerex.runtime.abstract import Command

        cmd = Command(
            command=list(step.argv),
            timeout=timeout,
            env=self.env,
            cwd=self.cwd,
            merge_output_streams=True,
        )
        try:
            res = await self._rex(self.runtime.execute(cmd))
        except CommandTimeoutError as exc:
            raise TimeoutError(str(exc)) from None
        rc = res.exit_code if res.exit_code is not None else -1
        return _capped(rc, res.stdout)

    # -- teardown --------------------------------------------------------------------

    async def teardown(self) -> None:
        if self.deployment == "docker":
            await self._teardown_docker()
        else:
            await self._teardown_host()

    async def _teardown_host(self) -> None:
        host = self.driver.host
        if self.server is not None and self.runtime is not None:
            try:  # SWE-ReX's own stop: the runtime closes its sessions
                await asyncio.wait_for(self.runtime.close(), 2)
            except Exception:
                pass
        if self.workspace is not None:
            # what runs there (a hanging action, the server, its bash) is killed first, so
            # that a call blocked on it returns and SWE-ReX's own close finds nothing hung
            for pgid in self.session_pgids:
                _kill_group(pgid)
            await asyncio.to_thread(_kill_in, self.workspace)
        if self.worker is not None:
            await self.worker.settle(10)
            if self.runtime is not None:  # closes its sessions (pexpect: close, kill)
                try:
                    await asyncio.wait_for(self.worker.call(self.runtime.close()), 10)
                except Exception:
                    pass
            await self.worker.stop()
            self.worker = None
        if self.server is not None:
            await host.kill(self.server)
            await self.server.wait()
            host.release(self.server)
            self.server = None
        if self.drain is not None:
            self.drain.cancel()
            self.drain = None
        for pgid in self.session_pgids:
            host.untrack("pgid", str(pgid))
        self.session_pgids = []
        self.runtime = None
        await drop_workspace(host, self.workspace, self._ws, _end_in)
        self.workspace = self._ws = None

    async def _teardown_docker(self) -> None:
        """SWE-ReX's own stop (close the runtime, `docker kill`; `--rm` removes it), then,
        if that failed or the start never finished, the container removed by name."""
        if self.worker is None or self.docker is None:
            return
        dep = self.docker
        await self.worker.settle(70)  # a start still under way, whose caller gave up
        name = dep.container_name
        proc = dep._container_process
        try:
            await asyncio.wait_for(self.worker.call(dep.stop()), 30)  # type: ignore[no-untyped-call,unused-ignore]
        except Exception:
            pass
        if dep.container_name is not None and name is not None:  # its stop did not finish
            await self.driver.host.run(["docker", "rm", "-f", name], timeout=60)
        if proc is not None and proc.poll() is None:
            proc.kill()
            await asyncio.to_thread(proc.wait)
        await self.worker.stop()
        self.worker = None
        self.docker = None
        self.runtime = None


@dataclass(frozen=True)
class SwerexOptions:
    """`[drivers_options.swerex]`."""

    deployment: str = option(
        Key(
            (str,),
            "local",
            "how SWE-ReX runs: its runtime in rtax's "
            "process, its server per environment, or its docker "
            "deployment",
            choices=DEPLOYMENTS,
        )
    )
    image: str | None = option(
        Key(
            (str,),
            None,
            "the docker deployment's image tag (none: "
            "the one `rtax images build --driver swerex` builds)",
        )
    )


class SwerexDriver(Driver):
    name = "swerex"
    channels = ("exec", "shell")
    # its docker deployment's image and daemon (the local and remote ones need neither)
    image_recipe = ImageRecipe("swerex", swerex_images)
    daemon: ClassVar[DaemonNeed] = DaemonNeed("dockerd", "bash scripts/start-dockerd")
    leaves = frozenset({"containers", "monitors"})
    variants = ("deployment", ("local", "remote", "docker"))
    # The local runtime and the server run on the controller (127.0.0.1, its /proc).
    runs_remote = False
    # local, remote: no isolation, as the `local` driver; docker: see promised_checks.
    boundary = frozenset({"workspace_persists"})

    options_type = SwerexOptions
    opts: SwerexOptions

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.deployment: str = self.opts.deployment
        self._image: str | None = self.opts.image
        self.container_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self._tracked: set[str] = set()

    @property
    def image(self) -> str:
        if self._image is None:
            from rtax_tui.drivers.toolkit.images import swerex_image_tag

            self._image = swerex_image_tag()
        return self._image

    def promised_checks(self) -> frozenset[str]:
        if self.deployment != "docker":
            return self.boundary
        from rtax_tui.model.checks import ALL_CHECKS

        # Docker's defaults (root, default capabilities, seccomp) with rtax's limits as
        # flags; the published port needs a bridge network: the host's loopback may be
        # reachable, so that one is not promised; nor what Docker's defaults let through
        # (the docker driver's `boundary`: vsock, /proc/cmdline); nor the workspace's size
        # (not applied) nor `deep_tree` (the container's layer: no host path to look at).
        return ALL_CHECKS - {"loopback_tcp", "vsock", "proc_cmdline", "workspace_size", "deep_tree"}

    def track_label(self, label: str) -> None:
        if label and label not in self._tracked:
            self._tracked.add(label)
            self.host.track("containers", f"{DOCKER_SOCK} {LABEL_KEY}={label}")

    async def check(self) -> list[Problem]:
        why = _missing()
        if why is not None:
            return [Problem(f"SWE-ReX is not installed ({why})", INSTALL_FIX)]
        if not self.host.controller_local:
            return [
                Problem(
                    f"swerex runs SWE-ReX on the controller, not on host {self.host.name}",
                    "use it on the local host",
                )
            ]
        if which("bash") is None:
            return [Problem("SWE-ReX's sessions need bash, not on PATH", "apt-get install bash")]
        if self.deployment != "docker":
            return []
        if which("docker") is None:
            return [Problem("`docker` is not on PATH", "apt-get install docker.io")]
        net = await self.host.run(["docker", "network", "inspect", "bridge"], timeout=60)
        if net.returncode != 0:
            err = (net.stderr or net.stdout).decode(errors="replace").strip()[-200:]
            return [
                Problem(
                    "SWE-ReX's Docker deployment publishes its server's port (docker run -p), "
                    f"which needs dockerd's bridge network: {err}",
                    "run dockerd with its default bridge (scripts/start-dockerd starts it "
                    "with --bridge=none)",
                )
            ]
        res = await self.host.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", self.image], timeout=60
        )
        if res.returncode != 0:
            err = (res.stderr or res.stdout).decode(errors="replace").strip()[-200:]
            if "daemon" in err or "connect" in err:
                return [Problem(f"dockerd does not answer: {err}", self.daemon.start)]
            return [
                Problem(
                    f"no SWE-ReX image {self.image}",
                    "rtax images build --driver swerex",
                )
            ]
        return []

    async def facts(self) -> dict[str, Any]:
        limits = (
            "cpus, memory_mib, pids: docker run's (--cpus, --memory, --pids-limit); "
            "workspace_mib: not applied"
            if self.deployment == "docker"
            else "cpus, memory_mib, pids: none applied, no cgroup (as the local driver); "
            "workspace_mib: the workspace's own tmpfs"
        )
        try:
            import swerex
        except ImportError:
            return {"deployment": self.deployment, "limits": limits}
        facts: dict[str, Any] = {
            "swerex": swerex.__version__,
            "deployment": self.deployment,
            "limits": limits,
        }
        if self.deployment == "docker":
            facts["image"] = self.image
        return facts

    def integrity(self, channel: str) -> str | None:
        return (
            "the SWE-ReX server that reports each status runs inside the environment, as "
            "the workload's own user"
        )

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return SwerexEnvironment(self, spec, sub)

    async def cleanup(self, label: str | None = None) -> int:
        """Workspaces (and what runs in them: servers, sessions) of any deployment, and
        containers labelled with the run, whatever the deployment option says now."""
        n = await workspace_cleanup(self.host, names.workspace_prefix(label))
        if which("docker") is None:
            return n
        sel = f"{LABEL_KEY}={label}" if label else LABEL_KEY
        fmt = '{{.ID}} {{.Label "' + LABEL_KEY + '"}}'
        argv = ["docker", "ps", "-a", "--format", fmt, "--filter", f"label={sel}"]
        res = await self.host.run([*argv, "--filter", f"label={DRIVER_LABEL}"], timeout=60)
        found = (
            [ln.split() for ln in res.stdout.decode().splitlines()] if res.returncode == 0 else []
        )
        live = await runlock.live_labels_on(self.host)  # after the listing: see runlock
        ids = [f[0] for f in found if f and names.safe_label(" ".join(f[1:])) not in live]
        runlock.note_spared(len([f for f in found if f]) - len(ids))
        if ids:
            await self.host.run(["docker", "rm", "-f", *ids], timeout=120)
        return n + len(ids)
