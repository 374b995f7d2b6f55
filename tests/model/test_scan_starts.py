"""The scanner's `trial_start` lines (`model.scan`, `_prototype`): a line is taken as a
copy of an earlier line's event, its `t_ns` and `trial` changed, only where the dict
reader would read exactly that. Lines that look like the engine's but differ subtly, and
generated lines (hypothesis), read as the dict reader reads them: the same trials, each
`trial_start` the same dict in the same key order, or the same one-line error.

Each line is written twice (and between other lines), so that the second is read through
the prototype the first made, when there is one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.model.test_report_columns import ACTION, END, HEADER, PHASE, START, _outcome

HEAD = b'{"type":"trial_start","t_ns":1,"trial":4'
REST = (
    b',"cell":"h/d/w/c","host":"h","driver":"d","workload":"w","channel":"c",'
    b'"warmup":false,"batch":null}'
)


def _same(tmp_path: Path, *lines: bytes) -> None:
    path = tmp_path / "r.jsonl"
    body = [HEADER]
    for line in lines:
        body += [START, line, ACTION, PHASE, line.replace(b'"t_ns":1,', b'"t_ns":2,'), END]
    path.write_bytes(b"\n".join(body) + b"\n")
    columns, dicts = _outcome(path, True), _outcome(path, False)
    assert columns == dicts


SUBTLE = {
    "engine's": HEAD + REST,
    "escaped quote": HEAD + REST.replace(b'"h/d/w/c"', b'"h/d/w/\\"c"'),
    "escaped backslash": HEAD + REST.replace(b'"h/d/w/c"', b'"h/d\\\\w/c"'),
    "unicode escape": HEAD + REST.replace(b'"host":"h"', b'"host":"\\u0068\\u00e9"'),
    "control escape": HEAD + REST.replace(b'"host":"h"', b'"host":"\\u0001\\u001b[2J"'),
    "newline in a name": HEAD + REST.replace(b'"host":"h"', b'"host":"a\\nb"'),
    "raw utf-8": HEAD + REST.replace(b'"host":"h"', '"host":"é\u2028"'.encode()),
    "comma in a string": HEAD + REST.replace(b'"h/d/w/c"', b'"h,d/w,c:x"'),
    "trial repeated later": HEAD + REST[:-1] + b',"trial":9}',
    "trial repeated, same value": HEAD + REST[:-1] + b',"trial":4}',
    "t_ns repeated later": HEAD + REST[:-1] + b',"t_ns":1}',
    "type repeated later": HEAD + REST[:-1] + b',"type":"phase","name":"x","dur_ns":1,"ok":true}',
    "warmup repeated": HEAD + REST[:-1] + b',"warmup":true}',
    "t_ns 1e400": HEAD.replace(b'"t_ns":1', b'"t_ns":1e400') + REST,
    "t_ns 1e3": HEAD.replace(b'"t_ns":1', b'"t_ns":1e3') + REST,
    "t_ns 1.0": HEAD.replace(b'"t_ns":1', b'"t_ns":1.0') + REST,
    "trial -0": HEAD.replace(b'"trial":4', b'"trial":-0') + REST,
    "trial -4": HEAD.replace(b'"trial":4', b'"trial":-4') + REST,
    "trial 04": HEAD.replace(b'"trial":4', b'"trial":04') + REST,
    "trial 0": HEAD.replace(b'"trial":4', b'"trial":0') + REST,
    "trial 18 digits": HEAD.replace(b'"trial":4', b'"trial":999999999999999999') + REST,
    "trial 2**63": HEAD.replace(b'"trial":4', b'"trial":9223372036854775808') + REST,
    "trial 2**62": HEAD.replace(b'"trial":4', b'"trial":4611686018427387904') + REST,
    "trial a string": HEAD.replace(b'"trial":4', b'"trial":"4"') + REST,
    "trial null": HEAD.replace(b'"trial":4', b'"trial":null') + REST,
    "trial true": HEAD.replace(b'"trial":4', b'"trial":true') + REST,
    "space before comma": HEAD + b" " + REST,
    "space after colon": HEAD.replace(b'"trial":4', b'"trial": 4') + REST,
    "NaN later": HEAD + REST[:-1] + b',"deadline_s":NaN}',
    "huge number later": HEAD + REST[:-1] + b',"steps":1e400}',
    "steps -0": HEAD + REST[:-1] + b',"steps":-0}',
    "steps leading zero": HEAD + REST[:-1] + b',"steps":007}',
    "an object later": HEAD + REST[:-1] + b',"replay":{"trajectory":"t","steps":3}}',
    "an array later": HEAD + REST[:-1] + b',"x":[1,2]}',
    "unknown field": HEAD + REST[:-1] + b',"zz":"kept"}',
    "cell missing": HEAD + REST.replace(b',"cell":"h/d/w/c"', b""),
    "cell a number": HEAD + REST.replace(b'"h/d/w/c"', b"5"),
    "warmup 0": HEAD + REST.replace(b'"warmup":false', b'"warmup":0'),
    "batch a string": HEAD + REST.replace(b'"batch":null', b'"batch":"b1"'),
    "trailing garbage": HEAD + REST + b"x",
    "two objects": HEAD + REST + HEAD + REST,
    "no closing brace": HEAD + REST[:-1],
    "trailing spaces": HEAD + REST + b"  ",
    "a NUL byte": HEAD + REST.replace(b'"host":"h"', b'"host":"h\x00"'),
    "invalid utf-8": HEAD + REST.replace(b'"host":"h"', b'"host":"h\xff"'),
    "lone surrogate": HEAD + REST.replace(b'"host":"h"', b'"host":"\\ud800"'),
    "keys reordered": b'{"type":"trial_start","trial":4,"t_ns":1' + REST,
    "no t_ns": b'{"type":"trial_start","trial":4' + REST,
}


@pytest.mark.parametrize("line", list(SUBTLE.values()), ids=list(SUBTLE))
def test_a_subtly_different_trial_start_reads_as_the_dict_reader_reads_it(
    tmp_path: Path, line: bytes
) -> None:
    _same(tmp_path, line)


def test_many_rests_and_a_cache_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rests past the kept prototypes' bound, and one past the kept length, are read by
    the dict reader itself: the same trials."""
    from rtax_tui.model import scan

    monkeypatch.setattr(scan, "_PROTOS_MAX", 3)
    lines = [HEAD + REST.replace(b'"host":"h"', b'"host":"h%d"' % k) for k in range(8)]
    lines.append(HEAD + REST.replace(b'"host":"h"', b'"host":"' + b"x" * 2000 + b'"'))
    _same(tmp_path, *lines)


