"""The shell that `rtax probe` runs inside environments and on their hosts.

Every script is POSIX sh that works under busybox `ash` and Debian's `dash`, run as
`sh -c SCRIPT rtax-probe ARG...`, so the same step goes through every driver's own
channel. Lines that start with `@` are facts for the classifier (`engine.probe.classify`);
everything else is evidence for a human. python3 is used only where sh has no
tool (unix sockets, the `init_module` call, a fast memory hog), always behind
`command -v python3`, with a sh fallback or an explicit `@notool` (the check is
then `n/a`, never a guess).

Nothing here may harm the host, even on the `local` driver, where the
environment *is* the host: sysctl and sysfs writes put back the value just read;
device nodes are read (4 KiB), never written; the fork bomb is bounded and its
processes are killed once counted (and end by themselves in 60 s if the script is cut
short; torn down with their environment in any case); the module "loaded" is 64 bytes of text that
the kernel's loader refuses; remounts are tried only in a mount namespace that is
not the host's; every file written carries a random name and is removed.
"""

from __future__ import annotations

# The process name that every step's `sh -c` gets as $0.
ARG0 = "rtax-probe"

# What the environment is: its kernel (boot_id), mount namespace, user and workspace.
# `command -v python3` stands alone on its line: the docker driver and the VM drivers
# choose their Debian image (with python3) when a step names it as a word.
IDENTIFY = r"""
echo "@boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "@mntns=$(readlink /proc/self/ns/mnt 2>/dev/null)"
echo "@pidns=$(readlink /proc/self/ns/pid 2>/dev/null)"
echo "@uid=$(id -u 2>/dev/null)"
echo "@pwd=$(pwd)"
command -v python3 >/dev/null 2>&1 && echo "@python3=yes"
echo "kernel: $(uname -sr 2>/dev/null)"
"""

# A file that the probe planted on the host: visible? readable? (arg: its path)
FILE_SENTINEL = r"""
f=$1
[ -e "$f" ] && echo "@exists=$f"
cat -- "$f" 2>&1
echo
ls -ld -- "${f%/*}" 2>&1
"""

# assets_view: the named asset there, the cache sentinel (not named as an asset), and
# every entry beside the named asset. Args: named asset, sentinel path.
ASSETS_VIEW = r"""
a=$1; f=$2
[ -e "$a" ] && echo "@named"
[ -e "$f" ] && echo "@exists=$f"
cat -- "$f" 2>/dev/null
echo
for e in "${a%/*}"/* "${a%/*}"/.[!.]*; do [ -e "$e" ] && echo "@listed=${e##*/}"; done
ls -la -- "${a%/*}" 2>&1 | head -n 20
"""

# host_sinks: MiB written through each stream the host may keep: pid 1's stderr and (exec
# only: in the shell channel it is the framing's) stdout, then the step's own output
# (last: rtax keeps only its start, where the facts are); a write that blocks (a pipe
# nobody reads) is cut after 20 s. Args: MiB, channel, the host's boot id and pid
# namespace. In the host's own pid namespace (or where it is unknown) pid 1 is the host's
# init, not the environment's: its streams are never written (in a CI runner they are the
# runner's own log, which 320 MiB of NULs once made unreadable); `@skipped` says so.
SINKS = r"""
n=$1
fds=2; [ "$2" = exec ] && fds="1 2"
b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); ns=$(readlink /proc/self/ns/pid 2>/dev/null)
if [ -z "$4" ] || [ "$4" = - ] || { [ "$b" = "$3" ] && [ -n "$ns" ] && [ "$ns" = "$4" ]; }; then
  echo "@skipped=pid 1's streams (the host's own init)"; fds=""
fi
chan=$(readlink /proc/1/fd/1 2>/dev/null)
for fd in $fds; do
  if [ "$2" != exec ] && [ "$(readlink /proc/1/fd/$fd 2>/dev/null)" = "$chan" ]; then
    echo "@stream=pid 1 fd $fd (the channel's own stream)"
  elif [ -w /proc/1/fd/$fd ]; then
    timeout 20 sh -c 'head -c "$(($1 * 1048576))" /dev/zero >"/proc/1/fd/$2"' s "$n" "$fd" \
      2>/dev/null
    echo "@stream=pid 1 fd $fd"
  fi
done
echo "@stream=own stdout"
echo "@done"
head -c "$((n * 1048576))" /dev/zero | tr '\0' x
echo
"""

# /etc/shadow: its md5 (compared with the host's, never printed as evidence).
SHADOW = r"""
if s=$(md5sum 2>/dev/null </etc/shadow); then echo "@md5=${s%% *}"; echo "/etc/shadow: readable";
else echo "/etc/shadow: cannot read it"; fi
ls -l /etc/shadow 2>&1
"""

