"""Profiles: TOML files that say which cells to run, how often, with which limits.

Every key is checked before any trial runs; a mistake is reported as
`FILE:LINE: key: what is wrong (allowed: ...)` and the command exits 2.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.poolspec import PoolSpec, check_modes, parse_pool
from rtax_tui.engine.profile_schema import (
    CAPACITY,
    HOST,
    LIMITS,
    NAMED_TABLES,
    RUN,
    STEP,
    TABLES,
    TIMEOUTS,
    TOP,
    WORKLOAD,
)
from rtax_tui.engine.profile_toml import profiles_dir
from rtax_tui.model.arrivals import SEQUENTIAL, check_arrivals
from rtax_tui.model.inputs import INT64_MAX, INT64_MIN, PROFILE_MAX, decode_utf8, read_input
from rtax_tui.model.precision import (
    MAX_TIME_DEFAULT_S,
    MAX_TRIALS_DEFAULT,
    Target,
    check_max_trials,
    parse_duration,
    parse_precision,
)
from rtax_tui.model.schema import Key, Table, type_error
from rtax_tui.model.spec import (
    CHANNELS,
    UNLIMITED,
    WORKLOAD_NAMES,
    Limits,
    OptionError,
    RtaxError,
    Step,
    Timeouts,
    Workload,
)

if TYPE_CHECKING:  # the engine sits above the drivers (pyproject's layers)
    from rtax_tui.drivers.base import Driver


class ProfileError(RtaxError):
    pass


BUILTIN_WORKLOADS = WORKLOAD_NAMES
Where = Callable[[str, str | None], str]  # (table, key) -> `FILE:LINE`


@dataclass(frozen=True)
class Capacity:
    """A `[capacity]` table (its keys, defaults and help: profile_schema.CAPACITY)."""

    size: int = CAPACITY["size"].default
    batches: int = CAPACITY["batches"].default
    deadline_s: float = CAPACITY["deadline_s"].default
    cpus: float | None = CAPACITY["cpus"].default
    memory_mib: int | None = CAPACITY["memory_mib"].default
    swap_mib: int | None = CAPACITY["swap_mib"].default
    touch_mib: int = CAPACITY["touch_mib"].default  # held private memory per environment
    sizes: tuple[int, ...] = CAPACITY["sizes"].default  # a curve: `batches` at each size
    # the bound on a batch's release steps in flight (each a process in its environment)
    release_concurrency: int = CAPACITY["release_concurrency"].default

    @property
    def curve(self) -> tuple[int, ...]:
        """The sizes to run: `sizes`, or the single `size`."""
        return self.sizes or (self.size,)


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    description: str = TOP["description"].default
    # [run] (profile_schema.RUN)
    seed: int = RUN["seed"].default
    trials: int = RUN["trials"].default
    warmup: int = RUN["warmup"].default
    concurrency: int = RUN["concurrency"].default
    hosts: tuple[str, ...] = RUN["hosts"].default
    drivers: tuple[str, ...] = RUN["drivers"].default
    workloads: tuple[str, ...] = RUN["workloads"].default
    channels: tuple[str, ...] = RUN["channels"].default
    timeouts: Timeouts = field(default_factory=Timeouts)
    limits: Limits = field(default_factory=Limits)
    capacity: Capacity | None = None
    pool: PoolSpec | None = None  # [pool] or --pool N
    modes: tuple[str, ...] | None = RUN["modes"].default  # None: pool if [pool], else cold
    arrivals: tuple[str, ...] = RUN["arrivals"].default  # model.arrivals
    images: tuple[str, ...] = RUN["images"].default  # drivers.toolkit.delivery; (): none
    page_cache: str = RUN["page_cache"].default  # before each image phase: kept, dropped
    # rounds until precise (model.precision), as written: "5%", "10m"
    precision: str | None = RUN["precision"].default
    max_trials: int | None = RUN["max_trials"].default
    max_time: str | None = RUN["max_time"].default
    custom_workloads: dict[str, Workload] = field(default_factory=dict)
    driver_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # identity / known_hosts / trust_new from the command line, for every SSH host
    ssh_options: dict[str, Any] = field(default_factory=dict)
    # [thresholds] as written ("WHAT" -> its conditions): analysis.gates
    thresholds: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The resolved profile, as written into the recording's header."""
        d: dict[str, Any] = {
            "name": self.name,
            "path": self.path,
            "description": self.description,
            "seed": self.seed,
            "trials": self.trials,
            "warmup": self.warmup,
            "concurrency": self.concurrency,
            "hosts": list(self.hosts),
            "drivers": list(self.drivers),
            "workloads": list(self.workloads),
            "channels": list(self.channels),
            "timeouts": vars(self.timeouts).copy(),
            "limits": self.limits.to_json(),
            "capacity": vars(self.capacity).copy() if self.capacity else None,
            "driver_options": self.driver_options,
        }
        if self.arrivals != RUN["arrivals"].default:  # older headers keep their shape
            d["arrivals"] = list(self.arrivals)
        if self.images:  # the page cache is kept: the server's is warm, a mount's is new
            d["images"] = list(self.images)
            d["page_cache"] = self.page_cache
            left = self.images_left_out()
            if left:  # cells a driver cannot deliver: not in the run
                d["images_left_out"] = left
        if self.precision is not None:  # older headers keep their shape
            d["precision"] = self.precision
            d["max_trials"] = self.max_trials
            d["max_time"] = self.max_time
        if self.pool is not None or self.modes is not None:  # older headers keep their shape
            d["pool"] = self.pool_spec.to_dict()
            d["modes"] = list(self.run_modes)
        if self.host_tables:
            d["host_tables"] = self.host_tables
        if self.ssh_options:
            d["ssh_options"] = self.ssh_options
        if self.thresholds:  # older headers keep their shape
            d["thresholds"] = {k: list(v) for k, v in self.thresholds.items()}
        if self.custom_workloads:
            d["custom_workloads"] = {
                name: [
                    {"argv": list(s.argv), "expect_rc": s.expect_rc, "expect_out": s.expect_out}
                    for s in w.steps
                ]
                if w.replay is None
                else {  # a replay: where its steps come from, not the steps themselves
                    "trajectory": w.replay.trajectory,
                    "repo": w.replay.repo,
                    "commit": w.replay.commit,
                    "allow_unisolated": w.replay.allow_unisolated,
                }
                for name, w in self.custom_workloads.items()
            }
        return d

    def with_overrides(self, **kw: Any) -> Profile:
        kw = {k: v for k, v in kw.items() if v is not None}
        for key in ("drivers", "workloads", "channels", "hosts", "arrivals", "images"):
            if key in kw:
                kw[key] = tuple(kw[key])
        if "arrivals" in kw:  # in their normal spelling, as the file's are
            kw["arrivals"] = _arrivals(kw["arrivals"], "command line")
        prof = replace(self, **kw)
        prof._check_names(lambda key: "command line" if key in kw else self.path)
        return prof

    def with_sizes(self, sizes: tuple[int, ...]) -> Profile:
        """The capacity curve from the command line (`--sizes`)."""
        if self.capacity is None:
            raise ProfileError(f"{self.path}: --sizes: the profile has no [capacity] table")
        return replace(self, capacity=replace(self.capacity, sizes=tuple(sizes)))

    def driver_instances(self) -> tuple[str, ...]:
        """The names `[drivers_options]` gives to instances of registered drivers."""
        from rtax_tui.drivers import names as driver_names
        from rtax_tui.drivers.registry import INSTANCE_KEY

        registered = driver_names()
        return tuple(
            n for n, b in self.driver_options.items() if INSTANCE_KEY in b and n not in registered
        )

    def _check_names(self, locate: Callable[[str], str]) -> None:
        def bad(key: str, value: Any, allowed: tuple[str, ...]) -> None:
            raise ProfileError(
                f"{locate(key)}: {key}: unknown {value!r} (allowed: {', '.join(allowed)})"
            )

        from rtax_tui.drivers import names as driver_names

        known = driver_names() + self.driver_instances()
        for d in self.drivers:
            if d not in known:
                bad("drivers", d, known)
        allowed_w = BUILTIN_WORKLOADS + tuple(self.custom_workloads)
        for w in self.workloads:
            if w not in allowed_w:
                bad("workloads", w, allowed_w)
        for c in self.channels:
            if c not in CHANNELS:
                bad("channels", c, CHANNELS)
        from rtax_tui.model.netaddr import is_ray_name

        for h in self.hosts:
            named = h == "local" or h.startswith("ssh://") or h in self.host_tables
            if not named and not is_ray_name(h):
                raise ProfileError(
                    f"{locate('hosts')}: hosts: unknown {h!r} (allowed: local, "
                    "ssh://[user@]host[:port], ray:auto, ray://HOST:PORT"
                    f"{''.join(', ' + n for n in self.host_tables)})"
                )
        self._check_images(locate)
        for key in ("drivers", "workloads", "channels", "hosts"):
            if not getattr(self, key):
                raise ProfileError(f"{locate(key)}: {key}: must name at least one")
        if self.trials < 1:
            raise ProfileError(f"{locate('trials')}: trials: must be at least 1")
        if self.concurrency < 1:
            raise ProfileError(f"{locate('concurrency')}: concurrency: must be at least 1")
        if self.capacity is not None and self.capacity.size < 1:
            raise ProfileError(f"{locate('capacity')}: capacity.size: must be at least 1")
        if self.capacity is not None and any(n < 1 for n in self.capacity.sizes):
            raise ProfileError(f"{locate('capacity')}: capacity.sizes: each must be at least 1")
        if self.capacity is not None and self.capacity.touch_mib < 1:
            raise ProfileError(f"{locate('capacity')}: capacity.touch_mib: must be at least 1")
        from rtax_tui.engine.plan import PLAN_MAX

        if self.capacity is not None and self.arrivals != (SEQUENTIAL,):
            raise ProfileError(
                f"{locate('arrivals')}: arrivals: a capacity run asks for its batches at once "
                "(remove [capacity] or the arrival patterns)"
            )
        cells = len(self.hosts) * len(self.drivers) * len(self.workloads) * len(self.channels)
        cells *= len(self.run_modes) * len(self.arrivals) * max(1, len(self.images))
        if self.capacity is not None:
            curve = self.capacity.curve
            total, key = cells * (sum(curve) * self.capacity.batches + min(curve)), "capacity"
        else:
            total, key = cells * (self.trials + self.warmup), "trials"
        if total > PLAN_MAX:
            raise ProfileError(
                f"{locate(key)}: {key}: {total} trials in one run ({cells} cells); "
                f"at most {PLAN_MAX}"
            )
        self._check_precision(locate)
        if self.capacity is not None and "pool" in self.run_modes:
            raise ProfileError(
                f"{locate('modes')}: pool: a capacity run starts its batches cold "
                "(remove [pool] or [capacity])"
            )

    def _check_precision(self, locate: Callable[[str], str]) -> None:
        """`precision`, `max_trials`, `max_time` (model.precision): each well formed, the
        budget only with a precision, and a precision only where rounds of trials can be
        run (not capacity batches, not arrival patterns' episodes)."""
        for key, parse in (("precision", parse_precision), ("max_time", parse_duration),
                           ("max_trials", check_max_trials)):  # fmt: skip
            value = getattr(self, key)
            if value is None:
                continue
            try:
                parse(value)
            except ValueError as exc:
                raise ProfileError(f"{locate(key)}: {key}: {exc}") from None
            if key != "precision" and self.precision is None:
                raise ProfileError(f"{locate(key)}: {key}: a budget of rounds needs precision")
        if self.precision is not None and self.capacity is not None:
            raise ProfileError(
                f"{locate('precision')}: precision: a capacity run has batches, not rounds "
                "(remove [capacity] or precision)"
            )
        if self.precision is not None and self.arrivals != (SEQUENTIAL,):
            raise ProfileError(
                f"{locate('precision')}: precision: rounds run trials one after another "
                "(remove the arrival patterns or precision)"
            )

    def precision_target(self) -> Target | None:
        """The run's precision and its budget, parsed (None: the planned trials only)."""
        if self.precision is None:
            return None
        return Target(
            parse_precision(self.precision),
            self.max_trials if self.max_trials is not None else MAX_TRIALS_DEFAULT,
            parse_duration(self.max_time) if self.max_time is not None else MAX_TIME_DEFAULT_S,
        )

    def _check_images(self, locate: Callable[[str], str]) -> None:
        """`images`: known modes, once each, on drivers that deliver them, on the local
        host, with cold environments (a pool's are made before a trial asks)."""
        from rtax_tui.drivers.toolkit.delivery import MODES

        where = locate("images")
        for m in self.images:
            if m not in MODES:
                raise ProfileError(f"{where}: images: unknown {m!r} (allowed: {', '.join(MODES)})")
        if len(set(self.images)) != len(self.images):
            raise ProfileError(f"{where}: images: a mode is listed twice")
        if not self.images:
            if self.page_cache != "kept":
                raise ProfileError(
                    f"{locate('page_cache')}: page_cache: dropped before an image phase: "
                    "needs [run] images"
                )
            return
        if self.hosts != ("local",):
            raise ProfileError(
                f'{where}: images: image delivery runs on the local host only (hosts = ["local"])'
            )
        if self.capacity is not None:
            raise ProfileError(
                f"{where}: images: a capacity run measures its batches with their images "
                "on the host (remove [capacity] or the image modes)"
            )
        if "pool" in self.run_modes:
            raise ProfileError(
                f"{where}: images: a pooled environment's image is delivered before a trial "
                'asks for it (modes = ["cold"], or no images)'
            )
        for d, cls in self._driver_classes():
            if not any(m in cls.image_modes for m in self.images):
                have = ", ".join(cls.image_modes) or "none"
                raise ProfileError(
                    f"{where}: images: driver {d} has no image mode {self.images[0]} "
                    f"(its modes: {have})"
                )

    def images_left_out(self) -> dict[str, list[str]]:
        """Per driver, the listed image modes it does not deliver: those cells are left out
        of the run (a driver with none of them is refused by `_check_images`)."""
        out: dict[str, list[str]] = {}
        for d, cls in self._driver_classes() if self.images else ():
            lacking = [m for m in self.images if m not in cls.image_modes]
            if lacking:
                out[d] = lacking
        return out

    def _driver_classes(self) -> Iterator[tuple[str, type[Driver]]]:
        """Each driver the profile names with its class (an instance's base's); a name
        that resolves to none is left to `_check_names` to refuse."""
        from rtax_tui.drivers.registry import DriverRegistryError, resolve

        for d in self.drivers:
            try:
                yield d, resolve(d, self.driver_options.get(d))[0]
            except DriverRegistryError:
                continue

    @property
    def run_modes(self) -> tuple[str, ...]:
        """The cell modes of this run: `[run] modes`, else `pool` when a pool is set."""
        if self.modes is not None:
            return self.modes
        return ("pool",) if self.pool is not None else ("cold",)

    @property
    def pool_spec(self) -> PoolSpec:
        return self.pool or PoolSpec()

    @property
    def needs_assets(self) -> bool:
        from rtax_tui.engine.workloads import builtin_workloads

        without_assets = builtin_workloads(None)
        return any(w in WORKLOAD_NAMES and w not in without_assets for w in self.workloads)


