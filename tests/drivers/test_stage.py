"""The `stage` driver: its bubblewrap sandbox on both channels, on the real kernel."""

from __future__ import annotations

import asyncio
import glob
import os
import tempfile
import time

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.stage import StageDriver

from rtax_tui.hosts import cgroups
from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, OptionError, Step, Workload
from tests.procs import dead

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
pytestmark = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")
CHANNELS = ("exec", "shell")
LABEL = f"pyst{os.getpid()}{os.urandom(2).hex()}"
WS_GLOB = os.path.join(tempfile.gettempdir(), f"rtax-ws-{LABEL}-*")


def _cgroups_left() -> list[str]:
    out = []
    for base in ("/sys/fs/cgroup", *(f"/sys/fs/cgroup/{c}" for c in cgroups.V1_CONTROLLERS)):
        out += glob.glob(os.path.join(base, "rtax", "**", f"env-{LABEL}-*"), recursive=True)
    return out


def _procs_left() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if f"rtax-ws-{LABEL}-".encode() in f.read():
                    found.append(int(name))
        except OSError:
            pass
    return found


def assert_nothing_left() -> None:
    assert glob.glob(WS_GLOB) == []
    assert _cgroups_left() == []
    assert _procs_left() == []


@pytest.fixture(autouse=True, scope="module")
def _module_leaves_nothing():
    yield
    left = (glob.glob(WS_GLOB), _cgroups_left(), _procs_left())
    asyncio.run(StageDriver(LocalHost(), {}).cleanup(LABEL))
    assert left == ([], [], [])


def spec(channel: str, *, limits: Limits | None = None, steps=(), parent=None) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", "stage", "t", channel),
        workload=Workload("t", tuple(steps)),
        limits=limits or Limits(cpus=1, memory_mib=256, pids=128),
        label=LABEL,
        cgroup_parent=parent,
    )


def driver(**options) -> StageDriver:
    d = get_driver("stage", LocalHost(), options)
    assert isinstance(d, StageDriver)
    return d


async def act(env, *argv: str, timeout: float = 30):
    return await env.action(Step(tuple(argv)), timeout)


