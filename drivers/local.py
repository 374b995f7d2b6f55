"""`local`: no isolation, a fresh temporary workspace per trial. The baseline.

Limits: only the workspace's size (its own tmpfs, `workspace_mib`). Commands run as they
are, as the user rtax runs as, in no cgroup of their own (only under a capacity run's
budget cgroup, when there is one): the profile's cpus, memory_mib and pids are not
applied, and the driver's facts in the recording's header say so. A fork bomb or a
memory hog here is the host's.

Programs (issue 38): a step finds its programs on the sandboxes' PATH (`stepenv.
SANDBOX_PATH`, the one `stage` gives) with the same variables as theirs, so that `local`
and a sandbox run the same `python3` (the controller's PATH once gave `local` a pyenv
shim, 7x slower, and the sandbox a negative cost). `[drivers_options.local] env =
"host"` gives the host's own PATH instead (the controller's, or an SSH host's default);
the recording's header says which (`hosts.<host>.drivers.local.env`), and each cell's
`programs` event which files they were.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.base import Driver, Environment, Problem, SubTimer
from rtax_tui.drivers.toolkit.shellframe import FramedShell, shell_action
from rtax_tui.drivers.toolkit.stepenv import SANDBOX_PATH
from rtax_tui.drivers.toolkit.workspace import (
    base_env,
    close_shell,
    drop_workspace,
    run_exec,
    start_workspace,
    tools_problems,
    workspace_cleanup,
)

from rtax_tui.hosts import Host, names
from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, EnvSpec, Step


class LocalEnvironment(Environment):
    def __init__(self, driver: Driver, spec: EnvSpec, sub: SubTimer | None = None) -> None:
        super().__init__(driver, spec, sub)
        self.workspace: str | None = None
        self.env: dict[str, str] = {}
        self.shell_proc: asyncio.subprocess.Process | None = None
        self.shell: FramedShell | None = None
        self._ws: asyncio.Future[str] | None = None
        self.procs = self._cgroup_procs()

    def _cgroup_procs(self) -> list[str]:
        if not self.spec.cgroup_parent:
            return []
        return self.driver.host.cgroup_procs(self.spec.cgroup_parent)

    async def create(self) -> None:
        host = self.driver.host
        async with self.sub("workspace"):
            # Through the host: a copy here, a tar stream on a remote host's stdin there.
            self._ws = start_workspace(host, self.spec)
            self.workspace = await asyncio.shield(self._ws)
            self.env = base_env(self.workspace, self.spec.env, self._path())
        if self.channel == "shell":
            async with self.sub("spawn"):
                self.shell_proc = await host.spawn(
                    ["sh"],
                    cwd=self.workspace,
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    # the shell's own stderr is read by no one: a step's stderr is its
                    # stdout (the frame's group), so nothing the shell writes there can
                    # be read as an answer. The frame is still the hardened one, with
                    # its own `2>/dev/null` and `</dev/null`: a step can close or move
                    # the shell's fd 2 (shellframe's docstring, issue 42's red team)
                    stderr=subprocess.DEVNULL,
                    cgroup_procs=self.procs,
                )
                assert self.shell_proc.stdin and self.shell_proc.stdout
                # on a remote host too, the frame reads no clock: the host's clock is
                # synchronised per connection (hosts.clocksync), not per action
                self.shell = FramedShell(self.shell_proc.stdin, self.shell_proc.stdout)

    def _path(self) -> str:
        """The step's PATH: the sandboxes' (default), or the host's (`env = "host"`)."""
        if getattr(self.driver, "env_source", ENV_DEFAULT) == "host":  # a plugin's subclass
            return self.driver.host.path_env
        return SANDBOX_PATH

    async def action(self, step: Step, timeout: float | None) -> ActionResult:
        if self.channel == "shell":
            return await shell_action(self.shell, step.argv, timeout, "the shell")
        return await run_exec(
            self.driver.host,
            list(step.argv),
            cwd=self.workspace,
            env=self.env,
            timeout=timeout,
            cgroup_procs=self.procs,
        )

    async def teardown(self) -> None:
        host = self.driver.host
        if self.shell_proc is not None:
            stale = self.shell is not None and self.shell.broken
            await close_shell(self.shell_proc, host=host, grace=0.0 if stale else 1.0)
            self.shell_proc = None
        await drop_workspace(host, self.workspace, self._ws)
        self.workspace = self._ws = None


# `[drivers_options.local] env`: where a step's PATH comes from (see the docstring)
ENV_SOURCES = ("sandbox", "host")
ENV_DEFAULT = "sandbox"


@dataclass(frozen=True)
class LocalOptions:
    """`[drivers_options.local]`."""

    env: str = option(Key((str,), ENV_DEFAULT, "where a step's PATH and variables come "
                          "from: the sandboxes' (as `stage`'s) or the host's own",
                          choices=ENV_SOURCES))  # fmt: skip


class LocalDriver(Driver):
    name = "local"
    runs_remote = True
    # No isolation: the baseline keeps nothing out. It does keep a trial's own writes, in
    # a workspace of its own tmpfs (its size, removed at teardown) that `rtax cleanup`
    # spares while the run lives (measured by `rtax probe`).
    boundary = frozenset(
        {"workspace_persists", "workspace_size", "deep_tree", "cleanup_spares_live"}
    )

    options_type = LocalOptions
    opts: LocalOptions

    def __init__(self, host: Host, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self.env_source: str = self.opts.env

    async def check(self) -> list[Problem]:
        return await tools_problems(self.host, ("sh", "mktemp", "tar", "rm"))

    def integrity(self, channel: str) -> str | None:
        return "unsandboxed: a step runs as rtax's own user and can rewrite anything, rtax included"

    def environment(self, spec: EnvSpec, sub: SubTimer | None = None) -> Environment:
        return LocalEnvironment(self, spec, sub)

    async def facts(self) -> dict[str, Any]:
        return {
            "limits": "cpus, memory_mib, pids: none applied (no cgroup, no sandbox: the "
            "baseline); workspace_mib: the workspace's own tmpfs",
            # where a step's PATH came from (issue 38): the sandboxes' or the host's
            "env": self.env_source,
        }

    async def cleanup(self, label: str | None = None) -> int:
        return await workspace_cleanup(self.host, names.workspace_prefix(label))
