"""The `rtax/1` events: built in one module, they encode to the bytes recorded so far."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtax_tui.model import events
from rtax_tui.model.errors import ErrorKind, TrialError
from rtax_tui.model.recording import RecordingError, read_bytes

EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
RECORDINGS = sorted(EXAMPLES.rglob("*.jsonl"))


def rebuild(ev: dict[str, Any]) -> events.Event:
    """The event as its builder makes it from the decoded fields (no `t_ns`)."""
    f = {k: v for k, v in ev.items() if k not in ("type", "t_ns")}
    t = ev["type"]
    if t == "run":
        assert f.pop("format") == events.FORMAT
        return events.run(**f)
    if t == "trial_start":
        f.setdefault("steps", None)
        return events.trial_start(**f)
    if t == "phase":
        return events.phase(**f)
    if t == "action":
        return events.action(**f)
    if t == "trial_end":
        err = f["error"]
        error = None if err is None else TrialError(err["phase"], err["kind"], err["message"])
        assert f["ok"] == (error is None)
        return events.trial_end(f["trial"], f["valid"], error)
    if t == "barrier":
        assert f.pop("ok") == (f["arrived"] == f["size"])
        return events.barrier(**f)
    if t == "run_end":
        return events.run_end(**f)
    if t == "probe":
        return events.probe(**f)
    if t == "clock":
        return events.clock(**f)
    if t == "programs":
        return events.programs(**f)
    if t == "noise":
        built = events.noise(f.pop("host"), f)
        assert built is not None
        return built
    if t == "image":
        return events.image(**f)
    raise AssertionError(f"no builder for {t}")


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_every_recorded_event_is_rebuilt_byte_for_byte(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines
    for raw in lines:
        ev = events.decode(raw)
        assert events.missing_fields(ev) == []
        built = rebuild(ev)
        if list(ev)[1] == "t_ns":  # the engine's order
            stamped: dict[str, Any] = {"type": built["type"], "t_ns": ev["t_ns"], **built}
        else:  # `rtax probe`'s order
            stamped = events.stamp_last(built, ev["t_ns"])
        assert events.encode(stamped) == raw


def test_emitter_stamps_t_ns_second_and_calls_every_sink() -> None:
    got_a: list[dict[str, Any]] = []
    got_b: list[dict[str, Any]] = []
    emit = events.Emitter([got_a.append, got_b.append])
    emit.start()
    emit(events.trial_end(3, False, TrialError("ready", ErrorKind.INTERRUPTED, "stopped")))
    (ev,) = got_a
    assert got_b == [ev]
    assert list(ev) == ["type", "t_ns", "trial", "ok", "valid", "error"]
    assert ev["error"] == {"phase": "ready", "kind": "interrupted", "message": "stopped"}
    assert type(ev["error"]["kind"]) is str and ev["ok"] is False
    assert b'"kind":"interrupted"' in events.encode(ev)


def test_optional_fields_appear_only_when_given() -> None:
    a = events.action(1, 0, 5, 0, True, 3)
    assert "remote_ns" not in a and events.action(1, 0, 5, 0, True, 3, 4)["remote_ns"] == 4
    s = events.trial_start(
        trial=1, cell="c", host="h", driver="d", workload="w", channel="exec",
        warmup=False, batch=None, steps=2,
    )  # fmt: skip
    assert "batch_size" not in s and s["steps"] == 2
    assert "error" not in events.run_end("completed", 0)
    assert events.run_end("failed", 1, error="E")["error"] == "E"


def test_clock_event_checked_and_its_drift_optional() -> None:
    """A sync made before the run began has a negative `at_ns`; the bound and round trip
    are counts; the drift comes as a pair or not at all."""
    c = events.clock("h:22", at_ns=-5, offset_ns=-(10**12), err_ns=40, rtt_ns=90, samples=8)
    assert "drift_ppb" not in c and events.check_event({**c, "t_ns": 1}) is None
    d = events.clock(
        "h:22", at_ns=9, offset_ns=1, err_ns=4, rtt_ns=9, samples=8, drift_ppb=-3, drift_err_ppb=7
    )
    assert (d["drift_ppb"], d["drift_err_ppb"]) == (-3, 7)
    assert events.check_event({**d, "t_ns": 1}) is None
    assert "err_ns" in (events.check_event({**c, "t_ns": 1, "err_ns": -1}) or "")
    assert "drift_err_ppb" in (events.check_event({**d, "t_ns": 1, "drift_err_ppb": -1}) or "")


def test_the_reader_uses_the_same_field_table() -> None:
    head = events.run(run_id="r", started_at="s", seed=1, argv=[], profile={}, hosts={})
    ok = events.phase(1, "create", 2, True)
    data = events.encode(events.stamp_last(head, 0)) + events.encode(events.stamp_last(ok, 1))
    assert read_bytes("x", data).events[0]["name"] == "create"
    for etype in events.EVENT_FIELDS:
        if etype != "run":
            bad = events.encode({"type": etype, "t_ns": 1})
            with pytest.raises(RecordingError, match=f"{etype} event lacks"):
                read_bytes("x", data + bad + data)
    with pytest.raises(RecordingError, match="unknown event type 'nope'"):
        read_bytes("x", data + events.encode({"type": "nope"}) + data)


def test_run_limits_is_optional() -> None:
    head = events.run(run_id="r", started_at="s", seed=1, argv=[], profile={}, hosts={})
    assert "limits" not in head  # an older header's shape, read as "unknown"
    lim = {"cpus": 1.0, "memory_mib": 4096, "pids": "unlimited", "workspace_mib": 2048}
    head = events.run(run_id="r", started_at="s", seed=1, argv=[], profile={}, hosts={}, limits=lim)
    assert head["limits"] == lim and list(head)[-1] == "limits"


def test_run_loop_is_optional() -> None:
    head = events.run(run_id="r", started_at="s", seed=1, argv=[], profile={}, hosts={})
    assert "loop" not in head  # an older header: asyncio's loop, the only one then
    head = events.run(
        run_id="r", started_at="s", seed=1, argv=[], profile={}, hosts={}, loop="uvloop 0.23.0"
    )
    assert head["loop"] == "uvloop 0.23.0"
    read = read_bytes("x", events.encode(events.stamp_last(head, 0)))
    assert read.header["loop"] == "uvloop 0.23.0"
    with pytest.raises(RecordingError, match="loop"):
        read_bytes("x", events.encode(events.stamp_last({**head, "loop": 1}, 0)))