@pytest.mark.parametrize("channel", CHANNELS)
def test_lifecycle_output_and_isolation(channel):
    async def run():
        env = driver().environment(spec(channel))
        pids: set[int] = set()
        cg = None
        try:
            await env.create()
            cg = Cgroup(env.cg)
            await env.ready()
            ws = env.workspace
            assert ws and os.path.isdir(ws)

            r = await act(env, "sh", "-c", "echo hi; exit 3")
            assert (r.rc, r.output) == (3, b"hi\n")
            r = await act(env, "printf", "no newline")
            assert (r.rc, r.output) == (0, b"no newline")
            assert (await act(env, "hostname")).output == b"rtax\n"
            assert (await act(env, "pwd")).output == b"/workspace\n"
            r = await act(env, "sh", "-c", "echo $HOME $TMPDIR")
            assert r.output == b"/workspace /tmp\n"

            # Writable: the workspace (the sandbox's own tmpfs: the host sees it through
            # the init's root, not in its directory) and a private /tmp.
            r = await act(env, "sh", "-c", "echo data > /workspace/f && cat f")
            assert (r.rc, r.output) == (0, b"data\n")
            with open(f"/proc/{env.pid}/root/workspace/f") as f:
                assert f.read() == "data\n"
            assert os.listdir(ws) == []
            # the host directory is named on bubblewrap's command line, not inside
            r = await act(env, "sh", "-c", "env; cat /proc/self/mountinfo")
            assert b"RTAX_WORKSPACE_ON_HOST" not in r.output and ws.encode() not in r.output
            private = f"/tmp/rtax-private-{LABEL}"
            r = await act(env, "sh", "-c", f"echo t > {private} && cat {private}")
            assert (r.rc, r.output) == (0, b"t\n")
            assert not os.path.exists(private)
            # Read-only: everything else; and most of the host is not there at all.
            for path in ("/rtax-probe", "/usr/rtax-probe", "/etc/rtax-probe"):
                r = await act(env, "touch", path)
                assert r.rc != 0 and b"Read-only" in r.output, (path, r)
                assert not os.path.exists(path)
            r = await act(env, "ls", "/")
            assert set(r.output.decode().split()) <= {
                "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp",
                "usr", "workspace",
            }, r  # fmt: skip
            for path in ("/root", "/var", "/run", "/home", "/sys", "/etc/shadow", "/etc/ssh"):
                r = await act(env, "ls", "-d", path)
                assert r.rc != 0 and b"No such file" in r.output, (path, r)
            r = await act(env, "mkdir", "/sys/fs/cgroup/pids/rtax-escape")
            assert r.rc != 0

            # Network: only lo.
            r = await act(env, "cat", "/proc/net/dev")
            ifaces = {ln.split(":")[0].strip() for ln in r.output.decode().splitlines()[2:]}
            assert ifaces == {"lo"}
            # PID namespace: its own pid 1, a handful of processes.
            r = await act(env, "readlink", "/proc/self/ns/pid")
            assert r.output.strip().decode() != os.readlink("/proc/self/ns/pid")
            r = await act(env, "cat", "/proc/1/cmdline")
            with open("/proc/1/cmdline", "rb") as f:
                assert r.output != f.read()
            r = await act(env, "sh", "-c", "ls -d /proc/[0-9]* | wc -l")
            assert int(r.output) < 10
            # The cgroup: commands run inside it (its own cgroup namespace: its root is
            # the environment's cgroup, the host's paths are hidden), and so does the init.
            r = await act(env, "cat", "/proc/self/cgroup")
            assert all(ln.endswith(":/") for ln in r.output.decode().splitlines()), r
            pids = Cgroup(env.cg).pids()
            assert env.proc.pid in pids
            # Background processes die with the environment.
            r = await act(env, "sh", "-c", "sleep 300 >/dev/null 2>&1 &")
            assert r.rc == 0
            await asyncio.sleep(0.05)
            pids = Cgroup(env.cg).pids()
            assert len(pids) >= 2
        finally:
            await env.teardown()
        for pid in pids:
            assert dead(pid)
        assert not os.path.exists(ws)
        assert cg is not None and not cg.exists()

    asyncio.run(run())
    assert_nothing_left()


@pytest.mark.parametrize("channel", CHANNELS)
def test_memory_limit_kills_inside_the_sandbox(channel):
    code = "import sys; b = b'x' * (int(sys.argv[1]) << 20); print(len(b) >> 20)"
    python = "python3"  # the host's python3 in /usr (rtax's own may live under /root)

    async def run():
        env = driver().environment(spec(channel, limits=Limits(memory_mib=64, pids=64)))
        try:
            await env.create()
            await env.ready()
            r = await act(env, python, "-c", code, "8", timeout=60)
            assert (r.rc, r.output) == (0, b"8\n")
            r = await act(env, python, "-c", code, "256", timeout=60)
            assert r.rc in (-9, 137), r  # exec: killed by SIGKILL; shell: sh reports 128+9
            assert Cgroup(env.cg).memory_peak_bytes() <= (64 << 20) + (1 << 20)
        finally:
            await env.teardown()

    asyncio.run(run())
    assert_nothing_left()


def test_nested_under_a_budget_cgroup():
    budget = Cgroup.create(f"env-{LABEL}-budget", cpus=1, memory_mib=512, pids=256)

    async def run():
        env = driver().environment(spec("exec", parent=budget.relpath))
        try:
            await env.create()
            await env.ready()
            assert env.cg.startswith(budget.relpath + "/env-")
            assert env.proc.pid in Cgroup(env.cg).pids()
            # an exec action's process lands in the nested cgroup too
            r = await act(env, "sh", "-c", "sleep 5 >/dev/null 2>&1 &")
            assert r.rc == 0
            assert len(Cgroup(env.cg).pids() - {env.proc.pid}) >= 1
        finally:
            await env.teardown()

    try:
        asyncio.run(run())
        assert budget.exists()
    finally:
        budget.remove()
    assert_nothing_left()


