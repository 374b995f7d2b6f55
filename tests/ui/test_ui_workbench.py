"""The console as a workbench: the launcher, the run history, the rerun and its comparison,
help and the command palette from the bindings, long work with a progress line.

The runs are real (the engine as its own process, the local driver, T0, a few trials);
the recordings land in a temporary ./recordings.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest

from rtax_tui.analysis.history import estimate, history, profile_beside, summarize
from rtax_tui.analysis.report import compare_reports, pair_cells
from rtax_tui.engine.plan import build_plan, make_cells
from rtax_tui.engine.profile import load_profile, parse_profile, profiles_dir
from rtax_tui.engine.profile_schema import CAPACITY, RUN
from rtax_tui.engine.profile_toml import dump, from_resolved
from rtax_tui.model.recording import read_recording
from rtax_tui.ui.app import RtaxApp
from rtax_tui.ui.compare import CompareScreen
from rtax_tui.ui.history import HistoryScreen, ReportPanel
from rtax_tui.ui.launcher import (
    LauncherScreen,
    doctor_host_args,
    launcher_for_recording,
    planned_trials,
    profile_sources,
)
from rtax_tui.ui.modals import HelpScreen
from rtax_tui.ui.monitor import MonitorScreen
from rtax_tui.ui.tasks import WorkLine, stream_command
from tests.consolerecs import SHAKY, header, trials, write
from tests.screentext import widget_lines
from tests.uiasync import aio, own_workdir, until


def _until(cond, timeout: float = 60.0):
    return until(cond, timeout)


EXAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "examples"
SIZE = (120, 40)


def _on(app, cls) -> bool:
    """The app shows a screen of this class, composed and mounted."""
    return isinstance(app.screen, cls) and app.screen.is_mounted


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory whose history is its own ./recordings and the examples."""
    return own_workdir(tmp_path, monkeypatch, EXAMPLES)


def tiny_profile(dirpath: Path) -> Path:
    p = dirpath / "tiny.toml"
    p.write_text(
        'name = "tiny"\n[run]\nseed = 5\ntrials = 3\nwarmup = 1\ndrivers = ["local"]\n'
        'workloads = ["t0"]\nchannels = ["exec"]\n'
    )
    return p


# -- the profile written beside a recording ------------------------------------------------


def test_the_launcher_takes_its_defaults_from_the_schema(monkeypatch) -> None:
    """The launcher keeps no defaults of its own: change the schema's, its plan follows."""

    def default(table, key: str, value) -> None:
        monkeypatch.setitem(table.keys, key, dataclasses.replace(table[key], default=value))

    default(RUN, "trials", 4)
    default(RUN, "warmup", 2)
    default(RUN, "drivers", ("local",))
    assert planned_trials({}) == {"local/local/t0/exec": 4 + 2}
    default(CAPACITY, "size", 5)
    default(CAPACITY, "batches", 2)
    # a warm-up batch at the size, then the batches
    assert planned_trials({"capacity": {}}) == {"local/local/t0/exec": 5 + 2 * 5}


@pytest.mark.parametrize("name", sorted(p.stem for p in profiles_dir().glob("*.toml")))
def test_every_builtin_profile_written_back_loads_to_the_same_profile(name, tmp_path) -> None:
    src = profiles_dir() / f"{name}.toml"
    data = tomllib.loads(src.read_text())
    data.setdefault("name", name)
    out = tmp_path / "written.toml"
    out.write_text(dump(data, comment="a comment\nover two lines"))
    a, b = load_profile(src).to_dict(), load_profile(out).to_dict()
    a.pop("path"), b.pop("path")
    assert a == b


@pytest.mark.parametrize("name", ["t0-local-stage", "t2-local-stage", "capacity-local-stage"])
def test_a_recordings_resolved_profile_written_back_resolves_the_same(name, tmp_path) -> None:
    header = read_recording(EXAMPLES / f"{name}.jsonl").header["profile"]

    def round_trip(resolved: dict, n: int) -> dict:
        out = tmp_path / f"again-{n}.toml"
        out.write_text(dump(from_resolved(resolved)))
        d = load_profile(out).to_dict()
        d.pop("path")
        return d

    header.pop("path")
    again = round_trip(header, 1)
    # everything recorded comes back as it was (a recording made before a key existed
    # gets that key's default too), and writing back again changes nothing more
    assert _subset(header, again)
    assert round_trip(again, 2) == again


