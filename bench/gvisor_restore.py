"""gVisor's checkpoint/restore against a fresh sandbox, as a warm pool's reset would use it.

A busybox sandbox (rtax's cached gvisor root, read-only, no network, the exec channel's
sleeper as init) is checkpointed once (`runsc checkpoint`); then, alternating, N fresh
sandboxes (`runsc run`) and N restored ones (`runsc restore` of that image), each timed
from the launch until a `runsc exec true` first succeeds, and its teardown (`kill`,
wait, `delete --force`) timed too. Every runsc process is this script's child, so
nothing waits on the machine's init. Prints the medians; asserts nothing.

    python3 bench/gvisor_restore.py [--runs 10] [--platform ptrace]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from rtax_tui.drivers.gvisor import SLEEPER, busybox_root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--platform", default="ptrace")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rtax-gvrestore-", dir="/run")
    bundle, state, image = (os.path.join(tmp, d) for d in ("bundle", "state", "image"))
    for d in (bundle, state, image):
        os.makedirs(d)
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": SLEEPER,
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": {"path": busybox_root(), "readonly": True},
        "hostname": "rtax",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    runsc = ["runsc", f"--root={state}", "--network=none", "--ignore-cgroups"]
    runsc.append(f"--platform={args.platform}")
    log = open(os.path.join(tmp, "runsc.log"), "ab")

    def up(cmd: list[str], cid: str) -> tuple[subprocess.Popen[bytes], int]:
        t = time.monotonic_ns()
        p = subprocess.Popen([*runsc, *cmd, cid], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=log)  # fmt: skip
        while subprocess.run([*runsc, "exec", cid, "true"], capture_output=True).returncode:
            if p.poll() is not None:
                raise SystemExit(f"gvisor_restore: {cid} ended; see {tmp}/runsc.log")
            time.sleep(0.002)
        return p, time.monotonic_ns() - t

    def down(p: subprocess.Popen[bytes], cid: str) -> int:
        t = time.monotonic_ns()
        subprocess.run([*runsc, "kill", cid, "KILL"], capture_output=True)
        p.wait()
        subprocess.run([*runsc, "delete", "--force", cid], capture_output=True)
        return time.monotonic_ns() - t

    try:
        p, _ = up(["run", "--bundle", bundle], "pristine")
        t = time.monotonic_ns()
        subprocess.run([*runsc, "checkpoint", f"--image-path={image}", "pristine"], check=True)
        ck = time.monotonic_ns() - t
        p.wait()
        subprocess.run([*runsc, "delete", "--force", "pristine"], capture_output=True)
        size = sum(os.path.getsize(os.path.join(image, n)) for n in os.listdir(image))
        fresh: dict[str, list[int]] = {"up": [], "down": []}
        restored: dict[str, list[int]] = {"up": [], "down": []}
        for i in range(args.runs):
            for name, cmd, out in (
                (f"run{i}", ["run", "--bundle", bundle], fresh),
                (f"restore{i}", ["restore", f"--image-path={image}", "--bundle", bundle], restored),
            ):
                p, d = up(cmd, name)
                out["up"].append(d)
                out["down"].append(down(p, name))
    finally:
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def ms(xs: list[int]) -> str:
        return f"{statistics.median(xs) / 1e6:.1f}"

    print(f"checkpoint: {ck / 1e6:.1f} ms, image {size:,} bytes")
    print(f"n = {args.runs} each, alternating, platform {args.platform}; P50 ms")
    print("| sandbox | launch -> first exec | teardown |")
    print("|---|---|---|")
    print(f"| fresh (runsc run) | {ms(fresh['up'])} | {ms(fresh['down'])} |")
    print(f"| restored (runsc restore) | {ms(restored['up'])} | {ms(restored['down'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
