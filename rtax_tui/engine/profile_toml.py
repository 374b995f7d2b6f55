"""Profiles written back as TOML: what the console launches, kept as a file a person can rerun.

The console edits a profile as the plain tables a profile file holds (what `tomllib`
reads), so keys it does not know (a `[pool]` table, `[capacity] sizes`) pass through
as they are; `dump` writes those tables back, and `from_resolved` turns the resolved
profile of a recording's header (`Profile.to_dict`) into the same tables. Checking
stays with the one loader (`engine.profile`): whatever is written here is read back by
it before a run starts.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtax_tui.engine.profile_schema import RUN
from rtax_tui.model.spec import RtaxError

_BARE = re.compile(r"[A-Za-z0-9_-]+")
# the `[run]` keys of a resolved profile, in the schema's order (the order a person
# writes them); `modes` is written back only when it is not what `[pool]` alone gives
# (pool-only): a run of cold and pooled cells reloads as one
RUN_KEYS = tuple(k for k in RUN.keys if k != "modes")
# resolved keys that are not tables of the file (where the profile came from, and the
# command line's SSH flags, which a file does not hold)
_NOT_TABLES = {"name", "path", "description", "ssh_options", "modes", *RUN_KEYS}


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a profile holds finite numbers, not {v!r}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML's basic string's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"cannot write {type(v).__name__} {v!r} into a profile")


def inline(body: Mapping[str, Any]) -> str:
    """A table's keys as one line, `k = v, ...` (what goes between an inline table's braces)."""
    return ", ".join(f"{_key(k)} = {_value(v)}" for k, v in body.items() if v is not None)


def parse_inline(text: str) -> dict[str, Any]:
    """The reverse of `inline`; a ValueError says what is wrong."""
    import tomllib

    try:
        body: dict[str, Any] = tomllib.loads(f"t = {{{text}}}")["t"]
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not `key = value, ...`: {exc}") from None
    return body


def _table(out: list[str], name: str, body: Mapping[str, Any]) -> None:
    scalars = {k: v for k, v in body.items() if not isinstance(v, Mapping) and v is not None}
    subtables = {k: v for k, v in body.items() if isinstance(v, Mapping)}
    if scalars or not subtables:
        out.append(f"\n[{name}]")
        out.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
    for k, v in subtables.items():
        _table(out, f"{name}.{_key(k)}", v)


def dump(data: Mapping[str, Any], comment: str = "") -> str:
    """A profile's tables as TOML text (`None` values are left out, as TOML has none)."""
    out = [f"# {line}" if line else "#" for line in comment.splitlines()]
    for k, v in data.items():
        if not isinstance(v, Mapping) and v is not None:
            out.append(f"{_key(k)} = {_value(v)}")
    for k, v in data.items():
        if isinstance(v, Mapping):
            _table(out, _key(k), v)
    return "\n".join(out).lstrip("\n") + "\n"


# `[workloads.NAME]` keys that name a file or directory relative to the profile's own
# directory (a replay workload's `trajectory` and `repo`: engine.traj.workload)
WORKLOAD_PATH_KEYS = ("trajectory", "repo")


def anchor_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The profile's relative paths made absolute against `base_dir`, so that its tables
    mean the same written anywhere else (the console writes them beside a recording)."""
    for body in (data.get("workloads") or {}).values():
        if not isinstance(body, dict):
            continue
        for key in WORKLOAD_PATH_KEYS:
            value = body.get(key)
            if isinstance(value, str) and not value.startswith("~"):
                p = Path(value)
                if not p.is_absolute():
                    body[key] = str((base_dir / p).resolve())
    return data


def _no_nones(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def from_resolved(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The tables of a profile file from a recording header's resolved profile."""
    data: dict[str, Any] = {}
    for k in ("name", "description"):
        if resolved.get(k):
            data[k] = resolved[k]
    data["run"] = {k: resolved[k] for k in RUN_KEYS if resolved.get(k) is not None}
    modes = resolved.get("modes")
    if modes is not None and list(modes) != ["pool"]:
        data["run"]["modes"] = list(modes)
    for k in ("timeouts", "limits", "capacity"):
        if isinstance(resolved.get(k), Mapping):
            data[k] = _no_nones(resolved[k])
    if resolved.get("driver_options"):
        data["drivers_options"] = {k: dict(v) for k, v in resolved["driver_options"].items()}
    if resolved.get("host_tables"):
        data["hosts"] = {k: dict(v) for k, v in resolved["host_tables"].items()}
    custom = resolved.get("custom_workloads")
    if isinstance(custom, Mapping) and custom:
        data["workloads"] = {
            name: {"steps": [_no_nones(s) for s in steps]} for name, steps in custom.items()
        }
    handled = _NOT_TABLES | {
        "timeouts", "limits", "capacity", "driver_options", "host_tables", "custom_workloads",
    }  # fmt: skip
    for k, v in resolved.items():  # tables added later (a `[pool]`): passed through
        if k not in handled and isinstance(v, Mapping):
            data[k] = _no_nones(v)
    return data


def profiles_dir() -> Path:
    """The built-in profiles: `profiles/` beside the package (installed or in a checkout)."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "profiles", here.parent / "profiles"):
        if (cand / "default.toml").exists():
            return cand
    raise RtaxError("the built-in profiles are missing (reinstall rtax)")


SAVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def saved_profiles_dir() -> Path:
    """Where the console saves a profile (`ctrl+s`): `$XDG_CONFIG_HOME/rtax/profiles`,
    else `~/.config/rtax/profiles`. The user's own place, outside any checkout: a save
    never lands on a shipped profile (`profiles/t0.toml`, tracked by git) nor in the
    working tree, and the launcher lists these beside the built-ins."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "rtax" / "profiles"


def saved_profile_path(name: str) -> Path:
    """The file a profile named `name` is saved as; a name that is not one plain file
    name (a `/`, `..`, a leading dot) is refused, it would write elsewhere."""
    if not SAVED_NAME.fullmatch(name) or name.endswith("."):
        raise RtaxError(f"name {name!r}: a saved profile is named with letters, digits, _ . -")
    return saved_profiles_dir() / f"{name}.toml"
