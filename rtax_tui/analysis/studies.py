"""The published studies rtax reproduces (`rtax reproduce`): their figures, read from
data files (`rtax_tui/data/studies/*.toml`, each with its source), and ours beside them.

A study file holds `experiments` (the rtax run that reproduces a figure: a built-in
profile and the flags of `rtax run`, `rtax traj prepare`, rtax project's arithmetic, or
none with the reason), `tables` (the study's, with the conditions it states) and `rows`
(one published figure each, the experiment and the figure of it that answers it). Here
they are loaded and checked, and each row's figure is taken from the recordings through
the one report builder (`analysis.report`), so `rtax report` on the same recordings
shows the same numbers."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtax_tui.analysis.report import build_report, project_report, startup_figures
from rtax_tui.analysis.report_model import Report
from rtax_tui.analysis.stats import project
from rtax_tui.model.events import one_line
from rtax_tui.model.recording import Recording
from rtax_tui.model.spec import RtaxError

SIZES = ("quick", "full")
KINDS = ("run", "prepare", "probe", "arithmetic", "pending", "unavailable")
FIGURES = (
    "total",
    "ready",
    "diff",
    "capacity",
    "spread",
    "prep",
    "prep-low",
    "prep-high",
    "projection",
    "startup",
    "pool",
    "trajectory",
    "project",
    "project-gap",
    "image",
    "boundary",
    "pending",
    "unavailable",
)
# a row's figure differs from the published one beyond this factor, either way: said so
FAR = 2.0
VM_DRIVERS = ("libvirt", "microvm")
VM_NOTE = "VMs under TCG where KVM guests hang (see `rtax doctor`'s KVM line)"
LOCAL_NOTE = "`local` left out of the spread: it keeps nothing out"
MIB = 1 << 20
# what the study states of its setup (a table's `setup`), and where a run's recording
# says ours: a key of the recorded profile, dotted into its tables
SETUP_KEYS = {
    "warmup": ("warmup", "warm-ups a cell"),
    "batches": ("capacity.batches", "batches a size"),
    "cpus": ("capacity.cpus", "the batch's CPUs"),
    "memory_mib": ("capacity.memory_mib", "the batch's memory (MiB)"),
    "swap_mib": ("capacity.swap_mib", "the batch's swap (MiB)"),
    "touch_mib": ("capacity.touch_mib", "private memory held a task (MiB)"),
}
# a figure a study redraws from our recordings: rtax plot's kinds (render.plots.KINDS)
FIGURE_KINDS = ("breakdown", "cold-start", "cdf", "trajectory", "capacity")
PROJECT_N = 1_000_000  # the paper's projection: a million rollouts
PROJECT_STEPS = 150  # of 150 steps


def studies_dir() -> Path:
    """The study files: package data beside the analysis (installed or in a checkout)."""
    return Path(__file__).resolve().parent.parent / "data" / "studies"


def study_names() -> list[str]:
    return sorted(p.stem for p in studies_dir().glob("*.toml"))


@dataclass(frozen=True)
class Experiment:
    id: str
    what: str
    kind: str = "run"
    profile: str | None = None
    drivers: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    paths: tuple[str, ...] = ()
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # size -> counts
    differs: tuple[str, ...] = ()
    why: str | None = None
    modes: tuple[str, ...] = ()  # cold, pool: `[run] modes` (none: the profile's)
    pool: int | None = None  # environments a pooled cell keeps ready (`--pool N`)
    images: tuple[str, ...] = ()  # image modes (`--image`): cached, pull, lazy

    def flags(self, size: str) -> list[str]:
        """The experiment as `rtax run` (or `rtax traj prepare`) flags, as a user types it."""
        c = self.counts.get(size, {})
        if self.kind == "prepare":
            return [
                "traj", "prepare", *self.paths, "--shuffle",
                "--repeat", str(c.get("repeat", 3)),
                "--max-prefixes", str(c.get("max_prefixes", 20)),
            ]  # fmt: skip
        if self.kind == "probe":
            out = ["probe"]
            for flag, items in (("--driver", self.drivers), ("--channel", self.channels)):
                if items:
                    out += [flag, ",".join(items)]
            return out
        if self.kind != "run":
            return []
        out = ["run", str(self.profile), "--headless"]
        for flag, items in (("--driver", self.drivers), ("--workload", self.workloads),
                            ("--channel", self.channels)):  # fmt: skip
            if items:
                out += [flag, ",".join(items)]
        for key in ("trials", "warmup"):
            if key in c:
                out += [f"--{key}", str(c[key])]
        if self.sizes:
            out += ["--sizes", ",".join(map(str, self.sizes))]
        if self.images:
            out += ["--image", ",".join(self.images)]
        if self.pool is not None:
            out += ["--pool", str(self.pool)]
        if self.modes:  # no flag of `rtax run` says it: the profile's [run] modes
            out.append(f"([run] modes = {','.join(self.modes)})")
        if "batches" in c:  # no flag of `rtax run` says it: the profile's [capacity] batches
            out.append(f"([capacity] batches = {c['batches']})")
        return out


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    conditions: str
    setup: dict[str, Any] = field(default_factory=dict)  # SETUP_KEYS: the study's values


@dataclass(frozen=True)
class Figure:
    """One of the study's figures, redrawn from our recordings with `rtax plot`'s kind."""

    id: str
    kind: str
    title: str
    experiments: tuple[str, ...]


@dataclass(frozen=True)
class Row:
    table: str
    label: str
    experiment: str
    figure: str
    fields: dict[str, Any]  # everything else the row says (published, n, driver, ...)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class Study:
    name: str
    path: Path
    title: str
    source: str
    experiments: dict[str, Experiment]
    tables: tuple[Table, ...]
    rows: tuple[Row, ...]
    figures: tuple[Figure, ...] = ()


def load_study(name: str) -> Study:
    """The study `name`, checked: an unknown name, or a row that names no experiment or
    table, is one line naming the file and the field."""
    if name.endswith(".toml"):  # a study file of the user's own (a test's tiny study)
        path = Path(name)
        name = path.stem
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not path.is_file():
            raise RtaxError(f"{one_line(str(path))}: not a study file (NAME.toml, NAME of "
                            "letters, digits, - and _)")  # fmt: skip
    elif name not in study_names():
        raise RtaxError(f"unknown study {name!r} (known: {', '.join(study_names())})")
    else:
        path = studies_dir() / f"{name}.toml"
    with path.open("rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise RtaxError(f"{path}: {exc}") from None

    def need(obj: dict[str, Any], key: str, where: str, kind: type = str) -> Any:
        if not isinstance(obj.get(key), kind):
            raise RtaxError(f"{path}: {where}.{key}: expected a {kind.__name__}")
        return obj[key]

    exps: dict[str, Experiment] = {}
    for eid, e in (doc.get("experiments") or {}).items():
        where = f"experiments.{eid}"
        if not EXPERIMENT_ID.fullmatch(eid):  # it names its recording in the report's directory
            raise RtaxError(f"{path}: experiments: {one_line(repr(eid))} (letters, digits, "
                            "'-' and '_', at most 64)")  # fmt: skip
        kind = e.get("kind", "run")
        if kind not in KINDS:
            raise RtaxError(f"{path}: {where}.kind: {kind!r} (known: {', '.join(KINDS)})")
        if kind == "run":
            need(e, "profile", where)
        if kind in ("pending", "unavailable"):
            need(e, "why", where)
        if kind == "probe":
            need(e, "drivers", where, list)
        for mode in e.get("images", ()):
            if mode not in IMAGE_MODES:
                raise RtaxError(f"{path}: {where}.images: unknown {mode!r} "
                                f"(known: {', '.join(IMAGE_MODES)})")  # fmt: skip
        exps[eid] = Experiment(
            id=eid,
            what=need(e, "what", where),
            kind=kind,
            profile=e.get("profile"),
            drivers=tuple(e.get("drivers", ())),
            workloads=tuple(e.get("workloads", ())),
            channels=tuple(e.get("channels", ())),
            sizes=tuple(e.get("sizes", ())),
            paths=tuple(e.get("paths", ())),
            counts={s: dict(e[s]) for s in SIZES if s in e},
            differs=tuple(e.get("differs", ())),
            why=e.get("why"),
            modes=tuple(e.get("modes", ())),
            pool=e.get("pool"),
            images=tuple(e.get("images", ())),
        )
    tables = tuple(
        Table(
            need(t, "id", f"tables[{i}]"),
            need(t, "title", f"tables[{i}]"),
            need(t, "conditions", f"tables[{i}]"),
            _setup(path, t.get("setup") or {}, f"tables[{i}]"),
        )
        for i, t in enumerate(doc.get("tables") or [])
    )
    figures = []
    for i, f in enumerate(doc.get("figures") or []):
        where = f"figures[{i}]"
        fid, kind = need(f, "id", where), need(f, "kind", where)
        if not FIGURE_ID.fullmatch(fid):  # it names a file in the report's directory
            raise RtaxError(f"{path}: {where}.id: {fid!r} (letters, digits, '-', at most 40)")
        if kind not in FIGURE_KINDS:
            raise RtaxError(f"{path}: {where}.kind: {kind!r} (known: {', '.join(FIGURE_KINDS)})")
        used = tuple(need(f, "experiments", where, list))
        for e in used:
            if e not in exps or exps[e].kind != "run":
                raise RtaxError(f"{path}: {where}.experiments: {e!r} is no run of the study")
        figures.append(Figure(fid, kind, need(f, "title", where), used))
    table_ids = {t.id for t in tables}
    rows = []
    for i, r in enumerate(doc.get("rows") or []):
        where = f"rows[{i}]"
        for key in ("table", "label", "experiment", "figure"):
            need(r, key, where)
        if r["table"] not in table_ids:
            raise RtaxError(f"{path}: {where}.table: {r['table']!r} is no table of the study")
        if r["experiment"] not in exps:
            raise RtaxError(f"{path}: {where}.experiment: {r['experiment']!r} is not defined")
        if r["figure"] not in FIGURES:
            raise RtaxError(
                f"{path}: {where}.figure: {r['figure']!r} (known: {', '.join(FIGURES)})"
            )
        _check_row(path, where, r, exps[r["experiment"]], exps)
        rest = {k: v for k, v in r.items() if k not in ("table", "label", "experiment", "figure")}
        rows.append(Row(r["table"], r["label"], r["experiment"], r["figure"], rest))
    return Study(
        name=name,
        path=path,
        title=need(doc, "title", "study"),
        source=need(doc, "source", "study"),
        experiments=exps,
        tables=tables,
        rows=tuple(rows),
        figures=tuple(figures),
    )


def _check_row(
    path: Path, where: str, r: dict[str, Any], exp: Experiment, exps: dict[str, Experiment]
) -> None:
    """The fields an image, boundary or spread row reads: each known, or one line naming it."""
    from rtax_tui.model.checks import BY_NAME

    for other in r.get("with", []):
        if other not in exps or exps[other].kind != "run":
            raise RtaxError(f"{path}: {where}.with: {other!r} is no run of the study")
    if r["figure"] == "image":
        if r.get("part") not in IMAGE_PARTS:
            raise RtaxError(f"{path}: {where}.part: {r.get('part')!r} "
                            f"(known: {', '.join(IMAGE_PARTS)})")  # fmt: skip
        if r.get("mode") not in exp.images:
            raise RtaxError(f"{path}: {where}.mode: {r.get('mode')!r} is no image mode of "
                            f"experiment {exp.id} ({', '.join(exp.images) or 'none'})")  # fmt: skip
    if r["figure"] == "boundary":
        if exp.kind != "probe":
            raise RtaxError(f"{path}: {where}.experiment: {exp.id!r} is no probe")
        for group in ("kept", "outside"):
            names = r.get(group, [])
            if not isinstance(names, list):
                raise RtaxError(f"{path}: {where}.{group}: expected a list of check names")
            for name in names:
                if name not in BY_NAME:
                    raise RtaxError(f"{path}: {where}.{group}: unknown check {name!r} "
                                    "(`rtax probe --help` lists them)")  # fmt: skip
        if not r.get("kept") and not r.get("outside"):
            raise RtaxError(f"{path}: {where}.kept: a boundary row names checks")


FIGURE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
EXPERIMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _setup(path: Path, setup: Any, where: str) -> dict[str, Any]:
    if not isinstance(setup, dict):
        raise RtaxError(f"{path}: {where}.setup: expected a table")
    for key in setup:
        if key not in SETUP_KEYS:
            raise RtaxError(
                f"{path}: {where}.setup.{key}: unknown (known: {', '.join(SETUP_KEYS)})"
            )
    return dict(setup)


# -- ours beside theirs ----------------------------------------------------------------


@dataclass
class Results:
    """What the experiments left: per experiment its recording (read), or why it did
    not run; per driver why it cannot run here (`rtax doctor`'s checks)."""

    recordings: dict[str, Recording] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=dict)
    drivers_out: dict[str, str] = field(default_factory=dict)
    # this machine as the run found it (`machine_conditions`): said beside every figure
    machine: dict[str, Any] = field(default_factory=dict)
    # while `rtax reproduce` runs (its `--live` tables): per experiment not yet done,
    # {"status": "waiting"} or {"status": "running", "done": trials ended, "of": planned}
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    _reports: dict[str, Report] = field(default_factory=dict)
    _startups: dict[str, dict[str, Any]] = field(default_factory=dict)
    _projects: dict[str, dict[str, Any]] = field(default_factory=dict)

    def startups(self, exp: str) -> dict[str, Any]:
        """Per cell, create + ready (a pooled cell's acquire): `startup_figures`."""
        if exp not in self._startups:
            rec = self.recordings.get(exp)
            self._startups[exp] = {} if rec is None else startup_figures(rec)
        return self._startups[exp]

    def projection(self, exp: str) -> dict[str, Any]:
        """Per cell, `rtax project`'s worker-hours for the paper's million 150-step rollouts."""
        if exp not in self._projects:
            rec = self.recordings.get(exp)
            rows = [] if rec is None else project_report(rec, PROJECT_N, PROJECT_STEPS)["cells"]
            self._projects[exp] = {r["cell"]: r for r in rows}
        return self._projects[exp]

    def report(self, exp: str) -> Report | None:
        rec = self.recordings.get(exp)
        if rec is None:
            return None
        if exp not in self._reports:
            self._reports[exp] = build_report(rec)
        return self._reports[exp]


