"""The container drivers' options (`[drivers_options.docker]`, `.podman`), declared once
(`ContainerOptions`, with the schema's `option` fields): a profile's table is checked
against them and becomes one (`model.schema.read_options`), each mistake one
`OptionError` naming the field.

Only what is wrong in the table itself is refused here; what the engine cannot honour
(a daemon without --userns-remap, podman's rootless-only modes) is found by the
driver's `check()` before any trial. Which `userns` values an engine takes, and keys of
its own, are its driver's to say (`DockerOptions`, `PodmanOptions`, which narrow `userns`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.model.schema import Key, option
from rtax_tui.model.spec import OptionError

WORKSPACE_MODES = ("copy", "bind", "none")

# Linux capability names (capabilities(7), kernel 6.x), without the CAP_ prefix.
CAPABILITIES = frozenset(
    """CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
    SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
    SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
    MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
    CHECKPOINT_RESTORE""".split()
)
# What `security_opt` entries may start with (the engines' own keys); the value is passed on.
SECURITY_OPT_KEYS = ("apparmor", "label", "no-new-privileges", "seccomp", "systempaths")
MAX_ID = 2**32 - 2
USER_FORMAT = 'expected "UID" or "UID:GID" with numeric ids, to which rtax gives /workspace'
USER_RE = re.compile(r"(\d+)(?::(\d+))?")


def seccomp_file(opt: str) -> str | None:
    """The profile file a `seccomp=PATH` entry names, or None (another key, `unconfined`,
    or a profile given inline as JSON)."""
    key, sep, value = opt.partition("=")
    if key != "seccomp" or not sep or value == "unconfined" or value.lstrip().startswith("{"):
        return None
    return os.path.abspath(value)


def _seccomp_file_problem(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    except ValueError as exc:
        return f"{path} is not JSON: {exc}"
    if not isinstance(profile, dict):
        return f"{path} is not a seccomp profile (a JSON object)"
    return None


# -- the rules beyond a key's type and choices (`Key.check`): why a value breaks one ---


def _user_error(value: str | int) -> str | None:
    m = USER_RE.fullmatch(str(value))
    if m is None or any(int(g) > MAX_ID for g in m.groups() if g is not None):
        return f"{value!r} ({USER_FORMAT})"
    return None


def _cap_name(cap: str) -> str:
    return cap.strip().upper().removeprefix("CAP_")


def _caps_error(value: list[str]) -> str | None:
    for cap in value:
        if _cap_name(cap) != "ALL" and _cap_name(cap) not in CAPABILITIES:
            return f"{cap!r} is not a Linux capability (e.g. ALL, NET_RAW, CHOWN)"
    return None


def _nonempty(value: str) -> str | None:
    return None if value else f"{value!r} (expected a non-empty string)"


def _runtime_error(value: str) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9_.+-]+", value) is None:
        return f"{value!r} (a runtime's name: runc, runsc)"
    return None


def _security_opt_error(value: list[str]) -> str | None:
    for opt in value:
        if re.split("[=:]", opt, maxsplit=1)[0] not in SECURITY_OPT_KEYS:
            return f"{opt!r} (keys: {', '.join(SECURITY_OPT_KEYS)})"
        path = seccomp_file(opt)
        why = None if path is None else _seccomp_file_problem(path)
        if why:
            return f"{opt!r} ({why})"
    return None


def userns_key(values: tuple[str, ...], prefixes: tuple[str, ...] = ()) -> Key:
    """The `userns` option of an engine that honours `values` (exact ones) and values
    starting with `prefixes` (ones with options of their own)."""
    known = ", ".join([*values, *(p + "OPTIONS" for p in prefixes)])

    def error(value: str) -> str | None:
        ok = value in values or (bool(prefixes) and value.startswith(prefixes))
        return None if ok else f"{value!r} (allowed: {known})"

    return Key((str,), None, f"the user namespace: {known} (none: the engine's default)",
               check=error)  # fmt: skip


@dataclass(frozen=True)
class ContainerOptions:
    """The container boundary options, the same for docker and podman (one code path).

    They tighten what the engine does by default (root in the container with the
    engine's default capabilities, a writable root filesystem, the host's user
    namespace). `user`, numeric ("UID" or "UID:GID": rtax must know the numbers), gets
    /workspace (the archive's owner, or a chown of the host directory), so the workspace
    stays writable; `uid` and `gid` are its numbers, derived.
    """

    socket: str | None = option(
        Key((str,), None, "the engine's API socket (none: its default)", check=_nonempty)
    )
    image: str | None = option(
        Key(
            (str,),
            None,
            "the one image of every environment (none: "
            "busybox for T0-style workloads, the Debian image for "
            "the rest)",
            check=_nonempty,
        )
    )
    network: str = option(Key((str,), "none", "the container's network mode", check=_nonempty))
    workspace: str = option(
        Key(
            (str,),
            "copy",
            "the workload's files copied into the "
            "container, or in a host directory bound at /workspace, or "
            "none",
            choices=WORKSPACE_MODES,
        )
    )
    user: str | None = option(
        Key(
            (str, int),
            None,
            '"UID" or "UID:GID": the container\'s processes run as that user (none: root)',
            check=_user_error,
        )
    )
    cap_drop: tuple[str, ...] = option(
        Key(
            (list,),
            (),
            'capabilities taken away ("ALL", "NET_RAW", ...; "CAP_" optional)',
            items=(str,),
            check=_caps_error,
        )
    )
    cap_add: tuple[str, ...] = option(
        Key((list,), (), "capabilities given back", items=(str,), check=_caps_error)
    )
    read_only: bool = option(
        Key(
            (bool,),
            False,
            "a read-only root filesystem, with a tmpfs /tmp and /workspace a bound host directory",
        )
    )
    no_new_privileges: bool = option(
        Key((bool,), False, "setuid programs and file capabilities grant nothing")
    )
    security_opt: tuple[str, ...] = option(
        Key(
            (list,),
            (),
            "more `--security-opt` entries "
            "(keys apparmor, label, no-new-privileges, "
            "seccomp, systempaths)",
            items=(str,),
            check=_security_opt_error,
        )
    )
    userns: str | None = option(userns_key(("host",)))
    runtime: str | None = option(
        Key(
            (str,),
            None,
            "the OCI runtime, by the name the engine "
            "registered it under (`runsc`: gVisor; none: runc)",
            check=_runtime_error,
        )
    )
    uid: int | None = field(default=None, init=False)
    gid: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        """`user` as a string with its numbers in `uid` and `gid`, capability names
        normalised ("cap_net_raw" is "NET_RAW"); and a `userns` of its own refused with
        a host directory for /workspace (keys that are right one by one, wrong together)."""
        set_ = object.__setattr__  # a frozen dataclass's fields, normalised once
        if self.user is not None:
            m = USER_RE.fullmatch(str(self.user))
            assert m is not None  # read_options checked it
            set_(self, "user", str(self.user))
            set_(self, "uid", int(m.group(1)))
            set_(self, "gid", None if m.group(2) is None else int(m.group(2)))
        set_(self, "cap_drop", tuple(_cap_name(c) for c in self.cap_drop))
        set_(self, "cap_add", tuple(_cap_name(c) for c in self.cap_add))
        if self.userns not in (None, "host") and (self.read_only or self.workspace == "bind"):
            raise OptionError(
                "userns",
                f'{self.userns!r} with read_only or workspace = "bind": '
                "/workspace is then a host directory, given to host uids that this user "
                'namespace does not map (use userns = "host", or workspace = "copy" '
                "without read_only)",
            )

    def boundary(self) -> dict[str, Any]:
        """The boundary options in effect, for the recording's header (defaults included,
        so that a header says `user: null`, root, rather than nothing)."""
        return {
            "user": self.user,
            "cap_drop": list(self.cap_drop),
            "cap_add": list(self.cap_add),
            "read_only": self.read_only,
            "no_new_privileges": self.no_new_privileges,
            "security_opt": list(self.security_opt),
            "userns": self.userns,
            "runtime": self.runtime,
        }

    def security_opts(self) -> list[str]:
        """`security_opt` with `no-new-privileges` added when `no_new_privileges` is set."""
        opts = list(self.security_opt)
        if self.no_new_privileges and not any(o.startswith("no-new-privileges") for o in opts):
            opts.append("no-new-privileges")
        return opts
