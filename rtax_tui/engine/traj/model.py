"""The normalized trajectory every reader produces (see docs/trajectories.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rtax_tui.model.spec import RtaxError

FORMATS = (
    "swe-agent",
    "mini-swe-agent",
    "openhands-v0",
    "openhands-v1",
    "codex",
    "claude-code",
    "gemini-cli",
)
KINDS = ("shell", "edit", "read", "write", "other")
TRAJ_FORMAT = "rtax-traj/1"


class TrajError(RtaxError):
    """A malformed trajectory: `FILE:LINE: what` (exit status 2)."""


# The normalized step every format's reader produces, checked once per trajectory read
# (`check_steps`): whatever a format's record held, what rtax uses has these types.
STEP_SCHEMA: dict[str, tuple[type, ...]] = {
    "i": (int,),
    "kind": (str,),
    "tool": (str,),
    "command": (str, type(None)),
    "cwd": (str, type(None)),
    "exit_code": (int, type(None)),
    "output": (str, type(None)),
    "call_id": (str, type(None)),
    "paired": (bool,),
    "started_at": (str, type(None)),
    "ended_at": (str, type(None)),
}
_NAMES = {int: "an integer", str: "a string", bool: "true or false", type(None): "null"}


@dataclass(slots=True)
class Step:
    """One call the agent issued, joined with its result when there is one."""

    i: int
    kind: str
    tool: str
    command: str | None = None
    cwd: str | None = None
    exit_code: int | None = None
    output: str | None = None
    call_id: str | None = None
    paired: bool = False
    started_at: str | None = None
    ended_at: str | None = None
    line: int | None = None  # where the call is (JSONL: its line; JSON files: None)
    args: Any = None  # the call's arguments as recorded (edits, writes: for replay)

    def problem(self) -> str | None:
        """The first field of this step whose type is not `STEP_SCHEMA`'s, worded."""
        if (  # the common case, exact types only, at a fraction of the loop's cost
            type(self.i) is int
            and type(self.kind) is str
            and type(self.tool) is str
            and type(self.paired) is bool
            and (self.command is None or type(self.command) is str)
            and (self.cwd is None or type(self.cwd) is str)
            and (self.output is None or type(self.output) is str)
            and (self.call_id is None or type(self.call_id) is str)
            and (self.started_at is None or type(self.started_at) is str)
            and (self.ended_at is None or type(self.ended_at) is str)
            and (self.exit_code is None or type(self.exit_code) is int)
            and (self.exit_code is None or -(1 << 63) <= self.exit_code < (1 << 63))
        ):
            return None
        for name, types in STEP_SCHEMA.items():
            v = getattr(self, name)
            if isinstance(v, bool) and bool not in types or not isinstance(v, types):
                return f"{name}: expected {' or '.join(_NAMES[t] for t in types)}"
        if self.exit_code is not None and not -(1 << 63) <= self.exit_code < (1 << 63):
            return "exit_code: an integer of 64 bits at most"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "i": self.i,
            "kind": self.kind,
            "tool": self.tool,
            "command": self.command,
            "cwd": self.cwd,
            "exit_code": self.exit_code,
            "output_bytes": None if self.output is None else len(self.output.encode()),
            "paired": self.paired,
            "call_id": self.call_id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@dataclass
class Trajectory:
    format: str
    path: str
    steps: list[Step] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # unknown record type -> count
    variant: str | None = None  # e.g. swe-agent "0.x"/"1.x", mini "mini-swe-agent-1"

    @property
    def skipped_records(self) -> int:
        return sum(self.skipped.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "variant": self.variant,
            "path": self.path,
            "steps": [s.to_json() for s in self.steps],
            "skipped_records": self.skipped_records,
            "skipped_types": dict(sorted(self.skipped.items())),
            "unpaired": sum(1 for s in self.steps if not s.paired),
            "kinds": {k: sum(1 for s in self.steps if s.kind == k) for k in KINDS},
        }


def int_or_none(v: Any) -> int | None:
    """An exit code as recorded: ints (not bools) of 64 bits only; -1 means unknown."""
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < (1 << 63):
        return None
    return None if v == -1 else v


def code_of(digits: str) -> int | None:
    """An exit code written out in a tool's output (`-?\\d+`): None past 64 bits (a
    5,000-digit code would reach Python's limit on int() of a string)."""
    if len(digits.lstrip("-")) > 19:
        return None
    return int_or_none(int(digits))


def text_of(v: Any) -> str | None:
    """A result's text: a string, or the `text` parts of a list of content blocks."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        parts = []
        for b in v:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict) and isinstance(b.get("text"), str):
                parts.append(b["text"])
        return "".join(parts)
    if isinstance(v, dict) and isinstance(v.get("text"), str):
        return str(v["text"])
    return None


def obj(v: Any) -> dict[str, Any]:
    """`v` when it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


class ShapeError(TrajError):
    """A whole-file JSON value of the wrong shape at `where` (keys and indices from the
    top); the reader turns it into `FILE:LINE: what` once it has found the line."""

    def __init__(self, path: str, where: tuple[str | int, ...], what: str) -> None:
        self.path, self.where, self.what = path, where, what
        self.line: int | None = None  # known already (a JSON Lines record)
        super().__init__(f"{path}:1: {dotted(where)}: {what}" if where else f"{path}:1: {what}")


def dotted(where: tuple[str | int, ...]) -> str:
    out = ""
    for w in where:
        out += f"[{w}]" if isinstance(w, int) else (f".{w}" if out else w)
    return out
