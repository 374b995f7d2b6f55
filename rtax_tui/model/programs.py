"""Which file each step's program is, in each cell (issue 38): "the same program everywhere".

A cell's figures say what a substrate costs only if its steps ran the same programs as
the cells they are set beside. `local` once ran `python3` through the controller's PATH
(a pyenv shim, ~140 ms a call) where `stage` ran /usr/bin/python3 (~15 ms): the sandbox's
cost came out negative, and nothing said why. So once per cell the engine asks the
environment itself, through the cell's own channel, which file each of its workload's
programs resolves to (the first executable of that name on the step's PATH, as `execvp`
finds it), that file with its links followed, a SHA-256 of its first MiB, and for an
interpreter its `--version`; the answer is a `programs` event (model.events).

The answer comes from inside an environment, so it is hostile: only the first
`ANSWER_MAX` bytes are read, only lines of the expected shape for a program that was
asked about are taken (each once), every field is cut to a bound and made visible (no
control character), a hash is taken only as 64 hex digits. It is never used as anything
but text: rtax opens no path it names. A recording is read back with the same rule.

`differences` is the one comparison rule: the report marks a cell whose programs differ
from those of the cells it is compared with, and `rtax compare` a pair of cells so.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rtax_tui.model.arrivals import arrival_of
from rtax_tui.model.events import one_line
from rtax_tui.model.spec import Workload

PROGRAMS_MAX = 16  # programs asked about per cell (a workload's first distinct ones)
ANSWER_MAX = 64 * 1024  # bytes of the environment's answer read; the rest is ignored
PATH_MAX = 512  # characters of a path (or of PATH) kept
VERSION_MAX = 120  # characters of a version line kept
HASH_BYTES = 1 << 20  # the hash covers the file's first MiB (a lying file may be huge)
# Programs whose `--version` is asked: the interpreters and tools a workload's figures
# depend on (a `sh -c` script naming one counts as using it).
INTERPRETERS = ("python3", "python", "git", "perl", "node", "ruby", "bash")
_NAME = re.compile(r"[A-Za-z0-9_./+@:,=~-]{1,255}")  # a program name asked about
_SHA = re.compile(r"[0-9a-f]{64}")

# Run as `/bin/sh -c SCRIPT rtax-programs NAME...` in the environment's workspace. PATH is
# walked as execvp walks it (a shell's `command -v` would answer `true` for a builtin);
# each answer is one line of tab-separated fields, nothing of it trusted (see `parse`).
# The query is the system's: its shell is /bin/sh (a bare `sh` is a session's function in
# the shell channel, which could print any answer) and its tools (readlink, head,
# sha256sum) are found on SYSTEM_PATH, never on the PATH it reports on (a `readlink` put
# first there would say a planted python3 is /usr/bin/python3). A field holding a tab or
# a newline (a PATH or a link's target can) would let one answer be read as another's
# line: it is replaced by UNREADABLE, which differs from any real path.
SYSTEM_PATH = "/usr/bin:/bin"
UNREADABLE = "(unreadable: a tab or newline in it)"
QUERY_SH = (
    r"""set -f
nl='
' tab='	' P=$PATH
PATH="""
    + SYSTEM_PATH
    + r"""
