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

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtax_tui.analysis.report import build_report, startup_figures
from rtax_tui.analysis.report_model import Report
from rtax_tui.analysis.stats import project
from rtax_tui.model.recording import Recording
from rtax_tui.model.spec import RtaxError

SIZES = ("quick", "full")
KINDS = ("run", "prepare", "arithmetic", "pending", "unavailable")
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
    "pending",
    "unavailable",
)
# a row's figure differs from the published one beyond this factor, either way: said so
FAR = 2.0
VM_DRIVERS = ("libvirt", "microvm")
VM_NOTE = "VMs under TCG where KVM guests hang (see `rtax doctor`'s KVM line)"
LOCAL_NOTE = "`local` left out of the spread: it keeps nothing out"
MIB = 1 << 20


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

    def flags(self, size: str) -> list[str]:
        """The experiment as `rtax run` (or `rtax traj prepare`) flags, as a user types it."""
        c = self.counts.get(size, {})
        if self.kind == "prepare":
            return [
                "traj", "prepare", *self.paths, "--shuffle",
                "--repeat", str(c.get("repeat", 3)),
                "--max-prefixes", str(c.get("max_prefixes", 20)),
            ]  # fmt: skip
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
        if "batches" in c:  # no flag of `rtax run` says it: the profile's [capacity] batches
            out.append(f"([capacity] batches = {c['batches']})")
        return out


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    conditions: str


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


def load_study(name: str) -> Study:
    """The study `name`, checked: an unknown name, or a row that names no experiment or
    table, is one line naming the file and the field."""
    if name not in study_names():
        raise RtaxError(f"unknown study {name!r} (known: {', '.join(study_names())})")
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
        kind = e.get("kind", "run")
        if kind not in KINDS:
            raise RtaxError(f"{path}: {where}.kind: {kind!r} (known: {', '.join(KINDS)})")
        if kind == "run":
            need(e, "profile", where)
        if kind in ("pending", "unavailable"):
            need(e, "why", where)
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
        )
    tables = tuple(
        Table(
            need(t, "id", f"tables[{i}]"),
            need(t, "title", f"tables[{i}]"),
            need(t, "conditions", f"tables[{i}]"),
        )
        for i, t in enumerate(doc.get("tables") or [])
    )
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
    )


# -- ours beside theirs ----------------------------------------------------------------


@dataclass
class Results:
    """What the experiments left: per experiment its recording (read), or why it did
    not run; per driver why it cannot run here (`rtax doctor`'s checks)."""

    recordings: dict[str, Recording] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=dict)
    drivers_out: dict[str, str] = field(default_factory=dict)
    _reports: dict[str, Report] = field(default_factory=dict)

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
        return _diff(report, driver, row.get("versus"))
    if row.figure == "capacity":
        return _capacity(report, driver, int(row.get("size")))
    if row.figure == "spread":
        return _spread(res.recordings[row.experiment], workload)
    if row.figure.startswith("prep"):
        return _prep(report, row)
    return {"status": "failed", "why": f"figure {row.figure!r} is not computed"}


def _diff(report: Report, a: str, b: str) -> dict[str, Any]:
    """a's P50 minus b's (completion), as the report's driver differences have it."""
    for d in report["diffs"]:
        if d["phase"] != "total":
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


def _spread(rec: Recording, workload: str | None) -> dict[str, Any]:
    """Slowest substrate's cold start (create + ready) P50 over the fastest's."""
    got = {
        cell: s for cell, s in startup_figures(rec).items()
        if cell.split("/")[-2] == workload and cell.split("/")[-3] != "local" and s["n"]
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
        text = f"{row.get('published'):,g} {unit}"
        if row.get("interval") is not None:
            lo, hi = row.get("interval")
            text += f" (95% CI {lo} to {hi})"
    else:
        text = str(row.get("published_text", "-"))
    if row.get("n") is not None:
        text += f", n={row.get('n')}"
    return text


def ours_text(ours: dict[str, Any], unit: str = "ms") -> str:
    if ours["status"] != "measured":
        return f"not reproduced: {ours['why']}" if ours["status"] != "pending" else ours["why"]
    if "batches" in ours:
        (pb, b), (pt, t) = ours["batches"], ours["tasks"]
        return f"{pb}/{b} batches, {pt}/{t} tasks"
    if "range_ms" in ours:
        lo, hi = ours["range_ms"]
        return f"{lo:.2f}-{hi:.2f} ms over {ours['formats']} clustered formats"
    if "p50_ms" in ours:
        lo, hi = ours["ci95_ms"]
        text = f"{ours['p50_ms']:.2f} ms (95% CI {lo:.2f} to {hi:.2f})"
        return text + (f", n={ours['n']}" if "n" in ours else "")
    text = f"{ours['value']:,.1f} {unit}"
    if "detail" in ours:
        text += f" ({ours['detail']})"
    return text


def _differs(study: Study, row: Row, ours: dict[str, Any]) -> list[str]:
    exp = study.experiments[row.experiment]
    out = list(exp.differs)
    if row.get("n") is not None and ours.get("n") is not None and ours["n"] != row.get("n"):
        out.append(f"N = {ours['n']} (published {row.get('n')})")
    if ours.get("batches") is not None and row.get("published_batches") is not None:
        if ours["batches"][1] != row.get("published_batches")[1]:
            out.append(
                f"{ours['batches'][1]} batches (published {row.get('published_batches')[1]})"
            )
    if row.get("driver") in VM_DRIVERS or row.get("versus") in VM_DRIVERS:
        out.append(VM_NOTE)
    if row.figure == "spread":
        out.append(LOCAL_NOTE)
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
            differs = _differs(study, row, ours)
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
                    "verdict": (
                        f"differs by more than {FAR:g}x; conditions that differ: "
                        + ("; ".join(differs) or "none known")
                    )
                    if far
                    else None,
                }
            )
        tables.append({"id": t.id, "title": t.title, "conditions": t.conditions, "rows": rows})
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
        "tables": tables,
    }