def _cell(report: Report, driver: str, workload: str | None, channel: str | None) -> Any:
    for c in report["cells"]:
        if c["driver"] != driver or c.get("mode") == "pool":
            continue
        if workload is not None and c["workload"] != workload:
            continue
        if channel is not None and c["channel"] != channel:
            continue
        return c
    return None


def _measure(study: Study, row: Row, res: Results) -> dict[str, Any]:
    """Ours for one row: {"p50_ms", "ci95_ms", "n"} or {"value", ...}, or {"why"}."""
    exp = study.experiments[row.experiment]
    if exp.kind in ("pending", "unavailable"):
        return {"status": exp.kind, "why": exp.why}
    driver = row.get("driver")
    for d in (driver, row.get("versus")):
        if d is not None and d in res.drivers_out:
            return {"status": "unavailable", "why": f"{d}: {res.drivers_out[d]}"}
    if row.figure == "projection":
        return _projection(row)
    if row.experiment in res.live:
        return dict(res.live[row.experiment])
    if row.experiment in res.not_run:
        return {"status": "failed", "why": res.not_run[row.experiment]}
    report = res.report(row.experiment)
    if report is None:
        return {"status": "failed", "why": "the experiment left no recording"}
    workload = row.get("workload") or (exp.workloads[0] if len(exp.workloads) == 1 else None)
    channel = row.get("channel") or (exp.channels[0] if len(exp.channels) == 1 else None)
    if row.figure in ("total", "ready"):
        cell = _cell(report, driver, workload, channel)
        if cell is None:
            return {"status": "failed", "why": f"no cell of {driver} in the recording"}
        ph = cell["phases"][row.figure]
        if not ph["n"]:
            return {"status": "failed", "why": f"{cell['cell']}: no measured trial "
                    f"({cell['failed']} failed, {cell['invalid']} invalid)"}  # fmt: skip
        return {"status": "measured", "p50_ms": ph["p50_ms"], "ci95_ms": ph["p50_ci95_ms"],
                "n": ph["n"], "of": cell["n"]}  # fmt: skip
    if row.figure == "diff":
        return _diff(report, driver, row.get("versus"), workload)
    if row.figure == "capacity":
        return _capacity(report, driver, int(row.get("size")))
    if row.figure == "spread":  # over the row's experiment and those it names `with`
        starts = dict(res.startups(row.experiment))
        for other in row.get("with") or []:
            starts.update(res.startups(other))
        return _spread(starts, workload)
    if row.figure == "startup":
        return _startup(res.startups(row.experiment), driver, workload, channel, row.get("mode"))
    if row.figure == "pool":
        return _pool(report, res.startups(row.experiment), driver, workload, channel)
    if row.figure == "trajectory":
        return _trajectory(report, driver, channel)
    if row.figure == "project":
        return _project(res.projection(row.experiment), driver, workload, channel)
    if row.figure == "project-gap":
        return _project_gap(res.projection(row.experiment), workload, channel)
    if row.figure.startswith("prep"):
        return _prep(report, row)
    if row.figure == "image":
        return _image(report, driver, workload, channel, row)
    if row.figure == "boundary":
        return _boundary(report, driver, row)
    return {"status": "failed", "why": f"figure {row.figure!r} is not computed"}