def _subset(small: object, big: object) -> bool:
    """`small`'s keys all in `big` with equal values (recursively for tables)."""
    if isinstance(small, dict) and isinstance(big, dict):
        return all(k in big and _subset(v, big[k]) for k, v in small.items())
    return small == big


def test_dump_refuses_what_toml_cannot_hold() -> None:
    with pytest.raises(ValueError):
        dump({"run": {"seed": float("nan")}})
    text = dump({"name": 'a "quoted" name', "x.y": {"k": [1, 2.5, "s"], "t": {"u": True}}})
    assert tomllib.loads(text) == {
        "name": 'a "quoted" name',
        "x.y": {"k": [1, 2.5, "s"], "t": {"u": True}},
    }


def test_planned_trials_follow_the_engines_plan_and_a_capacity_table() -> None:
    data = {"run": {"drivers": ["local"], "workloads": ["t0", "t1"], "trials": 4, "warmup": 2}}
    assert planned_trials(data) == {"local/local/t0/exec": 6, "local/local/t1/exec": 6}
    cap = {"run": {"drivers": ["local"], "warmup": 1}, "capacity": {"size": 4, "batches": 2}}
    assert planned_trials(cap) == {"local/local/t0/exec": 12}  # a warm-up batch, then 2
    cap["capacity"]["sizes"] = [2, 3]
    assert planned_trials(cap) == {"local/local/t0/exec": (1 + 2) * 2 + (1 + 2) * 3}


# -- history ------------------------------------------------------------------------------


def test_history_summaries_count_as_the_report_does(here) -> None:
    runs = history()
    assert {Path(r.path).name for r in runs} >= {"t0-local-stage.jsonl", "t2-local-stage.jsonl"}
    t0 = summarize(EXAMPLES / "t0-local-stage.jsonl")
    assert t0.profile == "t0" and t0.status == "completed" and t0.trials == 36
    assert len(t0.cells) == 4 and t0.failed == 0 and t0.duration_s > 0
    # the estimate: the newest recording's mean trial wall time × the planned trials
    est = estimate({"local/local/t0/exec": 10, "nowhere/x/t0/exec": 5}, 2, runs)
    assert est.known == ("local/local/t0/exec",) and est.unknown == ("nowhere/x/t0/exec",)
    cell = "local/local/t0/exec"
    newest = next(r for r in runs if cell in r.cell_trial_ns)  # runs are newest first
    assert est.seconds == pytest.approx(10 * newest.cell_trial_ns[cell] / 1e9 / 2)
    bad = here / "recordings" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text("not json\n")
    assert summarize(bad).status == "unreadable" and summarize(bad).error


def test_a_rerun_that_changed_the_channel_is_compared_cell_by_cell(tmp_path) -> None:
    def variant(name: str, rename: bool) -> Path:
        """The exec cells of the T0 example; with `rename`, local's moved to shell."""
        out = []
        for raw in (EXAMPLES / "t0-local-stage.jsonl").read_bytes().splitlines():
            ev = orjson.loads(raw)
            if ev.get("cell", "").endswith("/shell"):
                continue
            if rename and ev.get("cell") == "local/local/t0/exec":
                ev["cell"], ev["channel"] = "local/local/t0/shell", "shell"
            out.append(orjson.dumps(ev))
        path = tmp_path / name
        path.write_bytes(b"\n".join(out) + b"\n")
        return path

    a, b = read_recording(variant("a.jsonl", False)), read_recording(variant("b.jsonl", True))
    pairs = pair_cells(a, b, changed=True)
    assert pairs == {
        "local/stage/t0/exec": "local/stage/t0/exec",  # in both: itself
        "local/local/t0/exec": "local/local/t0/shell",  # one field changed
    }
    cmp = compare_reports(a, b, changed=True)
    assert {r["cell"] for r in cmp["rows"]} == {
        "local/stage/t0/exec",
        "local/local/t0/exec → local/local/t0/shell",
    }
    # without pairs: what `rtax compare` shows, unchanged
    assert compare_reports(a, b)["rows"] == [r for r in cmp["rows"] if "→" not in r["cell"]]