def test_only_named_assets_and_ro_binds_are_visible_read_only(tmp_path, monkeypatch):
    monkeypatch.setenv("RTAX_CACHE", str(tmp_path / "cache"))
    from rtax_tui.drivers.toolkit.assets import assets_root

    assets = assets_root()
    (assets / "bare").mkdir(parents=True)
    (assets / "bare" / "a.txt").write_text("asset\n")
    (assets / "fix.patch").write_text("the answer\n")  # not named: must stay invisible
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "e.txt").write_text("extra\n")
    other = tmp_path / "other"  # named by a step, but neither an asset nor in ro_binds
    other.mkdir()
    (other / "o.txt").write_text("secret\n")
    steps = [Step(("cat", str(assets / "bare" / "a.txt"), str(other / "o.txt")))]
    src = tmp_path / "src"
    src.mkdir()
    (src / "seed.txt").write_text("seed\n")

    async def run():
        s = spec("exec", steps=steps)
        s = EnvSpec(**{**s.__dict__, "workspace_src": str(src)})
        env = driver(ro_binds=[str(extra)]).environment(s)
        try:
            await env.create()
            await env.ready()
            assert (await act(env, "cat", str(assets / "bare" / "a.txt"))).output == b"asset\n"
            assert (await act(env, "cat", str(extra / "e.txt"))).output == b"extra\n"
            for hidden in (assets / "fix.patch", other / "o.txt"):
                r = await act(env, "ls", "-d", str(hidden))
                assert r.rc != 0 and b"No such file" in r.output, (hidden, r)
            # the named asset's parents exist inside only as the way to it
            r = await act(env, "ls", "-A", str(tmp_path / "cache"), str(assets))
            assert r.output.decode().split() == [
                f"{tmp_path / 'cache'}:",
                assets.name,
                f"{assets}:",
                "bare",
            ], r
            for f in (assets / "bare" / "a.txt", extra / "e.txt"):
                r = await act(env, "sh", "-c", f"echo x >> {f}")
                assert r.rc != 0 and (b"Read-only" in r.output or b"denied" in r.output), r
            assert (await act(env, "cat", "seed.txt")).output == b"seed\n"
            # the workspace belongs to root inside, an unprivileged uid outside
            assert (await act(env, "sh", "-c", "echo x >> seed.txt && id -u")).output == b"0\n"
            seed = f"/proc/{env.pid}/root/workspace/seed.txt"
            assert os.stat(seed).st_uid == env.driver.uid
        finally:
            await env.teardown()

    asyncio.run(run())
    assert (assets / "bare" / "a.txt").read_text() == "asset\n"
    assert (extra / "e.txt").read_text() == "extra\n"
    assert_nothing_left()


@pytest.mark.parametrize("channel", CHANNELS)
def test_no_privilege_inside(channel):
    """Root inside is an unprivileged uid outside, with no capability, no_new_privs and
    the seccomp filter, on both channels (the exec channel's rtax-enter included)."""

    async def run():
        env = driver().environment(spec(channel))
        try:
            await env.create()
            await env.ready()
            r = await act(env, "cat", "/proc/self/status", "/proc/self/uid_map")
            status = dict(ln.split(":", 1) for ln in r.output.decode().splitlines() if ":" in ln)
            for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert int(status[cap], 16) == 0, (cap, status[cap])
            assert status["NoNewPrivs"].strip() == "1"
            assert status["Seccomp"].strip() == "2"
            assert status["Uid"].split()[0] == "0"
            # the user namespace maps root inside to the driver's uid outside
            pid = int(status["Pid"]) if channel == "shell" else None
            r = await act(env, "sh", "-c", "echo $$; sleep 0.01")
            assert r.rc == 0
            for attempt in (
                ("unshare", "-U", "true"),
                ("unshare", "-r", "true"),
                ("unshare", "-m", "true"),
                ("mount", "-t", "tmpfs", "x", "/tmp"),
                ("mount", "-o", "remount,rw", "/usr"),
                ("chroot", "/", "true"),
                ("mknod", "/tmp/sda", "b", "8", "0"),
            ):
                r = await act(env, *attempt)
                assert r.rc != 0, (attempt, r)
            assert pid is None or pid > 0
            # the host sees the sandbox's processes as the driver's uid, never root
            for p in Cgroup(env.cg).pids():
                with open(f"/proc/{p}/status") as f:
                    uids = next(ln for ln in f if ln.startswith("Uid:")).split()[1:]
                if p != env.proc.pid or channel == "shell":
                    assert uids == [str(env.driver.uid)] * 4, (p, uids)
        finally:
            await env.teardown()

    asyncio.run(run())
    assert_nothing_left()


