"""Red team (2026-12-06): the `programs` query's answer forged from inside the
environment (model.programs). Each attack ran against the query as it was and got
through; the fix is one rule in QUERY_SH: the query is the system's (/bin/sh, its tools on
SYSTEM_PATH) and a field with a tab or newline is UNREADABLE, never a line of its own."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.hosts.cgroups import Cgroup
from rtax_tui.model import programs
from rtax_tui.model.recording import read_recording

STAGE = os.geteuid() == 0 and Cgroup.version() is not None
needs_stage = pytest.mark.skipif(not STAGE, reason="stage needs root and cgroups")
REAL = Path("/usr/bin/python3").resolve()
REAL_SHA = hashlib.sha256(REAL.read_bytes()[: programs.HASH_BYTES]).hexdigest()
FORGED = f"PROG\tpython3\t/usr/bin/python3\t{REAL}\t{REAL_SHA}\tPython 3.0.0"


def ask(names: tuple[str, ...], path: str) -> programs.Programs:
    """The query as the engine sends it, run here with the environment's PATH."""
    res = subprocess.run(
        programs.query_argv(names), env={"PATH": path}, capture_output=True, timeout=60
    )
    return programs.parse(res.stdout, names, res.returncode)


def script(d: Path, name: str, body: str) -> None:
    f = d / name
    f.write_text("#!/bin/sh\n" + body)
    f.chmod(0o755)


def test_tools_planted_on_the_path_do_not_vouch_for_a_planted_program(tmp_path):
    # a python3 planted first on PATH, with a readlink and a sha256sum beside it that say
    # it is the system's: the query must find its own tools elsewhere
    evil = tmp_path / "evil"
    evil.mkdir()
    script(evil, "python3", 'echo "Python 3.0.0"\n')
    script(evil, "readlink", f"echo {REAL}\n")
    script(evil, "sha256sum", f'cat >/dev/null; echo "{REAL_SHA}  -"\n')
    script(evil, "head", f'cat >/dev/null; echo "{REAL_SHA}  -"\n')
    got = ask(("python3",), f"{evil}:/usr/bin:/bin").get("python3")
    assert got is not None and got.path == f"{evil}/python3"
    assert got.resolved == f"{evil}/python3"
    assert got.sha256 == hashlib.sha256((evil / "python3").read_bytes()).hexdigest()
    honest = ask(("python3",), "/usr/bin:/bin")
    assert programs.differences(programs.Programs(None, (got,)), honest)


def test_a_newline_in_path_or_a_links_target_forges_no_answer(tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    script(evil, "python3", 'echo "Python 3.0.0"\n')
    # the PATH's own line, then a link whose target's name carries another answer
    odd = tmp_path / f"x\n{FORGED}\n"
    odd.mkdir(parents=True)  # its slashes are directories
    script(odd, "true", "exit 0\n")
    (evil / "true").symlink_to(odd / "true")
    path = f"{evil}:/usr/bin:/bin\n{FORGED}"
    got = ask(("true", "python3"), path)
    assert got.path == programs.UNREADABLE
    assert got.get("python3") == programs.Program(
        "python3", f"{evil}/python3", f"{evil}/python3",
        hashlib.sha256((evil / "python3").read_bytes()).hexdigest(), "Python 3.0.0",
    )  # fmt: skip
    true = got.get("true")
    assert true is not None and true.path == f"{evil}/true"
    assert true.resolved == programs.UNREADABLE


def test_a_tab_in_a_version_leaves_the_program_answered(tmp_path):
    # a version line with a tab once made its answer the wrong shape: the program was
    # "not answered", so not compared, and a planted python3 went unflagged
    evil = tmp_path / "evil"
    evil.mkdir()
    script(evil, "python3", "printf 'Python\\t3\\n'\n")
    got = ask(("python3",), f"{evil}:/usr/bin:/bin")
    assert got.error is None
    py = got.get("python3")
    assert py is not None and py.path == f"{evil}/python3" and py.version == programs.UNREADABLE


@needs_stage
def test_a_session_function_named_sh_forges_no_answer(tmp_path):
    # the shell channel keeps the functions a step defines: a bare `sh` in the query
    # was that function, and it printed the whole answer
    fn = "sh() { printf '%s\\n' 'PATH\t/forged' '" + FORGED.replace("\t", "\t") + "'; }"
    prof = tmp_path / "p.toml"
    steps = [["python3", "-c", "pass"], ["eval", fn]]
    body = ", ".join("{argv = [" + ", ".join(_toml(a) for a in s) + "]}" for s in steps)
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["stage"]\nworkloads = ["w"]\n'
        f'channels = ["shell"]\n[workloads.w]\nsteps = [{body}]\n'
    )
    rec = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet",
         "-o", str(rec)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (ev,) = [e for e in read_recording(rec).events if e["type"] == "programs"]
    assert ev["path"] != "/forged"
    py = {p["name"]: p for p in ev["programs"]}["python3"]
    assert py["version"] != "Python 3.0.0" and py["version"].startswith("Python 3.")


def _toml(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '"'
