"""What a replay of a trajectory does, step by step: shell steps become commands, edits
and writes become file operations, reads become reads of the file, the rest is skipped
and counted. Pure: nothing here runs a command or touches a file; the replay workload
(`engine/traj/workload.py`) executes the plan through a cell's channel."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.engine.traj.model import Step, Trajectory, obj


@dataclass(frozen=True, slots=True)
class ReplayAction:
    """One replayed step. `op`: `shell` (run `command` through `shell -c` in `cwd`), `write`
    (`path` gets `content`), `replace` (`old` -> `new` in `path`, every occurrence when
    `all`) or `read` (`path` is read). `expect_rc` is the recorded exit code (None: none
    recorded, not compared)."""

    i: int
    op: str
    command: str | None = None
    cwd: str | None = None
    expect_rc: int | None = None
    path: str | None = None
    content: str | None = None
    old: str | None = None
    new: str | None = None
    all: bool = False
    shell: str = "sh"

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.shell, "-c", self.command or "")


# The shell each agent runs its commands with: mini-swe-agent's local environment uses
# `subprocess.run(..., shell=True)` (/bin/sh); the others run bash.
AGENT_SHELL: dict[str, str] = {"mini-swe-agent": "sh"}


@dataclass
class ReplayPlan:
    format: str
    actions: list[ReplayAction] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # why -> steps

    @property
    def with_rc(self) -> int:
        """Replayed steps with a recorded exit code: the fidelity denominator."""
        return sum(1 for a in self.actions if a.op == "shell" and a.expect_rc is not None)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _file_op(s: Step) -> ReplayAction | None:
    """The file write or replacement of an edit/write step, from its recorded arguments;
    None when the arguments are not of a known shape (a patch, a notebook, an insert)."""
    a = obj(s.args)
    path = _str(a.get("file_path")) or _str(a.get("path"))
    if path is None:
        return None
    if s.kind == "write":
        content = a.get("content", a.get("file_text"))
        if isinstance(content, str):
            return ReplayAction(s.i, "write", path=path, content=content)
        return None
    old = a.get("old_string", a.get("old_str"))
    new = a.get("new_string", a.get("new_str"))
    if isinstance(old, str) and isinstance(new, str) and old:
        return ReplayAction(
            s.i, "replace", path=path, old=old, new=new, all=a.get("replace_all") is True
        )
    if s.tool in ("file_editor", "str_replace_editor") and a.get("command") == "create":
        text = a.get("file_text")
        if isinstance(text, str):
            return ReplayAction(s.i, "write", path=path, content=text)
    return None


def _read_op(s: Step) -> ReplayAction | None:
    a = obj(s.args)
    path = _str(a.get("file_path")) or _str(a.get("path")) or _str(a.get("absolute_path"))
    return None if path is None else ReplayAction(s.i, "read", path=path)


def replay_plan(traj: Trajectory) -> ReplayPlan:
    """Shell steps in order; edits and writes as file operations where their arguments
    say what to write; reads as reads of the file they name; `other` steps skipped and
    counted by kind."""
    plan = ReplayPlan(traj.format)
    shell = AGENT_SHELL.get(traj.format, "bash")
    for s in traj.steps:
        if s.kind == "shell" and s.command is not None:
            plan.actions.append(
                ReplayAction(
                    s.i, "shell", command=s.command, cwd=s.cwd, expect_rc=s.exit_code, shell=shell
                )
            )
        elif s.kind == "read":
            op = _read_op(s)
            if op is None:
                plan.skipped[f"read ({s.tool}: no path)"] += 1
            else:
                plan.actions.append(op)
        elif s.kind in ("edit", "write"):
            op = _file_op(s)
            if op is None:
                plan.skipped[f"{s.kind} ({s.tool}: arguments not replayable)"] += 1
            else:
                plan.actions.append(op)
        else:
            plan.skipped[s.kind] += 1
    return plan
