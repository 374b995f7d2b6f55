"""The stage sandbox against a workload that has read rtax's code (issue 19's B1-B5).

Each test is an attack as a model under training would write it, knowing how stage
resets a pooled sandbox, frames its shell and names its init; each asserts that the
host is untouched and that what rtax records is what really happened.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.stage import StageDriver, StageEnvironment
from rtax_tui.drivers.toolkit.sandbox import (
    BIN_SH,
    DEFAULT_UID,
    ENTER_GONE,
    bwrap_argv,
    enter_argv,
    local_enter,
)

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import (
    Cell,
    EnvSpec,
    Limits,
    PhaseFailure,
    Step,
    Workload,
    workspace_alias_problem,
)

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
pytestmark = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")
LABEL = f"pyhostile{os.getpid()}{os.urandom(2).hex()}"


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    asyncio.run(StageDriver(LocalHost(), {}).cleanup(LABEL))


def env_of(channel: str, src: str | None = None) -> StageEnvironment:
    drv = get_driver("stage", LocalHost(), {})
    spec = EnvSpec(
        cell=Cell("local", "stage", "t", channel),
        workload=Workload("t", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=256),
        label=LABEL,
        workspace_src=src,
    )
    env = drv.environment(spec)
    assert isinstance(env, StageEnvironment)
    return env


async def sh(env: StageEnvironment, script: str, timeout: float = 30):
    return await env.action(Step(("sh", "-c", script)), timeout)


def victim() -> tuple[str, str]:
    """A host directory with a file in it, that no sandbox can name by itself."""
    d = tempfile.mkdtemp(prefix="rtax-victim-")
    p = os.path.join(d, "precious")
    with open(p, "w") as f:
        f.write("host data\n")
    return d, p


def intact(d: str, p: str) -> bool:
    try:
        with open(p) as f:
            return os.listdir(d) == ["precious"] and f.read() == "host data\n"
    except OSError:
        return False


def test_b1_reset_follows_no_link_the_sandbox_planted() -> None:
    """B1: /dev/shm, /tmp entries and workspace entries replaced by links to a host
    directory; the clean reset used to empty the link's target as root."""
    d, p = victim()

    async def run() -> None:
        env = env_of("exec")
        try:
            await env.create()
            await env.ready()
            r = await sh(
                env,
                f"rm -rf /dev/shm && ln -s {d} /dev/shm && ln -s {d} /tmp/l && "
                f"ln -s {d} /workspace/l && ln -s {p} /workspace/f && ls /dev/shm/",
            )
            assert r.rc != 0 or b"precious" not in r.output  # the sandbox can't see it
            await env.reset_clean()
            assert intact(d, p)
            r = await sh(env, "ls -A /tmp /workspace; readlink /dev/shm; test -d /dev/shm")
            assert r.rc == 0 and r.output.split() == [b"/tmp:", b"/workspace:"], r
        finally:
            await env.teardown()

    try:
        asyncio.run(run())
        assert intact(d, p)
    finally:
        import shutil

        shutil.rmtree(d)


def test_b2_the_init_and_the_shell_are_not_writable_through_proc() -> None:
    """B2: read /proc/1/syscall, write an execve stub into /proc/1/mem: the init a
    reset trusts (and the shell that frames results) must refuse both."""

    async def run() -> None:
        for channel in ("exec", "shell"):
            env = env_of(channel)
            try:
                await env.create()
                await env.ready()
                r = await sh(
                    env,
                    "for p in 1 $PPID; do "
                    "(exec 3<>/proc/$p/mem) 2>/dev/null && echo OPEN-$p; "
                    "cat /proc/$p/syscall 2>/dev/null && echo READ-$p; "
                    "python3 -c \"import os; os.open('/proc/$p/mem', os.O_RDWR)\" "
                    "2>/dev/null && echo PY-$p; done; echo done",
                )
                assert r.output.strip().endswith(b"done"), r
                assert b"OPEN-" not in r.output and b"READ-" not in r.output, (channel, r)
                assert b"PY-" not in r.output, (channel, r)
                # pid 1 of the namespace takes no signal from inside
                r = await sh(env, "kill -9 1; kill -KILL 1; sleep 0.1; echo alive")
                assert r.output.strip().endswith(b"alive")
                assert (await sh(env, "echo still")).output == b"still\n"
            finally:
                await env.teardown()

    asyncio.run(run())


