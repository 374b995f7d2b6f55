"""What only the `gvisor` driver has (the contract suite covers what every driver does):
its options, a root made writable in the sentry's memory (`overlay`), the pid limit as
the sandbox's own RLIMIT_NPROC, and the platform it records."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.gvisor import GvisorDriver

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, OptionError, Step, Workload

LABEL = f"pygv{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(scope="module")
def ready() -> None:
    if shutil.which("runsc") is None:
        pytest.skip("runsc is not installed (apt-get install runsc; scripts/bootstrap does)")
    if os.geteuid() != 0:
        pytest.skip("the gvisor driver runs runsc as root")
    problems = asyncio.run(get_driver("gvisor", LocalHost()).check())
    if problems:
        pytest.skip(f"gvisor cannot run here: {problems[0]}")


def _spec(channel: str, limits: Limits | None = None) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", "gvisor", "t", channel),
        workload=Workload("t", ()),
        limits=limits or Limits(cpus=1, memory_mib=512, pids=64),
        label=LABEL,
    )


async def _steps(drv: GvisorDriver, channel: str, *argvs: tuple[str, ...], **kw: object):
    env = drv.environment(_spec(channel, **kw))  # type: ignore[arg-type]
    await env.create()
    try:
        await env.ready()
        return [await env.action(Step(a), 60) for a in argvs]
    finally:
        await env.teardown()


@pytest.mark.parametrize(
    "options, key",
    [
        ({"platfrom": "ptrace"}, "platfrom"),
        ({"platform": "hvm"}, "platform"),
        ({"network": "host"}, "network"),
        ({"overlay": "yes"}, "overlay"),
    ],
)
def test_bad_options_name_the_field(options, key):
    with pytest.raises(OptionError) as exc:
        GvisorDriver.check_options(options)
    assert exc.value.key == key


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_overlay_makes_the_root_writable_in_memory_only(ready, channel):
    """Without `overlay` the root is read-only; with it a step writes /etc, the next step
    of the same environment sees it, and the cached root on the host stays as built."""
    write = ("sh", "-c", "echo rtax > /etc/rtax-overlay && cat /etc/rtax-overlay")
    plain = get_driver("gvisor", LocalHost(), {})
    (res,) = asyncio.run(_steps(plain, channel, write))
    assert res.rc != 0 and b"Read-only file system" in res.output
    over = get_driver("gvisor", LocalHost(), {"overlay": True})
    assert isinstance(over, GvisorDriver)
    res, again = asyncio.run(_steps(over, channel, write, ("cat", "/etc/rtax-overlay")))
    assert (res.rc, res.output, again.output) == (0, b"rtax\n", b"rtax\n")
    from rtax_tui.drivers.gvisor import busybox_root

    assert not os.path.exists(os.path.join(busybox_root(), "etc", "rtax-overlay"))
    assert asyncio.run(over.facts())["overlay"] is True


def _started(limit: int) -> int:
    """How many of 60 background sleeps started under `pids = limit` (counted with
    builtins only: once forks fail, nothing else could run)."""
    drv = get_driver("gvisor", LocalHost(), {})
    assert isinstance(drv, GvisorDriver)
    script = (
        "( i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); echo $i > /tmp/n; done ) "
        "2>/dev/null; read n </tmp/n; echo started $n"
    )
    limits = Limits(cpus=1, memory_mib=512, pids=limit)
    (res,) = asyncio.run(_steps(drv, "exec", ("sh", "-c", script), limits=limits))
    out = res.output.decode(errors="replace")
    assert out.startswith("started "), out
    return int(out.split()[1])


def test_pid_limit_refuses_forks_past_it(ready):
    """The sandbox's RLIMIT_NPROC: under pids = 16 some of 40 sleeps are refused; under
    pids = 64 all of them start (so it is the limit that refused them)."""
    assert 4 <= _started(16) < 40
    assert _started(64) == 40


def test_facts_record_the_platform_that_ran(ready):
    facts = asyncio.run(get_driver("gvisor", LocalHost(), {}).facts())
    assert facts["platform"] in ("ptrace", "kvm", "systrap")
    assert facts["platform_reason"]
    assert facts["runsc"].startswith("runsc version")
