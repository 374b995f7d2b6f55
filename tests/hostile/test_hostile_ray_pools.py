"""Warm pools on Ray nodes, red team (issue 41): a hostile workload in a pooled environment
of a node, and a node whose engine answers with pool events it should not, each against
a whole `Session` over two in-process nodes (tests/engine/test_ray_pools.py's harness).
docs/boundaries.md, "Warm pools on Ray nodes: what was tried", lists what held and what
was fixed."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rtax_tui.engine import raynodes
from rtax_tui.engine.nodeengine import NodeEngine
from rtax_tui.engine.profile import Profile
from rtax_tui.engine.raynodes import NodePools, RayNodeHost, RaySpec
from rtax_tui.model.recording import RecordingWriter, read_recording


def _harness() -> Any:
    """tests/engine/test_ray_pools.py, the in-process nodes' harness (one module)."""
    name = "test_ray_pools"
    if name not in sys.modules:
        path = Path(__file__).parents[1] / "engine" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


H = _harness()
TAG = "rtax-redpool-mark"


def _persist(tmp: Path) -> tuple[str, str]:
    """The workload, with a mark of this test's own (the fast tier runs tests side by
    side: another test's processes are not this one's)."""
    tag = f"{TAG}-{os.getpid()}-{tmp.name}"
    return PERSIST.replace("@TAG@", repr(tag)), tag


# A workload that fails when it finds what an earlier trial of its environment left, and
# leaves all it can: files, a fifo and a chmod-000 tree in the workspace, the home, /tmp,
# /dev/shm and /var/tmp, an xattr on each of those directories, a process in its own
# session (its stdio /dev/null, so the step ends) and a double-forked one, both writing
# the mark again every 50 ms (after the trial, after the reset, if they survive it).
PERSIST = """
import os, subprocess, sys, tempfile
TAG = @TAG@
here = [os.getcwd(), os.path.expanduser("~"), tempfile.gettempdir(), "/dev/shm", "/var/tmp"]
found = []
for d in here:
    for n in (TAG, TAG + ".fifo", TAG + ".locked"):
        if os.path.lexists(os.path.join(d, n)):
            found.append(os.path.join(d, n))
    try:
        if TAG.encode() in os.getxattr(d, "user.rtax"):
            found.append("xattr " + d)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            if TAG.encode() in open("/proc/%s/cmdline" % pid, "rb").read():
                found.append("process " + pid)
        except OSError:
            pass
for d in here:
    try:
        open(os.path.join(d, TAG), "w").write("x")
        os.mkfifo(os.path.join(d, TAG + ".fifo"))
        locked = os.path.join(d, TAG + ".locked")
        os.makedirs(os.path.join(locked, "in"), exist_ok=True)
        open(os.path.join(locked, "in", "f"), "w").write("x")
        os.chmod(os.path.join(locked, "in"), 0)
        os.chmod(locked, 0)
    except OSError:
        pass
    try:
        os.setxattr(d, "user.rtax", TAG.encode())
    except OSError:
        pass
loop = ("import os,sys,time\\n"
        "while True:\\n"
        "  for d in sys.argv[2:]:\\n"
        "    try: open(os.path.join(d, sys.argv[1]), 'w').write('x')\\n"
        "    except OSError: pass\\n"
        "  time.sleep(0.05)\\n")
subprocess.Popen([sys.executable, "-c", loop, TAG, *here], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/dev/null", os.O_RDWR)
        for k in (0, 1, 2):
            os.dup2(fd, k)
        os.execv(sys.executable, [sys.executable, "-c", loop, TAG, *here])
    os._exit(0)
print("found", found)
sys.exit(3 if found else 0)
"""


def _stage_or_skip() -> None:
    from rtax_tui.drivers import get_driver

    from rtax_tui.hosts import LocalHost

    if os.geteuid() != 0:
        pytest.skip("stage needs root and cgroups")
    if asyncio.run(get_driver("stage", LocalHost(), {}).check()):
        pytest.skip("stage cannot run here")


