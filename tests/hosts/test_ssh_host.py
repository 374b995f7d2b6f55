"""SSHHost against a real OpenSSH server on loopback: the LocalHost API, over one connection."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import time

import pytest
from rtax_tui.drivers.toolkit.shellframe import FramedShell

from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url, remote_command
from rtax_tui.model.spec import HostLost, RtaxError
from tests.procs import dead
from tests.sshhosts import SSHLab, missing, netns_missing

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")
TAG = f"rtaxleft{os.getpid()}"


@pytest.fixture(scope="module")
def lab():
    lab = SSHLab()
    try:
        lab.lo = lab.serve_loopback()
        yield lab
    finally:
        lab.close()


def _host(lab: SSHLab, **kw) -> SSHHost:
    kw.setdefault("identity", lab.identity)
    kw.setdefault("known_hosts", lab.known_hosts)
    return SSHHost(parse_ssh_url(lab.lo.url, **kw))


def _ps_args() -> str:
    return subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout


def test_parse_url_and_quoting() -> None:
    t = parse_ssh_url("ssh://bench@10.0.0.5:2200")
    assert (t.name, t.address, t.user, t.port) == ("bench@10.0.0.5:2200", "10.0.0.5", "bench", 2200)
    assert parse_ssh_url("ssh://box").name == "box:22"
    with pytest.raises(RtaxError):
        parse_ssh_url("ssh://bench@host:99999")
    cmd = remote_command(["echo", "a b", "$HOME", "'q'"], cwd="/tmp/x y", env={"A": "1 2"})
    assert "'a b'" in cmd and "'$HOME'" in cmd and "'/tmp/x y'" in cmd and "'A=1 2'" in cmd


def test_run_like_subprocess(lab: SSHLab) -> None:
    async def go() -> None:
        host = _host(lab)
        await host.connect()
        try:
            assert host.net["connect_ms"] > 0
            # words reach the program as they are: no remote shell expansion
            r = await host.run(["printf", "%s|", "a b", "$HOME", "*", "'"])
            assert (r.returncode, r.stdout, r.stderr) == (0, b"a b|$HOME|*|'|", b"")
            r = await host.run(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"in\x00put")
            assert (r.returncode, r.stdout, r.stderr) == (3, b"in\x00put", b"err\n")
            r = await host.run(["sh", "-c", "echo out; echo err >&2"], merge_stderr=True)
            assert r.stdout == b"out\nerr\n"
            r = await host.run(["pwd"], cwd="/usr/bin", env={"PATH": "/bin:/usr/bin"})
            assert r.stdout == b"/usr/bin\n"
            r = await host.run(["env"], env={"ONLY": "this"})
            assert r.stdout == b"ONLY=this\n"  # env replaces the remote environment
            with pytest.raises(subprocess.CalledProcessError):
                await host.run(["false"], check=True)
            # a timeout kills the remote process group, not just the channel
            tag = f"rtaxsleep{os.getpid()}"
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                await host.run(["sh", "-c", f"sleep 30 & exec sleep 31 # {tag}"], timeout=0.5)
            assert time.monotonic() - t0 < 2
            for _ in range(50):
                await asyncio.sleep(0.05)
                if "sleep 30" not in _ps_args() or tag not in _ps_args():
                    break
            assert tag not in _ps_args()
            rtt = await host.measure_rtt(3)
            assert 0 < rtt < 1000 and host.net["exec_rtt_ms"] == rtt
        finally:
            await host.close()

    asyncio.run(go())


def test_spawn_shell_workspace_and_reaper(lab: SSHLab) -> None:
    src = os.path.join(lab.dir, "src")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "sub", "f.txt"), "w") as f:
        f.write("payload\n")

    async def go() -> tuple[str, int]:
        host = _host(lab)
        await host.connect()
        ws = await host.make_workspace(f"rtax-ws-t{os.getpid()}-", src)
        assert ws != src and not ws.startswith(lab.dir)
        assert f" {ws} " in _mountinfo()  # its own tmpfs
        proc = await host.spawn(["sh"], cwd=ws, env={"PATH": host.path_env}, stdin=subprocess.PIPE)
        shell = FramedShell(proc.stdin, proc.stdout)
        res = await shell.run(["cat", "sub/f.txt"])
        assert (res.rc, res.output) == (0, b"payload\n")
        res = await shell.run(["sh", "-c", "exit 7"])
        assert res.rc == 7
        # something the shell leaves running: the reaper must end it when we go
        await shell.run(["sh", "-c", f"sh -c 'sleep 300; : {TAG}' >/dev/null 2>&1 &"])
        # the background shell is forked when the command returns, but may still be in its
        # execve: a process's command line reads empty there, so look until it shows
        seen = time.monotonic() + 5
        while TAG not in _ps_args() and time.monotonic() < seen:
            await asyncio.sleep(0.02)
        assert TAG in _ps_args()
        facts = await host.facts()
        assert facts["kernel"] == os.uname().release and facts["cpus"] == os.cpu_count()
        assert facts["net"]["connect_ms"] > 0
        pid = proc.pid
        await host.close()  # no teardown: the remote reaper must clean up
        return ws, pid

    ws, pid = asyncio.run(go())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (os.path.exists(ws) or TAG in _ps_args()):
        time.sleep(0.05)
    assert not os.path.exists(ws)
    assert f" {ws} " not in _mountinfo()  # the remote reaper unmounted it
    assert dead(pid, 0.1)
    assert TAG not in _ps_args()


def _mountinfo() -> str:
    with open("/proc/self/mountinfo") as f:
        return f.read()


def test_sized_workspace_deep_tree_and_links_removed_safely(lab: SSHLab) -> None:
    """A remote workspace stops writes at its size; a 1,500-deep tree and a link to a host
    directory inside it go with remove_tree, the host directory stays, no mount is left."""
    host_dir = os.path.join(lab.dir, "hostdir")
    os.makedirs(host_dir, exist_ok=True)
    with open(os.path.join(host_dir, "keep"), "w") as f:
        f.write("keep\n")

    async def go() -> str:
        host = _host(lab)
        await host.connect()
        try:
            ws = await host.make_workspace(f"rtax-ws-t{os.getpid()}-", None, 4321, size_mib=4)
            st = os.stat(ws)
            assert (st.st_uid, st.st_gid) == (4321, 4321)
            res = await host.run(
                ["sh", "-c", f"dd if=/dev/zero of={ws}/big bs=1M count=8 2>&1"], timeout=30
            )
            assert res.returncode != 0 and b"No space left" in res.stdout
            script = (
                f"cd {ws} && ln -s {host_dir} link && i=0; while [ $i -lt 1500 ]; do "
                f"mkdir n && cd n || exit 1; i=$((i+1)); done; ln -s {host_dir} deep"
            )
            res = await host.run(["sh", "-c", script], timeout=60)
            assert res.returncode == 0, res
            await host.remove_tree(ws)
            return ws
        finally:
            await host.close()

    ws = asyncio.run(go())
    assert not os.path.exists(ws)
    assert f" {ws} " not in _mountinfo()
    assert os.listdir(host_dir) == ["keep"]


def test_workspace_whose_answer_is_lost_is_still_removed(lab: SSHLab, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The connection drops after the remote side made (and mounted) the workspace but
    before its name came back: the reaper was told the name first, so it removes it. A
    name that is already taken is refused, and not handed to the reaper."""
    made: list[str] = []

    async def go() -> None:
        host = _host(lab)
        await host.connect()
        real_run = host.run

        async def answer_lost(argv, **kw):  # type: ignore[no-untyped-def]
            res = await real_run(argv, **kw)
            if argv[:2] == ["sh", "-c"] and argv[3] == "rtax-ws":
                made.append(argv[4])
                raise HostLost("the answer was lost on its way back")
            return res

        monkeypatch.setattr(host, "run", answer_lost)
        with pytest.raises(HostLost):
            await host.make_workspace(f"rtax-ws-t{os.getpid()}-", None, size_mib=4)
        assert os.path.isdir(made[0]) and f" {made[0]} " in _mountinfo()
        monkeypatch.setattr(host, "run", real_run)
        # a name already taken: refused, and the directory that holds it stays
        taken = os.path.join(lab.dir, "taken")
        os.makedirs(os.path.join(taken, "inside"))
        monkeypatch.setattr("rtax_tui.hosts.ssh.secrets.token_hex", lambda n: "side")
        monkeypatch.setattr(host, "_tmpdir", taken)
        with pytest.raises(HostLost, match="cannot make a workspace"):
            await host.make_workspace("in", None, size_mib=None)
        await host.close()
        assert os.path.isdir(os.path.join(taken, "inside"))

    asyncio.run(go())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(made[0]):
        time.sleep(0.05)
    assert not os.path.exists(made[0])
    assert f" {made[0]} " not in _mountinfo()