IMAGE_PARTS = ("image", "create", "ready", "startup", "fetched", "size")
IMAGE_MODES = ("cached", "pull", "lazy")


def _image(report: Report, driver: str | None, workload: str | None, channel: str | None,
           row: Row) -> dict[str, Any]:  # fmt: skip
    """A cell's image delivery (the report's image table, `rtax report`'s): a phase's P50
    (`part`: image, create, ready, startup), or the bytes the content server sent
    (`fetched`, the median a trial) or the image's size (`size`)."""
    mode, part = row.get("mode"), row.get("part")
    for r in report.get("image") or []:
        d, w, c, _ = _key_of(re.sub(r"~[a-z]+", "", str(r["cell"])))
        if (d, r["mode"]) != (driver, mode) or workload not in (None, w):
            continue
        if channel is not None and c != channel:
            continue
        fetched = (f"fetched {r['fetched_p50']:,.0f} bytes a trial (P50) of the "
                   f"{r['size'] or 0:,}-byte image")  # fmt: skip
        if part == "size":
            return {"status": "measured", "value": r["size"], "cell": r["cell"],
                    "detail": f"{r['cell']}: {fetched}"}  # fmt: skip
        if part == "fetched":
            return {"status": "measured", "value": r["fetched_p50"], "n": r["n"],
                    "cell": r["cell"], "detail": f"{r['cell']}, of {r['size'] or 0:,}"}  # fmt: skip
        ph = r[part]
        if not ph["n"]:
            return {"status": "failed", "why": f"{r['cell']}: no measured trial "
                    f"({r['failed']} failed)"}  # fmt: skip
        others = ", ".join(f"{p} {r[p]['p50_ms']:,.2f} ms" for p in ("image", "startup")
                           if p != part and r[p]["n"])  # fmt: skip
        return {"status": "measured", "p50_ms": ph["p50_ms"], "ci95_ms": ph["p50_ci95_ms"],
                "n": ph["n"], "cell": r["cell"],
                "detail": f"{r['cell']}; {fetched}; P50 {others}"}  # fmt: skip
    return {"status": "failed", "why": f"no {mode} image cell of {driver} in the recording"}