def _marked_processes(tag: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,cmd"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if tag in line]


def _rcs(got: list[dict[str, Any]]) -> dict[int, int]:
    """Each trial's workload exit status (3: it found what an earlier trial left; the
    trial is then not `valid`, its `ok` saying only that rtax ran it)."""
    return {e["trial"]: e["rc"] for e in got if e["type"] == "action"}


def _ends(got: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["trial"]: e for e in got if e["type"] == "trial_end"}


def _by_host(got: list[dict[str, Any]]) -> dict[int, str]:
    return {e["trial"]: e["host"] for e in got if e["type"] == "trial_start"}


# -- the workload: persisting into the next trial across a node's reset ----------------


def test_what_a_workload_leaves_does_not_survive_a_nodes_clean_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: stage's clean reset on a node is the local one (the driver's, made on the
    node): the second and third trial of each node's one environment find nothing of
    the first (files, fifos, chmod-000 trees, xattrs, processes in other sessions, which
    would have written the mark again), and nothing of theirs runs on the host after."""
    _stage_or_skip()
    workload, tag = _persist(tmp_path)
    monkeypatch.setattr(H, "PERSIST", workload)
    got, session, engines = H.pooled_run(tmp_path, "stage", "clean")
    H._check_against_plan(got, session, "clean")
    assert set(_rcs(got).values()) == {0}, _rcs(got)  # no trial found anything
    H._no_environment_left(engines)
    assert _marked_processes(tag) == []


def test_the_persisting_workload_is_caught_by_a_reset_that_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with a reset that keeps the sandbox as it is, the next trial finds
    what the first left (so the held test above proves something), and the processes it
    left still go with the environment's teardown. (The old reset that cleans in place,
    tests/hostile/test_hostile_resets.py's double, removes all this workload leaves:
    its fingerprint, not a workload, is what catches that one.)"""
    _stage_or_skip()
    from rtax_tui.drivers.stage import StageEnvironment

    async def keep(self: StageEnvironment) -> None:
        return None

    monkeypatch.setattr(StageEnvironment, "reset_clean", keep)
    workload, tag = _persist(tmp_path)
    monkeypatch.setattr(H, "PERSIST", workload)
    got, _, engines = H.pooled_run(tmp_path, "stage", "clean")
    rcs = _rcs(got)
    assert sorted(rcs.values()) == [0, 0, 3, 3, 3, 3], rcs  # each node's later trials found
    H._no_environment_left(engines)
    assert _marked_processes(tag) == []


# -- the node: pool events it should not send ------------------------------------------


def _odd(value: str) -> Any:
    return {"set": {1, 2}, "tuple key": None, "int past 64 bits": 2**70}[value]


@pytest.mark.parametrize("method", ["pool_news", "run_trial"])
@pytest.mark.parametrize("odd", ["set", "tuple key", "int past 64 bits"])
def test_an_event_the_recording_cannot_hold_fails_its_trial_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, odd: str
) -> None:
    """Fixed: a node's answer is unpickled, so a field the schema does not name may be a
    set, a tuple key, an int past 64 bits. Before, the recording's writer raised on it in
    the controller: the trial's task died unseen, the trial had no end in the recording,
    and the run said `completed` with 3 trials of 6. Now the answer is refused: its
    trial fails saying why, every other trial is recorded, the recording reads back."""
    import rtax_tui.engine.session as sm

    rec = tmp_path / "rec.jsonl"
    init = sm.Session.__init__

    def with_recording(self: Any, profile: Any, sinks: Any, **kw: Any) -> None:
        init(self, profile, sinks=[*sinks, RecordingWriter.open(rec).write], **kw)

    monkeypatch.setattr(sm.Session, "__init__", with_recording)

    def tamper(node: str, m: str, sent: Any) -> Any:
        got = sent[1]  # (the call's arguments, the node's answer)
        if node != "ray-1" or m != method or not got:
            return got
        ev = dict(got[-1] if method == "pool_news" else got[0])
        if odd == "tuple key":
            ev[(1, 2)] = 1
        else:
            ev["x"] = _odd(odd)
        return [*got[:-1], ev] if method == "pool_news" else [ev, *got[1:]]

    got, session, _ = H.pooled_run(tmp_path, "local", "recreate", tamper=tamper)
    ends, by_host = _ends(got), _by_host(got)
    assert len(ends) == 6 and sorted(ends) == sorted(by_host)
    assert all(ends[t]["ok"] for t, h in by_host.items() if h == "ray-0")
    bad = [ends[t] for t, h in by_host.items() if h == "ray-1"]
    assert bad and not any(e["ok"] for e in bad)
    assert any("not a JSON object" in e["error"]["message"] for e in bad), bad
    assert session.status == "completed"
    recorded = read_recording(rec).events
    assert recorded[-1]["type"] == "run_end" and recorded[-1]["trials"] == 6
    assert sum(e["type"] == "trial_end" for e in recorded) == 6