def _line_of(text: str, table: str, key: str | None) -> int:
    """Best-effort line number of `key` inside `[table]` (or of the table header)."""
    current = ""
    header_line = 1
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*\[+\s*([^\]]+?)\s*\]+", line)
        if m:
            current = m.group(1).replace('"', "").replace(" ", "")
            if current == table:
                header_line = n
                if key is None:
                    return n
            continue
        if (
            key is not None
            and current == table
            and re.match(rf"\s*\"?{re.escape(key)}\"?\s*=", line)
        ):
            return n
    if key is not None and table:  # `run.trials = 0`, `run = { trials = 0 }`
        last = re.escape(table.rsplit(".", 1)[-1])
        both = re.compile(rf"\b{last}\"?\s*[.=].*?\b{re.escape(key)}\"?\s*=")
        for n, line in enumerate(text.splitlines(), 1):
            if both.search(line):
                return n
    return header_line


def _unknown(where: str, name: str, allowed: str) -> ProfileError:
    return ProfileError(f"{where}: {name}: unknown key (allowed: {allowed})")


def _check_type(where: str, name: str, value: Any, types: tuple[type, ...]) -> None:
    why = type_error(value, types)
    if why is not None:
        raise ProfileError(f"{where}: {name}: {why}")


def _check_bounds(where: str, name: str, spec: Key, value: Any) -> None:
    why = spec.bounds_error(value)
    if why is not None:
        raise ProfileError(f"{where}: {name}: {why}")


