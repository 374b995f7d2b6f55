"""Trajectory readers, `rtax traj inspect` and `rtax traj prepare` on real public files
(tests/data/trajectories/SOURCES.md). Expected values were checked by reading the files;
records written here by hand are marked synthetic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from rtax_tui.analysis.report import build_report
from rtax_tui.commands.cli import main
from rtax_tui.engine.traj import TrajError, detect, read_trajectories
from rtax_tui.engine.traj.prepare import prefix_lengths, tree_digest, validate_prefix
from rtax_tui.engine.traj.source import JsonLines
from rtax_tui.model.recording import read_recording

DATA = Path(__file__).parents[1] / "data" / "trajectories"
SWE0 = DATA / "swe-agent" / "pydicom__pydicom-1458.traj"
SWE1 = DATA / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj"
MINI = DATA / "mini-swe-agent" / "astropy__astropy-12907.traj.json"
OH0 = DATA / "openhands-v0" / "wrong_initial_state.json"
OH1 = DATA / "openhands-v1" / "goal-conversation"
CODEX = DATA / "codex" / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
CLAUDE = DATA / "claude-code" / "session-196820da.jsonl"
GEMINI = DATA / "gemini-cli" / "session-2025-12-01T21-45-5b959dae.json"
GEMINI_OPS = DATA / "gemini-cli" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
GEMINI_JSONL = DATA / "gemini-cli" / "session-2026-01-16T11-01-file-ops-37b7abef.relaid.jsonl"


def one(path: Path | str) -> Any:
    trajs = read_trajectories(path)
    assert len(trajs) == 1
    return trajs[0]


def kinds(t: Any) -> dict[str, int]:
    return {k: v for k, v in t.to_json()["kinds"].items() if v}


# -- each format, a real file --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "fmt", "steps", "shell"),
    [
        (SWE0, "swe-agent", 12, 12),
        (SWE1, "swe-agent", 5, 5),
        (MINI, "mini-swe-agent", 64, 64),
        (OH0, "openhands-v0", 4, 1),
        (OH1, "openhands-v1", 2, 2),
        (CODEX, "codex", 105, 43),
        (CLAUDE, "claude-code", 65, 39),
        (GEMINI, "gemini-cli", 10, 0),
        (GEMINI_OPS, "gemini-cli", 14, 0),
        (GEMINI_JSONL, "gemini-cli", 14, 0),
    ],
)
def test_real_file_counts(path: Path, fmt: str, steps: int, shell: int) -> None:
    t = one(path)
    assert (t.format, len(t.steps), kinds(t).get("shell", 0)) == (fmt, steps, shell)
    assert [s.i for s in t.steps] == list(range(steps))
    assert detect(path) == fmt


def test_swe_agent_0x() -> None:
    t = one(SWE0)
    assert t.variant == "0.x"
    assert t.steps[0].command == "create reproduce_bug.py\n"  # unstripped, as recorded
    assert t.steps[0].cwd is None  # state.working_dir is post-step: none before step 0
    assert t.steps[1].cwd == "/pydicom__pydicom"
    assert t.steps[11].command == "submit\n" and t.steps[11].kind == "shell"
    assert all(s.exit_code is None and s.paired for s in t.steps)


def test_swe_agent_1x() -> None:
    t = one(SWE1)
    assert t.variant == "1.x"
    assert [s.tool for s in t.steps] == ["find_file", "open", "edit", "python3", "submit"]
    assert t.steps[3].command == "python3 /SWE-agent__test-repo/tests/missing_colon.py"
    assert t.steps[1].cwd == "/SWE-agent__test-repo"


def test_mini_swe_agent_tool_calls() -> None:
    t = one(MINI)
    assert t.variant == "mini-swe-agent-1.1"
    s0, s2, last = t.steps[0], t.steps[2], t.steps[63]
    assert s0.command == 'cd /testbed && find . -path "*/separable*" -type f | head -20'
    assert (s0.exit_code, s0.cwd, s0.output) == (0, "/testbed", "./astropy/modeling/separable.py\n")
    assert s2.exit_code == 1 and s2.output.startswith("Traceback (most recent call last):")
    # the submitting action has no result (the final `exit` message holds the submission)
    assert not last.paired and last.exit_code is None
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in last.command
    assert [s.i for s in t.steps if not s.paired] == [63]


def test_openhands_v0() -> None:
    t = one(OH0)
    assert [(s.kind, s.tool) for s in t.steps] == [
        ("read", "read"),
        ("shell", "run"),
        ("read", "read"),
        ("other", "finish"),
    ]
    run = t.steps[1]
    assert run.command == "mv /workspace/game_2048.py /workspace/2048.py"
    assert (run.exit_code, run.output, run.paired) == (0, "", True)
    assert run.started_at == "2025-01-27T23:16:56.951967"
    assert run.ended_at == "2025-01-27T23:16:57.600730"
    assert not t.steps[3].paired  # finish has no observation


def test_openhands_v1() -> None:
    t = one(OH1)
    a, b = t.steps
    assert a.command.startswith('SESSION_URL="${AUTOMATION_SESSION_URL:-')
    assert a.output.startswith("Cannot execute multiple commands at once.")
    assert a.exit_code is None  # the observation records -1/none
    assert b.exit_code == 1 and b.paired
    assert b.started_at == "2026-06-16T05:40:00.385957"


def test_codex() -> None:
    t = one(CODEX)
    assert kinds(t) == {"shell": 43, "edit": 3, "other": 59}
    s0 = t.steps[0]
    assert s0.tool == "exec_command" and s0.line == 9
    assert s0.command.startswith("sed -n '1,180p' /Users/Sample_User/.codex/plugins/")
    # exec_command_end (line 11) gives the exit code and the cwd
    assert (s0.exit_code, s0.cwd) == (0, "/Users/Sample_User/repos/codemie-ai/codemie-code")
    assert s0.started_at == "2026-05-11T08:27:22.479Z"
    s33 = t.steps[33]
    assert s33.command.startswith('rg -n "compact|compaction|compacting|summar|context"')
    assert s33.exit_code == 2
    assert [s.i for s in t.steps if s.kind == "edit"] == [70, 74, 75]
    assert {s.tool for s in t.steps if s.kind == "other"} >= {"write_stdin"}
    assert all(s.paired for s in t.steps)


def test_claude_code() -> None:
    t = one(CLAUDE)
    assert kinds(t) == {"shell": 39, "read": 9, "write": 1, "other": 16}
    assert (t.steps[0].tool, t.steps[0].line) == ("TodoWrite", 9)
    s22 = t.steps[22]
    assert s22.command.startswith("ls -lh ~/.claude/projects/")
    assert s22.exit_code == 1  # "Exit code 1" leads the error result
    assert s22.output.startswith("Exit code 1\n")
    assert t.steps[63].command == "mkdir -p /Users/user/repo/specs"
    assert t.steps[63].cwd == "/Users/user/repo"
    assert [s.i for s in t.steps if s.exit_code is not None] == [22, 23]


def test_gemini_json_and_relaid_jsonl_agree() -> None:
    t = one(GEMINI)
    assert kinds(t) == {"edit": 1, "read": 7, "write": 1, "other": 1}
    assert t.steps[8].tool == "replace" and t.steps[8].started_at == "2025-12-01T21:50:01.498Z"
    a, b = one(GEMINI_OPS), one(GEMINI_JSONL)
    assert [s.to_json() for s in a.steps] == [s.to_json() for s in b.steps]


def test_detection_ignores_the_file_name(tmp_path: Path) -> None:
    for src, fmt in [(CODEX, "codex"), (CLAUDE, "claude-code"), (SWE1, "swe-agent")]:
        dst = tmp_path / f"misleading-{fmt}.traj.json"
        shutil.copy(src, dst)
        assert detect(dst) == fmt


# -- rules not covered by a real file (synthetic records) ----------------------------


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_synthetic_gemini_shell_steps(tmp_path: Path) -> None:
    meta = {"sessionId": "s", "projectHash": "h", "startTime": "t"}
    call = {
        "id": "c1",
        "name": "run_shell_command",
        "args": {"command": "false", "dir_path": "/w"},
        "result": [{"functionResponse": {"response": {"output": "out\nExit Code: 1\n"}}}],
    }
    msgs: list[Any] = [
        meta,
        {"id": "m1", "type": "user", "content": "go"},
        {"id": "m2", "type": "gemini", "content": ""},
        {"id": "m2", "type": "gemini", "content": "", "toolCalls": [call]},
        {"id": "m3", "type": "gemini", "toolCalls": [dict(call, id="c2")]},
        {"$rewindTo": "m3"},
        {"id": "m4", "type": "gemini", "toolCalls": [dict(call, id="c3", args={"command": " "})]},
        {"id": "m5", "type": "mystery"},
    ]
    t = one(write_lines(tmp_path / "s.jsonl", msgs))
    assert [(s.call_id, s.kind, s.exit_code, s.cwd) for s in t.steps] == [
        ("c1", "shell", 1, "/w"),
        ("c3", "other", None, None),  # a blank command is other
    ]
    assert t.skipped_records == 1


def test_synthetic_mini_v1_regex_and_text_mode(tmp_path: Path) -> None:
    doc = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {"config": {"environment": {"cwd": "/repo"}}},
        "messages": [
            {"role": "assistant", "content": "x\n```bash\n ls -la \n```"},
            {"role": "user", "content": "<returncode>2</returncode><output>no</output>"},
            {"role": "assistant", "content": "```bash\npwd\n```"},
            {"role": "user", "content": "<returncode>-1</returncode>"},  # -1 is null
            {"role": "assistant", "content": "```bash\na\n```\n```bash\nb\n```"},  # 2 matches
            {"role": "user", "content": "format error"},
        ],
    }
    t = one(write_lines(tmp_path / "m.json", [doc]))
    assert [(s.command, s.exit_code, s.cwd) for s in t.steps] == [
        ("ls -la", 2, "/repo"),
        ("pwd", None, "/repo"),
    ]
    doc2 = {
        "trajectory_format": "mini-swe-agent-2",
        "messages": [
            {"role": "assistant", "extra": {"actions": [{"command": "a"}, {"command": "b"}]}},
            {"role": "user", "extra": {"returncode": 0, "raw_output": "A"}},
            {
                "role": "user",
                "extra": {"returncode": 1, "exception_info": "action was not executed"},
            },
        ],
    }
    t2 = one(write_lines(tmp_path / "m2.json", [doc2]))
    assert [(s.kind, s.exit_code, s.output) for s in t2.steps] == [
        ("shell", 0, "A"),
        ("other", None, None),
    ]


def test_synthetic_swe_agent_not_run_markers(tmp_path: Path) -> None:
    doc = {
        "trajectory": [
            {"action": "ls", "observation": "a", "execution_time": 0.1},
            {"action": "bad syntax", "observation": "rejected", "execution_time": 0},
            {"action": "exit_cost", "observation": ""},
            {"action": "   ", "observation": ""},
        ],
        "attempts": [],
        "info": {},
    }
    t = one(write_lines(tmp_path / "x.traj", [doc]))
    assert [s.kind for s in t.steps] == ["shell", "other", "other", "other"]


def test_synthetic_codex_patch_and_running_session(tmp_path: Path) -> None:
    def item(p: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "t", "type": "response_item", "payload": p}

    def fc(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return item(
            {"type": "function_call", "name": name, "call_id": cid, "arguments": json.dumps(args)}
        )

    def out(cid: str, text: str) -> dict[str, Any]:
        return item({"type": "function_call_output", "call_id": cid, "output": text})

    recs = [
        {"timestamp": "t", "type": "session_meta", "payload": {"cwd": "/s"}},
        {"timestamp": "t", "type": "turn_context", "payload": {"cwd": "/turn"}},
        fc("1", "shell", {"command": ["bash", "-lc", "apply_patch <<'EOF'\n*** Begin Patch"]}),
        out("1", '{"output": "Done", "metadata": {"exit_code": 0}}'),
        fc("2", "shell", {"command": ["ls", "a b"], "workdir": "sub"}),
        out("2", "Exit code: 3\nWall time: 0.1 seconds\nOutput:\n"),
        fc("3", "exec_command", {"cmd": "sleep 1"}),
        out("3", "Process running with session ID 7\nOutput:\n"),
        fc("4", "write_stdin", {"session_id": 7, "chars": ""}),
        out("4", "Process exited with code 5\nOutput:\n"),
        fc("5", "exec_command", {"cmd": "never answered"}),
        {"timestamp": "t", "type": "event_msg", "payload": {"type": "mystery"}},
        item({"type": "brand_new_item"}),
    ]
    t = one(write_lines(tmp_path / "r.jsonl", recs))
    got = [(s.kind, s.command, s.exit_code, s.cwd, s.paired) for s in t.steps]
    assert got == [
        ("edit", "bash -lc 'apply_patch <<'\"'\"'EOF'\"'\"'\n*** Begin Patch'", None, None, True),
        ("shell", "ls 'a b'", 3, "/turn/sub", True),
        ("shell", "sleep 1", 5, "/turn", True),
        ("other", None, None, None, True),
        ("shell", "never answered", None, "/turn", False),  # kept, marked
    ]
    assert dict(t.skipped) == {"brand_new_item": 1}


def test_synthetic_openhands_v0_is_input_and_eval_history(tmp_path: Path) -> None:
    hist = [
        {"id": 1, "source": "agent", "action": "run", "args": {"command": "top", "is_input": True}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"}},
        {
            "id": 3,
            "cause": 2,
            "source": "agent",
            "observation": "run",
            "content": "x",
            "extras": {"exit_code": 4, "metadata": {"working_dir": "/w"}},
        },
        {"id": 4, "source": "agent", "action": "run", "args": {"command": "pwd"}},
        {"id": 5, "source": "agent", "action": "teleport"},
    ]
    p = write_lines(tmp_path / "output.jsonl", [{"history": hist}, {"history": hist[:2]}])
    a, b = read_trajectories(p)
    assert [(s.kind, s.exit_code, s.cwd, s.paired) for s in a.steps] == [
        ("other", None, None, False),
        ("shell", 4, None, True),
        ("shell", None, "/w", False),
    ]
    assert a.skipped_records == 1 and len(b.steps) == 2


# -- damaged files: clear errors or marked calls, never a crash ----------------------


def test_truncated_jsonl_at_a_line_keeps_unpaired_calls(tmp_path: Path) -> None:
    lines = CODEX.read_bytes().split(b"\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(lines[:10]) + b"\n")  # the call on line 9, not its result
    t = one(cut)
    assert len(t.steps) == 1 and not t.steps[0].paired and t.steps[0].output is None


def test_truncated_mid_line_is_file_line_error(tmp_path: Path) -> None:
    data = CLAUDE.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: data.index(b"\n", 5000) - 20])
    n = cut.read_bytes().count(b"\n") + 1
    with pytest.raises(TrajError, match=rf"^{cut}:{n}: not JSON"):
        read_trajectories(cut)


def test_truncated_whole_json_is_file_line_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.traj"
    cut.write_bytes(SWE1.read_bytes()[:5000])
    with pytest.raises(TrajError, match=rf"^{cut}:\d+: not JSON"):
        read_trajectories(cut)


def test_corrupted_line_names_its_line(tmp_path: Path) -> None:
    lines = CODEX.read_bytes().split(b"\n")
    lines[40] = b'{"timestamp": "t", "type": "response_item", "payload": {oops'
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(TrajError, match=rf"^{bad}:41: not JSON"):
        read_trajectories(bad)


def test_step_problem_names_each_field_of_another_type() -> None:
    # Step.problem checks the common case first; every field of STEP_SCHEMA given each
    # wrong type (a bool where an int belongs, too) is still named, as the loop names it
    from rtax_tui.engine.traj.model import STEP_SCHEMA, Step

    ok = Step(i=0, kind="shell", tool="t", command="c", exit_code=0, output="o", paired=True)
    assert ok.problem() is None
    for name, types in STEP_SCHEMA.items():
        for wrong in (True, 1, "s", None, 1.5, ["x"]):
            if type(wrong) in types:
                continue
            s = Step(i=0, kind="shell", tool="t")
            setattr(s, name, wrong)
            why = s.problem()
            assert why is not None and why.startswith(f"{name}: expected"), (name, wrong)
    big = Step(i=0, kind="shell", tool="t", exit_code=1 << 63)
    assert big.problem() == "exit_code: an integer of 64 bits at most"


def test_lines_decoded_once_keep_the_order_of_errors(tmp_path: Path) -> None:
    # detection walks the first lines, the reader all of them, over one decode: a reader's
    # own error before a bad line is still the one reported, and a bad line after it
    # still names its line (synthetic records)
    use = {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "x"}]}}
    ok = {"type": "user", "message": {"content": "hi"}}
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(orjson.dumps(ok) + b"\n" + orjson.dumps(use) + b"\n{oops\n")
    with pytest.raises(TrajError, match=rf"^{bad}:2: a tool_use block without an id$"):
        read_trajectories(bad)
    bad.write_bytes(orjson.dumps(ok) + b"\n\n{oops\n" + orjson.dumps(use) + b"\n")
    with pytest.raises(TrajError, match=rf"^{bad}:3: not JSON"):
        read_trajectories(bad)
    lines = JsonLines(bad, bad.read_bytes())
    for _ in range(2):  # walked again: the same records, the same error at the same line
        got: list[tuple[int, dict[str, Any]]] = []
        with pytest.raises(TrajError, match=rf"^{bad}:3: not JSON"):
            got.extend(lines)
        assert got == [(1, ok)]


def test_one_json_value_then_blank_lines_is_read_whole(tmp_path: Path) -> None:
    # the whole-file parse is skipped only when a first line that is a whole JSON value
    # has more than whitespace after it; blank lines after one are not more
    doc = orjson.loads(SWE1.read_bytes())
    f = tmp_path / "one.traj"
    f.write_bytes(orjson.dumps(doc) + b"\n\n \t\r\n")
    assert detect(f) == "swe-agent" and len(one(f).steps) == 5
    # more after it: lines (a record with a `history` list reads as an OpenHands eval
    # output.jsonl, whose second record here is not one)
    f.write_bytes(orjson.dumps(doc) + b"\n" + b'{"x": 1}\n')
    with pytest.raises(TrajError, match=rf"^{f}:2: no event list$"):
        read_trajectories(f)


def test_corrupted_structure_is_an_error(tmp_path: Path) -> None:
    doc = json.loads(SWE1.read_text())
    doc["trajectory"][2]["action"] = 42
    bad = tmp_path / "bad.traj"
    text = json.dumps(doc, indent=2)
    bad.write_text(text)
    line = text[: text.index('"action": 42')].count("\n") + 1
    with pytest.raises(TrajError, match=rf"^{bad}:{line}: trajectory\[2\]\.action: not a string$"):
        read_trajectories(bad)
    # a one-line file: line 1; an eval output.jsonl: the record's line
    bad.write_text(json.dumps(doc))
    with pytest.raises(TrajError, match=rf"^{bad}:1: trajectory\[2\]\.action: not a string$"):
        read_trajectories(bad)
    out = write_lines(tmp_path / "output.jsonl", [{"history": []}, {"history": [1]}])
    with pytest.raises(TrajError, match=rf"^{out}:2: history\[0\]: neither an event"):
        read_trajectories(out)
    gem = write_lines(
        tmp_path / "g.jsonl",
        [
            {"sessionId": "s", "projectHash": "h"},
            {"id": "a", "type": "user"},
            {"id": "b", "type": "gemini", "toolCalls": 3},
        ],
    )
    with pytest.raises(TrajError, match=rf"^{gem}:3: messages\[1\]\.toolCalls: not a list$"):
        read_trajectories(gem)


def test_reordered_results_before_calls(tmp_path: Path) -> None:
    """A result line moved before its call cannot pair: the call is kept, marked."""
    lines = [ln for ln in CLAUDE.read_bytes().split(b"\n") if ln.strip()]
    t0 = one(CLAUDE)
    call_line = t0.steps[22].line
    result_idx = next(
        n
        for n, ln in enumerate(lines)
        if t0.steps[22].call_id.encode() in ln and b"tool_result" in ln
    )
    moved = lines[:]
    res = moved.pop(result_idx)
    moved.insert(call_line - 2, res)
    p = tmp_path / "reordered.jsonl"
    p.write_bytes(b"\n".join(moved) + b"\n")
    t = one(p)
    assert len(t.steps) == 65
    assert [s.i for s in t.steps if not s.paired] == [22]


def test_shuffled_lines_never_crash(tmp_path: Path) -> None:
    import random

    for src in (CODEX, CLAUDE, GEMINI_JSONL):
        lines = [ln for ln in src.read_bytes().split(b"\n") if ln.strip()]
        random.Random(1).shuffle(lines)
        p = tmp_path / src.name
        p.write_bytes(b"\n".join(lines) + b"\n")
        try:
            t = read_trajectories(p)[0]
        except TrajError as exc:
            assert str(exc).startswith(f"{p}:")
        else:
            assert t.format in ("codex", "claude-code", "gemini-cli")


def test_unknown_content_is_an_error(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "x.jsonl", [{"a": 1}, {"b": 2}])
    with pytest.raises(TrajError, match=rf"^{p}:1: not a known trajectory format"):
        read_trajectories(p)


# -- the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SWE0, MINI, OH0, OH1, CODEX, CLAUDE, GEMINI_JSONL])
def test_inspect_json_round_trip(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traj", "inspect", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    t = one(path)
    assert doc == json.loads(orjson.dumps(t.to_json()))
    assert set(doc) >= {"format", "steps", "skipped_records"}
    assert set(doc["steps"][0]) >= {"i", "kind", "command", "cwd", "exit_code", "output_bytes"}


def test_inspect_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traj", "inspect", str(OH0)]) == 0
    out = capsys.readouterr().out
    assert "mv /workspace/game_2048.py /workspace/2048.py" in out and "no result" in out


@pytest.mark.parametrize("content", [b"", b"not json at all\n", b'{"a": 1}\n'])
def test_inspect_bad_input_exit_2_one_line(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    assert main(["traj", "inspect", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"rtax: error: {p}:1: ")


def test_inspect_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traj", "inspect", str(tmp_path / "nope.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_prefix_lengths() -> None:
    assert prefix_lengths(3) == [1, 2, 3]
    ks = prefix_lengths(105, 60)
    assert len(ks) == 60 and ks[-1] == 105 and ks[0] >= 1
    assert prefix_lengths(0) == [0]


def test_validate_prefix_keeps_the_record() -> None:
    t = one(OH0)
    hist = validate_prefix(t, 2)
    assert hist[1] == ("mv /workspace/game_2048.py /workspace/2048.py", "")
    with pytest.raises(TrajError):
        validate_prefix(t, 5)


def test_prepare_recording_read_back_by_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("x")
    before = tree_digest([DATA, ws])
    rec = tmp_path / "prep.jsonl"
    argv = ["traj", "prepare", str(OH0), str(SWE1), str(OH1), "--repeat", "2", "--shuffle"]
    assert main([*argv, "--workspace", str(ws), "-o", str(rec)]) == 0
    assert tree_digest([DATA, ws]) == before
    r = read_recording(rec)
    preps = [e for e in r.events if e["type"] == "prep"]
    assert len(preps) == (4 + 5 + 2) * 2
    assert r.end is not None and r.end["status"] == "completed"
    assert r.end["prep"]["unchanged"] is True
    report = build_report(r)
    rows = {row["format"]: row for row in report["prep"]["formats"]}
    assert set(rows) == {"openhands-v0", "swe-agent", "openhands-v1"}
    assert rows["swe-agent"]["n"] == 10 and rows["swe-agent"]["prefixes"] == 5
    assert rows["openhands-v0"]["summary"]["p50_ms"] > 0
    capsys.readouterr()
    assert main(["report", str(rec)]) == 0
    out = capsys.readouterr().out
    assert "openhands-v1" in out and "P50" in out
    assert main(["report", str(rec), "--format", "markdown"]) == 0
    assert "## Prefix preparation" in capsys.readouterr().out


def test_prepare_view_mode_one_parse_per_file_and_repetition(tmp_path: Path) -> None:
    rec = tmp_path / "view.jsonl"
    argv = ["traj", "prepare", str(OH0), str(SWE1), "--repeat", "2", "--shuffle", "--seed", "3"]
    assert main([*argv, "--mode", "view", "-o", str(rec)]) == 0
    r = read_recording(rec)
    assert r.header["profile"]["mode"] == "view"
    preps = [e for e in r.events if e["type"] == "prep"]
    assert len(preps) == (4 + 5) * 2 and {e["mode"] for e in preps} == {"view"}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for e in preps:
        groups.setdefault((e["file"], e["rep"]), []).append(e)
    assert len(groups) == 2 * 2
    for evs in groups.values():
        # one parse shared by the group's prefixes, each sample carrying its share
        assert len({e["parse_ns"] for e in evs}) == 1 and evs[0]["parse_ns"] > 0
        share = round(evs[0]["parse_ns"] / len(evs))
        assert all(e["dur_ns"] == e["view_ns"] + share for e in evs)
        assert sorted(e["k"] for e in evs) == list(range(1, len(evs) + 1))
    rows = build_report(r)["prep"]["formats"]
    assert {row["mode"] for row in rows} == {"view"}
    # the default times each prefix from the file, and says so
    rec2 = tmp_path / "file.jsonl"
    assert main([*argv, "-o", str(rec2)]) == 0
    r2 = read_recording(rec2)
    assert r2.header["profile"]["mode"] == "file"
    assert {e.get("mode") for e in r2.events if e["type"] == "prep"} == {"file"}
    assert not any("parse_ns" in e for e in r2.events if e["type"] == "prep")


def test_prepare_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    assert main(["traj", "prepare", str(bad), "-o", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rtax: error: {bad}:2: not JSON") and err.count("\n") == 1
    assert not (tmp_path / "r.jsonl").exists()  # no recording of a run that never began
    assert main(["traj", "prepare", str(tmp_path / "none")]) == 2


# -- the replay plan (pure: nothing runs; tests/engine/test_replay.py runs it) ------------------


def test_replay_plan_real_files() -> None:
    from rtax_tui.engine.traj.replay import replay_plan

    p = replay_plan(one(CLAUDE))
    assert sum(1 for a in p.actions if a.op == "shell") == 39
    assert [a.op for a in p.actions].count("write") == 1
    assert [a.op for a in p.actions].count("read") == 9  # reads are replayed as reads
    assert p.skipped == {"other": 16}
    assert p.with_rc == 2  # only error results print an exit code
    g = replay_plan(one(GEMINI))
    rep = next(a for a in g.actions if a.op == "replace")
    assert rep.path and rep.path.endswith("lead_gemini.txt") and rep.old and rep.new
    c = replay_plan(one(CODEX))
    assert c.with_rc == 43 and c.skipped["edit (apply_patch: arguments not replayable)"] == 3
    m = replay_plan(one(MINI))
    assert m.actions[0].argv == ("sh", "-c", m.actions[0].command)
    assert m.actions[0].cwd == "/testbed" and m.with_rc == 63
