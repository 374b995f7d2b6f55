"""Reading a recording as columns, a chunk at a time: what `rtax report` folds.

A report of a million events would spend most of its time making a dict of each line
and folding the dicts one by one. Most lines, though, are the engine's own `action`,
`phase` and `trial_end` lines, which it writes with one key order (orjson, no spaces).
`RecordingScan` reads the file in chunks of lines and matches such lines against their
exact byte template with numpy, all the lines of a chunk at once, taking the numbers
the fold needs (trial id, duration, remote duration, ok, valid) straight into
`fold.Rows`. A line matches only if every byte is accounted for: each key in its place,
each number a plain JSON integer of at most 18 digits (so within the schema's 64 bits),
each string of a few safe characters, nothing after the closing brace. Such a line is
valid JSON and fits the schema by construction, so it passes `EVENT_CHECKS` as the dict
reader would check it.

A `trial_start` line (one per trial, its strings repeating from trial to trial) whose
head is the engine's (`{"type":"trial_start","t_ns":N,"trial":N`, plain integers) is
keyed by the rest of its bytes: the first line of a rest is read by the dict reader, and
its event stands for every later line of that rest, with their own `t_ns` and `trial`,
only when the same line with other numbers there reads as that event with just those two
changed (`_prototype`: no later key overrides them, no shared object). Every other line
(a `trial_start` of another rest or shape, a `trial_end` with an error, any other type,
another key order, a bad line) goes through the dict reader's own code, in order, so
that its errors are the same one line naming file and line (`recording.parse_line`).
Memory holds one chunk and the fold's state per trial; the numbers come out the same as
from `read_recording` and `TrialFold.feed`: both end in `TrialFold.feed_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rtax_tui.model.events import EVENT_CHECKS, decode
from rtax_tui.model.fold import RowBuilder, Rows, TrialFold
from rtax_tui.model.inputs import RECORDING_MAX, read_input_chunks
from rtax_tui.model.recording import (
    LINE_MAX,
    RecordingError,
    check_header,
    line_too_long,
    parse_line,
    parse_tail,
)

CHUNK = 2 << 20  # bytes read at a time: a few times this is the scan's own memory; its
# columns then stay in a core's L2 cache (8 MiB chunks were 10-25% slower in CPU, 2026-12)
_PAD = b"\0" * 64  # so that an 8-byte load past a line's end stays in the buffer
_DIGITS = 18  # at most 10**18 - 1 < 2**62: any such number fits every integer kind
_NAME_MAX = 24  # a phase name matched in place: [A-Za-z0-9_.-]{1,24}

_DIGIT = np.full(256, 255, dtype=np.uint8)
_DIGIT[48:58] = np.arange(10, dtype=np.uint8)
# SWAR constants (see `_Chunk.uint`)
_ZEROS = np.uint64(0x3030303030303030)
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIX = np.uint64(0x7676767676767676)  # a byte 0..9 plus 0x76 stays below 0x80
_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)  # k low bytes
_SHIFT = np.array([8 * (8 - k) if k else 0 for k in range(9)], dtype=np.uint64)
_PAIRS = np.uint64(0x00FF00FF00FF00FF)
_QUADS = np.uint64(0x0000FFFF0000FFFF)
_OCTS = np.uint64(0x00000000FFFFFFFF)
_POW8 = np.array([1, 10**8, 10**16], dtype=np.uint64)
_NAMECHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

# kinds of a value: U an integer 0..10**18-1, I the same or negative or null (`rc`),
# B true/false, N null, S a phase name
# a template: its head (up to the first comma) and its fields (key, kind, kept as)
_Template = tuple[bytes, tuple[tuple[bytes, str, str | None], ...]]
_ACTION: _Template = (
    b'{"type":"action"',
    (
        (b'"t_ns":', "U", None),
        (b'"trial":', "U", "tid"),
        (b'"i":', "U", None),
        (b'"dur_ns":', "U", "dur"),
        (b'"rc":', "I", None),
        (b'"ok":', "B", None),
        (b'"out_bytes":', "U", None),
    ),
)
_ACTION_REMOTE: _Template = (_ACTION[0], (*_ACTION[1], (b'"remote_ns":', "U", "remote")))
_PHASE: _Template = (
    b'{"type":"phase"',
    (
        (b'"t_ns":', "U", None),
        (b'"trial":', "U", "tid"),
        (b'"name":', "S", "name"),
        (b'"dur_ns":', "U", "dur"),
        (b'"ok":', "B", None),
    ),
)
_END: _Template = (
    b'{"type":"trial_end"',
    (
        (b'"t_ns":', "U", None),
        (b'"trial":', "U", "tid"),
        (b'"ok":', "B", "ok"),
        (b'"valid":', "B", "valid"),
        (b'"error":', "N", None),
    ),
)


def _kind(word: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(word, "little"))


_KIND_ACTION = _kind(b'action",')
_KIND_PHASE = _kind(b'phase","')
_KIND_END = _kind(b"trial_en")
_KIND_START = _kind(b"trial_st")

# A `trial_start` line: this head, the run's clock, the trial id, then the rest of the
# line (its strings: cell, host, driver, ...), which repeats from trial to trial.
_START_HEAD = b'{"type":"trial_start","t_ns":'
_START_TRIAL = b'"trial":'
_REST_MAX = 1024  # a longer rest is not kept as a prototype's key
_PROTOS_MAX = 4096  # distinct rests kept (a run has one or two per cell)
_SCALARS = (str, int, float, bool, type(None))
_UNFIT: dict[str, Any] = {}  # a rest whose lines the dict reader reads (falsy: no event is)


def _word(lit: bytes) -> tuple[np.uint64, np.uint64]:
    """(value, mask) of up to 8 bytes as a little-endian word."""
    return (
        np.uint64(int.from_bytes(lit, "little")),
        np.uint64((1 << (8 * len(lit))) - 1),
    )


class _Chunk:
    """One chunk of whole lines as bytes, with an 8-byte word at every offset."""

    def __init__(self, data: bytes) -> None:
        self.n = len(data)
        padded = data + _PAD[: 64 - len(data) % 8]
        self.u8 = np.frombuffer(padded, dtype=np.uint8)
        # a little-endian word at every byte offset (a view, no copy)
        self.words = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
        nl = np.flatnonzero(self.u8[: self.n] == 10)
        self.ends = nl  # each line's end (its newline)
        self.starts = np.concatenate(([0], nl[:-1] + 1)).astype(np.int64)
        self.commas = np.flatnonzero(self.u8[: self.n] == 44)
        self.c0 = np.searchsorted(self.commas, self.starts)  # each line's first comma
        self.nc = np.diff(np.append(self.c0, self.commas.size))  # and its number of them

    def w8(self, p: np.ndarray) -> np.ndarray:
        """The 8 bytes at each offset `p` as a little-endian word: one gather from the
        byte-strided view (measured faster than two aligned words and their shifts)."""
        w: np.ndarray = self.words[p]
        return w

    def lit(self, p: np.ndarray, lit: bytes) -> np.ndarray:
        ok: np.ndarray | None = None
        for off in range(0, len(lit), 8):
            val, mask = _word(lit[off : off + 8])
            w = self.w8(p + off if off else p)
            same = (w if len(lit) - off >= 8 else w & mask) == val
            ok = same if ok is None else ok & same
        assert ok is not None  # a literal is never empty
        return ok

    def uint(self, vs: np.ndarray, length: np.ndarray, keep: bool) -> tuple[np.ndarray, np.ndarray]:
        """(fits, value) of each span as a plain JSON integer of 1..18 digits.

        Eight digits at a time (SWAR on 64-bit words): the span is cut, from its end, into
        words of at most 8 digits; a word's bytes are digits when each, less 0x30, is at
        most 9, and eight digits become their value by three multiply-shifts."""
        ok = (length >= 1) & (length <= _DIGITS)
        ok &= (length == 1) | (self.u8[vs] != 48)  # no leading zero
        length = np.where(ok, length, 1)
        val = np.zeros(vs.size, dtype=np.uint64)
        top = int(length.max(initial=0))
        for part in range((top + 7) // 8):  # part 0: the last 8 digits, 1: the 8 before...
            n = np.clip(length - 8 * part, 0, 8)  # digits in this word
            at = vs + np.maximum(length - 8 * part - 8, 0)
            w = self.w8(at) ^ _ZEROS
            w &= _LOW[n]  # this word's own digits, first digit in the low byte
            bad = (w & _HIGH_NIBBLES) | ((w + _SIX) & _HIGH_BITS)
            ok &= bad == 0
            if keep:
                w <<= _SHIFT[n]  # right-align: the missing leading digits become zeros
                w = ((w * np.uint64(10)) + (w >> np.uint64(8))) & _PAIRS
                w = ((w * np.uint64(100)) + (w >> np.uint64(16))) & _QUADS
                w = ((w * np.uint64(10000)) + (w >> np.uint64(32))) & _OCTS
                val += w * _POW8[part]
        return ok, val.astype(np.int64)

    def name_keys(self, vs: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fits, key): each span a quoted text of 1..24 bytes; key its bytes as four
        words (the length, then the text zero-padded), equal for equal texts. Whether a
        text is a name of safe characters is for its caller, once per distinct key."""
        inner = length - 2
        ok = (inner >= 1) & (inner <= _NAME_MAX)
        ok &= (self.u8[vs] == 34) & (self.u8[vs + np.maximum(length - 1, 0)] == 34)
        inner = np.where(ok, inner, 0)
        key = np.zeros((vs.size, 4), dtype=np.uint64)
        key[:, 0] = inner
        for i in range(3):
            key[:, 1 + i] = self.w8(vs + 1 + 8 * i) & _LOW[np.clip(inner - 8 * i, 0, 8)]
        return ok, key

    def match(
        self, idx: np.ndarray, template: _Template
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Which lines `idx` match `template` exactly, and their kept values."""
        head, fields = template
        idx = idx[self.nc[idx] == len(fields)]  # a comma before each field
        s, e = self.starts[idx], self.ends[idx]
        c0 = self.c0[idx]
        ok = self.lit(s, head) & (self.u8[e - 1] == 125)  # a line with a comma: e > s
        sel = np.flatnonzero(ok)
        s, e, c0 = s[sel], e[sel], c0[sel]
        ok = ok[sel]
        ok &= self.commas[c0] - s == len(head)
        kept: dict[str, np.ndarray] = {}
        end = self.commas[c0]
        for j, (key, kind, name) in enumerate(fields):
            seg = end  # the comma before this field: where the one before ended
            end = self.commas[c0 + j + 1] if j + 1 < len(fields) else e - 1
            ok &= self.lit(seg + 1, key)  # after the comma
            vs = seg + 1 + len(key)
            length = end - vs
            if kind == "U":
                fits, val = self.uint(vs, length, name is not None)
                ok &= fits
                if name is not None:
                    kept[name] = val
            elif kind == "I":
                null_v, null_m = _word(b"null")
                null = (length == 4) & ((self.w8(vs) & null_m) == null_v)
                neg = (self.u8[vs] == 45).astype(np.int64)
                fits, _ = self.uint(vs + neg, length - neg, False)
                ok &= null | fits
            elif kind == "B":
                tv, tm = _word(b"true")
                fv, fm = _word(b"false")
                w = self.w8(vs)
                true = (length == 4) & ((w & tm) == tv)
                false = (length == 5) & ((w & fm) == fv)
                ok &= true | false
                if name is not None:
                    kept[name] = true
            elif kind == "N":
                null_v, null_m = _word(b"null")
                ok &= (length == 4) & ((self.w8(vs) & null_m) == null_v)
            else:  # S
                fits, key_words = self.name_keys(vs, length)
                ok &= fits
                kept[name or "name"] = key_words
                kept["name_at"] = vs + 1
        hit = sel[ok]
        return idx[hit], {k: v[ok] for k, v in kept.items()}

    def start_lines(self, idx: np.ndarray) -> tuple[np.ndarray, ...]:
        """Which lines `idx` begin as a `trial_start` of the engine's (its head, `t_ns` and
        `trial` plain integers of at most 18 digits): (lines, t_ns, trial, rest's offset).
        What follows (the rest, from the comma after the trial id) is not read here."""
        s = self.starts[idx]
        ok = (self.nc[idx] >= 3) & self.lit(s, _START_HEAD)
        sel = np.flatnonzero(ok)
        s, c0 = s[sel], self.c0[idx[sel]]
        c1, c2 = self.commas[c0 + 1], self.commas[c0 + 2]
        ok = (self.commas[c0] - s == len(_START_HEAD) - 8) & (c2 < self.ends[idx[sel]])
        t_at = s + len(_START_HEAD)
        fits, t = self.uint(t_at, c1 - t_at, True)
        ok &= fits & self.lit(c1 + 1, _START_TRIAL)
        tid_at = c1 + 1 + len(_START_TRIAL)
        fits, tid = self.uint(tid_at, c2 - tid_at, True)
        ok &= fits
        return idx[sel[ok]], t[ok], tid[ok], c2[ok]


def _distinct(keys: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the first row of each distinct key, each row's index among them) for rows of four
    words. A recording has a handful of phase names: each round takes the first row not
    yet named and every row equal to it; past 64 names, a sort does the rest."""
    inverse = np.full(keys.shape[0], -1, dtype=np.int64)
    first: list[int] = []
    todo = np.arange(keys.shape[0])
    cols = keys.T.copy()  # a word of every row after another: compared a column at a time
    while todo.size and len(first) < 64:
        r = int(todo[0])
        c = cols[:, todo]
        same = c[0] == cols[0, r]
        for w in range(1, 4):
            same &= c[w] == cols[w, r]
        inverse[todo[same]] = len(first)
        first.append(r)
        todo = todo[~same]
    if todo.size:
        _, at, inv = np.unique(keys[todo], axis=0, return_index=True, return_inverse=True)
        inverse[todo] = len(first) + inv.reshape(-1)
        first.extend(todo[at].tolist())
    return first, inverse


class RecordingScan:
    """A recording read a chunk at a time into `Rows` for `fold` (see the module).

    `header` is the `run` event (read when the scan starts); iterate for the batches, in
    order; `torn_tail` says, once done, whether a torn last line was skipped."""

    def __init__(self, path: str | Path, fold: TrialFold, chunk: int | None = None) -> None:
        self.name = str(path)
        self.fold = fold
        self.torn_tail = False
        self._chunks = read_input_chunks(
            self.name, "the recording", RECORDING_MAX, RecordingError, chunk=chunk or CHUNK
        )
        self._rest = b""  # a line cut by the chunk's end
        self._lineno = 0  # lines before the current chunk
        self._pending: list[bytes] = []
        # a trial_start's rest (`start_lines`) -> its event as the dict reader read it,
        # or _UNFIT where the reader is to read each such line itself
        self._protos: dict[bytes, dict[str, Any]] = {}
        self.header = self._find_header()

    def _next_data(self) -> bytes | None:
        """The next run of whole lines (with the cut line before it), or None at the end."""
        for data in self._chunks:
            data = self._rest + data
            cut = data.rfind(b"\n") + 1
            self._rest = data[cut:]
            if len(data) > LINE_MAX:  # a whole line in it may be longer than rtax reads
                self._no_long_line(data, cut)
            if len(self._rest) > LINE_MAX:  # not a line rtax wrote: stop before memory does
                raise line_too_long(self.name, self._lineno + data.count(b"\n", 0, cut) + 1)
            if cut:
                return data[:cut]
        return None

    def _no_long_line(self, data: bytes, cut: int) -> None:
        """The dict reader's error for the first whole line of `data` longer than
        LINE_MAX: the line cut by the last chunk, ended in this one past the limit
        (its rest was within it after that chunk), or one of a chunk larger than it."""
        nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, count=cut) == 10)
        long = np.flatnonzero(np.diff(nl, prepend=-1) - 1 > LINE_MAX)
        if long.size:
            raise line_too_long(self.name, self._lineno + int(long[0]) + 1)

    def _find_header(self) -> dict[str, Any]:
        while True:
            data = self._next_data()
            if data is None:
                break
            lines = data.split(b"\n")
            lines.pop()
            for i, raw in enumerate(lines):
                ev = parse_line(self.name, self._lineno + i + 1, raw)
                if ev is None:
                    continue
                header = check_header(self.name, self._lineno + i + 1, ev)
                rest_at = sum(len(x) + 1 for x in lines[: i + 1])
                self._lineno += i + 1
                self._pending = [data[rest_at:]] if rest_at < len(data) else []
                return header
            self._lineno += len(lines)
        # no header among the whole lines: the tail may hold it, as the dict reader allows
        tail, self._rest = self._rest, b""
        if tail.strip():
            got = parse_tail(self.name, self._lineno + 1, tail, None)
            if got is not None:
                self.header = got
                return got
        raise RecordingError(f"{self.name}: empty recording (no `run` header)")

    def __iter__(self) -> Iterator[Rows]:
        while True:
            data = self._pending.pop() if self._pending else self._next_data()
            if data is None:
                break
            rows, lines = self._rows(data)
            yield rows
            self._lineno += lines
        tail, self._rest = self._rest, b""
        if tail.strip():
            ev = parse_tail(self.name, self._lineno + 1, tail, self.header)
            if ev is None:
                self.torn_tail = True
            else:
                b = RowBuilder(self.fold)
                b.add(self._lineno, ev)
                yield b.build()

    def _rows(self, data: bytes) -> tuple[Rows, int]:
        """The batch of a run of whole lines, and its number of lines."""
        ch = _Chunk(data)
        base = self._lineno  # a row's pos: its line's index in the file
        kind = ch.w8(ch.starts + 9)  # the 8 bytes after `{"type":"`
        done = np.zeros(ch.starts.size, dtype=bool)
        fast = Rows()
        acts = np.flatnonzero(kind == _KIND_ACTION)
        if acts.size:
            i1, k1 = ch.match(acts, _ACTION)
            i2, k2 = ch.match(acts, _ACTION_REMOTE)
            idx = np.concatenate((i1, i2))
            done[idx] = True
            tid = np.concatenate((k1["tid"], k2["tid"]))
            dur = np.concatenate((k1["dur"], k2["dur"]))
            remote = np.concatenate((np.full(i1.size, -1, dtype=np.int64), k2["remote"]))
            if i1.size and i2.size:  # both kinds: back in line order
                o = np.argsort(idx, kind="stable")
                idx, tid, dur, remote = idx[o], tid[o], dur[o], remote[o]
            fast.ac_pos, fast.ac_tid, fast.ac_dur, fast.ac_remote = base + idx, tid, dur, remote
        idx, kept = ch.match(np.flatnonzero(kind == _KIND_PHASE), _PHASE)
        if idx.size:
            first, inverse = _distinct(kept["name"])
            at, length = kept["name_at"], kept["name"][:, 0]
            texts = [data[int(at[f]) : int(at[f]) + int(length[f])] for f in first]
            good = np.array([not t.translate(None, _NAMECHARS) for t in texts], dtype=bool)
            if not good.all():  # a text not of safe characters: its lines are read as dicts
                keep = good[inverse]
                idx, inverse = idx[keep], (np.cumsum(good) - 1)[inverse[keep]]
                kept = {k: v[keep] for k, v in kept.items()}
                texts = [t for t, g in zip(texts, good.tolist(), strict=True) if g]
        if idx.size:
            done[idx] = True
            fast.phase_names = [t.decode("ascii") for t in texts]
            fast.ph_pos, fast.ph_tid, fast.ph_dur = base + idx, kept["tid"], kept["dur"]
            fast.ph_name = inverse
        idx, kept = ch.match(np.flatnonzero(kind == _KIND_END), _END)
        if idx.size:
            done[idx] = True
            fast.en_pos, fast.en_tid = base + idx, kept["tid"]
            fast.en_ok, fast.en_valid = kept["ok"], kept["valid"]
        starts, ends = ch.starts.tolist(), ch.ends.tolist()
        idx, t_ns, tid, rest_at = ch.start_lines(np.flatnonzero(kind == _KIND_START))
        if idx.size:
            protos = self._protos
            get = protos.get
            hit: list[int] = []
            evs = fast.starts
            rests = [
                data[r:e] for r, e in zip(rest_at.tolist(), ch.ends[idx].tolist(), strict=True)
            ]
            for i, t, trial, rest in zip(
                idx.tolist(), t_ns.tolist(), tid.tolist(), rests, strict=True
            ):
                proto = get(rest)
                if proto:  # the event of an earlier line of this rest, with this line's numbers
                    evs.append({**proto, "t_ns": t, "trial": trial})
                    hit.append(i)
                elif proto is None:  # a rest not seen yet: the dict reader reads its line
                    if len(protos) >= _PROTOS_MAX or len(rest) > _REST_MAX:
                        continue  # not kept: the line is the dict reader's
                    ev = _prototype(data[starts[i] : ends[i]], t, trial, rest)
                    protos[rest] = _UNFIT if ev is None else dict(ev)
                    if ev is not None:
                        evs.append(ev)
                        hit.append(i)
                # else _UNFIT: not a line a prototype can stand for (the dict reader's)
            done[hit] = True
            fast.start_pos = [base + i for i in hit]
        slow = RowBuilder(self.fold)
        name = self.name
        for i in np.flatnonzero(~done).tolist():
            ev = parse_line(name, base + i + 1, data[starts[i] : ends[i]])
            if ev is not None:
                slow.add(base + i, ev)
        return Rows.merge([fast, slow.build()]), len(starts)


