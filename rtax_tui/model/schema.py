"""A table's schema, declared once: its keys, each with its types, default, bounds, the
strings it takes and a line of help.

The profile's tables are declared with it (`engine.profile_schema`), and so is each
driver's `[drivers_options.NAME]` table: a driver's options are a frozen dataclass whose
fields are declared by their `Key` (`option`), from which its `Table` is read
(`options_table`), a profile's table is checked and the typed options object made
(`read_options`), and the drivers' documentation is generated
(`Table.markdown`, `scripts/driver-options-doc`). It lives in the model, below both the
drivers and the engine, so that both declare with the one type.

A key's `types` are the TOML types it takes (`bool` is never an integer); `default` is
what the reader takes when a table leaves the key out (None: no default, or "not set");
`bounds` are the least and most of a number (of each item of an array); `items` the type
of an array's items, checked with the key; `choices` the strings it takes; `check` a rule
beyond these (a driver option's: a capability's name, an absolute path), which says why a
value breaks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from rtax_tui.model.inputs import number_error
from rtax_tui.model.spec import OptionError


@dataclass(frozen=True)
class Key:
    types: tuple[type, ...]
    default: Any
    help: str
    bounds: tuple[float, float] | None = None  # least, most (of each item of an array)
    items: tuple[type, ...] = ()  # an array's items, checked with the key
    choices: tuple[str, ...] = ()  # the strings it takes
    required: bool = False
    check: Callable[[Any], str | None] | None = None  # why a value breaks a further rule

    def bounds_error(self, value: Any) -> str | None:
        """Why the number `value` (an array's item) is out of `bounds`; None when it is not."""
        if self.bounds is None:
            return None
        lo, hi = self.bounds
        integer = isinstance(value, int) and not isinstance(value, float)
        why = number_error(value, lo, hi, integer)
        if why is not None and self.items and why.startswith("must be at least"):
            why = "each " + why
        return why

    def value_error(self, value: Any) -> str | None:
        """Why this key does not take `value` (its type, its array's items' type and
        bounds, its bounds, its choices, then `check`), worded for an error message that
        already names the key; None when it takes it. A string is never bounded (a
        limit's "unlimited")."""
        why = type_error(value, self.types)
        if why is not None and self.items:
            why = f"expected array of {type_name(self.items)}, got {value!r}"
        if why is None and isinstance(value, list):
            for item in value if self.items else ():
                why = type_error(item, self.items) or (
                    None if isinstance(item, str) else self.bounds_error(item)
                )
                if why is not None:
                    break
        elif why is None and not isinstance(value, str):
            why = self.bounds_error(value)
        if why is None and self.choices and isinstance(value, str) and value not in self.choices:
            why = f"{value!r} (allowed: {', '.join(self.choices)})"
        if why is None and self.check is not None:
            why = self.check(value)
        return why

    def markdown(self) -> tuple[str, str, str]:
        """Its type, default and allowed values as a documentation table shows them."""
        kind = type_name(self.types)
        if self.items:
            kind = f"array of {type_name(self.items)}"
        allowed = ", ".join(f"`{c}`" for c in self.choices)
        if self.bounds is not None:
            lo, hi = (_number(b) for b in self.bounds)
            allowed = f"{lo} to {hi}" + (" each" if self.items else "")
        return kind, _toml(self.default), allowed


@dataclass(frozen=True)
class Table:
    name: str  # `run`; `hosts.NAME` for a table of tables
    help: str
    keys: dict[str, Key]

    def __getitem__(self, key: str) -> Key:
        return self.keys[key]

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    @property
    def allowed(self) -> str:
        """The keys, in order, as an error message lists them."""
        return ", ".join(self.keys)

    def defaults(self) -> dict[str, Any]:
        """Every key's default, as the loader holds it (an array as a tuple)."""
        return {k: key.default for k, key in self.keys.items()}

    def file_defaults(self) -> dict[str, Any]:
        """The defaults as a profile file writes them: an array as a (new) list, and a key
        without a default left out (TOML has no None)."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in self.defaults().items()
            if v is not None
        }

    def markdown(self) -> str:
        """The table's keys as a Markdown table: key, type, default, allowed, help."""
        if not self.keys:
            return "No options.\n"
        rows = ["| option | type | default | allowed | what |", "|---|---|---|---|---|"]
        for name, key in self.keys.items():
            kind, default, allowed = key.markdown()
            rows.append(f"| `{name}` | {kind} | {default} | {allowed} | {key.help} |")
        return "\n".join(rows) + "\n"


def type_name(types: tuple[type, ...]) -> str:
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "table",
    }
    return " or ".join(names.get(t, t.__name__) for t in types)


def type_error(value: Any, types: tuple[type, ...]) -> str | None:
    """Why `value` is not of `types` (a key's, or its array's items'), worded; None when
    it is. A boolean is never a number."""
    if bool in types and isinstance(value, bool):
        return None
    if isinstance(value, bool) or not isinstance(value, types):
        return f"expected {type_name(types)}, got {value!r}"
    return None


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _toml(value: Any) -> str:
    """A default as a profile writes it (none: not set)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`[" + ", ".join(_toml(v).strip("`") for v in value) + "]`"
    return f"`{value}`"


# -- a driver's options: a frozen dataclass of `option` fields -------------------------

_KEY = "rtax.key"  # a field's metadata entry holding its Key
Opts = TypeVar("Opts")


def option(key: Key) -> Any:
    """A field of a driver's options dataclass, declared by its `key`, whose default is
    the field's (an array's a tuple: the dataclass is frozen)."""
    if isinstance(key.default, (list, dict, set)):
        raise TypeError("an option's default is immutable (an array's a tuple)")
    return field(default=key.default, metadata={_KEY: key})


def options_table(cls: Any, name: str) -> Table:
    """The `[drivers_options.NAME]` table an options dataclass declares (its `option`
    fields, in order; a field without a Key is derived, not an option)."""
    keys = {f.name: f.metadata[_KEY] for f in fields(cls) if _KEY in f.metadata}
    help_ = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    return Table(f"drivers_options.{name}", help_, keys)


def read_options(cls: type[Opts], body: dict[str, Any]) -> Opts:
    """`body` (a `[drivers_options.NAME]` table, what TOML gave) checked against the
    options `cls` declares, as a `cls` (an array as a tuple, a key left out its
    default). A mistake is one `OptionError` naming the key and saying only what is
    wrong (the profile adds the file, the line and the table); the dataclass's own
    `__post_init__` may refuse a combination of keys the same way."""
    table = options_table(cls, "")
    for key, value in body.items():
        spec = table.keys.get(key)
        if spec is None:
            allowed = f"allowed: {table.allowed}" if table.keys else "this driver takes none"
            raise OptionError(key, f"unknown key ({allowed})")
        why = spec.value_error(value)
        if why is not None:
            raise OptionError(key, why)
    for name, spec in table.keys.items():
        if spec.required and name not in body:
            raise OptionError(name, "required")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in body.items()})