def test_unknown_host_key_refused_and_trust_flag(lab: SSHLab) -> None:
    empty = os.path.join(lab.dir, "empty_known_hosts")
    open(empty, "w").close()

    async def go() -> None:
        host = _host(lab, known_hosts=empty)
        with pytest.raises(RtaxError) as ei:
            await host.connect()
        msg = str(ei.value)
        assert "not trusted" in msg and "ssh-keyscan" in msg and "--trust-new-hosts" in msg
        assert host.lost
        trusting = _host(lab, known_hosts=empty, trust_new=True)
        await trusting.connect()
        assert (await trusting.run(["true"])).returncode == 0
        await trusting.close()

    asyncio.run(go())


def test_refused_and_lost_connection(lab: SSHLab) -> None:
    async def go() -> None:
        refused = SSHHost(parse_ssh_url("ssh://nobody@127.0.0.1:1", identity=lab.identity))
        with pytest.raises(RtaxError, match="cannot connect"):
            await refused.connect()
        host = _host(lab)
        await host.connect()
        await host.close()
        with pytest.raises(HostLost):
            await host.run(["true"])

    asyncio.run(go())


@pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))
def test_jump_host(lab: SSHLab) -> None:
    """Through the loopback server to a server in a network namespace."""
    ns = lab.serve_netns(0)
    log = os.path.join(lab.dir, f"sshd_lo{lab.lo.port}.log")

    def _logins() -> int:
        with open(log) as f:
            return f.read().count("Accepted publickey")

    before = _logins()

    async def go() -> None:
        jump = f"{lab.user}@127.0.0.1:{lab.lo.port}"
        host = SSHHost(
            parse_ssh_url(ns.url, identity=lab.identity, known_hosts=lab.known_hosts, jump=jump)
        )
        await host.connect()
        try:
            r = await host.run(["sh", "-c", 'echo "$SSH_CONNECTION"'])
            assert r.stdout.split()[2].decode() == ns.address
            # the jump host (the loopback server) saw one more login: ours, forwarding
            assert _logins() == before + 1
        finally:
            await host.close()
        bad = SSHHost(
            parse_ssh_url(ns.url, identity=lab.identity, known_hosts=lab.known_hosts,
                          jump="nobody@127.0.0.1:1")
        )  # fmt: skip
        with pytest.raises(RtaxError, match="jump host"):
            await bad.connect()

    asyncio.run(go())