def _boundary(report: Report, driver: str | None, row: Row) -> dict[str, Any]:
    """The probe's verdicts (`rtax report` on its recording: the driver x check matrix)
    on the row's checks: `kept` (writes kept: guarantees that must hold) and `outside`
    (access outside the tested view: escapes that must be blocked). Ours: the share of
    those measured that passed; `n`: the fewest runs (channels) a check had."""
    from rtax_tui.model.checks import NA
    from rtax_tui.model.probedoc import passed

    checks = ((report.get("probe") or {}).get("drivers") or {}).get(str(driver), {})
    checks = checks.get("checks") or {}
    if not checks:
        return {"status": "failed", "why": f"the probe recorded no check of {driver}"}
    parts, got, of, na, runs = [], 0, 0, [], []
    for group in ("kept", "outside"):
        names = list(row.get(group) or [])
        ok, bad = 0, []
        for name in names:
            c = checks.get(name)
            if c is None or c["result"] == NA:
                na.append(name)
                continue
            runs.append(len(c["runs"]))
            if passed(name, c["result"]):
                ok += 1
            else:
                bad.append(f"{name} {c['result']}")
        measured = len(names) - sum(n in na for n in names)
        got, of = got + ok, of + measured
        what = "writes kept" if group == "kept" else "outside access blocked"
        parts.append(f"{what} {ok}/{measured}" + (f" ({', '.join(bad)})" if bad else ""))
    if not of:
        return {"status": "failed", "why": f"{driver}: none of the row's checks was measured"}
    detail = "; ".join(parts) + (f"; n/a: {', '.join(na)}" if na else "")
    return {"status": "measured", "value": got / of, "passed": [got, of], "n": min(runs),
            "detail": detail}  # fmt: skip


