"""`rtax reproduce [STUDY]`: a published study's experiments run here, its figures beside
ours. The figures and the experiment of each are data (`rtax_tui/data/studies/`,
`analysis/studies.py`); the runs are `rtax run`'s and `rtax traj prepare`'s own, called
in this process; what cannot run here (`rtax doctor`'s checks) is a row that says why."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtax_tui.commands.command import Command
from rtax_tui.model.events import one_line
from rtax_tui.model.spec import RtaxError

if TYPE_CHECKING:
    from rtax_tui.analysis.studies import Experiment, Study

SIZES = ("quick", "full")

EPILOG = """\
studies (rtax_tui/data/studies/*.toml, each figure with its source):
  pvisor   pVisor's executor analysis: capacity, completion, ready, prefix preparation,
           the lazy cold client shell (--image lazy: root, nginx, rclone, squashfs-tools;
           the run makes the image and the content server), the workspace boundary
           (rtax probe's workspace and host-file checks)
  paper    "The Rollout Infrastructure Tax in Coding-Agent RL" (arXiv 2607.01415):
           T0/T1/T2 cold-start spread, trajectories of 10/50/150 actions, warm pools
           beside cold starts, the projection table; its figures 1-5 redrawn

--size quick (each study well under 15 minutes on a 2-core machine; docs/reproduce.md):
  pvisor: completion T2 and T0 5 trials + 1 warm-up per driver; ready T0 and T1 shell
          20 + 3; capacity 1 batch per size (16, 32); prefix preparation 3 repeats,
          20 prefixes; lazy shell 5 + 1; the probe once a channel (either size)
  paper:  T0, T1, T2 5 trials + 1 warm-up per driver; trajectories 3 + 1; T0 cold and
          pooled 10 + 1
--size full: the study's own counts (pvisor: 60 trials + 3 warm-ups, 5 batches,
  3 repeats, lazy 30 + 3; paper: 100 trials + 3 warm-ups); long: hours with VMs
  under TCG

Writes reproduce-<study>-<UTC time>/ (under --root): each experiment's recording,
report.md, report.json (format rtax-reproduce/1) and the study's figures in plots/
(rtax plot's figures of those recordings). Progress on stderr.

examples:
  rtax reproduce                      the studies, their tables and rows
  rtax reproduce pvisor --size quick
  rtax reproduce paper --size quick --driver local,stage
"""


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _size(value: str) -> str:
    if value not in SIZES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(SIZES)}, got {value!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", nargs="?", help="pvisor or paper; none: list what can be reproduced")
    p.add_argument("--size", type=_size, default="quick", help="quick (default) or full")
    p.add_argument(
        "--driver",
        type=_csv,
        metavar="D,..",
        help="only these drivers (the others' rows say they were left out)",
    )
    p.add_argument(
        "--root",
        default=".",
        metavar="DIR",
        help="where reproduce-<study>-<time>/ is made (default .)",
    )
    p.add_argument(
        "--live",
        metavar="FILE",
        help="keep FILE the study's tables as they fill (JSON, rewritten whole as each "
        "experiment starts and ends; at the end report.json's document): the console's view",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="stdin is the console's: its end (the console gone, even killed) stops the "
        "study as ^C does (what was recorded kept, report.json written)",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    # deferred: the studies, the engine's run and the tables, imports `rtax --help` skips
    from rtax_tui.analysis.studies import load_study, study_names

    if args.study is None:
        return _list([load_study(n) for n in study_names()])
    study = load_study(args.study)
    live = Path(args.live) if args.live else None
    if args.control:
        _stop_when_stdin_ends()
    return reproduce(study, args.size, args.driver, Path(args.root), argv, live)


class _ConsoleStop:
    """The console's stop (its stdin's end) delivered as ^C only while the study's runs are
    under way (armed: inside the `try` that keeps what ran and writes report.json). An end
    that comes before (stdin already ended at the start) is held and raised when the runs
    arm, inside that `try`; one after they end is dropped: the report is being written."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._armed = False
        self._ended = False

    def ended(self) -> None:
        """The watcher's: stdin ended without a `stop` first."""
        import signal

        with self._lock:
            self._ended = True
            if self._armed:  # under the lock: `disarm` cannot slip between check and kill
                os.kill(os.getpid(), signal.SIGINT)

    def arm(self) -> None:
        """The main thread's, first thing inside the `try`: raises KeyboardInterrupt for an
        end that came before."""
        with self._lock:
            self._armed = True
            if self._ended:
                raise KeyboardInterrupt

    def disarm(self) -> None:
        """The main thread's, last thing inside the `try` (and first in its handler)."""
        with self._lock:
            self._armed = False


_CONSOLE = _ConsoleStop()


def _stop_when_stdin_ends() -> None:
    """The console went away (its end of stdin closed, as when it is killed): the study
    is stopped as ^C stops it, not left running alone for hours. Its stderr, the console's
    pipe that nobody reads any more, becomes /dev/null first: a progress line written to
    it would end rtax reproduce (EPIPE) before report.json. A `stop` line first (the
    console's own ^C on its way) and the end sends none. A thread with blocking reads
    (a daemon: one still blocked when the study ends holds nothing up); the ^C goes
    through `_CONSOLE`, only while the runs are armed.

    The ^C is SIGINT, which a process started in the background of a shell without job
    control inherits as ignored (Python then installs no handler): the console's own ^C
    and the end's would do nothing, so here it is KeyboardInterrupt again."""
    import signal
    import threading

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch() -> None:
        seen, asked = 0, False  # asked: the console said `stop` before its own ^C
        while seen <= 1 << 16:  # endless input (`</dev/zero`) is no console: as its end
            try:
                chunk = os.read(0, 4096)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break  # anything written is no command: only the end counts
            seen += len(chunk)
            asked = asked or b"stop" in chunk
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        if not asked:  # a second ^C would end the study before its report.json
            _CONSOLE.ended()

    threading.Thread(target=watch, name="rtax-reproduce-control", daemon=True).start()


def _list(studies: list[Study]) -> int:
    from rtax_tui.analysis.studies import published_text
    from rtax_tui.render.reporting import out_console

    out = out_console()
    for s in studies:
        out.print(f"{s.name}: {s.title}", markup=False, highlight=False)
        out.print(f"  source: {s.source}", markup=False, highlight=False)
        for t in s.tables:
            out.print(f"  {t.title}", markup=False, highlight=False)
            for r in (r for r in s.rows if r.table == t.id):
                e = s.experiments[r.experiment]
                how = "rtax " + " ".join(e.flags("quick")) if e.flags("quick") else e.why or e.what
                out.print(f"    {r.label}: {published_text(r)}  <- {how}", markup=False,
                          highlight=False, soft_wrap=True)  # fmt: skip
    return 0


def reproduce(
    study: Study,
    size: str,
    only: list[str] | None,
    root: Path,
    argv: list[str],
    live: Path | None = None,
) -> int:
    """Runs the study's experiments, then writes and prints its tables; `live`: a file
    kept the tables as they stand (`reproduce_document`'s, its rows waiting or running
    until their experiment ends), for the console."""
    import orjson

    from rtax_tui.analysis.studies import Results, machine_conditions, reproduce_document
    from rtax_tui.commands.doctor import driver_problems
    from rtax_tui.render.reporting import out_console
    from rtax_tui.render.reproduce_render import render_reproduce, reproduce_markdown

    root = _own_root(root)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out_dir = root / f"reproduce-{study.name}-{stamp}"
    try:
        out_dir.mkdir(parents=True)
    except FileExistsError:
        raise RtaxError(f"{out_dir}: already exists") from None
    except OSError as exc:
        raise RtaxError(f"--root {root}: cannot make {out_dir.name} ({exc.strerror})") from None
    wanted = sorted({d for e in study.experiments.values() for d in e.drivers})
    res = Results(machine=machine_conditions())
    for d in wanted:
        if only is not None and d not in only:
            res.drivers_out[d] = "left out by --driver"
    _say(f"reproduce {study.name} ({size}): checking drivers (rtax doctor's checks)")
    res.drivers_out.update(driver_problems([d for d in wanted if d not in res.drivers_out]))
    todo = [e for e in study.experiments.values() if e.kind in ("run", "prepare", "probe")]
    started = time.monotonic_ns()
    res.live = {e.id: {"status": "waiting"} for e in todo}

    def show(running: Experiment | None = None) -> None:
        if live is not None:
            now = reproduce_document(study, res, size)
            now["directory"] = str(out_dir)
            now["state"] = "running"
            now["running"] = None
            if running is not None:
                rec = str(out_dir / f"{running.id}.jsonl")
                now["running"] = {"experiment": running.id, "recording": rec}
            _write_live(live, now)

    show()
    status = 0
    try:
        _CONSOLE.arm()
        status = _run_all(todo, size, res, out_dir, argv, show)
        _CONSOLE.disarm()
    except KeyboardInterrupt:
        _CONSOLE.disarm()
        # a stop between two experiments (or as one is set up): what ran is kept and the
        # report written below, as for a stop during an experiment
        for e in todo:
            if e.id not in res.recordings and e.id not in res.not_run:
                res.not_run[e.id] = "interrupted"
                break
        status = 130
    res.live.clear()
    doc = reproduce_document(study, res, size)
    doc["directory"] = str(out_dir)

    def write() -> None:
        doc["elapsed_s"] = (time.monotonic_ns() - started) / 1e9
        (out_dir / "report.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        (out_dir / "report.md").write_text(reproduce_markdown(doc), encoding="utf-8")
        if live is not None:
            _write_live(live, {**doc, "state": "done", "status": status, "running": None})

    write()  # the numbers first: whatever the drawing does, they are kept
    if status != 130 and study.figures:
        _say(f"reproduce {study.name}: drawing {len(study.figures)} figures")
        doc["figures"] = draw_figures(study, res, out_dir)
        write()
    console = out_console()
    for table in render_reproduce(doc):
        console.print(table)
    _say(f"reproduce: {out_dir} ({doc['elapsed_s']:.0f} s)")
    return status


def _run_all(
    todo: list[Experiment],
    size: str,
    res: Any,
    out_dir: Path,
    argv: list[str],
    show: Callable[..., None],
) -> int:
    """Each experiment in turn into `out_dir`, its recording read into `res`; 130 once one
    was interrupted (the rest not run)."""
    from rtax_tui.model.recording import read_recording

    status = 0
    for i, exp in enumerate(todo, 1):
        path = out_dir / f"{exp.id}.jsonl"
        _say(f"[{i}/{len(todo)}] {exp.id}: {exp.what}")

        def begun(planned: int | None, exp: Experiment = exp) -> None:
            res.live[exp.id] = {"status": "running", "done": 0, "of": planned}
            show(exp)

        try:
            rc = _run_experiment(exp, size, res.drivers_out, path, argv, begun)
        except RtaxError as exc:
            res.live.pop(exp.id, None)
            res.not_run[exp.id] = str(exc)
            _say(f"[{i}/{len(todo)}] {exp.id}: not run: {exc}")
            show()
            continue
        res.live.pop(exp.id, None)
        if path.exists():
            res.recordings[exp.id] = read_recording(path)
        if rc == 130:
            res.not_run[exp.id] = "interrupted"
            status = 130
            break
        show()
    return status


FIGURES_DIR = "plots"


def _write_live(path: Path, doc: dict[str, Any]) -> None:
    """`--live`'s file, replaced whole (a reader sees the old tables or the new ones)."""
    import orjson

    # a new file of an unforeseeable name, made by this call (O_EXCL), in FILE's directory:
    # a fixed `.FILE.tmp` could be a symlink planted by whoever else can write there, and
    # writing through it would write where it points
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(doc))
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise RtaxError(f"--live {one_line(str(path))}: {exc.strerror}") from None


def draw_figures(study: Study, res: Any, out_dir: Path) -> list[dict[str, Any]]:
    """The study's figures, each drawn by `rtax plot`'s code from the recordings of its
    experiments into `<out_dir>/plots/<id>-<kind>.svg`; one that cannot be drawn (its
    experiment did not run, no measured trial) says why instead."""
    from rtax_tui.render.plots import plot

    if study.figures:
        (out_dir / FIGURES_DIR).mkdir(exist_ok=True)
    out = []
    for f in study.figures:
        recs = [res.recordings[e] for e in f.experiments if e in res.recordings]
        entry: dict[str, Any] = {
            "id": f.id,
            "kind": f.kind,
            "title": f.title,
            "experiments": list(f.experiments),
            "file": None,
            "why": None,
        }
        missing = [e for e in f.experiments if e not in res.recordings]
        if not recs:
            entry["why"] = f"not drawn: {', '.join(missing)} left no recording"
        else:
            name = f"{FIGURES_DIR}/{f.id}-{f.kind}.svg"
            try:
                plot(recs, f.kind, out_dir / name)
                entry["file"] = name
                if missing:
                    entry["why"] = f"without {', '.join(missing)}: no recording"
            except RtaxError as exc:
                entry["why"] = f"not drawn: {exc}"
        out.append(entry)
    return out


def _own_root(root: Path) -> Path:
    """`--root`, resolved, when no other user can rename what is in it or in a directory
    above it: each that exists is this user's or root's, and writable by no one else
    unless sticky (as /tmp); the missing ones this user makes. rtax writes reproduce-*/
    there for hours, often as root; another user who could swap that directory for
    their own (a `report.json` linking to a file of root's) would have root write
    through the link. RtaxError: whose it is and why."""
    try:
        path = root.resolve()
    except (OSError, RuntimeError) as exc:
        raise RtaxError(f"--root {root}: {getattr(exc, 'strerror', None) or exc}") from None
    me = os.geteuid()
    for d in (path, *path.parents):
        try:
            st = d.stat()
        except FileNotFoundError:  # made below, by this user
            continue
        except OSError as exc:
            raise RtaxError(f"--root {root}: {d}: {exc.strerror}") from None
        if st.st_uid not in (me, 0):
            raise RtaxError(f"--root {root}: {d} is user {st.st_uid}'s, who could swap "
                            "what rtax writes there; give a directory of yours")  # fmt: skip
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise RtaxError(f"--root {root}: {d} is writable by other users (and not "
                            "sticky), who could swap what rtax writes there")  # fmt: skip
    return path


def _say(line: str) -> None:
    """A line of progress on stderr, as text: it may name --root, whose name may hold
    terminal sequences (`one_line` shows them as `\\xNN`)."""
    print(one_line(line), file=sys.stderr, flush=True)


def _run_experiment(
    exp: Experiment,
    size: str,
    drivers_out: dict[str, str],
    path: Path,
    argv: list[str],
    begun: Callable[[int | None], None] = lambda planned: None,
) -> int:
    """One experiment through rtax's own machinery, recorded at `path`; RtaxError: why
    it could not run here. `begun(planned)`: it starts, with its trials planned (warm-ups
    and capacity tasks included) where a run's profile says them, else None."""
    from rtax_tui.analysis.studies import studies_dir

    counts = exp.counts.get(size, {})
    if exp.kind == "prepare":
        from rtax_tui.commands.traj_cli import write_prepare

        checkout = studies_dir().parent.parent.parent
        inputs = [str(checkout / p) for p in exp.paths]
        missing = [p for p in inputs if not Path(p).exists()]
        if missing:
            raise RtaxError(f"{missing[0]}: not here (the trajectories ship with a checkout)")
        begun(None)
        write_prepare(
            path,
            inputs,
            repeat=counts.get("repeat", 3),
            shuffle=True,
            seed=0,
            max_prefixes=counts.get("max_prefixes", 20),
            argv=argv,
        )
        return 0
    from rtax_tui.commands.headless import run_headless, run_probe_command
    from rtax_tui.engine.profile import Profile, load_profile, resolve_profile_path

    drivers = [d for d in exp.drivers if d not in drivers_out]
    if not drivers:
        raise RtaxError("no driver of this experiment works here")
    if exp.kind == "probe":  # `rtax probe --driver D,.. --channel C,.. -o PATH`, no table
        channels = list(exp.channels) or ["exec", "shell"]
        profile = Profile(name="probe", path="rtax probe", hosts=("local",))
        begun(None)
        return run_probe_command(drivers, channels, profile, fmt=None, output=str(path),
                                 argv=argv)  # fmt: skip
    if exp.images:
        image_problem(exp.images)
    profile = load_profile(resolve_profile_path(str(exp.profile))).with_overrides(
        drivers=drivers,
        workloads=list(exp.workloads) or None,
        channels=list(exp.channels) or None,
        trials=counts.get("trials"),
        warmup=counts.get("warmup"),
        images=list(exp.images) or None,
    )
    if exp.sizes:
        profile = profile.with_sizes(exp.sizes)
    if exp.pool is not None or exp.modes:
        from rtax_tui.engine.poolspec import check_modes

        pool = replace(profile.pool_spec, size=exp.pool) if exp.pool is not None else None
        modes = check_modes(list(exp.modes), exp.id) if exp.modes else profile.modes
        profile = replace(profile, pool=pool or profile.pool, modes=modes)
    if "batches" in counts and profile.capacity is not None:
        profile = replace(profile, capacity=replace(profile.capacity, batches=counts["batches"]))
    begun(_planned(profile))
    return run_headless(profile, str(path), argv, quiet=True)


def _planned(profile: Any) -> int:
    """The trials a run plans (its `trial_start`s), as the profile's check counts them."""
    cells = len(profile.hosts) * len(profile.drivers) * len(profile.workloads)
    cells *= len(profile.channels) * len(profile.run_modes) * len(profile.arrivals)
    cells *= max(1, len(profile.images))
    cap = profile.capacity
    if cap is not None:
        return int(cells * (sum(cap.curve) * cap.batches + min(cap.curve)))
    return int(cells * (profile.trials + profile.warmup))


def image_problem(modes: tuple[str, ...]) -> None:
    """What image delivery needs that a run does not set up itself, as the one command
    that does (RtaxError): root (it mounts), and nginx, rclone, squashfs-tools and fuse.
    The rest the run makes: the image's squashfs (from the workload root, once), the
    content server on loopback and, for docker's pull, the registry behind it."""
    from rtax_tui.drivers.toolkit import delivery

    if os.geteuid() != 0:
        raise RtaxError(f"--image {','.join(modes)} mounts images: run rtax reproduce as root")
    lacking = delivery.missing_tools()
    if lacking:
        raise RtaxError(f"image delivery needs {', '.join(lacking)}: "
                        f"apt-get install {' '.join(lacking)}")  # fmt: skip


COMMAND = Command(
    "reproduce",
    "run a published study's experiments here, ours beside theirs",
    add_arguments,
    run,
    epilog=EPILOG,
)