def test_check_facts_and_cleanup():
    async def run():
        d = driver()
        assert await d.check() == []
        facts = await d.facts()
        assert facts["sandbox"].startswith("bwrap")
        assert facts["uid"] == d.uid
        assert facts["cgroup"] in ("v1", "v2")
        # Leave an environment behind, as a crashed run would, then clean it up.
        env = d.environment(spec("exec"))
        await env.create()
        await env.ready()
        proc, ws, cg = env.proc, env.workspace, Cgroup(env.cg)
        assert _procs_left()
        n = await d.cleanup(LABEL)
        assert n >= 3  # a process, a cgroup, a workspace
        await asyncio.wait_for(proc.wait(), 5)
        assert not os.path.exists(ws) and not cg.exists()
        assert await d.cleanup(LABEL) == 0
        await env.teardown()  # still safe afterwards; releases the pipes

    asyncio.run(run())
    assert_nothing_left()


def test_bad_option():
    """A bad option is refused as the driver is made too (not only by the profile), with
    the key named: the typed options are made in the constructor."""
    for options in ({"sandbox": "docker"}, {"sandbox": "unshare"}):  # unshare: removed
        with pytest.raises(OptionError, match=r"\(allowed: auto, bwrap\)") as exc:
            StageDriver(LocalHost(), options)
        assert exc.value.key == "sandbox"
    for uid in (0, -1, "1000", True):
        with pytest.raises(OptionError) as exc:
            StageDriver(LocalHost(), {"uid": uid})
        assert exc.value.key == "uid"
    assert StageDriver(LocalHost(), {"uid": 64001}).uid == 64001


def test_a_2_gib_write_into_the_workspace_stops_at_its_limit(monkeypatch):
    """B8: /workspace is its own tmpfs: a 2 GiB write fails with ENOSPC at the limit and
    the host's disk does not grow. The tmpfs is the sandbox's, in its own mount namespace:
    the host's mount table never holds it (a mount per environment there made a burst of
    sandboxes quadratic), and teardown leaves nothing."""
    import dataclasses

    limits = dataclasses.replace(Limits(cpus=1, memory_mib=256, pids=128), workspace_mib=64)

    def free() -> int:
        st = os.statvfs(tempfile.gettempdir())
        return st.f_bavail * st.f_frsize

    async def run() -> str:
        env = driver().environment(spec("exec", limits=limits))
        try:
            await env.create()
            await env.ready()
            before = free()
            r = await act(
                env, "sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=2048 2>&1",
                timeout=120,
            )  # fmt: skip
            assert r.rc != 0 and b"No space left on device" in r.output, r
            r = await act(env, "sh", "-c", "du -m /workspace/big | cut -f1")
            assert 60 <= int(r.output) <= 64, r
            assert before - free() < 64 << 20
            with open("/proc/self/mountinfo") as f:
                assert f" {env.workspace} " not in f.read()
            r = await act(env, "cat", "/proc/self/mountinfo")
            assert env.workspace.encode() not in r.output  # the host's path is not shown
            top = [ln.split() for ln in r.output.decode().splitlines() if " /workspace " in ln]
            assert top and top[-1][top[-1].index("-") + 1] == "tmpfs", r
            assert "size=65536k" in top[-1][-1], r
            r = await act(env, "stat", "-c", "%a %u", "/workspace")
            assert r.output == b"700 0\n", r
            return str(env.workspace)
        finally:
            await env.teardown()

    ws = asyncio.run(run())
    with open("/proc/self/mountinfo") as f:
        assert f" {ws} " not in f.read()


