"""The exec channel's compiled spawn (rtax_tui/hosts/_spawnc.c, built by setup.py) and its
ctypes fallback, side by side: each guarantee of hosts/spawn.py holds on both, so a
guarantee the C path loses fails here under [c] and not under [ctypes]."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtax_tui.hosts import spawn, subreaper
from rtax_tui.hosts.local import LocalHost

pytestmark = pytest.mark.skipif(not spawn.available(), reason="no glibc posix_spawn extensions")

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
C = spawn._c


@pytest.fixture(params=["c", "ctypes"])
def backend(request, monkeypatch):  # type: ignore[no-untyped-def]
    if request.param == "c":
        if C is None:
            pytest.fail(_NOT_BUILT)
        monkeypatch.setattr(spawn, "_c", C)
    else:
        monkeypatch.setattr(spawn, "_c", None)
    assert spawn.backend() == request.param
    return request.param


_NOT_BUILT = (
    "rtax_tui/hosts/_spawnc.c is not built: the install compiles it (scripts/bootstrap, or "
    "`.venv/bin/python -m pip install -e .` after a change to setup.py)"
)


def run(argv: list, **kw):  # type: ignore[no-untyped-def]
    return asyncio.run(LocalHost().run(argv, merge_stderr=True, **kw))


def open_fds() -> set[str]:
    """This process's pipes and pidfds (what a spawn opens), after one run (whose first use
    opens some of rtax's own for good). Not its other descriptors: in a pytest worker,
    earlier tests' threads and loops open sockets, eventfds and files of their own while
    a test counts (the whole count is tests/hostile/test_hostile_spawn.py's, in a process
    of its own)."""
    if not _warm:
        _warm.append(run(["true"], env=ENV))
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:") or target == "anon_inode:[pidfd]":
            out.add(f"{fd} {target}")
    return out


_warm: list[object] = []


def _children() -> set[str]:
    """This process's children (of every thread), living or not yet reaped: not a
    waitpid(-1), which would reap another test's child in the same worker."""
    out: set[str] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out |= set(f.read().split())
        except OSError:
            continue
    return out


def test_the_helper_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the ctypes path is the one")
    assert C is not None, _NOT_BUILT


def test_no_descriptor_but_stdio_is_inherited(backend) -> None:  # type: ignore[no-untyped-def]
    r, w = os.pipe()
    os.set_inheritable(r, True)
    os.set_inheritable(w, True)
    open_fds()  # rtax's own first-use descriptors opened before the child is spawned
    try:
        res = run(["sh", "-c", "ls /proc/self/fd; readlink /proc/self/fd/0"], env=ENV)
    finally:
        os.close(r)
        os.close(w)
    fds = res.stdout.decode().split()
    assert fds[-1] == "/dev/null"
    assert set(fds[:-1]) <= {"0", "1", "2", "3"}  # 3: ls's own directory
    # that nothing of rtax's (the pipe's read end, the pidfd) is left open in rtax is
    # counted in a process of its own (tests/hostile/test_hostile_spawn.py): in a pytest
    # worker, other tests' threads and loops open descriptors of their own meanwhile


def test_a_session_and_process_group_of_its_own(backend) -> None:  # type: ignore[no-untyped-def]
    res = run(["sh", "-c", "echo $$; cut -d' ' -f5,6 /proc/self/stat"], env=ENV)
    pid, pgid_sid = res.stdout.decode().split("\n", 1)
    # cut's pgid and sid: the shell's, which is the session leader
    assert pgid_sid.split() == [pid, pid]
    assert os.getsid(0) != int(pid) and os.getpgid(0) != int(pid)


@pytest.mark.parametrize(
    ("script", "rc"),
    [("exit 0", 0), ("exit 3", 3), ("exit 255", 255), ("kill -TERM $$", -15),
     ("kill -KILL $$", -9), ("kill -SEGV $$", -11)],
)  # fmt: skip
def test_exit_status_and_signals(backend, script: str, rc: int) -> None:  # type: ignore[no-untyped-def]
    assert run(["sh", "-c", script], env=ENV).returncode == rc


def test_exec_failures_are_the_same_typed_errors(backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = open_fds()
    with pytest.raises(FileNotFoundError) as missing:
        run(["/nonexistent/rtax-nothing"], env=ENV)
    assert (missing.value.errno, missing.value.filename) == (2, "/nonexistent/rtax-nothing")
    with pytest.raises(FileNotFoundError) as not_on_path:
        run(["rtax-no-such-program"], env=ENV)
    assert not_on_path.value.filename == "rtax-no-such-program"
    with pytest.raises(FileNotFoundError) as no_cwd:
        run(["true"], cwd=str(tmp_path / "missing"), env=ENV)
    assert no_cwd.value.filename == str(tmp_path / "missing")
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError) as denied:
        run([str(plain)], env=ENV)
    assert denied.value.filename == str(plain)
    assert open_fds() <= before  # no pipe end or pidfd left behind by a failed spawn


def test_environment_and_argv_passed_exactly(backend) -> None:  # type: ignore[no-untyped-def]
    odd = os.fsdecode(b"\xff\xfe")  # not UTF-8: a surrogate escape, as os.fsencode takes it
    env = {"PATH": "/usr/bin:/bin", "EMPTY": "", "EQ": "a=b=c", "UNI": "é✓", "RAW": odd}
    res = run(["cat", "/proc/self/environ"], env=env)
    want = b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())
    assert res.stdout == want
    args = ["", "two words", "é", odd, "-n"]
    res = run(
        [
            sys.executable,
            "-c",
            "import sys, os; print([os.fsencode(a) for a in sys.argv[1:]])",
            *args,
        ],
        env=env,
    )  # noqa: E501
    assert res.stdout.decode().strip() == repr([os.fsencode(a) for a in args])


