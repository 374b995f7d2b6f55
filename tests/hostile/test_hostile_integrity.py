"""Issue 34, row H7: what an earlier step leaves in the persistent shell cannot forge a
later step's result, on every driver whose shell channel is cheap to start (local,
stage, docker, podman).

What the shell channel promises (docs/drivers.md, "What the shell channel promises"):
the frame (the status, the output's end) is what the shell really computed; which
program a bare command name runs is the session's business (its aliases, functions,
`PATH`), as in any shell. So each attack here is followed by steps that name their
program by absolute path in an environment of their own (the probe's truth steps:
`/usr/bin/env -i PATH=/usr/bin:/bin /bin/sh -c ...`), whose real status is known, and
the status recorded must be that one; and by a bare `false`, which the session
redefined, to show the other half of the promise as it is."""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from rtax_tui.drivers import driver_class, get_driver

from rtax_tui.engine.probe.run import TRUTH
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import ActionResult, Cell, EnvSpec, Limits, Step, Workload
from tests.services import backend_fixtures

DRIVERS = ("local", "stage", "docker", "podman")
FALSE, EXIT3 = (argv for argv, _ in TRUTH)


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> Any:
    name = str(request.param)
    for fixture in backend_fixtures(driver_class(name)):
        request.getfixturevalue(fixture)
    drv = get_driver(name, LocalHost(), {})
    probs = asyncio.run(drv.check())
    if probs:
        pytest.skip(f"{name} cannot run here: " + "; ".join(p.reason for p in probs))
    return drv


def session(drv: Any, steps: list[tuple[str, ...]]) -> list[ActionResult]:
    """`steps` in one environment's shell, in order; each step's result."""
    label = f"hi{os.getpid()}{os.urandom(3).hex()}"
    spec = EnvSpec(
        cell=Cell("local", drv.name, "h7", "shell"),
        workload=Workload("h7", (Step(("true",)),)),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        label=label,
    )

    async def run() -> list[ActionResult]:
        env = drv.environment(spec)
        try:
            await env.create()
            await env.ready()
            return [await env.action(Step(argv), 30) for argv in steps]
        finally:
            await env.teardown()

    return asyncio.run(run())


def ev(script: str) -> tuple[str, ...]:
    """A step that runs `script` in the session itself."""
    return ("eval", script)


def truth_holds(res: list[ActionResult]) -> None:
    """The last two results: FALSE then EXIT3, each its real status."""
    assert (res[-2].rc, res[-1].rc) == (1, 3), [(r.rc, r.output) for r in res]


# Functions, aliases and a PATH over every word the truth steps use: the session's
# `false` is now the step's, the truth steps are not.
NAMES = r"""d=$(mktemp -d)
for c in sh env false python3; do printf '#!/bin/sh\nexit 0\n' >"$d/$c"; chmod +x "$d/$c"; done
export PATH="$d:$PATH"
false() { return 0; }
env() { return 0; }
alias sh=true /usr/bin/env=true /bin/sh=true 2>/dev/null
:"""


def test_names_in_the_session_change_a_bare_name_not_a_truth_step(driver: Any) -> None:
    res = session(driver, [ev(NAMES), ("false",), ("python3", "-c", "exit 5"), FALSE, EXIT3])
    assert res[0].rc == 0, res[0].output
    # the session's `false` and `python3`: what a persistent shell does (documented)
    assert (res[1].rc, res[2].rc) == (0, 0)
    truth_holds(res)


# A trap that sets `$1` (where the old frame kept the status) and `-v` on a signal a
# background process keeps sending while the steps run: the status is kept readonly
# before any trap can run, and the traps are reset after each step.
RACE = r"""( i=0; while [ $i -lt 100000 ] && kill -s WINCH $$ 2>/dev/null; do i=$((i+1)); done ) \
  </dev/null >/dev/null 2>&1 &
:"""
ARM = "trap 'set -- 0; set -v' WINCH; " + shlex.join(EXIT3)


def test_a_trap_firing_in_the_frame_changes_no_status(driver: Any) -> None:
    steps = [ev(RACE)] + [ev(ARM)] * 30 + [FALSE, EXIT3]
    res = session(driver, steps)
    assert [r.rc for r in res[1:-2]] == [3] * 30
    assert not any(b"__RTAX_" in r.output for r in res), "a frame was echoed into an output"
    truth_holds(res)


def test_set_e_x_v_leave_the_shell_answering_and_the_frame_untraced(driver: Any) -> None:
    res = session(driver, [ev("set -exv"), ("echo", "hi"), FALSE, EXIT3, ("true",)])
    # -x stays (the session's), traces the step itself and nothing of the frame; -e and -v
    # are the step's own: a later failure does not end the shell, no frame is echoed
    assert res[1].output == b"+ echo hi\nhi\n", res[1].output
    assert not any(b"RTAX" in r.output for r in res), [r.output for r in res]
    truth_holds(res[:4])
    assert res[4].rc == 0


def test_a_steps_redirections_do_not_outlive_it(driver: Any) -> None:
    res = session(
        driver, [ev("exec 9>&- >/dev/null 2>&1 </dev/zero"), ("echo", "seen"), FALSE, EXIT3]
    )
    assert res[1].output == b"seen\n"
    truth_holds(res)


def fake_frames(guess: Callable[[int], str]) -> str:
    lines = "".join(f"printf '\\n%s 0\\n' {guess(i)}; " for i in range(8))
    return lines + "printf '\\n__RTAX_ 0\\n' >&2; :"


def test_frames_printed_by_a_step_are_its_output(driver: Any) -> None:
    script = fake_frames(lambda i: "__RTAX_" + f"{i:032x}" + "__")
    res = session(driver, [ev(script), FALSE, EXIT3])
    assert res[0].rc == 0 and res[0].output.count(b"__RTAX_") == 9
    truth_holds(res)


# bash's DEBUG trap runs before each simple command, with that command's text in
# $BASH_COMMAND: the frame's sentinel included, before the frame writes it.
DEBUG_TRAP = (
    "trap 'case $BASH_COMMAND in *__RTAX_*) s=${BASH_COMMAND#*__RTAX_}; s=${s%% *}; "
    'builtin printf "\\n__RTAX_%s 0\\n" "$s";; esac\' DEBUG'
)


def framed_shell_run(argv0: list[str], steps: list[tuple[str, ...]]) -> list[int | None]:
    from rtax_tui.drivers.toolkit.shellframe import FramedShell

    async def run() -> list[int | None]:
        proc = await asyncio.create_subprocess_exec(
            *argv0, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            fs = FramedShell(proc.stdin, proc.stdout)
            return [(await fs.run(s)).rc for s in steps]
        finally:
            proc.kill()
            await proc.wait()

    return asyncio.run(run())


@pytest.mark.parametrize(
    "shell",
    [
        pytest.param(["dash"], id="dash"),
        pytest.param(["busybox", "sh"], id="busybox"),
        pytest.param(
            ["bash", "--posix"],
            id="bash",
            marks=pytest.mark.xfail(
                strict=True,
                reason="bash as sh: a DEBUG trap reads the frame's text before it runs "
                "and answers it first (docs/drivers.md, where the promise holds)",
            ),
        ),
    ],
)
def test_a_debug_trap_cannot_answer_the_frame(shell: list[str]) -> None:
    import shutil

    if shutil.which(shell[0]) is None:
        pytest.skip(f"no {shell[0]} here")
    rcs = framed_shell_run(shell, [("eval", DEBUG_TRAP), ("/bin/false",), ("/bin/false",)])
    assert rcs[1:] == [1, 1], rcs
