"""JSON Lines formats: Codex CLI rollouts, Claude Code sessions, Gemini CLI sessions
(JSONL, since 2026-04), and OpenHands V1 conversation directories (one event a file)."""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path
from typing import Any

import orjson

from rtax_tui.engine.traj.json_formats import _dig, read_gemini_messages
from rtax_tui.engine.traj.model import (
    Step,
    Trajectory,
    TrajError,
    code_of,
    int_or_none,
    obj,
    text_of,
)
from rtax_tui.engine.traj.source import JsonLines, iter_lines, json_error, read_bytes

# -- Codex CLI -----------------------------------------------------------------------

CODEX_STEP_TYPES = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
)
CODEX_RESULT_TYPES = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
CODEX_OTHER_ITEMS = frozenset(
    {"message", "reasoning", "compaction", "compaction_summary", "ghost_snapshot", "other"}
)
CODEX_WRAPPERS = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
)
APPLY_PATCH = re.compile(r"^(cd\s+\S+\s*&&\s*)?(apply_patch|applypatch)(\s|$)")
EXIT_LINE1 = re.compile(r"^Exit code: (-?\d+)")
PROCESS_EXITED = re.compile(r"Process exited with code (-?\d+)")
PROCESS_RUNNING = re.compile(r"Process running with session ID (\S+)")


def _is_patch(argv: list[str] | None, script: str | None) -> bool:
    if argv:
        if argv[0] in ("apply_patch", "applypatch"):
            return True
        if len(argv) >= 3 and argv[1] in ("-lc", "-c"):
            script = argv[2]
    return script is not None and APPLY_PATCH.match(script.lstrip()) is not None


def _codex_call(p: dict[str, Any]) -> tuple[str, str, str | None, str | None, Any]:
    """(kind, tool, command, workdir, args) of a step item."""
    t = p.get("type")
    if t == "local_shell_call":
        action = obj(p.get("action"))
        cmdv = action.get("command")
        if action.get("type") == "exec" and _argv(cmdv):
            wd = action.get("working_directory")
            argv0 = [str(a) for a in cmdv or ()]
            kind = "edit" if _is_patch(argv0, None) else "shell"
            return (
                kind,
                "local_shell",
                shlex.join(argv0),
                wd if isinstance(wd, str) else None,
                action,
            )
        return "other", "local_shell", None, None, action
    if t == "web_search_call":
        return "other", "web_search", None, None, p.get("action")
    name = str(p.get("name") or "")
    if t == "custom_tool_call":
        return ("edit" if name == "apply_patch" else "other"), name, None, None, p.get("input")
    raw = p.get("arguments")
    try:
        args = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return "other", name, None, None, raw
    wd = args.get("workdir", args.get("working_directory"))
    wd = wd if isinstance(wd, str) else None
    if name == "apply_patch":
        return "edit", name, None, wd, args
    if p.get("namespace"):
        return "other", name, None, wd, args
    argv: Any = None
    script: Any = None
    if name in ("shell", "container.exec", "local_shell"):
        argv = args.get("command")
    elif name == "shell_command":
        script = args.get("command")
    elif name == "exec_command":
        script = args.get("cmd")
    elif name == "unified_exec" and args.get("session_id") is None:
        argv = args.get("input")
    if _argv(argv):
        cmd = shlex.join(list(argv))
        return ("edit" if _is_patch(argv, None) else "shell"), name, cmd, wd, args
    if isinstance(script, str) and script.strip():
        return ("edit" if _is_patch(None, script) else "shell"), name, script, wd, args
    return "other", name, None, wd, args


def _argv(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(a, str) for a in v)


