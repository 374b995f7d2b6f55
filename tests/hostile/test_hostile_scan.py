"""The recording's fast scan (`model.scan`, issue 42) read as a model under training
would write what reaches it: its error texts, its step's text, names it makes. Each
recording here is read twice, by the column scanner and by the dict reader (orjson and
the schema's check per line), and must give the same trials (each `trial_start` the same
dict in the same key order, the same verdicts, phases, actions, errors) or the same
one-line error; the report's figures must be those recomputed from the lines
themselves. docs/boundaries.md, "The recording's fast scan (issue 42): what was tried",
lists the attacks and what held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtax_tui.analysis.report import report_file
from rtax_tui.model import scan
from rtax_tui.model.events import decode
from rtax_tui.model.fold import TrialFold
from rtax_tui.model.recording import LINE_MAX, RecordingError, read_recording
from rtax_tui.model.scan import RecordingScan
from tests.model.test_report_columns import ACTION, END, HEADER, PHASE, START, _outcome

HEAD = b'{"type":"trial_start","t_ns":%d,"trial":%d'
REST = (
    b',"cell":"h/d/w/c","host":"h","driver":"d","workload":"w","channel":"c",'
    b'"warmup":false,"batch":null}'
)
# a trial_end of the engine's with an error whose text the step wrote
FORGED = (
    b'{"type":"trial_end","t_ns":13,"trial":4,"ok":false,"valid":false,"error":{"kind":"x",'
    b'"msg":"%s"}}'
)
# texts a step controls, as the engine's JSON writes them: another line's bytes in them
HOSTILE = [
    b'\\",\\"ok\\":true,\\"',
    b'\\"},{\\"type\\":\\"trial_end\\",\\"trial\\":4,\\"ok\\":true,\\"valid\\":true}',
    b',\\"ok\\":true,\\"valid\\":true,\\"error\\":null}',
    b"\\\\",
    b'\\\\\\"',
    "\u00e9\u2028\U0001f600".encode(),
    b"\\u0000\\u001b[2J\\r",
    b'}\\n{\\"type\\":\\"run\\"',
]


def _columns(path: Path, chunk: int) -> Any:
    fold = TrialFold()
    try:
        sc = RecordingScan(path, fold, chunk=chunk)
        for rows in sc:
            fold.feed_rows(rows)
    except RecordingError as exc:
        return str(exc)
    trials = [
        (list(t.meta.items()), t.verdict, t.phases, t.subphases, t.actions, t.remote, t.error)
        for t in fold.trials.values()
    ]
    return sc.header, sc.torn_tail, fold.starts, trials


def _same(path: Path, data: bytes, chunks: tuple[int, ...] = (257,)) -> Any:
    path.write_bytes(data)
    want = _outcome(path, False)
    for chunk in chunks:
        assert _columns(path, chunk) == want, chunk
    return want


def _trial(tid: int, rest: bytes = REST, t_ns: int = 1, *more: bytes) -> list[bytes]:
    return [
        HEAD % (t_ns, tid) + rest,
        *(x.replace(b'"trial":4', b'"trial":%d' % tid) for x in more),
    ]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_steps_text_in_an_error_reads_as_the_dict_reader_reads_it(
    tmp_path: Path, text: bytes
) -> None:
    lines = [HEADER]
    for tid in range(4):
        lines += _trial(tid, REST, 1, ACTION, PHASE, FORGED.replace(b"%s", text))
    got = _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n", (257, 4096, scan.CHUNK))
    assert not isinstance(got, str)
    assert all(t[1] == "failed" for t in got[3])  # no forged `ok` reached the fold


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_string_in_a_trial_start_reads_as_the_dict_reader_reads_it(
    tmp_path: Path, text: bytes
) -> None:
    """In each of a trial_start's strings, first for one trial, then again for others
    (their lines read through the first one's prototype)."""
    for key in (b'"cell":"h/d/w/c"', b'"host":"h"', b'"channel":"c"', b'"batch":null'):
        k = key.split(b":")[0]
        rest = REST.replace(key, k + b':"' + text + b'"')
        lines = [HEADER]
        for tid in range(5):
            lines += _trial(tid, rest, 7 + tid, ACTION, END)
        _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n", (257, scan.CHUNK))


def test_a_line_cut_by_a_chunk_anywhere(tmp_path: Path) -> None:
    """Chunks of every size from 1 to past the longest line: a chunk ends inside a
    string, after a backslash, inside a multi-byte character, between \\r and \\n, in
    a trial_start's head and rest, and lines are longer than a chunk."""
    rest = REST.replace(b'"host":"h"', '"host":"\\\\\\"\u00e9\U0001f600\\r"'.encode())
    lines = [HEADER + b"\r"]
    for tid in range(3):
        lines += _trial(tid, rest, 10**17 + tid, ACTION, PHASE + b"\r", END)
    lines.append(FORGED.replace(b"%s", HOSTILE[1]))
    data = b"\n".join(lines) + b"\n"
    _same(tmp_path / "r.jsonl", data, tuple(range(1, 420, 1)))


@pytest.mark.parametrize(
    "ending", [b"\r\n", b"\n\n", b"\n \n"], ids=["crlf", "blank lines", "space lines"]
)
@pytest.mark.parametrize("last", [b"\r\n", b"\n", b""], ids=["crlf", "lf", "none"])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["", "bom"])
def test_line_endings_a_last_line_and_a_bom(
    tmp_path: Path, ending: bytes, last: bytes, bom: bytes
) -> None:
    lines = [HEADER]
    for tid in range(3):
        lines += _trial(tid, REST, 5, ACTION, PHASE, END)
    _same(tmp_path / "r.jsonl", bom + ending.join(lines) + last, (7, 257, scan.CHUNK))


