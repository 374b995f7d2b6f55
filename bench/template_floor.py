"""The floor of "a sandbox from a template" (issue 42), against bubblewrap and unshare(1).

    .venv/bin/python bench/template_floor.py [--rounds 200]

Builds bench/template_floor.c with the C compiler and runs it as root. It starts one
template process per run: the sandbox's uid behind its own user namespace, a mount
namespace with the read-only view made once (a tmpfs root with /usr and stage's curated
/etc bound read-only, the /bin, /lib, /lib64, /sbin links, five /dev nodes), stage's
seccomp program read once. Each environment is a fork of it that unshares mount, pid,
IPC, UTS, network and cgroup namespaces; its pid 1 mounts its own /proc, /tmp and
/workspace, pivots into the view, drops every capability, sets no_new_privs, loads the
filter and execs `true`. Per round, in turn, each timed by the C program's monotonic
clock from the request to the exit:

- bare bubblewrap with stage's namespaces (bench/limits.py's floor) and `unshare(1)` of
  the same namespaces, spawned and waited for;
- the template's environment without a cgroup;
- the same with a cgroup: a directory made in each v1 hierarchy rtax uses (or v2's
  one), the fork moved into it by the host-root parent before it unshares (so its cgroup
  namespace is rooted there), removed after it exited. The move alone is printed too;
- the same, the cgroup made and the fork moved before the clock starts ("spare": a fork
  that waits in its cgroup until it is told to go, made while the last trial ran);
- the first again, in a user namespace of its own per environment (root = the template's
  root; the template's mounts then locked inside), the boundary question's answer.

Once, before the rounds: may an environment's pid 1, before it drops its capabilities,
remount the template's root file system (one superblock, every environment's)? Asked
with read-only, which it already is, so nothing changes; printed allowed or refused,
in the template's user namespace and in one of its own.

Rounds are 20 ms apart, as creates are: a cgroup move after a quiet spell waits for an
RCU grace period (hosts/cgroup_prime.py). What it leaves out of stage's sandbox: the
loopback interface brought up, the masks over /proc files and /usr/local, /dev's pts
and shm, the init and the limits' writes. Needs root, cc, bwrap, unshare and one stage
run on this machine before (for the filter and the curated /etc). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from limits import UNSHARE, _bwrap_floor  # noqa: E402
from rtax_tui.drivers.toolkit.sandbox import DEFAULT_UID  # noqa: E402
from rtax_tui.drivers.toolkit.stage_site import host_support  # noqa: E402

from rtax_tui.hosts import LocalHost  # noqa: E402
from rtax_tui.hosts.cgroups import Cgroup  # noqa: E402

SOURCE = Path(__file__).with_name("template_floor.c")


def cgroup_bases() -> list[str]:
    """Where the floor's cgroups go: `rtax/` in each hierarchy rtax uses (made if absent)."""
    dirs = Cgroup("rtax").dirs()
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    return dirs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200, help="rounds (200)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("template_floor: needs root")
        return 1
    for tool in ("cc", "bwrap", "unshare"):
        if not shutil.which(tool):
            print(f"template_floor: {tool} is not installed")
            return 1
    support = asyncio.run(host_support(LocalHost()))
    tmp = Path(tempfile.mkdtemp(prefix="rtax-template-floor-"))
    try:
        exe = tmp / "template_floor"
        subprocess.run(["cc", "-O2", "-o", str(exe), str(SOURCE)], check=True)
        newroot = tmp / "root"
        newroot.mkdir()
        os.chmod(tmp, 0o755)
        os.chmod(newroot, 0o755)
        bases = cgroup_bases()
        load = os.getloadavg()[0]
        out = subprocess.run(
            [str(exe), str(args.rounds), str(DEFAULT_UID), support.filter, support.etc,
             str(newroot), ",".join(bases), _bwrap_floor(), UNSHARE],
            capture_output=True, text=True,
        )  # fmt: skip
        if out.returncode != 0:
            print(out.stderr.strip())
            return 1
        lines = [line.rsplit(" ", 1) for line in out.stdout.splitlines()]
        checks = {k: v for k, v in lines if k.startswith("remount")}
        got = {k: float(v) / 1000 for k, v in lines if k not in checks}
        load = max(load, os.getloadavg()[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bw = got["bwrap"]
    cores = os.cpu_count()
    print(f"{args.rounds} rounds, medians; 1-minute load up to {load:.1f} on {cores} cores")
    said = {"10": "allowed", "11": "refused (EPERM)"}
    for name, rc in checks.items():
        # a pid 1 that still has its capabilities, asking to remount the template's root
        print(f"  {name}: {said.get(rc, 'failed otherwise, status ' + rc)}")
    for name, ms in got.items():
        extra = "" if name == "move" else f"  ({ms / bw:.2f}x bwrap)"
        print(f"  {name:16s} {ms:6.2f} ms{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
