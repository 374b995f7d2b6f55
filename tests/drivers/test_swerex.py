"""What is specific to the swerex driver (the contract suite runs it once per deployment):
its options, what it says when SWE-ReX is not installed, the environment its bash
session and its `execute` see, and the boundary it states per deployment."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.swerex import SwerexDriver

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.checks import ALL_CHECKS
from rtax_tui.model.spec import Cell, EnvSpec, Limits, OptionError, Step, Workload

pytest.importorskip("swerex", reason="SWE-ReX is not installed (pip install 'rtax[swerex]')")


def test_options_are_checked_with_the_key_named():
    with pytest.raises(OptionError, match="allowed: local, remote, docker") as exc:
        SwerexDriver.check_options({"deployment": "modal"})
    assert exc.value.key == "deployment"
    with pytest.raises(OptionError) as exc:
        SwerexDriver.check_options({"deploy": "local"})
    assert exc.value.key == "deploy"


def test_boundary_per_deployment():
    host = LocalHost()
    for dep in ("local", "remote"):
        assert get_driver("swerex", host, {"deployment": dep}).promised_checks() == {
            "workspace_persists"
        }
    docker = get_driver("swerex", host, {"deployment": "docker", "image": "x"})
    not_kept = {"loopback_tcp", "vsock", "proc_cmdline", "workspace_size", "deep_tree"}
    assert docker.promised_checks() == ALL_CHECKS - not_kept


def test_without_swerex_check_says_how_to_install():
    """SWE-ReX hidden from the import system: the registry still loads the driver, and
    its check names the extra to install (the contract suite skips it with that)."""
    code = (
        "import sys, asyncio; sys.modules['swerex'] = None\n"
        "from rtax_tui.drivers import get_driver\n"
        "from rtax_tui.hosts.local import LocalHost\n"
        "p = asyncio.run(get_driver('swerex', LocalHost(), {}).check())\n"
        "print(p[0].reason); print(p[0].fix)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, env=os.environ.copy()
    )
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    out = res.stdout.decode()
    assert "SWE-ReX is not installed" in out
    assert "pip install 'rtax[swerex]'" in out


@pytest.mark.parametrize("deployment", ["local", "remote"])
@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_commands_see_a_plain_workspace(deployment, channel, monkeypatch):
    """Both channels run in the workspace with its variables, not rtax's: the local
    runtime's bash would otherwise inherit rtax's environment (TERM makes readline add
    \\r\\n to every output)."""
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("RTAX_SWEREX_LEAK", "1")
    drv = get_driver("swerex", LocalHost(), {"deployment": deployment})
    spec = EnvSpec(
        cell=Cell("local", "swerex", "t", channel),
        workload=Workload("t", ()),
        limits=Limits(),
        env={"RTAX_GIVEN": "yes"},
        label=f"swx{os.getpid()}",
    )

    async def run() -> None:
        env = drv.environment(spec)
        try:
            await env.create()
            await env.ready()
            script = 'echo "$PWD|$HOME|${TERM-}|${RTAX_SWEREX_LEAK-}|$RTAX_GIVEN"; printf x'
            r = await env.action(Step(("sh", "-c", script)), 30)
            ws = env.workspace
            assert r.rc == 0
            assert r.output == f"{ws}|{ws}|||yes\nx".encode(), r.output
        finally:
            await env.teardown()

    asyncio.run(run())
