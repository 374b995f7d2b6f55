"""`rtax run PROFILE` (and `rtax` alone: the default profile): in the console on a
terminal, headless otherwise; the profile with the command line's overrides."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtax_tui.commands import argtypes
from rtax_tui.commands.argtypes import _sizes
from rtax_tui.commands.command import Command
from rtax_tui.commands.gating import add_gate_flags, apply_gates, parse_thresholds
from rtax_tui.commands.hostflags import add_host_flags, host_overrides
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import RtaxError

if TYPE_CHECKING:
    from rtax_tui.engine.poolspec import PoolSpec
    from rtax_tui.engine.profile import Profile


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def add_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("profile", help="a profile file, or a built-in name (default, t0, t1, t2, ...)")
    r.add_argument(
        "--headless",
        action="store_true",
        help="no console: progress on stderr, a report at the end (the default when "
        "stdout is not a terminal)",
    )
    r.add_argument(
        "-o",
        "--output",
        help="recording path, or - to stream events to stdout "
        "(default: recordings/<UTC time>-<profile>.jsonl)",
    )
    r.add_argument("--seed", type=argtypes.seed, help="seed of the trial order")
    r.add_argument("--trials", type=argtypes.trials, help="measured trials per cell")
    r.add_argument(
        "--warmup", type=argtypes.warmup, help="warm-up trials per cell (recorded, not counted)"
    )
    r.add_argument(
        "--precision",
        type=argtypes.precision,
        metavar="P%",
        help="run rounds of --trials trials per cell (interleaved) until each cell's 95%% "
        "bootstrap interval of its P50 total lies within +-P%% of that P50 (both ends; at "
        "least 10 measured trials), up to --max-trials and --max-time; the cells that did "
        "not get there are named at the end ([run] precision)",
    )
    r.add_argument(
        "--max-trials",
        type=argtypes.trials,
        metavar="N",
        help="with --precision: measured trials per cell at most (default 1000)",
    )
    r.add_argument(
        "--max-time",
        type=argtypes.duration,
        metavar="DURATION",
        help="with --precision: the run's time at most, 90s, 10m, 1h (default 10m); no "
        "round starts past it and the round under way starts no more trials",
    )
    r.add_argument("--driver", type=_csv, help="drivers, comma-separated (local,stage)")
    r.add_argument("--workload", type=_csv, help="workloads, comma-separated (t0,t1,t2,...)")
    r.add_argument("--channel", type=_csv, help="action channel: exec, shell or exec,shell")
    r.add_argument("--concurrency", type=argtypes.concurrency, help="trials in flight at once")
    r.add_argument(
        "--arrival",
        type=_csv,
        metavar="A,..",
        help="arrival patterns, comma-separated: sequential, burst:N (N at once), rate:R "
        "(Poisson, R a second); replaces [run] arrivals",
    )
    r.add_argument(
        "--image",
        type=_csv,
        metavar="M,..",
        help="image modes, comma-separated: cached, pull (the whole image from a content "
        "server on loopback), lazy (fetched as read); replaces [run] images",
    )
    r.add_argument(
        "--sizes",
        type=_sizes,
        help="capacity curve: batch sizes, comma-separated (replaces [capacity] sizes/size)",
    )
    r.add_argument(
        "--pool",
        type=argtypes.concurrency,
        metavar="N",
        help="run pooled: N environments kept ready per cell and host ([pool] size)",
    )
    add_host_flags(r)
    r.add_argument(
        "--record",
        metavar="FILE",
        help="with -o -: also keep the recording in FILE (what the console uses)",
    )
    r.add_argument(
        "--control",
        action="store_true",
        help="read `pause`, `resume`, `stop` lines on stdin; end of input stops the run",
    )
    r.add_argument("--quiet", action="store_true", help="no report at the end")
    add_gate_flags(r)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """`rtax run PROFILE`, and `rtax` alone (no `profile`: the default one)."""
    # deferred: the engine's run, 78 ms of imports that `rtax --help` does not make
    from rtax_tui.commands.headless import run_headless

    name = getattr(args, "profile", "default")
    profile = profile_for(name, args)
    output = getattr(args, "output", None)
    headless = getattr(args, "headless", False) or output == "-" or getattr(args, "control", False)
    if headless or not interactive():
        return run_headless(
            profile,
            output,
            argv,
            record=getattr(args, "record", None),
            control=getattr(args, "control", False),
            quiet=getattr(args, "quiet", False),
            thresholds=_thresholds_of(profile, args),
            summary=getattr(args, "summary", None),
            junit=getattr(args, "junit", None),
        )
    return _run_console(name, profile, args, output)


def load(args: argparse.Namespace) -> None:
    """What the console of `rtax serve [run P]` loads first: the profile and its flags."""
    profile_for(getattr(args, "profile", "default"), args)


COMMAND = Command("run", "run a profile and record every trial", add_arguments, run, load=load)


def _thresholds_of(profile: Profile, args: argparse.Namespace) -> list[Any]:
    return parse_thresholds(profile.to_dict(), getattr(args, "threshold", None) or [])


def profile_for(name: str, args: argparse.Namespace) -> Profile:
    """The profile `name` with the command line's overrides."""
    # deferred: the profile's reader, 25 ms of imports that `rtax --help` does not make
    from rtax_tui.engine.profile import load_profile, resolve_profile_path

    profile = load_profile(resolve_profile_path(name))
    profile = profile.with_overrides(
        seed=getattr(args, "seed", None),
        trials=getattr(args, "trials", None),
        warmup=getattr(args, "warmup", None),
        drivers=getattr(args, "driver", None),
        workloads=getattr(args, "workload", None),
        channels=getattr(args, "channel", None),
        concurrency=getattr(args, "concurrency", None),
        arrivals=getattr(args, "arrival", None),
        images=getattr(args, "image", None),
        precision=getattr(args, "precision", None),
        max_trials=getattr(args, "max_trials", None),
        max_time=getattr(args, "max_time", None),
        pool=_pool_override(profile, getattr(args, "pool", None)),
        **host_overrides(args),
    )
    if getattr(args, "sizes", None):
        profile = profile.with_sizes(args.sizes)
    return profile


