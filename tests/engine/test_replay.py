"""Replay as a workload (`[workloads.NAME] trajectory = ...`), for real: real public
trajectories (tests/data/trajectories/SOURCES.md) replayed through the engine on
`local`, `stage` and `docker`, each step timed as an action; fidelity, the kill at the
action timeout, the refusal of `local`, and bad profile keys. Trajectories written here
by hand (a few mini-swe-agent-1 messages, whose exit codes are exact) are marked
synthetic."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine.traj.workload import map_path, shell_argv, trajectory_root, write_argv
from rtax_tui.model.recording import read_recording

DATA = Path(__file__).parents[1] / "data" / "trajectories"
REAL = {  # one real file per format, the steps its replay runs (shell, reads, writes)
    "swe-agent": (DATA / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj", 5),
    "mini-swe-agent": (DATA / "mini-swe-agent" / "astropy__astropy-12907.traj.json", 64),
    "openhands-v0": (DATA / "openhands-v0" / "wrong_initial_state.json", 3),
    "openhands-v1": (DATA / "openhands-v1" / "goal-conversation", 2),
    "codex": (
        DATA / "codex" / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
        43,
    ),
    "claude-code": (DATA / "claude-code" / "session-196820da.jsonl", 48),
    "gemini-cli": (DATA / "gemini-cli" / "session-2025-12-01T21-45-5b959dae.json", 9),
}


def rtax(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=timeout
    )


def profile(tmp_path: Path, body: str, run: str, action_s: float = 60) -> Path:
    p = tmp_path / "replay.toml"
    p.write_text(f"[run]\ntrials = 1\nwarmup = 0\n{run}\n[timeouts]\naction = {action_s}\n{body}")
    return p


def run_profile(
    tmp_path: Path, prof: Path, *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(out), *args)
    assert res.returncode == 0, res.stderr
    rep = rtax("report", str(out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    return json.loads(rep.stdout), read_recording(out).events


def mini_v1(path: Path, steps: list[tuple[str, int]], cwd: str = "/repo") -> Path:
    """A synthetic mini-swe-agent-1 trajectory: each command with its recorded exit code."""
    msgs: list[dict[str, str]] = []
    for cmd, rc in steps:
        msgs.append({"role": "assistant", "content": f"```bash\n{cmd}\n```"})
        msgs.append({"role": "user", "content": f"<returncode>{rc}</returncode><output></output>"})
    doc = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {"config": {"environment": {"cwd": cwd}}},
        "messages": msgs,
    }
    path.write_text(json.dumps(doc))
    return path


def by_cell(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    trials = {e["trial"]: e["cell"] for e in events if e["type"] == "trial_start"}
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e["type"] == "action":
            out.setdefault(trials[e["trial"]], []).append(e)
    return out


# -- one real trajectory per format, local (allowed) and stage -------------------------


def test_every_format_replays_on_local_and_stage(tmp_path: Path) -> None:
    body = "".join(
        f'[workloads.{fmt.replace("-", "_")}]\ntrajectory = "{path}"\nallow_unisolated = true\n'
        for fmt, (path, _) in REAL.items()
    )
    names = ", ".join(f'"{fmt.replace("-", "_")}"' for fmt in REAL)
    prof = profile(tmp_path, body, f'drivers = ["local", "stage"]\nworkloads = [{names}]')
    rep, events = run_profile(tmp_path, prof)
    cells = {(c["driver"], c["workload"]): c for c in rep["cells"]}
    assert len(cells) == 2 * len(REAL)
    starts = {e["cell"]: e for e in events if e["type"] == "trial_start"}
    actions = by_cell(events)
    for (driver, wl), c in cells.items():
        fmt = wl.replace("_", "-")
        path, n_steps = REAL[fmt]
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), (driver, wl, c["errors"])
        r = c["replay"]
        assert r["steps_run"] == n_steps and r["trajectories"] == 1 and r["timed_out"] == 0
        assert c["phases"]["action"]["n"] == n_steps  # every replayed step timed as an action
        start = starts[c["cell"]]
        assert start["replay"]["format"] == fmt and start["steps"] == n_steps
        assert start["replay"]["trajectory"] == str(path)
        # steps with a recorded exit code each carry it; fidelity is their share
        acts = actions[c["cell"]]
        with_rc = [a for a in acts if "expect_rc" in a]
        assert r["with_rc"] == len(with_rc)
        assert r["matched"] == sum(a["rc"] == a["expect_rc"] for a in with_rc)
    # the workspace evolves: Gemini wrote lead_gemini.txt, then a replacement in it found
    # the text it wrote (rc 0), on both drivers; a read of it came back
    for driver in ("local", "stage"):
        cell = cells[(driver, "gemini_cli")]["cell"]
        rcs = [a["rc"] for a in actions[cell]]
        assert rcs[-3:] == [0, 0, 0], rcs  # write, read, replace (in trajectory order)
    # mini-swe-agent's commands all begin `cd /testbed &&`: no such directory here, so
    # none of its 63 recorded exit codes can match except where the agent's own failed
    mini = cells[("stage", "mini_swe_agent")]["replay"]
    assert mini["with_rc"] == 63 and mini["fidelity"] is not None


# -- fidelity, the kill at the timeout, the next step still runs ------------------------


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_fidelity_and_a_hanging_step(tmp_path: Path, channel: str) -> None:
    traj = mini_v1(  # synthetic
        tmp_path / "t.json",
        [
            ("sleep 30", 0),  # never ends within the timeout: killed, the replay goes on
            ("echo after > after.txt", 0),  # same rc
            ("test -f after.txt", 0),  # same rc: the workspace kept the previous write
            ("exit 3", 5),  # a different rc
            ("exit 3", 3),  # same
        ],
    )
    body = f'[workloads.hang]\ntrajectory = "{traj.name}"\nallow_unisolated = true\n'
    prof = profile(tmp_path, body, 'drivers = ["local", "stage"]\nworkloads = ["hang"]', 2)
    rep, events = run_profile(tmp_path, prof, "--channel", channel)
    actions = by_cell(events)
    for c in rep["cells"]:
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), c["errors"]
        r = c["replay"]
        assert (r["matched"], r["with_rc"], r["timed_out"], r["steps_run"]) == (3, 5, 1, 5)
        assert r["fidelity"] == pytest.approx(0.6)
        acts = actions[c["cell"]]
        assert [a["rc"] for a in acts][1:] == [0, 0, 3, 3]
        assert acts[0]["rc"] in (137, -9)  # -9: local's exec channel sees the signal
        assert acts[0]["timed_out"] is True and 2e9 <= acts[0]["dur_ns"] < 10e9
        assert not any(a.get("timed_out") for a in acts[1:])
        assert [a["expect_rc"] for a in acts] == [0, 0, 0, 5, 3]


def test_markdown_and_table_show_fidelity(tmp_path: Path) -> None:
    traj = mini_v1(tmp_path / "t.json", [("true", 0), ("false", 0)])  # synthetic
    body = f'[workloads.two]\ntrajectory = "{traj}"\n'
    prof = profile(tmp_path, body, 'drivers = ["stage"]\nworkloads = ["two"]')
    out = tmp_path / "r.jsonl"
    assert rtax("run", str(prof), "--headless", "-o", str(out)).returncode == 0
    md = rtax("report", str(out), "--format", "markdown").stdout
    assert "## Replay fidelity" in md
    # under the 80% threshold: marked in the fidelity table and in the cells table
    row = "| local/stage/two/exec | 1 | 1 | 50% (not representative) | 1/2 | 2 | 0 | 0 |"
    assert row + " attrs assets | /repo (yes) |" in md
    assert "| local/stage/two/exec (fidelity 50%: not representative) | 1 | 0 | 0 |" in md
    table = rtax("report", str(out)).stdout
    assert "replay fidelity" in table and "50%" in table
    # a threshold of 50% makes it representative; bad values are one line
    md = rtax("report", str(out), "--format", "markdown", "--fidelity-min", "50").stdout
    assert "| 50% | 1/2 |" in md and "not representative" not in md
    bad = rtax("report", str(out), "--fidelity-min", "120")
    assert bad.returncode == 2 and "--fidelity-min" in bad.stderr


# -- local is refused unless allowed; bad keys -----------------------------------------


def test_local_refused_without_allow_unisolated(tmp_path: Path) -> None:
    body = f'[workloads.claude]\ntrajectory = "{REAL["claude-code"][0]}"\n'
    prof = profile(tmp_path, body, 'drivers = ["stage", "local"]\nworkloads = ["claude"]')
    out = tmp_path / "r.jsonl"
    res = rtax("run", str(prof), "--headless", "-o", str(out))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1, res.stderr
    assert "replay refuses the `local` driver" in res.stderr
    assert "allow_unisolated = true" in res.stderr
    assert not out.exists()
    # the same profile on stage alone runs; `--driver local` from the command line is refused
    assert rtax("run", str(prof), "--driver", "local", "-o", str(out)).returncode == 2


@pytest.mark.parametrize(
    ("lines", "line", "field", "says"),
    [
        (['trajectory = "t.json"', "steps = []"], 3, "steps", "unknown key in a replay"),
        (['trajectory = "t.json"', 'allow_unisolated = "yes"'], 3, "allow_unisolated", "true"),
        (['trajectory = "t.json"', "repo = 3"], 3, "repo", "expected a string"),
        (['trajectory = "nothing.json"'], 2, "trajectory", "no such file"),
        (['trajectory = "bad.jsonl"'], 2, "trajectory", "bad.jsonl:2: not JSON"),
        (['trajectory = "t.json"', 'repo = "t.json"'], 3, "repo", "neither a git directory"),
        (['trajectory = "t.json"', 'repo = "g"', 'commit = "abc123"'], 4, "commit", "not in"),
        (['trajectory = "t.json"', 'commit = "abc123"'], 3, "commit", "needs `repo`"),
        (['repo = "g"', "steps = []"], 2, "repo", "a replay: trajectory"),
        (['trajectory = "t.json"', 'project = "astropy"'], 3, "project", "NAME==VERSION"),
        (['trajectory = "t.json"', 'project = "a>=1"'], 3, "project", "a pinned release"),
        (['trajectory = "t.json"', 'project = "a==1"', 'repo = "g"'], 3, "project", "not both"),
        (['trajectory = "t.json"', 'index = "https://x/simple"'], 3, "index", "needs `project`"),
        (['trajectory = "t.json"', 'project = "a==1"', 'index = "/x"'], 4, "index", "http(s)"),
        (['trajectory = "t.json"', 'at_root = "yes"'], 3, "at_root", "true or false"),
    ],
)
def test_bad_replay_keys_one_line(
    tmp_path: Path, lines: list[str], line: int, field: str, says: str
) -> None:
    mini_v1(tmp_path / "t.json", [("true", 0)])  # synthetic
    (tmp_path / "bad.jsonl").write_text('{"type": "user", "message": {}}\n{torn\n')
    subprocess.run(["git", "init", "-q", str(tmp_path / "g")], check=True)
    prof = tmp_path / "p.toml"
    prof.write_text("[workloads.w]\n" + "\n".join(lines) + '\n[run]\nworkloads = ["w"]\n')
    res = rtax("run", str(prof), "--headless", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"rtax: error: {prof}:{line}: workloads.w.{field}: "), res.stderr
    assert says in res.stderr


# -- the workspace from a repository; a directory of trajectories ----------------------


def _git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout.strip()


def test_repo_at_a_commit_and_a_directory_of_trajectories(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "version.txt").write_text("v1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "version.txt").write_text("v2\n")
    _git(repo, "commit", "-q", "-am", "two")
    trajs = tmp_path / "trajs"
    trajs.mkdir()  # synthetic: each expects v1 (rc 0 only at the first commit)
    mini_v1(trajs / "a.json", [("grep -q v1 version.txt", 0)])
    mini_v1(trajs / "b.json", [("grep -q v1 version.txt", 0), ("git log --oneline", 0)])
    with tarfile.open(tmp_path / "proj.tar.gz", "w:gz") as tf:
        tf.add(repo, arcname="proj")  # .git included: `commit` works on a tarball too
    body = (
        f'[workloads.git]\ntrajectory = "trajs"\nrepo = "proj"\ncommit = "{first}"\n'
        '[workloads.tar]\ntrajectory = "trajs/a.json"\nrepo = "proj.tar.gz"\n'
        f'[workloads.tarc]\ntrajectory = "trajs/a.json"\nrepo = "proj.tar.gz"\ncommit = "{first}"\n'
    )
    prof = profile(tmp_path, body, 'drivers = ["stage"]\nworkloads = ["git", "tar", "tarc"]')
    rep, events = run_profile(tmp_path, prof, "--trials", "2")
    cells = {c["workload"]: c for c in rep["cells"]}
    assert cells["git"]["replay"]["fidelity"] == 1.0  # v1: checked out at the first commit
    assert cells["git"]["replay"]["trajectories"] == 2  # the two files in turn
    played = [e["replay"]["trajectory"] for e in events if e.get("workload") == "git"]
    assert sorted(Path(p).name for p in played) == ["a.json", "b.json"]
    assert cells["tar"]["replay"]["fidelity"] == 0.0  # the tarball's tree as it is: v2
    assert cells["tarc"]["replay"]["fidelity"] == 1.0


# -- docker -------------------------------------------------------------------------------


@pytest.mark.usefixtures("docker_engine")
def test_replay_on_docker(tmp_path: Path) -> None:
    traj = mini_v1(tmp_path / "t.json", [("sleep 30", 0), ("python3 -c 'print(1)'", 0)])
    mini, gemini = REAL["mini-swe-agent"][0], REAL["gemini-cli"][0]
    body = (
        f'[workloads.mini]\ntrajectory = "{mini}"\n[workloads.hang]\ntrajectory = "{traj}"\n'
        f'[workloads.gemini]\ntrajectory = "{gemini}"\n'
    )
    run = 'drivers = ["docker"]\nworkloads = ["mini", "hang", "gemini"]'
    rep, events = run_profile(tmp_path, profile(tmp_path, body, run, 2), "--channel", "exec,shell")
    cells = {(c["workload"], c["channel"]): c for c in rep["cells"]}
    assert len(cells) == 6
    for key, c in cells.items():
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), (key, c["errors"])
    actions = by_cell(events)
    for ch in ("exec", "shell"):
        # Gemini's write, read, then replacement in what it wrote: in the container
        assert [a["rc"] for a in actions[cells[("gemini", ch)]["cell"]]][-3:] == [0, 0, 0]
        assert cells[("mini", ch)]["replay"]["steps_run"] == 64
        assert cells[("mini", ch)]["replay"]["with_rc"] == 63
        hang = cells[("hang", ch)]["replay"]
        # killed at 2 s inside the container; python3 (the Debian image) then ran
        assert (hang["timed_out"], hang["matched"], hang["with_rc"]) == (1, 1, 2), ch


@pytest.mark.usefixtures("vm_guest")
def test_replay_on_a_microvm_kills_at_the_guest_timeout(tmp_path: Path) -> None:
    """In a VM the agent runs the kill by the guest's clock (under TCG it runs apart from
    ours): a hanging step is still recorded as timed out, and the next one runs."""
    from tests.vmtools import ensure_guest, nothing_left

    ensure_guest(root=True)
    traj = mini_v1(tmp_path / "t.json", [("sleep 30", 0), ("python3 -c 'print(1)'", 0)])
    body = f'[workloads.hang]\ntrajectory = "{traj}"\n'
    body += '[drivers_options.microvm]\naccel = "tcg"\n'
    run = 'drivers = ["microvm"]\nworkloads = ["hang"]\n[timeouts]\nready = 120'
    prof = tmp_path / "replay.toml"
    prof.write_text(f"[run]\ntrials = 1\nwarmup = 0\n{run}\naction = 3\n{body}")
    rep, events = run_profile(tmp_path, prof, "--channel", "shell")
    (c,) = rep["cells"]
    assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), c["errors"]
    r = c["replay"]
    assert (r["timed_out"], r["matched"], r["with_rc"]) == (1, 1, 2)
    assert nothing_left(rep["run"]["run_id"]) == ([], [])


# -- rtax project with S from real trajectories ------------------------------------------


def test_project_steps_from_trajectories(tmp_path: Path) -> None:
    rec = Path(__file__).parents[2] / "recordings" / "examples" / "t0-local-stage.jsonl"
    res = rtax("project", str(rec), "--steps-from", str(DATA), "--format", "json")
    assert res.returncode == 0, res.stderr
    proj = json.loads(res.stdout)
    sf = proj["steps_from"]
    assert sf["trajectories"] == 10  # every file and conversation directory under DATA
    assert sf["max"] == 64 and sf["min"] == 2
    assert proj["steps"] == pytest.approx(sf["mean"])
    for c in proj["cells"]:
        inp = c["inputs"]
        fixed = sum(inp[p]["p50_s"] for p in ("create", "ready", "teardown"))
        assert c["per_trajectory_s"] == pytest.approx(fixed + sf["mean"] * inp["action"]["p50_s"])
        lo, hi = c["ci95"]
        assert lo <= c["worker_hours"] <= hi
    both = rtax("project", str(rec), "--steps", "5", "--steps-from", str(DATA))
    assert both.returncode == 2 and both.stderr.count("\n") == 1
    assert rtax("project", str(rec), "--steps-from", str(tmp_path / "none")).returncode == 2


# -- the pieces ----------------------------------------------------------------------------


def test_paths_map_into_the_workspace_or_are_left_out() -> None:
    assert map_path("/repo/src/a.py", "/repo") == "src/a.py"
    assert map_path("/repo", "/repo") == "."
    assert map_path("/repository/x", "/repo") is None  # a sibling, not under the root
    assert map_path("/etc/passwd", "/repo") is None
    assert map_path("../../etc/passwd", "/repo") is None  # never out of the workspace
    assert map_path("a/../b.txt", None) == "b.txt"
    assert map_path("/abs", None) is None


def test_roots_come_from_cwd_else_the_files() -> None:
    from rtax_tui.engine.traj import read_trajectories
    from rtax_tui.engine.traj.replay import replay_plan

    plans = {f: replay_plan(read_trajectories(p)[0]) for f, (p, _) in REAL.items()}
    assert trajectory_root(plans["claude-code"]) == "/Users/user/repo"
    assert trajectory_root(plans["mini-swe-agent"]) == "/testbed"
    gemini = "/Users/Jane_Smith/Documents/projects/epm-cdme/assistants"
    assert trajectory_root(plans["gemini-cli"]) == gemini


def test_shell_steps_start_in_the_recorded_subdirectory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for cwd, where in (("sub", "sub"), (None, tmp_path.name), ("missing", tmp_path.name)):
        argv = shell_argv('basename "$PWD"; exit 4', "sh", cwd, 5)
        res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
        assert (res.stdout.strip(), res.returncode) == (where, 4)


def test_write_argv_is_exact_for_large_and_awkward_text(tmp_path: Path) -> None:
    text = "".join(f"line {i} 'q' \"d\" $HOME `x` \\ é\n" for i in range(8000)) + "no newline"
    argv = write_argv("deep/dir/f.txt", text)
    assert len(argv) > 6  # in several pieces
    subprocess.run(argv, cwd=tmp_path, check=True)
    assert (tmp_path / "deep" / "dir" / "f.txt").read_text() == text


def test_replayed_edit_of_a_file_past_the_output_limit_fails_unwritten(monkeypatch) -> None:
    """Issue 19: an edit reads the file through the channel, which keeps only the first
    OUTPUT_LIMIT bytes of it: writing those back would cut the file, so the edit fails
    and the file stays as it was (the local driver, for real)."""
    import asyncio
    import os

    from rtax_tui.drivers import get_driver

    from rtax_tui.engine.traj.workload import ReplayStep
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model import spec as model
    from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload

    monkeypatch.setattr(model, "OUTPUT_LIMIT", 1024)

    async def go() -> None:
        spec = EnvSpec(
            cell=Cell("local", "local", "t", "exec"),
            workload=Workload("t", ()),
            limits=Limits(),
            label=f"rp{os.getpid()}",
        )
        env = get_driver("local", LocalHost()).environment(spec)
        try:
            await env.create()
            await env.ready()
            for name, size in (("small", 1000), ("big", 4096)):
                await env.action(
                    Step(("sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a >{name}")), 30
                )
                edit = ReplayStep(("edit",), op="replace", path=name, old="a", new="b")
                res = await edit.perform(env, 30)
                got = await env.action(
                    Step(("sh", "-c", f"tr -d a <{name} | wc -c; wc -c <{name}")), 30
                )
                if name == "small":  # under the limit: edited
                    assert res.rc == 0 and got.output.split() == [b"1", b"1000"], (res, got)
                else:  # past it: refused, the file whole and unedited
                    assert res.rc == 1 and b"larger than" in res.output, res
                    assert got.output.split() == [b"0", b"4096"], got
        finally:
            await env.teardown()

    asyncio.run(go())
