"""Whole-file JSON formats: SWE-agent `.traj`, mini-swe-agent, OpenHands V0, Gemini CLI
(pre-JSONL). Each format's rules: docs/trajectories.md."""

from __future__ import annotations

import re
from typing import Any

import orjson

from rtax_tui.engine.traj.model import (
    ShapeError,
    Step,
    Trajectory,
    code_of,
    int_or_none,
    obj,
    text_of,
)

# -- SWE-agent (0.x, 1.x) -------------------------------------------------------------

SWE_NOT_SHELL = frozenset(
    {
        "exit",
        "skip",
        "exit_forfeit",
        "exit_context",
        "exit_cost",
        "exit_error",
        "exit_format",
        "exit_api",
    }
)


def read_swe_agent(path: str, doc: dict[str, Any]) -> Trajectory:
    traj = doc.get("trajectory")
    if traj is None:
        attempts = doc.get("attempts")
        if not isinstance(attempts, list) or not attempts:
            raise ShapeError(path, (), "no `trajectory` and no `attempts`")
        last = attempts[-1]
        if not isinstance(last, dict):
            raise ShapeError(path, ("attempts", len(attempts) - 1), "not an object")
        traj = last.get("trajectory")
    if not isinstance(traj, list):
        raise ShapeError(path, ("trajectory",), "not a list")
    one_x = "replay_config" in doc or any(
        isinstance(e, dict) and "execution_time" in e for e in traj
    )
    out = Trajectory("swe-agent", path, variant="1.x" if one_x else "0.x")
    prev_dir: str | None = None
    for n, e in enumerate(traj):
        if not isinstance(e, dict):
            raise ShapeError(path, ("trajectory", n), "not an object")
        action = e.get("action")
        if not isinstance(action, str):
            raise ShapeError(path, ("trajectory", n, "action"), "not a string")
        obs = e.get("observation")
        if obs is not None and not isinstance(obs, str):
            raise ShapeError(path, ("trajectory", n, "observation"), "not a string")
        et = e.get("execution_time")
        word = action.strip()
        shell = bool(word) and word not in SWE_NOT_SHELL and not (et is not None and et == 0)
        out.steps.append(
            Step(
                i=n,
                kind="shell" if shell else "other",
                tool=word.split(None, 1)[0] if word else "",
                command=action if shell else None,
                cwd=prev_dir,
                output=obs,
                paired="observation" in e,
                args=action,
            )
        )
        prev_dir = _swe_working_dir(path, n, e.get("state")) or prev_dir
    return out


def _swe_working_dir(path: str, n: int, state: Any) -> str | None:
    if isinstance(state, str):  # 0.x: a JSON string
        try:
            state = orjson.loads(state)
        except orjson.JSONDecodeError:
            raise ShapeError(path, ("trajectory", n, "state"), "not JSON") from None
    if isinstance(state, dict) and isinstance(state.get("working_dir"), str):
        return str(state["working_dir"])
    return None


# -- mini-swe-agent ------------------------------------------------------------------

MINI_DEFAULT_REGEX = r"```bash\s*\n(.*?)\n```"
RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def read_mini_swe_agent(path: str, doc: dict[str, Any]) -> Trajectory:
    tag = str(doc.get("trajectory_format"))
    msgs = doc.get("messages")
    if not isinstance(msgs, list):
        raise ShapeError(path, ("messages",), "not a list")
    for n, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise ShapeError(path, ("messages", n), "not an object")
    cwd = _dig(doc, "info", "config", "environment", "cwd")
    cwd = cwd if isinstance(cwd, str) else None
    out = Trajectory("mini-swe-agent", path, variant=tag)
    if tag == "mini-swe-agent-1":
        _mini_v1(path, doc, msgs, cwd, out)
    else:
        _mini_actions(path, msgs, cwd, out)
    return out


