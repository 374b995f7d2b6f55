"""Profiles: TOML files that say which cells to run, how often, with which limits.

Every key is checked before any trial runs; a mistake is reported as
`FILE:LINE: key: what is wrong (allowed: ...)` and the command exits 2.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rtax_tui.engine.poolspec import POOL_KEYS, PoolSpec, check_modes, parse_pool
from rtax_tui.engine.profile_toml import profiles_dir
from rtax_tui.model.inputs import (
    BATCH_MAX,
    BATCHES_MAX,
    CONCURRENCY_MAX,
    INT64_MAX,
    INT64_MIN,
    MIB_MAX,
    PROFILE_MAX,
    SECONDS_MAX,
    TRIALS_MAX,
    decode_utf8,
    number_error,
    read_input,
)
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


class ProfileError(RtaxError):
    pass


BUILTIN_WORKLOADS = WORKLOAD_NAMES

_SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "": {"name": (str,), "description": (str,)},
    "run": {
        "seed": (int,),
        "trials": (int,),
        "warmup": (int,),
        "concurrency": (int,),
        "hosts": (list,),
        "drivers": (list,),
        "workloads": (list,),
        "channels": (list,),
        "modes": (list,),
    },
    "timeouts": {k: (int, float) for k in ("create", "ready", "action", "teardown", "barrier")},
    # a number, or "unlimited" (checked by _limit)
    "limits": {
        "cpus": (int, float, str),
        "memory_mib": (int, str),
        "pids": (int, str),
        "workspace_mib": (int, str),
    },
    "capacity": {
        "size": (int,),
        "batches": (int,),
        "deadline_s": (int, float),
        "cpus": (int, float),
        "memory_mib": (int,),
        "swap_mib": (int,),
        "touch_mib": (int,),
        "sizes": (list,),
    },
    "pool": POOL_KEYS,  # checked by core.poolspec.parse_pool
}
# The range of every number a profile holds, (table, key) -> (least, most); an integer
# key's type says integer. Checked where the key is read, so the error names its line.
_RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("run", "seed"): (INT64_MIN, INT64_MAX),
    ("run", "trials"): (1, TRIALS_MAX),
    ("run", "warmup"): (0, TRIALS_MAX),
    ("run", "concurrency"): (1, CONCURRENCY_MAX),
    **{("timeouts", k): (0.001, SECONDS_MAX) for k in _SCHEMA["timeouts"]},
    ("capacity", "size"): (1, BATCH_MAX),
    ("capacity", "batches"): (1, BATCHES_MAX),
    ("capacity", "deadline_s"): (0.001, SECONDS_MAX),
    ("capacity", "cpus"): (0.01, 1 << 20),
    ("capacity", "memory_mib"): (1, MIB_MAX),
    ("capacity", "swap_mib"): (0, MIB_MAX),
    ("capacity", "touch_mib"): (1, 1 << 20),
    ("capacity", "sizes"): (1, BATCH_MAX),  # each
    ("hosts", "port"): (1, 65535),
    ("hosts", "concurrency"): (1, CONCURRENCY_MAX),
    ("steps", "timeout_s"): (0.001, SECONDS_MAX),
    ("steps", "expect_rc"): (INT64_MIN, INT64_MAX),
}


def _check_range(where: str, table: str, key: str, value: Any, label: str = "") -> None:
    """`value` within `_RANGES[(table, key)]` (an integer when the schema says only int)."""
    lo, hi = _RANGES[(table, key)]
    integer = isinstance(value, int) and not isinstance(value, float)
    why = number_error(value, lo, hi, integer)
    if why is not None:
        if why.startswith("must be at least") and (table, key) == ("capacity", "sizes"):
            why = "each " + why
        raise ProfileError(f"{where}: {label or f'{table}.{key}'}: {why}")


_STEP_KEYS = {
    "argv": (list,),
    "expect_rc": (int, str),
    "expect_out": (str,),
    "timeout_s": (int, float),
}
_WORKLOAD_KEYS = {"steps": (list,), "description": (str,), "files": (str,)}
# [hosts.NAME]: a remote host reached over SSH (run.hosts names it).
HOST_KEYS: dict[str, tuple[type, ...]] = {
    "address": (str,),
    "user": (str,),
    "port": (int,),
    "identity": (str,),
    "known_hosts": (str,),
    "jump": (str,),
    "concurrency": (int,),
}


@dataclass(frozen=True)
class Capacity:
    size: int = 8
    batches: int = 3
    deadline_s: float = 120.0
    cpus: float | None = None
    memory_mib: int | None = None
    swap_mib: int | None = 0
    touch_mib: int = 32  # the capacity workload's held private memory per environment
    sizes: tuple[int, ...] = ()  # a capacity curve: `batches` batches at each size

    @property
    def curve(self) -> tuple[int, ...]:
        """The sizes to run: `sizes`, or the single `size`."""
        return self.sizes or (self.size,)


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    description: str = ""
    seed: int = 1
    trials: int = 30
    warmup: int = 3
    concurrency: int = 1
    hosts: tuple[str, ...] = ("local",)
    drivers: tuple[str, ...] = ("local", "stage")
    workloads: tuple[str, ...] = ("t0",)
    channels: tuple[str, ...] = ("exec",)
    timeouts: Timeouts = field(default_factory=Timeouts)
    limits: Limits = field(default_factory=Limits)
    capacity: Capacity | None = None
    pool: PoolSpec | None = None  # [pool] or --pool N
    modes: tuple[str, ...] | None = None  # [run] modes; None: pool if [pool], else cold
    custom_workloads: dict[str, Workload] = field(default_factory=dict)
    driver_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # identity / known_hosts / trust_new from the command line, for every SSH host
    ssh_options: dict[str, Any] = field(default_factory=dict)

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
        if self.pool is not None or self.modes is not None:  # older headers keep their shape
            d["pool"] = self.pool_spec.to_dict()
            d["modes"] = list(self.run_modes)
        if self.host_tables:
            d["host_tables"] = self.host_tables
        if self.ssh_options:
            d["ssh_options"] = self.ssh_options
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
        for key in ("drivers", "workloads", "channels", "hosts"):
            if key in kw:
                kw[key] = tuple(kw[key])
        prof = replace(self, **kw)
        prof._check_names(lambda key: "command line" if key in kw else self.path)
        return prof

    def with_sizes(self, sizes: tuple[int, ...]) -> Profile:
        """The capacity curve from the command line (`--sizes`)."""
        if self.capacity is None:
            raise ProfileError(f"{self.path}: --sizes: the profile has no [capacity] table")
        return replace(self, capacity=replace(self.capacity, sizes=tuple(sizes)))

    def _check_names(self, locate: Callable[[str], str]) -> None:
        def bad(key: str, value: Any, allowed: tuple[str, ...]) -> None:
            raise ProfileError(
                f"{locate(key)}: {key}: unknown {value!r} (allowed: {', '.join(allowed)})"
            )

        from rtax_tui.drivers import names as driver_names

        known = driver_names()
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
        for h in self.hosts:
            if h != "local" and not h.startswith("ssh://") and h not in self.host_tables:
                raise ProfileError(
                    f"{locate('hosts')}: hosts: unknown {h!r} (allowed: local, "
                    f"ssh://[user@]host[:port]{''.join(', ' + n for n in self.host_tables)})"
                )
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

        cells = len(self.hosts) * len(self.drivers) * len(self.workloads) * len(self.channels)
        cells *= len(self.run_modes)
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
        if self.capacity is not None and "pool" in self.run_modes:
            raise ProfileError(
                f"{locate('modes')}: pool: a capacity run starts its batches cold "
                "(remove [pool] or [capacity])"
            )

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


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "integer", float: "number", str: "string", list: "array", dict: "table"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check_type(where: str, key: str, value: Any, types: tuple[type, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, types):
        raise ProfileError(f"{where}: {key}: expected {_type_name(types)}, got {value!r}")


# The largest limit each key takes: a MiB count whose bytes still fit in a signed
# 64-bit integer (what cgroups, docker and the kernel take), a pid count the same.
_LIMIT_MAX = {"cpus": 1 << 20, "memory_mib": (1 << 43) - 1, "pids": (1 << 63) - 1}
_LIMIT_MAX["workspace_mib"] = _LIMIT_MAX["memory_mib"]


def _limit(where: str, key: str, value: Any) -> float | int | None:
    """One `[limits]` value: a positive number (an integer but for cpus), or
    "unlimited" (None); anything else is a one-line ProfileError naming the key."""
    if value == UNLIMITED:
        return None
    want = "a positive number" if key == "cpus" else "a positive integer"
    allowed = f'{want} or "unlimited"'
    ok_type = (int, float) if key == "cpus" else (int,)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        raise ProfileError(f"{where}: limits.{key}: expected {allowed}, got {value!r}")
    if isinstance(value, float) and value != value:  # nan
        raise ProfileError(f"{where}: limits.{key}: expected {allowed}, got {value!r}")
    least = 0.01 if key == "cpus" else 1
    if value < least:
        raise ProfileError(
            f"{where}: limits.{key}: must be at least {least} "
            f'(no limit is "unlimited"), got {value!r}'
        )
    if value > _LIMIT_MAX[key]:
        raise ProfileError(
            f"{where}: limits.{key}: at most {_LIMIT_MAX[key]} "
            f'(no limit is "unlimited"), got {value!r}'
        )
    return float(value) if key == "cpus" else value


def _check_driver_options(name: str, body: dict[str, Any], where: Callable[[str], str]) -> None:
    """The driver's own check of its `[drivers_options.NAME]` table (the driver knows
    its options), reported here with the file and the line of the field."""
    from rtax_tui.drivers import driver_class

    try:
        driver_class(name).check_options(body)
    except OptionError as exc:
        raise ProfileError(f"{where(exc.key)}: {exc}") from None


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
    def where(table: str, key: str | None) -> str:
        return f"{path}:{_line_of(text, table, key)}"

    # the tables the schema below does not bound number by number
    _check_integers({k: v for k, v in data.items() if k in ("drivers_options", "workloads")}, where)
    known_tables = set(_SCHEMA) - {""} | {"workloads", "drivers_options", "hosts"}
    kw: dict[str, Any] = {"name": default_name, "path": path}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in known_tables:
                raise ProfileError(
                    f"{where(key, None)}: [{key}]: unknown table "
                    f"(allowed: {', '.join(sorted(known_tables))})"
                )
            continue
        if key not in _SCHEMA[""]:
            raise ProfileError(
                f"{where('', key)}: {key}: unknown key (allowed: {', '.join(_SCHEMA[''])}, "
                f"and tables {', '.join(sorted(known_tables))})"
            )
        _check_type(where("", key), key, value, _SCHEMA[""][key])
        kw[key] = value

    for table in ("run", "timeouts", "limits", "capacity"):  # [pool]: parse_pool
        if table not in data:
            continue
        body = data[table]
        for key, value in body.items():
            if key not in _SCHEMA[table]:
                raise ProfileError(
                    f"{where(table, key)}: {table}.{key}: unknown key "
                    f"(allowed: {', '.join(_SCHEMA[table])})"
                )
            if table == "limits":
                _limit(where(table, key), key, value)
                continue
            _check_type(where(table, key), f"{table}.{key}", value, _SCHEMA[table][key])
            if isinstance(value, list):
                item_types: tuple[type, ...] = (
                    (int,) if (table, key) == ("capacity", "sizes") else (str,)
                )
                for item in value:
                    _check_type(where(table, key), f"{table}.{key}", item, item_types)
                    if (table, key) in _RANGES:
                        _check_range(where(table, key), table, key, item)
            elif (table, key) in _RANGES:
                _check_range(where(table, key), table, key, value)

    run = data.get("run", {})
    for key in ("seed", "trials", "warmup", "concurrency"):
        if key in run:
            kw[key] = run[key]
    for key in ("hosts", "drivers", "workloads", "channels"):
        if key in run:
            kw[key] = tuple(run[key])
    if "timeouts" in data:
        kw["timeouts"] = Timeouts(**{k: float(v) for k, v in data["timeouts"].items()})
    if "limits" in data:
        given: dict[str, Any] = {
            k: _limit(where("limits", k), k, v) for k, v in data["limits"].items()
        }
        kw["limits"] = Limits(**given)
    if "capacity" in data:
        cap = dict(data["capacity"])
        if "sizes" in cap:
            cap["sizes"] = tuple(cap["sizes"])
        kw["capacity"] = Capacity(**cap)
    try:
        if "pool" in data:
            kw["pool"] = parse_pool(data["pool"], lambda key: where("pool", key))
        if "modes" in run:
            kw["modes"] = check_modes(run["modes"], where("run", "modes"))
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None
    if "drivers_options" in data:
        from rtax_tui.drivers import names as driver_names

        opts = data["drivers_options"]
        known = driver_names()
        for name, body in opts.items():
            if name not in known or not isinstance(body, dict):
                raise ProfileError(
                    f"{where('drivers_options.' + name, None)}: drivers_options.{name}: "
                    f"expected a table for one of {', '.join(known)}"
                )
            table = f"drivers_options.{name}"

            def locate(key: str, table: str = table) -> str:
                return where(table, key)

            _check_driver_options(name, body, locate)
        kw["driver_options"] = opts

    tables: dict[str, dict[str, Any]] = {}
    for name, body in data.get("hosts", {}).items():
        table = f"hosts.{name}"
        if not isinstance(body, dict):
            raise ProfileError(f"{where('hosts', name)}: hosts.{name}: expected a table")
        if name == "local" or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ProfileError(
                f"{where(table, None)}: [{table}]: a host name is letters, digits, _.- "
                "and not `local`"
            )
        for key, value in body.items():
            if key not in HOST_KEYS:
                raise ProfileError(
                    f"{where(table, key)}: {table}.{key}: unknown key "
                    f"(allowed: {', '.join(HOST_KEYS)})"
                )
            _check_type(where(table, key), f"{table}.{key}", value, HOST_KEYS[key])
        if "address" not in body:
            raise ProfileError(f"{where(table, None)}: {table}.address: required")
        for key in ("port", "concurrency"):
            if key in body:
                _check_range(where(table, key), "hosts", key, body[key], f"{table}.{key}")
        tables[name] = dict(body)
    kw["host_tables"] = tables

    custom: dict[str, Workload] = {}
    for name, body in data.get("workloads", {}).items():
        table = f"workloads.{name}"
        if name in BUILTIN_WORKLOADS:
            raise ProfileError(f"{where(table, None)}: [{table}]: {name!r} is a built-in workload")
        if not isinstance(body, dict):
            raise ProfileError(f"{where('workloads', name)}: workloads.{name}: expected a table")
        if "trajectory" in body:  # a replay of real agent trajectories
            custom[name] = _replay_workload(name, body, where, path, kw)
            continue
        for key, value in body.items():
            if key not in _WORKLOAD_KEYS:
                raise ProfileError(
                    f"{where(table, key)}: {table}.{key}: unknown key "
                    f"(allowed: {', '.join(_WORKLOAD_KEYS)}; a replay: trajectory, repo, "
                    "commit, allow_unisolated)"
                )
            _check_type(where(table, key), f"{table}.{key}", value, _WORKLOAD_KEYS[key])
        steps = []
        for i, raw in enumerate(body.get("steps", [])):
            loc = where(table, "steps")
            if not isinstance(raw, dict):
                raise ProfileError(f"{loc}: {table}.steps[{i}]: expected a table with argv")
            for key, value in raw.items():
                if key not in _STEP_KEYS:
                    raise ProfileError(
                        f"{loc}: {table}.steps[{i}].{key}: unknown key "
                        f"(allowed: {', '.join(_STEP_KEYS)})"
                    )
                _check_type(loc, f"{table}.steps[{i}].{key}", value, _STEP_KEYS[key])
                if ("steps", key) in _RANGES and not isinstance(value, str):
                    _check_range(loc, "steps", key, value, f"{table}.steps[{i}].{key}")
            argv = raw.get("argv")
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ProfileError(f"{loc}: {table}.steps[{i}].argv: a non-empty list of strings")
            rc = raw.get("expect_rc", 0)
            if isinstance(rc, str) and rc != "nonzero":
                raise ProfileError(f'{loc}: {table}.steps[{i}].expect_rc: an integer or "nonzero"')
            steps.append(
                Step(
                    argv=tuple(argv),
                    expect_rc=rc,
                    expect_out=raw.get("expect_out"),
                    timeout_s=raw.get("timeout_s"),
                )
            )
        if not steps:
            raise ProfileError(f"{where(table, None)}: {table}.steps: at least one step")
        custom[name] = Workload(
            name=name,
            steps=tuple(steps),
            files=body.get("files"),
            description=body.get("description", ""),
        )
    kw["custom_workloads"] = custom

    prof = Profile(**kw)
    prof._check_names(lambda key: where("run", key))
    return prof


def _replay_workload(
    name: str, body: dict[str, Any], where: Callable[[str, str | None], str], path: str,
    kw: dict[str, Any],
) -> Workload:  # fmt: skip
    """`[workloads.NAME] trajectory = ...`: checked and read by the replay module."""
    from rtax_tui.engine.traj.workload import parse_replay_table

    def locate(key: str | None) -> str:
        return where(f"workloads.{name}", key)

    kill_s = kw.get("timeouts", Timeouts()).action
    try:
        return parse_replay_table(name, body, locate, Path(path).parent, kill_s)
    except RtaxError as exc:
        raise ProfileError(str(exc)) from None


def resolve_profile_path(arg: str) -> Path:
    """A path, or the name of a built-in profile (`t0`, `default`, ...)."""
    p = Path(arg)
    if p.exists() or p.suffix == ".toml" or "/" in arg:
        return p
    return profiles_dir() / f"{arg}.toml"
