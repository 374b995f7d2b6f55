"""Issue 42's red team: the shell frame apart from stderr. The local driver's shell keeps
its stderr on /dev/null (on every host); for a while its frame trusted that descriptor
(`shellframe.frame_apart`: no `2>/dev/null` on the tail, the step's stdin `<&2`). Each
test here is an attack that got through that frame, run against the real drivers whose
shell channel frames: `local`, `local` on an SSH host (loopback sshd), and `stage`.

What must hold after each attack (docs/boundaries.md, "Result integrity"): the checking
steps (`/usr/bin/env -i PATH=/usr/bin:/bin /bin/sh -c false`, `... -c 'exit 3'`) read
their real status 1 and 3, a step's stdin is /dev/null, and none of the frame's text
(its trap reset, its sentinel) is in any step's output."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from rtax_tui.drivers import driver_class, get_driver

from rtax_tui.engine.probe.run import TRUTH
from rtax_tui.hosts.local import LocalHost
from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url
from rtax_tui.model.spec import ActionResult, Cell, EnvSpec, Limits, Step, Workload
from tests.services import backend_fixtures
from tests.sshhosts import SSHLab, missing

FALSE, EXIT3 = (argv for argv, _ in TRUTH)
Session = Callable[[list[tuple[str, ...]]], list[ActionResult]]


def _spec(name: str) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", name, "frame", "shell"),
        workload=Workload("frame", (Step(("true",)),)),
        limits=Limits(cpus=1, memory_mib=256, pids=256),
        label=f"hf{os.getpid()}{os.urandom(3).hex()}",
    )


async def _steps(drv: Any, steps: list[tuple[str, ...]]) -> list[ActionResult]:
    env = drv.environment(_spec(drv.name))
    try:
        await env.create()
        await env.ready()
        out = []
        for argv in steps:
            out.append(await env.action(Step(argv), 30))
        return out
    finally:
        await env.teardown()


@pytest.fixture(scope="module")
def ssh_lab():  # type: ignore[no-untyped-def]
    if missing() is not None:
        pytest.skip(missing() or "")
    lab = SSHLab()
    try:
        lab.lo = lab.serve_loopback()
        yield lab
    finally:
        lab.close()


@pytest.fixture(params=["local", "ssh", "stage"])
def session(request: pytest.FixtureRequest) -> Session:
    """`steps` in one environment's shell, in order; each step's result."""
    where = str(request.param)
    if where == "ssh":
        lab: SSHLab = request.getfixturevalue("ssh_lab")

        def over_ssh(steps: list[tuple[str, ...]]) -> list[ActionResult]:
            async def go() -> list[ActionResult]:
                host = SSHHost(
                    parse_ssh_url(lab.lo.url, identity=lab.identity, known_hosts=lab.known_hosts)
                )
                await host.connect()
                try:
                    drv = get_driver("local", host, {})
                    probs = await drv.check()
                    if probs:
                        pytest.skip("local over ssh: " + "; ".join(p.reason for p in probs))
                    return await _steps(drv, steps)
                finally:
                    await host.close()

            return asyncio.run(go())

        return over_ssh
    for fixture in backend_fixtures(driver_class(where)):
        request.getfixturevalue(fixture)
    drv = get_driver(where, LocalHost(), {})
    probs = asyncio.run(drv.check())
    if probs:
        pytest.skip(f"{where} cannot run here: " + "; ".join(p.reason for p in probs))

    def here(steps: list[tuple[str, ...]]) -> list[ActionResult]:
        run: Coroutine[Any, Any, list[ActionResult]] = _steps(drv, steps)
        return asyncio.run(run)

    return here


def ev(script: str) -> tuple[str, ...]:
    return ("eval", script)


def no_frame_text(res: list[ActionResult]) -> None:
    for r in res:
        assert b"__RTAX_" not in r.output and b"trap - 0 1" not in r.output, r.output[-300:]


def test_a_step_that_makes_the_shell_close_its_stderr_does_not_stop_later_steps(
    session: Session,
) -> None:
    """`ulimit -S -n 12`: the next step's group can save fds 0 and 1 (to 10 and 11) but
    not 2, and dash closes fd 2 when its save fails. A frame that takes the step's stdin
    from fd 2 (`<&2`) then fails every later step's redirection: the steps never ran and
    were recorded with status 2 and no output, the limit's own undoing included."""
    res = session(
        [
            ev("ulimit -S -n 12"),
            ("true",),  # may fail to start (status 2, as with any frame): the limit is on
            ev("ulimit -S -n 1024"),
            ev("ulimit -S -n 1024"),
            FALSE,
            EXIT3,
        ]
    )
    assert (res[-2].rc, res[-1].rc) == (1, 3), [(r.rc, r.output) for r in res]
    no_frame_text(res)


# A trap that fires while the shell is between the step's group (its redirections just
# undone) and the frame's `eval`: it runs at the shell's top level, so its `exec 2>&1`
# outlives the step. A background loop sends the signal nonstop while the step ends.
RACE = (
    "trap 'exec 2>&1' URG; (i=0; while [ $i -lt 3000 ]; do kill -URG $$ 2>/dev/null;"
    " i=$((i+1)); done) & sleep 0.02; wait"
)


def test_a_trap_fired_after_the_steps_group_leaves_no_descriptor_to_a_later_step(
    session: Session,
) -> None:
    """After the race (tried 40 times; the frame that trusted fd 2 lost it within a few
    tries on dash and busybox), a step's stdin is still /dev/null (not the shell's stdout,
    nor rtax's frames with `exec 2<&0`), and a step's `set -x` traces none of the frame
    (its sentinel included) into the output."""
    steps: list[tuple[str, ...]] = []
    for _ in range(40):
        steps += [ev(RACE), ("readlink", "/proc/self/fd/0")]
    res = session([*steps, ev("set -x"), FALSE, EXIT3, ev("set +x")])
    stdins = {r.output for r in res[1:80:2]}
    assert stdins == {b"/dev/null\n"}, stdins
    assert (res[-3].rc, res[-2].rc) == (1, 3), [(r.rc, r.output) for r in res[-4:]]
    no_frame_text(res)