def _action_regex(path: str, pattern: str) -> Any:
    """The trajectory's own `action_regex`, compiled by RE2 (DOTALL, as mini-swe-agent
    uses it): RE2 runs in time linear in the text, so that a pattern with catastrophic
    backtracking (`(a+)+$`) cannot hang rtax. A pattern RE2 does not take (a
    backreference, a lookaround) is an error naming the field."""
    import re2  # google-re2

    options = re2.Options()
    options.log_errors = False  # else RE2 logs the error on stderr too
    options.dot_nl = True
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        why = (
            exc.args[0].decode(errors="replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else str(exc)
        )
        raise ShapeError(
            path, ("info", "config", "agent", "action_regex"), f"not a regex rtax runs: {why}"
        ) from None


def _mini_v1(
    path: str, doc: dict[str, Any], msgs: list[dict[str, Any]], cwd: str | None, out: Trajectory
) -> None:
    pattern = _dig(doc, "info", "config", "agent", "action_regex")
    rx = _action_regex(path, pattern if isinstance(pattern, str) else MINI_DEFAULT_REGEX)
    for n, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        content = text_of(m.get("content")) or ""
        found = rx.findall(content)
        if len(found) != 1:
            continue  # 0 or 2+ matches: a format error, no step
        cmd = found[0] if isinstance(found[0], str) else found[0][0]
        nxt = msgs[n + 1] if n + 1 < len(msgs) else None
        output = text_of(nxt.get("content")) if nxt is not None else None
        rc = RETURNCODE.search(output) if output is not None else None
        out.steps.append(
            Step(
                i=len(out.steps),
                kind="shell",
                tool="bash",
                command=cmd.strip(),
                cwd=cwd,
                exit_code=code_of(rc.group(1)) if rc else None,
                output=output,
                paired=nxt is not None,
                args=cmd.strip(),
            )
        )


def _mini_actions(path: str, msgs: list[dict[str, Any]], cwd: str | None, out: Trajectory) -> None:
    by_id: dict[str, dict[str, Any]] = {}
    for m in msgs:
        if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            by_id.setdefault(m["tool_call_id"], m)
        elif m.get("type") == "function_call_output" and isinstance(m.get("call_id"), str):
            by_id.setdefault(m["call_id"], m)
    for n, m in enumerate(msgs):
        actions = _dig(m, "extra", "actions")
        if not actions:
            continue
        if not isinstance(actions, list):
            raise ShapeError(path, ("messages", n, "extra", "actions"), "not a list")
        # text mode: the following user messages with extra.returncode, in order
        following = [
            r
            for r in msgs[n + 1 : n + 1 + len(actions) * 2]
            if r.get("role") == "user" and "returncode" in (r.get("extra") or {})
        ]
        for a_i, a in enumerate(actions):
            if not isinstance(a, dict) or not isinstance(a.get("command"), str):
                raise ShapeError(path, ("messages", n, "extra", "actions", a_i), "no command")
            cid = a.get("tool_call_id") or a.get("call_id")
            if isinstance(cid, str):
                res = by_id.get(cid)
            else:
                res = following[a_i] if a_i < len(following) else None
            extra = (res.get("extra") or {}) if res is not None else {}
            exc = extra.get("exception_info")
            not_run = exc == "action was not executed"
            out.steps.append(
                Step(
                    i=len(out.steps),
                    kind="other" if not_run or not a["command"].strip() else "shell",
                    tool="bash",
                    command=a["command"],
                    cwd=cwd,
                    exit_code=None if exc else int_or_none(extra.get("returncode")),
                    output=extra.get("raw_output") if res is not None else None,
                    call_id=cid if isinstance(cid, str) else None,
                    paired=res is not None,
                    ended_at=_epoch(extra.get("timestamp")),
                    args=a,
                )
            )


def _epoch(v: Any) -> str | None:
    if isinstance(v, int | float) and not isinstance(v, bool):
        from datetime import UTC, datetime

        return datetime.fromtimestamp(v, UTC).isoformat().replace("+00:00", "Z")
    return None


# -- OpenHands V0 --------------------------------------------------------------------

OH_STEP_ACTIONS = frozenset(
    {
        "run",
        "run_ipython",
        "read",
        "write",
        "edit",
        "browse",
        "browse_interactive",
        "call_tool_mcp",
        "think",
        "finish",
        "reject",
        "delegate",
        "task_tracking",
    }
)


def openhands_events(path: str, doc: Any) -> list[dict[str, Any]]:
    """The event list of an OpenHands V0 file: an array, or an eval record's `history`
    (old: [action, observation] pairs, flattened)."""
    events = doc.get("history") if isinstance(doc, dict) else doc
    top: tuple[str, ...] = ("history",) if isinstance(doc, dict) else ()
    if not isinstance(events, list):
        raise ShapeError(path, (), "no event list")
    flat: list[dict[str, Any]] = []
    for n, e in enumerate(events):
        if isinstance(e, list):
            flat.extend(x for x in e if isinstance(x, dict))
        elif isinstance(e, dict):
            flat.append(e)
        else:
            raise ShapeError(path, (*top, n), "neither an event nor a pair")
    return flat


def read_openhands_v0(
    path: str, events: list[dict[str, Any]], line: int | None = None
) -> Trajectory:
    out = Trajectory("openhands-v0", path, variant="history" if line is not None else "events")
    results: dict[Any, dict[str, Any]] = {}
    for e in events:
        if "observation" in e and e.get("cause") is not None:
            results.setdefault(e["cause"], e)
    last_dir: str | None = None
    for e in events:
        act = e.get("action")
        if "observation" in e:
            if e.get("observation") == "run":
                wd = _dig(e, "extras", "metadata", "working_dir")
                last_dir = wd if isinstance(wd, str) else last_dir
            continue
        if act is None:
            out.skipped["(no action or observation)"] += 1
            continue
        if e.get("source") != "agent" or act not in OH_STEP_ACTIONS:
            if act not in OH_STEP_ACTIONS and act not in OH_OTHER_ACTIONS:
                out.skipped[str(act)] += 1
            continue
        args = obj(e.get("args"))
        res = results.get(e.get("id")) if e.get("id") is not None else None
        cmd = args.get("command")
        kind = "other"
        if act == "run":
            shell = args.get("is_input") is not True and isinstance(cmd, str) and cmd.strip()
            kind = "shell" if shell else "other"
        elif act in ("edit", "read", "write"):
            kind = act
        extras = obj(res.get("extras")) if res is not None else {}
        rc = _dig(extras, "metadata", "exit_code")
        if rc is None:
            rc = extras.get("exit_code")
        cwd = args.get("cwd") if isinstance(args.get("cwd"), str) else last_dir
        out.steps.append(
            Step(
                i=len(out.steps),
                kind=kind,
                tool=str(act),
                command=cmd if act == "run" and isinstance(cmd, str) else None,
                cwd=cwd if act == "run" else None,
                exit_code=int_or_none(rc) if act == "run" else None,
                output=res.get("content") if res is not None else None,
                call_id=str(e.get("id")),
                paired=res is not None,
                started_at=e.get("timestamp"),
                ended_at=res.get("timestamp") if res is not None else None,
                line=line,
                args=args,
            )
        )
    return out


# known V0 actions that are not steps (messages, state changes): neither steps nor unknown
OH_OTHER_ACTIONS = frozenset(
    {
        "message",
        "system",
        "start",
        "change_agent_state",
        "pause",
        "resume",
        "stop",
        "null",
        "recall",
        "condensation",
        "condensation_request",
        "mcp",
    }
)


# -- Gemini CLI ----------------------------------------------------------------------

EXIT_CODE_LINE = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)


