"""Cgroups on a host through commands: the scripts behind `Host.make_cgroup` and its
kin where the host's cgroup tree is not the controller's (an SSH host).

A cgroup is named by its path below the cgroup root (`rtax/env-x`) and made in every
hierarchy: v2's one, or v1's cpu, memory and pids (whichever the host has). The local
host does the same in-process with `hosts.cgroups.Cgroup` (faster); the two agree on
names, limits and removal.
"""

from __future__ import annotations

CG_ROOT = "/sys/fs/cgroup"
CG_CONTROLLERS = ("cpu", "memory", "pids")  # the v1 hierarchies rtax puts limits in


def cgroup_dirs(rel: str) -> list[str]:
    """Every directory `rel` can have on a host: v2's, then each v1 hierarchy's."""
    rel = rel.strip("/")
    return [f"{CG_ROOT}/{rel}"] + [f"{CG_ROOT}/{c}/{rel}" for c in CG_CONTROLLERS]


# Makes cgroup REL in every hierarchy with the limits; prints each cgroup.procs path.
# Args: REL CPU_QUOTA_US MEMORY_BYTES PIDS (empty: no limit). On v1 the hierarchies are
# told apart with `test -ef` (co-mounted ones are one directory) and made by one `mkdir`:
# one program run, not a `readlink` and a `mkdir` per hierarchy; each limit is written
# before the procs files are printed, so before anything can join.
CREATE_SH = r"""set -e
rel=$1 quota=$2 mem=$3 pids=$4 R=/sys/fs/cgroup
if [ -e $R/cgroup.controllers ]; then
  d=$R
  for part in $(echo "$rel" | tr / ' '); do
    for c in cpu memory pids; do
      grep -qw $c $d/cgroup.controllers 2>/dev/null &&
        { echo +$c > $d/cgroup.subtree_control; } 2>/dev/null || :
    done
    d=$d/$part; [ -d $d ] || mkdir $d
  done
  [ -z "$quota" ] || echo "$quota 100000" > $d/cpu.max
  [ -z "$mem" ] || { echo $mem > $d/memory.max; echo 0 > $d/memory.swap.max 2>/dev/null || :; }
  [ -z "$pids" ] || echo $pids > $d/pids.max
  echo $d/cgroup.procs
  exit 0
fi
[ -e $R/memory/memory.limit_in_bytes ] || { echo "no cgroup hierarchy under $R" >&2; exit 1; }
seen= ctrls= dirs=
for c in cpu memory pids; do
  [ -e $R/$c/cgroup.procs ] || continue
  dup=
  for s in $seen; do [ $R/$c -ef $s ] && dup=1; done
  [ -z "$dup" ] || continue
  seen="$seen $R/$c" ctrls="$ctrls $c" dirs="$dirs $R/$c/$rel"
done
mkdir -p $dirs
for c in $ctrls; do
  case $c in
    cpu) [ -z "$quota" ] || { echo 100000 > $R/$c/$rel/cpu.cfs_period_us;
         echo $quota > $R/$c/$rel/cpu.cfs_quota_us; } ;;
    memory) [ -z "$mem" ] || echo $mem > $R/$c/$rel/memory.limit_in_bytes ;;
    pids) [ -z "$pids" ] || echo $pids > $R/$c/$rel/pids.max ;;
  esac
  echo $R/$c/$rel/cgroup.procs
done"""

# SIGKILLs every process in the cgroup dirs given (and their descendants) but SPARE.
# Args: SPARE DIR...
KILL_SH = r"""spare=$1; shift
for d in "$@"; do
  [ -d "$d" ] || continue
  for s in $(find "$d" -depth -type d 2>/dev/null); do
    for p in $(cat "$s/cgroup.procs" 2>/dev/null); do
      [ "$p" = "$spare" ] || kill -9 "$p" 2>/dev/null
    done
  done
done
:"""

# Kills everything in the cgroup dirs given, then removes them depth-first (bounded wait).
REMOVE_SH = r"""for i in $(seq 1 200); do
  left=
  for d in "$@"; do
    [ -d "$d" ] || continue
    for s in $(find "$d" -depth -type d 2>/dev/null); do
      for p in $(cat "$s/cgroup.procs" 2>/dev/null); do kill -9 $p 2>/dev/null; left=1; done
      [ -n "$left" ] || rmdir "$s" 2>/dev/null || left=1
    done
  done
  [ -n "$left" ] || exit 0
  sleep 0.01
done
echo "cgroup still busy: $*" >&2
exit 1"""


def limit_args(cpus: float | None, memory_mib: int | None, pids: int | None) -> list[str]:
    """CREATE_SH's limit arguments: CPU quota (µs per 100 ms), memory bytes, pids."""
    quota = str(max(1000, int(round(cpus * 100_000)))) if cpus else ""
    mem = str(int(memory_mib) << 20) if memory_mib else ""
    return [quota, mem, str(int(pids)) if pids else ""]
