"""How a boundary check's step output and the host's own observations become `blocked`,
`held`, `breached` or `n/a` (the catalogue of checks is `model.checks`).

Wherever the host can see the outcome itself, the verdict rests on that, not on what
the environment says: the sentinels hold random tokens that only a real read can print,
the probe's own host process logs every connection and signal it gets, and a write into
a host path counts only if the file appears on the host. Where the environment runs its
own kernel (a VM: its boot_id differs from the host's), writes to kernel settings reach
that kernel only and are not breaches. Pure (no I/O): `engine.probe.run` runs the steps
and calls `classify`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.model.checks import (
    ALL_CHECKS,
    BLOCKED,
    BREACHED,
    BY_NAME,
    EMPTY_MD5,
    EVIDENCE_CHARS,
    FAILING_STEPS,
    HELD,
    INTEGRITY_CHECK,
    LINKS_CHECK,
    NA,
    POOL_CHECK,
    SOCKET_CHECKS,
    Check,
)


@dataclass(frozen=True)
class Verdict:
    result: str
    evidence: str


@dataclass(frozen=True)
class Outcome:
    """One step's result, and what the host observed while it ran."""

    output: str = ""
    rc: int | None = None
    error: str | None = None  # the action itself failed: "kind: message"
    observed: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the probe knows from the host's side, and what the environment is."""

    tokens: dict[str, str] = field(default_factory=dict)  # check -> random token
    paths: dict[str, str] = field(default_factory=dict)  # check -> planted path
    sockets: dict[str, list[str]] = field(default_factory=dict)  # docker/podman/libvirt
    shadow_md5: str | None = None
    cmdline_md5: str | None = None  # the host's own /proc/cmdline
    blockdevs: list[tuple[str, int, str]] = field(default_factory=list)  # name, bytes, md5
    host_boot: str = ""
    host_mntns: str = ""
    env_boot: str = ""
    env_mntns: str = ""

    @property
    def own_kernel(self) -> bool:
        """The environment runs its own kernel (a VM): kernel settings are its own."""
        return bool(self.env_boot and self.host_boot and self.env_boot != self.host_boot)

    @property
    def same_mntns(self) -> bool:
        """The environment is in the host's own mount namespace (no mount boundary)."""
        return not self.own_kernel and bool(self.env_mntns) and self.env_mntns == self.host_mntns


def facts(output: str) -> dict[str, list[str]]:
    """The `@key=value` (or bare `@key`) lines of a step's output."""
    out: dict[str, list[str]] = {}
    for line in output.splitlines():
        if line.startswith("@"):
            key, _, value = line[1:].partition("=")
            key = key.split(" ", 1)[0]
            out.setdefault(key, []).append(value.strip())
    return out