PY_UNIX = r"""
import socket, sys
path, req = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(path)
except OSError as e:
    print(path + ": connect: " + str(e))
    raise SystemExit
print("@connected=" + path)
try:
    if req:
        s.sendall(req.encode().decode("unicode_escape").encode("latin-1"))
    else:
        s.settimeout(2)
    data = s.recv(400).decode("latin-1").replace("\r", "")
    print(path + ": answered: " + " | ".join(data.splitlines()[:3])[:200])
except OSError as e:
    print(path + ": " + (str(e) or type(e).__name__))
"""

# Unix sockets (args: a request sent after connecting, or "", then the paths).
UNIX_SOCKETS = (
    r"""
req=$1; shift
for s in "$@"; do
  if [ ! -S "$s" ]; then echo "$s: not visible"; continue; fi
  echo "$s: visible"
  if command -v python3 >/dev/null 2>&1; then python3 -c "$PY" "$s" "$req" 2>&1
  else echo "@notool=$s"; fi
done
"""
).replace('"$PY"', "'" + PY_UNIX.replace("'", "'\"'\"'") + "'")

PY_TCP = r"""
import socket, sys
try:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    c.settimeout(3)
    print("connected; received: " + c.recv(200).decode("latin-1").strip())
except OSError as e:
    print("127.0.0.1:" + sys.argv[1] + ": " + (str(e) or type(e).__name__))
"""

# A TCP listener on the host's loopback (arg: its port).
LOOPBACK_TCP = (
    r"""
p=$1
if command -v python3 >/dev/null 2>&1; then python3 -c "$PY" "$p" 2>&1
elif command -v nc >/dev/null 2>&1; then nc -w 3 127.0.0.1 "$p" </dev/null 2>&1; echo "nc: rc $?"
else echo "@notool"; fi
"""
).replace('"$PY"', "'" + PY_TCP.replace("'", "'\"'\"'") + "'")

# Whether the environment is in the host's own mount namespace on the host's kernel
# (args 1-2: the host's boot_id and mount namespace): there, nothing is remounted or
# moved, since that would change the host itself.
SAME_NS = r"""
samens=0
[ "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" = "$1" ] && \
  [ "$(readlink /proc/self/ns/mnt 2>/dev/null)" = "$2" ] && samens=1
shift 2
"""

# Write a file named $1 into host directories (the list is fixed by the probe: `/`,
# `/root`, `/etc`, `/usr`, ... and rtax's cache): directly, else (outside the host's
# mount namespace only) after remounting each read-write. Args: SAME_NS's, name, dirs...
REMOUNT = (
    SAME_NS
    + r"""
name=$1; shift
here=$(pwd)
# printf, not `:`: a failed redirection of a special built-in ends a POSIX shell
wr() { { printf '' >"$1/$name"; } 2>/dev/null && [ -e "$1/$name" ]; }
seen=" "
for d in "$@"; do
  case $d in "$here"|"$here"/*) continue ;; esac
  case $seen in *" $d "*) continue ;; esac
  seen="$seen$d "
  [ -d "$d" ] || continue
  if wr "$d"; then echo "@wrote=$d"; continue; fi
  [ "$samens" = 1 ] && continue
  if mount -o remount,rw,bind "$d" 2>/dev/null || mount -o remount,rw "$d" 2>/dev/null; then
    echo "$d: remounted read-write"
    if wr "$d"; then echo "@wrote=$d"; else echo "$d: still not writable"; fi
  fi
done
[ "$samens" = 1 ] && echo "the host's own mount namespace: no remount tried (it changes the host)"
echo "tried:$seen"
"""
)

# mknod of the host's block devices, then read 4 KiB at offset 1 KiB (args: MAJ:MIN:NAME...)
BLOCK_DEVICES = r"""
for spec in "$@"; do
  maj=${spec%%:*}; rest=${spec#*:}; min=${rest%%:*}; name=${rest#*:}
  o="./.rtax-probe-blk-$name"
  for n in "$o" "/tmp/.rtax-probe-blk-$name" "/dev/$name"; do
    if [ "$n" != "/dev/$name" ]; then
      rm -f "$n"
      if e=$(mknod "$n" b "$maj" "$min" 2>&1); then echo "@mknod=$maj:$min at $n";
      else echo "mknod $maj:$min at $n: ${e:-failed}"; continue; fi
    elif [ ! -b "$n" ]; then continue; fi
    if dd if="$n" of="$o.bytes" bs=1024 skip=1 count=4 2>"$o.err"; then
      sz=$(wc -c <"$o.bytes" | tr -d ' '); md=$(md5sum <"$o.bytes")
      echo "@read=$name:$sz:${md%% *}"; echo "read $n: $sz bytes"
    else echo "read $n: $(tail -n 1 "$o.err")"; fi
    [ "$n" = "/dev/$name" ] || rm -f "$n"
    rm -f "$o.bytes" "$o.err"
    break
  done
done
"""

