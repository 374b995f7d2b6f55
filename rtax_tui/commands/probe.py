"""`rtax probe`: what each driver keeps out, measured from inside its environments."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence

from rtax_tui.commands.command import Command
from rtax_tui.commands.hostflags import add_host_flags, host_overrides
from rtax_tui.drivers import names as driver_names
from rtax_tui.model.checks import CHECKS
from rtax_tui.model.spec import CHANNELS, RtaxError

PROBE_FORMATS = ("table", "json", "markdown")


def _probe_help() -> str:
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


def add_arguments(pb: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the engine's run and the profile's reader, 88 ms of imports that
    # `rtax --help` does not make
    from rtax_tui.commands.headless import run_probe_command
    from rtax_tui.engine.profile import Profile, load_profile, resolve_profile_path

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


COMMAND = Command(
    "probe",
    "measure what each driver keeps out, from inside",
    add_arguments,
    run,
    description="rtax probe: measure each driver's boundary from inside.",
    epilog=_probe_help(),
    path_names={"profile": "--profile"},
)
