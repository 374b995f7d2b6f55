"""A fingerprint of everything a step can observe of its environment, for resets.

A clean reset is proven differentially: the fingerprint of a fresh environment and the
one taken after a trial that changed all it could and a reset must be equal. A list of
attacks only shows that those attacks fail; an equal fingerprint shows that nothing the
script can see of the last trial is left.

`FINGERPRINT` runs inside the environment as one step (POSIX sh, the host's or the
image's tools; it writes nothing) and prints one line per observed fact, `KIND NAME
VALUE`:
- `path`: every entry under each writable mount (the fixed places `/tmp`, `/workspace`,
  `/dev`, `/dev/shm`, `/dev/mqueue`, `/run`, `/var/tmp`, and every mount that
  /proc/self/mountinfo says is read-write, but /proc and /sys): type, mode, owner,
  group, size, link target, device numbers, a digest of a regular file's bytes, and
  its extended attributes (`getfattr`, where the environment has it; `xattrs n/a`
  where not, and then the same on both sides);
- `mqueue`: each POSIX message queue's state line (size, notification);
- `ipc`: SysV shared memory, message queues and semaphore sets (key, owner, mode);
- `sysctl`: the IPC namespace's (kernel.msg*, shm*, sem, fs.mqueue.*) and the UTS
  namespace's (hostname, domainname);
- `init`: PID 1's command, resource limits, nice, scheduling, oom_score_adj,
  capabilities, no_new_privs and seccomp state;
- `self`: the step's own limits, nice and umask;
- `cgroup`: the values of the cgroup the step sees, where /sys/fs/cgroup is mounted;
- `proc`: the other processes of the PID namespace (their command), outside the
  fingerprint's own process tree, but kernel threads (a VM guest's: their names change
  with the work they do);
- `env`, `cwd`: the step's environment and working directory.

Times and inode numbers are left out: a new instance has new ones, and no trial can
leave anything through them that the rest does not show.
"""

from __future__ import annotations

FINGERPRINT = r"""echo "cwd . $(pwd)"
env | LC_ALL=C sort | while IFS= read -r l; do
  case $l in _=*|SHLVL=*|OLDPWD=*) ;; *) echo "env . $l";; esac
done
cd / || exit 1
echo "self umask $(umask)"
while IFS= read -r l; do echo "self limits $l"; done < /proc/$$/limits
set -- $(sed 's/.*) //' /proc/$$/stat); echo "self nice ${17}"
echo "init comm $(cat /proc/1/comm 2>&1)"
echo "init cmdline $(tr '\0' ' ' < /proc/1/cmdline 2>&1)"
while IFS= read -r l; do echo "init limits $l"; done < /proc/1/limits
set -- $(sed 's/.*) //' /proc/1/stat 2>/dev/null)
echo "init sched prio=${16} nice=${17} policy=${39} rtprio=${38}"
echo "init oom_score_adj $(cat /proc/1/oom_score_adj 2>&1)"
grep -E '^(Cap|NoNewPrivs|Seccomp:|Uid|Gid|Groups)' /proc/1/status 2>&1 | sed 's/^/init status /'
for f in /proc/sys/kernel/msgmax /proc/sys/kernel/msgmnb /proc/sys/kernel/msgmni \
    /proc/sys/kernel/shmmax /proc/sys/kernel/shmall /proc/sys/kernel/shmmni \
    /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/sem /proc/sys/kernel/msg_next_id \
    /proc/sys/kernel/shm_next_id /proc/sys/kernel/sem_next_id /proc/sys/kernel/hostname \
    /proc/sys/kernel/domainname /proc/sys/fs/mqueue/*; do
  [ -e "$f" ] && echo "sysctl $f $(cat "$f" 2>&1 | tr -s ' \t' ' ')"
done
for f in /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem; do
  [ -r "$f" ] && awk -v f="$f" 'NR > 1 { print "ipc", f, $1, $3, $(NF > 8 ? 8 : NF) }' "$f"
done
for f in cpu.max cpu.weight cpu.weight.nice cpu.idle memory.max memory.high memory.low \
    memory.min memory.swap.max memory.oom.group pids.max io.max io.weight; do
  [ -r "/sys/fs/cgroup/$f" ] && echo "cgroup $f $(cat "/sys/fs/cgroup/$f" 2>&1 | tr '\n' ' ')"
done
me=$$
for p in /proc/[0-9]*; do
  s=$(cat "$p/stat" 2>/dev/null) || continue
  n=${p#/proc/}; rest=${s##*) }; set -- $rest
  echo "$n $2 $7 $(cat "$p/comm" 2>/dev/null)"
done | awk -v me="$me" '
  int($3 / 2097152) % 2 == 1 { next }  # PF_KTHREAD: kernel threads
  { pp[$1] = $2; c[$1] = $4 }
  END { for (p in pp) { q = p; mine = 0
          while (q != "" && q != 0) { if (q == me) { mine = 1; break }; q = pp[q] }
          if (!mine) print "proc .", c[p] } }' | LC_ALL=C sort
roots="/tmp /workspace /dev /dev/shm /dev/mqueue /run /var/tmp"
roots="$roots $(awk '$5 !~ "^/(proc|sys)(/|$)" { split($6, o, ","); if (o[1] == "rw") print $5 }' \
  /proc/self/mountinfo 2>/dev/null | LC_ALL=C sort -u | tr '\n' ' ')"
seen=" "
for r in $roots; do
  case $seen in *" $r "*) continue;; esac; seen="$seen$r "
  [ -e "$r" ] || [ -L "$r" ] || continue
  find "$r" -xdev -exec stat -c 'path %n %F %A %u:%g %s %t:%T %N' {} + 2>&1 | LC_ALL=C sort
  # find's own -type trusts the directory entry: a device bound over a file reads as one
  find "$r" -xdev -exec sh -c 'for f; do [ -f "$f" ] && [ ! -L "$f" ] && [ -r "$f" ] \
    && md5sum "$f"; done' rtax-fp {} + 2>&1 | sed 's/^/data /' | LC_ALL=C sort
  if command -v getfattr >/dev/null 2>&1; then
    find "$r" -xdev -exec getfattr -h -d -m - --absolute-names {} + 2>&1 \
      | awk '/^# file: / { f = substr($0, 9); next } NF { print "xattr", f, $0 }' | LC_ALL=C sort
  else
    echo "xattr $r n/a"
  fi
  case $r in /dev/mqueue)
    for q in /dev/mqueue/*; do [ -f "$q" ] && echo "mqueue $q $(cat "$q" 2>&1)"; done;;
  esac
done
echo "fingerprint end"
"""