case $P in *"$nl"*|*"$tab"*) printf 'PATH\t%s\n' "$BAD" ;; *) printf 'PATH\t%s\n' "$P" ;; esac
for n in "$@"; do
  p=
  case $n in
    */*) [ -f "$n" ] && [ -x "$n" ] && p=$n ;;
    *) IFS=:; for d in $P; do
         [ -n "$d" ] || d=.
         if [ -f "$d/$n" ] && [ -x "$d/$n" ]; then p=$d/$n; break; fi
       done; unset IFS ;;
  esac
  r= h= v=
  if [ -n "$p" ]; then
    r=$(readlink -f "$p" 2>/dev/null) || r=
    h=$(head -c """
    + str(HASH_BYTES)
    + r""" "$p" 2>/dev/null | sha256sum 2>/dev/null) || h=
    h=${h%% *}
    case " $INTERP " in
      *" $n "*) v=$(PATH=$P "$p" --version </dev/null 2>&1 | head -n 1 | head -c 200) ;;
    esac
  fi
  case $p in *"$nl"*|*"$tab"*) p=$BAD ;; esac
  case $r in *"$nl"*|*"$tab"*) r=$BAD ;; esac
  case $v in *"$nl"*|*"$tab"*) v=$BAD ;; esac
  printf 'PROG\t%s\t%s\t%s\t%s\t%s\n' "$n" "$p" "$r" "$h" "$v"
done
"""
)


@dataclass(frozen=True)
class Program:
    """One program as an environment answered for it (None: not answered, not found)."""

    name: str
    path: str | None  # the first executable of that name on the step's PATH
    resolved: str | None  # that path with its links followed
    sha256: str | None  # of the file's first HASH_BYTES bytes
    version: str | None  # the first line of `--version` (interpreters only)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "resolved": self.resolved,
                "sha256": self.sha256, "version": self.version}  # fmt: skip


@dataclass(frozen=True)
class Programs:
    """A cell's programs: the PATH its steps had, each program, and what went wrong."""

    path: str | None
    programs: tuple[Program, ...]
    error: str | None = None

    def get(self, name: str) -> Program | None:
        for p in self.programs:
            if p.name == name:
                return p
        return None

    def to_json(self) -> dict[str, Any]:
        """The `programs` event's fields beyond its trial and cell."""
        out: dict[str, Any] = {
            "path": self.path,
            "programs": [p.to_json() for p in self.programs],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


def names_of(workload: Workload) -> tuple[str, ...]:
    """The programs a workload's steps run, in order of first use, at most PROGRAMS_MAX:
    each step's argv[0] (its release step's too), and the interpreters a `sh -c` script
    names as a word (a test run's `python3 -m pytest` inside one)."""
    steps = [*workload.steps, *([workload.release] if workload.release is not None else [])]
    out: dict[str, None] = {}
    for step in steps:
        if not step.argv:
            continue
        out.setdefault(step.argv[0], None)
        if step.argv[0] in ("sh", "bash") and len(step.argv) > 2 and step.argv[1] == "-c":
            for word in _words(step.argv[2]):
                if word in INTERPRETERS:
                    out.setdefault(word, None)
    return tuple(n for n in out if _NAME.fullmatch(n) and not n.startswith("-"))[:PROGRAMS_MAX]


def _words(script: str) -> Iterable[str]:
    try:
        words = shlex.split(script[:65536])
    except ValueError:  # an unclosed quote: the plain words are still there
        words = script[:65536].split()
    for w in words:
        yield w.rsplit("/", 1)[-1]


def query_argv(names: Sequence[str]) -> tuple[str, ...]:
    """The step that asks an environment about `names` (see QUERY_SH)."""
    interp = "INTERP=" + shlex.quote(" ".join(INTERPRETERS)) + "\n"
    bad = "BAD=" + shlex.quote(UNREADABLE) + "\n"
    return ("/bin/sh", "-c", interp + bad + QUERY_SH, "rtax-programs", *names)


def _text(value: Any, limit: int) -> str | None:
    """A field of an answer as bounded, visible text (None: empty or not a string)."""
    if not isinstance(value, str) or not value:
        return None
    line = one_line(value)
    if len(line) <= limit:
        return line
    return f"{line[:limit]}...[{len(line) - limit:,} more characters]"


def _sha(value: Any) -> str | None:
    return value if isinstance(value, str) and _SHA.fullmatch(value) else None


def _program(name: str, fields: Sequence[Any]) -> Program:
    path, resolved, sha, version = fields
    return Program(
        name=name,
        path=_text(path, PATH_MAX),
        resolved=_text(resolved, PATH_MAX),
        sha256=_sha(sha),
        version=_text(version, VERSION_MAX),
    )


def parse(
    output: bytes, names: Sequence[str], rc: int | None, error: str | None = None
) -> Programs:
    """An environment's answer to `query_argv(names)`, taken as hostile text (see the
    module's docstring): one entry per name asked, in that order; a name without an
    answer has none of its fields, and `error` says how many went unanswered."""
    text = output[:ANSWER_MAX].decode("utf-8", errors="replace")
    asked = set(names)
    path: str | None = None
    got: dict[str, Program] = {}
    for line in text.split("\n"):
        fields = line.split("\t")
        if fields[0] == "PATH" and len(fields) == 2 and path is None:
            path = _text(fields[1], PATH_MAX)
        elif fields[0] == "PROG" and len(fields) == 6 and fields[1] in asked:
            got.setdefault(fields[1], _program(fields[1], fields[2:]))
    missing = [n for n in names if n not in got]
    programs = tuple(got.get(n) or Program(n, None, None, None, None) for n in names)
    why = []
    if error is not None:
        why.append(error)
    elif rc != 0:
        why.append(f"the query ended with rc {rc}")
    if missing:
        why.append(f"no answer for {len(missing)} of {len(names)} programs")
    return Programs(path, programs, _text("; ".join(why), PATH_MAX) if why else None)


def from_event(ev: Mapping[str, Any]) -> Programs:
    """A `programs` event read back (a recording is input too: the same bounds; an entry
    that is not an object with a name is left out)."""
    items = ev.get("programs")
    out: list[Program] = []
    seen: set[str] = set()
    for item in items[:PROGRAMS_MAX] if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        name = _text(item.get("name"), 255)
        if name is None or name in seen:
            continue
        seen.add(name)
        keys = ("path", "resolved", "sha256", "version")
        out.append(_program(name, [item.get(k) for k in keys]))
    return Programs(_text(ev.get("path"), PATH_MAX), tuple(out), _text(ev.get("error"), PATH_MAX))


def _shown(p: Program | None, version: bool = False) -> str:
    """A program as a difference names it: its path, then in brackets the file its links
    lead to and (`version`) its version, when known."""
    if p is None or p.path is None:
        return "not found"
    extra = [p.resolved] if p.resolved is not None and p.resolved != p.path else []
    if version and p.version is not None:
        extra.append(p.version)
    return f"{p.path} ({', '.join(extra)})" if extra else p.path


def differences(a: Programs, b: Programs) -> list[str]:
    """How the programs of two cells differ, one line per program both were asked about
    (`python3 /root/.pyenv/shims/python3 vs /usr/bin/python3`): another file (its links
    followed), other content (the hash), or another version. Nothing known is no
    difference: a program one side did not answer for is not compared."""
    out = []
    for pa in a.programs:
        pb = b.get(pa.name)
        if pb is None or (pa.path is None and pb.path is None):
            continue
        versions = pa.version != pb.version
        if (pa.path is None) != (pb.path is None):
            out.append(f"{pa.name} {_shown(pa)} vs {_shown(pb)}")
            continue
        file_a, file_b = pa.resolved or pa.path, pb.resolved or pb.path
        if file_a != file_b:
            out.append(f"{pa.name} {_shown(pa, versions)} vs {_shown(pb, versions)}")
        elif pa.sha256 and pb.sha256 and pa.sha256 != pb.sha256:
            out.append(
                f"{pa.name} {_shown(pa, versions)} sha256 {pa.sha256[:12]} vs "
                f"{_shown(pb, versions)} sha256 {pb.sha256[:12]}"
            )
        elif pa.version and pb.version and versions:
            out.append(f"{pa.name} {pa.version} vs {pb.version}")
    return out


def mark(diffs: Sequence[str]) -> str | None:
    """A cell's mark beside its figures: `programs differ: ` and the programs' names (the
    differences themselves are listed apart, whole)."""
    if not diffs:
        return None
    names = dict.fromkeys(d.split(" ", 1)[0] for d in diffs)
    return "programs differ: " + ", ".join(names)


def cell_mark(cell: Mapping[str, Any]) -> str | None:
    """A report cell's mark when its programs differ from a compared cell's, else None
    (the report's `programs.differ`, analysis.report)."""
    got = cell.get("programs")
    differ = got.get("differ") if isinstance(got, Mapping) else None
    if not isinstance(differ, list) or not differ or not isinstance(differ[0], Mapping):
        return None
    diffs = [d for entry in differ if isinstance(entry, Mapping) for d in entry.get("diffs", [])]
    return mark([str(d) for d in diffs])


def differing_pairs(cells: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """Each pair of a report's cells whose programs differ, once: (cell, the cell it is
    compared with, how they differ, that cell's side first)."""
    out: list[tuple[str, str, list[str]]] = []
    seen: set[frozenset[str]] = set()
    for c in cells:
        got = c.get("programs")
        for entry in got.get("differ", []) if isinstance(got, Mapping) else []:
            pair = frozenset((str(c["cell"]), str(entry["cell"])))
            if pair not in seen:
                seen.add(pair)
                out.append((str(c["cell"]), str(entry["cell"]), [str(d) for d in entry["diffs"]]))
    return out


def compared(cells: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """The pairs of cells (by name, given with their host, workload and channel) that a
    report compares: each against the first cell of its host+workload+channel group (and
    arrival pattern: a burst is compared with a burst). The report's driver differences
    and programs marks, and the console's marks, all pair cells by this one rule."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, meta in cells:
        key = (meta.get("workload"), meta.get("channel"), meta.get("host"), arrival_of(name))
        groups.setdefault(key, []).append(name)
    return [(members[0], other) for members in groups.values() for other in members[1:]]
