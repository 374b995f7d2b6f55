"""`stage` on a remote host over SSH: built only through the host API, nothing left behind."""

from __future__ import annotations

import asyncio
import glob
import os

import pytest
from rtax_tui.drivers import get_driver

from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload
from tests.sshhosts import SSHLab, netns_missing

NETNS = netns_missing()
pytestmark = pytest.mark.skipif(NETNS is not None, reason=NETNS or "")
LABEL = f"sshst{os.getpid()}"


@pytest.fixture(scope="module")
def lab():
    lab = SSHLab()
    try:
        lab.ns = lab.serve_netns(0)
        yield lab
    finally:
        lab.close()


def _left() -> list[str]:
    found = glob.glob(f"/tmp/rtax-ws-{LABEL}-*")
    found += glob.glob(f"/sys/fs/cgroup/**/env-{LABEL}-*", recursive=True)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f"rtax-ws-{LABEL}-".encode() in f.read():
                        found.append(name)
            except OSError:
                pass
    return found


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_remote_stage_sandbox_limits_and_teardown(lab: SSHLab, tmp_path, channel: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.txt").write_text("from the controller\n")

    async def go() -> None:
        host = SSHHost(
            parse_ssh_url(lab.ns.url, identity=lab.identity, known_hosts=lab.known_hosts)
        )
        await host.connect()
        try:
            drv = get_driver("stage", host, {})
            assert await drv.check() == []
            spec = EnvSpec(
                cell=Cell(host.name, "stage", "x", channel),
                workload=Workload("x", ()),
                limits=Limits(cpus=1, memory_mib=128, pids=64),
                workspace_src=str(src),
                label=LABEL,
            )
            env = drv.environment(spec)
            await env.create()
            try:
                await env.ready()
                script = (
                    "hostname; cat hello.txt; pwd; "
                    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null "
                    "|| cat /sys/fs/cgroup/memory.max; "
                    "touch /etc/rtax-ro-check 2>/dev/null && echo WRITABLE || echo ro; "
                    "ip -o link 2>/dev/null | wc -l"
                )
                res = await env.action(Step(("sh", "-c", script)), 30)
                lines = res.output.decode().split()
                assert res.rc == 0, res.output
                assert lines[:4] == ["rtax", "from", "the", "controller"]
                assert "/workspace" in lines and "ro" in lines and "WRITABLE" not in lines
                # the env's cgroup (on the remote host) holds the action's processes
                limit_files = (
                    f"/sys/fs/cgroup/memory/rtax/env-{LABEL}-*/memory.limit_in_bytes "
                    f"/sys/fs/cgroup/rtax/env-{LABEL}-*/memory.max"
                )
                cg = await host.run(["sh", "-c", f"cat {limit_files} 2>/dev/null; :"])
                assert str(128 << 20) in cg.stdout.decode().split()
            finally:
                await env.teardown()
            assert _left() == []
        finally:
            await host.close()

    asyncio.run(go())
    assert _left() == []