def _digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` takes `²` and `٣`, which `int` refuses (a step
    that printed `@spawned=²` ended the whole probe with a ValueError, and the last
    probe's summary stayed in every run's header; red team 2026-12-06)."""
    return text.isascii() and text.isdigit()


def trim(text: str, limit: int = EVIDENCE_CHARS) -> str:
    """One line of evidence: the lines joined by ` | `, cut to `limit` characters."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _shown(output: str) -> str:
    """The human lines of a step's output (facts are summarized by the verdict)."""
    return "\n".join(line for line in output.splitlines() if not line.startswith("@"))


def _v(result: str, why: str, output: str = "") -> Verdict:
    rest = trim(_shown(output), EVIDENCE_CHARS - len(why) - 3) if output else ""
    return Verdict(result, trim(why + (f" | {rest}" if rest else "")))


def _own(check: str) -> str:
    return f"its own kernel (boot_id differs from the host's): {check} reaches only the guest's"


# Checks whose breach the host sees itself (its listener, a file on the host written or
# removed, the host's free space, a workspace left after the teardown, its mount
# namespace): a step that then fails (hangs past its timeout, kills itself) measured
# nothing more, but what the host saw stays seen. An n/a is no broken promise (issue
# 39), so a failure after the breach must not turn it into one (red team 2026-12-06).
HOST_SEEN = frozenset(
    {
        "tmp_sentinel",
        "cache_sentinel",
        "root_home",
        "usr_local",
        "probe_socket",
        "loopback_tcp",
        "host_signal",
        "remount_rw",
        "host_paths",
        "deep_tree",
        "workspace_size",
        "host_sinks",
    }
)


def classify(name: str, out: Outcome, ctx: Context) -> Verdict:
    """The verdict of check `name` from its step's outcome and the host's observations."""
    check = BY_NAME[name]
    fn = _CLASSIFIERS[name]
    if out.error is not None and name not in FAILING_STEPS:
        if name in HOST_SEEN:
            seen = fn(check, out, ctx)
            if seen.result == BREACHED:
                why = f"{seen.evidence}; then the step failed: {out.error}"
                return Verdict(BREACHED, trim(why))
        return _v(NA, f"the step failed: {out.error}", out.output)
    return fn(check, out, ctx)


def _sentinel(check: Check, out: Outcome, ctx: Context) -> Verdict:
    token = ctx.tokens.get(check.name)
    path = ctx.paths.get(check.name)
    if not token or not path:
        return _v(NA, f"no sentinel could be planted for this check on the host ({check.name})")
    f = facts(out.output)
    if token in out.output:
        return _v(BREACHED, f"read the host's {path} (its random token)", out.output)
    if f.get("exists"):
        return _v(BREACHED, f"the host's {path} is visible (not readable)", out.output)
    if out.observed.get("planted_left") is False:
        return _v(BREACHED, _removed(path), out.output)
    return _v(BLOCKED, f"{path} is not visible", out.output)


def _removed(path: str) -> str:
    """A path rtax planted on the host, gone after the step that looked for it: a step
    that removes it and prints nothing read `not visible` (red team 2026-12-06)."""
    return f"the host's {path} was gone after the step: removed from inside"


def _shadow(check: Check, out: Outcome, ctx: Context) -> Verdict:
    md5 = (facts(out.output).get("md5") or [""])[0]
    if not md5:
        return _v(BLOCKED, "cannot read /etc/shadow", out.output)
    if ctx.shadow_md5 is None:
        return _v(NA, "an /etc/shadow is readable, but the host's own cannot be read to compare")
    if md5 == ctx.shadow_md5:
        return _v(BREACHED, "reads the host's /etc/shadow (same md5; contents not recorded)")
    return _v(BLOCKED, "reads only its own /etc/shadow (its md5 differs from the host's)")


def _cmdline(check: Check, out: Outcome, ctx: Context) -> Verdict:
    f = facts(out.output)
    md5 = (f.get("md5") or [""])[0]
    if not md5:
        return _v(BLOCKED, "cannot read /proc/cmdline", out.output)
    if md5 == EMPTY_MD5:
        return _v(BLOCKED, "/proc/cmdline reads empty", out.output)
    if ctx.cmdline_md5 is None:
        return _v(NA, "a /proc/cmdline is readable, but the host's own could not be read")
    if md5 == ctx.cmdline_md5:
        return _v(BREACHED, "reads the host's /proc/cmdline (same md5)", out.output)
    return _v(BLOCKED, "reads another kernel's command line (its md5 differs)", out.output)


def _host_paths(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if ctx.same_mntns:
        return _v(BREACHED, "the host's own mount namespace: every host path is in view")
    paths = [p for p in out.observed.get("host_paths") or [] if p and p != "/"]
    if not paths:
        return _v(NA, "the host knows none of its paths to look for")
    lines = [ln for ln in out.output.splitlines() if not ln.startswith("== ")]
    for p in paths:
        # a path starts where a word does: /var/tmp/rtax-x does not name the host's /tmp/rtax-
        named = re.compile(r"(?:^|[\s=:\"'(])" + re.escape(p))
        hit = next((ln for ln in lines if named.search(ln)), None)
        if hit is not None:
            return _v(BREACHED, f"/proc names the host's {p}: {hit.strip()}")
    return _v(BLOCKED, f"/proc names none of {', '.join(paths)}")


def _vsock(check: Check, out: Outcome, ctx: Context) -> Verdict:
    f = facts(out.output)
    if "made" not in f:  # a socket it says it made: not undone by a `@notool` beside it
        if "notool" in f:
            return _v(NA, "no python3 inside to make a socket", out.output)
        return _v(BLOCKED, "no vsock socket could be made", out.output)
    if ctx.own_kernel:
        why = "its own kernel: a vsock socket there is the guest's (its own port space)"
        return _v(BLOCKED, why, out.output)
    if f.get("bound"):
        return _v(BREACHED, f"bound vsock port {f['bound'][0]} of the host's kernel", out.output)
    return _v(BREACHED, "made a vsock socket on the host's kernel (the bind failed)", out.output)


def _process_vm(check: Check, out: Outcome, ctx: Context) -> Verdict:
    f = facts(out.output)
    token = ctx.tokens.get(check.name, "\0")
    if token in (f.get("read") or []):  # a proof, whatever else the step printed
        return _v(BREACHED, "process_vm_readv read another process's memory", out.output)
    if "took" in f:
        return _v(BREACHED, "pidfd_getfd took another process's descriptor", out.output)
    if "notool" in f:
        return _v(NA, "no python3 inside to make the calls", out.output)
    return _v(BLOCKED, "neither call reached the other process", out.output)


def _socket(check: Check, out: Outcome, ctx: Context) -> Verdict:
    kind = SOCKET_CHECKS[check.name]
    paths = ctx.sockets.get(kind) or []
    if not paths:
        return _v(NA, f"no {kind} socket on the host")
    f = facts(out.output)
    if f.get("connected"):
        return _v(BREACHED, f"connected to the host's {', '.join(f['connected'])}", out.output)
    if f.get("notool"):
        return _v(NA, f"{', '.join(f['notool'])} visible, but no python3 to connect", out.output)
    return _v(BLOCKED, f"no connection to {', '.join(paths)}", out.output)


def _gone(out: Outcome) -> str:
    step = out.observed.get("listener_gone")
    return f"the probe's host process (the listener) was dead after the {step} step"


def _probe_socket(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if not ctx.paths.get(check.name):
        return _v(NA, "the probe could not open a socket on the host (no python3 there?)")
    token = ctx.tokens.get(check.name, "\0")
    seen = int(out.observed.get("unix_conns", 0))
    if seen or token in out.output:
        return _v(BREACHED, f"the host's listener saw {seen} connection(s) from inside", out.output)
    if out.observed.get("planted_left") is False:
        return _v(BREACHED, _removed(ctx.paths[check.name]), out.output)
    if out.observed.get("listener_gone"):
        return _v(NA, _gone(out), out.output)
    if facts(out.output).get("notool"):
        return _v(NA, "the socket is visible, but no python3 to connect", out.output)
    return _v(BLOCKED, "the host's listener saw no connection", out.output)


def _remount(check: Check, out: Outcome, ctx: Context) -> Verdict:
    reached = list(out.observed.get("reached_host") or [])
    if reached:
        return _v(
            BREACHED,
            f"a file written from inside appeared on the host in {', '.join(reached)}",
            out.output,
        )
    wrote = facts(out.output).get("wrote") or []
    if wrote:
        why = f"wrote {', '.join(wrote[:5])} inside (its own file system): nothing reached the host"
        return _v(BLOCKED, why, out.output)
    return _v(BLOCKED, "no host path could be written, remounted or not", out.output)


def _blockdev(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if not ctx.blockdevs:
        return _v(NA, "no block device on the host")
    host = {name: (size, md5) for name, size, md5 in ctx.blockdevs}
    own = []
    for value in facts(out.output).get("read") or []:
        name, _, rest = value.partition(":")
        size_s, _, md5 = rest.partition(":")
        size = int(size_s) if _digits(size_s) else 0
        if size == 0 or name not in host:
            continue
        hsize, hmd5 = host[name]
        if hsize and hmd5:
            if md5 == hmd5:
                return _v(
                    BREACHED, f"read the host's {name} (same bytes as the host reads)", out.output
                )
            own.append(name)  # its own device with the same numbers (a VM's disk)
            continue
        if not ctx.own_kernel:
            why = f"read {size} bytes from a node with {name}'s numbers on the host's kernel"
            return _v(BREACHED, why, out.output)
    refused = "" if any(s for _, s, _ in ctx.blockdevs) else " (root on the host is refused too)"
    if own:
        refused += f"; {', '.join(own)} read its own device (other bytes than the host's)"
    return _v(BLOCKED, f"no host block device could be read{refused}", out.output)


def _kernel_write(check: Check, out: Outcome, ctx: Context) -> Verdict:
    f = facts(out.output)
    if f.get("wrote"):  # a write it says it made: not undone by a `@nofile` beside it
        if ctx.own_kernel:
            return _v(BLOCKED, _own("the write"), out.output)
        return _v(BREACHED, f"wrote the host kernel's {f['wrote'][0]}", out.output)
    if "nosysfs" in f:
        return _v(BLOCKED, "no /sys inside, and mounting a sysfs was refused", out.output)
    if "nofile" in f:
        return _v(NA, "no known setting is readable there", out.output)
    return _v(BLOCKED, "the write was refused", out.output)


_LOADER_REFUSED = ("EPERM", "EACCES")


def _module(check: Check, out: Outcome, ctx: Context) -> Verdict:
    f = facts(out.output)
    errno_name = (f.get("errno") or [""])[0]
    if "notool" in f and not errno_name:  # a loader's answer is not undone by `@notool`
        return _v(NA, "no python3 and no insmod inside to call init_module", out.output)
    if ctx.own_kernel:
        return _v(BLOCKED, _own("init_module"), out.output)
    if errno_name == "ENOSYS":
        return _v(NA, "this kernel has no module loader (ENOSYS): nothing to keep out", out.output)
    if errno_name:
        if errno_name in _LOADER_REFUSED:
            return _v(BLOCKED, f"init_module refused ({errno_name})", out.output)
        return _v(
            BREACHED,
            f"the host kernel's loader took the call ({errno_name}): a real module would load",
            out.output,
        )
    text = out.output.lower()
    if "not permitted" in text or "permission denied" in text:
        return _v(BLOCKED, "insmod refused (not permitted)", out.output)
    if any(s in text for s in ("format", "invalid", "exec format")):
        return _v(
            BREACHED, "the host kernel's loader took the call: a real module would load", out.output
        )
    return _v(NA, "cannot tell from insmod's output", out.output)


def _cgroup(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if ctx.own_kernel:
        return _v(BLOCKED, "its own kernel: the VM's vCPUs and memory are its limits", out.output)
    f = facts(out.output)
    if f.get("moved"):
        return _v(BREACHED, f"moved itself to the root cgroup via {f['moved'][0]}", out.output)
    if f.get("writable"):
        why = f"runs in the host's own namespaces: {f['writable'][0]} is writable"
        return _v(BREACHED, why, out.output)
    return _v(BLOCKED, "could not leave its cgroup", out.output)


def _host_answer(out: Outcome) -> tuple[bool, str]:
    ms = out.observed.get("host_ms")
    if ms is None:
        why = out.observed.get("host_error") or "no answer"
        return False, f"the host did not answer ({why})"
    return True, f"the host answered `true` in {float(ms):.0f} ms"


def _pids(check: Check, out: Outcome, ctx: Context) -> Verdict:
    stated = out.observed.get("stated_none")
    if stated:
        return _v(BREACHED, f"the driver states it applies no pid limit ({stated}): not run")
    answered, host = _host_answer(out)
    if not answered:
        return _v(BREACHED, host, out.output)
    if out.error is not None:
        return _v(NA, f"the step failed: {out.error}; {host}", out.output)
    spawned_s = (facts(out.output).get("spawned") or [""])[0]
    if not _digits(spawned_s):
        return _v(NA, f"the bomb did not report; {host}", out.output)
    spawned = int(spawned_s)
    attempts = int(out.observed.get("attempts", 0))
    if ctx.own_kernel:
        return _v(
            HELD, f"its own kernel: {spawned} processes stayed in the guest; {host}", out.output
        )
    if spawned < attempts:
        return _v(HELD, f"forks refused after {spawned} of {attempts}; {host}", out.output)
    return _v(BREACHED, f"all {attempts} processes started: no pid limit; {host}", out.output)


def _memory(check: Check, out: Outcome, ctx: Context) -> Verdict:
    skipped = out.observed.get("skipped")
    if skipped:
        return _v(NA, str(skipped))
    answered, host = _host_answer(out)
    if not answered:
        return _v(BREACHED, host, out.output)
    limit = out.observed.get("limit_mib")
    if out.error is None and "allocating" not in out.output:
        return _v(NA, f"the hog did not start (rc {out.rc}); {host}", out.output)
    allocated = (facts(out.output).get("allocated") or [""])[0]
    if _digits(allocated) and int(allocated) > 0:
        return _v(
            BREACHED, f"allocated {allocated} MiB past the {limit} MiB limit; {host}", out.output
        )
    if out.error is not None:
        return _v(HELD, f"the environment failed ({out.error}); {host}", out.output)
    return _v(HELD, f"the hog was stopped inside the environment; {host}", out.output)


def _tcp(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if not ctx.tokens.get(check.name):
        return _v(NA, "the probe could not open a listener on the host (no python3 there?)")
    seen = int(out.observed.get("tcp_conns", 0))
    if seen or ctx.tokens[check.name] in out.output:
        return _v(BREACHED, f"the host's loopback listener saw {seen} connection(s)", out.output)
    if out.observed.get("listener_gone"):
        return _v(NA, _gone(out), out.output)
    if "notool" in facts(out.output):
        return _v(NA, "no python3 and no nc inside to connect", out.output)
    return _v(BLOCKED, "the host's loopback listener saw no connection", out.output)


def _processes(check: Check, out: Outcome, ctx: Context) -> Verdict:
    tag = ctx.tokens.get(check.name)
    if not tag:
        return _v(NA, "the probe could not start its host process (no python3 there?)")
    if tag in out.output:
        return _v(BREACHED, "sees the probe's host process and its command line", out.output)
    if out.observed.get("listener_gone"):
        return _v(NA, _gone(out), out.output)
    return _v(BLOCKED, "the probe's host process is not visible", out.output)


def _signal(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if not ctx.tokens.get("host_processes"):
        return _v(NA, "the probe could not start its host process (no python3 there?)")
    n = int(out.observed.get("signals", 0))
    if n:
        return _v(BREACHED, "the probe's host process received SIGCONT from inside", out.output)
    if out.observed.get("listener_gone"):
        # a process of the host that dies under the probe's steps: the likeliest hand is
        # one inside that can signal it (the breach this check looks for), and a dead
        # process logs no signal; never an n/a, which breaks no promise (red team
        # 2026-12-06: a step that killed it left this check `blocked`)
        return _v(BREACHED, _gone(out) + ": killed from inside, or lost", out.output)
    return _v(BLOCKED, "the probe's host process received no signal", out.output)


def _other(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if ctx.tokens.get(check.name, "\0") in out.output:
        return _v(BREACHED, "read the other live environment's workspace marker", out.output)
    return _v(BLOCKED, "the other environment's workspace is not visible", out.output)


def _persists(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if ctx.tokens.get(check.name, "\0") in out.output:
        return _v(HELD, "the file written at the first action was read back later", out.output)
    return _v(BREACHED, "the file written at the first action is gone", out.output)


def _fresh(check: Check, out: Outcome, ctx: Context) -> Verdict:
    if ctx.tokens.get(check.name, "\0") in out.output:
        return _v(BREACHED, "sees a file an earlier environment wrote", out.output)
    return _v(HELD, "nothing of the earlier environment is visible", out.output)


def _init_kill(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`out`: the action after the kills; `observed`: `marked` (the marker was written
    first), `killed` (the kill step's output or error)."""
    killed = str(out.observed.get("killed", ""))
    if "@samepidns" in killed:
        why = "runs in the host's own pid namespace: `kill -9 -1` would kill the host's processes"
        return _v(BREACHED, why + " (not sent)")
    if "@nohostns" in killed:
        return _v(NA, "the host's pid namespace is unknown: the kills were not sent")
    if not out.observed.get("marked"):
        return _v(NA, "the marker could not be written first", killed)
    if out.error is not None:
        return _v(BLOCKED, f"the later action failed as lost ({out.error})", killed)
    if ctx.tokens.get(check.name, "\0") in out.output:
        return _v(BLOCKED, "the later action ran in the same environment (its marker)", killed)
    why = f"a later action succeeded (rc {out.rc}) without its environment's marker"
    return _v(BREACHED, why, out.output)


def _deep_tree(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`observed`: `host_path` (the workspace's path on the host, or None and
    `no_path`: why), `left` (the host still has it), `teardown_error`."""
    path = out.observed.get("host_path")
    if not path:
        return _v(NA, str(out.observed.get("no_path") or "the workspace has no host path"))
    # what the host saw first: a step that made its tree and printed no `@made` line
    err = out.observed.get("teardown_error")
    if err:
        return _v(BREACHED, f"the teardown failed: {err}", out.output)
    if out.observed.get("left"):
        return _v(BREACHED, f"the host still has {path} after the teardown", out.output)
    made = [m for m in facts(out.output).get("made") or [] if not m.endswith(":0")]
    if not made:
        return _v(NA, "no directory chain could be made", out.output)
    return _v(HELD, f"torn down: the host's {path} is gone", out.output)


WORKSPACE_SLACK_MIB = 8  # a filesystem's own blocks, rounding


def _workspace_size(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`observed`: `limit_mib`, `host_drop_mib` (free space lost on the workspace's
    filesystem on the host while the file was there; None: not measurable, `host_fs`)."""
    limit = out.observed.get("limit_mib")
    if not limit:
        return _v(NA, "no workspace size was asked for")
    f = facts(out.output)
    cap = int(limit) + WORKSPACE_SLACK_MIB
    drop = out.observed.get("host_drop_mib")
    fs = out.observed.get("host_fs") or "?"
    host = "" if drop is None else f"; the host's {fs} lost {drop} MiB"
    if drop is not None and float(drop) > cap:  # the host's sight, reported or not
        why = f"the host's {fs} lost {drop} MiB for a {limit} MiB workspace"
        return _v(BREACHED, why, out.output)
    wrote_s = (f.get("wrote_mib") or [""])[0]
    if not _digits(wrote_s):
        return _v(NA, "the write did not report", out.output)
    wrote = int(wrote_s)
    if wrote > cap:
        return _v(BREACHED, f"wrote {wrote} MiB into a {limit} MiB workspace{host}", out.output)
    if "enospc" in f or "edquot" in f:
        stop = "ENOSPC" if "enospc" in f else "EDQUOT"
        return _v(HELD, f"stopped at {wrote} MiB of {limit} ({stop}){host}", out.output)
    return _v(NA, f"stopped at {wrote} MiB, but not for lack of space{host}", out.output)


def _assets_view(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """The step's facts: `named` (the named asset is there), `exists` (the cache
    sentinel), `listed` (each entry beside the named asset); `observed`: `named`."""
    token = ctx.tokens.get("cache_sentinel")
    path = ctx.paths.get("cache_sentinel")
    named = str(out.observed.get("named") or "")
    if not token or not path or not named:
        why = out.observed.get("why") or "no asset or no cache sentinel on this host"
        return _v(NA, str(why))
    f = facts(out.output)
    if "named" not in f:
        return _v(NA, f"the named asset {named} is not visible inside", out.output)
    if token in out.output:
        return _v(BREACHED, f"read the host's {path} (its random token)", out.output)
    if f.get("exists"):
        return _v(BREACHED, f"the host's {path} is visible beside the assets", out.output)
    base = named.rstrip("/").rsplit("/", 1)[-1]
    others = sorted(set(f.get("listed") or []) - {base, ".", ".."})
    if others:
        return _v(BREACHED, f"assets not named are visible: {', '.join(others)}", out.output)
    return _v(BLOCKED, f"only {base} of the assets, and no sentinel, is in view", out.output)


def _host_sinks(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`observed`: `wrote_mib` (per stream), `drops` ({host directory: MiB it grew})."""
    f = facts(out.output)
    wrote = int(out.observed.get("wrote_mib") or 0)
    drops: Mapping[str, Any] = out.observed.get("drops") or {}
    streams = ", ".join(f.get("stream") or []) or "its own output"
    skipped = "".join(f"; not written: {s}" for s in f.get("skipped") or [])
    if drops and wrote:  # the host's sight first: the writes may stop short of `@done`
        fs, worst = max(drops.items(), key=lambda kv: float(kv[1]))
        if float(worst) >= wrote / 2:
            why = f"the host's {fs} grew by {worst} MiB after {wrote} MiB through {streams}"
            return _v(BREACHED, why + skipped)
    if "done" not in f or not wrote:
        return _v(NA, "the writes did not finish", out.output)
    if not drops:
        return _v(NA, "no host filesystem could be measured")
    said = ", ".join(f"{k} {v}" for k, v in sorted(drops.items()))
    return _v(HELD, f"{wrote} MiB each through {streams}; growth (MiB): {said}{skipped}")


def _cleanup_spares(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`out`: the action after the cleanup; `observed`: `cleanup` (what it said)."""
    said = str(out.observed.get("cleanup", ""))
    if out.error is not None:
        return _v(BREACHED, f"after the cleanup ({said}) the live environment failed: {out.error}")
    if ctx.tokens.get(check.name, "\0") in out.output:
        return _v(HELD, f"the live environment survived the cleanup ({said})", out.output)
    return _v(BREACHED, f"the cleanup ({said}) took the live environment's marker", out.output)


def _reset_links(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`out.output`: the planting trial's (`@link=` lines); `observed`: `intact`, `host`
    (what the host found at the links' target after the reset and the teardown)."""
    links = facts(out.output).get("link") or []
    if not links:
        if "intact" in out.observed and not out.observed["intact"]:  # the host looked
            return _v(BREACHED, f"no link reported, but {out.observed.get('host')}", out.output)
        return _v(NA, "no link could be planted", out.output)
    where = ", ".join(links)
    if out.observed.get("intact"):
        return _v(HELD, f"links from {where}: {out.observed.get('host')}")
    return _v(BREACHED, f"links from {where}: {out.observed.get('host')}")


def reuse_verdict(output: str) -> Verdict:
    """`pool_reuse_clean` from its checking trial's output (engine.probe.reuse): `LEFT
    file:/tmp process:/proc/12 ...` where it found the last trial's state, else CLEAN."""
    if "LEFT" in output:
        return _v(BREACHED, "the next trial saw the last one's state", output)
    if "CLEAN" in output:
        return _v(HELD, "nothing of the last trial was left", output)
    return _v(NA, "the checking trial said nothing", output)


def _reuse(check: Check, out: Outcome, ctx: Context) -> Verdict:
    return reuse_verdict(out.output)


def _integrity(check: Check, out: Outcome, ctx: Context) -> Verdict:
    """`observed["truth"]`: (step, the real status, what rtax recorded or the error) for
    each step run after the attacks; `@memwritable=PID` lines: the step's parent, which
    reports its result (the shell, or rtax itself), opened for writing."""
    truth = out.observed.get("truth") or []
    if not truth:
        return _v(NA, "the attacks' environment did not run its checking steps", out.output)
    forged = [f"`{cmd}` exited {real}, recorded {got}" for cmd, real, got in truth if got == 0]
    if forged:
        why = "a later step's failure was recorded as a success: " + "; ".join(forged)
        return _v(BREACHED, why, out.output)
    mem = facts(out.output).get("memwritable")
    if mem:
        why = f"a step can write the memory of pid {', '.join(mem)}, which reports its result"
        return _v(BREACHED, why, out.output)
    refused = [f"`{cmd}`: {got}" for cmd, real, got in truth if isinstance(got, str)]
    if refused:
        why = "the channel stopped answering rather than forge: " + "; ".join(refused)
        return _v(BLOCKED, why, out.output)
    return _v(BLOCKED, "every later step's status was the real one", out.output)


_CLASSIFIERS = {
    "tmp_sentinel": _sentinel,
    "cache_sentinel": _sentinel,
    "root_home": _sentinel,
    "usr_local": _sentinel,
    "host_paths": _host_paths,
    "vsock": _vsock,
    "proc_cmdline": _cmdline,
    "process_vm": _process_vm,
    "etc_shadow": _shadow,
    "docker_socket": _socket,
    "podman_socket": _socket,
    "libvirt_socket": _socket,
    "probe_socket": _probe_socket,
    "remount_rw": _remount,
    "block_devices": _blockdev,
    "proc_sys": _kernel_write,
    "sys_write": _kernel_write,
    "module_load": _module,
    "cgroup_escape": _cgroup,
    "pids_limit": _pids,
    "memory_limit": _memory,
    "loopback_tcp": _tcp,
    "host_processes": _processes,
    "host_signal": _signal,
    "other_env": _other,
    "workspace_persists": _persists,
    "fresh_env": _fresh,
    POOL_CHECK: _reuse,
    LINKS_CHECK: _reset_links,
    "default_limits": _pids,
    "workspace_size": _workspace_size,
    "assets_view": _assets_view,
    "host_sinks": _host_sinks,
    "init_kill": _init_kill,
    "deep_tree": _deep_tree,
    "cleanup_spares_live": _cleanup_spares,
    INTEGRITY_CHECK: _integrity,
}
assert set(_CLASSIFIERS) == ALL_CHECKS
