"""`rtax traj inspect` and `rtax traj prepare`: the command-line side of trajectories."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtax_tui.commands import argtypes, output
from rtax_tui.commands.command import Command
from rtax_tui.model import paths, signals
from rtax_tui.model.events import FORMAT, visible
from rtax_tui.model.recording import RecordingWriteError, RecordingWriter, read_recording
from rtax_tui.model.spec import RtaxError

TRAJ_HELP = """\
formats (detected from the content, never the file name): swe-agent (.traj 0.x, 1.x),
mini-swe-agent (-1, -1.1, v2), openhands-v0 (event list, eval history), openhands-v1
(a conversation directory: base_state.json + events/), codex (rollout JSONL),
claude-code (session JSONL), gemini-cli (session JSON or JSONL).

inspect --format json: {"format", "variant", "path", "steps": [{"i", "kind", "tool",
  "command", "cwd", "exit_code", "output_bytes", "paired", "call_id", "started_at",
  "ended_at"}], "skipped_records", "skipped_types", "unpaired", "kinds"}
  (a file holding several trajectories, e.g. an OpenHands eval output.jsonl: a list).
A malformed file: `rtax: error: FILE:LINE: what`, exit status 2.

examples:
  rtax traj inspect session.jsonl
  rtax traj inspect run.traj --format json
  rtax traj prepare tests/data/trajectories --repeat 3 --shuffle -o prep.jsonl
  rtax traj prepare tests/data/trajectories --mode view -o view.jsonl
  rtax report prep.jsonl
