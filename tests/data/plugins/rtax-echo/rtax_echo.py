"""`echo`: a minimal third-party driver (no isolation) written against rtax's contract.

Each trial gets a workspace on its host; every action is a new process in it. It uses
only the public contract (Driver, Environment, Problem, the Host interface).
"""

from __future__ import annotations

from rtax_tui.drivers.base import Driver, Environment, Problem

from rtax_tui.model.spec import ActionResult, PhaseFailure


class EchoEnvironment(Environment):
    workspace: str | None = None

    async def create(self) -> None:
        self.workspace = await self.driver.host.make_workspace("rtax-ws-echo-")

    async def action(self, step, timeout):
        if self.workspace is None:
            raise PhaseFailure("not_created", "no workspace")
        res = await self.driver.host.run(
            list(step.argv), cwd=self.workspace, timeout=timeout, merge_stderr=True
        )
        return ActionResult(rc=res.returncode, output=res.stdout)

    async def teardown(self) -> None:
        if self.workspace is not None:
            await self.driver.host.remove_tree(self.workspace)
            self.workspace = None


class EchoDriver(Driver):
    name = "echo"
    channels = ("exec",)
    boundary = "none: a plugin test double's plain processes"

    async def check(self) -> list[Problem]:
        res = await self.host.run(["sh", "-c", "echo ok"], timeout=30)
        if res.stdout != b"ok\n":
            return [Problem("sh does not answer", "install dash")]
        return []

    async def facts(self) -> dict:
        return {"plugin": "rtax-echo-driver 0.1.0"}

    def environment(self, spec, sub=None) -> Environment:
        return EchoEnvironment(self, spec, sub)
