"""Replays where the agent was (issue 25, item 1): the workspace shown at the agent's
recorded root (`/testbed`) on stage and docker, a root that names the environment's own
system refused, and the project from a package index at its version (a real HTTP
server on loopback in front of files made here: the index's double; the sdist is made
one git commit). Trajectories written here are synthetic (mini-swe-agent-1 messages)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine.traj.sdist import ProjectError, fetch_sdist, parse_project
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import workspace_alias_problem
from rtax_tui.render.plots import load_cells
from rtax_tui.ui.livestate import LiveState
from tests.engine.test_replay import _git, by_cell, mini_v1, profile, rtax, run_profile


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/testbed", True),
        ("/Users/user/repo", True),
        ("/home/u/project", True),
        ("/opt/work/x", True),
        ("/SWE-agent__test-repo", True),
        ("/", False),
        ("testbed", False),
        ("/usr/bin", False),
        ("/etc/cron.d", False),
        ("/workspace", False),
        ("/tmp/x", False),
        ("/proc/self", False),
        ("/home", False),
        ("/root", False),
        ("/a/../usr", False),
        ("/a//b", False),
        ("/a/./b", False),
        ("/a b", False),
        ("/a\nb", False),
        ("/$(reboot)", False),
        ("/" + "x" * 300, False),
        ("/.rtax-init", False),
        ("/.rtax-next/x", False),
        ("/.rtx", True),
    ],
)
def test_which_roots_an_environment_may_show(path: str, ok: bool) -> None:
    assert (workspace_alias_problem(path) is None) is ok, workspace_alias_problem(path)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "setup.py").write_text("print('proj')\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


# what the agent saw at /testbed: each recorded exit code is the one a workspace shown
# there gives; without it, `cd /testbed` fails and the steps that need it do too
AT_TESTBED = [
    ("cd /testbed && test -f setup.py", 0),
    ("cd /testbed && git status --short && git diff --quiet", 0),
    ("cd /testbed && echo x > made.txt && test -f /workspace/made.txt", 0),
    ("test -d /testbed/.git", 0),
    ("cd /testbed && test -f no-such-file", 1),
]


def _at_root_run(tmp_path: Path, drivers: str, channel: str) -> dict[str, Any]:
    traj = mini_v1(tmp_path / "t.json", AT_TESTBED, cwd="/testbed")
    _repo(tmp_path)
    body = (
        f'[workloads.at]\ntrajectory = "{traj}"\nrepo = "proj"\n'
        f'[workloads.apart]\ntrajectory = "{traj}"\nrepo = "proj"\nat_root = false\n'
    )
    prof = profile(tmp_path, body, f'drivers = [{drivers}]\nworkloads = ["at", "apart"]')
    rep, events = run_profile(tmp_path, prof, "--channel", channel)
    return {"rep": rep, "events": events}


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_the_workspace_is_at_the_agents_root_on_stage(tmp_path: Path, channel: str) -> None:
    got = _at_root_run(tmp_path, '"stage"', channel)
    cells = {c["workload"]: c for c in got["rep"]["cells"]}
    at, apart = cells["at"]["replay"], cells["apart"]["replay"]
    assert (at["fidelity"], at["root"], at["at_root"]) == (1.0, "/testbed", True), by_cell(
        got["events"]
    )
    assert at["workspace"] == "proj" and at["representative"] is True
    # the same steps with the workspace only at /workspace: every `cd /testbed` fails
    # (sh's status 2, even where the agent's command failed with 1)
    assert (apart["matched"], apart["with_rc"], apart["at_root"]) == (0, 5, False)
    assert apart["representative"] is False
    starts = [e for e in got["events"] if e["type"] == "trial_start"]
    assert {e["replay"]["at_root"] for e in starts if e["workload"] == "at"} == {True}
    # the console's live fold says the same fidelity as the report, per cell
    rec = read_recording(tmp_path / "r.jsonl")
    live = LiveState()
    for ev in (rec.header, *rec.events):
        live.ingest(ev)
    for c in got["rep"]["cells"]:
        cs = live.cells[c["cell"]]
        assert (cs.same_rc, cs.with_rc) == (c["replay"]["matched"], c["replay"]["with_rc"])
        assert cs.fidelity() == c["replay"]["fidelity"]
    # the plots name the cell under the threshold so, and only it
    labels = {pc.cell: pc.label for pc in load_cells([rec])}
    assert labels[cells["apart"]["cell"]].endswith("[fidelity 0%: not representative]")
    assert labels[cells["at"]["cell"]] == cells["at"]["cell"]
    # and so does the worker-hour projection
    args = ("project", str(tmp_path / "r.jsonl"), "--trajectories", "1000", "--steps", "10")
    proj = rtax(*args, "--format", "json")
    assert proj.returncode == 0, proj.stderr
    rows = {r["cell"]: r for r in json.loads(proj.stdout)["cells"]}
    assert rows[cells["apart"]["cell"]]["replay"]["representative"] is False
    assert rows[cells["at"]["cell"]]["replay"]["representative"] is True
    assert "not representative" in rtax(*args).stdout


@pytest.mark.usefixtures("docker_engine")
@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_the_workspace_is_at_the_agents_root_on_docker(tmp_path: Path, channel: str) -> None:
    got = _at_root_run(tmp_path, '"docker"', channel)
    cells = {c["workload"]: c for c in got["rep"]["cells"]}
    assert cells["at"]["replay"]["fidelity"] == 1.0, by_cell(got["events"])
    assert cells["at"]["replay"]["at_root"] is True
    assert cells["apart"]["replay"]["matched"] == 0


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_nested_root_in_a_container(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """A root several directories deep (Claude Code's `/Users/user/repo`): the engine
    makes the directories above the link, for a cold trial and a pooled one alike."""
    request.getfixturevalue(f"{engine}_engine")
    steps = [("cd /Users/user/repo && test -f setup.py && pwd", 0), ("test -d /Users/user", 0)]
    traj = mini_v1(tmp_path / "t.json", steps, cwd="/Users/user/repo")
    _repo(tmp_path)
    body = f'[workloads.n]\ntrajectory = "{traj}"\nrepo = "proj"\n'
    run = f'drivers = ["{engine}"]\nworkloads = ["n"]\nmodes = ["cold", "pool"]'
    prof = profile(tmp_path, body + '[pool]\nsize = 1\nreset = "recreate"\n', run)
    rep, events = run_profile(tmp_path, prof, "--trials", "2")
    for c in rep["cells"]:
        assert (c["n"], c["failed"]) == (2, 0), c["errors"]
        r = c["replay"]
        assert (r["fidelity"], r["at_root"]) == (1.0, True), (c["cell"], by_cell(events))


def test_a_root_in_the_environments_system_is_not_shown(tmp_path: Path) -> None:
    """A trajectory whose agent worked in /usr/bin (or /etc): a link there would hide
    the environment's own programs, so the workspace stays at /workspace only, and the
    report says so."""
    traj = mini_v1(tmp_path / "t.json", [("test -L /usr/bin && echo linked", 1)], cwd="/usr/bin")
    body = f'[workloads.sys]\ntrajectory = "{traj}"\n'
    prof = profile(tmp_path, body, 'drivers = ["stage"]\nworkloads = ["sys"]')
    rep, events = run_profile(tmp_path, prof)
    r = rep["cells"][0]["replay"]
    assert (r["root"], r["at_root"], r["matched"]) == ("/usr/bin", False, 1)
    assert rep["cells"][0]["n"] == 1 and rep["cells"][0]["failed"] == 0


# -- the project from a package index ------------------------------------------------------


def _sdist(name: str, version: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for rel, text in (("PKG-INFO", f"Name: {name}\nVersion: {version}\n"), ("m.py", "x=1\n")):
            data = text.encode()
            ti = tarfile.TarInfo(f"{name}-{version}/{rel}")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class Index:
    """A Simple-API index on loopback: PEP 691 JSON, or PEP 503 HTML when `html`."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.sha: dict[str, str] = {}  # what the index says (a lie when set so)
        self.html = False
        self.hits: list[str] = []
        index = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                index.hits.append(self.path)
                if self.path == "/simple/proj/":
                    if index.html:
                        links = "".join(
                            f'<a href="../../files/{f}#sha256={index.sha[f]}">{f}</a><br/>'
                            for f in index.files
                        )
                        body, ctype = f"<html><body>{links}</body></html>".encode(), "text/html"
                    else:
                        doc = {
                            "files": [
                                {"filename": f, "url": f"/files/{f}", "hashes": {"sha256": h}}
                                for f, h in index.sha.items()
                            ]
                        }
                        body, ctype = (
                            json.dumps(doc).encode(),
                            "application/vnd.pypi.simple.v1+json",
                        )
                elif self.path.startswith("/files/") and self.path[7:] in index.files:
                    body, ctype = index.files[self.path[7:]], "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, name: str, version: str) -> None:
        f = f"{name}-{version}.tar.gz"
        self.files[f] = _sdist(name, version)
        self.sha[f] = hashlib.sha256(self.files[f]).hexdigest()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    monkeypatch.setenv("RTAX_CACHE", str(tmp_path / "cache"))
    idx = Index()
    idx.add("proj", "1.0")
    idx.add("proj", "2.0")
    idx.thread.start()
    yield idx
    idx.server.shutdown()
    idx.server.server_close()


@pytest.mark.parametrize("html", [False, True])
def test_an_sdist_is_fetched_once_and_checked(index: Index, html: bool) -> None:
    index.html = html
    path = fetch_sdist("proj==1.0", index.url)
    assert Path(path).name == "proj-1.0.tar.gz"
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == index.sha["proj-1.0.tar.gz"]
    fetched = len([h for h in index.hits if h.startswith("/files/")])
    assert fetch_sdist("proj==1.0", index.url) == path  # from the cache
    assert len([h for h in index.hits if h.startswith("/files/")]) == fetched == 1


def test_an_sdist_that_is_not_what_the_index_says_is_refused(index: Index) -> None:
    index.sha["proj-2.0.tar.gz"] = "0" * 64
    with pytest.raises(ProjectError, match=r"proj-2.0.tar.gz has sha256 [0-9a-f]{64}, the index"):
        fetch_sdist("proj==2.0", index.url)
    with pytest.raises(
        ProjectError, match=r"no source distribution 3.0 .*\(source distributions there: 1.0, 2.0\)"
    ):
        fetch_sdist("proj==3.0", index.url)
    with pytest.raises(ProjectError, match="could not be read"):
        fetch_sdist("proj==1.0", "http://127.0.0.1:9/simple")
    with pytest.raises(ValueError, match="NAME==VERSION"):
        parse_project("proj>=1.0")


def test_a_replay_of_a_project_from_the_index(tmp_path: Path, index: Index) -> None:
    """The workspace is the sdist at the version named, made one git commit (the agent's
    `git diff` works), shown at the agent's root; the recording says where it came from."""
    traj = mini_v1(
        tmp_path / "t.json",
        [
            ("cd /testbed && grep -q 'Version: 1.0' PKG-INFO", 0),
            ("cd /testbed && git diff --quiet && git log --oneline | wc -l | grep -qx 1", 0),
            ("cd /testbed && echo y >> m.py && git diff --quiet", 1),
        ],
        cwd="/testbed",
    )
    body = f'[workloads.p]\ntrajectory = "{traj}"\nproject = "proj==1.0"\nindex = "{index.url}"\n'
    prof = profile(tmp_path, body, 'drivers = ["stage"]\nworkloads = ["p"]')
    rep, events = run_profile(tmp_path, prof)
    r = rep["cells"][0]["replay"]
    assert (r["fidelity"], r["workspace"], r["at_root"]) == (1.0, "proj==1.0 (index)", True), (
        by_cell(events)
    )
    # the index down: a second run reads the cached sdist and tree
    index.server.shutdown()
    index.server.server_close()
    (tmp_path / "r.jsonl").unlink()
    rep2, _ = run_profile(tmp_path, prof)
    assert rep2["cells"][0]["replay"]["fidelity"] == 1.0


def test_no_path_rtax_puts_in_an_environment_can_be_an_alias() -> None:
    """A replay's alias (a trajectory's root, what a model ran) over rtax's own files
    would hide them and fail every environment: a container's init at /.rtax-init was
    not in the list of system directories. The rule is a prefix, so a name rtax adds
    later is covered too; these are the ones each driver uses today."""
    from rtax_tui.drivers.toolkit import container_env, sandbox

    for path in (container_env.INIT_PATH, sandbox.INIT_BIN, sandbox.SHELL_BIN):
        assert workspace_alias_problem(path) is not None, path
