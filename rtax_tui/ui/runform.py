"""The launcher's form of a run: its numbers, its capacity and pool tables, its hosts.

It reads and writes the profile's tables (`tomllib`'s dict): `fill` shows them, `read`
writes what the fields say back into them; a key the form does not show is kept."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label

from rtax_tui.engine.profile_schema import RUN
from rtax_tui.ui.choicelists import CheckList, fill_list

NUMBERS = ("trials", "warmup", "concurrency", "seed")
CAPACITY_FIELDS = ("size", "batches", "deadline_s", "sizes")
POOL_FIELDS = ("size", "reset", "refill")


class RunForm(Vertical):
    """The fields of `[run]`, `[capacity]` and `[pool]`, and the hosts with a field to
    add an ssh:// one (enter there posts `RunForm.AddHost`)."""

    class AddHost(Message):
        """Enter in the add-host field."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.numbers = {k: Input(id=f"run-{k}", type="integer", placeholder="default")
                        for k in NUMBERS}  # fmt: skip
        self.capacity = {k: Input(id=f"cap-{k}", placeholder="-") for k in CAPACITY_FIELDS}
        self.pool = {k: Input(id=f"pool-{k}", placeholder="-") for k in POOL_FIELDS}
        self.hosts = CheckList(id="hosts")
        self.new_host = Input(placeholder="add ssh://user@host:port", id="add-host")

    def compose(self) -> ComposeResult:
        with Grid(id="numbers", classes="fields"):
            for key, field in self.numbers.items():
                yield Label(key)
                yield field
        yield Label("capacity (empty: trials, not batches)", classes="group")
        with Grid(id="capacity", classes="fields"):
            for key, field in self.capacity.items():
                yield Label(key)
                yield field
        yield Label("pool (empty: no pool)", classes="group")
        with Grid(id="pool", classes="fields"):
            for key, field in self.pool.items():
                yield Label(key)
                yield field
        with Horizontal(id="l-hosts"):
            yield self.hosts
            yield self.new_host

    def on_mount(self) -> None:
        self.border_title = "run"
        self.hosts.border_title = "hosts"

    def fill(self, d: dict[str, Any], host_choices: list[str]) -> None:
        """The fields from a profile's tables."""
        run = d.get("run", {})
        fill_list(self.hosts, host_choices, {**RUN.file_defaults(), **run}["hosts"])
        for key, field in self.numbers.items():
            v = run.get(key)
            field.value = "" if v is None else str(v)
            field.placeholder = f"{RUN[key].default} (default)"
        cap = d.get("capacity") or {}
        for key, field in self.capacity.items():
            v = cap.get(key)
            field.value = (
                ", ".join(map(str, v)) if isinstance(v, list) else "" if v is None else str(v)
            )
        pool = d.get("pool") or {}
        for key, field in self.pool.items():
            v = pool.get(key)
            field.value = "" if v is None else str(v)
        self.border_title = f"run: {d.get('name', '?')}"

    def read(self, d: dict[str, Any]) -> None:
        """The fields written into `d`, a copy of the profile's tables (ValueError: a
        field that is not what its key takes, named)."""
        run = d.setdefault("run", {})
        run["hosts"] = list(self.hosts.selected)
        for key, field in self.numbers.items():
            v = field.value.strip()
            if v:
                run[key] = int(v)
            else:
                run.pop(key, None)
        cap = {k: v for k, v in (d.get("capacity") or {}).items() if k not in CAPACITY_FIELDS}
        for key, field in self.capacity.items():
            v = field.value.strip()
            if v:
                cap[key] = _number(v, key) if key != "sizes" else _numbers(v)
        _set_table(d, "capacity", cap)
        pool = {k: v for k, v in (d.get("pool") or {}).items() if k not in POOL_FIELDS}
        for key, field in self.pool.items():
            v = field.value.strip()
            if v:
                pool[key] = _number(v, key) if key == "size" else v
        _set_table(d, "pool", pool)

    @on(Input.Changed)
    def _typed(self, ev: Input.Changed) -> None:
        if ev.input is self.new_host:  # a host being typed is no change of the profile
            ev.stop()

    @on(Input.Submitted)
    def _submitted(self, ev: Input.Submitted) -> None:
        if ev.input is self.new_host:
            ev.stop()
            self.post_message(self.AddHost())


def _set_table(d: dict[str, Any], name: str, table: dict[str, Any]) -> None:
    if table:
        d[name] = table
    else:
        d.pop(name, None)


def _number(v: str, key: str) -> int | float:
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {v!r}") from None


def _numbers(v: str) -> list[int]:
    try:
        return [int(x) for x in v.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"sizes: expected whole numbers separated by commas, got {v!r}") from None
