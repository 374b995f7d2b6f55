"""The container drivers' options (`[drivers_options.docker]`, `.podman`): parsed and
checked into a `ContainerOptions`, each mistake one `OptionError` naming the field.

Only what is wrong in the table itself is refused here; what the engine cannot honour
(a daemon without --userns-remap, podman's rootless-only modes) is found by the
driver's `check()` before any trial. Which keys and `userns` values an engine takes is
its driver's to say (`parse_options`' arguments).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class ContainerOptions:
    """A `[drivers_options.docker]` (or `.podman`) table, checked (`parse_options`).

    The boundary fields tighten what the engine does by default, which is root in the
    container with the engine's default capabilities, a writable root filesystem and the
    host's user namespace:

    - `user` ("UID" or "UID:GID"): the container's processes run as that user; rtax gives
      /workspace to it (the archive's owner, or a chown of the host directory), so the
      workspace stays writable. Names are refused: rtax must know the numbers.
    - `cap_drop` / `cap_add`: capability names ("ALL", "NET_RAW", ...; "CAP_" optional).
    - `read_only`: a read-only root filesystem, with a writable tmpfs /tmp and a
      /workspace bound from a host directory (the engines refuse, or ignore, copies into
      a read-only root filesystem).
    - `no_new_privileges`: setuid programs and file capabilities grant nothing.
    - `security_opt`: more `--security-opt` entries, passed on as they are, except a
      seccomp profile file (`seccomp=PATH`), sent as each engine's API takes it.
    - `userns`: docker `host` (the host's user namespace, also with a remapping daemon)
      or `remap` (the daemon's --userns-remap, checked); podman `host`, `auto[:OPTS]`,
      `keep-id[:OPTS]`, `nomap`, sent as the API's UsernsMode.

    And `runtime`: the OCI runtime the engine starts the container with, by the name the
    engine registered it under (`runsc`: gVisor, which `scripts/start-dockerd` registers
    where runsc is installed); unset, the engine's default (runc).
    """

    socket: str | None = None
    image: str | None = None
    network: str = "none"
    workspace: str = "copy"
    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    read_only: bool = False
    no_new_privileges: bool = False
    security_opt: tuple[str, ...] = ()
    userns: str | None = None
    runtime: str | None = None

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


def _parse_user(where: str, value: Any) -> tuple[str, int, int | None]:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    m = re.fullmatch(r"(\d+)(?::(\d+))?", text) if isinstance(text, str) else None
    if m is None or any(int(g) > MAX_ID for g in m.groups() if g is not None):
        raise OptionError("user", f"{value!r} ({USER_FORMAT})")
    gid = m.group(2)
    return text, int(m.group(1)), None if gid is None else int(gid)


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


def _parse_caps(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise OptionError(key, f'{value!r} (expected a list of capability names, e.g. ["ALL"])')
    caps = []
    for cap in value:
        name = cap.strip().upper().removeprefix("CAP_")
        if name != "ALL" and name not in CAPABILITIES:
            raise OptionError(key, f"{cap!r} is not a Linux capability (e.g. ALL, NET_RAW, CHOWN)")
        caps.append(name)
    return tuple(caps)


def parse_options(
    driver: str,
    options: dict[str, Any],
    allowed: tuple[str, ...],
    userns_values: tuple[str, ...],
    userns_prefixes: tuple[str, ...] = (),
) -> ContainerOptions:
    """`[drivers_options.<driver>]` checked: `allowed`, the keys this engine takes;
    `userns_values` and `userns_prefixes`, the `userns` values it honours (exact ones,
    and prefixes of ones with options)."""
    where = f"drivers_options.{driver}"
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise OptionError(
            unknown[0],
            f"unknown {', '.join(unknown)} (allowed: {', '.join(allowed)})",
        )
    kw: dict[str, Any] = {}
    for key in ("socket", "image", "network", "runtime"):
        if key in options:
            if not isinstance(options[key], str) or not options[key]:
                raise OptionError(key, f"{options[key]!r} (expected a non-empty string)")
            kw[key] = options[key]
    workspace = options.get("workspace", "copy")
    if workspace not in WORKSPACE_MODES:
        modes = ", ".join(WORKSPACE_MODES)
        raise OptionError("workspace", f"{workspace!r} (allowed: {modes})")
    kw["workspace"] = workspace
    if "runtime" in options and not re.fullmatch(r"[A-Za-z0-9_.+-]+", kw["runtime"]):
        raise OptionError("runtime", f"{kw['runtime']!r} (a runtime's name: runc, runsc)")
    if options.get("user") is not None:
        kw["user"], kw["uid"], kw["gid"] = _parse_user(where, options["user"])
    for key in ("cap_drop", "cap_add"):
        if key in options:
            kw[key] = _parse_caps(where, key, options[key])
    for key in ("read_only", "no_new_privileges"):
        if key in options:
            if not isinstance(options[key], bool):
                raise OptionError(key, f"{options[key]!r} (expected true or false)")
            kw[key] = options[key]
    if "security_opt" in options:
        sec = options["security_opt"]
        if not isinstance(sec, list) or not all(isinstance(o, str) and o for o in sec):
            raise OptionError("security_opt", f"{sec!r} (expected a list of strings)")
        for opt in sec:
            if re.split("[=:]", opt, maxsplit=1)[0] not in SECURITY_OPT_KEYS:
                raise OptionError(
                    "security_opt",
                    f"{opt!r} (keys: {', '.join(SECURITY_OPT_KEYS)})",
                )
            path = seccomp_file(opt)
            if path is not None:
                why = _seccomp_file_problem(path)
                if why:
                    raise OptionError("security_opt", f"{opt!r} ({why})")
        kw["security_opt"] = tuple(sec)
    if "userns" in options:
        userns = options["userns"]
        if not isinstance(userns, str) or not (
            userns in userns_values or userns.startswith(userns_prefixes)
        ):
            known = [*userns_values, *(p + "OPTIONS" for p in userns_prefixes)]
            raise OptionError("userns", f"{userns!r} (allowed: {', '.join(known)})")
        kw["userns"] = userns
        if userns != "host" and (kw.get("read_only") or workspace == "bind"):
            raise OptionError(
                "userns",
                f'{userns!r} with read_only or workspace = "bind": '
                "/workspace is then a host directory, given to host uids that this user "
                'namespace does not map (use userns = "host", or workspace = "copy" '
                "without read_only)",
            )
    return ContainerOptions(**kw)