def _extra(kind: str) -> Any:
    """ray-1's pool answer with one more event of its own making."""

    def tamper(node: str, method: str, sent: Any) -> Any:
        got = sent[1]  # (the call's arguments, the node's answer)
        if node != "ray-1" or method != "pool_news" or not got:
            return got
        last = got[-1]
        more = {
            "duplicate": dict(last),
            "another node's cell": dict(last, cell=last["cell"].replace("ray-1", "ray-0")),
            "another node's host": dict(last, host="ray-0"),
            "teardown then reset": dict(last, op="teardown"),
        }[kind]
        out = [*got, more]
        if kind == "teardown then reset":
            out.append(dict(last, op="reset", ok=True))
        return out

    return tamper


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("duplicate", "twice"),
        ("another node's cell", "no pooled cell of this node"),
        ("another node's host", "not ray-1"),
        ("teardown then reset", "after its teardown"),
    ],
)
def test_a_node_pool_event_out_of_place_is_not_recorded(
    tmp_path: Path, kind: str, says: str
) -> None:
    """Held: a duplicate event, one of another node's cell or host, a reset after its
    environment's teardown: none of the answer is recorded, the trial fails saying why,
    the node is lost, the other node's trials and pool go on."""
    got, _, _ = H.pooled_run(tmp_path, "local", "clean", tamper=_extra(kind))
    ends, by_host = _ends(got), _by_host(got)
    assert all(ends[t]["ok"] for t, h in by_host.items() if h == "ray-0")
    bad = [ends[t] for t, h in by_host.items() if h == "ray-1"]
    assert bad and not any(e["ok"] for e in bad)
    assert any(says in e["error"]["message"] for e in bad), (says, bad)
    pools1 = [e for e in got if e["type"] == "pool" and e["host"] == "ray-1"]
    envs = [(e["cell"], e["env"], e["op"]) for e in pools1 if e["ok"]]
    assert len(envs) == len(set(envs))  # nothing doubled got in
    assert next(e for e in got if e["type"] == "run_end")["status"] == "completed"


def test_a_node_pool_event_begun_before_the_pools_or_idle_longer_is_refused() -> None:
    """Fixed: `t_ns` is an event's end, so a create of 10 s ending 1 ms after the pools
    were asked for began before them (its work, and the report's pool seconds, forged);
    and an `idle_ns` longer than the pools have been. Both were taken before."""
    host = RayNodeHost("ray-1", "id1", RaySpec("ray", "auto"), Profile("p", "p.toml"))
    base = dict(type="pool", host="ray-1", cell="c", env=1, op="create", ok=True,
                cpu_ns=1, env_cpu_ns=None, error=None)  # fmt: skip
    lo, hi = 10**9, 20 * 10**9
    early = NodePools(host, {"c": "clean"}, lo)
    why = early.take([dict(base, t_ns=lo + 10**6, dur_ns=10 * 10**9)], hi_ns=hi, err_ns=0)
    assert "before the pools were asked for" in (why or "")
    idle = NodePools(host, {"c": "clean"}, lo)
    idle.sent("c")
    ok = dict(base, t_ns=lo + 10**6, dur_ns=10**5)
    td = dict(base, op="teardown", t_ns=lo + 2 * 10**6, dur_ns=10**5, idle_ns=10**15)
    assert "idle_ns" in (idle.take([ok, td], hi_ns=hi, err_ns=0) or "")
    fine = NodePools(host, {"c": "clean"}, lo)
    assert fine.take([ok, dict(td, idle_ns=10**6)], hi_ns=hi, err_ns=0) is None