def test_b2_nothing_survives_the_reset_and_a_racing_swap_writes_nothing_on_the_host() -> None:
    """B2: a process that tries to outlive the reset (double fork, new session, renamed)
    while it swaps a workspace entry between a directory and a link to a host
    directory, so that the refill would write through the link."""
    d, p = victim()
    src = tempfile.mkdtemp(prefix="rtax-src-")
    os.makedirs(os.path.join(src, "pkg"))
    with open(os.path.join(src, "pkg", "precious"), "w") as f:
        f.write("workspace copy, not the host's\n")

    async def run() -> None:
        env = env_of("exec", src)
        try:
            await env.create()
            await env.ready()
            for _ in range(3):
                r = await sh(
                    env,
                    "setsid sh -c 'exec -a kworker sh -c \""
                    f"while :; do rm -rf /workspace/pkg; ln -sfn {d} /workspace/pkg; "
                    "rm -f /workspace/pkg; mkdir -p /workspace/pkg; done\"' "
                    "</dev/null >/dev/null 2>&1 & sleep 0.05; echo started",
                )
                assert r.output == b"started\n"
                await env.reset_clean()
                r = await sh(env, "ps -e -o comm= | sort | tr '\\n' ' '; cat pkg/precious")
                names = r.output.split(b"\n", 1)[0].split()
                assert b"kworker" not in names and b"sh" in names, r
                assert b"workspace copy, not the host's" in r.output
                assert intact(d, p)
        finally:
            await env.teardown()

    try:
        asyncio.run(run())
    finally:
        import shutil

        shutil.rmtree(d)
        shutil.rmtree(src)


def test_b3_sysv_ipc_and_a_rebuilt_dev_entry_do_not_survive_the_reset() -> None:
    """B3: SysV shared memory, message queues, semaphores, and a /dev entry whose name
    existed at start (`rm /dev/fd; mkdir /dev/fd; echo t > /dev/fd/x`)."""

    async def run() -> None:
        env = env_of("exec")
        try:
            await env.create()
            await env.ready()
            r = await sh(
                env,
                "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 1 && rm /dev/fd && mkdir /dev/fd && "
                "echo t > /dev/fd/x && echo y > /dev/newdev && ipcs | grep -c 0x",
            )
            assert r.rc == 0 and int(r.output.split()[-1]) == 3, r
            await env.reset_clean()
            r = await sh(env, "ipcs | grep -c 0x; readlink /dev/fd; ls -A /dev | tr '\\n' ' '")
            lines = r.output.decode().splitlines()
            assert lines[0] == "0" and lines[1] == "/proc/self/fd", r
            assert "newdev" not in lines[2]
        finally:
            await env.teardown()

    asyncio.run(run())


FORGE_PRINTF = (
    'eval \'printf() { command printf "\\n%s 0\\n" "$2"; }\'; '
    "alias printf='command printf \"\\n%s 0\\n\" x'"
)


def test_b4_a_step_cannot_make_a_later_step_read_as_passed() -> None:
    """B4: on the shell channel, a step overrides `printf` (the old frame's tool),
    aliases it, and plants `read`/`set`: every later step's status is still the real
    one, `exit 3` included."""

    async def run() -> None:
        env = env_of("shell")
        try:
            await env.create()
            await env.ready()
            r = await env.action(Step(("eval", FORGE_PRINTF)), 30)
            assert r.rc == 0, r
            await env.action(Step(("eval", "read() { return 0; }")), 30)
            assert (await env.action(Step(("false",)), 30)).rc == 1
            r = await env.action(Step(("sh", "-c", "echo out; exit 3")), 30)
            assert (r.rc, r.output) == (3, b"out\n")
            with pytest.raises(PhaseFailure) as exc:
                await env.action(Step(("exit", "3")), 30)
            assert exc.value.kind == "shell_lost"  # the shell really exited: never rc 0
        finally:
            await env.teardown()

    asyncio.run(run())