def _codex_output(out: Any) -> tuple[str | None, int | None, str | None]:
    """(text, exit code, running session id) of a `*_output` item's `output`."""
    if isinstance(out, dict):  # some writers keep {content, success}
        out = out.get("content", out.get("output"))
    text = text_of(out)
    if text is None:
        return None, None, None
    if text.startswith("{"):
        try:
            j = orjson.loads(text)
        except orjson.JSONDecodeError:
            j = None
        if isinstance(j, dict) and isinstance(j.get("metadata"), dict):
            o = j.get("output")
            return (
                (o if isinstance(o, str) else text),
                int_or_none(j["metadata"].get("exit_code")),
                None,
            )
    m = EXIT_LINE1.match(text)
    if m:
        return text, code_of(m.group(1)), None
    # `in` first: a substring test scans an output many times faster than `re` (issue 26)
    m = PROCESS_EXITED.search(text) if "Process exited with code " in text else None
    if m:
        return text, code_of(m.group(1)), None
    m = PROCESS_RUNNING.search(text) if "Process running with session ID " in text else None
    return text, None, (m.group(1) if m else None)


def read_codex(path: str, data: bytes | JsonLines) -> Trajectory:
    out = Trajectory("codex", path)
    meta_cwd: str | None = None
    turn_cwd: str | None = None
    by_call: dict[str, Step] = {}
    running: dict[str, Step] = {}  # session id -> the step whose exit code is still to come
    ends: dict[str, dict[str, Any]] = {}
    bare = False
    for lineno, r in iter_lines(path, data):
        rtype = r.get("type")
        if rtype in CODEX_WRAPPERS:
            p = r.get("payload")
            if not isinstance(p, dict):
                raise TrajError(f"{path}:{lineno}: {rtype} without a payload object")
            ts = r.get("timestamp") if isinstance(r.get("timestamp"), str) else None
        elif r.get("record_type") == "state":
            continue
        elif lineno == 1 and "id" in r and "timestamp" in r and "type" not in r:
            bare = True  # older files: a bare header, then bare response items
            meta_cwd = _str(_dig(r, "cwd")) or meta_cwd
            continue
        elif bare or isinstance(rtype, str):
            rtype, p, ts = "response_item", r, None
        else:
            out.skipped["(no type)"] += 1
            continue
        if rtype == "session_meta":
            meta_cwd = _str(p.get("cwd")) or meta_cwd
            continue
        if rtype == "turn_context":
            turn_cwd = _str(p.get("cwd")) or turn_cwd
            continue
        if rtype == "compacted":
            continue
        if rtype == "event_msg":
            if p.get("type") == "exec_command_end" and isinstance(p.get("call_id"), str):
                ends[p["call_id"]] = p
            continue
        t = p.get("type")
        if t in CODEX_STEP_TYPES:
            kind, tool, cmd, wd, args = _codex_call(p)
            base = turn_cwd or meta_cwd
            if wd is not None and not wd.startswith("/") and base is not None:
                wd = posixpath.join(base, wd)
            cid = p.get("call_id") or p.get("id")
            step = Step(
                i=len(out.steps),
                kind=kind,
                tool=tool,
                command=cmd,
                cwd=(wd or base) if kind == "shell" else None,
                call_id=cid if isinstance(cid, str) else None,
                paired=t == "web_search_call" and p.get("status") == "completed",
                started_at=ts,
                line=lineno,
                args=args,
            )
            out.steps.append(step)
            if step.call_id is not None:
                by_call.setdefault(step.call_id, step)
        elif t in CODEX_RESULT_TYPES:
            cid = p.get("call_id")
            found = by_call.get(cid) if isinstance(cid, str) else None
            if found is None:
                out.skipped[f"{t} (no call)"] += 1
                continue
            text, rc, session = _codex_output(p.get("output"))
            step = found
            step.output, step.paired, step.ended_at = text, True, ts
            if step.kind == "shell":
                step.exit_code = rc
                if session is not None:
                    running[session] = step
            elif step.tool == "write_stdin" and isinstance(step.args, dict):
                sid = str(step.args.get("session_id"))
                if sid in running and rc is not None:
                    running.pop(sid).exit_code = rc
        elif t not in CODEX_OTHER_ITEMS:
            out.skipped[str(t)] += 1
    for cid, end in ends.items():  # exec_command_end, where kept, is the authority
        ended = by_call.get(cid)
        if ended is None or ended.kind != "shell":
            continue
        step = ended
        step.exit_code = int_or_none(end.get("exit_code"))
        if isinstance(end.get("cwd"), str):
            step.cwd = end["cwd"]
        if isinstance(end.get("aggregated_output"), str):
            step.output = end["aggregated_output"]
    return out


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