# A kernel setting written back with the value just read: /proc/sys, then /sys.
# Outside the host's mount namespace a failed write is retried after a remount.
PROC_SYS = (
    SAME_NS
    + r"""
f=/proc/sys/fs/file-max
v=$(cat "$f" 2>&1) || { echo "$f: cannot read: $v"; exit 0; }
echo "$f = $v"
w() { { printf '%s\n' "$v" >"$f"; } 2>&1; }
if e=$(w); then echo "@wrote=$f (the value it had)"; exit 0; fi
echo "write: $e"
[ "$samens" = 1 ] && exit 0
if mount -o remount,rw /proc/sys 2>/dev/null || umount /proc/sys 2>/dev/null; then
  echo "/proc/sys: remounted (or unmounted) read-write"
  if e=$(w); then echo "@wrote=$f (the value it had)"; else echo "write: $e"; fi
fi
"""
)

SYS_WRITE = (
    SAME_NS
    + r"""
S=/sys
if [ ! -d /sys/kernel ]; then  # no sysfs in view: try to mount one, as an attacker would
  S=./.rtax-probe-sysfs
  mkdir -p "$S" 2>/dev/null
  if e=$(mount -t sysfs sysfs "$S" 2>&1); then
    echo "mounted a sysfs at $S"
    trap 'umount "$S" 2>/dev/null; rmdir "$S" 2>/dev/null' EXIT
  else
    rmdir "$S" 2>/dev/null
    echo "@nosysfs (no /sys inside; mounting one was refused: $e)"
    exit 0
  fi
fi
f=
for c in $S/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan \
         $S/module/printk/parameters/time $S/block/*/queue/read_ahead_kb \
         $S/kernel/mm/ksm/pages_to_scan; do
  [ -r "$c" ] && v=$(cat "$c" 2>/dev/null) && [ -n "$v" ] && { f=$c; break; }
done
[ -n "$f" ] || { echo "@nofile (no known sysfs setting is readable)"; exit 0; }
echo "$f = $v"
w() { { printf '%s\n' "$v" >"$f"; } 2>&1; }
if e=$(w); then echo "@wrote=$f (the value it had)"; exit 0; fi
echo "write: $e"
[ "$samens" = 1 ] && exit 0
if mount -o remount,rw /sys 2>/dev/null; then
  echo "/sys: remounted read-write"
  if e=$(w); then echo "@wrote=$f (the value it had)"; else echo "write: $e"; fi
fi
"""
)

PY_INIT_MODULE = r"""
import ctypes, errno, os
nr = {"x86_64": 175, "aarch64": 105}.get(os.uname().machine)
if nr is None:
    print("@notool (no init_module syscall number for " + os.uname().machine + ")")
    raise SystemExit
libc = ctypes.CDLL(None, use_errno=True)
img = b"rtax-probe: this is not a kernel module, the loader must refuse it.\n" * 2
r = libc.syscall(nr, img, len(img), b"")
e = ctypes.get_errno() if r else 0
print("init_module: " + (os.strerror(e) if r else "returned 0"))
print("@errno=" + (errno.errorcode.get(e, str(e)) if r else "0"))
"""

# init_module with 136 bytes of text: EPERM without the right to load modules, else
# the loader itself refuses the image (ENOEXEC): nothing is ever loaded.
MODULE = (
    r"""
if command -v python3 >/dev/null 2>&1; then python3 -c "$PY" 2>&1
elif command -v insmod >/dev/null 2>&1; then
  printf 'rtax-probe: this is not a kernel module\n' >./.rtax-probe-mod.ko
  insmod ./.rtax-probe-mod.ko 2>&1; echo "insmod: rc $?"; echo "@insmod"
  rm -f ./.rtax-probe-mod.ko
else echo "@notool"; fi
"""
).replace('"$PY"', "'" + PY_INIT_MODULE.replace("'", "'\"'\"'") + "'")