def test_b4_a_step_cannot_reach_the_shells_channel() -> None:
    """B4: a step looks for the shell's own stdin (the frames) to replace the shell with
    a program that answers the next frame: inside a step stdin is /dev/null, the copy
    the shell keeps is out of dash's reach, and /proc/self/fd of a non-dumpable shell
    (or of its subshells) is closed to the sandbox's uid. `exec` then leaves a shell
    with no input, which is lost, never forged."""
    probe = (
        "for fd in 10 11 12 13 14 15; do "
        "(exec 3</proc/self/fd/$fd) 2>/dev/null && echo OPENED-$fd; done; "
        "(exec 3</proc/$$/fd/0) 2>/dev/null && echo OPENED-0; echo looked"
    )

    async def run() -> None:
        env = env_of("shell")
        try:
            await env.create()
            await env.ready()
            r = await env.action(Step(("eval", probe)), 10)
            assert r.output.endswith(b"looked\n") and b"OPENED" not in r.output, r
            with pytest.raises(PhaseFailure) as exc:
                await env.action(Step(("exec", "/.rtax/sh")), 10)
            assert exc.value.kind == "shell_lost"
        finally:
            await env.teardown()

    asyncio.run(run())


def test_b4_a_shell_that_was_replaced_is_never_trusted_again() -> None:
    """B4: whatever route a step found to `exec` over the shell with the channel still
    open (here the raw line is written to the shell's stdin by the test, as if a step
    had escaped the frame), the next answer comes from the same pid with the right
    sentinel, and rtax refuses it: the process exec'd since it was trusted."""

    async def run() -> None:
        for line in (b"exec /.rtax/sh\n", b"exec env LD_PRELOAD= /.rtax/sh\n"):
            env = env_of("shell")
            try:
                await env.create()
                await env.ready()
                assert (await env.action(Step(("true",)), 10)).rc == 0
                assert env.proc is not None
                env.proc.stdin.write(line)
                await asyncio.sleep(0.5)  # read alone: the next frame goes to the new shell
                with pytest.raises(PhaseFailure) as exc:
                    await env.action(Step(("false",)), 10)
                assert exc.value.kind == "integrity", exc.value
                with pytest.raises(PhaseFailure):
                    await env.action(Step(("true",)), 10)
            finally:
                await env.teardown()

    asyncio.run(run())


def test_b4_only_the_shell_itself_can_write_the_frame() -> None:
    """The channel's reader takes a frame only from the process the first answer came
    from: the same bytes from any other writer are output."""
    import socket
    import subprocess

    from rtax_tui.drivers.toolkit.shellframe import CredReader

    async def run() -> None:
        ours, theirs = socket.socketpair()
        reader = CredReader(ours)
        forged = subprocess.run(
            ["sh", "-c", "printf 'x\\nSENT 0\\n'"], stdout=theirs.fileno(), check=True
        )
        assert forged.returncode == 0
        theirs.sendall(b"\nSENT 1\n")  # this process: the trusted writer
        out = await reader.readuntil(b"\nSENT ", os.getpid())
        assert out == b"x\nSENT 0\n\nSENT ", out
        assert await reader.readuntil(b"\n", os.getpid()) == b"1\n"
        theirs.close()
        reader.close()

    asyncio.run(run())


def test_b5_killing_the_init_from_inside_is_a_no_op_and_a_dead_one_is_lost() -> None:
    """B5: `kill -9` of the sandbox's init from inside does nothing; an init that died
    (killed from the host here, as the OOM killer would) makes later actions fail as
    `env_lost`, never run somewhere else."""

    async def run() -> None:
        env = env_of("exec")
        try:
            await env.create()
            await env.ready()
            r = await sh(env, "kill -9 1; sleep 0.1; echo x")
            assert r.output == b"x\n"
            assert env.pid is not None
            os.kill(env.pid, signal.SIGKILL)
            await asyncio.sleep(0.2)
            with pytest.raises(PhaseFailure) as exc:
                await sh(env, "echo should-not-run")
            assert exc.value.kind == "env_lost"
        finally:
            await env.teardown()

    asyncio.run(run())


