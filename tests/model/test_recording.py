"""The rtax/1 recording: round trip, torn last line, bad lines reported by number."""

from __future__ import annotations

import pytest

from rtax_tui.model.recording import RecordingError, RecordingWriter, read_recording

HEADER = {
    "type": "run",
    "t_ns": 0,
    "format": "rtax/1",
    "run_id": "r",
    "started_at": "x",
    "seed": 1,
    "argv": [],
    "profile": {"name": "p"},
    "hosts": {},
}
START = {
    "type": "trial_start",
    "t_ns": 1,
    "trial": 1,
    "cell": "c",
    "host": "local",
    "driver": "local",
    "workload": "t0",
    "channel": "exec",
    "warmup": False,
    "batch": None,
}
END = {"type": "trial_end", "t_ns": 9, "trial": 1, "ok": True, "valid": True, "error": None}


def write(path, events):
    w = RecordingWriter.open(path)
    for ev in events:
        w.write(ev)
    w.close()


def test_round_trip_and_flush_per_line(tmp_path):
    path = tmp_path / "r.jsonl"
    w = RecordingWriter.open(path)
    w.write(HEADER)
    w.write(START)
    # flushed: another reader sees both lines before the writer closes
    assert path.read_bytes().count(b"\n") == 2
    w.write(END)
    w.close()
    rec = read_recording(path)
    assert rec.header == HEADER and rec.events == [START, END] and not rec.torn_tail


def test_writer_refuses_to_overwrite(tmp_path):
    path = tmp_path / "r.jsonl"
    write(path, [HEADER])
    with pytest.raises(FileExistsError):
        RecordingWriter.open(path)


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    write(path, [HEADER, START])
    with open(path, "ab") as f:
        f.write(b'{"type": "trial_end", "t_ns": 9, "tri')
    rec = read_recording(path)
    assert rec.events == [START] and rec.torn_tail


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    write(path, [HEADER, START])
    with open(path, "ab") as f:
        f.write(b'{"type":"trial_end","t_ns":9,"trial":1,"ok":true,"valid":true,"error":null}')
    rec = read_recording(path)
    assert rec.events[-1] == END and not rec.torn_tail


@pytest.mark.parametrize(
    "line, message",
    [
        (b"not json", "r.jsonl:2: not JSON"),
        (b'{"type": "bogus", "t_ns": 1}', "r.jsonl:2: unknown event type 'bogus'"),
        (b'{"type": "phase", "t_ns": 1, "trial": 1}', "r.jsonl:2: phase event lacks name"),
        (b"[1, 2]", "r.jsonl:2: an event must be a JSON object"),
    ],
)
def test_bad_line_in_the_middle_names_its_number(tmp_path, line, message):
    path = tmp_path / "r.jsonl"
    write(path, [HEADER])
    with open(path, "ab") as f:
        f.write(line + b"\n")
    write_more = (
        path.read_bytes() + b'{"type":"run_end","t_ns":5,"status":"completed","trials":0}\n'
    )
    path.write_bytes(write_more)
    with pytest.raises(RecordingError) as exc:
        read_recording(path)
    assert message in str(exc.value)


def test_wrong_format_and_missing_header(tmp_path):
    path = tmp_path / "r.jsonl"
    write(path, [{**HEADER, "format": "rtax/0"}])
    with pytest.raises(RecordingError, match=r"r.jsonl:1: format 'rtax/0' is not 'rtax/1'"):
        read_recording(path)
    path.write_bytes(b"")
    with pytest.raises(RecordingError, match="empty recording"):
        read_recording(path)
    write(tmp_path / "s.jsonl", [START])
    with pytest.raises(RecordingError, match="s.jsonl:1: the first event must be `run`"):
        read_recording(tmp_path / "s.jsonl")
    with pytest.raises(RecordingError, match="cannot open"):
        read_recording(tmp_path / "missing.jsonl")
