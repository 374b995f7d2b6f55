"""Agent trajectories: detect a file's format from its content and read it into one
normalized trajectory (rules: docs/trajectories.md). No tool is ever executed here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtax_tui.engine.traj.json_formats import (
    openhands_events,
    read_gemini_messages,
    read_mini_swe_agent,
    read_openhands_v0,
    read_swe_agent,
)
from rtax_tui.engine.traj.jsonl_formats import (
    CODEX_WRAPPERS,
    read_claude_code,
    read_codex,
    read_gemini_jsonl,
    read_openhands_v1,
)
from rtax_tui.engine.traj.model import (
    FORMATS,
    KINDS,
    ShapeError,
    Step,
    Trajectory,
    TrajError,
    dotted,
)
from rtax_tui.engine.traj.source import (
    JsonLines,
    first_line,
    iter_lines,
    json_error,
    load_whole,
    locate,
    more_after,
    read_bytes,
)

__all__ = [
    "FORMATS",
    "KINDS",
    "Step",
    "TrajError",
    "Trajectory",
    "detect",
    "find_trajectories",
    "read_trajectories",
]


def _json_format(doc: Any) -> str | None:
    if isinstance(doc, dict):
        if isinstance(doc.get("trajectory"), list) or ("attempts" in doc and "info" in doc):
            return "swe-agent"
        tf = doc.get("trajectory_format")
        if "messages" in doc and isinstance(tf, str) and tf.startswith("mini-swe-agent"):
            return "mini-swe-agent"
        if isinstance(doc.get("history"), list):
            return "openhands-v0"
        if "sessionId" in doc and "projectHash" in doc:
            return "gemini-cli"
    elif isinstance(doc, list) and doc:
        if all(isinstance(e, dict) for e in doc) and any(
            "action" in e or "observation" in e for e in doc
        ):
            return "openhands-v0"
        if all(isinstance(e, list) for e in doc):  # old [action, observation] pairs
            return "openhands-v0"
    return None


def _line_format(r: Any) -> str | None:
    if not isinstance(r, dict):
        return None
    if "sessionId" in r and "projectHash" in r:
        return "gemini-cli"
    if r.get("type") in CODEX_WRAPPERS and "payload" in r:
        return "codex"
    if r.get("record_type") == "state":
        return "codex"
    if r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict):
        return "claude-code"
    if isinstance(r.get("history"), list):
        return "openhands-v0"
    return None


def detect(path: Path) -> str:
    """The format id of a file or directory, from its content (never its name)."""
    if path.is_dir():
        if (path / "base_state.json").is_file() or (path / "events").is_dir():
            return "openhands-v1"
        raise TrajError(f"{path}:1: a directory without base_state.json or events/")
    fmt, _, _ = _detect_data(path, read_bytes(path))
    return fmt


def _detect_data(path: Path, data: bytes) -> tuple[str, Any, JsonLines | None]:
    """(format, the whole-file JSON value or None, the lines when the file is JSONL)."""
    first = first_line(data)
    if first is None or not more_after(data, first[2]):  # it may be one JSON value
        whole, doc = load_whole(data)
        if whole:
            fmt = _json_format(doc)
            if fmt is not None:
                return fmt, doc, None
            fmt = _line_format(doc)  # a one-line JSONL file
            if fmt is not None:
                return fmt, None, JsonLines(path, data)
            raise TrajError(f"{path}:1: not a known trajectory format")
    if first is None:
        raise json_error(path, data)
    lineno0, r0, _ = first
    lines = JsonLines(path, data)
    if isinstance(r0, dict) and "id" in r0 and "timestamp" in r0 and "type" not in r0:
        return "codex", None, lines  # older rollouts: a bare {id, timestamp} header
    for _lineno, r in lines:
        fmt = _line_format(r)
        if fmt is not None:
            return fmt, None, lines
    raise TrajError(f"{path}:{lineno0}: not a known trajectory format")


def read_trajectories(path: Path | str) -> list[Trajectory]:
    """Every trajectory in a file (an OpenHands eval output.jsonl holds one per line) or a
    conversation directory."""
    p = Path(path)
    name = str(p)
    data, doc = b"", None
    try:
        if p.is_dir():
            detect(p)
            return _checked(name, [read_openhands_v1(name, p)])
        data = read_bytes(p)
        fmt, doc, lines = _detect_data(p, data)
        return _checked(name, _read(name, p, lines or data, fmt, doc))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        # the readers check the fields they use (ShapeError, below); a value of a type
        # none of them expected is still one line, never a traceback (issue 21)
        raise TrajError(f"{name}:1: an unexpected shape ({exc.__class__.__name__})") from None
    except ShapeError as exc:
        if exc.line is not None:
            line = exc.line
        elif doc is not None:
            line = locate(data, exc.where)
        else:
            line = 1
        where = dotted(exc.where)
        raise TrajError(f"{name}:{line}: {where + ': ' if where else ''}{exc.what}") from None


def _checked(name: str, trajs: list[Trajectory]) -> list[Trajectory]:
    """Every normalized step against `STEP_SCHEMA`: a field of another type (a format's
    record held a number where text belongs) is one line naming the step and field."""
    for t in trajs:
        for s in t.steps:
            why = s.problem()
            if why is not None:
                raise TrajError(f"{name}:{s.line or 1}: step {s.i}: {why}")
    return trajs


def _read(name: str, p: Path, data: bytes | JsonLines, fmt: str, doc: Any) -> list[Trajectory]:
    if fmt == "swe-agent":
        return [read_swe_agent(name, doc)]
    if fmt == "mini-swe-agent":
        return [read_mini_swe_agent(name, doc)]
    if fmt == "openhands-v0":
        if doc is not None:
            return [read_openhands_v0(name, openhands_events(name, doc))]
        out = []
        for lineno, r in iter_lines(p, data):
            try:
                events = openhands_events(name, r)
            except ShapeError as exc:
                exc.line = lineno
                raise
            out.append(read_openhands_v0(name, events, lineno))
        return out
    if fmt == "gemini-cli":
        if isinstance(doc, dict):
            msgs = doc.get("messages")
            if not isinstance(msgs, list):
                raise TrajError(f"{name}:1: `messages` is not a list")
            return [read_gemini_messages(name, msgs, "json")]
        return [read_gemini_jsonl(name, data)]
    if fmt == "codex":
        return [read_codex(name, data)]
    if fmt == "claude-code":
        return [read_claude_code(name, data)]
    raise TrajError(f"{name}:1: not a known trajectory format")  # pragma: no cover


def find_trajectories(paths: list[str]) -> list[Path]:
    """Files and conversation directories named, or found one level down in directories."""
    out: list[Path] = []
    for s in paths:
        p = Path(s)
        if not p.exists():
            raise TrajError(f"{p}:1: no such file or directory")
        if p.is_file():
            out.append(p)
            continue
        if (p / "base_state.json").is_file() or (p / "events").is_dir():
            out.append(p)
            continue
        for c in sorted(p.rglob("*")):
            if (
                c.is_file()
                and c.suffix in (".json", ".jsonl", ".traj")
                and c.parent.name != "events"
            ):
                if c.name != "base_state.json":
                    out.append(c)
            elif c.is_dir() and ((c / "base_state.json").is_file() or (c / "events").is_dir()):
                out.append(c)
    return out