def test_b5_a_reused_pid_is_never_entered() -> None:
    """B5: the exec helper is given the right PID with another start time (as when the
    PID was reused by another sandbox's init): it refuses, and runs nothing."""

    async def run() -> None:
        env = env_of("exec")
        try:
            await env.create()
            await env.ready()
            assert env.pid is not None and env.start is not None
            support = (await env.driver.site()).support
            marker = f"/workspace/ran-{os.urandom(4).hex()}"
            for start in (env.start + 1, env.start - 1):
                argv = enter_argv(
                    support.enter, support.filter, env.pid, start, env.procs, ["touch", marker]
                )
                res = await env.host.run(argv, env=env.env, timeout=30)
                assert res.returncode == ENTER_GONE, res
            # nothing ran: /workspace (the sandbox's own tmpfs) has no marker
            r = await sh(env, "ls -A /workspace; echo fine")
            assert r.output == b"fine\n", r
        finally:
            await env.teardown()

    asyncio.run(run())


def test_b3_posix_message_queues_are_refused() -> None:
    """B3: a POSIX message queue lives in the IPC namespace with no file a reset could
    list (no mqueue file system inside): the filter refuses to make one."""
    script = (
        "import ctypes, os\n"
        "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
        "rt.mq_open.restype = ctypes.c_int\n"
        "fd = rt.mq_open(b'/rtax-left', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
        "print(fd, ctypes.get_errno())\n"
    )

    async def run() -> None:
        env = env_of("exec")
        try:
            await env.create()
            await env.ready()
            r = await env.action(Step(("python3", "-c", script)), 30)
            fd, err = r.output.split()
            assert int(fd) == -1 and int(err) == 1, r  # EPERM
        finally:
            await env.teardown()

    asyncio.run(run())


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_b4_the_init_and_shell_directory_takes_nothing_and_shows_nothing(channel: str) -> None:
    """B4: /.rtax is one read-only bind of the host directory that holds the init and the
    shell (one bind, not one a file: issue 36), execute-only (0711): the two run by path,
    neither can be read, the directory can be neither listed nor changed (added to,
    renamed in, replaced, removed from, chmodded), so no step changes the init a reset
    trusts or the shell that frames every result."""
    probe = (
        "ls /.rtax >/dev/null 2>&1 && echo LISTED; "
        "[ -x /.rtax/init ] && [ -x /.rtax/sh ] || echo NOT-EXECUTABLE; "
        "cat /.rtax/init >/dev/null 2>&1 && echo READ-INIT; "
        "cat /.rtax/sh >/dev/null 2>&1 && echo READ-SH; "
        "{ echo x > /.rtax/added; } 2>/dev/null && echo ADDED; "
        "mv /.rtax/sh /.rtax/sh2 2>/dev/null && echo RENAMED; "
        "cp /bin/true /.rtax/sh 2>/dev/null && echo REPLACED; "
        "rm -f /.rtax/init 2>/dev/null; [ -e /.rtax/init ] || echo REMOVED; "
        "chmod 777 /.rtax /.rtax/init 2>/dev/null && echo CHMOD; "
        "awk '$5 == \"/.rtax\" {print $6}' /proc/self/mountinfo; echo looked"
    )

    async def run() -> None:
        env = env_of(channel)
        try:
            await env.create()
            await env.ready()
            r = await env.action(Step(("sh", "-c", probe)), 30)
            lines = r.output.decode().splitlines()
            assert len(lines) == 2 and lines[-1] == "looked", r.output
            assert lines[0].split(",")[0] == "ro", r.output  # the mount's own options
            assert (await env.action(Step(("true",)), 10)).rc == 0  # the init still serves
        finally:
            await env.teardown()

    asyncio.run(run())


