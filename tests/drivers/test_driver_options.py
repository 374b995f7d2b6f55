"""Drivers' options are declared once (`model.schema`: the profile's own `Key` and
`Table`): checked from a profile's table into a typed object, and documented from the
same declaration (docs/drivers.md's tables)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from rtax_tui.drivers import driver_class
from rtax_tui.drivers.registry import OPTIONS_DOC, options_doc

from rtax_tui.model.schema import Key, option, read_options
from rtax_tui.model.spec import OptionError

DOC = Path(__file__).parents[2] / "docs" / "drivers.md"
BUILTINS = ("local", "stage", "docker", "podman", "libvirt", "microvm", "gvisor", "swerex")


def _no_bigger_than_three(value: list[int]) -> str | None:
    return None if len(value) <= 3 else f"at most 3 items, got {len(value)}"


@dataclass(frozen=True)
class Sample:
    """`[drivers_options.sample]`: a test's."""

    mode: str = option(Key((str,), "fast", "how", choices=("fast", "safe")))
    size: int = option(Key((int,), 4, "how big", (1, 8)))
    ratio: float = option(Key((int, float), 0.5, "how much", (0.0, 1.0)))
    on: bool = option(Key((bool,), False, "whether"))
    ports: tuple[int, ...] = option(
        Key((list,), (), "which", (1, 65535), items=(int,), check=_no_bigger_than_three)
    )
    name: str | None = option(Key((str,), None, "its name"))


def test_a_table_becomes_the_typed_object_with_defaults_filled_in():
    o = read_options(Sample, {"mode": "safe", "ports": [22, 80], "on": True})
    assert o == Sample(mode="safe", size=4, ratio=0.5, on=True, ports=(22, 80), name=None)
    assert read_options(Sample, {}) == Sample()


@pytest.mark.parametrize(
    ("body", "key", "says"),
    [
        ({"mdoe": "safe"}, "mdoe", "unknown key (allowed: mode, size, ratio, on, ports, name)"),
        ({"mode": "slow"}, "mode", "'slow' (allowed: fast, safe)"),
        ({"mode": 3}, "mode", "expected string, got 3"),
        ({"size": 9}, "size", "at most 8, got 9"),
        ({"size": 0}, "size", "must be at least 1, got 0"),
        ({"size": True}, "size", "expected integer, got True"),  # a bool is never a number
        ({"size": 2.0}, "size", "expected integer, got 2.0"),
        ({"ratio": float("nan")}, "ratio", "expected a finite number, got nan"),
        ({"on": 1}, "on", "expected boolean, got 1"),
        ({"ports": 22}, "ports", "expected array of integer, got 22"),
        ({"ports": ["22"]}, "ports", "expected integer, got '22'"),
        ({"ports": [0]}, "ports", "each must be at least 1, got 0"),
        ({"ports": [1, 2, 3, 4]}, "ports", "at most 3 items, got 4"),
    ],
)
def test_a_mistake_is_one_option_error_naming_the_key(body, key, says):
    with pytest.raises(OptionError) as exc:
        read_options(Sample, body)
    assert exc.value.key == key and str(exc.value) == says


def test_a_driver_without_options_refuses_any_key():
    from rtax_tui.drivers.base import NoOptions

    with pytest.raises(OptionError, match=r"unknown key \(this driver takes none\)"):
        read_options(NoOptions, {"x": 1})


def test_a_mutable_default_is_refused_at_declaration():
    with pytest.raises(TypeError, match="immutable"):
        option(Key((list,), [], "a list"))


@pytest.mark.parametrize("name", BUILTINS)
def test_every_built_in_driver_declares_its_options(name):
    """Each built-in's declaration: every key with a help line, a default its own key
    takes (as TOML gives it: an array as a list), and the driver's typed object made
    from an empty table equals the declared defaults."""
    cls = driver_class(name)
    table = cls.options_table()
    assert table.keys, name  # every built-in takes options
    opts = cls.check_options({})
    for key, spec in table.keys.items():
        assert spec.help, key
        if spec.default is not None:
            given = list(spec.default) if isinstance(spec.default, tuple) else spec.default
            assert spec.value_error(given) is None, (key, spec.default)
        assert getattr(opts, key) == spec.default, key
    assert {f.name for f in fields(opts) if f.init} == set(table.keys)


def test_the_container_engines_narrow_userns_each_their_own():
    docker, podman = driver_class("docker"), driver_class("podman")
    assert docker.check_options({"userns": "remap"}).userns == "remap"
    assert podman.check_options({"userns": "keep-id:uid=1"}).userns == "keep-id:uid=1"
    for cls, bad in ((docker, "keep-id"), (podman, "remap")):
        with pytest.raises(OptionError) as exc:
            cls.check_options({"userns": bad})
        assert exc.value.key == "userns"
    assert "nofile" in podman.options_table() and "nofile" not in docker.options_table()


def test_the_doc_s_options_tables_are_the_declarations():
    """docs/drivers.md's options tables are generated from the declarations: regenerate
    them with scripts/driver-options-doc, never by hand. Every built-in has one."""
    text = DOC.read_text()
    assert options_doc(text) == text, "docs/drivers.md: run bash scripts/driver-options-doc"
    assert sorted(m.group(2) for m in OPTIONS_DOC.finditer(text)) == sorted(BUILTINS)


def test_a_stale_table_is_regenerated():
    """The check above can fail: a table that says otherwise is replaced by the
    declaration's, and the text around it is kept."""
    text = DOC.read_text()
    stale = text.replace("| `uid` | integer | `64000` |", "| `uid` | integer | `1000` |")
    assert stale != text and options_doc(stale) == text
