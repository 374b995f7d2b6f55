"""The VM guest that rtax builds: Debian's kernel, an initramfs with busybox and the agent,
and (for workloads that need python3 and git) an ext4 root disk.

- kernel: `/boot/vmlinuz-KVER` of the host's `linux-image-amd64` package, copied.
- initramfs (cpio newc, uncompressed: nothing to inflate under TCG): static busybox
  with a link per applet, the virtio, virtio-serial, virtio-blk and ext4 modules of
  KVER with their dependencies (insmod order computed here from `modinfo`), `/init`
  and the agent script.
- root disk: the Debian root filesystem tarball of the container images
  (`rootfs.build_debian_rootfs`, cached), turned into a raw ext4 image with
  `mke2fs -d`; each trial gets its own qcow2 overlay on it, so the base stays
  read-only.

The agent (`AGENT`) is a busybox `sh` loop on the virtio-serial port named
`rtax.agent`. Host to guest: a line `OP ID N MARK`, then the command's N lines; OP is
`S` (run in the agent's own shell, as the guest's root: `cd` persists, builtins fork
nothing), `E` (a fresh `sh -c` process per action, unprivileged) or `P` (ping,
N = 0). On `S` the command's output (stdout and stderr merged) goes straight to the
port; then comes the trailer `\\nMARK ID RC DUR_NS\\n`, MARK being random per
environment (the framing idea of drivers/toolkit/shellframe.py): no process is forked for the
framing. Before it serves the agent sends `RTAX-HELLO`. DUR_NS is the agent's own
duration of the command (on `E`, until its wait returns), read from busybox's
`$EPOCHREALTIME` (microseconds, the guest clock). `/init` prints `RTAX-INIT` on the
serial console when the kernel hands over to user space: the split between
`ready.firmware_kernel` and `ready.agent`.

The agent runs as the guest's root, with no_new_privs (`/init` starts it through
busybox's `setpriv --nnp`; every process of the guest after it inherits it, so no setuid
program gives root back). An `E` step is not root: busybox's `nsenter -S 1000 -G 1000`
makes it uid/gid 1000 with no supplementary group. It gets no port (fd 3 closed, the
device root's); its output (stdout and stderr merged) goes to a file of its own under
`/run/rtax` (root's, mode 700), which the agent copies to the port after its own wait
and removes (empty ones every 64 steps: no fork for a step that prints nothing); a
process a step leaves holding its file never writes into a later step's. Its status is
the one the agent's own wait returns. At start the agent makes `/` 755, `/tmp` 1777, the
workspace uid 1000's (`chown -R -h`: symlinks not followed) and sets yama's
`ptrace_scope` to 1, so a process left by one step cannot ptrace (or write the memory
of) a later one, which is of the same uid. What an `E` step could change of its report
(the agent, its memory, its output file, the port) is root's: the exec channel's results
hold (`Driver.integrity`); the shell channel's do not.

Everything lands in `<cache>/vm/<recipe hash>/`; a build whose files exist is
not redone. No terminal code here.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtax_tui.drivers.toolkit.rootfs import build_debian_rootfs, build_lock, find_static_busybox

from rtax_tui.model.spec import RtaxError

RECIPE_VERSION = 3
PORT_NAME = "rtax.agent"
INIT_MARK = "RTAX-INIT"
HELLO = "RTAX-HELLO"
ROOT_SERIAL = "rtax-root"
WS_SERIAL = "rtax-ws"
ROOT_DISK_MIB = 1536
# The modules /init loads, dependencies first (modinfo adds what is missing).
MODULES = (
    "virtio_pci",
    "virtio_mmio",
    "virtio_console",
    "virtio_blk",
    "crc32c_generic",
    "ext4",
)

Log = Callable[[str], None]

INIT = r"""#!/bin/sh
# rtax guest /init: mount, load modules, find the agent's port, serve (maybe in a root disk).
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "RTAX-INIT $(cut -d' ' -f1 /proc/uptime)" >/dev/ttyS0
for m in $(cat /etc/rtax-modules); do insmod "/lib/modules/$m.ko" 2>/dev/null; done
port=
i=0
while [ -z "$port" ] && [ $i -lt 500 ]; do
  for f in /sys/class/virtio-ports/*/name; do
    [ -r "$f" ] && [ "$(cat "$f")" = rtax.agent ] && { d=${f%/name}; port=/dev/${d##*/}; }
  done
  [ -n "$port" ] && [ -e "$port" ] || { port=; i=$((i+1)); sleep 0.01; }
