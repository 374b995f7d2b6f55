"""The VM guest's agent (rtax_tui/core/vmagent.c) on the host, without a VM: compiled
as for the guest, serving a pty in raw mode as it serves its virtio-serial port, with
the host side's `AgentChannel`. The workload runs as uid 1000 (root is needed)."""

from __future__ import annotations

import asyncio
import os
import pty
import shutil
import subprocess
import tempfile
import tty
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from rtax_tui.drivers.vmguest import AgentChannel

from rtax_tui.core.model import PhaseFailure, Step
from rtax_tui.core.rootfs import find_static_busybox
from rtax_tui.core.vmimage import compile_agent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or find_static_busybox() is None or shutil.which("cc") is None,
    reason="needs root, a static busybox and a C compiler",
)

FORGE = r"""printf() { command printf '\n%s 0\n' "$2"; }
read() { return 0; }
echo() { command printf '\n%s 0\n' "$2"; }
alias read=true
set -v
:"""


@pytest.fixture(scope="module")
def bin_dir() -> Iterator[str]:
    """The agent and an execute-only busybox, in a directory uid 1000 can pass."""
    d = tempfile.mkdtemp(prefix="rtax-vmagent-test-")
    os.chmod(d, 0o755)
    with open(os.path.join(d, "agent"), "wb") as f:
        f.write(compile_agent())
    os.chmod(os.path.join(d, "agent"), 0o755)
    bb = find_static_busybox()
    assert bb is not None
    shutil.copyfile(bb, os.path.join(d, "ush"))
    os.chmod(os.path.join(d, "ush"), 0o111)
    yield d
    shutil.rmtree(d)


@asynccontextmanager
async def agent(bin_dir: str) -> AsyncIterator[tuple[AgentChannel, int]]:
    master, slave = pty.openpty()
    tty.setraw(master)
    tty.setraw(slave)
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "agent"), os.ttyname(slave), os.path.join(bin_dir, "ush")],
        cwd="/",
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(master, "rb", 0)
    )
    wt, wp = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(master), "wb", 0)
    )
    writer = asyncio.StreamWriter(wt, wp, reader, loop)
    ch = AgentChannel(reader, writer)
    try:
        await asyncio.wait_for(ch.hello(), 10)
        yield ch, proc.pid
    finally:
        proc.kill()
        proc.wait()
        ch.close()
        os.close(slave)


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


@pytest.mark.parametrize("fresh", [False, True])
def test_output_status_and_the_user(bin_dir: str, fresh: bool) -> None:
    async def go() -> None:
        async with agent(bin_dir) as (ch, _):
            r = await ch.run(Step(("sh", "-c", "id -u; printf 'no newline' >&2; exit 3")), fresh)
            assert (r.rc, r.output) == (3, b"1000\nno newline")
            assert r.remote_ns is not None and r.remote_ns > 0
            r = await ch.run(Step(("printf", "%s", "a 'quoted'\n word")), fresh)
            assert r.output == b"a 'quoted'\n word"
            r = await ch.run(Step(("sh", "-c", "kill -9 $$")), fresh)
            assert r.rc == 137
            await ch.run(Step(("cd", "/tmp") if not fresh else ("true",)), fresh)
            r = await ch.run(Step(("pwd",)), fresh)
            assert r.output == (b"/tmp\n" if not fresh else b"/\n")

    run(go())


def test_a_step_that_redefines_printf_and_read_forges_nothing(bin_dir: str) -> None:
    async def go() -> None:
        async with agent(bin_dir) as (ch, _):
            assert (await ch.run(Step(("eval", FORGE)), False)).rc == 0
            assert (await ch.run(Step(("false",)), False)).rc == 1
            assert (await ch.run(Step(("sh", "-c", "exit 5")), False)).rc == 5
            # a background process printing frames: output, never a status
            bg = "( while :; do command printf '\\n%s 0\\n' __RTAX_x; sleep 0.01; done ) &"
            await ch.run(Step(("eval", bg)), False)
            await asyncio.sleep(0.2)
            r = await ch.run(Step(("false",)), False)
            assert r.rc == 1

    run(go())


@pytest.mark.parametrize("fresh", [False, True])
def test_no_step_opens_the_agent_s_or_the_shell_s_memory(bin_dir: str, fresh: bool) -> None:
    async def go() -> None:
        async with agent(bin_dir) as (ch, pid):
            await ch.run(Step(("true",)), False)  # the shell started
            look = (
                f"for p in {pid} $PPID; do (exec 3<>/proc/$p/mem) 2>/dev/null && echo mem$p;"
                f" (ls /proc/$p/fd/) >/dev/null 2>&1 && echo fd$p; done; echo looked"
            )
            r = await ch.run(Step(("sh", "-c", look)), fresh)
            # $PPID: the persistent shell (shell channel), the agent (exec)
            assert r.output == b"looked\n", r.output

    run(go())


def test_a_shell_that_exec_s_is_lost_not_believed(bin_dir: str) -> None:
    async def go() -> None:
        async with agent(bin_dir) as (ch, _):
            await ch.run(Step(("true",)), False)
            with pytest.raises(PhaseFailure) as ei:
                await ch.run(Step(("exec", "sh")), False)
            assert ei.value.kind in ("shell_lost", "integrity")
            assert ch.broken

    run(go())