def _key_of(cell: str) -> tuple[str, str, str, str]:
    """`host/driver/workload/channel[+pool]` -> (driver, workload, channel, mode)."""
    parts = cell.split("/")
    channel, _, mode = parts[-1].partition("+")
    return parts[-3], parts[-2], channel, mode or "cold"


def _pick(cells: dict[str, Any], driver: str | None, workload: str | None,
          channel: str | None, mode: str = "cold") -> tuple[str, Any] | None:  # fmt: skip
    for name, value in cells.items():
        d, w, c, m = _key_of(name)
        if (d, m) == (driver, mode) and workload in (None, w) and channel in (None, c):
            return name, value
    return None


def _startup(starts: dict[str, Any], driver: str | None, workload: str | None,
             channel: str | None, mode: str | None) -> dict[str, Any]:  # fmt: skip
    got = _pick(starts, driver, workload, channel, mode or "cold")
    if got is None or not got[1]["n"]:
        return {"status": "failed", "why": f"no measured start of {driver} in the recording"}
    s = got[1]
    return {"status": "measured", "p50_ms": s["p50_ms"], "ci95_ms": s["p50_ci95_ms"],
            "n": s["n"], "cell": got[0]}  # fmt: skip


def _pool(report: Report, starts: dict[str, Any], driver: str | None, workload: str | None,
          channel: str | None) -> dict[str, Any]:  # fmt: skip
    """A warm pool beside the cold start it hides: the pooled cell's acquire P50 (ours),
    the cold cell's create + ready P50 and what the pool itself did per trial served."""
    cold = _startup(starts, driver, workload, channel, "cold")
    warm = _startup(starts, driver, workload, channel, "pool")
    if cold["status"] != "measured" or warm["status"] != "measured":
        return warm if warm["status"] != "measured" else cold
    pools = (report.get("pools") or {}).get("cells", {}).get(warm["cell"], {})
    served = pools.get("trials") or 0
    work = pools.get("pool_work_s")
    per_trial = work * 1000.0 / served if work is not None and served else None
    out = {**warm, "cold_p50_ms": cold["p50_ms"], "cold_n": cold["n"],
           "hit_rate": pools.get("hit_rate"), "pool_work_ms_per_trial": per_trial}  # fmt: skip
    out["detail"] = (
        f"cold start {cold['p50_ms']:.2f} ms (n={cold['n']}) hidden by the pool; its own "
        f"work {_ms(per_trial)} a trial served, hit rate {_pct(pools.get('hit_rate'))}"
    )
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f} ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


TRAJ_WORKLOAD = re.compile(r"trajectory-(\d+)")


def _trajectory(report: Report, driver: str | None, channel: str | None) -> dict[str, Any]:
    """Per trajectory length: completion P50 (interval, n) and the amortized cost of an
    action, the completion P50 over the length."""
    lengths: list[dict[str, Any]] = []
    for c in report["cells"]:
        m = TRAJ_WORKLOAD.fullmatch(str(c["workload"]))
        if m is None or c["driver"] != driver or c.get("mode") == "pool":
            continue
        if channel is not None and c["channel"] != channel:
            continue
        ph = c["phases"]["total"]
        if not ph["n"] or ph["p50_ms"] is None:
            continue
        steps = int(m.group(1))
        lengths.append({"steps": steps, "p50_ms": ph["p50_ms"], "ci95_ms": ph["p50_ci95_ms"],
                        "n": ph["n"], "per_action_ms": ph["p50_ms"] / steps})  # fmt: skip
    if not lengths:
        return {"status": "failed", "why": f"no measured trajectory of {driver} in the recording"}
    lengths.sort(key=lambda x: x["steps"])
    return {"status": "measured", "lengths": lengths, "n": min(x["n"] for x in lengths)}


def _project(cells: dict[str, Any], driver: str | None, workload: str | None,
             channel: str | None) -> dict[str, Any]:  # fmt: skip
    got = _pick(cells, driver, workload, channel)
    if got is None or got[1]["worker_hours"] is None:
        return {"status": "failed", "why": f"no measured {workload} of {driver} to project"}
    p = got[1]
    return {"status": "measured", "value": p["worker_hours"], "ci95": p["ci95"],
            "n": p["inputs"]["create"]["n"], "cell": got[0]}  # fmt: skip


