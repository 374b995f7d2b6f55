"""Mutants of rtax's inputs (issue 21): a recording, a profile or a trajectory with one
thing wrong in it (a value's type, a huge integer, deep nesting, a cut, bytes that are
not UTF-8), drawn from a seed so that a failure names the seed that reproduces it.

Used by tests/model/test_badinput.py (Hypothesis draws the seeds) and, by hand, as a fuzzer:
`python -m tests.mutants recordings 2000` runs 2,000 fresh mutants and prints the seeds
of any that end in a traceback, a hang or a changed input.
"""

from __future__ import annotations

import contextlib
import io
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "recordings" / "examples"
TRAJECTORIES = ROOT / "tests" / "data" / "trajectories"
PROFILES = ROOT / "profiles"

# values of the wrong type or out of range, for any field
BAD_VALUES: list[Any] = [
    None, "x", "", [], {}, [1, 2], {"a": 1}, True, False, -1, 0, 1.5, -0.5, 1e308,
    2**63, 2**64 - 1, -(2**63) - 1, "9" * 5000, "\u0000", "é" * 3,
]  # fmt: skip


def nested(depth: int, kind: str = "list") -> Any:
    v: Any = 1
    for _ in range(depth):
        v = [v] if kind == "list" else {"a": v}
    return v