def test_rests_that_differ_past_the_kept_length(tmp_path: Path) -> None:
    """Two rests alike in their first KiB and more: neither is a prototype's key."""
    pad = b"x" * (scan._REST_MAX + 10)
    one = REST.replace(b'"host":"h"', b'"host":"' + pad + b'a"')
    two = REST.replace(b'"host":"h"', b'"host":"' + pad + b'b"')
    lines = [HEADER, *_trial(1, one), *_trial(2, two), *_trial(3, one), *_trial(4, two)]
    want = _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n", (257, scan.CHUNK))
    assert [dict(t[0])["host"][-1] for t in want[3]] == ["a", "b", "a", "b"]


def test_a_full_cache_then_a_first_rest_again(tmp_path: Path) -> None:
    """4,097 distinct rests (one past the kept prototypes), then a line of the first
    rest, of the last (never kept) and of one between, each with a forged field after
    the id: the kept ones are not evicted, the last is the dict reader's."""
    rests = [REST.replace(b'"host":"h"', b'"host":"h%d"' % k) for k in range(scan._PROTOS_MAX + 1)]
    lines = [HEADER]
    for k, rest in enumerate(rests):
        lines += _trial(k, rest)
    for k in (0, scan._PROTOS_MAX, 17):
        lines += _trial(10**6 + k, rests[k], 3, END)
        lines += _trial(10**6 + k, rests[k][:-1] + b',"warmup":true}', 4)
    _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n", (scan.CHUNK, 100_003))


NUMBERS = [b"+1", b" 1", b"1 ", b"0x1", b"01", b"-1", b"-0", b"18446744073709551616",
           b"1000000000000000000", b"999999999999999999", b"1e3", b'"1"', b"",
           b"\xd9\xa1"]  # fmt: skip


@pytest.mark.parametrize("where", ["t_ns", "trial"])
@pytest.mark.parametrize("number", NUMBERS)
def test_numbers_at_the_head(tmp_path: Path, where: str, number: bytes) -> None:
    """A trial_start's t_ns or trial written otherwise, after a prototype of its rest."""
    odd = (HEAD % (1, 4)).replace(b'"%s":' % where.encode() + (b"1" if where == "t_ns" else b"4"),
                                  b'"%s":' % where.encode() + number)  # fmt: skip
    lines = [HEADER, *_trial(4, REST, 1, ACTION), odd + REST, ACTION, END]
    _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n")


def test_reused_ids_and_events_out_of_order(tmp_path: Path) -> None:
    """One id started twice, ended twice, events before its start and after its end,
    the same rest for every start (each through the prototype)."""
    e_ok = END.replace(b'"ok":true,"valid":false', b'"ok":true,"valid":true')
    e_bad = END.replace(b'"ok":true', b'"ok":false')
    lines = [HEADER, ACTION, e_ok, *_trial(4, REST, 1, ACTION, e_ok, e_bad, ACTION)]
    lines += [*_trial(4, REST, 2, e_bad), *_trial(4, REST, 3, PHASE, e_ok, e_ok), e_bad]
    lines += [*_trial(5, REST, 4), ACTION.replace(b'"trial":4', b'"trial":5'), e_ok]
    want = _same(tmp_path / "r.jsonl", b"\n".join(lines) + b"\n", (1, 64, 257, scan.CHUNK))
    assert want[2] == 4