# -- Claude Code ---------------------------------------------------------------------

CLAUDE_KINDS = {
    "Edit": "edit",
    "MultiEdit": "edit",
    "NotebookEdit": "edit",
    "Write": "write",
    "Read": "read",
}
CLAUDE_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"}
)
CLAUDE_EXIT = re.compile(r"^Exit code (-?\d+)")


def read_claude_code(path: str, data: bytes | JsonLines) -> Trajectory:
    out = Trajectory("claude-code", path)
    by_id: dict[str, Step] = {}
    for lineno, r in iter_lines(path, data):
        rtype = r.get("type")
        if rtype not in CLAUDE_TYPES:
            out.skipped[str(rtype)] += 1
            continue
        msg = r.get("message")
        if rtype not in ("user", "assistant") or not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        if rtype == "assistant":
            if r.get("isSidechain") is True:
                continue
            for b in content:
                if not isinstance(b, dict) or b.get("type") != "tool_use":
                    continue
                tid = b.get("id")
                if not isinstance(tid, str):
                    raise TrajError(f"{path}:{lineno}: a tool_use block without an id")
                if tid in by_id:
                    continue  # a reply spans several lines: each tool_use once
                name = str(b.get("name") or "")
                inp = obj(b.get("input"))
                cmd = inp.get("command")
                shell = name == "Bash" and isinstance(cmd, str) and bool(cmd)
                step = Step(
                    i=len(out.steps),
                    kind="shell" if shell else CLAUDE_KINDS.get(name, "other"),
                    tool=name,
                    command=cmd if shell else None,
                    cwd=_str(r.get("cwd")) if shell else None,
                    call_id=tid,
                    started_at=_str(r.get("timestamp")),
                    line=lineno,
                    args=inp,
                )
                by_id[tid] = step
                out.steps.append(step)
        else:
            for b in content:
                if not isinstance(b, dict) or b.get("type") != "tool_result":
                    continue
                hit = by_id.get(str(b.get("tool_use_id")))
                if hit is None or hit.paired:
                    continue
                step = hit
                text = text_of(b.get("content"))
                step.output, step.paired, step.ended_at = text, True, _str(r.get("timestamp"))
                if step.kind == "shell" and b.get("is_error") is True and text is not None:
                    m = CLAUDE_EXIT.match(text)
                    step.exit_code = code_of(m.group(1)) if m else None
    return out


# -- Gemini CLI (JSONL) --------------------------------------------------------------


def read_gemini_jsonl(path: str, data: bytes | JsonLines) -> Trajectory:
    """Replay the session's lines into its final message list, then read it."""
    msgs: list[dict[str, Any]] = []
    where: dict[str, int] = {}  # message id -> line that last wrote it
    for lineno, r in iter_lines(path, data):
        if "sessionId" in r and "projectHash" in r:  # the metadata line (legacy: all of it)
            if isinstance(r.get("messages"), list):
                msgs = [m for m in r["messages"] if isinstance(m, dict)]
                for m in msgs:
                    where[str(m.get("id"))] = lineno
            continue
        if "$rewindTo" in r:
            target = r["$rewindTo"]
            idx = next((n for n, m in enumerate(msgs) if m.get("id") == target), 0)
            del msgs[idx:]
            continue
        if "$set" in r:
            s = r["$set"]
            if isinstance(s, dict) and "messages" in s:
                if not isinstance(s["messages"], list):
                    raise TrajError(f"{path}:{lineno}: $set.messages is not a list")
                msgs = [m for m in s["messages"] if isinstance(m, dict)]
                for m in msgs:
                    where[str(m.get("id"))] = lineno
            continue
        mid = r.get("id")
        if not isinstance(mid, str):
            raise TrajError(f"{path}:{lineno}: a record with no string `id`")
        where[mid] = lineno
        for n, m in enumerate(msgs):
            if m.get("id") == mid:
                msgs[n] = r
                break
        else:
            msgs.append(r)
    lines = {n: where.get(str(m.get("id")), 0) for n, m in enumerate(msgs)}
    return read_gemini_messages(path, msgs, "jsonl", lines)


# -- OpenHands V1 --------------------------------------------------------------------

