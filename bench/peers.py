"""Peers side by side: rtax's substrates, SWE-ReX, hyperfine and the docker CLI on the
same work, in one go; prints one table and writes it into bench/README.md (the section
between the `peers` markers, replaced).

    python3 bench/peers.py [--trials 12] [--warmup 2] [--runs 300] [--no-write]

The work: T0 (`true`) and T1 (docs/profiles.md: the five inspection steps of profiles' `t1` in a
copy of the prepared attrs repository). Rows:

- rtax `local`, `stage`, `docker`, each over `exec` and `shell`, and `swerex` with its
  local runtime and its server on loopback, each over `exec` (SWE-ReX's `execute`) and
  `shell` (its bash session): one `rtax run` per swerex deployment (the deployment is a
  driver option), one for the rest; every figure is the engine's.
- `hyperfine -N`: the same argv, no shell, `--runs N` each (T1: each step, the medians
  summed); it has no environment to create, so only the action columns.
- the docker CLI: `docker run --rm --network none IMAGE true` (T0: a whole environment,
  create to teardown, in the create+ready column's place, as `total`), `docker exec`
  into a running container (the action columns; T1 with the workspace bind-mounted).

Columns are P50 over non-warm-up trials (ms): create+ready per trial, one T0 action,
the sum of T1's five actions per trial, teardown, and a T0 trial's total. Needs
dockerd (scripts/start-dockerd), `rtax images build --driver docker`, `rtax assets
prepare`, and SWE-ReX (`pip install 'rtax[swerex]'`); a peer that cannot run is a row
saying why.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
BEGIN = "<!-- peers:begin (bench/peers.py writes this section) -->"
END = "<!-- peers:end -->"
COLS = ("create+ready", "T0 action", "T1 actions", "teardown", "T0 total")
FAILURES: list[str] = []  # why a trial failed, for the notes under the table


def rtax(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=3600
    )


def _p50(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def rtax_rows(
    tmp: Path, name: str, drivers: list[str], options: str, trials: int, warmup: int
) -> tuple[dict[str, dict[str, float | None]], str | None]:
    """One `rtax run` of T0 and T1 over both channels; per `driver/channel` the columns."""
    prof = tmp / f"{name}.toml"
    prof.write_text(
        f"[run]\nseed = 7\ntrials = {trials}\nwarmup = {warmup}\n"
        f'drivers = {json.dumps(drivers)}\nworkloads = ["t0", "t1"]\n'
        'channels = ["exec", "shell"]\n'
        "[limits]\ncpus = 1.0\nmemory_mib = 1024\npids = 1024\n" + options
    )
    out = tmp / f"{name}.jsonl"
    res = rtax("run", str(prof), "-o", str(out))
    if not out.exists():
        return {}, (res.stderr.strip().splitlines() or ["no recording"])[-1]
    from rtax_tui.model.recording import read_recording

    rec = read_recording(out)
    cell: dict[str, tuple[str, str]] = {}
    ok: set[str] = set()
    why: dict[str, str] = {}
    for e in rec.events:
        if e["type"] == "trial_start" and not e["warmup"]:
            cell[e["trial"]] = (f"{e['driver']}/{e['channel']}", e["workload"])
        elif e["type"] == "trial_end" and e["ok"] and e["valid"]:
            ok.add(e["trial"])
        elif e["type"] == "trial_end" and e.get("error"):
            err = e["error"]
            first = str(err.get("message", "")).splitlines()[0][:90]
            why[e["trial"]] = f"{err.get('phase')}: {err.get('kind')}: {first}"
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    t0_actions: dict[str, list[float]] = defaultdict(list)
    for e in rec.events:
        t = e.get("trial")
        if t not in cell or t not in ok:
            continue
        row, wl = cell[t]
        if e["type"] == "phase" and "." not in e["name"]:
            per[t][e["name"]] += e["dur_ns"] / 1e6
        elif e["type"] == "action":
            per[t]["actions"] += e["dur_ns"] / 1e6
            if wl == "t0":
                t0_actions[row].append(e["dur_ns"] / 1e6)
    cols: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t, ph in per.items():
        row, wl = cell[t]
        if wl == "t0":
            cols[row]["create+ready"].append(ph["create"] + ph["ready"])
            cols[row]["teardown"].append(ph["teardown"])
            total = sum(ph[k] for k in ("create", "ready", "actions", "teardown"))
            cols[row]["T0 total"].append(total + ph["orchestration"])
        else:
            cols[row]["T1 actions"].append(ph["actions"])
    rows = {}
    for row in sorted(set(r for r, _ in cell.values())):
        rows[row] = {c: _p50(cols[row][c]) for c in COLS if c != "T0 action"}
        rows[row]["T0 action"] = _p50(t0_actions[row])
        failed = [t for t, (r, _) in cell.items() if r == row and t not in ok]
        if failed:
            rows[row]["failed"] = len(failed)
            FAILURES.extend(f"{name} {row}: {why.get(t, 'invalid')}" for t in failed)
    return rows, None


def hyperfine_ms(argv: list[str], runs: int, cwd: str) -> float:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        subprocess.run(
            ["hyperfine", "-N", "--warmup", "5", "--runs", str(runs), "--output=pipe",
             "--export-json", str(out), shlex.join(argv)],
            capture_output=True, check=True, cwd=cwd, timeout=1800,
        )  # fmt: skip
        return float(json.loads(out.read_text())["results"][0]["median"]) * 1000
    finally:
        out.unlink()


def timed(argv: list[str], **kw: object) -> float:
    t = time.monotonic_ns()
    subprocess.run(argv, capture_output=True, check=True, timeout=600, **kw)  # type: ignore[call-overload]
    return (time.monotonic_ns() - t) / 1e6


def docker_rows(t1: list[list[str]], repo: str, runs: int, trials: int) -> dict[str, float | None]:
    from rtax_tui.drivers.toolkit import images

    busybox, workload = images.image_tag("busybox"), images.debian_image_tag()
    total = [timed(["docker", "run", "--rm", "--network", "none", busybox, "true"])
             for _ in range(trials)]  # fmt: skip
    ws = tempfile.mkdtemp(prefix="rtax-peers-ws-")
    shutil.copytree(repo, ws, dirs_exist_ok=True, symlinks=True)
    name = f"rtax-peers-{os.getpid()}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--network", "none", "--name", name,
         "--label", "rtax.run=peers", "-v", f"{ws}:/workspace", "-w", "/workspace",
         workload, "sleep", "3600"],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    try:
        t0 = [timed(["docker", "exec", name, "true"]) for _ in range(runs)]
        t1_sums = []
        for _ in range(trials):
            t1_sums.append(sum(timed(["docker", "exec", name, *step]) for step in t1))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)
        shutil.rmtree(ws, ignore_errors=True)
    return {
        "create+ready": None,
        "T0 action": _p50(t0),
        "T1 actions": _p50(t1_sums),
        "teardown": None,
        "T0 total": _p50(total),
    }


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=300, help="hyperfine and docker exec runs")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/README.md")
    args = ap.parse_args()
    from rtax_tui.drivers.toolkit.assets import find_prepared

    from rtax_tui.engine.workloads import builtin_workloads

    assets = find_prepared()
    if assets is None:
        print("peers: the attrs assets are not prepared (rtax assets prepare)", file=sys.stderr)
        return 2
    t1 = [list(s.argv) for s in builtin_workloads(assets)["t1"].steps]
    tmp = Path(tempfile.mkdtemp(prefix="rtax-peers-"))
    load0 = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table: dict[str, dict[str, float | None]] = {}
    notes: list[str] = []

    rows, err = rtax_rows(tmp, "rtax", ["local", "stage", "docker"], "", args.trials, args.warmup)
    table.update({f"rtax {k}": v for k, v in rows.items()})
    if err:
        notes.append(f"rtax local/stage/docker: {err}")
    for dep in ("local", "remote"):
        opt = f'[drivers_options.swerex]\ndeployment = "{dep}"\n'
        rows, err = rtax_rows(tmp, f"swerex-{dep}", ["swerex"], opt, args.trials, args.warmup)
        table.update({f"swerex[{dep}] {k.split('/')[1]}": v for k, v in rows.items()})
        if err:
            notes.append(f"swerex {dep}: {err}")
    if shutil.which("hyperfine"):
        ws = tempfile.mkdtemp(prefix="rtax-peers-hf-")
        shutil.copytree(str(assets.repo), ws, dirs_exist_ok=True, symlinks=True)
        t1_sum = sum(hyperfine_ms(step, max(20, args.runs // 10), ws) for step in t1)
        table["hyperfine -N"] = {
            "T0 action": hyperfine_ms(["true"], args.runs, ws),
            "T1 actions": t1_sum,
        }
        shutil.rmtree(ws, ignore_errors=True)
    else:
        notes.append("hyperfine: not installed")
    try:
        table["docker CLI run/exec"] = docker_rows(t1, str(assets.repo), args.runs, args.trials)
    except (subprocess.CalledProcessError, OSError) as exc:
        notes.append(f"docker CLI: {exc}")
    load1 = os.getloadavg()[0]

    lines = [
        f"Measured {started} by `python3 bench/peers.py --trials {args.trials} --warmup "
        f"{args.warmup} --runs {args.runs}`; 1-minute load {load0:.1f} before, {load1:.1f} "
        f"after (2 cores). P50 in ms; `-`: not a phase of that peer.",
        "",
        "| peer | " + " | ".join(COLS) + " |",
        "|---|" + "---:|" * len(COLS),
    ]
    for peer, cols in table.items():
        cells = [fmt(cols.get(c)) for c in COLS]
        failed = cols.get("failed")
        tag = f" ({int(failed)} failed)" if failed else ""
        lines.append(f"| {peer}{tag} | " + " | ".join(cells) + " |")
    lines += [f"- not measured: {n}" for n in notes]
    lines += [f"- failed trial: {f}" for f in FAILURES]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        old = README.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        if BEGIN in old and END in old:
            new = old[: old.index(BEGIN)] + block + old[old.index(END) + len(END) :]
        else:
            new = old.rstrip("\n") + "\n\n## Peers side by side\n\n" + block + "\n"
        README.write_text(new)
        print(f"written to {README}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