def _project_gap(
    cells: dict[str, Any], workload: str | None, channel: str | None
) -> dict[str, Any]:
    """The most worker-hours over the fewest, between isolating substrates (not `local`)."""
    got = {
        name: p["worker_hours"] for name, p in cells.items()
        if p["worker_hours"] is not None and _key_of(name)[0] != "local"
        and _key_of(name)[3] == "cold" and workload in (None, _key_of(name)[1])
        and channel in (None, _key_of(name)[2])
    }  # fmt: skip
    if len(got) < 2:
        return {"status": "failed", "why": f"fewer than two isolating substrates projected "
                f"({', '.join(got) or 'none'}; {LOCAL_NOTE})"}  # fmt: skip
    hi, lo = max(got, key=got.__getitem__), min(got, key=got.__getitem__)
    return {"status": "measured", "value": got[hi] / got[lo], "extra_h": got[hi] - got[lo],
            "detail": f"{hi} {got[hi]:,.0f} h / {lo} {got[lo]:,.0f} h: "
            f"{got[hi] - got[lo]:,.0f} extra worker-hours"}  # fmt: skip


def _diff(report: Report, a: str, b: str, workload: str | None = None) -> dict[str, Any]:
    """a's P50 minus b's (completion), as the report's driver differences have it."""
    for d in report["diffs"]:
        if d["phase"] != "total":
            continue
        if workload is not None and workload not in (d["a"].split("/")[-2], d["b"].split("/")[-2]):
            continue
        da, db = d["a"].split("/")[-3], d["b"].split("/")[-3]
        if (da, db) == (b, a):  # the report's diff is b - a: here a - b
            return {"status": "measured", "p50_ms": d["diff_ms"], "ci95_ms": d["ci95_ms"]}
        if (da, db) == (a, b):
            lo, hi = d["ci95_ms"]
            return {"status": "measured", "p50_ms": -d["diff_ms"], "ci95_ms": [-hi, -lo]}
    return {"status": "failed", "why": f"no measured pair of {a} and {b} in the recording"}


def _capacity(report: Report, driver: str, size: int) -> dict[str, Any]:
    cell = _cell(report, driver, "capacity", None)
    cap = cell.get("capacity") if cell is not None else None
    for s in (cap or {}).get("sizes", []):
        if s["size"] == size:
            return {"status": "measured", "batches": [s["passed"], s["batches"]],
                    "tasks": [s["arrived"], s["tasks"]],
                    "value": s["arrived"] / s["tasks"] if s["tasks"] else None}  # fmt: skip
    return {"status": "failed", "why": f"no batch of {size} on {driver} in the recording"}


def _spread(starts: dict[str, Any], workload: str | None) -> dict[str, Any]:
    """Slowest substrate's cold start (create + ready) P50 over the fastest's; a pooled
    cell's acquire is no cold start."""
    got = {
        cell: s for cell, s in starts.items()
        if _key_of(cell)[1] == workload and _key_of(cell)[0] != "local"
        and _key_of(cell)[3] == "cold" and s["n"]
    }  # fmt: skip
    if len(got) < 2:
        return {"status": "failed", "why": "fewer than two substrates measured"}
    slow = max(got, key=lambda c: got[c]["p50_ms"] or 0.0)
    fast = min(got, key=lambda c: got[c]["p50_ms"] or 0.0)
    value = (got[slow]["p50_ms"] or 0.0) / (got[fast]["p50_ms"] or 1.0)
    return {"status": "measured", "value": value, "n": min(s["n"] for s in got.values()),
            "detail": f"{slow} {got[slow]['p50_ms']:.2f} ms / {fast} "
            f"{got[fast]['p50_ms']:.2f} ms over {len(got)} substrates"}  # fmt: skip


PREP_OTHERS = "mini-swe-agent"  # the study's unclustered format; "six formats": the rest


def _prep(report: Report, row: Row) -> dict[str, Any]:
    formats = (report.get("prep") or {}).get("formats", [])
    if row.figure == "prep":
        for f in formats:
            if f["format"].startswith(str(row.get("format"))):
                s = f["summary"]
                return {"status": "measured", "p50_ms": s["p50_ms"], "ci95_ms": s["p50_ci95_ms"],
                        "n": s["n"]}  # fmt: skip
        return {"status": "failed", "why": f"no {row.get('format')} trajectory was prepared"}
    # the study's clusters are the report's (stats.clusters): a format whose samples did
    # not split (under 20 of them, or one mode) has no low or high cluster to compare
    pick = 0 if row.figure == "prep-low" else -1
    meds = [
        f["clusters"][pick]["p50_ms"]
        for f in formats
        if not f["format"].startswith(PREP_OTHERS) and f["clusters"]
    ]
    if not meds:
        return {"status": "failed", "why": "no format's samples split into clusters"}
    return {"status": "measured", "value": float(np.median(meds)),
            "range_ms": [min(meds), max(meds)], "formats": len(meds)}  # fmt: skip


def _projection(row: Row) -> dict[str, Any]:
    """rtax project's arithmetic on the table's own inputs: one trial's phases as the
    samples (1 s a rollout: in create; so much an action: the action)."""
    ns = 1_000_000_000
    samples = {
        "create": np.asarray([int(float(row.get("per_rollout_s", 0.0)) * ns)], dtype=np.int64),
        "ready": np.zeros(1, dtype=np.int64),
        "teardown": np.zeros(1, dtype=np.int64),
        "action": np.asarray([int(float(row.get("per_action_s", 0.0)) * ns)], dtype=np.int64),
    }
    got = project(samples, 1_000_000, 150)
    return {"status": "measured", "value": got["worker_hours"]}