def _prototype(line: bytes, t_ns: int, trial: int, rest: bytes) -> dict[str, Any] | None:
    """The event of a `trial_start` line, read by the dict reader (orjson, `decode`, the
    schema's check), when it can stand for every line of the same rest: its values are
    plain (no object or array that its copies would share), and the same line with other
    numbers in the places of `t_ns` and `trial` reads as this event with those two
    changed, in the same key order (so no key later in the line overrides them). None
    when not: such lines are left, in order, to the dict reader (`parse_line`), which
    gives any error."""
    try:
        ev = decode(line)
        other_t, other_trial = (t_ns + 1) % 10**18, (trial + 1) % 10**18
        probe = decode(b"%s%d,%s%d%s" % (_START_HEAD, other_t, _START_TRIAL, other_trial, rest))
        fits = (
            type(ev) is dict
            and ev.get("type") == "trial_start"
            and EVENT_CHECKS["trial_start"](ev)
            and type(probe) is dict
            and list(probe) == list(ev)
            and probe.get("t_ns") == other_t
            and probe.get("trial") == other_trial
            and ev.get("t_ns") == t_ns
            and ev.get("trial") == trial
            and all(type(v) in _SCALARS for v in ev.values())
            and {**probe, "t_ns": t_ns, "trial": trial} == ev
        )
    except Exception:
        return None
    return ev if fits else None
