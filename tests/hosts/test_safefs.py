"""safefs, attacked as an environment that read rtax's code would: deep nesting, symlinks
to host directories planted where teardown, reset and populate look, entries swapped
while they run, a workspace written past its size, and no mount left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

from rtax_tui.hosts import reaper, safefs
from rtax_tui.hosts.local import LocalHost

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounts and chown need root")


@pytest.fixture(params=["openat2", "fallback"])
def resolve(request, monkeypatch):
    """Both ways of resolving beneath an fd: openat2, and O_NOFOLLOW one component at a
    time (kernels before 5.6, or a seccomp filter refusing openat2)."""
    monkeypatch.setattr(safefs, "_openat2_missing", request.param == "fallback")
    return request.param


def _nest(top: str, depth: int) -> None:
    os.makedirs(top, exist_ok=True)
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):  # like `mkdir n && cd n`, beyond PATH_MAX
        os.mkdir("n", dir_fd=fd)
        nfd = os.open("n", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(fd)


def _host_dir(tmp_path) -> tuple[str, dict[str, bytes]]:
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "secret").write_bytes(b"host data")
    (host / "sub" / "f").write_bytes(b"more")
    return str(host), _snapshot(str(host))


def _snapshot(top: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for cur, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(cur, n)
            st = os.lstat(p)
            data = open(p, "rb").read() if n in files else b""
            out[os.path.relpath(p, top)] = data + f"|{st.st_uid}:{st.st_mode:o}".encode()
    return out


def _mounts() -> str:
    with open("/proc/self/mountinfo") as f:
        return f.read()


@pytest.mark.parametrize("depth", [1200, 20000])
def test_deep_nesting_goes_by_teardown_and_by_the_reaper(tmp_path, depth):
    ws = str(tmp_path / "ws")
    _nest(ws, depth)
    asyncio.run(LocalHost().remove_tree(ws))
    assert not os.path.exists(ws)
    _nest(ws, depth)
    reaper._reap(set(), set(), {ws})
    assert not os.path.exists(ws)


def test_links_to_a_host_directory_are_removed_never_followed(tmp_path, resolve):
    host, before = _host_dir(tmp_path)
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    os.symlink(host, ws / "link")
    os.symlink(host, ws / "a" / "b" / "link")
    os.symlink(host + "/secret", ws / "a" / "flink")
    assert safefs.empty_dir(str(ws)) == []
    assert os.listdir(ws) == []
    # /dev/shm replaced by a link (B1): refused, not emptied
    (ws / "dev").mkdir()
    os.symlink(host, ws / "dev" / "shm")
    with pytest.raises(OSError):
        safefs.empty_dir(str(ws / "dev" / "shm"))
    with pytest.raises(OSError):
        safefs.empty_dir("dev/shm", root=str(ws))
    os.symlink(host, ws / "dev2")
    with pytest.raises(OSError):
        safefs.empty_dir("dev2/sub", root=str(ws))  # a link in the middle
    assert safefs.remove_tree(str(ws / "dev" / "shm")) == []  # the link itself goes
    assert safefs.remove_tree(str(ws)) == []
    assert _snapshot(host) == before


@needs_root
def test_chown_and_populate_never_reach_through_links_or_hard_links(tmp_path, resolve):
    host, before = _host_dir(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(host, ws / "sub")  # where populate will make the directory `sub`
    os.symlink(host + "/secret", ws / "file")  # where it will write `file`
    os.link(host + "/secret", ws / "hard")  # a hard link to a host file
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_bytes(b"workspace")
    (src / "file").write_bytes(b"workspace")
    os.symlink(host, src / "alink")
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        safefs.copy_into(str(src), fd, 4242)
    finally:
        os.close(fd)
    safefs.chown_tree(str(ws), 4343)
    assert _snapshot(host) == before
    assert (ws / "sub" / "f").read_bytes() == b"workspace"
    assert not (ws / "sub").is_symlink() and not (ws / "file").is_symlink()
    assert os.lstat(ws / "alink").st_uid == 4343 and os.readlink(ws / "alink") == host
    assert os.stat(ws / "file").st_uid == 4343


def _swapper(entry: str, host: str) -> subprocess.Popen[bytes]:
    """Another process that keeps turning `entry` into a directory, then a link to the
    host directory, as fast as it can."""
    code = (
        "import os, sys\n"
        "e, h = sys.argv[1], sys.argv[2]\n"
        "while True:\n"
        "    try: os.mkdir(e)\n"
        "    except OSError: pass\n"
        "    try: os.rename(e, e + '.x')\n"
        "    except OSError: pass\n"
        "    try: os.symlink(h, e)\n"
        "    except OSError: pass\n"
        "    try: os.unlink(e)\n"
        "    except OSError: pass\n"
        "    try: os.symlink(h, e + '.x/l'); os.rename(e + '.x', e)\n"
        "    except OSError: pass\n"
    )
    return subprocess.Popen(["python3", "-c", code, entry, host])


@needs_root
def test_a_racing_swap_never_writes_the_host_directory(tmp_path, resolve):
    host, before = _host_dir(tmp_path)
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    for i in range(20):
        (src / "d" / f"f{i}").write_bytes(b"x")
        (src / "d" / "e" / f"g{i}").write_bytes(b"y")
    ws = tmp_path / "ws"
    ws.mkdir()
    p = _swapper(str(ws / "d"), host)
    try:
        for _ in range(150):
            fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
            try:
                safefs.copy_into(str(src), fd, 4242)
            except OSError:
                pass  # refusing is fine; following is not
            finally:
                os.close(fd)
            try:
                safefs.chown_tree(str(ws), 4343)
                safefs.empty_dir(str(ws))
            except OSError:
                pass
        for _ in range(50):
            os.makedirs(ws / "w", exist_ok=True)
            os.symlink(host, ws / "w" / f"l{time.monotonic_ns()}")
            safefs.remove_tree(str(ws / "w"))
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    safefs.remove_tree(str(ws))
    assert _snapshot(host) == before


@needs_root
def test_a_sized_workspace_stops_writes_and_leaves_no_mount(tmp_path):
    h = LocalHost()

    async def run() -> str:
        ws = await h.make_workspace("rtax-ws-safefs-", str(tmp_path), 1234, size_mib=8)
        try:
            assert f" {ws} " in _mounts()
            st = os.stat(ws)
            assert (st.st_uid, st.st_mode & 0o777) == (1234, 0o700)
            with pytest.raises(OSError) as e, open(os.path.join(ws, "big"), "wb") as f:
                for _ in range(16):
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            assert e.value.errno == 28  # ENOSPC
        finally:
            await h.remove_tree(ws)
        return ws

    ws = asyncio.run(run())
    assert not os.path.exists(ws)
    assert f" {ws} " not in _mounts()


@needs_root
def test_the_reaper_unmounts_after_kill_9(tmp_path):
    """The reaper outlives rtax: at its pipe's end it unmounts the workspace's tmpfs."""
    r = reaper.Reaper()
    r.start()
    ws = str(tmp_path / "rtax-ws-k9")
    try:
        r.add_path(ws)
        os.mkdir(ws)
        safefs.mount_tmpfs(ws, 4, 1234)
        _nest(ws + "/x", 1500)
        r.close()  # as rtax's death closes it
        for _ in range(100):
            if not os.path.exists(ws):
                break
            time.sleep(0.05)
        assert not os.path.exists(ws)
        assert f" {ws} " not in _mounts()
    finally:
        safefs.unmount(ws)
        safefs.remove_tree(ws)