V1_EVENT = re.compile(r"^event-(\d+)-(.*)\.json$")
V1_TERMINAL = frozenset({"terminal", "execute_bash"})
V1_EDITORS = frozenset({"file_editor", "str_replace_editor", "planning_file_editor"})
V1_KINDS = {"apply_patch": "edit", "edit": "edit", "read_file": "read", "write_file": "write"}
V1_KNOWN = frozenset(
    {
        "ActionEvent",
        "ObservationEvent",
        "UserRejectObservation",
        "AgentErrorEvent",
        "MessageEvent",
        "SystemPromptEvent",
        "ConversationStateUpdateEvent",
        "Condensation",
        "CondensationRequest",
        "CondensationSummaryEvent",
        "PauseEvent",
        "ConversationErrorEvent",
        "TokenEvent",
        "HookExecutionEvent",
    }
)


def read_openhands_v1(path: str, root: Path) -> Trajectory:
    events_dir = root / "events"
    files: list[tuple[int, Path]] = []
    if events_dir.is_dir():
        for f in events_dir.iterdir():
            m = V1_EVENT.match(f.name)
            if m:
                files.append((int(m.group(1)), f))
    files.sort(key=lambda t: t[0])
    events: list[tuple[str, dict[str, Any]]] = []
    for _, f in files:
        raw = read_bytes(f)
        try:
            ev = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise json_error(f, raw) from None
        if not isinstance(ev, dict):
            raise TrajError(f"{f}:1: an event must be a JSON object")
        events.append((str(f), ev))
    out = Trajectory("openhands-v1", path, variant="conversation")
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, dict[str, Any]] = {}
    for _, ev in events:
        k = ev.get("kind")
        if k in ("ObservationEvent", "UserRejectObservation") and isinstance(
            ev.get("action_id"), str
        ):
            results.setdefault(ev["action_id"], ev)
        elif k == "AgentErrorEvent" and isinstance(ev.get("tool_call_id"), str):
            errors.setdefault(ev["tool_call_id"], ev)
    last_dir: str | None = None
    for fname, ev in events:
        k = ev.get("kind")
        if k not in V1_KNOWN:
            out.skipped[str(k)] += 1
            continue
        if k == "ObservationEvent" and ev.get("tool_name") in V1_TERMINAL:
            wd = _dig(ev, "observation", "metadata", "working_dir")
            last_dir = wd if isinstance(wd, str) else last_dir
        if k != "ActionEvent":
            continue
        eid = ev.get("id")
        if not isinstance(eid, str):
            raise TrajError(f"{fname}:1: an ActionEvent without an id")
        tool = str(ev.get("tool_name") or "")
        action = ev.get("action")
        cmd = action.get("command") if isinstance(action, dict) else None
        kind = "other"
        if action is None:
            kind = "other"
        elif tool in V1_TERMINAL:
            ok = action.get("is_input") is not True and isinstance(cmd, str) and cmd.strip()
            kind = "shell" if ok else "other"
        elif tool in V1_EDITORS:
            kind = {"view": "read", "create": "write"}.get(str(cmd), "edit")
        else:
            kind = V1_KINDS.get(tool, "other")
        res = results.get(eid)
        if res is None and isinstance(ev.get("tool_call_id"), str):
            res = errors.get(ev["tool_call_id"])
        obs = res.get("observation") if res is not None else None
        output: str | None = None
        rc: Any = None
        if isinstance(obs, dict):
            output = text_of(obs.get("content"))
            rc = obs.get("exit_code", _dig(obs, "metadata", "exit_code"))
        elif res is not None:
            output = _str(res.get("error")) or _str(res.get("rejection_reason"))
        out.steps.append(
            Step(
                i=len(out.steps),
                kind=kind,
                tool=tool,
                command=cmd if kind == "shell" else None,
                cwd=last_dir if kind == "shell" else None,
                exit_code=int_or_none(rc) if kind == "shell" else None,
                output=output,
                call_id=eid,
                paired=res is not None,
                started_at=_str(ev.get("timestamp")),
                ended_at=_str(res.get("timestamp")) if res is not None else None,
                args=action,
            )
        )
    return out