def _pool_override(profile: Profile, size: int | None) -> PoolSpec | None:
    """`--pool N`: the profile's [pool] (or the defaults) with size N; None without it."""
    if size is None:
        return None
    return replace(profile.pool_spec, size=size)


def interactive() -> bool:
    """A terminal, or the browser's (`rtax serve`: Textual's web driver)."""
    web = os.environ.get("TEXTUAL_DRIVER", "").endswith(":WebDriver")
    return web or (sys.stdin.isatty() and sys.stdout.isatty())


def _run_console(name: str, profile: Profile, args: argparse.Namespace, output: str | None) -> int:
    """The console starts the engine as its own process on the same profile and flags."""
    # deferred: the console (Textual), 150 ms of imports that `rtax --help` does not make
    from rtax_tui.analysis.report import build_report
    from rtax_tui.commands.headless import default_output
    from rtax_tui.engine.profile import resolve_profile_path
    from rtax_tui.ui.app import run_console_live
    from rtax_tui.ui.feeds import engine_argv

    record = Path(output) if output else default_output(profile)
    if record.exists():
        raise RtaxError(f"{record}: already exists; rtax never overwrites a recording")
    overrides: list[str] = []
    for flag, key in (("--seed", "seed"), ("--trials", "trials"), ("--warmup", "warmup"),
                      ("--concurrency", "concurrency"), ("--pool", "pool"),
                      ("--precision", "precision"), ("--max-trials", "max_trials"),
                      ("--max-time", "max_time")):  # fmt: skip
        v = getattr(args, key, None)
        if v is not None:
            overrides += [flag, str(v)]
    for flag, key in (("--driver", "driver"), ("--workload", "workload"), ("--channel", "channel"),
                      ("--host", "host"), ("--arrival", "arrival"),
                      ("--image", "image")):  # fmt: skip
        v = getattr(args, key, None)
        if v:
            overrides += [flag, ",".join(v)]
    overrides += ssh_flags(args)
    if getattr(args, "sizes", None):
        overrides += ["--sizes", ",".join(map(str, args.sizes))]
    path = str(resolve_profile_path(name))
    thresholds = _thresholds_of(profile, args)
    summary, junit = getattr(args, "summary", None), getattr(args, "junit", None)
    rc = run_console_live(
        getattr(profile, "name", name),
        engine_argv(path, overrides, str(record)),
        str(record),
        ssh_flags=ssh_flags(args),
    )
    if rc == 0 and (thresholds or summary or junit) and record.exists():
        # the gates once the console is closed, as a headless run checks them
        rec = read_recording(record)
        if not apply_gates(build_report(rec), lambda: rec, thresholds, summary, junit):
            return 1
    return rc


def ssh_flags(args: argparse.Namespace) -> list[str]:
    """The SSH flags given, as flags again: for the engine and the checks the console starts."""
    flags: list[str] = []
    for flag, key in (("--identity", "identity"), ("--known-hosts", "known_hosts")):
        v = getattr(args, key, None)
        if v:
            flags += [flag, str(v)]
    if getattr(args, "trust_new_hosts", False):
        flags.append("--trust-new-hosts")
    return flags
