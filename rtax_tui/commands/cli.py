"""Command line: `rtax run|report|compare|project|doctor|assets|cleanup`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rtax_tui import __version__
from rtax_tui.analysis.gates import DEFAULT_MIN_EFFECT
from rtax_tui.commands import argtypes, output
from rtax_tui.commands.argtypes import _sizes, one_line_errors_everywhere
from rtax_tui.commands.hostflags import add_host_flags, host_overrides
from rtax_tui.model import paths
from rtax_tui.model.events import one_line
from rtax_tui.model.spec import RtaxError

if TYPE_CHECKING:
    from rtax_tui.engine.poolspec import PoolSpec
    from rtax_tui.engine.profile import Profile

EXAMPLES = """\
examples:
  rtax                                   the console on the default profile (T0, T1; local, stage)
  rtax run profiles/t0.toml --trials 50  run a profile in the console (--headless: no console)
  rtax home                              the launcher: change a run, start it, compare runs
  rtax replay recordings/examples/t0-local-stage.jsonl   play a recording back in the console
  rtax run t2 --driver local,stage -o r.jsonl
  rtax run t0 -o - | jq .                stream events to another program
  rtax report r.jsonl --format markdown
  rtax compare before.jsonl after.jsonl --fail-on regression   exit 1 on a regression
  rtax run t0 --threshold 'stage/t0/exec create+ready p95 < 20ms' --threshold 'failed == 0'
  rtax project r.jsonl --trajectories 1000000 --steps 150
  rtax plot r.jsonl --kind breakdown -o breakdown.svg   a figure (also cold-start, cdf, ...)
  rtax serve replay r.jsonl              the console in a browser, http://127.0.0.1:8000
  rtax project r.jsonl --steps-from runs/*.traj   S from real trajectories' step counts
  rtax doctor
  rtax probe --driver stage,docker       what each substrate keeps out, measured from inside
  rtax traj inspect session.jsonl        the steps of a real agent trajectory (seven formats)
"""


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


# each driver's cleanup, at most (gVisor's once ran past a minute: drivers/gvisor.py)
CLEANUP_TIMEOUT_S = 120


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rtax",
        description="Measure the rollout infrastructure tax of execution substrates, "
        "phase by phase (create, ready, actions, teardown, orchestration).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rtax {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="run a profile and record every trial")
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
    _add_gate_flags(r)

    rp = sub.add_parser("replay", help="open a recording in the console and play it back")
    rp.add_argument("file")
    rp.add_argument(
        "--speed",
        choices=("1", "2", "10", "max"),
        default="1",
        help="playback speed: recorded pace (1), 2x, 10x or as fast as possible",
    )

    home = sub.add_parser(
        "home", help="open the console on its launcher: choose, change, run, compare"
    )
    home.add_argument("profile", nargs="?", help="the profile to start from (default: default)")
    add_host_flags(home)

    rep = sub.add_parser("report", help="statistics of a recording")
    rep.add_argument("file")
    rep.add_argument("--format", choices=("table", "json", "markdown", "csv"), default="table")
    rep.add_argument(
        "--fidelity-min",
        type=argtypes.integer(0, 100, "--fidelity-min"),
        default=80,
        metavar="PCT",
        help="a replay cell whose fidelity (steps with the exit code the trajectory "
        "recorded) is under PCT%% is marked not representative (default 80)",
    )
    _add_gate_flags(rep)

    c = sub.add_parser("compare", help="median differences between two recordings, per cell")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--format", choices=("table", "json"), default="table")
    c.add_argument(
        "--changed",
        action="store_true",
        help="also pair a cell with the one cell of b that differs from it in exactly one of "
        "host, driver, channel or mode (a rerun that changed one thing); never across workloads",
    )
    c.add_argument(
        "--min-effect",
        default=DEFAULT_MIN_EFFECT,
        metavar="PCT,TIME",
        help="a difference smaller than this (all parts: a share of a's P50 and a time) is "
        f"`same` whatever its p-value (default {DEFAULT_MIN_EFFECT})",
    )
    c.add_argument(
        "--fail-on",
        choices=("regression",),
        help="exit 1 when any row is slower in b (significant after Holm's correction, and "
        "beyond --min-effect)",
    )
    c.add_argument("--summary", metavar="FILE", help="append the comparison in Markdown to FILE")
    c.add_argument(
        "--junit", metavar="FILE", help="write the rows as JUnit XML (a `slower` row fails)"
    )

    pr = sub.add_parser("project", help="worker-hours for N trajectories of S steps, per cell")
    pr.add_argument("file")
    pr.add_argument("--trajectories", type=argtypes.trajectories, default=1_000_000)
    pr.add_argument("--steps", type=argtypes.steps, default=None, help="S (default 150)")
    pr.add_argument(
        "--steps-from",
        nargs="+",
        metavar="PATH",
        help="S from real trajectories (files or directories): each one's replayed steps",
    )
    pr.add_argument("--format", choices=("table", "json"), default="table")

    _add_probe_parser(sub)
    from rtax_tui.commands.traj_cli import add_traj_parser

    add_traj_parser(sub)
    from rtax_tui.commands.plot_cli import add_plot_parser

    add_plot_parser(sub)
    from rtax_tui.commands.serve import add_serve_parser

    add_serve_parser(sub)

    d = sub.add_parser("doctor", help="which drivers work here, and how to fix those that do not")
    add_host_flags(d)
    d.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="json: one object a line, each driver as soon as it is checked",
    )

    a = sub.add_parser("assets", help="workload assets (the attrs repository)")
    a.add_argument("action", choices=("prepare", "status"))
    a.add_argument("--force", action="store_true")

    im = sub.add_parser("images", help="build the substrates' images locally (no registry)")
    im.add_argument("action", choices=("build",))
    im.add_argument(
        "--driver",
        action="append",
        metavar="NAME",
        help="a driver (repeatable) or an image kind (`vm`: both VM drivers' guest); "
        "default docker. A driver that starts from no image is skipped",
    )
    im.add_argument("--force", action="store_true", help="rebuild even when cached")

    cl = sub.add_parser("cleanup", help="remove leftovers of earlier runs")
    cl.add_argument(
        "--run", help="only this run id (refused while the run is alive: stop it first)"
    )
    cl.add_argument(
        "--driver",
        action="append",
        metavar="NAME",
        help="only these drivers' leftovers (repeatable; then no budget cgroups)",
    )
    cl.add_argument(
        "--timeout",
        type=argtypes.integer(1, 3600, "timeout"),
        default=CLEANUP_TIMEOUT_S,
        metavar="S",
        help=f"each driver's cleanup at most S seconds (default {CLEANUP_TIMEOUT_S}); one that "
        "fails or runs out of time is named, the others still run, and the exit status is 1",
    )
    add_host_flags(cl)
    one_line_errors_everywhere(p)
    return p


PROBE_FORMATS = ("table", "json", "markdown")


def _probe_help() -> str:
    from rtax_tui.model.checks import CHECKS

    lines = [
        "Runs a boundary suite inside each driver's own environments, through its own",
        "channel, as ordinary workload steps: escape attempts that must come back",
        "`blocked` and guarantees that must come back `held`. A check is `breached` when",
        "the attempt worked (or the guarantee failed), `n/a` when it could not be measured",
        "(with the reason). Wherever the host can see the outcome itself, the verdict rests",
        "on that: random tokens in planted files, a host listener that logs connections",
        "and signals, files that appear on the host. The environments get the limits",
        "cpus=1, memory_mib=256, pids=128. A driver that cannot run here, or on a host,",
        "gets `n/a` on every check, saying why.",
        "",
        "checks:",
    ]
    for c in CHECKS:
        lines += textwrap.wrap(
            c.means, 79, initial_indent=f"  {c.name:19} ", subsequent_indent=" " * 22
        )
    lines += [
        "",
        "Each driver states which checks it promises (`promised`); a promise that the",
        'measurement breaks is shown. JSON: {"format": "rtax-probe/1", "drivers":',
        '{DRIVER: {"checks": {CHECK: {"result", "evidence", "promised", "runs"}},',
        '"summary"}}}: a check\'s result is `breached` if any host or channel breached it,',
        "`n/a` if any could not measure it; `runs` holds every host/channel's own.",
        "The last result of each host/driver is kept in rtax's cache; `rtax run` records it",
        "in its header next to the cost figures.",
        "",
        "exit status: 0 whatever the checks find (a breach is a measurement), 2 on bad",
        "input, 130 when interrupted.",
        "",
        "examples:",
        "  rtax probe --driver stage --channel shell",
        "  rtax probe --driver local,stage,docker,podman,libvirt,microvm -o probe.jsonl",
        "  rtax probe --driver stage --host ssh://bench@10.0.0.5 --format json",
    ]
    return "\n".join(lines)


def _add_probe_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from rtax_tui.drivers import names as driver_names

    pb = sub.add_parser(
        "probe",
        help="measure what each driver keeps out, from inside its environments",
        description="rtax probe: measure each driver's boundary from inside.",
        epilog=_probe_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pb.add_argument(
        "--driver",
        metavar="D,..",
        help=f"drivers, comma-separated (default: all: {','.join(driver_names())})",
    )
    add_host_flags(pb)
    pb.add_argument(
        "--channel", metavar="C,..", help="exec, shell or exec,shell (default: exec,shell)"
    )
    pb.add_argument(
        "--format",
        default="table",
        metavar="F",
        help="table (default), json, or markdown (the tables of docs/boundaries.md)",
    )
    pb.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="also write an rtax/1 recording of `probe` events (rtax report / replay read it)",
    )
    pb.add_argument(
        "--profile",
        metavar="P",
        help="take [drivers_options] and [hosts.NAME] from this profile (e.g. a VM's accel)",
    )

    def one_line_error(message: str) -> None:  # bad input: one line that names the field
        print(f"rtax probe: error: {one_line(message)}", file=sys.stderr)
        raise SystemExit(2)

    pb.error = one_line_error


def _probe(args: argparse.Namespace, argv: list[str]) -> int:
    from rtax_tui.commands.headless import run_probe_command
    from rtax_tui.drivers import names as driver_names
    from rtax_tui.engine.profile import Profile, load_profile, resolve_profile_path
    from rtax_tui.model.spec import CHANNELS

    def listed(
        flag: str, value: str | None, known: Sequence[str], default: Sequence[str]
    ) -> list[str]:
        if value is None:
            return list(default)
        items = [v.strip() for v in value.split(",") if v.strip()]
        if not items:
            raise RtaxError(f"{flag}: expected a comma-separated list of {', '.join(known)}")
        for v in items:
            if v not in known:
                raise RtaxError(f"{flag}: unknown {v!r} (known: {', '.join(known)})")
        return list(dict.fromkeys(items))

    channels = listed("--channel", args.channel, CHANNELS, CHANNELS)
    if args.format not in PROBE_FORMATS:
        raise RtaxError(f"--format: {args.format!r} (allowed: {', '.join(PROBE_FORMATS)})")
    if args.profile:
        try:
            profile = load_profile(resolve_profile_path(args.profile))
        except RtaxError as exc:
            raise RtaxError(f"--profile: {exc}") from None
    else:
        profile = Profile(name="probe", path="rtax probe", hosts=("local",))
    # the profile's driver instances too (`driver = "BASE"`), when named
    known = driver_names() + profile.driver_instances()
    drivers = listed("--driver", args.driver, known, driver_names())
    try:
        profile = profile.with_overrides(**host_overrides(args))
    except RtaxError as exc:
        raise RtaxError(f"--host: {exc}") from None
    return run_probe_command(
        drivers, channels, profile, fmt=args.format, output=args.output, argv=argv
    )


# where each command's paths come from, by the flag or argument that gave them
PATH_FLAGS = (
    ("profile", "PROFILE"),
    ("output", "-o"),
    ("record", "--record"),
    ("file", "FILE"),
    ("a", "A"),
    ("b", "B"),
    ("steps_from", "--steps-from"),
    ("paths", "FILE_OR_DIR"),
    ("recordings", "REC"),
    ("workspace", "--workspace"),
    ("identity", "--identity"),
    ("known_hosts", "--known-hosts"),
)


def _path_flags(args: argparse.Namespace) -> list[tuple[str, object]]:
    given: list[tuple[str, object]] = []
    for key, flag in PATH_FLAGS:
        value = getattr(args, key, None)
        if value:
            given.append(("--profile" if args.command == "probe" and key == "profile" else flag,
                          value))  # fmt: skip
    return given


# a control character in an error (a file name may hold a newline) is shown escaped


def main(argv: Sequence[str] | None = None) -> int:
    # A closed standard descriptor is held first, so that no file takes its number (the
    # stop signals are handled already: `rtax_tui.commands.main`, model/signals.py).
    output.prepare()
    return output.guarded(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        with paths.taking(*_path_flags(args)):  # type: ignore[arg-type]
            return _dispatch(args, args_list)
    except RtaxError as exc:
        print(f"rtax: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except RecursionError:  # a reader's last line of defence: inputs are bounded before
        print("rtax: error: an input is nested too deeply", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rtax: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if output.is_stream_error(exc):
            raise  # stdout's: `output.guarded` says it
        print(f"rtax: error: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, argv: list[str]) -> int:
    cmd = args.command
    if cmd is None:
        return _run_profile("default", argparse.Namespace(), ["rtax", *argv])
    if cmd == "run":
        return _run_profile(args.profile, args, ["rtax", *argv])
    if cmd == "replay":
        from rtax_tui.model.recording import read_recording

        read_recording(args.file)  # a bad file: one-line error before the terminal is taken
        if not _interactive():
            raise RtaxError("replay needs a terminal; for figures use `rtax report FILE`")
        from rtax_tui.ui.app import run_console_replay

        return run_console_replay(args.file, args.speed)
    if cmd == "home":
        from rtax_tui.engine.profile import load_profile, resolve_profile_path

        path = resolve_profile_path(args.profile) if args.profile else None
        if path is not None:
            load_profile(path)  # a bad profile: one line naming it, before the terminal
        if not _interactive():
            raise RtaxError("home needs a terminal; without one use `rtax run PROFILE`")
        from rtax_tui.ui.app import run_console_home

        flags = _ssh_flags(args)  # for the ssh:// hosts the launcher checks and runs on
        return run_console_home(str(path) if path else None, args.host, flags)
    if cmd == "report":
        return _report(args)
    if cmd == "compare":
        return _compare(args)
    if cmd == "project":
        return _project(args)
    if cmd == "probe":
        return _probe(args, ["rtax", *argv])
    if cmd == "traj":
        from rtax_tui.commands.traj_cli import run_traj

        return run_traj(args, ["rtax", *argv])
    if cmd == "plot":
        from rtax_tui.commands.plot_cli import run_plot

        return run_plot(args)
    if cmd == "serve":
        from rtax_tui.commands.serve import run_serve

        return run_serve(args, _check_console)
    if cmd == "doctor":
        from rtax_tui.commands.doctor import run_doctor

        return run_doctor(args)
    if cmd == "assets":
        return _assets(args)
    if cmd == "cleanup":
        return _cleanup(args)
    if cmd == "images":
        return _images(args)
    raise RtaxError(f"unknown command {cmd!r}")


def _images(args: argparse.Namespace) -> int:
    """`rtax images build`: each named driver's image, as the driver declares it
    (`Driver.image_recipe`); an image two drivers share is built once. A failed build
    names the daemon the driver needs and how to start it."""
    from rtax_tui.drivers import registry

    wanted = args.driver or ["docker"]
    recipes = registry.image_recipes()
    known = set(registry.names()) | set(recipes)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        print(
            f"rtax images: error: --driver: unknown {', '.join(map(repr, unknown))} "
            f"(drivers and images: {', '.join(sorted(known))})",
            file=sys.stderr,
        )
        return 2
    done: set[str] = set()
    for name in wanted:
        recipe = recipes.get(name)
        if recipe is None:
            print(f"{name}: starts from no image, nothing to build", file=sys.stderr)
            continue
        if recipe.kind in done:
            continue
        done.add(recipe.kind)
        try:
            tags = recipe.build(args.force, lambda m: print(m, file=sys.stderr))
        except RtaxError as exc:
            daemon = registry.daemon_of(name)
            hint = f" (it needs {daemon.name}: {daemon.start})" if daemon else ""
            raise RtaxError(f"{exc}{hint}") from exc
        print("\n".join(tags))
    return 0


def _run_profile(name: str, args: argparse.Namespace, argv: list[str]) -> int:
    from rtax_tui.commands.headless import run_headless

    profile = _profile_for(name, args)
    output = getattr(args, "output", None)
    headless = getattr(args, "headless", False) or output == "-" or getattr(args, "control", False)
    if headless or not _interactive():
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


def _thresholds_of(profile: Profile, args: argparse.Namespace) -> list[Any]:
    from rtax_tui.commands.gating import parse_thresholds

    return parse_thresholds(profile.to_dict(), getattr(args, "threshold", None) or [])


def _profile_for(name: str, args: argparse.Namespace) -> Profile:
    """The profile `name` with the command line's overrides."""
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
        pool=_pool_override(profile, getattr(args, "pool", None)),
        **host_overrides(args),
    )
    if getattr(args, "sizes", None):
        profile = profile.with_sizes(args.sizes)
    return profile


CONSOLES = (None, "run", "replay", "home")  # what `rtax serve ARGS` may serve


def _check_console(argv: list[str]) -> None:
    """What the console of `rtax serve ARGS` loads first, loaded now (nothing started):
    a bad flag, profile or recording is one line before serving, not a page per tab."""
    args = build_parser().parse_args(argv)
    if args.command not in CONSOLES:
        raise RtaxError(
            f"serve: `rtax {args.command}` is not a console; try `replay FILE` or `run P`"
        )
    if args.command == "replay":
        from rtax_tui.model.recording import read_recording

        read_recording(args.file)
        return
    from rtax_tui.engine.profile import load_profile, resolve_profile_path

    if args.command == "home":
        if args.profile:
            load_profile(resolve_profile_path(args.profile))
        return
    _profile_for("default" if args.command is None else args.profile, args)


def _pool_override(profile: Profile, size: int | None) -> PoolSpec | None:
    """`--pool N`: the profile's [pool] (or the defaults) with size N; None without it."""
    if size is None:
        return None
    from dataclasses import replace

    return replace(profile.pool_spec, size=size)


def _interactive() -> bool:
    """A terminal, or the browser's (`rtax serve`: Textual's web driver)."""
    web = os.environ.get("TEXTUAL_DRIVER", "").endswith(":WebDriver")
    return web or (sys.stdin.isatty() and sys.stdout.isatty())


def _run_console(name: str, profile: object, args: argparse.Namespace, output: str | None) -> int:
    """The console starts the engine as its own process on the same profile and flags."""
    from pathlib import Path

    from rtax_tui.commands.headless import default_output
    from rtax_tui.engine.profile import resolve_profile_path
    from rtax_tui.ui.app import run_console_live
    from rtax_tui.ui.feeds import engine_argv

    record = Path(output) if output else default_output(profile)  # type: ignore[arg-type]
    if record.exists():
        raise RtaxError(f"{record}: already exists; rtax never overwrites a recording")
    overrides: list[str] = []
    for flag, key in (("--seed", "seed"), ("--trials", "trials"), ("--warmup", "warmup"),
                      ("--concurrency", "concurrency"), ("--pool", "pool")):  # fmt: skip
        v = getattr(args, key, None)
        if v is not None:
            overrides += [flag, str(v)]
    for flag, key in (("--driver", "driver"), ("--workload", "workload"), ("--channel", "channel"),
                      ("--host", "host"), ("--arrival", "arrival"),
                      ("--image", "image")):  # fmt: skip
        v = getattr(args, key, None)
        if v:
            overrides += [flag, ",".join(v)]
    overrides += _ssh_flags(args)
    if getattr(args, "sizes", None):
        overrides += ["--sizes", ",".join(map(str, args.sizes))]
    path = str(resolve_profile_path(name))
    thresholds = _thresholds_of(profile, args)  # type: ignore[arg-type]
    summary, junit = getattr(args, "summary", None), getattr(args, "junit", None)
    rc = run_console_live(
        getattr(profile, "name", name),
        engine_argv(path, overrides, str(record)),
        str(record),
        ssh_flags=_ssh_flags(args),
    )
    if rc == 0 and (thresholds or summary or junit) and record.exists():
        # the gates once the console is closed, as a headless run checks them
        from rtax_tui.analysis.report import build_report
        from rtax_tui.commands.gating import apply_gates
        from rtax_tui.model.recording import read_recording

        rec = read_recording(record)
        if not apply_gates(build_report(rec), lambda: rec, thresholds, summary, junit):
            return 1
    return rc


def _ssh_flags(args: argparse.Namespace) -> list[str]:
    """The SSH flags given, as flags again: for the engine and the checks the console starts."""
    flags: list[str] = []
    for flag, key in (("--identity", "identity"), ("--known-hosts", "known_hosts")):
        v = getattr(args, key, None)
        if v:
            flags += [flag, str(v)]
    if getattr(args, "trust_new_hosts", False):
        flags.append("--trust-new-hosts")
    return flags


def _add_gate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="EXPR",
        help="a gate, e.g. 'stage/t0/exec create+ready p95 < 20ms', 'failed == 0', "
        "'fidelity >= 0.8' (repeatable; with the profile's [thresholds]): exit 1 on a breach",
    )
    p.add_argument(
        "--summary",
        metavar="FILE",
        help="append the report and the gates in Markdown to FILE (e.g. $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument(
        "--junit", metavar="FILE", help="write the gates as JUnit XML (a testcase per threshold)"
    )


def _report(args: argparse.Namespace) -> int:

    from rtax_tui.analysis.report import report_file
    from rtax_tui.commands.gating import apply_gates, parse_thresholds, refuse_inputs
    from rtax_tui.model.recording import read_header, read_recording
    from rtax_tui.render.reporting import out_console, print_report, render_csv, render_markdown

    refuse_inputs({"--summary": args.summary, "--junit": args.junit}, [args.file])
    # the recorded profile's [thresholds], then the command line's
    thresholds = parse_thresholds(read_header(args.file).get("profile"), args.threshold)
    report = report_file(args.file, fidelity_min=args.fidelity_min / 100)
    # the whole recording only for a figure the report has not (create+ready)
    held = apply_gates(
        report, lambda: read_recording(args.file), thresholds, args.summary, args.junit
    )
    if args.format == "json":
        output.print_json(report)
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(report))
    elif args.format == "csv":
        sys.stdout.write(render_csv(report))
    else:
        print_report(report, out_console())
    return 0 if held else 1


def _compare(args: argparse.Namespace) -> int:

    from rtax_tui.analysis.gates import judge, parse_min_effect, regressions
    from rtax_tui.analysis.report import compare_reports
    from rtax_tui.commands.gating import refuse_inputs
    from rtax_tui.model.recording import read_recording
    from rtax_tui.render.reporting import compare_markdown, out_console, render_compare

    refuse_inputs({"--summary": args.summary, "--junit": args.junit}, [args.a, args.b])
    min_effect = parse_min_effect(args.min_effect)
    rec_a, rec_b = read_recording(args.a), read_recording(args.b)
    cmp = compare_reports(rec_a, rec_b, changed=args.changed, min_effect=min_effect)
    if not cmp["rows"]:  # an empty table that exits 0 would read as "no difference"
        raise RtaxError(
            f"{args.a} and {args.b}: no cell with samples in common "
            "(compare runs of the same host, driver, workload and channel"
            + ("" if args.changed else "; --changed pairs cells that differ in one of them")
            + ")"
        )
    judge(cmp, min_effect)
    if args.format == "json":
        output.print_json(cmp)
    else:
        out_console().print(render_compare(cmp))
    if args.summary:
        from rtax_tui.commands.gating import append_summary

        append_summary(args.summary, compare_markdown(cmp))
    if args.junit:
        from rtax_tui.commands.gating import compare_junit, write_junit

        write_junit(args.junit, compare_junit(cmp))
    worse = regressions(cmp)
    if args.fail_on == "regression" and worse:
        for r in worse:
            print(
                f"regression: {r['cell']} {r['phase']}: {r['a_p50_ms']:.3f}ms -> "
                f"{r['b_p50_ms']:.3f}ms ({r['diff_ms']:+.3f}ms, p Holm {r['p_holm']:.3g})",
                file=sys.stderr,
            )
        return 1
    return 0


def _project(args: argparse.Namespace) -> int:

    from rtax_tui.analysis.report import project_report
    from rtax_tui.model.recording import read_recording
    from rtax_tui.render.reporting import out_console, render_project

    dist = None
    if args.steps_from:
        if args.steps is not None:
            raise RtaxError("--steps and --steps-from: give one of them")
        from rtax_tui.engine.traj.workload import step_counts

        dist = step_counts(args.steps_from)
    steps = 150 if args.steps is None else args.steps
    proj = project_report(read_recording(args.file), args.trajectories, steps, steps_dist=dist)
    if args.format == "json":
        output.print_json(proj)
    else:
        out_console().print(render_project(proj))
    return 0


def _assets(args: argparse.Namespace) -> int:
    from rtax_tui.drivers.toolkit import assets

    if args.action == "prepare":
        paths = assets.prepare(force=args.force, log=lambda m: print(m, file=sys.stderr))
        print(paths.root)
    else:
        output.print_json(assets.status())
    return 0


def _cleanup(args: argparse.Namespace) -> int:
    """Leftovers of dead runs: what a live run (one holding its run lock, see
    model/runlock.py) made is spared, and `--run` of a live run is refused."""
    from rtax_tui.model import runlock

    if args.run and (args.host is None or "local" in args.host):
        for labels in runlock.live_runs():
            if runlock.safe_label(args.run) in labels:
                print(
                    f"rtax: run {args.run} is still running; stop it first "
                    "(its reaper removes what it made)",
                    file=sys.stderr,
                )
                return 2
    if args.host and "local" not in args.host:  # remote hosts only
        from rtax_tui.commands.hostflags import cleanup_remote_hosts

        n = cleanup_remote_hosts(args)
        if n < 0:
            return 2
        print(f"removed {n} leftovers" if n else "nothing to clean up")
        _print_spared(runlock.take_spared())
        return 0
    from functools import partial

    from rtax_tui.drivers import get_driver
    from rtax_tui.drivers import names as driver_names
    from rtax_tui.hosts import LocalHost, cgroups, names

    chosen = [d for d in driver_names() if not args.driver or d in args.driver]
    unknown = sorted(set(args.driver or ()) - set(driver_names()))
    if unknown:
        print(f"rtax: unknown driver {one_line(', '.join(unknown))}", file=sys.stderr)
        return 2

    total, failed = 0, 0
    for name in chosen:  # each bounded; one that fails or hangs does not stop the others
        n, why = _cleanup_one(name, partial(get_driver, name, LocalHost()), args.run, args.timeout)
        if why is not None:
            failed += 1
            print(
                f"rtax: cleanup: {name}: {why}; what it had not removed is left "
                f"(again: rtax cleanup --driver {name})",
                file=sys.stderr,
            )
            continue
        if n:
            print(f"{name}: removed {n}")
        total += n
    if args.host:
        from rtax_tui.commands.hostflags import cleanup_remote_hosts

        r = cleanup_remote_hosts(args)
        if r < 0:
            return 2
        total += r
    live: list[set[str]] = []

    def spare(name: str) -> bool:  # asked once the candidates are listed
        if not live:
            live.append(runlock.live_labels())
        if names.belongs(name, live[0], names.env_cgroup_prefix, names.batch_cgroup_prefix):
            runlock.note_spared(1)
            return True
        return False

    n = 0
    if args.run:  # only this run's: its budget cgroups and its environments' cgroups
        n = cgroups.cleanup(f"{cgroups.PREFIX}/{names.batch_cgroup_prefix(args.run)}", spare=spare)
        n += cgroups.cleanup(f"{cgroups.PREFIX}/{names.env_cgroup_prefix(args.run)}", spare=spare)
    elif not args.driver:
        n = cgroups.cleanup(spare=spare)
    if n:
        print(f"cgroups: removed {n}")
    if not args.driver:  # image delivery's mounts and servers (a run with image modes)
        from rtax_tui.drivers.toolkit import delivery

        got = delivery.cleanup(None if args.run is None else runlock.safe_label(args.run))
        if got:
            print(f"image delivery: removed {got}")
        n += got
    print(f"removed {total + n} leftovers" if total + n else "nothing to clean up")
    _print_spared(runlock.take_spared())
    return 1 if failed else 0


def _cleanup_one(
    name: str, make: Callable[[], Any], run: str | None, timeout_s: float
) -> tuple[int, str | None]:
    """One driver's cleanup, on a thread and event loop of its own, waited for at most
    `timeout_s`: (what it removed, None), or (0, why it did not finish). A cleanup that
    hangs (a read of /proc that blocks, a daemon that never answers) is left behind on
    its daemon thread; the others still run and rtax still ends."""
    import threading

    got: list[int] = []
    err: list[BaseException] = []

    def work() -> None:
        try:
            got.append(asyncio.run(make().cleanup(run)))
        except BaseException as exc:  # reported by the caller as one line
            err.append(exc)

    t = threading.Thread(target=work, name=f"cleanup-{name}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return 0, f"did not finish within {timeout_s:g} s"
    if err:
        exc = err[0]
        return 0, f"failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return got[0], None


def _print_spared(n: int) -> None:
    if n:
        print(f"spared {n} of live runs")
