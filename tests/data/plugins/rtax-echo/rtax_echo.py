"""`echo`: a minimal third-party driver (no isolation) written against rtax's contract.

Each trial gets a workspace on its host, named after the run's label so that
`rtax cleanup` finds it; every action is a new process in it, its output capped as the
contract asks. It uses only the public contract (Driver, Environment, Problem, the Host
interface) and the drivers' toolkit; nothing else in rtax names it. Its options are
declared as the built-in drivers' are (`model.schema`): rtax checks a profile's
`[drivers_options.echo]` against them and hands the driver a typed `EchoOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtax_tui.drivers.base import Driver, Environment, Problem
from rtax_tui.drivers.toolkit.workspace import (
    WORKSPACE_PREFIX,
    make_workspace,
    remove_workspace,
    workspace_cleanup,
)

from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import ActionResult, PhaseFailure


@dataclass(frozen=True)
class EchoOptions:
    """`[drivers_options.echo]`."""

    shell: str = option(Key((str,), "sh", "the shell `check()` asks for an answer"))
    answer: str = option(Key((str,), "ok", "what it must answer", choices=("ok", "yes")))


class EchoEnvironment(Environment):
    workspace: str | None = None

    async def create(self) -> None:
        self.workspace = await make_workspace(self.driver.host, self.spec.label)

    async def action(self, step, timeout):
        if self.workspace is None:
            raise PhaseFailure("not_created", "no workspace")
        res = await self.driver.host.run(
            list(step.argv), cwd=self.workspace, timeout=timeout, merge_stderr=True, capped=True
        )
        return ActionResult(rc=res.returncode, output=res.stdout, dropped=res.dropped)

    async def teardown(self) -> None:
        if self.workspace is not None:
            await remove_workspace(self.driver.host, self.workspace)
            self.workspace = None


class EchoDriver(Driver):
    name = "echo"
    channels = ("exec",)
    boundary = frozenset()  # keeps nothing out: plain processes of the host
    options_type = EchoOptions
    opts: EchoOptions

    async def check(self) -> list[Problem]:
        answer = self.opts.answer
        res = await self.host.run([self.opts.shell, "-c", f"echo {answer}"], timeout=30)
        if res.stdout != f"{answer}\n".encode():
            return [Problem(f"{self.opts.shell} does not answer", "install dash")]
        return []

    async def facts(self) -> dict:
        return {"plugin": "rtax-echo-driver 0.1.0"}

    def environment(self, spec, sub=None) -> Environment:
        return EchoEnvironment(self, spec, sub)

    async def cleanup(self, label=None) -> int:
        return await workspace_cleanup(self.host, WORKSPACE_PREFIX + (f"{label}-" if label else ""))
