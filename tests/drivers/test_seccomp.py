"""The sandbox's seccomp filter: its verdicts in Python, and the same program in the kernel."""

from __future__ import annotations

import json
import os
import platform
import struct
import subprocess
import sys

import pytest
from rtax_tui.drivers.toolkit import seccomp as S

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the filter is written for x86_64"
)
EPERM = S.RET_ERRNO | S.EPERM


def test_denied_calls_get_eperm_and_the_rest_is_allowed():
    for name, nr in S.DENIED_X86_64.items():
        assert S.evaluate(nr) == EPERM, name
    for nr in (0, 1, 2, 3, 9, 57, 59, 60, 61, 231, 257):  # read, write, open, ..., execve
        assert S.evaluate(nr) == S.RET_ALLOW, nr


def test_namespace_flags_are_refused_on_clone_and_unshare_only():
    clone, unshare = S.FLAG_CHECKED_X86_64["clone"], S.FLAG_CHECKED_X86_64["unshare"]
    sigchld = 17
    assert S.evaluate(clone, sigchld) == S.RET_ALLOW  # fork()
    assert S.evaluate(clone, 0x003D0F00) == S.RET_ALLOW  # pthread_create's flags
    assert S.evaluate(unshare, 0x400) == S.RET_ALLOW  # CLONE_FILES
    for flag in (
        S.CLONE_NEWUSER,
        S.CLONE_NEWNS,
        S.CLONE_NEWPID,
        S.CLONE_NEWNET,
        S.CLONE_NEWCGROUP,
        S.CLONE_NEWTIME,
    ):
        assert S.evaluate(clone, sigchld | flag) == EPERM, hex(flag)
        assert S.evaluate(unshare, flag) == EPERM, hex(flag)
    assert S.evaluate(S.ENOSYS_X86_64["clone3"]) == S.RET_ERRNO | S.ENOSYS


def test_sockets_only_of_the_allowed_families():
    eafnosupport = S.RET_ERRNO | S.EAFNOSUPPORT
    stream, dgram, raw = 1, 2, 3
    for call in S.FAMILY_CHECKED_X86_64.values():  # socket, socketpair
        for af in (S.AF_UNIX, S.AF_INET, S.AF_INET6):
            assert S.evaluate(call, af, stream) == S.RET_ALLOW, af
            assert S.evaluate(call, af, dgram | 0o2000000) == S.RET_ALLOW, af  # SOCK_CLOEXEC
        assert S.evaluate(call, S.AF_NETLINK, raw, S.NETLINK_ROUTE) == S.RET_ALLOW
        assert S.evaluate(call, S.AF_NETLINK, raw, 9) == S.RET_ERRNO | S.EPROTONOSUPPORT  # audit
        for af in (0, S.AF_VSOCK, 17, 38, 44, 31, 255, 0xFFFF):  # packet, alg, xdp, bluetooth
            assert S.evaluate(call, af, stream) == eafnosupport, af
        # the kernel reads an int: the high half of the register does not matter, either way
        assert S.evaluate(call, (1 << 32) | S.AF_VSOCK) == eafnosupport
        assert S.evaluate(call, (1 << 32) | S.AF_UNIX) == S.RET_ALLOW