def _published_value(row: Row) -> float | None:
    if row.get("published") is not None:  # in ms where the study gave seconds
        scale = 1000.0 if row.get("unit") == "s" else 1.0
        return float(row.get("published")) * scale
    if row.get("published_range") is not None:
        lo, hi = row.get("published_range")
        return (float(lo) + float(hi)) / 2
    if row.get("published_tasks") is not None:
        got, of = row.get("published_tasks")
        return float(got) / float(of)
    if row.get("published_passed") is not None:
        got, of = row.get("published_passed")
        return float(got) / float(of)
    return None


def published_text(row: Row) -> str:
    """The published figure as the study states it."""
    unit = row.get("unit", "ms")
    if row.get("published_tasks") is not None:
        (pb, b), (pt, t) = row.get("published_batches"), row.get("published_tasks")
        return f"{pb}/{b} batches, {pt}/{t} tasks"
    if row.get("published_range") is not None:
        lo, hi = row.get("published_range")
        text = f"{lo}-{hi} {unit}"
    elif row.get("published") is not None:
        v = row.get("published")
        text = f"{v:,} {unit}" if isinstance(v, int) else f"{v:,g} {unit}"
        if row.get("interval") is not None:
            lo, hi = row.get("interval")
            text += f" (95% CI {lo} to {hi})"
    elif row.get("published_passed") is not None:
        got, of = row.get("published_passed")
        said = row.get("published_text")
        text = f"{got}/{of}" + (f": {said}" if said else "")
    else:
        text = str(row.get("published_text", "-"))
    if row.get("n") is not None:
        text += f", n={row.get('n')}"
    return text


def ours_text(ours: dict[str, Any], unit: str = "ms") -> str:
    if ours["status"] == "waiting":
        return "waiting: its experiment has not started"
    if ours["status"] == "running":
        if not ours.get("of"):  # a probe or prefix preparation: no trials to count
            return "running"
        return f"running: {ours.get('done', 0)} of {ours['of']} trials"
    if ours["status"] != "measured":
        return f"not reproduced: {ours['why']}" if ours["status"] != "pending" else ours["why"]
    if "batches" in ours:
        (pb, b), (pt, t) = ours["batches"], ours["tasks"]
        return f"{pb}/{b} batches, {pt}/{t} tasks"
    if "passed" in ours:
        got, of = ours["passed"]
        return f"{got}/{of} passed, n={ours['n']} ({ours['detail']})"
    if "range_ms" in ours:
        lo, hi = ours["range_ms"]
        return f"{lo:.2f}-{hi:.2f} ms over {ours['formats']} clustered formats"
    if "lengths" in ours:
        return "; ".join(
            f"{x['steps']} actions: {x['p50_ms'] / 1000:.2f} s (95% CI {x['ci95_ms'][0] / 1000:.2f}"
            f" to {x['ci95_ms'][1] / 1000:.2f}), {x['per_action_ms']:.1f} ms an action, n={x['n']}"
            for x in ours["lengths"]
        )
    if "p50_ms" in ours:
        lo, hi = ours["ci95_ms"]
        text = f"{ours['p50_ms']:.2f} ms (95% CI {lo:.2f} to {hi:.2f})"
        text += f", n={ours['n']}" if "n" in ours else ""
        return text + (f" ({ours['detail']})" if "detail" in ours else "")
    v = ours["value"]
    whole = isinstance(v, int) or float(v).is_integer() and abs(v) >= 1000
    text = f"{v:,.0f} {unit}" if whole else f"{v:,.1f} {unit}"
    if ours.get("ci95") and None not in ours["ci95"]:
        lo, hi = ours["ci95"]
        text += f" (95% CI {lo:,.1f} to {hi:,.1f})"
    if "n" in ours and "ci95" in ours:
        text += f", n={ours['n']}"
    if "detail" in ours:
        text += f" ({ours['detail']})"
    return text


def _dotted(d: Any, key: str) -> Any:
    for part in key.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def machine_conditions() -> dict[str, Any]:
    """This machine as a run finds it: the CPUs this process may run on (no pinning
    unless a user set one), the load average, the kernel's KVM. Said beside the figures
    (a study's were measured elsewhere, often on a quiet machine)."""
    import os

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpus_online": os.cpu_count(),
        "affinity": cpus,
        "load_avg": load,
        "kvm": os.path.exists("/dev/kvm"),
    }


def _host_text(res: Results, rec: Recording | None) -> str | None:
    """One short line: the host's CPUs (the recording's header), whether this run was
    pinned to some of them, the load it started under (the report's last section has
    the rest)."""
    facts = ((rec.header.get("hosts") or {}).get("local") or {}) if rec is not None else {}
    h = res.machine
    out = []
    if facts.get("cpus"):
        out.append(f"{facts['cpus']} CPUs")
    aff = h.get("affinity")
    if aff:
        pinned = h.get("cpus_online") is not None and len(aff) < h["cpus_online"]
        out.append(f"pinned to CPUs {_cpu_list(aff)}" if pinned else "not pinned")
    if h.get("load_avg"):
        out.append(f"load {h['load_avg'][0]:.2f} at start")
    return "here: " + ", ".join(out) if out else None