def _recomputed(data: bytes) -> dict[str, Any]:
    """Per cell, from every line decoded on its own: counts and the action and total
    samples' n, P50 and max (in ms), by the counting rule of `model.fold`."""
    lines = data.split(b"\n")
    evs = [decode(raw) for raw in lines[1:] if raw.strip()]
    slots: list[dict[str, Any]] = []
    latest: dict[Any, int] = {}
    for ev in evs:
        key = (type(ev["trial"]) is str, ev["trial"])
        if ev["type"] == "trial_start":
            latest[key] = len(slots)
            slots.append({"ev": ev, "end": None, "acts": [], "phases": 0})
            continue
        s = latest.get(key)
        if s is None:
            continue
        if ev["type"] == "action":
            slots[s]["acts"].append(ev["dur_ns"])
        elif ev["type"] == "phase" and ev["name"] in ("create", "ready", "teardown"):
            slots[s]["phases"] += ev["dur_ns"]
        elif ev["type"] == "trial_end":
            slots[s]["end"] = (ev["ok"], ev["valid"])
    cells: dict[str, Any] = {}
    for sl in slots:
        c = cells.setdefault(sl["ev"]["cell"], {"n": 0, "failed": 0, "warmup": 0, "a": [], "t": []})
        if sl["ev"]["warmup"]:
            c["warmup"] += 1
            continue
        c["n"] += 1
        if sl["end"] is None or not sl["end"][0]:
            c["failed"] += 1
        elif sl["end"][1]:
            c["a"] += sl["acts"]
            c["t"].append(sum(sl["acts"]) + sl["phases"])

    def stats(x: list[int]) -> tuple[Any, ...]:
        a = np.asarray(x, dtype=np.int64)
        if not a.size:
            return (0, None, None)
        return (a.size, float(np.percentile(a, 50)) / 1e6, float(a.max()) / 1e6)

    return {
        k: (c["n"], c["failed"], c["warmup"], stats(c["a"]), stats(c["t"]))
        for k, c in cells.items()
    }


def test_the_reports_figures_are_those_of_the_lines(tmp_path: Path) -> None:
    """A recording whose trials' texts are hostile (errors, cell names, phase names
    left to the dict reader): the report's counts and figures per cell are those
    recomputed from each line decoded on its own."""
    lines = [HEADER]
    for tid in range(300):
        text = HOSTILE[tid % len(HOSTILE)]
        cell = b"h/d/w/c" if tid % 3 else b"h/d/w/" + HOSTILE[tid % 4].replace(b"\\n", b"")
        rest = REST.replace(b'"h/d/w/c"', b'"' + cell + b'"')
        if tid % 7 == 0:
            rest = rest.replace(b'"warmup":false', b'"warmup":true')
        act = ACTION.replace(b"9870", b"%d" % (1000 + tid * 37 % 101))
        ph = PHASE.replace(b"create.x_1", b"create").replace(b"70", b"%d" % (tid * 13 % 59))
        end = END.replace(b'"valid":false', b'"valid":true')
        if tid % 5 == 0:
            end = FORGED.replace(b"%s", text)
        lines += _trial(tid, rest, tid, act, ph, act, end if tid % 11 else ACTION)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    doc = report_file(path)
    got = {
        c["cell"]: (
            c["n"], c["failed"], c["warmup"],
            *((c["phases"][p]["n"], c["phases"][p]["p50_ms"], c["phases"][p]["max_ms"])
              for p in ("action", "total")),
        )
        for c in doc["cells"]
    }  # fmt: skip
    assert got == _recomputed(data)
    assert len(got) > 1


def test_a_line_longer_than_rtax_reads_ending_inside_a_chunk(tmp_path: Path) -> None:
    """A line a little past `LINE_MAX` whose newline comes in the chunk that takes it
    past: the same error as the dict reader's, not a report of it (found by this
    attack: the scanner only measured the cut line after each chunk)."""
    path = tmp_path / "r.jsonl"
    long = FORGED.replace(b"%s", b"x" * (LINE_MAX + 1000))
    path.write_bytes(b"\n".join([HEADER, START, long, END, b""]))
    with pytest.raises(RecordingError) as exc:
        read_recording(path)
    want = str(exc.value)
    assert want == f"{path}:3: a line longer than rtax reads (16 MiB)"
    with pytest.raises(RecordingError) as exc:
        report_file(path)
    assert str(exc.value) == want
    for chunk in (LINE_MAX + 5, 3 << 20):
        assert _columns(path, chunk) == want
