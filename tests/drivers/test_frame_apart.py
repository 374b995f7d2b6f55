"""The frame for a shell whose own stderr is not read (issue 42, item 4): the `eval` has no
redirection of its own. No driver sends it since issue 42's red team (a step can close or
move the fd 2 it trusts: tests/hostile/test_hostile_frame.py); the benches still compare it, and
these tests keep what it does under the attacks tried first."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
from rtax_tui.drivers.toolkit import shellframe
from rtax_tui.drivers.toolkit.shellframe import FramedShell, frame, frame_apart

from rtax_tui.hosts.ssh import remote_command

SIGNALS = " ".join(str(n) for n in range(65))


def test_the_frame_is_the_hardened_one_byte_for_byte() -> None:
    tail = (
        f'\\eval "\\\\trap - {SIGNALS}; \\\\set +ev; \\\\unset -f printf read; '
        "\\\\printf '\\n%s %d\\n' S $?\""
    )
    group = "{ \\/bin/sh -c 'exit 3'\n} </dev/null 9>&1 >&9 2>&1 9>&-; "
    assert frame(["/bin/sh", "-c", "exit 3"], "S") == f"{group}{{ {tail}; }} 2>/dev/null\n".encode()
    apart = group.replace("</dev/null", "<&2")
    assert frame_apart(["/bin/sh", "-c", "exit 3"], "S") == f"{apart}{tail}\n".encode()


def test_a_framed_shell_takes_the_frame_its_driver_asks_for() -> None:
    async def go() -> tuple[object, object]:
        r = asyncio.StreamReader()
        return FramedShell(None, r)._frame, FramedShell(None, r, stderr_apart=True)._frame  # type: ignore[arg-type]

    assert asyncio.run(go()) == (frame, frame_apart)


def test_a_status_line_past_the_readers_limit_is_read_to_its_end() -> None:
    async def go() -> bytes:
        r = asyncio.StreamReader(limit=8)
        r.feed_data(b"1" * 5000 + b"\nnext")
        line = await shellframe._status_line(r, None)
        assert await r.read(4) == b"next"
        return line

    assert asyncio.run(go()) == b"1" * 4096


def steps_on(shell: list[str], steps: list[tuple[str, ...]]) -> list[tuple[int, bytes]]:
    async def go() -> list[tuple[int, bytes]]:
        proc = await asyncio.create_subprocess_exec(
            *shell, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            fs = FramedShell(proc.stdin, proc.stdout, stderr_apart=True)
            return [((r := await fs.run(s)).rc, r.output) for s in steps]
        finally:
            proc.kill()
            await proc.wait()

    return asyncio.run(go())


@pytest.mark.parametrize("shell", [["dash"], ["busybox", "sh"]], ids=["dash", "busybox"])
def test_what_a_step_leaves_on_stderr_reaches_no_frame(shell: list[str]) -> None:
    truth = ("/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/bin/sh", "-c", "exit 3")
    got = steps_on(
        shell,
        [
            ("eval", "set -x"),  # traces the step, never the frame
            ("sh", "-c", "echo err >&2; exit 4"),
            ("eval", "exec 2>&1; set -v"),  # the shell's stderr into the output: undone
            truth,
            ("eval", "set +x; exec 2>&-; exec >/dev/null"),
            truth,
            ("eval", "trap 'printf \"\\n__RTAX_x 0\\n\"' EXIT; set -e"),
            truth,
        ],
    )
    assert [rc for rc, _ in got] == [0, 4, 0, 3, 0, 3, 0, 3]
    assert b"err\n" in got[1][1] and b"+ sh -c" in got[1][1]
    for _, out in got:
        assert b"__RTAX_" not in out.replace(b"__RTAX_x", b"")  # no sentinel of rtax's
        assert b"unset -f printf" not in out and b"trap - 0 1" not in out  # nor its text


def test_a_remote_shell_can_keep_its_stderr_on_the_host() -> None:
    cmd = remote_command(["sh"], discard_stderr=True, announce=False)
    assert cmd == "exec sh 2<>/dev/null"  # read-write: the steps' stdin
    assert remote_command(["sh"], merge_stderr=True, discard_stderr=True, announce=False) == (
        "exec sh 2>&1"
    )


@pytest.mark.parametrize("shell", [["dash"], ["busybox", "sh"]], ids=["dash", "busybox"])
def test_a_steps_stdin_is_empty_and_its_own(shell: list[str]) -> None:
    """The step reads /dev/null (the shell's stderr, read-write): at its end at once, never
    the frames; what a step does to its stdin does not outlive it."""
    got = steps_on(
        shell,
        [
            ("cat",),
            ("eval", "read x"),  # end of input: status 1
            ("sh", "-c", "cat; echo done"),
            ("eval", "exec 0<&-; exec 2>&-"),  # closes its stdin and stderr
            ("cat",),
            ("eval", "read x"),
        ],
    )
    assert got == [(0, b""), (1, b""), (0, b"done\n"), (0, b""), (0, b""), (1, b"")]


def test_the_local_driver_sends_the_hardened_frame() -> None:
    """Its shell's stderr is /dev/null, but the frame keeps its own `2>/dev/null` and
    `</dev/null` (tests/hostile/test_hostile_frame.py: what trusting fd 2 let a step do)."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

    spec = EnvSpec(
        cell=Cell("local", "local", "frame", "shell"),
        workload=Workload("frame", (Step(("true",)),)),
        limits=Limits(cpus=1, memory_mib=256, pids=64),
        label=f"fa{os.getpid()}",
    )

    async def go() -> object:
        env = get_driver("local", LocalHost(), {}).environment(spec)
        try:
            await env.create()
            return env.shell._frame  # type: ignore[attr-defined]
        finally:
            await env.teardown()

    assert asyncio.run(go()) is frame
