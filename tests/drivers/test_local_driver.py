"""The `local` driver for real: processes, the framed shell, timeouts, nothing left behind."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import tempfile

import pytest
from rtax_tui.drivers.local import LocalDriver
from rtax_tui.drivers.toolkit.shellframe import frame

from rtax_tui.hosts import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload


def spec(channel: str, src: str | None = None) -> EnvSpec:
    cell = Cell("local", "local", "w", channel)
    return EnvSpec(cell, Workload("w", ()), Limits(), workspace_src=src, label="testlocal")


async def lifecycle(channel: str, steps: list[Step], src: str | None = None):
    drv = LocalDriver(LocalHost(), {})
    env = drv.environment(spec(channel, src))
    await env.create()
    await env.ready()
    results = [await env.action(s, 10) for s in steps]
    ws = env.workspace
    await env.teardown()
    return results, ws


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_output_and_exit_codes(channel):
    steps = [
        Step(("sh", "-c", "echo hi; exit 3")),
        Step(("printf", "no-newline")),
        Step(("sh", "-c", "echo err >&2")),
        Step(("true",)),
        Step(("sh", "-c", "printf 'a\\n\\n'")),
        Step(("echo", 'it\'s "quoted" $HOME `x`')),
        Step(("pwd",)),
    ]
    res, ws = asyncio.run(lifecycle(channel, steps))
    assert (res[0].rc, res[0].output) == (3, b"hi\n")
    assert (res[1].rc, res[1].output) == (0, b"no-newline")
    assert res[2].output == b"err\n"
    assert (res[3].rc, res[3].output) == (0, b"")
    assert res[4].output == b"a\n\n"
    assert res[5].output == b'it\'s "quoted" $HOME `x`\n'
    assert res[6].output.strip() == ws.encode()
    assert not os.path.exists(ws)


def test_workspace_is_a_fresh_copy():
    src = tempfile.mkdtemp()
    try:
        with open(os.path.join(src, "f.txt"), "w") as f:
            f.write("content\n")
        steps = [Step(("cat", "f.txt")), Step(("sh", "-c", "echo x > f.txt"))]
        res, _ = asyncio.run(lifecycle("exec", steps, src))
        assert res[0].output == b"content\n"
        with open(os.path.join(src, "f.txt")) as f:
            assert f.read() == "content\n"  # the source was not touched
    finally:
        import shutil

        shutil.rmtree(src)


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_hanging_action_is_killed_at_timeout(channel):
    async def go():
        drv = LocalDriver(LocalHost(), {})
        env = drv.environment(spec(channel))
        await env.create()
        marker = f"sleep {300 + os.getpid() % 1000}.{len(channel)}"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await env.action(Step(("sh", "-c", f"{marker}; echo done")), 0.3)
        await env.teardown()
        return marker

    marker = asyncio.run(go())
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert out == ""


def test_frame_quotes_arguments():
    f = frame(["echo", "a b", "$(x)"], "S")
    assert b"echo 'a b' '$(x)'" in f


def test_cleanup_removes_leftover_workspaces():
    d = tempfile.mkdtemp(prefix="rtax-ws-cleanuptest-")
    n = asyncio.run(LocalDriver(LocalHost(), {}).cleanup("cleanuptest"))
    assert n == 1 and not os.path.exists(d)
    assert glob.glob(os.path.join(tempfile.gettempdir(), "rtax-ws-cleanuptest-*")) == []


def test_says_it_applies_no_limits_but_the_workspace_size():
    # the baseline has no cgroup of its own: the recording's header says so
    facts = asyncio.run(LocalDriver(LocalHost(), {}).facts())
    assert facts["limits"].startswith("cpus, memory_mib, pids: none applied")
    assert "workspace_mib: the workspace's own tmpfs" in facts["limits"]