# -- the console ----------------------------------------------------------------------------


async def _run_from_launcher(pilot, scr: LauncherScreen) -> MonitorScreen:
    await pilot.press("enter")
    await _until(lambda: _on(pilot.app, MonitorScreen))
    mon = pilot.app.screen
    await _until(lambda: mon.ended, 120)
    assert mon.returncode == 0, list(mon.log_lines)
    return mon


@aio
async def test_launcher_run_history_compare_and_a_rerun_with_another_channel(here) -> None:
    app = RtaxApp(LauncherScreen(tiny_profile(here), check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, LauncherScreen)
        await pilot.pause(0.2)
        assert list(scr.query_one("#channels").selected) == ["exec"]
        scr.query_one("#run-trials").value = "4"  # a change in the form
        await _until(lambda: "1 cells, 5 trials" in str(scr.query_one("#plan").render()))

        # launcher -> run
        first = await _run_from_launcher(pilot, scr)
        rec1 = Path(first.record_path)
        assert rec1.parent == Path("recordings") and rec1.exists()
        # the profile beside it: the normal loader reads it and gives the same plan
        prof = load_profile(profile_beside(rec1))
        assert (prof.name, prof.trials, prof.warmup, prof.seed) == ("tiny", 4, 1, 5)
        plan = build_plan(
            make_cells(prof.hosts, prof.drivers, prof.workloads, prof.channels),
            prof.trials, prof.warmup, prof.seed,
        )  # fmt: skip
        starts = [e for e in read_recording(rec1).events if e["type"] == "trial_start"]
        assert [(t.cell.id, t.warmup) for t in plan] == [(e["cell"], e["warmup"]) for e in starts]

        # run -> history: the new run first, filterable
        await pilot.press("h")
        await _until(lambda: _on(app, HistoryScreen) and app.screen.runs)
        hist = app.screen
        assert hist.current().path == str(rec1) and hist.current().status == "completed"
        await pilot.press("slash", *"capacity")
        await _until(lambda: len(hist.shown) == 1)
        assert [Path(r.path).name for r in hist.shown] == ["capacity-local-stage.jsonl"]
        hist.query_one("#filter").value = ""
        await pilot.press("enter")  # back to the table
        await _until(lambda: len(hist.shown) == len(hist.runs))

        # history -> the report
        await pilot.press("r")
        await _until(lambda: _on(app, ReportPanel) and app.screen.query("#report"))
        await _until(lambda: "local/local/t0/exec" in str(app.screen.query_one("#report").render()))
        await pilot.press("escape")

        # history -> rerun with a changed channel -> compare against the first run
        await pilot.press("e")
        await _until(lambda: _on(app, LauncherScreen) and app.screen is not scr)
        again = app.screen
        assert again.rerun_of == str(rec1)
        await pilot.pause(0.2)
        assert again.query_one("#run-trials").value == "4"  # filled in from the first run
        channels = again.query_one("#channels")
        channels.select("shell")
        channels.deselect("exec")
        await pilot.pause(0.2)
        await pilot.press("enter")
        await _until(lambda: _on(app, CompareScreen), 120)
        cmp = app.screen
        rec2 = Path(cmp.path_b)
        assert cmp.path_a == str(rec1) and rec2 != rec1
        await _until(lambda: cmp.query("#cmp"))  # composed
        table = cmp.query_one("#cmp")
        await _until(lambda: table.row_count > 0)
        cells = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert cells == {"local/local/t0/exec → local/local/t0/shell"}
        assert load_profile(profile_beside(rec2)).channels == ("shell",)
        assert "rerun of" in profile_beside(rec2).read_text()

        # history -> pick two -> compare
        await pilot.press("escape", "escape")  # compare, then the run screen
        await pilot.press("h")
        await _until(lambda: _on(app, HistoryScreen) and app.screen.runs)
        hist = app.screen
        assert [hist.shown[0].path, hist.shown[1].path] == [str(rec2), str(rec1)]
        await pilot.press("space", "down", "space", "c")
        await _until(lambda: _on(app, CompareScreen))
        assert (app.screen.path_a, app.screen.path_b) == (str(rec2), str(rec1))


@aio
async def test_rerun_of_a_recording_made_on_the_command_line_fills_the_launcher(here) -> None:
    scr = launcher_for_recording(str(EXAMPLES / "t0-local-stage.jsonl"), check=False)
    app = RtaxApp(scr)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert list(scr.query_one("#drivers").selected) == ["local", "stage"]
        assert list(scr.query_one("#channels").selected) == ["exec", "shell"]
        assert scr.query_one("#run-trials").value == "8"
        assert scr.query_one("#run-warmup").value == "1"


@aio
async def test_the_form_keeps_what_it_does_not_show_and_writes_pool_and_capacity(here) -> None:
    src = here / "p.toml"
    src.write_text(
        '[run]\ndrivers = ["local"]\n[limits]\ncpus = 0.5\n'
        '[workloads.mine]\nsteps = [{argv = ["true"]}]\n'
    )
    app = RtaxApp(LauncherScreen(src, check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await pilot.pause(0.2)
        scr.query_one("#cap-size").value = "4"
        scr.query_one("#cap-sizes").value = "2, 4"
        scr.query_one("#pool-size").value = "2"
        scr.query_one("#pool-reset").value = "clean"
        await pilot.pause(0.2)
        data = scr.collect()
        assert data["limits"] == {"cpus": 0.5} and "mine" in data["workloads"]
        assert data["capacity"] == {"size": 4, "sizes": [2, 4]}
        assert data["pool"] == {"size": 2, "reset": "clean"}
        assert tomllib.loads(dump(data))["pool"] == {"size": 2, "reset": "clean"}
        scr.query_one("#pool-size").value = ""
        scr.query_one("#pool-reset").value = ""
        scr.query_one("#cap-size").value = "x"
        await _until(lambda: "size: expected a number" in str(scr.query_one("#plan").render()))
        scr.query_one("#cap-size").value = ""
        scr.query_one("#cap-sizes").value = ""
        await pilot.pause(0.2)
        data = scr.collect()
        assert "pool" not in data and "capacity" not in data
        # what the launcher writes, the normal loader reads (no pool: today's loader)
        out = here / "w.toml"
        out.write_text(dump(data))
        assert parse_profile(data, out.read_text(), str(out), "w").limits.cpus == 0.5


@aio
async def test_drivers_per_host_come_from_doctor_live_and_a_bad_host_says_why(here) -> None:
    app = RtaxApp(LauncherScreen(tiny_profile(here)))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        await _until(
            lambda: ("local", "local") in scr.status and scr.status[("local", "local")] == "", 120
        )
        assert "local" in scr.drivers and "stage" in scr.drivers
        # an ssh:// host is checked at once; nothing listens on port 1
        scr.query_one("#add-host").focus()
        await pilot.press(*"ssh://nobody@127.0.0.1:1", "enter")
        await pilot.pause(0.2)
        assert "ssh://nobody@127.0.0.1:1" in scr.query_one("#hosts").selected
        key = ("ssh://nobody@127.0.0.1:1", "local")
        await _until(lambda: scr.status.get(key), 120)
        assert "unreachable" in scr.status[key]
        await _until(lambda: not scr.query_one("#work", WorkLine).busy, 120)
        line = str(scr.query_one("#work").render())
        assert "unreachable" in line and "known_hosts" in line
        assert "not usable" in str(scr.query_one("#plan").render())


@aio
async def test_long_work_failing_says_what_to_do(here) -> None:
    app = RtaxApp(LauncherScreen(tiny_profile(here), check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        # the error on stderr, then more on stdout: the line keeps the error whichever of
        # the two pipes is read last (under load either can be)
        code = (
            "import sys, time; print('step 1', flush=True); "
            "sys.stderr.write('no engine here\\n'); sys.stderr.flush(); time.sleep(0.2); "
            "print('cleaning up', flush=True); sys.exit(1)"
        )
        argv = [sys.executable, "-c", code]
        ok = await scr.work_line.follow("building the docker image", argv, fix="start the engine")
        await pilot.pause(0.1)
        line = str(scr.query_one("#work").render())
        assert not ok and "failed (exit 1): no engine here — start the engine" in line
        lines: list[str] = []
        assert (
            await stream_command([sys.executable, "-c", "print('a'); print('b')"], lines.append)
            == 0
        )
        assert lines == ["a", "b"]


@aio
async def test_help_and_the_palette_list_the_screens_bindings(here) -> None:
    app = RtaxApp(HistoryScreen())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(widget_lines(app, app.screen.query_one("#dialog")))
        for what in ("rerun", "compare the two marked runs", "the launcher", "the run history"):
            assert what in text, what
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert any(t.startswith("rerun (e)") for t in titles)
        assert any(t.startswith("new (n)") for t in titles)
        await pilot.press("n")
        await pilot.pause(0.2)
        assert isinstance(app.screen, LauncherScreen)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert any(t.startswith("start (") for t in titles)


@aio
async def test_an_ssh_host_added_in_the_launcher_is_checked_at_once_and_runs(here) -> None:
    """A real sshd on loopback (tests/sshhosts.py): the launcher adds it, doctor checks
    it over SSH, and a run on it records its cells under the host's URL."""
    from tests import sshhosts

    why = sshhosts.missing()
    if why:
        pytest.skip(why)
    lab = sshhosts.SSHLab()
    try:
        url = lab.serve_loopback().url
        flags = ["--identity", lab.identity, "--known-hosts", lab.known_hosts]
        scr = LauncherScreen(tiny_profile(here), ssh_flags=flags)
        app = RtaxApp(scr)
        async with app.run_test(size=SIZE) as pilot:
            scr.query_one("#add-host").focus()
            await pilot.press(*url, "enter")
            await _until(lambda: scr.status.get((url, "local")) == "", 180)
            hosts = scr.query_one("#hosts")
            hosts.deselect("local")
            await pilot.pause(0.2)
            assert scr.collect()["run"]["hosts"] == [url]
            scr.query_one("#drivers").focus()
            await _until(lambda: not scr.query_one("#work", WorkLine).busy, 180)
            mon = await _run_from_launcher(pilot, scr)
            starts = [e for e in read_recording(mon.record_path).events
                      if e["type"] == "trial_start"]  # fmt: skip
            # the engine names it as doctor did; the estimate's cells use that name
            assert starts and {e["host"] for e in starts} == {scr.host_names[url]}
            assert url.removeprefix("ssh://") == scr.host_names[url]
            assert "--identity" in profile_beside(mon.record_path).read_text()
    finally:
        lab.close()


@aio
async def test_n_on_a_finished_run_opens_the_launcher_filled_in_from_it(here) -> None:
    from rtax_tui.ui.app import replay_screen

    path = str(EXAMPLES / "t2-local-stage.jsonl")
    app = RtaxApp(replay_screen(path, None))
    async with app.run_test(size=SIZE) as pilot:
        await _until(lambda: app.screen.ended)
        await pilot.press("n")
        await _until(lambda: _on(app, LauncherScreen))
        scr = app.screen
        assert scr.rerun_of == path and "rerun of" in scr.sub_title
        await pilot.pause(0.2)
        assert list(scr.query_one("#workloads").selected) == ["t2"]
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert isinstance(app.screen, MonitorScreen)


def test_rtax_home_needs_a_terminal_and_doctor_speaks_json(tmp_path) -> None:
    import subprocess

    def rtax(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rtax_tui", *args],
            capture_output=True, text=True, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    res = rtax("home")
    assert res.returncode == 2 and "home needs a terminal" in res.stderr
    res = rtax("home", "nonesuch.toml")
    assert res.returncode == 2 and "nonesuch.toml" in res.stderr
    res = rtax("doctor", "--format", "json", "--host", "ssh://nobody@127.0.0.1:1")
    lines = [orjson.loads(x) for x in res.stdout.splitlines()]
    assert res.returncode == 1 and "local" in lines[0]["drivers"]
    assert lines[1]["host"] == "nobody@127.0.0.1:1" and "refused" in lines[1]["unreachable"]


@aio
async def test_no_second_run_starts_while_one_is_going(here) -> None:
    from rtax_tui.ui.feeds import engine_argv

    long = here / "long.toml"
    long.write_text(
        '[run]\ntrials = 100000\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["nap"]\n'
        'channels = ["shell"]\n'
        # a run that goes on, not one that floods: the fast tier's other worker shares
        # the machine (a stream of `true` at full speed took a core for a minute)
        '[workloads.nap]\nsteps = [{argv = ["sleep", "0.05"]}]\n'
    )
    record = here / "live.jsonl"
    mon = MonitorScreen("run", engine_argv=engine_argv(str(long), [], str(record)),
                        record_path=str(record))  # fmt: skip
    app = RtaxApp(mon)
    async with app.run_test(size=SIZE) as pilot:
        await _until(lambda: mon.state.ended >= 3, 120)
        await pilot.press("n")
        await _until(lambda: _on(app, LauncherScreen))
        launcher = app.screen
        assert launcher.rerun_of is None  # the run is going: a plain launcher
        launcher.check = False
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.screen is launcher and launcher.started is None
        assert not Path("recordings").exists()
        await pilot.press("escape")
        await pilot.press("x")
        await _until(lambda: mon.ended, 120)
        await pilot.press("q")
    assert read_recording(record).end["status"] == "interrupted"


@aio
async def test_a_drivers_options_are_edited_in_place_and_written(here) -> None:
    src = here / "p.toml"
    src.write_text('[run]\ndrivers = ["local", "stage"]\n[drivers_options.stage]\nuid = 64001\n')
    app = RtaxApp(LauncherScreen(src, check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        drivers = scr.query_one("#drivers")
        field = scr.query_one("#driver-opts")
        drivers.focus()
        stage = next(i for i in range(drivers.option_count)
                     if drivers.get_option_at_index(i).value == "stage")  # fmt: skip
        drivers.highlighted = stage
        await _until(lambda: scr.opts_driver == "stage")
        assert field.value == "uid = 64001" and field.border_title == "stage options"
        field.value = 'uid = 64002, ro_binds = ["/opt"]'
        await _until(
            lambda: scr.data.get("drivers_options", {}).get("stage", {}).get("uid") == 64002
        )
        field.value = "uid = "
        await _until(
            lambda: "stage options: not `key = value" in str(scr.query_one("#plan").render())
        )
        field.value = ""
        await _until(lambda: "drivers_options" not in scr.data)
        field.value = "uid = 64003"
        await pilot.press("enter")
        await _until(lambda: _on(app, MonitorScreen))
        mon = app.screen
        await _until(lambda: mon.ended, 120)
        prof = load_profile(profile_beside(mon.record_path))
        assert prof.driver_options == {"stage": {"uid": 64003}}


def test_doctor_checks_a_named_host_by_its_address_and_keys() -> None:
    data = {"hosts": {"box": {"address": "10.0.0.5", "user": "u", "port": 2222,
                              "identity": "/k", "known_hosts": "/kh"}}}  # fmt: skip
    assert doctor_host_args("box", data, []) == [
        "--host", "ssh://u@10.0.0.5:2222", "--identity", "/k", "--known-hosts", "/kh",
    ]  # fmt: skip
    assert doctor_host_args("box", data, ["--identity", "/cli"]) == [
        "--host", "ssh://u@10.0.0.5:2222", "--identity", "/cli", "--known-hosts", "/kh",
    ]  # fmt: skip
    assert doctor_host_args("local", data, []) == ["--host", "local"]


@aio
async def test_a_replay_workloads_relative_trajectory_still_holds_beside_the_recording(
    here,
) -> None:
    import shutil

    src_traj = Path(__file__).parents[1] / "data" / "trajectories" / "mini-swe-agent"
    sub = here / "mine"
    sub.mkdir()
    shutil.copy(src_traj / "astropy__astropy-12907.traj.json", sub / "t.json")
    prof = sub / "p.toml"
    prof.write_text(
        '[run]\ndrivers = ["stage"]\nworkloads = ["w"]\n[workloads.w]\ntrajectory = "t.json"\n'
    )
    load_profile(prof)  # valid where it is
    app = RtaxApp(LauncherScreen(prof, check=False))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        data = app.screen.collect()
    assert data["workloads"]["w"]["trajectory"] == str((sub / "t.json").resolve())
    elsewhere = here / "recordings" / "x.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(dump(data))
    assert load_profile(elsewhere).workloads == ("w",)


@aio
async def test_a_profile_chosen_from_the_list_fills_the_form_and_ctrl_s_saves_it(here) -> None:
    app = RtaxApp(LauncherScreen(tiny_profile(here), check=False))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        profiles = scr.query_one("#profiles")
        ids = [profiles.get_option_at_index(i).id for i in range(profiles.option_count)]
        t2 = ids.index(str(profiles_dir() / "t2.toml"))
        profiles.focus()
        profiles.highlighted = t2
        await pilot.press("enter")  # on the list, enter loads the profile
        await _until(lambda: scr.data.get("name") == "t2")
        assert _on(app, LauncherScreen)  # not started: the next enter does
        assert list(scr.query_one("#workloads").selected) == ["t2"]
        scr.query_one("#run-trials").value = "2"
        await pilot.press("ctrl+s")
        out = here / "config" / "rtax" / "profiles" / "t2.toml"
        await _until(out.exists)
        saved = load_profile(out)
        assert saved.trials == 2 and saved.workloads == ("t2",)
        # a second launcher lists it among the saved ones
        assert ("saved", "t2") in [(g, label) for g, label, _ in profile_sources()]


@aio
async def test_leaving_a_screen_goes_back_and_leaving_the_first_ends_the_console(here) -> None:
    """The app owns the stack: escape on a screen over another dismisses it (the one
    below shows again, the console goes on); on the first screen it ends the console."""
    app = RtaxApp(LauncherScreen(tiny_profile(here), check=False))
    async with app.run_test(size=SIZE) as pilot:
        first = app.screen
        await pilot.press("h")
        await _until(lambda: _on(app, HistoryScreen))
        await pilot.press("escape")
        await _until(lambda: app.screen is first)
        await pilot.press("n")  # the launcher over itself opens nothing
        await pilot.pause(0.1)
        assert app.screen is first and app.is_running
        await pilot.press("escape")
        await _until(lambda: not app.is_running)
    assert app.return_code == 0


@aio
async def test_history_marks_the_run_where_a_cell_stepped(here) -> None:
    """Six runs of one profile, the cell's create 10 ms, then 50 ms from the fourth:
    `rtax history`'s step, beside that run and said in full when it is highlighted."""
    runs = []
    for i, ms in enumerate([10.0] * 3 + [50.0] * 3):
        started = f"2026-12-0{i + 1}T00:00:00+00:00"
        evs = [header({"name": "stepping"}, started), *trials({SHAKY: [ms] * 5})]
        evs[0]["run_id"] = f"run{i}\x1b]52;c;eA==\x07"  # a recording's text: never sent as is
        runs.append(write(here / "recordings" / f"2026120{i + 1}T000000Z-stepping.jsonl", evs))
    app = RtaxApp(HistoryScreen())
    async with app.run_test(size=SIZE) as pilot:
        hist = app.screen
        await _until(lambda: hist.steps is not None)
        await pilot.pause(0.1)
        table = hist.query_one("#runs")
        col = [str(c.label) for c in table.ordered_columns].index("steps here")
        shown = {Path(r.path).name: str(table.get_row(r.path)[col]) for r in hist.shown}
        stepped = runs[3].name
        assert shown[stepped] == "▲+400% create +1"  # create, and total with it
        assert all(shown[p.name] == "" for p in runs if p.name != stepped)
        # the same step `rtax history` finds, at the same run
        argv = [sys.executable, "-m", "rtax_tui", "history", "stepping", "--format", "json"]
        got = subprocess.run(argv, capture_output=True, text=True, check=True)
        doc = json.loads(got.stdout)
        (series,) = doc["series"]
        assert {(s["phase"], s["run"]) for s in series["steps"]} == {("create", 3), ("total", 3)}
        table.move_cursor(row=[Path(r.path).name for r in hist.shown].index(stepped))
        await pilot.pause(0.2)
        lines = str(hist.query_one("#run-steps").render())
        assert f"{SHAKY} create: ▲ +400% +40.0ms at run 4" in lines  # markup shown as it is
        assert "run3\\x1b]52;c;eA==\\x07" in lines and "\x1b" not in lines
        await pilot.press("q")