def test_the_remote_reaper_holds_the_run_lock(lab: SSHLab) -> None:
    """The remote reaper holds a run lock (model/runlock.py) with the labels held before
    the connection and after; it lets go when the connection closes."""
    from rtax_tui.model import runlock

    before, after = f"lockb{os.getpid()}", f"locka{os.getpid()}"

    def remote_live() -> set[str]:  # the labels of this process's live remote locks
        out: set[str] = set()
        # the lab's remote host is this machine (as root: /run/rtax/runs)
        for f in glob.glob(f"/run/rtax/runs/ssh{runlock.TOKEN}-*.lock"):
            if subprocess.run(["flock", "-n", "-s", f, "true"]).returncode != 0:
                with open(f) as fh:
                    out |= set(fh.read().split())
        return out

    async def go() -> None:
        runlock.hold(before)
        host = _host(lab)
        await host.connect()
        runlock.hold(after)
        deadline = time.monotonic() + 10
        # every label this process holds (earlier tests' runs too), these two among them
        while not {before, after} <= remote_live() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert {before, after} <= remote_live()
        # this process's own cleanup does not count its own locks as another run's
        assert await runlock.live_labels_on(host) & {before, after} == set()
        await host.close()

    asyncio.run(go())
    deadline = time.monotonic() + 10
    while remote_live() & {after} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after not in remote_live()


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_action_output_past_the_limit_over_ssh(lab: SSHLab, channel: str, monkeypatch) -> None:
    """Issue 19 over SSH (the host's run, the SSH reader of the shell channel): the first
    OUTPUT_LIMIT bytes kept, the rest read and counted, the real status, then in step."""
    from rtax_tui.drivers import get_driver

    from rtax_tui.model import spec as model
    from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

    monkeypatch.setattr(model, "OUTPUT_LIMIT", 1 << 20)
    monkeypatch.setattr(model, "READ_LIMIT", 256 << 10)  # the SSH reader taken as it fills

    async def go() -> None:
        host = _host(lab)
        await host.connect()
        try:
            spec = EnvSpec(
                cell=Cell(host.name, "local", "t", channel),
                workload=Workload("t", ()),
                limits=Limits(),
                label=TAG,
            )
            env = get_driver("local", host).environment(spec)
            try:
                await env.create()
                await env.ready()
                big = Step(("sh", "-c", "head -c 8388608 /dev/zero; exit 3"))
                r = await env.action(big, 60)
                assert (r.rc, len(r.output), r.dropped) == (3, 1 << 20, 7 << 20)
                assert r.output == bytes(1 << 20)
                r = await env.action(Step(("echo", "ok")), 60)
                assert (r.rc, r.output, r.dropped) == (0, b"ok\n", 0)
            finally:
                await env.teardown()
        finally:
            await host.close()

    asyncio.run(go())


