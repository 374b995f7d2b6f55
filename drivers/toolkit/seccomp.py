"""The seccomp filter of sandboxes that run hostile code (stage, local and over SSH).

The code in an environment is written by a model under training, so a sandbox must
not rely on missing capabilities alone: this filter refuses, with EPERM, the system
calls that rearrange the file system view or reach the kernel's privileged
interfaces (mount and its new API, pivot_root, chroot, ptrace and its cousins,
bpf, keyrings, modules, kexec, clocks, swap, reboot, io_uring, handle-based
opens), and namespace creation or entry (`unshare`/`clone` with a namespace flag,
`setns`). `clone3` answers ENOSYS: its flags sit in a struct that a classic BPF
filter cannot read, and the C library then falls back to `clone`. A system call
of another ABI (i386's int 0x80, x32) kills the process: that is the classic way
around a filter written for one architecture.

Sockets: `socket` and `socketpair` are allowed for AF_UNIX, AF_INET and AF_INET6
(the sandbox's network namespace has only `lo`), and for AF_NETLINK with the
NETLINK_ROUTE protocol only. Route netlink is what glibc's getaddrinfo asks with
AI_ADDRCONFIG (`__check_pf`; without it glibc assumes both IPv4 and IPv6), what
`ip`, `if_nameindex()` (python's `socket.if_nameindex`) and `hostname -I` read,
and it answers only about the sandbox's own network namespace. Python's
`socket` module and git (no network inside, so never `getaddrinfo` anyway) need
nothing else. Any other family gets EAFNOSUPPORT, what a kernel built without it
says (so programs take their usual fallback): AF_VSOCK above all, whose port space
is the host's and not a network namespace's (a bind to a port the host listens on
said EADDRINUSE), and AF_PACKET, AF_ALG, AF_BLUETOOTH, AF_XDP and the rest of the
kernel's rarely used socket code. Another netlink protocol gets EPROTONOSUPPORT
(so `ss`, which reads sock_diag, fails inside): some are host-wide (the audit log,
uevents, the process-event connector). x86_64 has
no `socketcall` (i386's, whose family sits in memory a filter cannot read, dies with
the rest of that ABI), and io_uring, whose IORING_OP_SOCKET would bypass this, is
refused.

Other processes' memory and files: `process_vm_readv`, `process_vm_writev`,
`pidfd_getfd`, `process_madvise` and `kcmp` are refused, as is ptrace: the only
processes in view are the environment's own, but a grader or harness process that
runs in the environment must not be read or borrowed from. `pidfd_open` and
`pidfd_send_signal` stay allowed: they reach only processes in the sandbox's PID
namespace and signal with the same permission checks as kill(2).

The program is classic BPF written here by hand (no libseccomp binding needed), in
the `struct sock_filter` layout that bubblewrap's `--seccomp FD` and the exec
channel's `rtax-enter` load. `evaluate()` runs it in Python, for the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import struct
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.toolkit.assets import cache_dir

# linux/audit.h, linux/seccomp.h, linux/filter.h
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
EPERM = 1
ENOSYS = 38
EPROTONOSUPPORT = 93
EAFNOSUPPORT = 97
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
# offsets in struct seccomp_data
OFF_NR = 0
OFF_ARCH = 4
OFF_ARG0_LOW = 16  # little endian: the low 32 bits of args[0]
OFF_ARG2_LOW = 32  # ... of args[2] (a socket's protocol)

AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
AF_VSOCK = 40
NETLINK_ROUTE = 0
# socket(2)'s families that the filter lets through (AF_NETLINK: NETLINK_ROUTE only).
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)

CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    CLONE_NEWTIME
    | CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
)

# x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl).
DENIED_X86_64: dict[str, int] = {
    "ptrace": 101,
    "syslog": 103,
    "uselib": 134,
    "vhangup": 153,
    "pivot_root": 155,
    "_sysctl": 156,
    "adjtimex": 159,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "nfsservctl": 180,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    # POSIX message queues live in the IPC namespace with no file a reset could list
    # (no mqueue file system is mounted): refused, so none can outlive a clean reset
    "mq_open": 240,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "quotactl_fd": 443,
}
# Allowed unless a namespace flag is set in the first argument.
FLAG_CHECKED_X86_64 = {"clone": 56, "unshare": 272}
ENOSYS_X86_64 = {"clone3": 435}
# Allowed only for the families above (args[0]), netlink only for NETLINK_ROUTE (args[2]).
FAMILY_CHECKED_X86_64 = {"socket": 41, "socketpair": 53}


class SeccompUnsupported(Exception):
    """No filter is written for this machine's architecture."""