def _cpu_list(cpus: list[int]) -> str:
    return f"{cpus[0]}-{cpus[-1]}" if cpus == list(range(cpus[0], cpus[-1] + 1)) else (
        ",".join(map(str, cpus)))  # fmt: skip


def _differs(study: Study, table: Table, row: Row, ours: dict[str, Any], res: Results) -> list[str]:
    exp = study.experiments[row.experiment]
    out = list(exp.differs)
    if row.get("n") is not None and ours.get("n") is not None and ours["n"] != row.get("n"):
        out.append(f"N = {ours['n']} (published {row.get('n')})")
    if ours.get("batches") is not None and row.get("published_batches") is not None:
        if ours["batches"][1] != row.get("published_batches")[1]:
            out.append(
                f"{ours['batches'][1]} batches (published {row.get('published_batches')[1]})"
            )
    rec = res.recordings.get(row.experiment)
    header = (rec.header.get("profile") or {}) if rec is not None else {}
    for key, theirs in table.setup.items():  # what the run that measured ours was given
        where, what = SETUP_KEYS[key]
        mine = _dotted(header, where)
        if rec is not None and ours["status"] == "measured" and mine != theirs:
            out.append(f"{what}: {mine if mine is not None else 'none'} (study: {theirs})")
    if row.get("driver") in VM_DRIVERS or row.get("versus") in VM_DRIVERS:
        out.append(VM_NOTE)
    if row.figure in ("spread", "project-gap"):
        out.append(LOCAL_NOTE)
    if ours["status"] == "measured" and rec is not None:
        host = _host_text(res, rec)
        if host is not None:
            out.append(host)
    return out


def _measured_conditions(study: Study, row: Row, ours: dict[str, Any], res: Results) -> list[str]:
    """What this run measured that tells a condition apart: our cell's phases (where the
    time went), and the row's `also`, the same figure under another condition of the
    same experiment (e.g. ready with the workload's assets and without)."""
    if ours["status"] != "measured":
        return []
    out = []
    if row.figure in ("total", "ready", "startup") and row.get("driver") is not None:
        report = res.report(row.experiment)
        exp = study.experiments[row.experiment]
        wl = row.get("workload") or (exp.workloads[0] if len(exp.workloads) == 1 else None)
        ch = row.get("channel") or (exp.channels[0] if len(exp.channels) == 1 else None)
        cell = _cell(report, row.get("driver"), wl, ch) if report is not None else None
        if cell is not None:
            parts = [
                f"{p} {cell['phases'][p]['p50_ms']:,.2f} ms"
                for p in ("create", "ready", "action", "teardown")
                if cell["phases"].get(p, {}).get("n")
            ]
            out.append(f"ours by phase (P50; action: each of its actions): {', '.join(parts)}")
    for alt in row.get("also") or []:
        if not isinstance(alt, dict) or not isinstance(alt.get("label"), str):
            continue
        fields = {**row.fields, **{k: v for k, v in alt.items() if k != "label"}, "also": None}
        other = _measure(study, Row(row.table, row.label, row.experiment, row.figure, fields), res)
        out.append(f"{alt['label']}: {ours_text(other, row.get('unit', 'ms'))}")
    return out


def reproduce_document(study: Study, res: Results, size: str) -> dict[str, Any]:
    """The study's tables with ours beside each published figure: `report.json`."""
    tables = []
    for t in study.tables:
        rows = []
        for row in (r for r in study.rows if r.table == t.id):
            ours = _measure(study, row, res)
            pub = _published_value(row)
            mine = ours.get("value", ours.get("p50_ms")) if ours["status"] == "measured" else None
            ratio = mine / pub if mine is not None and pub else None
            differs = _differs(study, t, row, ours, res)
            measured = _measured_conditions(study, row, ours, res)
            far = ratio is not None and (abs(ratio) > FAR or abs(ratio) < 1 / FAR)
            rows.append(
                {
                    "label": row.label,
                    "figure": row.figure,
                    "experiment": row.experiment,
                    "driver": row.get("driver"),
                    "published": pub,
                    "published_text": published_text(row),
                    "note": row.get("note"),
                    "ours": ours,
                    "ours_text": ours_text(ours, row.get("unit", "ms")),
                    "ratio": ratio,
                    "far": far,
                    "differs": differs,
                    "measured": measured,
                    "verdict": (
                        f"differs by more than {FAR:g}x; conditions that differ: "
                        + ("; ".join(differs) or "none known")
                        + ("; measured here: " + "; ".join(measured) if measured else "")
                    )
                    if far
                    else None,
                }
            )
        tables.append({"id": t.id, "title": t.title, "conditions": t.conditions,
                       "setup": dict(t.setup), "rows": rows})  # fmt: skip
    return {
        "format": "rtax-reproduce/1",
        "study": study.name,
        "title": study.title,
        "source": study.source,
        "size": size,
        "experiments": {
            e.id: {"what": e.what, "kind": e.kind, "rtax": e.flags(size), "why": e.why}
            for e in study.experiments.values()
        },
        "not_run": dict(res.not_run),
        "drivers_out": dict(res.drivers_out),
        "machine": dict(res.machine),
        "tables": tables,
        "figures": [],  # filled by `rtax reproduce` as it draws them
    }