def parse(output: str) -> list[str]:
    """The fingerprint's lines (what FINGERPRINT printed), in order."""
    return [line.rstrip() for line in output.splitlines() if line.strip()]


def complete(lines: list[str]) -> bool:
    """Did the script run to its end (and not fail or time out half-way)?"""
    return bool(lines) and lines[-1] == "fingerprint end"


def differences(before: list[str], after: list[str], limit: int = 12) -> list[str]:
    """What differs, `-` for a line only in `before`, `+` for one only in `after`, the
    first `limit` of them (each side's order kept)."""
    a, b = set(before), set(after)
    out = [f"- {line}" for line in before if line not in b]
    out += [f"+ {line}" for line in after if line not in a]
    return out[:limit]


# A trial that changes all it can of what FINGERPRINT sees (the H5 and H6 attacks of
# issue 34 among them), each attempt on its own: what the environment refuses is simply
# not changed. Prints `attacked` at the end.
ATTACK = r"""cd /workspace 2>/dev/null || cd /
for d in /tmp /workspace /dev/shm /dev /dev/mqueue; do
  [ -d "$d" ] || continue
  echo left > "$d/rtax-file" 2>/dev/null
  mkdir "$d/rtax-dir" 2>/dev/null && echo left > "$d/rtax-dir/f" 2>/dev/null
  mkfifo "$d/rtax-fifo" 2>/dev/null
  ln -s /etc/passwd "$d/rtax-link" 2>/dev/null
  mknod "$d/rtax-null" c 1 3 2>/dev/null
  command -v setfattr >/dev/null && setfattr -n user.rtax -v left "$d" 2>/dev/null
  command -v setfattr >/dev/null && setfattr -n user.rtax -v left "$d/rtax-file" 2>/dev/null
done
chmod 700 /tmp 2>/dev/null; chmod 777 /workspace 2>/dev/null; chmod 1777 /dev/shm 2>/dev/null
rm -f /dev/fd 2>/dev/null && mkdir /dev/fd 2>/dev/null
command -v ipcmk >/dev/null && { ipcmk -M 4096; ipcmk -Q; ipcmk -S 1; } >/dev/null 2>&1
ln -sf /etc/shadow /dev/stdin 2>/dev/null
for s in kernel/msgmax kernel/msgmnb kernel/msgmni kernel/shmmni kernel/shmmax kernel/shmall \
    kernel/shm_rmid_forced kernel/msg_next_id fs/mqueue/msg_max fs/mqueue/msgsize_max \
    fs/mqueue/queues_max fs/mqueue/msg_default kernel/hostname kernel/domainname; do
  case $s in kernel/hostname|kernel/domainname) v=rtax-left;; kernel/msg_next_id) v=77;;
    kernel/shm_rmid_forced) v=1;; *) v=9;; esac
  echo "$v" > "/proc/sys/$s" 2>/dev/null
done
if [ -d /dev/mqueue ] && [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - <<'PY' 2>/dev/null
import ctypes, os
rt = ctypes.CDLL("librt.so.1", use_errno=True)
q = rt.mq_open(b"/rtax-q", os.O_CREAT | os.O_WRONLY, 0o644, None)
if q >= 0:
    rt.mq_send(q, b"left", 4, 0)
PY
fi
prlimit --pid 1 --nofile=64:64 --core=0:0 --stack=1048576 2>/dev/null
prlimit --pid $$ --nofile=64:64 2>/dev/null
renice -n 7 -p 1 >/dev/null 2>&1
echo 500 > /proc/1/oom_score_adj 2>/dev/null
for f in cpu.weight memory.high pids.max; do
  [ -w "/sys/fs/cgroup/$f" ] && echo 42 > "/sys/fs/cgroup/$f" 2>/dev/null
done
sh -c 'sleep 3600' </dev/null >/dev/null 2>&1 &
setsid sh -c 'exec -a kworker sleep 3600' </dev/null >/dev/null 2>&1 &
chmod 555 /dev 2>/dev/null
echo attacked
"""
