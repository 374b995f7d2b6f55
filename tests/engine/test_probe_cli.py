"""`rtax probe` through the command line: bad input, a real probe of the open `local`
driver (which must come back breached: the proof that the probe can fail), its
recording read back by `rtax report`, and the boundary a later `rtax run` records."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from leftovers import processes

from rtax_tui.engine.probe.run import REMOUNT_DIRS
from rtax_tui.model.checks import ALL_CHECKS, BREACHED, HELD, PROBE_FORMAT
from rtax_tui.model.recording import read_recording

# What an environment with no boundary cannot keep out on this kind of machine (module
# loading and vsock are left out: a kernel without modules makes the first n/a even for
# the host itself, one without vsock blocks the second;
# block devices too: some machines refuse root reading them).
LOCAL_BREACHES = {
    "tmp_sentinel", "cache_sentinel", "etc_shadow", "root_home", "probe_socket",
    "remount_rw", "proc_sys", "sys_write", "cgroup_escape", "pids_limit", "memory_limit",
    "loopback_tcp", "host_processes", "host_signal", "other_env", "fresh_env",
    "usr_local", "host_paths", "proc_cmdline", "process_vm", "init_kill", "default_limits",
}  # fmt: skip
ROOT = os.geteuid() == 0


def rtax(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--driver", "nope"], "--driver"),
        (["--driver", ","], "--driver"),
        (["--driver", "local", "--channel", "pipe"], "--channel"),
        (["--driver", "local", "--format", "xml"], "--format"),
        (["--driver", "local", "--host", "ftp://x"], "--host"),
        (["--driver", "local", "--profile", "/nonexistent.toml"], "--profile"),
        (["--driver", "local", "--format"], "--format"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], field: str, tmp_path) -> None:
    res = rtax("probe", *args, env={"RTAX_CACHE": str(tmp_path)})
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and field in lines[0], res.stderr
    assert res.stdout == ""


def test_an_existing_output_file_is_never_overwritten(tmp_path) -> None:
    out = tmp_path / "p.jsonl"
    out.write_text("keep me\n")
    res = rtax("probe", "--driver", "local", "-o", str(out), env={"RTAX_CACHE": str(tmp_path)})
    assert res.returncode == 2 and "already exists" in res.stderr
    assert out.read_text() == "keep me\n"


def test_help_lists_every_check_and_the_exit_status() -> None:
    res = rtax("probe", "--help")
    assert res.returncode == 0
    for name in ALL_CHECKS:
        assert name in res.stdout
    assert "exit status" in res.stdout and "--channel" in res.stdout


def _ours_left() -> list[str]:
    """What a probe could leave on this host: planted files, markers, its listener, loops."""
    import tempfile

    tmp = tempfile.gettempdir()
    found = glob.glob(f"{tmp}/rtax-probe-*") + glob.glob("/root/.rtax-probe-*")
    found += glob.glob("/usr/local/.rtax-probe-*")
    found += glob.glob(f"{tmp}/.rtax-probe-*") + glob.glob("/tmp/.rtax-probe-*")
    for d in REMOUNT_DIRS:
        found += glob.glob(f"{d}/.rtax-probe-rw-*")
    res = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    found += [line for line in res.stdout.splitlines() if "rtax-probe-blk-" in line]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"rtax probe: the host's listener" in f.read():
                        found.append(f"listener pid {pid}")
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def local_probe(tmp_path_factory):
    """One real probe of `local` on both channels, recorded; its own cache directory."""
    d = tmp_path_factory.mktemp("probe")
    out = d / "probe.jsonl"
    res = rtax(
        "probe", "--driver", "local", "--format", "json", "-o", str(out),
        env={"RTAX_CACHE": str(d / "cache")},
    )  # fmt: skip
    return d, out, res


@pytest.mark.skipif(not ROOT, reason="the probe's host sentinels (/root, loop devices) need root")
def test_the_open_local_driver_comes_back_breached(local_probe) -> None:
    """The probe can fail: `local` keeps nothing out, and every check it cannot pass is
    measured as breached, on both channels, while its one promise holds."""
    d, out, res = local_probe
    assert res.returncode == 0, res.stderr  # a breach is a measurement, not an error
    doc = json.loads(res.stdout)
    assert doc["format"] == PROBE_FORMAT
    checks = doc["drivers"]["local"]["checks"]
    assert set(checks) == ALL_CHECKS
    for name in LOCAL_BREACHES:
        assert checks[name]["result"] == BREACHED, (name, checks[name]["evidence"])
        assert {r["channel"] for r in checks[name]["runs"]} == {"exec", "shell"}
        assert all(r["result"] == BREACHED for r in checks[name]["runs"]), name
        assert checks[name]["evidence"]
    assert checks["workspace_persists"]["result"] == HELD
    summary = doc["drivers"]["local"]["summary"]
    assert summary["promised"] == 4 and summary["broken_promises"] == []
    assert _ours_left() == []


@pytest.mark.skipif(not ROOT, reason="the probe's host sentinels (/root, loop devices) need root")
def test_the_probe_recording_reads_back_in_report(local_probe) -> None:
    d, out, res = local_probe
    doc = json.loads(res.stdout)
    rec = read_recording(out)
    probes = [e for e in rec.events if e["type"] == "probe"]
    assert len(probes) == 2 * len(ALL_CHECKS)
    assert rec.end is not None and rec.end["status"] == "completed"
    assert all(isinstance(e["t_ns"], int) for e in probes)
    rep = json.loads(rtax("report", str(out), "--format", "json").stdout)
    got = {k: c["result"] for k, c in rep["probe"]["drivers"]["local"]["checks"].items()}
    want = {k: c["result"] for k, c in doc["drivers"]["local"]["checks"].items()}
    assert got == want
    table = rtax("report", str(out)).stdout
    assert "rtax probe" in table and "tmp_sentinel" in table and "breached" in table
    assert "local/tmp_sentinel: [local/exec] read the host's" in table  # evidence, unmangled
    md = rtax("report", str(out), "--format", "markdown").stdout
    assert "## Boundary checks" in md and "| `tmp_sentinel` | breached |" in md


@pytest.mark.skipif(not ROOT, reason="the probe's host sentinels (/root, loop devices) need root")
def test_a_run_records_the_last_probe_beside_its_costs(local_probe, tmp_path) -> None:
    d, _, res = local_probe
    cache = d / "cache"
    state = json.loads((cache / "probe" / "last.json").read_text())
    assert state["entries"]["local/local"]["checks"]["tmp_sentinel"] == BREACHED
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local", "stage"]\nworkloads = ["w"]\n'
        '[workloads.w]\nsteps = [{argv = ["true"]}]\n'
    )
    rec_path = tmp_path / "r.jsonl"
    run = rtax(
        "run", str(prof), "--headless", "-o", str(rec_path), "--quiet",
        env={"RTAX_CACHE": str(cache)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    drivers = read_recording(rec_path).header["hosts"]["local"]["drivers"]
    local_b = drivers["local"]["boundary"]
    assert local_b["checks"]["tmp_sentinel"] == BREACHED and local_b["probed_at"]
    assert local_b["summary"]["breached"] >= len(LOCAL_BREACHES)
    assert drivers["stage"]["boundary"] == {"status": "not probed"}
    rep = rtax("report", str(rec_path)).stdout
    assert "boundaries" in rep and "local/local: probed" in rep
    assert "local/stage: not probed" in rep
    jrep = json.loads(rtax("report", str(rec_path), "--format", "json").stdout)
    assert set(jrep["run"]["boundaries"]) == {"local/local", "local/stage"}


def test_old_recordings_keep_their_report_shape() -> None:
    ex = Path(__file__).resolve().parents[2] / "recordings" / "examples" / "t0-local-stage.jsonl"
    rep = json.loads(rtax("report", str(ex), "--format", "json").stdout)
    assert "boundaries" not in rep["run"] and "probe" not in rep


def test_the_reaper_removes_planted_files_and_directories(tmp_path) -> None:
    from rtax_tui.hosts.reaper import _reap

    f = tmp_path / ".rtax-probe-x"
    f.write_text("x")
    dd = tmp_path / "rtax-probe-d"
    dd.mkdir()
    (dd / "sentinel").write_text("y")
    _reap(set(), set(), {str(f), str(dd), str(tmp_path / "gone")})
    assert not f.exists() and not dd.exists()


def test_a_driver_that_cannot_be_checked_is_na_on_every_check(monkeypatch) -> None:
    """A driver whose own check raises, or lacks a channel: the matrix gets `n/a` rows
    that say why, and the other drivers are still probed."""
    import asyncio

    import rtax_tui.drivers as drivers_mod
    from rtax_tui.drivers.local import LocalDriver

    from rtax_tui.engine.probe.run import run_probe
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.checks import NA

    class Broken(LocalDriver):
        name = "broken"

        async def check(self):
            raise ConnectionResetError("the KVM probe's socket went away")

    class ExecOnly(LocalDriver):
        name = "execonly"
        channels = ("exec",)

    real = drivers_mod.get_driver
    fakes = {"broken": Broken, "execonly": ExecOnly}
    monkeypatch.setattr(
        drivers_mod,
        "get_driver",
        lambda n, h, o=None: fakes[n](h, o or {}) if n in fakes else real(n, h, o),
    )
    events: list[dict] = []
    asyncio.run(run_probe({"local": LocalHost()}, ["broken", "execonly"], ["shell"], events.append))
    by = {(e["driver"], e["check"]): e for e in events}
    assert len(events) == 2 * len(ALL_CHECKS)
    for name in ALL_CHECKS:
        assert by[("broken", name)]["result"] == NA
        assert "its check failed: ConnectionResetError" in by[("broken", name)]["evidence"]
        assert by[("execonly", name)]["result"] == NA
        assert "no shell channel" in by[("execonly", name)]["evidence"]
    assert _ours_left() == []


EXAMPLE = Path(__file__).resolve().parents[2] / "recordings" / "examples" / "probe"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "boundaries.md"


def test_the_example_probe_recording_reports_every_driver() -> None:
    """recordings/examples/probe/all-drivers.jsonl: the matrix measured on this machine,
    every check of the catalogue on every driver and both channels."""
    rep = json.loads(rtax("report", str(EXAMPLE / "all-drivers.jsonl"), "--format", "json").stdout)
    drivers = rep["probe"]["drivers"]
    assert list(drivers) == ["local", "stage", "docker", "podman", "libvirt", "microvm", "swerex"]
    for d in drivers.values():
        assert set(d["checks"]) == ALL_CHECKS
        assert d["summary"]["broken_promises"] == []  # docs/boundaries.md says so
        for c in d["checks"].values():
            assert {r["channel"] for r in c["runs"]} == {"exec", "shell"}
    assert rep["cells"] == []
    md = rtax("report", str(EXAMPLE / "all-drivers.jsonl"), "--format", "markdown").stdout
    assert "## Cells" not in md and "| check | local | stage | docker" in md


def test_the_docs_tables_are_the_example_recordings() -> None:
    """docs/boundaries.md's tables are `probe_markdown` of the example recording, between
    their markers: regenerate them with scripts/boundary-tables, never by hand."""
    from rtax_tui.analysis.report import build_report
    from rtax_tui.render.reporting import PROBE_TABLES_BEGIN, boundary_doc, probe_markdown

    text = DOCS.read_text()
    doc = build_report(read_recording(EXAMPLE / "all-drivers.jsonl"))["probe"]
    assert boundary_doc(text, doc) == text, "docs/boundaries.md: run scripts/boundary-tables"
    assert text.count(probe_markdown(doc)) == 1
    assert text.index(PROBE_TABLES_BEGIN) > text.index("## Measured here")


def _ev(driver: str, channel: str, check: str, result: str, why: str, promised: bool = False):
    return {
        "type": "probe", "host": "local", "driver": driver, "channel": channel,
        "check": check, "result": result, "evidence": f"{why} | the step's output",
        "promised": promised,
    }  # fmt: skip


def test_the_markdown_tables_say_where_channels_differ_and_why_na() -> None:
    from rtax_tui.model.checks import BLOCKED, NA
    from rtax_tui.model.probedoc import build_document
    from rtax_tui.render.reporting import probe_markdown

    evs = (
        [_ev("stage", ch, "root_home", BLOCKED, "not visible", True) for ch in ("exec", "shell")]
        + [_ev("one", ch, "root_home", BLOCKED, "not visible", True) for ch in ("exec", "shell")]
        + [
            _ev("vm", "exec", "result_integrity", BLOCKED, "every status real"),
            _ev("vm", "shell", "result_integrity", BREACHED, "a failure recorded as a success"),
            _ev("vm", "exec", "deep_tree", NA, "the workspace has no host path", True),
            _ev("vm", "shell", "deep_tree", NA, "the workspace has no host path", True),
            _ev("vm", "exec", "reset_links", NA, "the workspace has no host path"),
            _ev("vm", "shell", "reset_links", NA, "the workspace has no host path"),
            _ev("stage", "exec", "pool_reuse_clean", HELD, "nothing left", True),
            _ev("stage", "shell", "pool_reuse_clean", NA, "no in-place reset"),
            _ev("vm", "exec", "root_home", BLOCKED, "not visible", True),
            _ev("vm", "shell", "root_home", BREACHED, "read the host's <root> *token*", True),
        ]
    )
    md = probe_markdown(build_document(evs))
    lines = md.splitlines()
    assert lines[0] == (
        "| driver | channel | blocked | held | breached | n/a | promises kept | breached checks |"
    )
    # one row per channel where the channels' results differ
    assert "| `stage` | exec | 1 | 1 | 0 | 0 | 2/2 | none |" in lines
    assert "| `stage` | shell | 1 | 0 | 0 | 1 | 1/1 | none |" in lines
    assert "| `vm` | exec | 2 | 0 | 0 | 2 | 1/1 (1 n/a) | none |" in lines
    # deep_tree n/a on both (promised): neither kept nor broken, said beside the count
    vm_shell = "| `vm` | shell | 0 | 0 | 2 | 2 | 0/1 (1 n/a) | `root_home` !, `result_integrity` |"
    assert vm_shell in lines
    assert "| `one` | exec, shell | 1 | 0 | 0 | 0 | 1/1 | none |" in lines  # they agree: one row
    assert "| check | stage | one | vm |" in lines
    assert "| `root_home` | blocked | blocked | breached (shell), blocked (exec) ! |" in lines
    # a `-` that begins a text is escaped (md_escape: it would begin a list in a list item)
    assert "| `result_integrity` | \\- | \\- | breached (shell), blocked (exec) |" in lines
    assert "| `tmp_sentinel` | \\- | \\- | \\- |" in lines  # every check, in order
    # promised on exec only (an in-place reset there): n/a on shell breaks no promise
    assert "| `pool_reuse_clean` | n/a (shell), held (exec) | \\- | \\- |" in lines
    assert "- `stage` `pool_reuse_clean` (shell): no in-place reset" in lines
    # the same reason, where, for several checks: one line
    want = "- `vm` `reset_links`, `deep_tree` (exec, shell): the workspace has no host path"
    assert want in lines
    # a broken promise: its reason, escaped (no HTML, no emphasis)
    assert "- `vm` `root_home` (shell): read the host's \\<root> \\*token\\*" in lines
    assert "the step's output" not in md


def test_the_docs_markers_are_required() -> None:
    from rtax_tui.render.reporting import PROBE_TABLES_BEGIN, PROBE_TABLES_END, boundary_doc

    doc: dict = {"drivers": {}}
    with pytest.raises(ValueError):
        boundary_doc("# no markers\n", doc)
    with pytest.raises(ValueError):
        boundary_doc(f"{PROBE_TABLES_END}\n{PROBE_TABLES_BEGIN}\n", doc)
    text = f"a\n{PROBE_TABLES_BEGIN}\nold\n{PROBE_TABLES_END}\nb\n"
    new = boundary_doc(text, doc)
    assert new.startswith(f"a\n{PROBE_TABLES_BEGIN}\n\n") and new.endswith(
        f"{PROBE_TABLES_END}\nb\n"
    )
    assert "old" not in new and boundary_doc(new, doc) == new


@pytest.mark.skipif(not ROOT, reason="the probe's host sentinels (/root, loop devices) need root")
def test_ctrl_c_tears_down_and_leaves_nothing(tmp_path) -> None:
    import signal
    import time

    out = tmp_path / "int.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "probe", "--driver", "local", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "RTAX_CACHE": str(tmp_path / "cache")},
    )
    # until the probe has planted its sentinels on the host (its cache's probe-<hex>): its
    # environments start next. (Waiting for its first `probe` event raced the probe's end:
    # a channel's events come when the channel is done, and local's are quick.)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if list((tmp_path / "cache").glob("probe-*")):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the probe ended before it was interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    rec = read_recording(out)
    assert rec.end is not None and rec.end["status"] == "interrupted"
    assert not (tmp_path / "cache" / "probe" / "last.json").exists()  # no partial "last"
    assert _ours_left() == []


def test_an_environment_that_runs_nothing_proves_nothing(monkeypatch) -> None:
    """A driver whose actions do nothing (empty output, rc 0) must not pass a guarantee:
    the markers were never written, the bomb and the hog never started: `n/a`."""
    import asyncio

    import rtax_tui.drivers as drivers_mod
    from rtax_tui.drivers.base import Driver, Environment

    from rtax_tui.engine.probe.run import run_probe
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.checks import NA
    from rtax_tui.model.spec import ActionResult

    class Mute(Environment):
        async def create(self) -> None:
            pass

        async def action(self, step, timeout):
            return ActionResult(0, b"")

        async def teardown(self) -> None:
            pass

    class MuteDriver(Driver):
        name = "mute"

        async def check(self):
            return []

        def environment(self, spec, sub=None):
            return Mute(self, spec, sub)

    real = drivers_mod.get_driver
    monkeypatch.setattr(
        drivers_mod,
        "get_driver",
        lambda n, h, o=None: MuteDriver(h, {}) if n == "mute" else real(n, h, o),
    )
    events: list[dict] = []
    asyncio.run(run_probe({"local": LocalHost()}, ["mute"], ["exec"], events.append))
    res = {e["check"]: e for e in events}
    for name in ("workspace_persists", "other_env", "fresh_env", "pids_limit", "memory_limit"):
        assert res[name]["result"] == NA, (name, res[name]["evidence"])
    assert "could not write its markers" in res["fresh_env"]["evidence"]
    assert _ours_left() == []


def test_cleanup_detaches_every_loop_on_the_image_also_one_the_plant_never_named() -> None:
    """A plant cut short can attach its block sentinel's loop device without the probe
    reading its name: the cleanup detaches every loop device on the image, not only the
    one it was told (the 02:21 UTC leftover of 2026-12-07: /dev/loop0 on disk.img)."""
    import asyncio

    from rtax_tui.engine.probe.host import cleanup, plant
    from rtax_tui.hosts.local import LocalHost

    async def go() -> str:
        p = await plant(LocalHost())
        assert p.loop, "no loop device planted (root and losetup are needed)"
        img = f"{p.tmp}/rtax-probe-blk-{p.hex}/disk.img"
        extra = subprocess.run(
            ["losetup", "-f", "--show", img], capture_output=True, text=True, check=True
        ).stdout.strip()
        p.loop = ""  # as if the plant's output never came back
        try:
            await cleanup(p)
        finally:
            for dev in (extra,):
                subprocess.run(["losetup", "-d", dev], capture_output=True)
        return img

    img = asyncio.run(go())
    res = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    assert img not in res.stdout
    assert _ours_left() == []


def test_a_cleanup_that_failed_leaves_its_paths_with_the_reaper() -> None:
    """The planted paths are forgotten by the reaper only once the cleanup removed them:
    a cleanup that failed (or left a loop device) keeps them registered, so the reaper
    removes them (and detaches loops on them) when the probe ends."""
    import asyncio

    from rtax_tui.engine.probe.host import HostPlant, cleanup
    from rtax_tui.hosts.base import CompletedProcess

    class Host:  # a double: records what is untracked, its cleanup script fails
        def __init__(self, rc: int) -> None:
            self.rc, self.untracked = rc, []

        async def run(self, argv, **_kw):
            return CompletedProcess(list(argv), self.rc, b"", b"")

        def untrack(self, kind: str, value: str) -> None:
            self.untracked.append(value)

    failed, done = Host(1), Host(0)
    for h in (failed, done):
        asyncio.run(cleanup(HostPlant(host=h, hex="ab12", tmp="/tmp", cache="/c")))  # type: ignore[arg-type]
    assert failed.untracked == []
    assert "/tmp/rtax-probe-blk-ab12" in done.untracked and len(done.untracked) == 6


@pytest.mark.skipif(not ROOT, reason="the probe's host sentinels (/root, loop devices) need root")
def test_a_probe_killed_after_remount_rw_wrote_leaves_none_of_its_files(tmp_path) -> None:
    """The local driver is the host: `remount_rw` writes `.rtax-probe-rw-<hex>` into the
    host's own /, /etc, /root, /var. A probe SIGKILLed before it looked for them left
    them there (found on this machine after a killed run); the reaper holds them from
    before the step, so they go with it. The step here holds after writing, so the kill
    lands in that window."""
    import time

    hold = (
        "from rtax_tui.engine.probe import scripts as S; "
        "S.REMOUNT += '\\nsleep 120.0419\\n'; "
        "import sys; from rtax_tui.commands.cli import main; "
        "sys.exit(main(['probe', '--driver', 'local', '--channel', 'exec']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", hold],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "RTAX_CACHE": str(tmp_path / "cache")},
    )
    try:
        deadline = time.monotonic() + 120
        while not glob.glob("/boot/.rtax-probe-rw-*"):  # the last of REMOUNT_DIRS
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "remount_rw never wrote the host's /boot"
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 60
    while (_ours_left() or processes("120.0419")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours_left() == [] and processes("120.0419") == []