def _check_table(
    table: Table, body: dict[str, Any], label: str, locate: Callable[[str], str],
    also: str = "", bounds: bool = True,
) -> None:  # fmt: skip
    """Every key of `body` one of `table`'s, of its type, its array's items of theirs, and
    (`bounds`) each number within the key's bounds; `label` names the table in errors."""
    for key, value in body.items():
        spec = table.keys.get(key)
        if spec is None:
            raise _unknown(locate(key), f"{label}.{key}", table.allowed + also)
        _check_type(locate(key), f"{label}.{key}", value, spec.types)
        if isinstance(value, list):
            for item in value if spec.items else ():
                _check_type(locate(key), f"{label}.{key}", item, spec.items)
                if bounds:
                    _check_bounds(locate(key), f"{label}.{key}", spec, item)
        elif bounds and not isinstance(value, str):
            _check_bounds(locate(key), f"{label}.{key}", spec, value)


def _limit(where: str, key: str, value: Any) -> float | int | None:
    """One `[limits]` value: a positive number (an integer but for cpus), or
    "unlimited" (None); anything else is a one-line ProfileError naming the key."""
    if value == UNLIMITED:
        return None
    spec = LIMITS[key]
    number = float in spec.types  # else an integer
    want = "a positive number" if number else "a positive integer"
    allowed = f'{want} or "unlimited"'
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not number)
    ):
        raise ProfileError(f"{where}: limits.{key}: expected {allowed}, got {value!r}")
    if isinstance(value, float) and value != value:  # nan
        raise ProfileError(f"{where}: limits.{key}: expected {allowed}, got {value!r}")
    assert spec.bounds is not None
    least, most = spec.bounds
    if value < least:
        raise ProfileError(
            f"{where}: limits.{key}: must be at least {least} "
            f'(no limit is "unlimited"), got {value!r}'
        )
    if value > most:
        raise ProfileError(
            f'{where}: limits.{key}: at most {most} (no limit is "unlimited"), got {value!r}'
        )
    return float(value) if number else value


