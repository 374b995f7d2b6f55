"""The same program everywhere (issue 38): each cell's programs, resolved inside its
environment, recorded once per cell; `local` on the sandboxes' PATH unless a profile asks
for the host's; a cell whose programs differ from its compared cells' marked in the report
and in `rtax compare`; the environment's answer taken as hostile text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rtax_tui.drivers.toolkit.stepenv import SANDBOX_PATH

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import programs
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import Step, Workload

STAGE = os.geteuid() == 0 and Cgroup.version() is not None
needs_stage = pytest.mark.skipif(not STAGE, reason="stage needs root and cgroups")

STEPS = (
    '{argv = ["true"]}, {argv = ["python3", "-c", "print(7)"], expect_out = "7"}, '
    '{argv = ["sh", "-c", "git --version >/dev/null"]}'
)


def rtax(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def profile(tmp: Path, drivers: str, extra: str = "", name: str = "p.toml") -> Path:
    p = tmp / name
    p.write_text(
        f'[run]\ntrials = 2\nwarmup = 1\ndrivers = [{drivers}]\nworkloads = ["w"]\n'
        f'channels = ["exec", "shell"]\n{extra}\n[workloads.w]\nsteps = [{STEPS}]\n'
    )
    return p


def run(tmp: Path, prof: Path, out: str, env: dict[str, str] | None = None) -> Path:
    rec = tmp / out
    res = rtax("run", str(prof), "--headless", "--quiet", "-o", str(rec), env=env)
    assert res.returncode == 0, res.stderr
    return rec


def programs_events(rec: Path) -> dict[str, dict]:
    evs = [e for e in read_recording(rec).events if e.get("type") == "programs"]
    by_cell = {e["cell"]: e for e in evs}
    assert len(by_cell) == len(evs), "one programs event per cell"
    return by_cell


def report(rec: Path) -> dict:
    res = rtax("report", str(rec), "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def fake_bin(tmp: Path, name: str, body: str) -> Path:
    d = tmp / "bin"
    d.mkdir(exist_ok=True)
    f = d / name
    f.write_text("#!/bin/sh\n" + body)
    f.chmod(0o755)
    return d


# -- recorded per cell; local on the sandboxes' PATH by default ---------------------


@needs_stage
def test_each_cell_records_its_programs_once_and_local_has_the_sandbox_path(tmp_path):
    # the controller's PATH starts with a python3 that is not the system's: the default
    # `local` must not find it (the pyenv shim of issue 38)
    shim = fake_bin(tmp_path, "python3", 'exec /usr/bin/python3 "$@"\n')
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    rec = run(tmp_path, profile(tmp_path, '"local", "stage"'), "r.jsonl", env)
    got = programs_events(rec)
    cells = {"local/local/w/exec", "local/local/w/shell", "local/stage/w/exec",
             "local/stage/w/shell"}  # fmt: skip
    assert set(got) == cells
    header = read_recording(rec).header
    assert header["hosts"]["local"]["drivers"]["local"]["env"] == "sandbox"
    for cell, ev in got.items():
        assert ev["path"] == SANDBOX_PATH, cell  # local's PATH is the sandbox's
        assert "error" not in ev, ev
        by = {p["name"]: p for p in ev["programs"]}
        assert list(by) == ["true", "python3", "sh", "git"]  # git: named by a sh -c script
        assert by["python3"]["path"] == "/usr/bin/python3", cell
        assert by["python3"]["version"].startswith("Python 3.")
        assert len(by["true"]["sha256"]) == 64 and by["true"]["version"] is None
    # asked in one trial per cell, after its steps, and counted in no phase
    trials = {e["trial"]: e for e in read_recording(rec).events if e["type"] == "trial_start"}
    for ev in got.values():
        assert trials[ev["trial"]]["cell"] == ev["cell"]
    rep = report(rec)
    assert all(not c["programs"]["differ"] for c in rep["cells"])
    assert "programs differ" not in rtax("report", str(rec)).stdout


# -- env = "host": recorded, and flagged ----------------------------------------------


@needs_stage
def test_local_on_the_host_path_is_recorded_and_flagged(tmp_path):
    shim = fake_bin(tmp_path, "python3", 'exec /usr/bin/python3 "$@"\n')
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    same = run(tmp_path, profile(tmp_path, '"local", "stage"'), "same.jsonl", env)
    prof = profile(
        tmp_path, '"local", "stage"', '[drivers_options.local]\nenv = "host"\n', "h.toml"
    )
    host = run(tmp_path, prof, "host.jsonl", env)
    header = read_recording(host).header
    assert header["hosts"]["local"]["drivers"]["local"]["env"] == "host"
    got = programs_events(host)
    local = {p["name"]: p for p in got["local/local/w/exec"]["programs"]}
    assert local["python3"]["path"] == f"{shim}/python3"
    assert got["local/local/w/exec"]["path"] == env["PATH"]
    rep = report(host)
    cells = {c["cell"]: c for c in rep["cells"]}
    want = f"python3 {shim}/python3 vs /usr/bin/python3"
    for cell in ("local/local/w/exec", "local/stage/w/exec"):
        differ = cells[cell]["programs"]["differ"]
        assert len(differ) == 1 and differ[0]["diffs"][0].startswith("python3 "), cell
    assert cells["local/local/w/exec"]["programs"]["differ"][0]["diffs"][0].startswith(want)
    rows = [d for d in rep["diffs"] if d["b"] == "local/stage/w/exec"]
    assert rows and all(d["programs_differ"] for d in rows)
    text = rtax("report", str(host)).stdout
    assert "local/local/w/exec (programs differ: python3)" in text
    assert want in " ".join(text.split())
    md = rtax("report", str(host), "--format", "markdown").stdout
    # the paths are the environment's text: escaped as Markdown (`_` as `\_`), shown as is
    assert "## Programs that differ" in md and want in md.replace("\\", "")
    # rtax compare: local's cell of the default run against the host run's
    res = rtax("compare", str(same), str(host), "--format", "json")
    assert res.returncode == 0, res.stderr
    cmp = json.loads(res.stdout)
    flagged = {(f["a"], f["b"]) for f in cmp["programs_differ"]}
    assert ("local/local/w/exec", "local/local/w/exec") in flagged
    assert ("local/stage/w/exec", "local/stage/w/exec") not in flagged
    rows = [r for r in cmp["rows"] if r["cell"] == "local/local/w/exec"]
    assert rows and all(r["programs_differ"] for r in rows)
    table = rtax("compare", str(same), str(host)).stdout
    assert "programs differ: python3 /usr/bin/python3" in " ".join(table.split())


# -- the environment's answer is hostile ----------------------------------------------

# The query is the system's /bin/sh (tests/hostile/test_hostile_programs.py): what the
# environment controls is its PATH and the programs on it, here a python3 in a directory
# named with a terminal's escapes, longer than PATH_MAX, whose `--version` is hostile.
LIAR_PY = "printf 'Python 9\\033[2J'; head -c 3000000 /dev/zero\n"


def test_a_hostile_answer_is_bounded_text(tmp_path):
    deep = tmp_path / ("x\033]52;c;ZXZpbA==\007" + "B" * 200) / ("B" * 200) / ("B" * 200)
    deep.mkdir(parents=True)
    (deep / "python3").write_text("#!/bin/sh\n" + LIAR_PY)
    (deep / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{deep}:{'A' * 20000}:{os.environ['PATH']}"}
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["w"]\n'
        'channels = ["exec"]\n[drivers_options.local]\nenv = "host"\n'
        '[workloads.w]\nsteps = [{argv = ["true"]}, {argv = ["sh", "-c", "python3 -V"]}]\n'
    )
    rec = run(tmp_path, prof, "r.jsonl", env)
    ev = programs_events(rec)["local/local/w/exec"]
    raw = (tmp_path / "r.jsonl").read_text()
    assert "\x1b" not in raw and "\x07" not in raw
    assert len(ev["path"]) < programs.PATH_MAX + 60 and ev["path"].startswith(str(tmp_path))
    assert ev["path"].endswith(" more characters]")  # cut, and said so
    true, sh, py = ev["programs"]
    assert [true["name"], sh["name"], py["name"]] == ["true", "sh", "python3"]
    assert py["path"].startswith(f"{tmp_path}/x\\x1b]52;c;ZXZpbA==\\x07BBB")
    assert len(py["path"]) < programs.PATH_MAX + 60
    assert py["version"] == "Python 9\\x1b[2J"
    assert len(true["sha256"]) == 64 and "error" not in ev
    # the trial itself is untouched, and the report reads it back
    end = [e for e in read_recording(rec).events if e["type"] == "trial_end"]
    assert [e["ok"] for e in end] == [True]
    assert rtax("report", str(rec)).returncode == 0


def test_parse_keeps_only_the_names_asked_each_once_within_bounds():
    sha = "ab" * 32
    out = (
        b"PATH\t/bin\nPATH\t/other\n"
        + b"PROG\tgit\t/usr/bin/git\t/usr/bin/git\t" + sha.encode() + b"\tgit version 2\n"
        + b"PROG\tgit\t/fake\t/fake\t" + sha.encode() + b"\t\n"
        + b"PROG\tls\t/bin/ls\n"  # the wrong shape
        + b"PROG\tcurl\t/c\t/c\t\t\n"  # not asked
        + b"x" * (programs.ANSWER_MAX + 10) + b"\nPROG\tls\t/late\t/late\t\t\n"  # past the bound
    )  # fmt: skip
    got = programs.parse(out, ("git", "ls"), 0)
    assert got.path == "/bin"
    assert [p.name for p in got.programs] == ["git", "ls"]
    assert got.programs[0] == programs.Program("git", "/usr/bin/git", "/usr/bin/git", sha,
                                               "git version 2")  # fmt: skip
    assert got.programs[1].path is None and got.error == "no answer for 1 of 2 programs"
    # read back from a recording with the same bounds
    items = [*[p.to_json() for p in got.programs], 5, {"name": "x" * 10_000}]
    back = programs.from_event({"programs": items, "path": got.path})
    assert back.programs[:2] == got.programs and len(back.programs[2].name) < 300


def test_names_and_differences():
    w = Workload("w", (Step(("python3", "-c", "1")), Step(("sh", "-c", "cd r && exec git log")),
                       Step(("python3",)), Step(("-rf",))))  # fmt: skip
    assert programs.names_of(w) == ("python3", "sh", "git")
    sha_a, sha_b = "a" * 64, "b" * 64
    a = programs.Programs("/p", (programs.Program("python3", "/s/python3", "/s/python3", sha_a,
                                                  "Python 3.12.1"),))  # fmt: skip
    b = programs.Programs("/p", (programs.Program("python3", "/usr/bin/python3",
                                                  "/usr/bin/python3.11", sha_b,
                                                  "Python 3.11.2"),))  # fmt: skip
    assert programs.differences(a, b) == [
        "python3 /s/python3 (Python 3.12.1) vs /usr/bin/python3 (/usr/bin/python3.11, "
        "Python 3.11.2)"
    ]
    assert programs.differences(a, a) == []
    # the same file with other content (another image's build of it)
    c = programs.Programs("/p", (programs.Program("python3", "/s/python3", "/s/python3", sha_b,
                                                  "Python 3.12.1"),))  # fmt: skip
    assert programs.differences(a, c) == [
        f"python3 /s/python3 sha256 {sha_a[:12]} vs /s/python3 sha256 {sha_b[:12]}"
    ]
    none = programs.Programs(None, (programs.Program("python3", None, None, None, None),))
    assert programs.differences(a, none) == ["python3 /s/python3 vs not found"]
    assert programs.mark(programs.differences(a, b)) == "programs differ: python3"


# -- a bad option value -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('env = "hots"', "drivers_options.local.env: 'hots' (allowed: sandbox, host)"),
        ("env = 3", "drivers_options.local.env: expected string, got 3"),
        ('path = "/x"', "drivers_options.local.path: unknown key (allowed: env)"),
    ],
)
def test_a_bad_local_option_is_one_line_naming_the_field(tmp_path, body, says):
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ndrivers = ["local"]\nworkloads = ["t0"]\n[drivers_options.local]\n' + body + "\n"
    )
    res = rtax("run", str(prof), "--trials", "1", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1, res.stderr
    assert f"p.toml:5: {says}" in res.stderr, res.stderr
    assert not (tmp_path / "r.jsonl").exists()
