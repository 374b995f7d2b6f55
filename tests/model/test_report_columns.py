"""`rtax report` reads a recording as columns (`model.scan`) into the one fold
(`model.fold.TrialFold`): its document is the one main's dict reader and fold made, to
the last digit, and a bad line gives the same one-line error.

The expected documents in tests/data/report_expected/ were written by `rtax report FILE
--format json` of the code before the columnar fold (main at 202c4eb), for the example
recordings and for `hard_recording()` below; they change only with the report itself.
Examples recorded after that (image-stage, load-local-stage) were written by the dict
reader, after the scanner was seen to give the same document byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rtax_tui.analysis.report import build_report, report_file
from rtax_tui.model import scan
from rtax_tui.model.fold import TrialFold
from rtax_tui.model.recording import RecordingError, read_recording
from rtax_tui.model.scan import RecordingScan

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parents[1] / "data" / "report_expected"
EXAMPLES = sorted((ROOT / "recordings" / "examples").rglob("*.jsonl"))


def _json(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def hard_recording() -> bytes:
    """A recording with what a fold can get wrong: string and reused trial ids, events
    before their trial's start and after its end, two ends, warm-ups, failures with and
    without errors, incomplete trials, remote durations, sub-phases in varying order,
    names the scanner leaves to the dict reader, other key orders and spacing, blank
    lines, capacity batches, a pooled cell with its pool's work, numbers near 2**63, and
    a torn last line. Deterministic (no random module): the expected file is fixed."""
    x = 12345

    def rnd(n: int) -> int:
        nonlocal x
        x = (x * 1103515245 + 12345) % (1 << 31)
        return x % n

    out: list[bytes] = []

    def put(ev: dict[str, Any], spaced: bool = False) -> None:
        if spaced:  # another writer's spacing and key order: the dict reader's lines
            import json

            out.append(json.dumps(dict(reversed(list(ev.items())))).encode())
        else:
            out.append(orjson.dumps(ev))

    put({"type": "run", "t_ns": 0, "format": "rtax/1", "run_id": "hard", "seed": 3,
         "started_at": "2025-01-01T00:00:00Z", "argv": ["rtax"], "profile": {"name": "h"},
         "hosts": {"local": {}}})  # fmt: skip
    put({"type": "phase", "t_ns": 1, "trial": 7, "name": "create", "dur_ns": 5, "ok": True})
    cells = ["local/local/T1/exec", "local/docker/T1/exec", "local/stage/T1/shell"]
    subs = ["create.image", "barrier.wait", "create.a_name_longer_than_twenty_four", "z.é"]
    t = 1
    for trial in range(600):
        cell = cells[trial % 3]
        host, driver, workload, channel = cell.split("/")
        tid: Any = f"s-{trial}" if trial % 17 == 0 else trial
        if trial == 400:
            tid = 30  # a reused id: what follows counts for the new trial
        put({"type": "trial_start", "t_ns": t, "trial": tid, "cell": cell, "host": host,
             "driver": driver, "workload": workload, "channel": channel,
             "warmup": trial < 6, "batch": None, "steps": 3})  # fmt: skip
        scale = (1, 30, 7)[trial % 3] * (5 if trial % 11 == 0 else 1)  # two clusters
        for name in ("create", "ready") if trial % 5 else ("ready", "create"):
            d = scale * (1_000_000 + rnd(400_000))
            put({"type": "phase", "t_ns": t, "trial": tid, "name": name, "dur_ns": d,
                 "ok": True}, spaced=trial % 13 == 0)  # fmt: skip
        for k in range(rnd(3)):
            name = subs[(trial + k) % len(subs)]
            put({"type": "phase", "t_ns": t, "trial": tid, "name": name,
                 "dur_ns": rnd(900_000), "ok": True})  # fmt: skip
        for i in range(1 + rnd(4)):
            act = {"type": "action", "t_ns": t, "trial": tid, "i": i,
                   "dur_ns": 100_000 + rnd(5_000_000), "rc": (0, -1, None)[rnd(3)],
                   "ok": True, "out_bytes": rnd(1000)}  # fmt: skip
            if channel == "shell":
                act["remote_ns"] = rnd(90_000)
            if trial % 23 == 0:
                act["out_dropped"] = 5  # an optional field: the dict reader's line
            put(act)
        put({"type": "phase", "t_ns": t, "trial": tid, "name": "teardown",
             "dur_ns": 200_000 + rnd(100_000), "ok": True})  # fmt: skip
        if trial % 29 == 0:
            continue  # never ends: incomplete
        r = rnd(100)
        err = {"phase": "ready", "kind": ("timeout", "oom", "")[r % 3], "message": "m"}
        put({"type": "trial_end", "t_ns": t, "trial": tid, "ok": r > 8, "valid": r > 12,
             "error": err if r <= 8 or r % 31 == 0 else None})  # fmt: skip
        if trial % 37 == 0:  # a second end, and an action after it
            put({"type": "trial_end", "t_ns": t, "trial": tid, "ok": True, "valid": True,
                 "error": None})  # fmt: skip
            put({"type": "action", "t_ns": t, "trial": tid, "i": 9, "dur_ns": 1, "rc": 0,
                 "ok": True, "out_bytes": 0})  # fmt: skip
        if trial % 50 == 0:
            out.append(b"")
            out.append(b"   ")
        t += 1000
    big = (1 << 63) - 1
    pool = "local/docker/T1/exec/pool"
    put(
        {
            "type": "pool",
            "t_ns": t,
            "host": "local",
            "cell": pool,
            "env": 0,
            "op": "create",
            "dur_ns": 9_000_000,
            "ok": True,
            "cpu_ns": 5,
            "env_cpu_ns": None,
            "error": None,
        }
    )
    for trial in range(1000, 1040):
        put({"type": "trial_start", "t_ns": t, "trial": trial, "cell": pool, "host": "local",
             "driver": "docker", "workload": "T1", "channel": "exec", "warmup": False,
             "batch": None, "mode": "pool"})  # fmt: skip
        put({"type": "phase", "t_ns": t, "trial": trial, "name": "acquire",
             "dur_ns": 10_000 + rnd(50_000), "ok": True})  # fmt: skip
        if trial % 3 == 0:
            put({"type": "phase", "t_ns": t, "trial": trial, "name": "acquire.wait",
                 "dur_ns": rnd(9_000), "ok": True})  # fmt: skip
        put({"type": "action", "t_ns": t, "trial": trial, "i": 0,
             "dur_ns": big // 4 if trial == 1001 else 1 + rnd(90_000), "rc": 0,
             "ok": True, "out_bytes": 1})  # fmt: skip
        put({"type": "phase", "t_ns": t, "trial": trial, "name": "release",
             "dur_ns": 999_999_999_999_999_999 if trial == 1002 else rnd(70_000),
             "ok": True})  # fmt: skip
        put({"type": "trial_end", "t_ns": t, "trial": trial, "ok": True, "valid": True,
             "error": None})  # fmt: skip
    for b in range(4):
        put({"type": "barrier", "t_ns": t, "batch": f"b{b}", "cell": "local/stage/cap/exec",
             "size": 2 + b % 2, "arrived": 2, "released": "all_arrived", "ok": b != 2,
             "deadline_s": 5.0, "warmup": b == 0, "release_ns": 3})  # fmt: skip
    put({"type": "run_end", "t_ns": t, "status": "completed", "trials": 640})
    return b"\n".join(out) + b'\n{"type":"action","t_ns":1,"tri'


@pytest.fixture(scope="module")
def hard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hard") / "hard.jsonl"
    path.write_bytes(hard_recording())
    return path


def _cases(hard: Path) -> list[tuple[Path, Path]]:
    return [(p, EXPECTED / f"{p.stem}.json") for p in EXAMPLES] + [(hard, EXPECTED / "hard.json")]


@pytest.mark.parametrize("chunk", [None, 4096, 100_003])
def test_report_is_main_reports_to_the_last_digit(hard: Path, chunk: int | None) -> None:
    """Every example recording and the hard one, read in chunks of several sizes (lines
    cut at every chunk's end), through the column scanner and through the dict reader."""
    assert EXAMPLES, "no example recordings found"
    old = scan.CHUNK
    scan.CHUNK = chunk or old
    try:
        for path, expected in _cases(hard):
            want = expected.read_bytes()
            assert _json(report_file(path)) == want, path.name
            if chunk is None:
                assert _json(build_report(read_recording(path))) == want, path.name
    finally:
        scan.CHUNK = old


def _fold_of(path: Path, columns: bool) -> Any:
    fold = TrialFold()
    if columns:
        sc = RecordingScan(path, fold, chunk=257)
        for rows in sc:
            fold.feed_rows(rows)
        header, torn = sc.header, sc.torn_tail
    else:
        rec = read_recording(path)
        fold.feed(rec.events)
        header, torn = rec.header, rec.torn_tail
    trials = [
        (list(t.meta.items()), t.verdict, t.phases, t.subphases, t.actions, t.remote, t.error)
        for t in fold.trials.values()
    ]  # a trial's whole trial_start, its keys in order
    return header, torn, fold.starts, trials


def _outcome(path: Path, columns: bool) -> Any:
    try:
        return _fold_of(path, columns)
    except RecordingError as exc:
        return str(exc)


HEADER = (
    b'{"type":"run","t_ns":0,"format":"rtax/1","run_id":"x","started_at":"s","seed":0,'
    b'"argv":[],"profile":{},"hosts":{}}'
)
START = (
    b'{"type":"trial_start","t_ns":1,"trial":4,"cell":"h/d/w/c","host":"h","driver":"d",'
    b'"workload":"w","channel":"c","warmup":false,"batch":null}'
)
ACTION = (
    b'{"type":"action","t_ns":12,"trial":4,"i":0,"dur_ns":9870,"rc":-1,"ok":true,'
    b'"out_bytes":0,"remote_ns":33}'
)
PHASE = b'{"type":"phase","t_ns":12,"trial":4,"name":"create.x_1","dur_ns":70,"ok":false}'
END = b'{"type":"trial_end","t_ns":13,"trial":4,"ok":true,"valid":false,"error":null}'


def _mutants(line: bytes) -> list[bytes]:
    """Every byte of `line` replaced (by a digit, a sign, a quote, structure, a letter),
    deleted and doubled."""
    out = []
    for i in range(len(line)):
        for c in b'09-" ,}:ax\\':
            if line[i] != c:
                out.append(line[:i] + bytes([c]) + line[i + 1 :])
        out.append(line[:i] + line[i + 1 :])
        out.append(line[:i] + line[i : i + 1] * 2 + line[i + 1 :])
    return out


@pytest.mark.parametrize(
    "line", [ACTION, PHASE, END, START], ids=["action", "phase", "end", "start"]
)
def test_a_changed_byte_reads_as_the_dict_reader_reads_it(tmp_path: Path, line: bytes) -> None:
    """The scanner takes a line in place only when it is exactly its template: any one
    byte changed, removed or doubled gives what the dict reader gives (the same fold, or
    the same error naming file and line)."""
    path = tmp_path / "r.jsonl"
    differ = []
    for bad in _mutants(line):
        path.write_bytes(b"\n".join([HEADER, START, line, bad, line, bad, END, b""]))
        a, b = _outcome(path, False), _outcome(path, True)
        if a != b:
            differ.append((bad, a, b))
    assert not differ, differ[:3]


@pytest.mark.parametrize(
    "line, message",
    [
        (b"not json", ":5: not JSON"),
        (b'{"type": "bogus", "t_ns": 1}', ":5: unknown event type 'bogus'"),
        (b'{"type":"phase","t_ns":1,"trial":1}', ":5: phase event lacks name"),
        (b"[1, 2]", ":5: an event must be a JSON object"),
        (ACTION.replace(b"9870", b"-9870"), ":5: action.dur_ns: expected an integer"),
        (ACTION.replace(b"9870", b"9" * 20), ":5: action.dur_ns: expected an integer"),
        (PHASE.replace(b"false", b"0"), ":5: phase.ok: expected true or false"),
    ],
)
def test_a_bad_line_is_the_same_one_line_error(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join([HEADER, START, ACTION, PHASE, line, END, b""]))
    for read in (lambda: read_recording(path), lambda: report_file(path)):
        with pytest.raises(RecordingError) as exc:
            read()
        assert str(exc.value).startswith(str(path) + message) and "\n" not in str(exc.value)
    assert _outcome(path, True) == _outcome(path, False)


def test_header_errors_and_tails_are_the_dict_readers(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    cases = [
        b"",
        b"\n\n",
        ACTION + b"\n",
        b"\n" + HEADER.replace(b"rtax/1", b"rtax/0") + b"\n",
        HEADER,  # only a header, with no newline
        HEADER + b"\n" + START + b"\n" + ACTION,  # a whole last line without newline
        HEADER + b"\n" + START + b"\n" + ACTION[:-9],  # a torn last line
        b"\n" * 3 + HEADER + b"\n" + START + b"\n\n" + END + b"\n",
    ]
    for data in cases:
        path.write_bytes(data)
        assert _outcome(path, True) == _outcome(path, False), data