# Leave the environment's cgroup: write our own pid into the root of every visible
# hierarchy (mounting one where none is visible). In the host's own mount namespace
# (samens = 1) nothing is moved: that would move a process of the host's; writability
# is reported instead.
CGROUP = (
    SAME_NS
    + r"""
echo "before: $(tr '\n' ' ' </proc/self/cgroup)"
moved=
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do
  [ -f "$f" ] || continue
  if [ "$samens" = 1 ]; then [ -w "$f" ] && echo "@writable=$f"; continue; fi
  if { echo $$ >"$f"; } 2>/dev/null; then echo "@moved=$f"; moved=1; fi
done
# where the visible ones refused, a hierarchy mounted afresh (its root is the host's)
if [ -z "$moved" ] && [ "$samens" != 1 ]; then
  d=./.rtax-probe-cg
  mkdir -p "$d"
  for t in "cgroup2 none" "cgroup -o pids none" "cgroup -o memory none"; do
    # shellcheck disable=SC2086
    if mount -t $t "$d" 2>/dev/null; then
      echo "mounted a cgroup hierarchy ($t) at $d"
      { echo $$ >"$d/cgroup.procs"; } 2>/dev/null && echo "@moved=$d/cgroup.procs (fresh mount)"
      umount "$d" 2>/dev/null
      break
    fi
  done
  rmdir "$d" 2>/dev/null
fi
echo "after: $(tr '\n' ' ' </proc/self/cgroup)"
"""
)

# A bounded fork bomb: up to $1 background `sleep $2`, each pid noted, counted and
# killed with builtins only (no fork is needed to report, nor to end them, once forks
# fail). They are killed as soon as they are counted, so none ends before the last fork
# however slow forks are (gVisor's ptrace platform: about 20 ms a fork); `sleep $2` only
# bounds them if the script is cut short.
FORK_BOMB = r"""
n=$1; s=${2:-60}; c=./.rtax-probe-forks; e=./.rtax-probe-forkerr
: >"$c"
( i=0
  while [ "$i" -lt "$n" ]; do
    sleep "$s" </dev/null >/dev/null 2>&1 & i=$((i+1)); echo "$!" >>"$c"
  done
) 2>"$e"
k=0; while read -r p; do k=$((k+1)); done <"$c"
echo "@spawned=$k"; echo "started $k of $n processes"
if read -r err <"$e"; then echo "fork refused: $err"; fi
while read -r p; do kill "$p" 2>/dev/null; done <"$c"
rm -f "$c" "$e"
"""

# A memory hog of $1 MiB, touched page by page.
MEMORY_HOG = r"""
mib=$1
echo "allocating $mib MiB"
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import sys; n = int(sys.argv[1]); b = b"x" * (n << 20); print("@allocated=%d" % n)' \
    "$mib"
  echo "rc $?"
else
  x=$(dd if=/dev/zero bs=1048576 count="$mib" 2>/dev/null | tr '\0' x)
  echo "@allocated=$(( ${#x} >> 20 ))"
fi
"""

# Host processes: rtax's own pid ($1, may be empty) and the probe's host process ($2),
# then every visible command line, looking for the host process's random tag.
PROCESSES_SEE = r"""
for p in $1 $2; do
  if [ -r "/proc/$p/cmdline" ]; then echo "pid $p: $(tr '\0' ' ' </proc/$p/cmdline | cut -c1-120)";
  else echo "pid $p: not visible"; fi
done
echo "processes visible: $(ls -d /proc/[0-9]* 2>/dev/null | wc -l)"
for d in /proc/[0-9]*; do tr '\0' ' ' <"$d/cmdline"; echo; done 2>/dev/null \
  | grep -o 'rtax-probe-proc-[0-9a-f][0-9a-f]*' | head -n 2
"""

PROCESSES_SIGNAL = r"""
if [ -n "$1" ]; then
  if kill -0 "$1" 2>/dev/null; then echo "kill -0 $1 (rtax's pid): delivered"
  else echo "kill -0 $1 (rtax's pid): refused, or no such process"; fi
fi
if kill -CONT "$2" 2>/dev/null; then echo "kill -CONT $2 (the probe's host process): delivered"
else echo "kill -CONT $2: refused, or no such process"; fi
"""

PY_VSOCK = r"""
import socket
try:
    s = socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
except OSError as e:
    print("socket(AF_VSOCK): " + str(e))
    raise SystemExit
print("@made")
try:
    s.bind((0xFFFFFFFF, 0xFFFFFFFF))  # any CID, any port
    print("@bound=%d" % s.getsockname()[1])
except OSError as e:
    print("bind: " + str(e))
"""

# A vsock socket: made, then bound to a port of whatever port space the kernel has.
VSOCK = (
    r"""
if command -v python3 >/dev/null 2>&1; then python3 -c "$PY" 2>&1
else echo "@notool"; fi
"""
).replace('"$PY"', "'" + PY_VSOCK.replace("'", "'\"'\"'") + "'")