@dataclass(frozen=True)
class Insn:
    code: int
    k: int
    jt: int | str = 0  # a label, resolved by _assemble
    jf: int | str = 0


def _program() -> list[Insn | str]:
    """The filter as instructions and labels (a label is a plain string)."""
    prog: list[Insn | str] = [
        Insn(BPF_LD_W_ABS, OFF_ARCH),
        Insn(BPF_JEQ_K, AUDIT_ARCH_X86_64, jt="nr", jf=0),
        Insn(BPF_RET_K, RET_KILL_PROCESS),
        "nr",
        Insn(BPF_LD_W_ABS, OFF_NR),
        Insn(BPF_JGE_K, X32_SYSCALL_BIT, jt="kill"),
    ]
    for nr in sorted(DENIED_X86_64.values()):
        prog.append(Insn(BPF_JEQ_K, nr, jt="eperm"))
    for nr in sorted(FLAG_CHECKED_X86_64.values()):
        prog.append(Insn(BPF_JEQ_K, nr, jt="flags"))
    for nr in sorted(ENOSYS_X86_64.values()):
        prog.append(Insn(BPF_JEQ_K, nr, jt="enosys"))
    for nr in sorted(FAMILY_CHECKED_X86_64.values()):
        prog.append(Insn(BPF_JEQ_K, nr, jt="family"))
    prog += [
        Insn(BPF_RET_K, RET_ALLOW),
        "family",  # classic BPF jumps only forward: this block has its own allow
        Insn(BPF_LD_W_ABS, OFF_ARG0_LOW),
        *(Insn(BPF_JEQ_K, af, jt="family_ok") for af in ALLOWED_FAMILIES),
        Insn(BPF_JEQ_K, AF_NETLINK, jt=0, jf="eafnosupport"),
        Insn(BPF_LD_W_ABS, OFF_ARG2_LOW),
        Insn(BPF_JEQ_K, NETLINK_ROUTE, jt="family_ok"),
        Insn(BPF_RET_K, RET_ERRNO | EPROTONOSUPPORT),
        "eafnosupport",
        Insn(BPF_RET_K, RET_ERRNO | EAFNOSUPPORT),
        "family_ok",
        Insn(BPF_RET_K, RET_ALLOW),
        "flags",
        Insn(BPF_LD_W_ABS, OFF_ARG0_LOW),
        Insn(BPF_JSET_K, NAMESPACE_FLAGS, jt="eperm"),
        Insn(BPF_RET_K, RET_ALLOW),
        "enosys",
        Insn(BPF_RET_K, RET_ERRNO | ENOSYS),
        "eperm",
        Insn(BPF_RET_K, RET_ERRNO | EPERM),
        "kill",
        Insn(BPF_RET_K, RET_KILL_PROCESS),
    ]
    return prog


def _assemble(prog: list[Insn | str]) -> list[tuple[int, int, int, int]]:
    labels: dict[str, int] = {}
    n = 0
    for item in prog:
        if isinstance(item, str):
            labels[item] = n
        else:
            n += 1
    out: list[tuple[int, int, int, int]] = []
    for item in prog:
        if isinstance(item, str):
            continue
        pc = len(out)

        def rel(target: int | str, pc: int = pc) -> int:
            if isinstance(target, int):
                return target
            off = labels[target] - pc - 1
            if not 0 <= off <= 255:
                raise ValueError(f"seccomp: jump to {target} out of range ({off})")
            return off

        out.append((item.code, rel(item.jt), rel(item.jf), item.k))
    return out