def bad_value(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.08:
        return nested(rng.choice((100, 900, 1000)), rng.choice(("list", "dict")))
    if r < 0.12:
        return rng.getrandbits(rng.choice((64, 65, 100, 300)))
    return rng.choice(BAD_VALUES)


def _paths(value: Any, prefix: tuple[Any, ...] = (), depth: int = 0) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (keys and indices), to depth 6."""
    out = [prefix]
    if depth > 6:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out += _paths(v, (*prefix, i), depth + 1)
    return out


def mutate_json(rng: random.Random, value: Any) -> Any:
    """`value` with one place replaced, deleted or given an extra key."""
    paths = [p for p in _paths(value) if p]
    if not paths:
        return bad_value(rng)
    path = rng.choice(paths)
    parent = value
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    op = rng.random()
    if op < 0.15 and isinstance(parent, dict):
        del parent[last]
    elif op < 0.2 and isinstance(parent, dict):
        parent[rng.choice(("type", "extra", "t_ns", "trial"))] = bad_value(rng)
    else:
        parent[last] = bad_value(rng)
    return value


def dumps(value: Any) -> bytes:
    """JSON of any value, even integers past 64 bits (written out by hand)."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        import json

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(20_000)  # a value nested 1,000 deep
        try:
            return json.dumps(value).encode()
        finally:
            sys.setrecursionlimit(limit)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Damage of the bytes themselves: a cut, garbage, a line doubled, a huge line."""
    op = rng.randrange(6)
    if op == 0:  # truncated anywhere
        return data[: rng.randrange(len(data) + 1)]
    if op == 1:  # bytes that are not UTF-8 (or not text)
        i = rng.randrange(len(data) + 1)
        return data[:i] + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8))) + data[i:]
    if op == 2:  # one line cut in the middle
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        return b"\n".join(lines)
    if op == 3:  # lines reordered
        lines = data.split(b"\n")
        rng.shuffle(lines)
        return b"\n".join(lines)
    if op == 4:  # deep nesting in place of a line
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        lines[i] = b'{"type":"phase","a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        return b"\n".join(lines)
    return b""  # empty


def mutate_jsonl(rng: random.Random, data: bytes) -> bytes:
    """A JSON Lines file with one line's value mutated (or its bytes damaged)."""
    if rng.random() < 0.25:
        return mutate_bytes(rng, data)
    lines = data.split(b"\n")
    idx = [i for i, line in enumerate(lines) if line.strip()]
    i = rng.choice(idx)
    try:
        value = orjson.loads(lines[i])
    except orjson.JSONDecodeError:
        return mutate_bytes(rng, data)
    lines[i] = dumps(mutate_json(rng, value))
    return b"\n".join(lines)


def mutate_json_file(rng: random.Random, data: bytes) -> bytes:
    """A whole-file JSON document (or JSON Lines) with one place mutated."""
    if rng.random() < 0.2:
        return mutate_bytes(rng, data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return mutate_jsonl(rng, data)
    return dumps(mutate_json(rng, value))


TOML_BAD = [
    "0", "-1", "1.5", "nan", "inf", "-inf", "true", '"x"', "[]", "{}", "[1, 2]",
    "99999999999999999999", "9223372036854775808", "-9223372036854775809", "70000",
    "1e308", '"unlimited"', "[" * 600 + "]" * 600, '"' + "a" * 5000 + '"',
]  # fmt: skip


def mutate_toml(rng: random.Random, text: bytes) -> bytes:
    """A profile with one value replaced, a line cut, or bytes that are not UTF-8."""
    if rng.random() < 0.15:
        return mutate_bytes(rng, text)
    lines = text.split(b"\n")
    keyed = [
        i for i, line in enumerate(lines) if b"=" in line and not line.lstrip().startswith(b"#")
    ]
    if not keyed:
        return mutate_bytes(rng, text)
    i = rng.choice(keyed)
    key = lines[i].split(b"=", 1)[0]
    lines[i] = key + b"= " + rng.choice(TOML_BAD).encode()
    return b"\n".join(lines)


# -- the commands a mutant is given to, in-process -------------------------------------
def call_main(argv: list[str]) -> tuple[int, str]:
    """`rtax ARGV` in this process: (exit status, stderr); a traceback raises."""
    from rtax_tui.commands.cli import main

    err = io.StringIO()
    out = io.BytesIO()

    stdout = io.TextIOWrapper(out, encoding="utf-8")
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


class Failure(Exception):
    pass


def check_run(argv: list[str], inputs: list[Path], limit_s: float = 20.0) -> int:
    """`rtax ARGV` ends in 0 or 2 (2 with one line on stderr), within `limit_s`, and leaves
    its inputs as they were; else a Failure saying what happened."""
    before = [p.read_bytes() if p.is_file() else None for p in inputs]
    t0 = time.monotonic()
    try:
        rc, err = call_main(argv)
    except Exception:  # a traceback: what issue 21 forbids
        raise Failure(f"traceback: {' '.join(argv)}\n{traceback.format_exc()}") from None
    took = time.monotonic() - t0
    if took > limit_s:
        raise Failure(f"took {took:.1f}s: {' '.join(argv)}")
    if rc not in (0, 2):
        raise Failure(f"exit {rc}: {' '.join(argv)}: {err}")
    if rc == 2 and err.count("\n") != 1:
        raise Failure(f"not one line: {' '.join(argv)}: {err!r}")
    after = [p.read_bytes() if p.is_file() else None for p in inputs]
    if after != before:
        raise Failure(f"an input changed: {' '.join(argv)}")
    return rc


def recording_sources() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.jsonl") if p.stat().st_size < 100_000)


def trajectory_sources() -> list[Path]:
    return sorted(p for p in TRAJECTORIES.rglob("*") if p.is_file() and p.suffix != ".md")


def profile_sources() -> list[Path]:
    return sorted(PROFILES.glob("*.toml"))


def recording_case(seed: int, tmp: Path) -> list[tuple[list[str], list[Path]]]:
    rng = random.Random(seed)
    src = rng.choice(recording_sources())
    rec = tmp / f"m{seed}.jsonl"
    rec.write_bytes(mutate_jsonl(rng, src.read_bytes()))
    fmt = rng.choice(("table", "json", "markdown", "csv"))
    cases = [
        (["report", str(rec), "--format", fmt], [rec]),
        (["compare", str(src), str(rec), "--format", rng.choice(("table", "json"))], [rec]),
        (["project", str(rec), "--format", "json"], [rec]),
    ]
    if rng.random() < 0.1:  # matplotlib is slow: a few plots only
        kind = rng.choice(("breakdown", "cold-start", "cdf", "trajectory", "capacity"))
        out = tmp / f"m{seed}.svg"
        cases.append((["plot", str(rec), "--kind", kind, "-o", str(out), "--force"], [rec]))
    return cases


def trajectory_case(seed: int, tmp: Path) -> list[tuple[list[str], list[Path]]]:
    rng = random.Random(seed)
    src = rng.choice(trajectory_sources())
    traj = tmp / f"m{seed}{src.suffix}"
    traj.write_bytes(mutate_json_file(rng, src.read_bytes()))
    out = tmp / f"prep{seed}.jsonl"
    return [
        (["traj", "inspect", str(traj)], [traj]),
        (["traj", "prepare", str(traj), "--repeat", "1", "--max-prefixes", "3",
          "-o", str(out), "--format", "json"], [traj]),
    ]  # fmt: skip


def profile_case(seed: int, tmp: Path) -> list[tuple[list[str], list[Path]]]:
    """A mutated profile, loaded (the check every command runs before a trial)."""
    rng = random.Random(seed)
    src = rng.choice(profile_sources())
    prof = tmp / f"m{seed}.toml"
    prof.write_bytes(mutate_toml(rng, src.read_bytes()))
    return [(["@load", str(prof)], [prof])]


def check_profile(path: Path) -> None:
    """A mutated profile loads, or fails as one ProfileError line; never a traceback."""
    from rtax_tui.engine.profile import load_profile
    from rtax_tui.model.spec import RtaxError

    before = path.read_bytes()
    t0 = time.monotonic()
    try:
        load_profile(path)
    except RtaxError as exc:
        if "\n" in str(exc):
            raise Failure(f"not one line: {path}: {exc!r}") from None
    except Exception:
        raise Failure(f"traceback: {path}\n{traceback.format_exc()}") from None
    if time.monotonic() - t0 > 10:
        raise Failure(f"slow: {path}")
    if path.read_bytes() != before:
        raise Failure(f"changed: {path}")


CASES: dict[str, Callable[[int, Path], list[tuple[list[str], list[Path]]]]] = {
    "recordings": recording_case,
    "trajectories": trajectory_case,
    "profiles": profile_case,
}


def run_case(kind: str, seed: int, tmp: Path) -> None:
    for argv, inputs in CASES[kind](seed, tmp):
        if argv[0] == "@load":
            check_profile(Path(argv[1]))
        else:
            check_run(argv, inputs)


def main() -> int:  # pragma: no cover - the fuzzer by hand
    import tempfile

    kind, n = sys.argv[1], int(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else random.SystemRandom().getrandbits(32)
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for seed in range(first, first + n):
            try:
                run_case(kind, seed, Path(d))
            except Failure as exc:
                bad += 1
                print(f"seed {seed}: {str(exc)[:2000]}", flush=True)
    print(f"{kind}: {n} mutants from seed {first}: {bad} failures", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