# counts inotify events on /.rtax for argv[1] seconds ("nowatch" when refused)
WATCH_RTAX = r"""
import ctypes, os, select, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o4000)
if libc.inotify_add_watch(fd, b"/.rtax", 0xfff) < 0:
    print("nowatch", os.strerror(ctypes.get_errno())); sys.exit(0)
end, names = time.time() + float(sys.argv[1]), []
while time.time() < end:
    if select.select([fd], [], [], 0.2)[0]:
        buf, i = os.read(fd, 65536), 0
        while i < len(buf):
            _w, _m, _c, ln = struct.unpack_from("iIII", buf, i)
            names.append(buf[i + 16 : i + 16 + ln].rstrip(b"\0").decode()); i += 16 + ln
print("events", len(names), sorted(set(names)))
"""


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_b4_a_step_does_not_see_other_sandboxes_start_through_rtax(channel: str) -> None:
    """Red team 36: with /.rtax the shared host directory at 0755, a step's inotify watch
    on it saw every other sandbox's init and shell start, host-wide (29-75 events while one
    other environment started). The directory is 0711: no watch is allowed."""

    async def run() -> None:
        a = env_of(channel)
        try:
            await a.create()
            await a.ready()
            probe = "python3 -c " + shlex.quote(WATCH_RTAX) + " 4"
            watcher = asyncio.ensure_future(a.action(Step(("sh", "-c", probe)), 30))
            await asyncio.sleep(1.0)
            b = env_of("shell")  # another environment starts: its init and its shell
            try:
                await b.create()
                await b.ready()
                assert (await b.action(Step(("true",)), 10)).rc == 0
            finally:
                await b.teardown()
            out = (await watcher).output.decode()
            assert out.startswith("nowatch") or out.startswith("events 0 "), out
        finally:
            await a.teardown()

    asyncio.run(run())


@pytest.mark.parametrize("alias", ["/.rtax", "/.rtax/ws", "/.rtax/sh", "/.rtax/init"])
def test_a_workspace_alias_under_rtax_is_refused(alias: str) -> None:
    """Red team 36: a replayed trajectory's root under /.rtax (what a model ran) was taken
    as the workspace's alias, and stage then failed every environment of the replay
    (bubblewrap cannot make a link in the read-only /.rtax). /.rtax is the environment's
    own system: refused, so the replay drops the alias and runs."""
    assert workspace_alias_problem(alias) == "/.rtax is the environment's own system"
    with pytest.raises(ValueError, match="own system"):
        bwrap_argv(
            "bwrap", "/tmp/x", ("true",), workspace_mib=16, root=[], etc="/e",
            bin_dir="/b", seccomp_fd=5, alias=alias,
        )  # fmt: skip


def test_bin_sh_takes_no_directory_it_did_not_make(tmp_path: Path) -> None:
    """Red team 36 (hardening: only root can write stage's public directory): BIN_SH used
    any bin-<key> it found; since the whole directory is a sandbox's /.rtax, a link there
    to a writable directory of the sandbox uid's, with forged init and sh and an extra
    file, would have been the sandbox's init. What it finds is used only if it is exactly
    what it makes; anything else is moved aside and made again."""
    base, evil = tmp_path / "public", tmp_path / "evil"
    base.mkdir()
    evil.mkdir()
    enter = local_enter()
    sh = os.path.realpath("/bin/sh")
    key = subprocess.run(
        ["sh", "-c", 'cat -- "$1" "$2" | cksum | tr " " -', "k", enter, sh],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for n in ("init", "sh", "extra"):
        (evil / n).write_text("#!/bin/sh\necho forged\n")
        os.chmod(evil / n, 0o777)
        os.chown(evil / n, DEFAULT_UID, DEFAULT_UID)
    os.chown(evil, DEFAULT_UID, DEFAULT_UID)
    os.chmod(evil, 0o777)
    old_style = base / f"bin-{key}"
    for found in ("link", "0755"):
        if found == "link":
            old_style.symlink_to(evil)
        res = subprocess.run(
            ["sh", "-c", BIN_SH, "rtax-bin", str(base), enter], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
        got = Path(res.stdout.strip())
        assert got == old_style and not got.is_symlink()
        st = os.lstat(got)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o711)
        assert sorted(os.listdir(got)) == ["init", "sh"]
        for n in ("init", "sh"):
            s = os.lstat(got / n)
            assert (s.st_uid, s.st_mode & 0o7777) == (0, 0o111)
        assert (got / "init").read_bytes() == Path(enter).read_bytes()
        assert sorted(os.listdir(evil)) == ["extra", "init", "sh"]  # the link's target untouched
        assert [p.name for p in base.iterdir()] == [got.name]  # nothing left aside
        os.chmod(got, 0o755)  # as an older rtax made it: made again, 0711
