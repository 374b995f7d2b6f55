"""What a stage sandbox shows of the host's kernel and /usr, and which sockets and
cross-process calls its filter lets through (issue 19: B9 and the red team's minor
findings), on both channels (the exec channel's actions go through rtax-enter)."""

from __future__ import annotations

import asyncio
import os

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.stage import StageDriver

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

ROOT = os.geteuid() == 0 and Cgroup.version() is not None
pytestmark = pytest.mark.skipif(not ROOT, reason="stage needs root and cgroups")
LABEL = f"pystv{os.getpid()}{os.urandom(2).hex()}"

PY_CALLS = r"""
import ctypes, errno, os, socket
def sock(*a):
    try:
        socket.socket(*a).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("vsock", sock(40, socket.SOCK_STREAM))
print("packet", sock(17, socket.SOCK_DGRAM))
print("unix", sock(socket.AF_UNIX))
print("inet", sock(socket.AF_INET))
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
pid = os.fork()
if pid == 0:
    os.read(os.open("/dev/zero", os.O_RDONLY), 1)
    import time; time.sleep(5); os._exit(0)
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
iov = Iov(ctypes.cast(buf, ctypes.c_void_p), 8)
print("process_vm_readv", call(310, pid, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0))
fd = libc.syscall(434, pid, 0)
print("pidfd_open", "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
print("pidfd_getfd", call(438, fd, 0, 0))
os.kill(pid, 9)
"""


@pytest.fixture(autouse=True, scope="module")
def _leaves_nothing():
    yield
    asyncio.run(StageDriver(LocalHost(), {}).cleanup(LABEL))


def _spec(channel: str) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", "stage", "t", channel),
        workload=Workload("t", ()),
        limits=Limits(cpus=1, memory_mib=256, pids=128),
        label=LABEL,
    )


@pytest.mark.parametrize("channel", ("exec", "shell"))
def test_host_kernel_files_usr_local_and_calls(channel: str) -> None:
    async def run() -> dict[str, bytes]:
        env = get_driver("stage", LocalHost(), {}).environment(_spec(channel))
        out: dict[str, bytes] = {}
        try:
            await env.create()
            await env.ready()
            for name, argv in {
                "masked": ("sh", "-c", "cat /proc/cmdline /proc/kallsyms /proc/keys | wc -c"),
                "usr_local": ("ls", "-A", "/usr/local"),
                "usr_local_rw": ("sh", "-c", "touch /usr/local/x 2>&1"),
                "tools": ("sh", "-c", "for t in python3 git sh; do command -v $t; done"),
                "git": ("sh", "-c", "git init -q r && git -C r status --short && echo ok"),
                "calls": ("python3", "-c", PY_CALLS),
            }.items():
                r = await env.action(Step(argv), 30)
                out[name] = r.output
        finally:
            await env.teardown()
        return out

    out = asyncio.run(run())
    with open("/proc/cmdline", "rb") as f:
        assert f.read().strip(), "the host's own /proc/cmdline is not empty"
    assert out["masked"].strip() == b"0"
    assert out["usr_local"] == b""
    assert b"Read-only file system" in out["usr_local_rw"]
    assert out["tools"].split() == [b"/usr/bin/python3", b"/usr/bin/git", b"/usr/bin/sh"]
    assert out["git"] == b"ok\n"
    got = dict(ln.split() for ln in out["calls"].decode().splitlines())
    assert got == {
        "vsock": "EAFNOSUPPORT",
        "packet": "EAFNOSUPPORT",
        "unix": "ok",
        "inet": "ok",
        "process_vm_readv": "EPERM",
        "pidfd_open": "ok",
        "pidfd_getfd": "EPERM",
    }, out["calls"]
