"""What `stage` needs on a host, found once per driver through the Host API: the tools,
the host's root entries, and the support files (the seccomp filter, the static
`rtax-enter` helper, the curated /etc).

On the controller the support files are made in place (`sandbox.local_support`: the
helper compiled once); on any other host they are copied from the controller to
`REMOTE_SUPPORT` (names carry their content's hash, so a copy is made once) and the
curated /etc is made there. Everything else is the same command on every host.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from rtax_tui.drivers.toolkit.sandbox import ROOT_NAMES, Support, bin_argv, etc_argv, local_support
from rtax_tui.drivers.toolkit.workspace import run_cleanup

from rtax_tui.hosts import Host, cgroups, names
from rtax_tui.hosts.safefs import GONE_SH
from rtax_tui.model.errors import ErrorKind
from rtax_tui.model.runlock import LIVE_SH
from rtax_tui.model.spec import PhaseFailure

# What a host needs for stage (make_workspace's mktemp and tar included).
TOOLS = (
    "bwrap",
    "sh",
    "mktemp",
    "tar",
    "rm",
    "cat",
    "mkdir",
    "rmdir",
    "chown",
    "umount",
    "mv",
    "uname",
    "find",
)
# Where the support files live on a host other than the controller (root's; the helper
# opens the filter itself, as root, for bubblewrap).
REMOTE_SUPPORT = "/var/cache/rtax/stage"

# Writes stdin to DIR/NAME (atomically, mode MODE) unless it is there. Args: DIR NAME MODE
PUT_SH = r"""d=$1 n=$2 m=$3
[ -e "$d/$n" ] && { cat >/dev/null; exit 0; }
mkdir -p "$d" && chmod 0700 "$d" && cat >"$d/.tmp-$n" && chmod "$m" "$d/.tmp-$n" \
  && mv -f "$d/.tmp-$n" "$d/$n"
"""

# Lists the top-level entries of `/`: `NAME<TAB>dir|file|link<TAB>TARGET`.
LIST_ROOT_SH = r"""for e in /* /.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  n=${e#/}
  if [ -L "$e" ]; then printf '%s\tlink\t%s\n' "$n" "$(readlink "$e")"
  elif [ -d "$e" ]; then printf '%s\tdir\t\n' "$n"
  elif [ -f "$e" ]; then printf '%s\tfile\t\n' "$n"; fi
done"""

# Cleanup by label: sandboxes (bwrap naming the workspace), env cgroups (and what is
# below them), workspaces; each spared when it carries a live run's label
# (model/runlock.py), read after the candidates are listed. Args: workspace
# prefix, env cgroup prefix, cgroup root (names.py); prints `removed spared`. The
# workspaces are kept in "$@", never split on spaces (workspace.py's CLEANUP_SH says why).
# A process in uninterruptible sleep (state D: stuck in the kernel, say on a mount
# whose daemon was killed) is skipped before its cmdline is read: that read waits for the
# process's memory map lock, which such a process may hold for minutes (what made this
# script run past its 60 s once dockerd was killed mid-run). Its stat is read without it.
CLEANUP_SH = (
    names.sh_assign()
    + GONE_SH
    + "\n"
    + r"""p=$1 cg=$2 r=$3 n=0 s=0 t=${TMPDIR:-/tmp}
set --; for w in "$t/$p"*; do [ -e "$w" ] && set -- "$@" "$w"; done
cgs=; for d in /sys/fs/cgroup/$r /sys/fs/cgroup/*/$r; do
  [ -d "$d" ] && cgs="$cgs $(find "$d" -mindepth 1 -type d -name "$cg*" 2>/dev/null)"
done
bw=; for d in /proc/[0-9]*; do
  st=; read -r st < $d/stat 2>/dev/null || continue
  case ${st##*") "} in D*) continue ;; esac
  case $(tr '\0' ' ' < $d/cmdline 2>/dev/null) in *bwrap*"$t/$p"*) bw="$bw ${d#/proc/}" ;; esac
done
live=$( (
"""
    + LIVE_SH
    + r"""
) | grep -v '^#')
for q in $bw; do
  a=$(tr '\0' ' ' < /proc/$q/cmdline 2>/dev/null) || continue
  k=; for l in $live; do case $a in *"$t/$WS$l-"*) k=1; break ;; esac; done
  [ -n "$k" ] || { kill -9 "$q" 2>/dev/null && n=$((n+1)); }