"""


def add_arguments(t: argparse.ArgumentParser) -> None:
    tsub = t.add_subparsers(dest="traj_command", metavar="SUBCOMMAND", required=True)
    for command in SUBCOMMANDS:
        command.add_to(tsub)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    return BY_NAME[args.traj_command].run(args, argv)


def _add_inspect(i: argparse.ArgumentParser) -> None:
    i.add_argument("file", help="a trajectory file or an OpenHands V1 conversation directory")
    i.add_argument("--format", choices=("table", "json"), default="table")


PREPARE_DESCRIPTION = (
    "For each trajectory and prefix length k (all k, or --max-prefixes "
    "spread evenly), read, parse and validate the first k steps as recorded, timed "
    "with monotonic_ns; no tool runs, and the inputs (and --workspace) are hashed "
    "before and after to show nothing changed. Writes an rtax/1 recording of `prep` "
    "events; `rtax report REC` shows P50/P95 per format. What one sample times "
    "(--mode): `file` (default), each prefix from the file alone: read it, detect its "
    "format, parse and normalize all of it, check every step, validate the first k; "
    "`view`, the file read, detected, parsed, normalized and checked once per "
    "repetition (parse_ns), each prefix a view on it validated in O(k) (view_ns), "
    "a sample being view_ns + parse_ns / the prefixes taken from that parse."
)


def _add_prepare(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("--repeat", type=argtypes.repeat, default=3, help="samples per prefix (3)")
    p.add_argument("--shuffle", action="store_true", help="run the samples in a seeded order")
    p.add_argument("--seed", type=argtypes.seed, default=0)
    p.add_argument("--max-prefixes", type=argtypes.prefixes, default=60, help="per trajectory (60)")
    p.add_argument(
        "--mode",
        choices=("file", "view"),
        default="file",
        help="file: one read and parse per sample; view: one per file, prefixes as views",
    )
    p.add_argument("--workspace", help="a directory that must stay unchanged (hashed)")
    p.add_argument("-o", "--output", help="the recording (default recordings/<time>-traj.jsonl)")
    p.add_argument("--format", choices=("table", "json"), default="table")


def _run_prepare(args: argparse.Namespace, argv: list[str]) -> int:
    with signals.armed():  # a signal removes the unfinished recording (KeyboardInterrupt)
        return _prepare(args, argv)


def _inspect(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the trajectory readers and their tables, 57 ms of imports that
    # `rtax --help` does not make
    from rtax_tui.engine.traj import read_trajectories
    from rtax_tui.render.reporting import out_console
    from rtax_tui.render.traj_render import render_steps

    trajs = read_trajectories(args.file)
    docs = [t.to_json() for t in trajs]
    if args.format == "json":
        output.print_json(docs[0] if len(docs) == 1 else docs)
        return 0
    console = out_console()
    for d in docs:  # an agent's commands, shown as text (their escapes visible)
        console.print(render_steps(visible(d)))
    return 0


def _prepare(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the preparation, the statistics and their tables, 91 ms of imports that
    # `rtax --help` does not make
    from rtax_tui.analysis.report import build_report
    from rtax_tui.render.reporting import out_console
    from rtax_tui.render.traj_render import render_prep

    workspace = Path(args.workspace) if args.workspace else None
    if workspace is not None and not workspace.is_dir():
        raise RtaxError(f"--workspace {workspace}: not a directory")
    if args.output:
        out = Path(args.output)
    else:
        out = Path("recordings") / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-traj.jsonl")
    if os.path.lexists(out):
        if out.is_symlink() and not out.exists():
            raise RtaxError(f"-o {out}: a symbolic link that points nowhere; name another file")
        raise RtaxError(f"{out}: exists; name another recording with -o")
    result = write_prepare(
        out,
        args.paths,
        repeat=args.repeat,
        shuffle=args.shuffle,
        seed=args.seed,
        max_prefixes=args.max_prefixes,
        mode=args.mode,
        workspace=workspace,
        argv=argv,
    )
    report = build_report(read_recording(out))
    if args.format == "json":
        output.print_json({"recording": str(out), **report["prep"], "run_end": result})
    else:
        console = out_console()
        console.print(render_prep(report["prep"]))
        console.print(f"{result['samples']} samples; recording: {out}")
    if not result["unchanged"]:
        print("rtax: error: the inputs or the workspace changed while preparing", file=sys.stderr)
        return 1
    return 0


def write_prepare(
    out: Path,
    inputs: list[str],
    *,
    repeat: int,
    shuffle: bool,
    seed: int,
    max_prefixes: int,
    mode: str = "file",
    workspace: Path | None = None,
    argv: list[str],
) -> dict[str, Any]:
    """`rtax traj prepare`'s run: the recording `out` of `prep` events, published only
    when whole; its result (`run_end.prep`). `rtax reproduce` runs it too."""
    # deferred: the preparation, 91 ms of imports that `rtax --help` does not make
    from rtax_tui.engine.session import new_run_id
    from rtax_tui.engine.traj.prepare import plan_tasks, run_prepare

    # every input is read once before the recording exists: a bad file fails here
    tasks, _ = plan_tasks(inputs, repeat, shuffle, seed, max_prefixes)
    # written under a temporary name, linked to `out` only when whole (run_end written)
    try:
        writer = RecordingWriter.open(out, publish="explicit")
    except OSError as exc:
        raise paths.path_error("-o", out, exc) from None
    t0 = time.monotonic_ns()
    try:
        writer.write(
            {
                "type": "run",
                "t_ns": 0,
                "format": FORMAT,
                "run_id": new_run_id(),
                "started_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "seed": seed,
                "argv": argv,
                "profile": {
                    "name": "traj-prepare",
                    "paths": inputs,
                    "repeat": repeat,
                    "shuffle": shuffle,
                    "max_prefixes": max_prefixes,
                    "mode": mode,
                    "workspace": None if workspace is None else str(workspace),
                },
                "hosts": {"local": _facts()},
            }
        )
        result = run_prepare(
            inputs,
            repeat=repeat,
            shuffle=shuffle,
            seed=seed,
            max_prefixes=max_prefixes,
            mode=mode,
            workspace=workspace,
            emit=writer.write,
            clock0=t0,
            tasks=tasks,
        )
        status = "completed" if result["unchanged"] else "failed"
        writer.write(
            {
                "type": "run_end",
                "t_ns": time.monotonic_ns() - t0,
                "status": status,
                "trials": 0,
                "prep": result,
            }
        )
        writer.publish()
    except RecordingWriteError as exc:
        raise RtaxError(
            f"-o {out}: cannot write the recording ({exc.strerror}); nothing was kept"
        ) from None
    except OSError as exc:
        raise paths.path_error("-o", out, exc) from None
    finally:
        writer.close()  # unpublished (a failure, a signal): its temporary file is removed
    return result


def _facts() -> dict[str, Any]:
    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


COMMAND = Command(
    "traj",
    "read real agent trajectories; time prefix preparation",
    add_arguments,
    run,
    description="rtax traj: agent trajectories (SWE-agent, mini-swe-agent, OpenHands, "
    "Codex CLI, Claude Code, Gemini CLI).",
    epilog=TRAJ_HELP,
)


SUBCOMMANDS = (
    Command("inspect", "the normalized steps of one trajectory", _add_inspect, _inspect),
    Command(
        "prepare",
        "time the preparation of every history prefix (no tool run)",
        _add_prepare,
        _run_prepare,
        description=PREPARE_DESCRIPTION,
    ),
)
BY_NAME = {c.name: c for c in SUBCOMMANDS}