def test_stdout_closed_early_is_still_timed_to_the_exit(backend) -> None:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    res = run(["sh", "-c", "exec >&- 2>&-; sleep 0.4; exit 4"], env=ENV)
    assert res.returncode == 4 and time.monotonic() - t >= 0.4


def test_a_child_that_forks_and_exits(backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the background keeps the pipe: the action lasts until it lets go, as before
    t = time.monotonic()
    res = run(["sh", "-c", "(sleep 0.4; echo late) & echo early; exit 6"], env=ENV)
    assert (res.returncode, res.stdout) == (6, b"early\nlate\n")
    assert time.monotonic() - t >= 0.4
    # one that lets go of it: the action ends with the shell; the group is killed at a timeout
    mark = tmp_path / "bg"
    with pytest.raises(TimeoutError):
        run(["sh", "-c", f"(exec >/dev/null 2>&1; sleep 1; touch {mark}) & sleep 30"],
            env=ENV, timeout=0.3)  # fmt: skip
    time.sleep(1.5)
    assert not mark.exists()


def test_the_child_is_reaped(backend) -> None:  # type: ignore[no-untyped-def]
    st = spawn.start(["sh", "-c", "exit 9"], cwd=None, env=ENV)
    try:
        while os.read(st.rfd, 1 << 16) if _readable(st.rfd) else True:
            if not _readable(st.rfd):
                time.sleep(0.01)
        rc = spawn.reap(st.pid)
        while rc is None:
            time.sleep(0.01)
            rc = spawn.reap(st.pid)
        assert rc == 9
        with pytest.raises(ChildProcessError):
            os.waitpid(st.pid, os.WNOHANG)
    finally:
        os.close(st.rfd)
        if st.pidfd >= 0:
            os.close(st.pidfd)


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def test_the_pidfd_is_the_child_and_the_read_end_does_not_block() -> None:
    if C is None:
        pytest.fail(_NOT_BUILT)
    err, pid, rfd, pidfd = C.spawn("/bin/sleep", ["sleep", "30"], ENV, -1, None)
    try:
        assert err == 0 and pidfd >= 0 and not os.get_blocking(rfd)
        assert not os.get_inheritable(rfd) and not os.get_inheritable(pidfd)
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
        assert C.reap(pid, 0) == -9
    finally:
        os.close(rfd)
        os.close(pidfd)


def test_a_nul_in_argv_or_env_is_refused_before_any_child() -> None:
    if C is None:
        pytest.fail(_NOT_BUILT)
    before, kids = open_fds(), _children()
    with pytest.raises(ValueError):
        C.spawn("/bin/true", ["true", "a\0b"], ENV, -1, None)
    with pytest.raises(ValueError):
        C.spawn("/bin/true", ["true"], {"A": "x\0y"}, -1, None)
    assert _children() == kids  # no child was started
    assert open_fds() <= before


def test_a_c_spawn_is_registered_with_the_subreaper() -> None:
    if C is None:
        pytest.fail(_NOT_BUILT)
    if not subreaper.enable():
        pytest.skip("prctl refused")
    try:
        st = spawn.start(["sleep", "5"], cwd=None, env=ENV)
        try:
            assert st.pid in subreaper._ours
        finally:
            os.kill(st.pid, signal.SIGKILL)
            os.waitpid(st.pid, 0)
            os.close(st.rfd)
            os.close(st.pidfd)
    finally:
        subreaper.disable()


_FALLBACK = """
import asyncio, json, sys
sys.modules["rtax_tui.hosts._spawnc"] = None  # as if the install had no compiler
from rtax_tui.hosts import spawn
from rtax_tui.hosts.local import LocalHost
r = asyncio.run(LocalHost().run(["sh", "-c", "echo hi; ls /proc/self/fd; exit 3"],
                                merge_stderr=True, env={"PATH": "/usr/bin:/bin"}))
print(json.dumps([spawn.backend(), r.returncode, r.stdout.decode()]))
"""


def test_without_the_helper_the_ctypes_path_runs() -> None:
    out = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, check=True)
    backend, rc, stdout = __import__("json").loads(out.stdout)
    assert (backend, rc) == ("ctypes", 3)
    assert stdout.split()[0] == "hi" and set(stdout.split()[1:]) <= {"0", "1", "2", "3"}
    forced = subprocess.run(
        [sys.executable, "-c", "from rtax_tui.hosts import spawn; print(spawn.backend())"],
        capture_output=True, check=True, text=True, env=os.environ | {"RTAX_SPAWN": "ctypes"},
    )  # fmt: skip
    assert forced.stdout.strip() == "ctypes"


def test_the_install_goes_on_without_a_compiler(tmp_path: Path) -> None:
    """setup.py's extension is optional: with no working compiler the build succeeds
    without it (and the ctypes path above is what runs)."""
    shutil.copy(ROOT / "setup.py", tmp_path)
    (tmp_path / "rtax_tui" / "hosts").mkdir(parents=True)
    shutil.copy(ROOT / "rtax_tui" / "hosts" / "_spawnc.c", tmp_path / "rtax_tui" / "hosts")
    res = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
        capture_output=True, text=True, env=os.environ | {"CC": "/bin/false"}, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert not list(tmp_path.rglob("*.so"))