def _check_driver_options(name: str, body: dict[str, Any], where: Callable[[str], str]) -> None:
    """The driver's own check of its `[drivers_options.NAME]` table (the driver knows
    its options), reported here with the file and the line of the field."""
    from rtax_tui.drivers import DriverRegistryError
    from rtax_tui.drivers.registry import INSTANCE_KEY, resolve

    try:
        cls, options = resolve(name, body)
        cls.check_options(options)
    except DriverRegistryError as exc:
        raise ProfileError(f"{where(INSTANCE_KEY)}: {exc}") from None
    except OptionError as exc:  # the line, then the field by its whole name
        raise ProfileError(f"{where(exc.key)}: drivers_options.{name}.{exc.key}: {exc}") from None


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    text = decode_utf8(read_input(p, "profile", PROFILE_MAX, ProfileError), str(p), "the profile",
                       ProfileError)  # fmt: skip
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{p}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ProfileError(f"{p}: not valid TOML: nested too deeply") from None
    return parse_profile(data, text, str(p), default_name=p.stem)


def _check_integers(data: dict[str, Any], where: Callable[[str, str | None], str]) -> None:
    """No integer past 64 bits in `data`: what a profile holds goes into the recording's
    header, which holds 64-bit integers (a driver's own option too)."""
    todo: list[tuple[str, str, Any]] = [("", k, v) for k, v in data.items()]
    while todo:
        table, key, value = todo.pop()
        if isinstance(value, dict):
            sub = f"{table}.{key}" if table else key
            todo += [(sub, k, v) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(table, key, v) for v in value]
        elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            name = f"{table}.{key}" if table else key
            raise ProfileError(
                f"{where(table, key)}: {name}: integers are of 64 bits at most "
                f"(got one of {value.bit_length()} bits)"
            )