def test_a_node_whose_close_answer_leaves_environments_out_has_them_recorded_so(
    tmp_path: Path,
) -> None:
    """Fixed: ray-1 answers `close_pools` without its teardowns (as a node killed at the
    end, or one that hides what it left running). Before, its environments stayed made
    in the recording, without a word, the run `completed`. Now each one the node never
    said torn down gets a failed teardown from the controller, with why (its reaper's);
    ray-0's are its own."""

    def drop(node: str, method: str, sent: Any) -> Any:
        got = sent[1]  # (the call's arguments, the node's answer)
        return [] if node == "ray-1" and method == "close_pools" else got

    got, session, _ = H.pooled_run(tmp_path, "local", "clean", tamper=drop)
    assert next(e for e in got if e["type"] == "run_end")["status"] == "completed"
    pools = [e for e in got if e["type"] == "pool"]
    for h in ("ray-0", "ray-1"):
        made = {e["env"] for e in pools if e["host"] == h and e["op"] == "create"}
        gone = {e["env"] for e in pools if e["host"] == h and e["op"] == "teardown"}
        assert made and made == gone, (h, made, gone)
    left = [e for e in pools if e["host"] == "ray-1" and e["op"] == "teardown" and not e["ok"]]
    assert left and all("not torn down by node ray-1" in e["error"] for e in left)
    assert all(e["ok"] for e in pools if e["host"] == "ray-0" and e["op"] == "teardown")


def test_a_node_that_never_answers_close_pools_does_not_hang_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held (and recorded, since the fix above): ray-1's engine hangs in `close_pools`
    (its pools never closed, as a node killed at the end): the controller waits its
    margin and the teardown timeout, then records ray-1's environments not torn down
    (its reaper's), the run's end, and ray-0's pool torn down."""
    monkeypatch.setattr(raynodes, "NODE_MARGIN_S", 0.5)
    close = NodeEngine.close_pools
    hung: list[str] = []

    async def hang(self: NodeEngine) -> list[dict[str, Any]]:
        if self.name == "ray-1" and not hung:
            hung.append(self.name)
            await asyncio.sleep(3600)
        return await close(self)

    monkeypatch.setattr(NodeEngine, "close_pools", hang)
    monkeypatch.setattr(H, "_profile", _short_teardown(H._profile))
    got, session, engines = H.pooled_run(tmp_path, "local", "clean")
    assert next(e for e in got if e["type"] == "run_end")["status"] == "completed"
    pools = [e for e in got if e["type"] == "pool" and e["host"] == "ray-1"]
    left = [e for e in pools if e["op"] == "teardown" and not e["ok"]]
    assert left and all("its pools hang" in e["error"] for e in left)
    made = {e["env"] for e in pools if e["op"] == "create"}
    assert made == {e["env"] for e in pools if e["op"] == "teardown"}
    assert session.nodes is not None and session.nodes.nodes["ray-1"].dead == "its pools hang"


def _short_teardown(make: Any) -> Any:
    def short(tmp: Path, driver: str, reset: str, trials: int) -> Any:
        p = make(tmp, driver, reset, trials)
        return dataclasses.replace(p, timeouts=dataclasses.replace(p.timeouts, teardown=1.0))

    return short