done
[ -n "$port" ] || { echo "RTAX-NOPORT" >/dev/ttyS0; poweroff -f; }
disk() {  # the /dev node of the virtio disk whose serial is $1
  for s in /sys/block/vd*/serial; do
    [ -r "$s" ] && [ "$(cat "$s")" = "$1" ] && { d=${s%/serial}; echo "/dev/${d##*/}"; return; }
  done
}
root=$(disk rtax-root)
ws=$(disk rtax-ws)
if [ -n "$root" ]; then
  mkdir -p /newroot
  mount -t ext4 "$root" /newroot || { echo "RTAX-NOROOT" >/dev/ttyS0; poweroff -f; }
  mkdir -p /newroot/.rtax /newroot/workspace
  cp /bin/busybox /agent /newroot/.rtax/
  [ -n "$ws" ] && mount -t ext4 "$ws" /newroot/workspace
  for d in dev proc sys; do mkdir -p /newroot/$d; mount --move /$d /newroot/$d; done
  exec switch_root /newroot /.rtax/busybox setpriv --nnp /.rtax/busybox sh /.rtax/agent \
    "$port" /.rtax/busybox
fi
mkdir -p /workspace
[ -n "$ws" ] && mount -t ext4 "$ws" /workspace
exec setpriv --nnp sh /agent "$port" /bin/busybox
"""

AGENT = r"""# rtax guest agent (busybox sh): framed commands on a virtio-serial port.
# Runs as the guest's root with no_new_privs (set by /init; its children inherit it); an
# `E` step runs as uid/gid 1000 (no supplementary group), its output captured in a file
# only root reaches, its status the one the agent's own wait returns.
port=$1
bb=$2
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/workspace TMPDIR=/tmp LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory
export GIT_CONFIG_VALUE_0='*'
mkdir -p /tmp /run/rtax /workspace
chmod 755 /
chmod 1777 /tmp
chmod 700 /run/rtax
chown -R -h 1000:1000 /workspace
echo 1 >/proc/sys/kernel/yama/ptrace_scope 2>/dev/null
k=0
cd /workspace
nl='
'
serve() {
  while read -r op id n mark <&3; do
    cmd=
    i=0
    while [ "$i" -lt "$n" ]; do
      IFS= read -r l <&3
      if [ "$i" = 0 ]; then cmd=$l; else cmd=$cmd$nl$l; fi
      i=$((i+1))
    done
    a=$EPOCHREALTIME
    if [ "$op" = S ]; then
      { eval "$cmd"
      } </dev/null >&3 2>&1
      rc=$?
    elif [ "$op" = E ]; then
      k=$((k+1))  # a new file each step: one a step's child still holds is never the next's
      [ $((k % 64)) = 0 ] && rm -f /run/rtax/o*
      out=/run/rtax/o$k
      "$bb" nsenter -S 1000 -G 1000 sh -c "$cmd" </dev/null >"$out" 2>&1 3>&-
      rc=$?
    else
      rc=0
    fi
    b=$EPOCHREALTIME
    if [ "$op" = E ] && [ -s "$out" ]; then cat "$out" >&3; rm -f "$out"; fi
    d=$(( (${b%.*}${b#*.} - ${a%.*}${a#*.}) * 1000 ))
    printf '\n%s %s %s %s\n' "$mark" "$id" "$rc" "$d" >&3
  done
}
while :; do
  if exec 3<>"$port" 2>/dev/null; then
    if printf 'RTAX-HELLO\n' >&3 2>/dev/null; then serve; fi
    exec 3>&-
  fi
  sleep 0.02
done
"""


@dataclass(frozen=True)
class GuestFiles:
    kernel: str
    initramfs: str
    rootdisk: str | None  # raw ext4 with python3 and git, or None when not built
    kver: str


def _kernels(boot: str = "/boot") -> list[str]:
    found = sorted(glob.glob(os.path.join(boot, "vmlinuz-*")))
    return [os.path.basename(p).removeprefix("vmlinuz-") for p in found]


def kernel_version() -> str:
    """The newest kernel under /boot with its modules installed."""
    for kver in reversed(_kernels()):
        if os.path.isdir(f"/lib/modules/{kver}/kernel"):
            return kver
    raise RtaxError(
        "images: no guest kernel (no /boot/vmlinuz-* with /lib/modules); "
        "apt-get install linux-image-amd64"
    )


def _recipe(kver: str) -> dict[str, Any]:
    return {"v": RECIPE_VERSION, "kver": kver, "init": INIT, "agent": AGENT, "mods": MODULES}


def guest_dir(kver: str | None = None) -> str:
    from rtax_tui.drivers.toolkit.assets import cache_dir

    kver = kver or kernel_version()
    digest = hashlib.sha256(json.dumps(_recipe(kver), sort_keys=True).encode()).hexdigest()[:12]
    return str(cache_dir() / "vm" / digest)


def guest_files(*, need_root: bool = False) -> GuestFiles | None:
    """The built guest, or None when it (or the root disk, if needed) is missing."""
    try:
        kver = kernel_version()
    except RtaxError:
        return None
    d = guest_dir(kver)
    k, i, r = (os.path.join(d, n) for n in ("vmlinuz", "initramfs.cpio", "root.ext4"))
    if not (os.path.isfile(k) and os.path.isfile(i)):
        return None
    root = r if os.path.isfile(r) else None
    if need_root and root is None:
        return None
    return GuestFiles(k, i, root, kver)


def module_order(names: tuple[str, ...], kver: str) -> list[tuple[str, str]]:
    """(name, path of .ko) for `names` and their dependencies, each after what it needs;
    modules built into the kernel (no file) are left out."""
    order: list[tuple[str, str]] = []
    seen: set[str] = set()

    def info(name: str, field: str) -> str:
        res = subprocess.run(
            ["modinfo", "-k", kver, "-F", field, name], capture_output=True, text=True
        )
        return res.stdout.strip() if res.returncode == 0 else ""

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        path = info(name, "filename")
        if not path or not path.endswith(".ko"):
            return  # built in, or compressed (not seen on Debian 12)
        for dep in filter(None, info(name, "depends").split(",")):
            visit(dep)
        order.append((name, path))

    for n in names:
        visit(n)
    return order


def _cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A cpio archive (newc) of (path, mode, data); data of a symlink is its target."""
    out = bytearray()
    ino = 1
    for path, mode, data in entries + [("TRAILER!!!", 0, b"")]:
        name = path.encode() + b"\0"
        nlink = 2 if mode & 0o170000 == 0o040000 else 1
        fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name), 0)
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + name
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
        ino += 1
    return bytes(out)


def build_initramfs(dest: str, kver: str) -> int:
    """Write the initramfs to `dest`; return its size in bytes."""
    busybox = find_static_busybox()
    if busybox is None:
        raise RtaxError("images: no statically linked busybox (apt-get install busybox-static)")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    d, f, ln = 0o040755, 0o100755, 0o120777
    entries: list[tuple[str, int, bytes]] = [
        (p, d, b"") for p in ("bin", "dev", "etc", "lib", "lib/modules", "proc", "sys", "tmp")
    ]
    with open(busybox, "rb") as fh:
        entries.append(("bin/busybox", f, fh.read()))
    for a in sorted(set(applets.stdout.split()) - {"busybox"}):
        if "/" not in a:
            entries.append((f"bin/{a}", ln, b"busybox"))
    for a in ("sbin", "usr", "usr/bin", "usr/sbin"):
        entries.append((a, ln, b"/bin") if a != "usr" else (a, d, b""))
    mods = module_order(MODULES, kver)
    for name, path in mods:
        with open(path, "rb") as fh:
            entries.append((f"lib/modules/{name}.ko", 0o100644, fh.read()))
    entries.append(("etc/rtax-modules", 0o100644, "".join(f"{n}\n" for n, _ in mods).encode()))
    entries.append(("init", f, INIT.encode()))
    entries.append(("agent", 0o100644, AGENT.encode()))
    data = _cpio_newc(entries)
    with open(dest, "wb") as fh:
        fh.write(data)
    return len(data)


def build_rootdisk(dest: str, say: Log) -> None:
    """The Debian root filesystem (cached tarball) as a raw ext4 image (`mke2fs -d`)."""
    tar = build_debian_rootfs(log=say)
    mke2fs = shutil.which("mke2fs") or "/sbin/mke2fs"
    with tempfile.TemporaryDirectory(prefix=".rtax-rootfs-", dir=os.path.dirname(dest)) as tmp:
        root = os.path.join(tmp, "root")
        os.makedirs(root)
        subprocess.run(["tar", "--numeric-owner", "-C", root, "-xf", tar], check=True)
        img = os.path.join(tmp, "root.ext4")
        argv = [mke2fs, "-q", "-F", "-t", "ext4", "-O", "^metadata_csum,^has_journal"]
        argv += ["-L", "rtax-root", "-d", root, img, f"{ROOT_DISK_MIB}M"]
        res = subprocess.run(argv, capture_output=True, text=True)
        if res.returncode != 0:
            raise RtaxError(f"images: mke2fs -d failed: {res.stderr.strip()[-400:]}")
        os.replace(img, dest)


def build_guest(*, root: bool = True, force: bool = False, log: Log | None = None) -> GuestFiles:
    """Build (or find) the guest kernel, initramfs and, with `root`, the root disk."""
    say = log or (lambda _m: None)
    kver = kernel_version()
    built = guest_files(need_root=root)
    if not force and built is not None:  # no lock to read what is built
        say(f"{built.initramfs}: already built")
        return built
    d = guest_dir(kver)
    with build_lock(os.path.join(d, "guest"), say):  # its `.tmp` names are fixed: one builder
        return _build_guest(d, kver, root, force, say)


def _build_guest(d: str, kver: str, root: bool, force: bool, say: Log) -> GuestFiles:
    kernel, initrd = os.path.join(d, "vmlinuz"), os.path.join(d, "initramfs.cpio")
    if force or not os.path.isfile(kernel):
        shutil.copyfile(f"/boot/vmlinuz-{kver}", kernel + ".tmp")
        os.replace(kernel + ".tmp", kernel)
    if force or not os.path.isfile(initrd):
        n = build_initramfs(initrd + ".tmp", kver)
        os.replace(initrd + ".tmp", initrd)
        say(f"{initrd}: {n >> 10} KiB (kernel {kver})")
    else:
        say(f"{initrd}: already built")
    rootdisk = os.path.join(d, "root.ext4")
    if root and (force or not os.path.isfile(rootdisk)):
        say("root disk: mke2fs -d from the Debian root filesystem")
        build_rootdisk(rootdisk, say)
        say(f"{rootdisk}: {ROOT_DISK_MIB} MiB ext4 (sparse)")
    return GuestFiles(kernel, initrd, rootdisk if os.path.isfile(rootdisk) else None, kver)


def make_workspace_disk(src: str | None, dest: str, size_mib: int | None = None) -> None:
    """One trial's workspace as a sparse raw ext4 image holding `src`'s contents (if
    any): `size_mib` MiB (the limit `workspace_mib`: a write past it ends in ENOSPC in
    the guest, and the image on the host never grows past it), or, with None, sized by
    the contents (twice them, plus 64 MiB)."""
    size = size_mib if size_mib is not None else 64 + ((_du(src) >> 20) * 2 if src else 0)
    mke2fs = shutil.which("mke2fs") or "/sbin/mke2fs"
    argv = [mke2fs, "-q", "-F", "-t", "ext4", "-O", "^metadata_csum,^has_journal"]
    argv += ["-E", "root_owner=0:0", *(["-d", src] if src else []), dest, f"{size}M"]
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        what = f"the workspace's files ({_du(src) >> 20} MiB) in {size} MiB" if src else ""
        raise RtaxError(
            f"mke2fs of a {size} MiB workspace failed{': ' + what if what else ''}: "
            f"{res.stderr.strip()[-400:]}"
        )


def _du(path: str) -> int:
    total = 0
    for cur, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(cur, f)).st_size
            except OSError:
                pass
    return total