def parse_profile(data: dict[str, Any], text: str, path: str, default_name: str) -> Profile:
    """A profile's tables (what `tomllib` read from `text`, the file at `path`) checked
    against profile_schema, table by table, as a Profile; a mistake is a ProfileError
    naming the file, the line and the key."""

    def where(table: str, key: str | None) -> str:
        return f"{path}:{_line_of(text, table, key)}"

    # the tables the schema does not bound number by number
    _check_integers({k: v for k, v in data.items() if k in ("drivers_options", "workloads")}, where)
    kw: dict[str, Any] = {"name": default_name, "path": path, **_top(data, where)}
    run = data.get("run", {})
    kw.update(_run(run, where))
    if "timeouts" in data:
        kw["timeouts"] = _timeouts(data["timeouts"], where)
    if "limits" in data:
        kw["limits"] = _limits(data["limits"], where)
    if "capacity" in data:
        kw["capacity"] = _capacity(data["capacity"], where)
    if "pool" in data:
        kw["pool"] = _pool(data["pool"], where)
    if "modes" in run:
        kw["modes"] = _modes(run["modes"], where)
    if "thresholds" in data:
        kw["thresholds"] = _thresholds(data["thresholds"], where)
    if "drivers_options" in data:
        kw["driver_options"] = _drivers_options(data["drivers_options"], where)
    hosts = data.get("hosts", {})
    kw["host_tables"] = {name: _host(name, body, where) for name, body in hosts.items()}
    timeouts = kw.get("timeouts", Timeouts())
    kw["custom_workloads"] = _workloads(data.get("workloads", {}), where, path, timeouts)

    prof = Profile(**kw)
    prof._check_names(lambda key: where("run", key))
    return prof