PY_PROCESS_VM = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
token = sys.argv[1].encode()
buf = ctypes.create_string_buffer(token, len(token))
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # the sibling: holds the token in its memory, and a pipe open
    os.close(r)
    os.read(os.open("/dev/zero", os.O_RDONLY), 1)
    import time
    time.sleep(10)
    os._exit(0)
os.close(w)
def err():
    e = ctypes.get_errno()
    return errno.errorcode.get(e, str(e))
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
got = ctypes.create_string_buffer(len(token))
local = Iov(ctypes.cast(got, ctypes.c_void_p), len(token))
remote = Iov(ctypes.cast(buf, ctypes.c_void_p), len(token))
nr = {"x86_64": (310, 434, 438), "aarch64": (270, 434, 438)}.get(os.uname().machine)
try:
    if nr is None:
        print("@notool (no syscall numbers for " + os.uname().machine + ")")
        raise SystemExit
    n = libc.syscall(nr[0], pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n > 0:
        print("@read=" + got.raw[:n].decode(errors="replace"))
    print("process_vm_readv: " + ("read %d bytes" % n if n >= 0 else err()))
    fd = libc.syscall(nr[1], pid, 0)
    if fd < 0:
        print("pidfd_open: " + err())
    else:
        t = libc.syscall(nr[2], fd, w, 0)
        print("pidfd_getfd: " + ("took a descriptor" if t >= 0 else err()))
        if t >= 0:
            print("@took")
finally:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""

# Another process of the environment (a child: the kernel's most lenient case) read with
# process_vm_readv, and a descriptor taken from it with pidfd_getfd (arg: the token).
PROCESS_VM = (
    r"""
if command -v python3 >/dev/null 2>&1; then python3 -c "$PY" "$1" 2>&1
else echo "@notool"; fi
"""
).replace('"$PY"', "'" + PY_PROCESS_VM.replace("'", "'\"'\"'") + "'")

# The host's boot command line: its md5 and size (compared with the host's own).
PROC_CMDLINE = r"""
if c=$(md5sum 2>/dev/null </proc/cmdline); then
  echo "@md5=${c%% *}"; echo "/proc/cmdline: $(wc -c </proc/cmdline | tr -d ' ') bytes"
else echo "/proc/cmdline: cannot read it"; fi
"""

# What /proc tells of paths: the mount table (sources, targets and options), the
# cgroup paths, the environment variables and command line of the first process.
# The host looks in it for its own paths (engine.probe.classify: `host_paths`).
HOST_PATHS = r"""
for f in /proc/self/mountinfo /proc/self/cgroup; do
  echo "== $f"; cat "$f" 2>&1
done
for f in /proc/self/environ /proc/1/environ /proc/1/cmdline; do
  echo "== $f"; tr '\0' '\n' <"$f" 2>&1
done
"""

# Files written by one environment: its workspace marker (for a second live
# environment) and, for the next fresh one, a file in the workspace and in /tmp.
WRITE_MARKS = r"""
printf '%s\n' "$2" >"./$1" && echo "wrote ./$1 in $(pwd)"
printf '%s\n' "$4" >"./$3" && echo "wrote ./$3"
printf '%s\n' "$4" >"/tmp/$3" && echo "wrote /tmp/$3"
"""

READ_FILE = r"""
cat -- "./$1" 2>&1
"""

# Another live environment's marker (args: its host path, its own view of its
# workspace, the marker's name): at those paths, in /tmp, or through /proc/*/cwd.
OTHER_ENV = r"""
m=$3
for d in "$1" "$2" /tmp /var/tmp; do
  [ -n "$d" ] && [ -e "$d/$m" ] && { echo "@found=$d/$m"; cat -- "$d/$m"; }
done 2>/dev/null
for p in /proc/[0-9]*; do
  [ -e "$p/cwd/$m" ] && { echo "@found=$p/cwd/$m"; cat -- "$p/cwd/$m"; break; }
done 2>/dev/null
echo "looked in: $1 $2 /tmp /var/tmp /proc/*/cwd"
"""

# An earlier environment's files (arg: their name), in the workspace and /tmp.
FRESH = r"""
for f in "./$1" "/tmp/$1" "${TMPDIR:-/tmp}/$1"; do
  [ -e "$f" ] && { echo "@found=$f"; cat -- "$f"; }
done
echo "looked for $1 in ./ /tmp ${TMPDIR:-/tmp}"
"""

# The environment's own marker (args: its name, its token), for the checks that must
# tell a later action in the same environment from one that ran somewhere else.
WRITE_MARK = r"""
printf '%s\n' "$2" >"./$1" && echo "wrote ./$1 in $(pwd)"
"""

# Kills the environment's pid 1, then every process it can signal (`kill -9 -1`).
# Never in the host's own pid namespace (args: the host's boot_id and pid namespace):
# there it would kill the host's processes; `@samepidns` says so and nothing is sent
# (nor where the host's namespace is unknown: `@nohostns`).
INIT_KILL = r"""
if [ -z "$2" ] || [ "$2" = - ]; then
  echo "@nohostns"; echo "the host's pid namespace is unknown: not sent"; exit 0
fi
b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); ns=$(readlink /proc/self/ns/pid 2>/dev/null)
if [ "$b" = "$1" ] && [ -n "$ns" ] && [ "$ns" = "$2" ]; then
  echo "@samepidns=$ns"; echo "the host's own pid namespace: not sent"; exit 0
fi
echo "pid 1: $(tr '\0' ' ' </proc/1/cmdline 2>/dev/null | cut -c1-80)"
kill -9 1 2>&1 && echo "kill -9 1: sent"
kill -9 -1 2>&1 && echo "kill -9 -1: sent"
"""

# A directory chain at least $1 deep in the working directory and in /tmp, under a name
# of ours ($2): 200 levels of `dddd/` a call, nested by renaming the chain so far into
# a new one's deepest level, so no path a call is given reaches PATH_MAX while the
# deepest absolute path does (1,200 levels: over 6,000 bytes); few processes.
DEEP_TREE = r"""
n=$1; top=$(pwd); seg=""; k=0
while [ "$k" -lt 200 ]; do seg="${seg}dddd/"; k=$((k+1)); done
for base in "$top" /tmp; do
  ( cd "$base" 2>/dev/null && mkdir "$2" && cd "$2" && mkdir -p "t/$seg" || exit 0
    i=200
    while [ "$i" -lt "$n" ] && mkdir -p "n/$seg" && mv t "n/${seg}t" && mv n t; do
      i=$((i+201))
    done
    echo "@made=$base:$i" )
done
"""

# Fills the workspace with $1 MiB (past its limit) in ./$2, and says how much it
# wrote and why it stopped; the file stays until FILL_REMOVE (the host measures first).
WORKSPACE_FILL = r"""
f=./$2
err=$(dd if=/dev/zero of="$f" bs=1048576 count="$1" 2>&1); rc=$?
sz=$(wc -c <"$f" 2>/dev/null || echo 0)
echo "@wrote_mib=$((sz >> 20))"
echo "dd rc $rc: $(printf '%s\n' "$err" | head -n 1)"
case $err in *"No space left"*) echo "@enospc";; esac
case $err in *"quota exceeded"*) echo "@edquot";; esac
"""

FILL_REMOVE = r"""
rm -f -- "./$1" && echo removed
"""

# The free space (MiB) of the filesystem holding $1, on the host.
# The KiB held under each existing directory given (one filesystem each). Args: dirs.
HOST_DU = r"""
for d in "$@"; do
  [ -d "$d" ] && du -skx -- "$d" 2>/dev/null | awk '{ print "@du=" $2 "=" $1 }'
done
true
"""

# rtax's cache without the stores its builders fill (BUILT_STORES: shell patterns of
# top-level names): one figure, `@du=<cache>=<KiB>`. Args: the cache, then the patterns.
HOST_DU_CACHE = r"""
cache=$1; shift
[ -d "$cache" ] || exit 0
kib=0
for e in "$cache"/* "$cache"/.[!.]* "$cache"/..?*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  name=${e##*/}; built=
  for pat in "$@"; do case $name in $pat) built=1 ;; esac; done
  [ -n "$built" ] && continue
  k=$(du -skx -- "$e" 2>/dev/null | awk 'NR == 1 { print $1 }')
  kib=$((kib + ${k:-0}))
done
echo "@du=$cache=$kib"
"""

HOST_FREE = r"""
df -Pk -- "$1" 2>/dev/null | awk 'NR == 2 { print "@free_mib=" int($4 / 1024); print "@fs=" $6 }'
"""

# -- on the host -------------------------------------------------------------------

# Plants the sentinels and reports what the host has. Args: hex, tmp dir ("" = the
# host's), cache dir ("" = rtax's cache there). The three sentinel tokens come on
# stdin, so they never appear in a command line.
HOST_PLANT = r"""
hex=$1; tmp=${2:-${TMPDIR:-/tmp}}; cache=${3:-${RTAX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rtax}}
case $tmp in /*) ;; *) tmp=$PWD/$tmp ;; esac  # the reaper is handed absolute paths only
case $cache in /*) ;; *) cache=$PWD/$cache ;; esac
read -r t_tmp t_cache t_root t_blk t_usr
plant() { mkdir -m 0755 "$1" && printf '%s\n' "$3" >"$1/$2" && chmod 0644 "$1/$2"; }
plant "$tmp/rtax-probe-$hex" sentinel "$t_tmp" && echo "@tmp_sentinel=$tmp/rtax-probe-$hex/sentinel"
mkdir -p "$cache" && plant "$cache/probe-$hex" sentinel "$t_cache" \
  && echo "@cache_sentinel=$cache/probe-$hex/sentinel"
plant "/root/.rtax-probe-$hex" sentinel "$t_root" 2>/dev/null \
  && echo "@root_sentinel=/root/.rtax-probe-$hex/sentinel"
[ -d /usr/local ] && plant "/usr/local/.rtax-probe-$hex" sentinel "$t_usr" 2>/dev/null \
  && echo "@usr_local_sentinel=/usr/local/.rtax-probe-$hex/sentinel"
if c=$(md5sum 2>/dev/null </proc/cmdline); then echo "@cmdline=${c%% *}"; fi
plant "$tmp/rtax-probe-$hex/links" keep "$t_tmp" && echo "@links_dir=$tmp/rtax-probe-$hex/links"
mkdir -m 0755 "$tmp/rtax-probe-sock-$hex" && echo "@sock_dir=$tmp/rtax-probe-sock-$hex"
echo "@cache=$cache"
echo "@tmp=$tmp"
for kv in docker:/run/docker.sock docker:/var/run/docker.sock \
          podman:/run/rtax-podman/podman.sock podman:/run/podman/podman.sock \
          libvirt:/run/libvirt/libvirt-sock libvirt:/run/libvirt/libvirt-sock-ro \
          libvirt:/run/libvirt/virtqemud-sock libvirt:/var/run/libvirt/libvirt-sock; do
  p=${kv#*:}; [ -S "$p" ] && echo "@socket=${kv%%:*}:$p"
done
if s=$(md5sum 2>/dev/null </etc/shadow); then echo "@shadow=${s%% *}"; fi
# a block device that holds a token: a loop device on a file of ours (root only)
loop=
if [ "$(id -u)" = 0 ] && command -v losetup >/dev/null 2>&1 \
   && mkdir -m 0700 "$tmp/rtax-probe-blk-$hex"; then
  img="$tmp/rtax-probe-blk-$hex/disk.img"
  { head -c 1024 /dev/zero; printf '%s\n' "$t_blk"; head -c 8192 /dev/zero; } >"$img"
  if loop=$(losetup -f --show "$img" 2>/dev/null) && [ -r "/sys/block/${loop##*/}/dev" ]; then
    echo "@loop=$loop"
  else loop=; fi
fi
{ [ -n "$loop" ] && echo "$(cat "/sys/block/${loop##*/}/dev"):${loop##*/}"
  awk 'NR > 2 && NF == 4 && $4 !~ /^(loop|ram|zram|sr|nbd)/ { print $1 ":" $2 ":" $4 }' \
    /proc/partitions 2>/dev/null | head -n 2; } | while read -r spec; do
  name=${spec##*:}
  if b=$(dd if="/dev/$name" bs=1024 skip=1 count=4 2>/dev/null | md5sum) && \
     n=$(dd if="/dev/$name" bs=1024 skip=1 count=4 2>/dev/null | wc -c) && [ "$n" -gt 0 ]; then
    echo "@blockdev=$spec:$n:${b%% *}"
  else echo "@blockdev=$spec:0:"; fi
done
awk '/^MemAvailable:/ { print "@memavail_kib=" $2 }' /proc/meminfo
command -v python3 >/dev/null 2>&1 && echo "@python3=$(command -v python3)"
"""

# Which of the paths a step wrote ($1 = name, then dirs) exist on the host; removes them.
HOST_WROTE = r"""
name=$1; shift
for d in "$@"; do
  if [ -e "$d/$name" ]; then echo "$d"; rm -f -- "$d/$name"; fi
done
"""

# Removes what was planted (args: hex, tmp, cache, loop device or "", extra files...).
# Every loop device on the probe's image is detached, the one the plant named and any it
# attached without saying so (a plant cut short); exit 0 only when no device is left on
# the image and every path went: the caller keeps the paths with the reaper otherwise.
HOST_CLEANUP = r"""
hex=$1; tmp=$2; cache=$3; loop=$4; shift 4
img="$tmp/rtax-probe-blk-$hex/disk.img"
on_img() { [ -e "$img" ] && losetup -n -O NAME -j "$img" 2>/dev/null; }
for d in $loop $(on_img); do losetup -d "$d" 2>/dev/null; done
rc=0
[ -n "$(on_img)" ] && rc=1
rm -rf -- "$tmp/rtax-probe-$hex" "$tmp/rtax-probe-sock-$hex" "$tmp/rtax-probe-blk-$hex" \
  "$cache/probe-$hex" "/root/.rtax-probe-$hex" "/usr/local/.rtax-probe-$hex" || rc=1
rm -rf -- "$@" || rc=1
exit $rc
"""

# The probe's own host process: a unix socket and a loopback TCP listener that log
# every connection, and a SIGCONT handler that logs the signal. Its command line
# carries a random tag (argv[2]) for the process-visibility check; the token it sends
# to clients comes on stdin. It ends when its stdin closes.
LISTENER = r"""# rtax probe: the host's listener
import os, select, signal, socket, sys
path = sys.argv[1]
hello = b""
while not hello.endswith(b"\n"):
    chunk = os.read(0, 256)
    if not chunk:
        raise SystemExit
    hello += chunk
def say(m):
    os.write(1, (m + "\n").encode())
signal.signal(signal.SIGCONT, lambda s, f: say("signal CONT"))
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 0))
t.listen(64)
u = socket.socket(socket.AF_UNIX)
u.bind(path)
os.chmod(path, 0o777)
u.listen(64)
say("ready %d %d" % (t.getsockname()[1], os.getpid()))
names = {t: "tcp", u: "unix"}
try:
    while True:
        ready = select.select([t, u, 0], [], [])[0]
        if 0 in ready and not os.read(0, 4096):
            break
        for s in (t, u):
            if s in ready:
                try:  # a client gone before the accept must not end the listener
                    c = s.accept()[0]
                except OSError:
                    say("conn " + names[s])
                    continue
                say("conn " + names[s])
                try:
                    c.sendall(hello)
                except OSError:
                    pass
                c.close()
finally:
    os.unlink(path)
"""


# -- result_integrity: earlier steps try to make a later step's failure read as a success.
# Run in the persistent shell itself on the shell channel (an `eval` step), as `sh -c`
# on exec. Functions over the tools a frame might use, printing a frame whose sentinel
# is taken from the frame's own arguments ($2 of a `printf FORMAT SENTINEL STATUS`
# frame); an alias; set -v, which echoes every line the shell reads (a frame's
# sentinel included) to the shell's stderr.
FORGE_FUNCTIONS = r"""
printf() { command printf '\n%s 0\n' "$2"; }
echo() { command printf '\n%s 0\n' "$2"; }
read() { return 0; }
alias read=true
set -v
:
"""
# The session's names (issue 34, H7): functions and aliases named like the checking
# steps' programs, a `PATH` that puts a fake `sh`, `env`, `false` and `python3` first,
# traps that set `$1` and `-v` on a signal a background process keeps sending for a
# few seconds (WINCH: ignored by default, so the shell outlives the traps' reset), and
# `set -e` and `set -x` left on.
FORGE_SESSION = r"""d=$(mktemp -d)
for c in sh env false python3; do printf '#!/bin/sh\nexit 0\n' >"$d/$c"; chmod +x "$d/$c"; done
export PATH="$d:$PATH"
false() { return 0; }
sh() { return 0; }
env() { return 0; }
alias false=true sh=true env=true /usr/bin/env=true /bin/sh=true 2>/dev/null
trap 'set -- 0; set -v' WINCH
( i=0; while [ $i -lt 20000 ] && kill -s WINCH $$ 2>/dev/null; do i=$((i+1)); done ) \
  </dev/null >/dev/null 2>&1 &
set -ex
:"""
# A child tries to open, for writing, the memory of its parent: the process that reports
# the step's result (the persistent shell on the shell channel; rtax itself for an
# unsandboxed exec; nothing, pid 0, where the parent is outside the environment).
FORGE_MEMORY = r"""p=$PPID
if [ "$p" -gt 0 ] 2>/dev/null && (exec 3<>/proc/$p/mem) 2>/dev/null; then
  echo "@memwritable=$p"
fi
echo looked"""
# A background process that keeps printing frames with every sentinel-looking word it
# can read (other processes' command lines and environments, /tmp), for 20 seconds.
FORGE_BACKGROUND = r"""( i=0; while [ $i -lt 200 ]; do i=$((i+1))
  for s in $(cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ /tmp/* 2>/dev/null \
      | tr -c 'A-Za-z0-9_' '\n' | grep '^__RTAX_' | sort -u); do
    command printf '\n%s 0\n' "$s"; command printf '\n%s 0 1\n' "$s"
  done; sleep 0.1; done ) </dev/null 2>/dev/null &
:"""