# -- the default limits (no `[limits]` in the profile), against hostile code ----------

BOMB = (
    "import subprocess, sys\n"
    "started = 0\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        subprocess.Popen(['sleep', '120'], stdin=subprocess.DEVNULL,\n"
    "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "        started += 1\n"
    "    except OSError:\n"
    "        pass\n"
    "print(started)\n"
)


def _uid_processes(uid: int) -> int:
    """How many of the host's processes belong to `uid` (what the red team counted)."""
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                n += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return n


def _uid_listing(uid: int) -> list[str]:
    out = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                with open(f"/proc/{name}/stat") as f:
                    out.append(f.read())
        except OSError:
            pass
    return out


def test_default_limits_stop_a_fork_bomb_of_5000_sleeps():
    from rtax_tui.model.spec import DEFAULT_PIDS

    # a sandbox uid of this test's own, so that the host's count is this test's alone
    uid = 61000 + os.getpid() % 2000
    assert _uid_processes(uid) == 0
    peak = 0

    async def watch(stop: asyncio.Event) -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, await asyncio.to_thread(_uid_processes, uid))
            await asyncio.sleep(0.05)

    async def run():
        nonlocal peak
        env = driver(uid=uid).environment(spec("exec", limits=Limits()))
        try:
            await env.create()
            await env.ready()
            stop = asyncio.Event()
            watcher = asyncio.ensure_future(watch(stop))
            r = await act(env, "python3", "-c", BOMB, "5000", timeout=120)
            stop.set()
            await watcher
            peak = max(peak, _uid_processes(uid))
            assert r.rc == 0, r
            started = int(r.output.split()[-1])
            # stopped at the pids limit: most of the 5,000 never started
            assert 0.5 * DEFAULT_PIDS < started < DEFAULT_PIDS, started
            assert len(Cgroup(env.cg).pids()) <= DEFAULT_PIDS
        finally:
            await env.teardown()

    asyncio.run(run())
    assert 0 < peak <= DEFAULT_PIDS, peak
    deadline = time.monotonic() + 10
    while _uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _uid_processes(uid) == 0, _uid_listing(uid)
    assert_nothing_left()


def test_default_memory_limit_kills_a_hog():
    from rtax_tui.model.spec import DEFAULT_MEMORY_MIB

    code = "import sys; b = b'x' * (int(sys.argv[1]) << 20); print(len(b) >> 20)"

    async def run():
        env = driver().environment(spec("exec", limits=Limits()))
        try:
            await env.create()
            await env.ready()
            r = await act(env, "python3", "-c", code, "64", timeout=60)
            assert (r.rc, r.output) == (0, b"64\n")
            r = await act(env, "python3", "-c", code, str(DEFAULT_MEMORY_MIB + 256), timeout=120)
            assert r.rc in (-9, 137), r
            peak = Cgroup(env.cg).memory_peak_bytes()
            assert peak <= (DEFAULT_MEMORY_MIB << 20) + (1 << 20), peak
        finally:
            await env.teardown()

    asyncio.run(run())
    assert_nothing_left()


def _cg_file(cg: Cgroup, controller: str, name: str) -> str:
    d = cg._dir(controller)
    assert d is not None
    with open(os.path.join(d, name)) as f:
        return f.read().strip()


def test_unlimited_pids_is_no_pids_limit():
    from rtax_tui.model.spec import DEFAULT_MEMORY_MIB

    async def run():
        env = driver().environment(spec("exec", limits=Limits(pids=None)))
        try:
            await env.create()
            cg = Cgroup(env.cg)
            assert _cg_file(cg, "pids", "pids.max") == "max"
            v1 = cg.ver == "v1"
            mem = _cg_file(cg, "memory", "memory.limit_in_bytes" if v1 else "memory.max")
            assert mem == str(DEFAULT_MEMORY_MIB << 20)  # the others keep their defaults
        finally:
            await env.teardown()

    asyncio.run(run())
    assert_nothing_left()
