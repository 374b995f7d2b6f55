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
        "( i=0; while [ $i -lt 40 ]; do sleep 30 >/dev/null & i=$((i+1)); echo $i > /tmp/n; done ) "
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


def test_a_platform_probe_killed_with_rtax_leaves_no_sandbox(ready, tmp_path):
    """`auto` tries kvm with a sandbox that hangs on this machine; runsc starts the
    sandbox in a session of its own, so only the probe's cgroup (registered with the
    reaper) reaches it when rtax is killed meanwhile (`kill -9`). Where kvm does not
    hang, there is nothing to leave behind: skipped."""
    import signal
    import subprocess
    import sys
    import time

    if (
        not os.path.exists("/dev/kvm")
        or "kvm" not in GvisorDriver(LocalHost(), {})._known_platforms()
    ):
        pytest.skip("no kvm platform to try here")
    script = tmp_path / "probe.py"
    script.write_text(
        "import asyncio\n"
        "from rtax_tui.hosts import reaper\n"
        "from rtax_tui.drivers import get_driver\n"
        "from rtax_tui.hosts.local import LocalHost\n"
        "reaper.start()\n"
        "print(asyncio.run(get_driver('gvisor', LocalHost(), {})._try_platform('kvm')))\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)

    def sandboxes() -> list[str]:
        out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        return [ln for ln in out.splitlines() if f"rtax-p{proc.pid}-" in ln and "runsc" in ln]

    try:
        deadline = time.monotonic() + 12
        while not any("runsc-sandbox" in ln for ln in sandboxes()):
            if proc.poll() is not None:
                pytest.skip(f"the kvm probe ended by itself here: {proc.stdout.read().strip()}")
            assert time.monotonic() < deadline, "no kvm sandbox started"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        def cgroups_left() -> list[str]:
            base = "/sys/fs/cgroup/memory/rtax"
            names = os.listdir(base) if os.path.isdir(base) else []
            return [d for d in names if f"gvisor-probe-p{proc.pid}-" in d]

        # The sandbox leaves `ps` when it dies; the reaper removes the cgroup after
        # that (its last rmdir can come a moment later): both are waited for.
        deadline = time.monotonic() + 30
        while (sandboxes() or cgroups_left()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sandboxes() == []
        assert cgroups_left() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