def _top(data: dict[str, Any], where: Where) -> dict[str, Any]:
    """The top level: `name` and `description` (profile_schema.TOP), and known tables."""
    known = sorted(set(TABLES) - {""} | set(NAMED_TABLES) | {"thresholds"})
    kw: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in known:
                raise ProfileError(
                    f"{where(key, None)}: [{key}]: unknown table (allowed: {', '.join(known)})"
                )
            continue
        if key not in TOP:
            raise _unknown(where("", key), key, f"{TOP.allowed}, and tables {', '.join(known)}")
        _check_type(where("", key), key, value, TOP[key].types)
        kw[key] = value
    return kw


def _run(body: dict[str, Any], where: Where) -> dict[str, Any]:
    """`[run]` as the Profile's keys (`modes`, read after `[pool]`, by `_modes`)."""
    _check_table(RUN, body, "run", lambda key: where("run", key))
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in body.items() if k != "modes"}
    if "arrivals" in kw:
        kw["arrivals"] = _arrivals(kw["arrivals"], where("run", "arrivals"))
    return kw


def _arrivals(values: Any, where: str) -> tuple[str, ...]:
    try:
        return check_arrivals(values, where)
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


def _timeouts(body: dict[str, Any], where: Where) -> Timeouts:
    _check_table(TIMEOUTS, body, "timeouts", lambda key: where("timeouts", key))
    return Timeouts(**{k: float(v) for k, v in body.items()})


def _limits(body: dict[str, Any], where: Where) -> Limits:
    """`[limits]`: the keys it gives; the others keep their defaults."""
    given: dict[str, Any] = {}
    for key, value in body.items():
        if key not in LIMITS:
            raise _unknown(where("limits", key), f"limits.{key}", LIMITS.allowed)
        given[key] = _limit(where("limits", key), key, value)
    return Limits(**given)


def _capacity(body: dict[str, Any], where: Where) -> Capacity:
    _check_table(CAPACITY, body, "capacity", lambda key: where("capacity", key))
    cap = dict(body)
    if "sizes" in cap:
        cap["sizes"] = tuple(cap["sizes"])
    return Capacity(**cap)