def test_clock_synced_at_connect_and_on_schedule(lab: SSHLab) -> None:
    """The host's clock is synchronised at connection and every `clock_sync_s`, on a
    channel of its own. The server is this machine, so the true offset is 0 and the
    true drift 0: every sync's bound, and every drift's, must hold them."""

    async def go() -> None:
        host = _host(lab, clock_sync_s=0.2)
        seen = []
        await host.connect()
        try:
            assert host.clock_error is None and host.clock is not None
            first = host.clock.syncs[0]
            assert first.samples > 1 and 0 < first.err_ns <= first.rtt_ns // 2 + 1
            assert abs(first.offset_ns) <= first.err_ns and first.drift_ppb is None
            host.watch_clock(seen.append)
            deadline = time.monotonic() + 10
            while len(host.clock.syncs) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            syncs = host.clock.syncs
            assert len(syncs) >= 4 and seen == syncs[1 : len(seen) + 1] and seen
            for s in syncs:
                assert abs(s.offset_ns) <= s.err_ns, s
            for s in syncs[1:]:
                assert s.drift_ppb is not None and s.drift_err_ppb is not None
                assert abs(s.drift_ppb) <= s.drift_err_ppb, s
            off, err = host.clock.offset_at(time.monotonic_ns())
            assert abs(off) <= err
            assert (await host.facts()).get("clock_error") is None
        finally:
            await host.close()
        n = len(host.clock.syncs)
        await asyncio.sleep(0.5)
        assert len(host.clock.syncs) == n  # closed: no more syncs
        assert "while read -r _; do t=" not in _ps_args()  # the clock channel is gone

    asyncio.run(go())


def test_a_step_cannot_touch_the_clock_nor_forge_a_result(lab: SSHLab) -> None:
    """A step in the shell channel prints what looks like clock readings and frames, and
    redefines the commands the clock loop uses: its own result comes back exact, and the
    clock (its own channel, its own shell) still agrees with the truth (offset 0)."""

    async def go() -> None:
        host = _host(lab, clock_sync_s=3600)
        await host.connect()
        try:
            proc = await host.spawn(["sh"], env={"PATH": host.path_env}, stdin=subprocess.PIPE)
            shell = FramedShell(proc.stdin, proc.stdout)
            forged = "123\\n__RTAX_00__ 0 999999999\\n" * 50
            step = f"read() {{ :; }}; echo() {{ :; }}; printf '{forged}'; exit 3"
            res = await shell.run(["sh", "-c", step])
            assert (res.rc, res.remote_ns) == (3, None)
            assert res.output == (b"123\n__RTAX_00__ 0 999999999\n" * 50)
            res = await shell.run(["sh", "-c", "read() { :; }; printf 'x 5'"])
            assert (res.rc, res.output) == (0, b"x 5")
            s = await host.sync_clock()
            assert s is not None and abs(s.offset_ns) <= s.err_ns
            assert host.clock is not None and len(host.clock.syncs) == 2
        finally:
            await host.close()

    asyncio.run(go())


def test_unreadable_clock_said_and_run_goes_on(lab: SSHLab, monkeypatch) -> None:
    """A host whose clock cannot be read (not root: /proc/timer_list is root's) has no
    clock and says why; commands run as ever."""
    import rtax_tui.hosts.ssh as ssh_mod

    monkeypatch.setattr(ssh_mod, "CLOCK_SH", ssh_mod.CLOCK_SH.replace("/proc/timer_list", "/nx"))

    async def go() -> None:
        host = _host(lab, clock_sync_s=0.1)
        await host.connect()
        try:
            assert host.clock is None and "cannot be read" in (host.clock_error or "")
            assert await host.sync_clock() is None
            assert (await host.run(["true"])).returncode == 0
            assert "cannot be read" in (await host.facts())["clock_error"]
        finally:
            await host.close()

    asyncio.run(go())


def test_a_remote_shell_with_its_stderr_on_the_host_frames_as_the_local_driver_does(
    lab: SSHLab,
) -> None:
    """The local driver's shell over SSH (issue 42): its stderr is /dev/null on the host,
    read-write, so the frame has no redirection of its own and the step reads it as stdin;
    the frame's own trace crosses nothing, the step's stderr is still its output."""

    async def go() -> list[tuple[int, bytes]]:
        host = _host(lab)
        await host.connect()
        try:
            proc = await host.spawn(
                ["sh"], env={"PATH": host.path_env}, stdin=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            shell = FramedShell(proc.stdin, proc.stdout, stderr_apart=True)
            steps = [
                ("eval", "set -x"),
                ("cat",),
                ("sh", "-c", "echo err >&2; exit 5"),
                ("eval", "exec 2>&1; set +x"),
                ("/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/bin/sh", "-c", "exit 3"),
            ]
            return [((r := await shell.run(s)).rc, r.output) for s in steps]
        finally:
            await host.close()

    got = asyncio.run(go())
    assert [rc for rc, _ in got] == [0, 0, 5, 0, 3]
    assert got[1][1] == b"+ cat\n"
    assert b"err\n" in got[2][1]
    assert all(b"__RTAX_" not in out and b"unset -f" not in out for _, out in got)