def read_gemini_messages(
    path: str, messages: list[Any], variant: str, lines: dict[int, int] | None = None
) -> Trajectory:
    try:
        return _gemini(path, messages, variant, lines)
    except ShapeError as exc:
        if lines is not None and len(exc.where) > 1 and isinstance(exc.where[1], int):
            exc.line = lines.get(exc.where[1])
        raise


def _gemini(
    path: str, messages: list[Any], variant: str, lines: dict[int, int] | None
) -> Trajectory:
    out = Trajectory("gemini-cli", path, variant=variant)
    for n, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ShapeError(path, ("messages", n), "not an object")
        mtype = m.get("type")
        if mtype not in ("gemini", "user", "info", "error", "warning"):
            out.skipped[str(mtype)] += 1
        if mtype != "gemini":
            continue
        calls = m.get("toolCalls") or []
        if not isinstance(calls, list):
            raise ShapeError(path, ("messages", n, "toolCalls"), "not a list")
        for tc in calls:
            if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                raise ShapeError(path, ("messages", n, "toolCalls"), "a tool call without a name")
            out.steps.append(_gemini_step(len(out.steps), tc, lines.get(n) if lines else None))
    return out


GEMINI_KINDS = {
    "replace": "edit",
    "write_file": "write",
    "read_file": "read",
    "read_many_files": "read",
}


def _gemini_step(i: int, tc: dict[str, Any], line: int | None) -> Step:
    name = tc["name"]
    args = obj(tc.get("args"))
    cmd = args.get("command")
    shell = name == "run_shell_command" and isinstance(cmd, str) and bool(cmd.strip())
    result = tc.get("result")
    output: str | None = None
    if isinstance(result, list) and result:
        parts = []
        for r in result:
            o = _dig(r, "functionResponse", "response", "output")
            if isinstance(o, str):
                parts.append(o)
        output = "".join(parts) if parts else None
    rc: int | None = None
    if shell and output is not None:
        codes = EXIT_CODE_LINE.findall(output)
        rc = code_of(codes[-1]) if codes else None
    d = args.get("dir_path", args.get("directory"))
    return Step(
        i=i,
        kind="shell" if shell else GEMINI_KINDS.get(name, "other"),
        tool=name,
        command=cmd if shell else None,
        cwd=d if shell and isinstance(d, str) else None,
        exit_code=rc,
        output=output,
        call_id=tc.get("id") if isinstance(tc.get("id"), str) else None,
        paired=isinstance(result, list) and bool(result),
        started_at=tc.get("timestamp") if isinstance(tc.get("timestamp"), str) else None,
        line=line,
        args=args,
    )