def _thresholds(body: Any, where: Where) -> dict[str, list[str]]:
    """`[thresholds]`: each `"WHAT" = "OP VALUE"` (or a list) parsed by analysis.gates."""
    from rtax_tui.model.thresholds import parse_table

    try:
        return parse_table(body, lambda key: where("thresholds", key or None))
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


def _pool(body: Any, where: Where) -> PoolSpec:
    """`[pool]`, checked by engine.poolspec (beside the pool that acts on it)."""
    try:
        return parse_pool(body, lambda key: where("pool", key))
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


def _modes(modes: Any, where: Where) -> tuple[str, ...]:
    try:
        return check_modes(modes, where("run", "modes"))
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


OPTIONS_DEPTH = 8  # the deepest nesting a driver's options may hold (tables, arrays)


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and tables (a scalar: 0); without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            d += 1
            deepest = max(deepest, d)
            if deepest > OPTIONS_DEPTH:
                return deepest
            stack.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _drivers_options(opts: dict[str, Any], where: Where) -> dict[str, Any]:
    """`[drivers_options.NAME]`: a table per driver, checked by the driver."""
    from rtax_tui.drivers import names as driver_names
    from rtax_tui.drivers.registry import INSTANCE_KEY

    known = driver_names()
    for name, body in opts.items():
        if _depth(body) > OPTIONS_DEPTH:  # a header with it must still encode (orjson: 254)
            raise ProfileError(
                f"{where('drivers_options.' + name, None)}: drivers_options.{name}: nested "
                f"more than {OPTIONS_DEPTH} levels deep"
            )
        instance = isinstance(body, dict) and INSTANCE_KEY in body
        if not isinstance(body, dict) or (name not in known and not instance):
            raise ProfileError(
                f"{where('drivers_options.' + name, None)}: drivers_options.{name}: "
                f"expected a table for one of {', '.join(known)}, or a table with "
                f'{INSTANCE_KEY} = "ONE_OF_THEM" (an instance of it named {name})'
            )
        if instance and not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ProfileError(
                f"{where('drivers_options.' + name, None)}: drivers_options.{name}: "
                "an instance's name is letters, digits and _.+-"
            )
        table = f"drivers_options.{name}"

        def locate(key: str, table: str = table) -> str:
            return where(table, key)

        _check_driver_options(name, body, locate)
    return opts


def _host(name: str, body: Any, where: Where) -> dict[str, Any]:
    """`[hosts.NAME]`: a remote host reached over SSH (profile_schema.HOST)."""
    table = f"hosts.{name}"
    if not isinstance(body, dict):
        raise ProfileError(f"{where('hosts', name)}: hosts.{name}: expected a table")
    if name == "local" or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ProfileError(
            f"{where(table, None)}: [{table}]: a host name is letters, digits, _.- and not `local`"
        )
    _check_table(HOST, body, table, lambda key: where(table, key), bounds=False)
    ray = "ray" in body
    if ray and "address" in body:
        raise ProfileError(f"{where(table, 'ray')}: {table}: either address (SSH) or ray, not both")
    ssh_only = ("user", "port", "identity", "known_hosts", "jump")
    for key in ssh_only if ray else ("trusted", "nodes"):
        if key in body:
            what = "an SSH host's" if ray else "a Ray cluster's (ray = ...)"
            raise ProfileError(f"{where(table, key)}: {table}.{key}: {what} key")
    for key, spec in HOST.keys.items():
        if spec.required and key not in body and not ray:
            raise ProfileError(f"{where(table, None)}: {table}.{key}: required")
    for key, spec in HOST.keys.items():
        if key in body:
            _check_bounds(where(table, key), f"{table}.{key}", spec, body[key])
    if ray:
        from rtax_tui.model.netaddr import address_host

        if body["ray"] != "auto" and not address_host(body["ray"]):
            raise ProfileError(
                f"{where(table, 'ray')}: {table}.ray: expected auto, HOST:PORT or ray://HOST:PORT"
            )
        return dict(body)
    _check_ssh_names(body, table, where)
    return dict(body)