def test_other_processes_memory_and_files_are_refused():
    for name in ("process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "ptrace"):
        assert S.evaluate(S.DENIED_X86_64[name]) == EPERM, name
    for nr in (424, 434):  # pidfd_send_signal, pidfd_open: kill(2)'s checks, own PID namespace
        assert S.evaluate(nr) == S.RET_ALLOW, nr


def test_other_abis_are_killed():
    assert S.evaluate(0, arch=0x40000003) == S.RET_KILL_PROCESS  # i386
    assert S.evaluate(S.X32_SYSCALL_BIT | 1) == S.RET_KILL_PROCESS  # x32 write


def test_bytes_are_sock_filter_records():
    data = S.filter_bytes()
    assert len(data) % 8 == 0 and len(data) // 8 == len(S.instructions())
    code, jt, jf, k = struct.unpack_from("<HBBI", data, 0)
    assert (code, k) == (S.BPF_LD_W_ABS, S.OFF_ARCH)


# The kernel runs the same bytes: load them in a child (no_new_privs first) and call.
CHILD = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class F(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
data = sys.stdin.buffer.read()
buf = ctypes.create_string_buffer(data, len(data))
prog = F(len(data) // 8, ctypes.cast(buf, ctypes.c_void_p))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("unshare_user", call(272, 0x10000000))
print("unshare_files", call(272, 0x400))
print("mount", call(165, b"none", b"/tmp", b"tmpfs", 0, None))
print("keyctl", call(250, 0, 0, 0, 0, 0))
print("bpf", call(321, 0, 0, 0))
print("clone3", call(435, 0, 0))
print("getpid", call(39))
import socket
def sock(af, proto=0, kind=socket.SOCK_STREAM):
    try:
        socket.socket(af, kind, proto).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("vsock", sock(40))
print("packet", sock(17, 0, socket.SOCK_DGRAM))
print("unix", sock(socket.AF_UNIX))
print("inet6", sock(socket.AF_INET6))
print("netlink_route", sock(16, 0, socket.SOCK_RAW))
print("netlink_audit", sock(16, 9, socket.SOCK_RAW))
try:
    socket.socketpair(40)
    print("socketpair_vsock ok")
except OSError as e:
    print("socketpair_vsock", errno.errorcode[e.errno])
print("socketpair_unix", "ok" if socket.socketpair() else "no")
socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG)
print("getaddrinfo ok")
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
iov = Iov(ctypes.cast(buf, ctypes.c_void_p), 8)
print("process_vm_readv", call(310, os.getpid(), ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0))
pidfd = libc.syscall(434, os.getpid(), 0)
print("pidfd_open", "ok" if pidfd >= 0 else errno.errorcode[ctypes.get_errno()])
print("pidfd_getfd", call(438, pidfd, 0, 0))
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork", os.waitpid(pid, 0)[1] >> 8)
"""


def test_the_kernel_enforces_the_same_program():
    res = subprocess.run(
        [sys.executable, "-c", CHILD], input=S.filter_bytes(), capture_output=True, timeout=30
    )
    assert res.returncode == 0, res.stderr
    got = dict(line.split() for line in res.stdout.decode().splitlines())
    assert got == {
        "unshare_user": "EPERM",
        "unshare_files": "ok",
        "mount": "EPERM",
        "keyctl": "EPERM",
        "bpf": "EPERM",
        "clone3": "ENOSYS",
        "getpid": "ok",
        "vsock": "EAFNOSUPPORT",
        "packet": "EAFNOSUPPORT",
        "unix": "ok",
        "inet6": "ok",
        "netlink_route": "ok",
        "netlink_audit": "EPROTONOSUPPORT",
        "socketpair_vsock": "EAFNOSUPPORT",
        "socketpair_unix": "ok",
        "getaddrinfo": "ok",
        "process_vm_readv": "EPERM",
        "pidfd_open": "ok",
        "pidfd_getfd": "EPERM",
        "fork": "7",
    }


# -- narrow_profile: the same policy over an engine's OCI profile ----------------------

PODMAN_PROFILE = "/usr/share/containers/seccomp.json"
SMALL_PROFILE = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [
        {"names": ["read", "socket", "process_vm_readv", "ptrace"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["pidfd_getfd", "process_vm_writev"], "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": 1,
            "args": [{"index": 0, "value": 16, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
        },
    ],
}


def allowed(profile: dict) -> set[str]:
    return {n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}


def socket_allows(profile: dict) -> list[list[tuple[int, int, str]]]:
    return sorted(
        [(a["index"], a["value"], a["op"]) for a in r.get("args") or []]
        for r in profile["syscalls"]
        if r["action"] == "SCMP_ACT_ALLOW" and "socket" in r["names"]
    )


def profiles() -> list[dict]:
    out = [SMALL_PROFILE]
    if os.path.exists(PODMAN_PROFILE):
        with open(PODMAN_PROFILE) as f:
            out.append(json.load(f))
    return out


@pytest.mark.parametrize("profile", profiles(), ids=lambda p: f"{len(p['syscalls'])}-rules")
def test_a_narrowed_profile_refuses_other_memory_and_other_socket_families(profile):
    narrowed = S.narrow_profile(profile)
    assert not allowed(narrowed) & set(S.MEMORY_CALLS)
    # socket: exactly one unconditional-by-family rule per allowed family, netlink route only
    expected = sorted(
        [[(0, af, "SCMP_CMP_EQ")] for af in S.ALLOWED_FAMILIES]
        + [[(0, S.AF_NETLINK, "SCMP_CMP_EQ"), (2, S.NETLINK_ROUTE, "SCMP_CMP_EQ")]]
    )
    assert socket_allows(narrowed) == expected
    assert S.AF_VSOCK not in S.ALLOWED_FAMILIES
    # everything else it allowed, it still allows; what it refused, it still refuses
    assert allowed(narrowed) == allowed(profile) - set(S.MEMORY_CALLS)
    refusals = [r for r in profile["syscalls"] if r["action"] != "SCMP_ACT_ALLOW"]
    assert [r for r in narrowed["syscalls"] if r["action"] != "SCMP_ACT_ALLOW"] == refusals
    assert narrowed["defaultAction"] == profile["defaultAction"]


def test_a_profile_that_allows_by_default_is_not_narrowed():
    with pytest.raises(ValueError, match="allows by default"):
        S.narrow_profile({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})


def test_the_narrowed_file_is_written_once_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("RTAX_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "default.json"
    src.write_text(json.dumps(SMALL_PROFILE))
    first = S.narrowed_profile_file(str(src))
    assert first is not None and first.startswith(str(tmp_path / "cache"))
    with open(first) as f:
        assert json.load(f) == S.narrow_profile(SMALL_PROFILE)
    mtime = os.stat(first).st_mtime_ns
    assert S.narrowed_profile_file(str(src)) == first
    assert os.stat(first).st_mtime_ns == mtime
    assert S.narrowed_profile_file(str(tmp_path / "absent.json")) is None