done
for c in $cgs; do
  [ -d "$c" ] || continue
  k=; for l in $live; do case ${c##*/} in "$ENV_CG$l-"*) k=1; break ;; esac; done
  if [ -n "$k" ]; then s=$((s+1)); continue; fi
  for i in 1 2 3 4 5 6 7 8 9 10; do
    for x in $(find "$c" -depth -type d 2>/dev/null); do
      for q in $(cat "$x/cgroup.procs" 2>/dev/null); do kill -9 $q 2>/dev/null; done
      rmdir "$x" 2>/dev/null
    done
    [ -d "$c" ] || { n=$((n+1)); break; }
    sleep 0.05
  done
done
for w in "$@"; do
  k=; for l in $live; do case $w in "$t/$WS$l-"*) k=1; break ;; esac; done
  if [ -n "$k" ]; then s=$((s+1)); continue; fi
  rtax_gone "$w"; n=$((n+1))
done
echo $n $s"""
)


async def sandbox_cleanup(host: Host, label: str | None, what: str) -> int:
    """`CLEANUP_SH` on `host` for run `label` (None: every run); how many it removed.
    stage's and gvisor's environments leave the same things (a workspace and an env
    cgroup named for the run's label), so one cleanup serves both. CLEANUP_FAILED,
    beginning with `what`, when the script gives no count."""
    args = [names.workspace_prefix(label), names.env_cgroup_prefix(label), cgroups.PREFIX]
    return await run_cleanup(
        host, CLEANUP_SH, args, lambda err: f"{what} cleanup failed: {err[-300:]!r}"
    )


@dataclass(frozen=True)
class Site:
    """stage's view of one host: its tools (absolute paths), the entries of ROOT_NAMES it
    has, and its support files."""

    tools: dict[str, str]
    root: list[tuple[str, str, str]]
    support: Support


async def find_tools(host: Host) -> dict[str, str]:
    """Absolute paths of TOOLS, as the host sees them."""
    script = 'for t in "$@"; do p=$(command -v "$t") && echo "$t $p"; done; :'
    res = await host.run(["sh", "-c", script, "rtax-tools", *TOOLS], timeout=30)
    tools = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        name, _, path = line.partition(" ")
        if path.startswith("/"):
            tools[name] = path
    return tools


async def list_root(host: Host) -> list[tuple[str, str, str]]:
    """The entries of ROOT_NAMES as the host has them: (name, dir|link, target)."""
    res = await host.run(["sh", "-c", LIST_ROOT_SH], timeout=30)
    out = []
    for line in res.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] in ROOT_NAMES and parts[1] in ("dir", "link"):
            out.append((parts[0], parts[1], parts[2]))
    out.sort()
    return out


async def host_support(host: Host) -> Support:
    """The support files on `host` (see the module docstring). Raises SupportError or
    PhaseFailure("sandbox_failed")."""
    local = await asyncio.to_thread(local_support)
    if host.controller_local:
        return local
    paths = {}
    for key, path, mode in (("enter", local.enter, "0755"), ("filter", local.filter, "0644")):
        name = Path(path).name
        res = await host.run(
            ["sh", "-c", PUT_SH, "rtax-put", REMOTE_SUPPORT, name, mode],
            input=Path(path).read_bytes(),
            timeout=60,
        )
        if res.returncode != 0:
            err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
            raise PhaseFailure(
                ErrorKind.SANDBOX_FAILED, f"cannot copy {name} to {host.name}: {err}"
            )
        paths[key] = f"{REMOTE_SUPPORT}/{name}"
    res = await host.run(etc_argv(), timeout=60)
    etc = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or not etc.startswith("/"):
        err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
        raise PhaseFailure(
            ErrorKind.SANDBOX_FAILED, f"cannot make the sandbox's /etc on {host.name}: {err}"
        )
    res = await host.run(bin_argv(paths["enter"]), timeout=60)
    bin_dir = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or not bin_dir.startswith("/"):
        err = (res.stderr or res.stdout).decode(errors="replace").strip()[-300:]
        raise PhaseFailure(
            ErrorKind.SANDBOX_FAILED, f"cannot make the sandbox's init on {host.name}: {err}"
        )
    return Support(enter=paths["enter"], filter=paths["filter"], etc=etc, bin=bin_dir)