def instructions() -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) for each instruction of the filter."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise SeccompUnsupported(
            f"the stage seccomp filter is written for x86_64, not {platform.machine()}"
        )
    return _assemble(_program())


def filter_bytes() -> bytes:
    """The filter as an array of `struct sock_filter` (what `bwrap --seccomp` reads)."""
    return b"".join(struct.pack("<HBBI", c, jt, jf, k) for c, jt, jf, k in instructions())


def evaluate(nr: int, *args: int, arch: int = AUDIT_ARCH_X86_64) -> int:
    """The filter's verdict (a SECCOMP_RET_* value) for one system call with up to six
    arguments (missing ones are 0): for tests."""
    if len(args) > 6:
        raise ValueError("a system call has at most six arguments")
    full = [a & 0xFFFFFFFFFFFFFFFF for a in args] + [0] * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *full)
    prog = instructions()
    acc = 0
    pc = 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == BPF_LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == BPF_RET_K:
            return k
        else:
            if code == BPF_JEQ_K:
                taken = acc == k
            elif code == BPF_JGE_K:
                taken = acc >= k
            elif code == BPF_JSET_K:
                taken = bool(acc & k)
            else:
                raise ValueError(f"unknown BPF instruction {code:#x}")
            pc += 1 + (jt if taken else jf)


# -- the same policy over an engine's own (OCI JSON) profile --------------------------

# What an engine's default profile must refuse as this filter does (podman 4.3's allows
# them to root in the container).
MEMORY_CALLS = ("process_vm_readv", "process_vm_writev", "pidfd_getfd")


def _allow_family(family: int, *more: dict[str, Any]) -> dict[str, Any]:
    arg0 = {"index": 0, "value": family, "valueTwo": 0, "op": "SCMP_CMP_EQ"}
    return {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [arg0, *more]}


def narrow_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """An OCI seccomp profile (an engine's default) narrowed to this module's policy:
    MEMORY_CALLS taken out of every rule that allows them, and every rule that allows
    `socket` replaced by rules for ALLOWED_FAMILIES and route netlink only, so AF_VSOCK
    and the rest fall to the profile's default action (ENOSYS for podman's). The
    profile's rules that refuse stay as they are. Raises ValueError for a profile whose
    default action allows (narrowing it would refuse nothing)."""
    if profile.get("defaultAction") == "SCMP_ACT_ALLOW":
        raise ValueError("the profile allows by default: nothing to narrow")
    rules: list[dict[str, Any]] = []
    for rule in profile.get("syscalls") or []:
        names = list(rule.get("names") or [])
        if rule.get("action") == "SCMP_ACT_ALLOW":
            names = [n for n in names if n not in MEMORY_CALLS and n != "socket"]
            if not names:
                continue
        rules.append({**rule, "names": names})
    route = {"index": 2, "value": NETLINK_ROUTE, "valueTwo": 0, "op": "SCMP_CMP_EQ"}
    rules += [_allow_family(f) for f in ALLOWED_FAMILIES]
    rules.append(_allow_family(AF_NETLINK, route))
    return {**profile, "syscalls": rules}


def narrowed_profile_file(default: str) -> str | None:
    """`narrow_profile` of the profile file `default`, written once into rtax's cache
    (named by its content) for an engine that takes a profile as a path; None when
    `default` is not there to narrow."""
    try:
        with open(default, "rb") as f:
            profile = json.loads(f.read())
    except FileNotFoundError:
        return None
    text = json.dumps(narrow_profile(profile), indent=1, sort_keys=True).encode()
    out = cache_dir() / "seccomp" / f"narrowed-{hashlib.sha256(text).hexdigest()[:16]}.json"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        tmp.write_bytes(text)
        os.replace(tmp, out)
    return str(out)