# -- generated lines ---------------------------------------------------------------------

SEEDED = settings(
    derandomize=True,  # the same corpus every run: a failure names its example
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# pieces of a string as written: characters, quotes, escapes (good and bad)
_TEXT = st.lists(
    st.sampled_from(list('hdwc/,:{}[]"\\ é\n\x01\u2028') + ["\\u0041", '\\"', "\\ud800"]),
    max_size=6,
).map("".join)
# a value as written: JSON, or near it
_WRITTEN = [b"0", b"4", b"-0", b"007", b"1e400", b"-1", b"1.5", b"NaN", b"true", b"false",
            b"null", b"9223372036854775807", b"9223372036854775808", b"999999999999999999",
            b"1000000000000000000", b'"x"', b"{}", b"[]", b'{"a":1}', b"", b" 1"]  # fmt: skip
_VALUE = st.one_of(
    st.sampled_from(_WRITTEN),
    st.integers(0, 10**19).map(lambda n: b"%d" % n),
    _TEXT.map(lambda s: b'"' + s.encode("utf-8", "surrogatepass") + b'"'),
)
_KEYS = ["t_ns", "trial", "cell", "host", "driver", "workload", "channel", "warmup", "batch",
         "steps", "mode", "type", "zz"]  # fmt: skip
_ENGINE = [
    (b"t_ns", b"1"), (b"trial", b"4"), (b"cell", b'"h/d/w/c"'), (b"host", b'"h"'),
    (b"driver", b'"d"'), (b"workload", b'"w"'), (b"channel", b'"c"'), (b"warmup", b"false"),
    (b"batch", b"null"),
]  # fmt: skip


@st.composite
def _start_line(draw: st.DrawFn) -> bytes:
    """An engine's trial_start line with a few of its fields changed, added (a key again,
    or another), dropped or moved, each value JSON or near it."""
    fields = list(_ENGINE)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["set", "add", "drop", "swap"]))
        k = draw(st.integers(0, len(fields) - 1))
        if op == "set":
            fields[k] = (fields[k][0], draw(_VALUE))
        elif op == "add":
            key = draw(st.sampled_from(_KEYS)).encode()
            fields.insert(draw(st.integers(0, len(fields))), (key, draw(_VALUE)))
        elif op == "drop" and len(fields) > 1:
            del fields[k]
        elif op == "swap":
            j = draw(st.integers(0, len(fields) - 1))
            fields[k], fields[j] = fields[j], fields[k]
    body = b",".join(b'"%s":%s' % kv for kv in fields)
    return b'{"type":"trial_start",' + body + b"}"


@SEEDED
@given(lines=st.lists(_start_line(), min_size=1, max_size=4))
def test_generated_trial_starts_read_as_the_dict_reader_reads_them(
    tmp_path: Path, lines: list[bytes]
) -> None:
    _same(tmp_path, *lines)


def test_no_two_trials_share_a_value_of_their_trial_start(tmp_path: Path) -> None:
    """A line with an object (`replay`) is never a prototype: each trial's event is its
    own, as the dict reader's are (a copy would share the object)."""
    from rtax_tui.model.fold import TrialFold
    from rtax_tui.model.scan import RecordingScan

    line = HEAD + REST[:-1] + b',"replay":{"trajectory":"t","steps":3}}'
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join([HEADER, line, line.replace(b'"trial":4', b'"trial":5')]) + b"\n")
    fold = TrialFold()
    for rows in RecordingScan(path, fold):
        fold.feed_rows(rows)
    assert fold.metas[0]["replay"] == fold.metas[1]["replay"]
    assert fold.metas[0]["replay"] is not fold.metas[1]["replay"]