def _check_ssh_names(body: dict[str, Any], table: str, where: Where) -> None:
    """`address`, `user` and `jump` held to the rules `--host ssh://...` is held to (one
    rule each, in hosts.ssh): checked when the profile loads, not when asyncssh first
    sees them (a newline in a user name ended in asyncssh's own message)."""
    # deferred: rtax_tui.hosts and its ssh module add 45 ms to importing this module
    # (python -X importtime), which every command that reads a profile would pay
    from rtax_tui.hosts.ssh import USER_RULE, host_name_wrong, parse_ssh_url, user_name_wrong

    why = host_name_wrong(body["address"])
    if why is not None:
        raise ProfileError(f"{where(table, 'address')}: {table}.address: not a host name ({why})")
    user = body.get("user")
    if user is not None and user_name_wrong(user):
        raise ProfileError(f"{where(table, 'user')}: {table}.user: not a user name ({USER_RULE})")
    jump = body.get("jump")
    if jump is not None:
        try:
            parse_ssh_url(jump if "://" in jump else "ssh://" + jump)
        except RtaxError as exc:
            raise ProfileError(f"{where(table, 'jump')}: {table}.jump: {exc}") from None


def _workloads(
    bodies: dict[str, Any], where: Where, path: str, timeouts: Timeouts
) -> dict[str, Workload]:
    """`[workloads.NAME]`: custom workloads, or replays of agent trajectories."""
    custom: dict[str, Workload] = {}
    for name, body in bodies.items():
        table = f"workloads.{name}"
        if name in BUILTIN_WORKLOADS:
            raise ProfileError(f"{where(table, None)}: [{table}]: {name!r} is a built-in workload")
        if not isinstance(body, dict):
            raise ProfileError(f"{where('workloads', name)}: workloads.{name}: expected a table")
        if "trajectory" in body:  # a replay of real agent trajectories
            custom[name] = _replay_workload(name, body, where, path, timeouts)
        else:
            custom[name] = _workload(name, body, where)
    return custom


def _workload(name: str, body: dict[str, Any], where: Where) -> Workload:
    """A custom workload: its steps (profile_schema.WORKLOAD and STEP)."""
    table = f"workloads.{name}"
    replay = "; a replay: trajectory, repo, commit, allow_unisolated"
    _check_table(WORKLOAD, body, table, lambda key: where(table, key), also=replay)
    steps = [
        _step(f"{table}.steps[{i}]", raw, where(table, "steps"))
        for i, raw in enumerate(body.get("steps", WORKLOAD["steps"].default))
    ]
    if not steps:
        raise ProfileError(f"{where(table, None)}: {table}.steps: at least one step")
    return Workload(
        name=name,
        steps=tuple(steps),
        files=body.get("files", WORKLOAD["files"].default),
        description=body.get("description", WORKLOAD["description"].default),
    )


def _step(label: str, raw: Any, loc: str) -> Step:
    """One step of a custom workload; `loc` is the line of its `steps`."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{loc}: {label}: expected a table with argv")
    _check_table(STEP, raw, label, lambda key: loc)
    argv = raw.get("argv")
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ProfileError(f"{loc}: {label}.argv: a non-empty list of strings")
    rc = raw.get("expect_rc", STEP["expect_rc"].default)
    if isinstance(rc, str) and rc != "nonzero":
        raise ProfileError(f'{loc}: {label}.expect_rc: an integer or "nonzero"')
    return Step(
        argv=tuple(argv),
        expect_rc=rc,
        expect_out=raw.get("expect_out", STEP["expect_out"].default),
        timeout_s=raw.get("timeout_s", STEP["timeout_s"].default),
    )


def _replay_workload(
    name: str, body: dict[str, Any], where: Where, path: str, timeouts: Timeouts
) -> Workload:
    """`[workloads.NAME] trajectory = ...`: checked and read by the replay module."""
    from rtax_tui.engine.traj.workload import parse_replay_table

    def locate(key: str | None) -> str:
        return where(f"workloads.{name}", key)

    try:
        return parse_replay_table(name, body, locate, Path(path).parent, timeouts.action)
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


def resolve_profile_path(arg: str) -> Path:
    """A path, or the name of a built-in profile (`t0`, `default`, ...)."""
    p = Path(arg)
    if p.exists() or p.suffix == ".toml" or "/" in arg:
        return p
    return profiles_dir() / f"{arg}.toml"
