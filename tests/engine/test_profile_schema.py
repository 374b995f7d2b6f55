"""The profile's schema, declared once (rtax_tui/engine/profile_schema.py): the loader's
defaults are its defaults, every key says what it is, and the console may import it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from rtax_tui.engine import profile_schema as schema
from rtax_tui.engine.poolspec import PoolSpec
from rtax_tui.engine.profile import Capacity, ProfileError, load_profile, parse_profile
from rtax_tui.model.spec import Limits, Timeouts

TABLES = [*schema.TABLES.values(), schema.HOST, schema.WORKLOAD, schema.STEP]


def test_a_profile_without_tables_takes_the_schemas_defaults(tmp_path) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("")
    prof = load_profile(path)
    assert prof.description == schema.TOP["description"].default
    for key, value in schema.RUN.defaults().items():
        assert getattr(prof, key) == value, key
    assert vars(prof.timeouts) == schema.TIMEOUTS.defaults()
    assert vars(prof.limits) == schema.LIMITS.defaults()
    assert prof.pool_spec == PoolSpec(**schema.POOL.defaults())


@pytest.mark.parametrize(
    "cls, table",
    [(Capacity, schema.CAPACITY), (PoolSpec, schema.POOL), (Timeouts, schema.TIMEOUTS),
     (Limits, schema.LIMITS)],
)  # fmt: skip
def test_each_tables_dataclass_has_the_schemas_keys_and_defaults(cls, table) -> None:
    assert {f.name: f.default for f in dataclasses.fields(cls)} == table.defaults()


def test_an_empty_capacity_table_is_the_schemas(tmp_path) -> None:
    prof = parse_profile({"capacity": {}}, "[capacity]\n", "p.toml", "p")
    assert vars(prof.capacity) == schema.CAPACITY.defaults()


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name or "top")
def test_every_key_has_a_type_and_a_one_line_help(table) -> None:
    assert table.help and "\n" not in table.help
    for name, key in table.keys.items():
        assert key.types and all(isinstance(t, type) for t in key.types), name
        assert key.help and "\n" not in key.help and len(key.help) < 90, name
        if key.bounds is not None:
            lo, hi = key.bounds
            assert lo <= hi, name
        if key.default is not None and not key.choices:
            items = key.default if isinstance(key.default, tuple) else (key.default,)
            assert all(key.bounds_error(v) is None for v in items if not isinstance(v, str))
        if key.choices:
            assert key.default in key.choices, name


def test_file_defaults_are_what_a_profile_file_writes() -> None:
    run = schema.RUN.file_defaults()
    assert run["drivers"] == list(schema.RUN["drivers"].default) and "modes" not in run
    run["drivers"].append("docker")  # a new list each time: the schema's stays as it is
    assert schema.RUN.file_defaults()["drivers"] == list(schema.RUN["drivers"].default)


def test_a_bound_from_the_schema_is_the_loaders(tmp_path, monkeypatch) -> None:
    """The loader checks through the schema: a narrower bound there is refused here."""
    trials = schema.RUN["trials"]
    monkeypatch.setitem(schema.RUN.keys, "trials", dataclasses.replace(trials, bounds=(1, 5)))
    with pytest.raises(ProfileError, match=r"p.toml:2: run.trials: at most 5"):
        parse_profile({"run": {"trials": 6}}, "[run]\ntrials = 6\n", "p.toml", "p")


def test_the_schema_imports_no_driver_and_no_host() -> None:
    """What lets the console (rtax_tui.ui) import it."""
    code = (
        "import sys, rtax_tui.engine.profile_schema\n"
        "bad = [m for m in sys.modules if m.startswith(('rtax_tui.drivers', 'rtax_tui.hosts'))]\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
