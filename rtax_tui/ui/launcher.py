"""The launcher: choose a profile, change what to run, see what works, start it.

The form edits a profile as the tables of a profile file (`tomllib`'s dict), so
whatever the launcher does not know (a `[pool]` option, a custom workload) is kept
as it is. Enter writes those tables as a profile file beside the new recording
(`recordings/<time>-<name>.toml`, the same command-line profile `rtax run FILE`
takes) and asks the app to run it: every run made here can be made again without
the console. Which drivers work is asked of `rtax doctor --format json`, per host,
in a worker: the console never loads a driver itself. The screen is made of parts,
each a widget of its own module (`ProfileList`, `ChoiceLists`, `RunForm`,
`DoctorTable`, `PlanLine`, `WorkLine`), read through the typed properties below.
"""

from __future__ import annotations

import copy
import shlex
import tomllib
from pathlib import Path
from typing import Any

import orjson
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Header, Input, SelectionList

from rtax_tui.analysis.history import RunSummary, history, profile_beside, recording_path
from rtax_tui.engine.profile_schema import RUN
from rtax_tui.engine.profile_toml import (
    anchor_paths,
    dump,
    from_resolved,
    parse_inline,
    profiles_dir,
    saved_profile_path,
)
from rtax_tui.model.paths import atomic_write
from rtax_tui.model.spec import CHANNELS, WORKLOAD_NAMES, RtaxError
from rtax_tui.render.plaintext import styled
from rtax_tui.ui.choicelists import ChoiceLists, fill_list
from rtax_tui.ui.doctortable import DoctorTable
from rtax_tui.ui.feeds import engine_argv
from rtax_tui.ui.fit import FitFooter
from rtax_tui.ui.modals import Confirm
from rtax_tui.ui.monitor import a_run_is_going
from rtax_tui.ui.navigation import OpenRun
from rtax_tui.ui.planline import PlanLine, missing_choices, planned_trials
from rtax_tui.ui.profilelist import ProfileList, profile_sources
from rtax_tui.ui.runform import RunForm
from rtax_tui.ui.tasks import WorkLine, rtax_argv, stream_command

__all__ = [
    "LauncherScreen",
    "doctor_host_args",
    "launcher_for_recording",
    "planned_trials",
    "profile_sources",
]


def doctor_host_args(name: str, data: dict[str, Any], ssh_flags: list[str]) -> list[str]:
    """`--host` (and key flags) for `rtax doctor` on a profile's host: a `[hosts.NAME]`
    table becomes its ssh:// address, with its own identity and known_hosts unless the
    command line gave them (a jump host is not checked here: the run will be)."""
    table = (data.get("hosts") or {}).get(name)
    if not isinstance(table, dict):
        return ["--host", name, *ssh_flags]
    user = f"{table['user']}@" if table.get("user") else ""
    port = f":{table['port']}" if table.get("port") else ""
    args = ["--host", f"ssh://{user}{table.get('address', name)}{port}", *ssh_flags]
    for flag, key in (("--identity", "identity"), ("--known-hosts", "known_hosts")):
        if table.get(key) and flag not in ssh_flags:
            args += [flag, str(table[key])]
    return args


def run_hosts(data: dict[str, Any]) -> list[str]:
    """The hosts a profile's tables run on."""
    return list(data.get("run", {}).get("hosts", RUN.file_defaults()["hosts"]))


def driver_choices(data: dict[str, Any], known: list[str]) -> list[str]:
    """The drivers to choose from: those doctor named, then the profile's others."""
    chosen = list(data.get("run", {}).get("drivers", RUN.file_defaults()["drivers"]))
    return known + [d for d in chosen if d not in known]


def host_choices(data: dict[str, Any], chosen: list[str]) -> list[str]:
    """The hosts to choose from: local, the chosen ones, the profile's `[hosts.NAME]`."""
    named = list(data.get("hosts") or {})
    return list(dict.fromkeys(["local", *chosen, *named]))


class LauncherScreen(Screen[None]):
    """`n` from any screen, or `rtax home`."""

    BINDINGS = [
        Binding("enter", "start", "start", priority=True,
                tooltip="write the profile beside a new recording and run it"),
        Binding("ctrl+d", "check_drivers", "doctor",
                tooltip="ask `rtax doctor` again which drivers work on each host"),
        Binding("ctrl+b", "build_images", "build",
                tooltip="build the images of the selected container and VM drivers"),
        Binding("ctrl+a", "prepare_assets", "assets",
                tooltip="prepare the attrs repository used by t1, t2 and trajectories"),
        Binding("ctrl+s", "save_profile", "save",
                tooltip="save the form as a profile of your own (~/.config/rtax/profiles/NAME"
                ".toml; asks before overwriting one)"),
        Binding("escape", "back", "back", show=False,
                tooltip="back (or quit when it is the only screen)"),
    ]  # fmt: skip

    def __init__(
        self,
        profile: str | Path | None = None,
        *,
        data: dict[str, Any] | None = None,
        rerun_of: str | None = None,
        check: bool = True,
        hosts: list[str] | None = None,
        ssh_flags: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.start_hosts = hosts  # `rtax home --host ...`: the hosts to start with
        # --identity / --known-hosts / --trust-new-hosts, given to doctor and the engine
        self.ssh_flags = list(ssh_flags or [])
        self.source = str(profile or profiles_dir() / "default.toml")
        self.data: dict[str, Any] = data if data is not None else {}
        self.rerun_of = rerun_of
        self.check = check  # run `rtax doctor` on mount (tests of the form turn it off)
        self.drivers: list[str] = []  # every registered driver, once doctor named them
        # (host, driver) -> None while checking, "" when ok, or "reason -> fix"
        self.status: dict[tuple[str, str], str | None] = {}
        self.checked_hosts: set[str] = set()
        self.host_names: dict[str, str] = {}  # as the engine names them (doctor's answer)
        self.runs: list[RunSummary] | None = None
        self.error: str | None = None
        self.started: str | None = None  # the recording of the run started from here
        self.opts_driver: str | None = None  # whose [drivers_options] the options field shows

    # -- the parts ------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="τ")
        with Horizontal(id="launch"):
            yield ProfileList(id="l-profiles")
            yield ChoiceLists(id="l-lists")
            yield RunForm(id="l-form")
        yield DoctorTable(id="doctor", cursor_type="row", zebra_stripes=True)
        yield PlanLine(id="plan")
        yield WorkLine(id="work")
        yield FitFooter()

    @property
    def profiles(self) -> ProfileList:
        return self.query_one(ProfileList)

    @property
    def lists(self) -> ChoiceLists:
        return self.query_one(ChoiceLists)

    @property
    def form(self) -> RunForm:
        return self.query_one(RunForm)

    @property
    def doctor(self) -> DoctorTable:
        return self.query_one(DoctorTable)

    @property
    def plan(self) -> PlanLine:
        return self.query_one(PlanLine)

    @property
    def work_line(self) -> WorkLine:
        return self.query_one(WorkLine)

    def on_mount(self) -> None:
        self.title = "rtax launcher"
        self.sub_title = f"rerun of {self.rerun_of}" if self.rerun_of else "new run"
        self.profiles.refill()
        if self.data:
            self._fill_form()
        else:
            self.load_profile(self.source)
        self.lists.drivers.focus()
        self.load_history()
        if self.check:
            self.action_check_drivers()

    # -- the profile's tables <-> the form ------------------------------------------------
    @on(ProfileList.Chosen)
    def _profile_chosen(self, ev: ProfileList.Chosen) -> None:
        self.rerun_of = None
        self.sub_title = "new run"
        self.load_profile(ev.path)

    def load_profile(self, path: str | Path) -> None:
        try:
            text = Path(path).read_text()
            data = tomllib.loads(text)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            self.notify(f"{path}: {exc}", severity="error")
            return
        data.setdefault("name", Path(path).stem)
        anchor_paths(data, Path(path).parent)  # written beside a recording, they still hold
        if self.start_hosts:
            data.setdefault("run", {})["hosts"] = list(self.start_hosts)
            self.start_hosts = None
        self.source = str(path)
        self.data = data
        self._fill_form()

    def _fill_form(self) -> None:
        d = self.data
        run = {**RUN.file_defaults(), **d.get("run", {})}
        lists = self.lists
        fill_list(
            lists.drivers,
            driver_choices(self.data, self.drivers),
            run["drivers"],
            self._driver_label,
        )
        self.opts_driver = None
        if lists.drivers.option_count:
            lists.drivers.highlighted = 0  # the options field shows the first driver's
            self._sync_opts()
        wl = list(WORKLOAD_NAMES) + [w for w in d.get("workloads", {}) if w not in WORKLOAD_NAMES]
        fill_list(lists.workloads, wl, run["workloads"])
        fill_list(lists.channels, list(CHANNELS), run["channels"])
        self.form.fill(d, host_choices(self.data, run["hosts"]))
        self._update_plan()

    def _driver_label(self, value: str) -> Text:
        """A driver with a mark per host: … checking, ? not asked, ✓ works, ✗ does not."""
        marks = []
        for host in run_hosts(self.data):
            st = self.status.get((host, value), "?")
            marks.append("…" if st is None else "?" if st == "?" else "✓" if not st else "✗")
        return styled(f"{value:8} {' '.join(marks)}")

    def collect(self) -> dict[str, Any]:
        """The form read back into the profile's tables (keys it does not show kept)."""
        d = copy.deepcopy(self.data)
        run = d.setdefault("run", {})
        lists = self.lists
        for key, sl in (("drivers", lists.drivers), ("workloads", lists.workloads),
                        ("channels", lists.channels)):  # fmt: skip
            run[key] = list(sl.selected)
        self.form.read(d)
        if self.opts_driver is not None:
            text = lists.options.value.strip()
            try:
                body = parse_inline(text) if text else {}
            except ValueError as exc:
                raise ValueError(f"{self.opts_driver} options: {exc}") from None
            opts = d.setdefault("drivers_options", {})
            if body:
                opts[self.opts_driver] = body
            else:
                opts.pop(self.opts_driver, None)
            if not opts:
                d.pop("drivers_options", None)
        return d

    @on(ChoiceLists.DriverHighlighted)
    def _sync_opts(self) -> None:
        """The options field follows the highlighted driver: its `[drivers_options.X]`."""
        drv = self.lists.highlighted_driver
        if drv is None or drv == self.opts_driver:
            return
        self.opts_driver = drv
        self.lists.show_options(drv, (self.data.get("drivers_options") or {}).get(drv) or {})

    @on(SelectionList.SelectedChanged)
    @on(Input.Changed)
    def _changed(self, ev: SelectionList.SelectedChanged[str] | Input.Changed) -> None:
        try:
            self.data = self.collect()
            self.error = None
        except ValueError as exc:
            self.error = str(exc)
        if isinstance(ev, SelectionList.SelectedChanged) and ev.selection_list is self.form.hosts:
            new = [h for h in run_hosts(self.data) if h not in self.checked_hosts]
            if new and self.check:
                self.action_check_drivers(new)
            self._refill_drivers()
        self._update_plan()

    # -- the plan and its estimate ---------------------------------------------------
    def _update_plan(self) -> None:
        self.plan.show(self.data, self.error, self.host_names, self.runs, self.status)

    @work(thread=True, exclusive=True, group="history")
    def load_history(self) -> None:
        runs = history()
        self.app.call_from_thread(self._history_loaded, runs)

    def _history_loaded(self, runs: list[RunSummary]) -> None:
        self.runs = runs
        self._update_plan()

    # -- drivers per host: `rtax doctor --format json` ----------------------------------
    def action_check_drivers(self, hosts: list[str] | None = None) -> None:
        for host in hosts or run_hosts(self.data):
            self.checked_hosts.add(host)
            self.run_worker(self._doctor(host), group=f"doctor-{host}", exclusive=True)

    async def _doctor(self, host: str) -> None:
        work = self.work_line
        work.start(f"checking drivers on {host}")
        for d in self.drivers:
            self.status[(host, d)] = None
        self._draw_doctor()
        seen: list[str] = []
        unreachable: list[str] = []

        def line(text: str) -> None:
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError:
                return
            if "host" in obj and host not in (self.data.get("hosts") or {}):
                # the name the engine records an ssh:// host under (a [hosts.NAME]
                # table's host is recorded as NAME)
                self.host_names[host] = str(obj["host"])
            if "drivers" in obj and "driver" not in obj:
                if obj["drivers"] != self.drivers:
                    self.drivers = list(obj["drivers"])
                    self._refill_drivers()
                for d in self.drivers:
                    self.status.setdefault((host, d), None)
            elif "unreachable" in obj:
                unreachable.append(obj["unreachable"])
                for d in self.drivers:
                    self.status[(host, d)] = f"host unreachable: {obj['unreachable']}"
            elif "driver" in obj:
                probs = obj.get("problems") or []
                self.status[(host, obj["driver"])] = "; ".join(
                    f"{p['reason']} → {p['fix']}" for p in probs
                )
                seen.append(obj["driver"])
                mark = "✓" if obj.get("ok") else "✗"
                work.news(f"{obj['driver']} {mark} ({len(seen)}/{len(self.drivers)})")
            self._draw_doctor()

        errs: list[str] = []
        argv = rtax_argv(
            "doctor", "--format", "json", *doctor_host_args(host, self.data, self.ssh_flags)
        )
        rc = await stream_command(argv, line, errs.append)
        ok = sum(1 for d in seen if not self.status.get((host, d)))
        if unreachable:
            work.finish(
                f"{host} unreachable: {unreachable[0]} — check the address, its key in "
                "~/.ssh/known_hosts and `ssh` to it by hand",
                ok=False,
            )
        elif not seen:
            why = errs[-1] if errs else f"exit {rc}"
            work.finish(f"checking {host} failed: {why} — run `rtax doctor` to see why", False)
        else:
            work.finish(f"{host}: {ok} of {len(seen)} drivers work")
        self._draw_doctor()

    def _refill_drivers(self) -> None:
        """The drivers list again (new names from doctor, new marks), keeping what is
        chosen and the highlighted driver (whose options the field shows). Nothing once
        the launcher was left: a doctor worker can answer after its widgets are gone."""
        try:
            sl = self.lists.drivers
        except NoMatches:
            return
        chosen = list(sl.selected) or list(
            self.data.get("run", {}).get("drivers", RUN.file_defaults()["drivers"])
        )
        choices = driver_choices(self.data, self.drivers)
        fill_list(sl, choices, chosen, self._driver_label)
        if choices:
            keep = self.opts_driver if self.opts_driver in choices else choices[0]
            sl.highlighted = choices.index(keep)
        self._sync_opts()

    def _draw_doctor(self) -> None:
        try:
            table = self.doctor
        except NoMatches:  # the launcher was left while doctor ran
            return
        table.show(self.status)
        self._refill_drivers()
        self._update_plan()

    # -- hosts ------------------------------------------------------------------------
    @on(RunForm.AddHost)
    def add_host(self) -> None:
        field = self.form.new_host
        host = field.value.strip()
        if not host:
            return
        if not host.startswith("ssh://") or len(host) <= len("ssh://"):
            self.notify("a host is ssh://[user@]host[:port]", severity="error")
            return
        field.value = ""
        run = self.data.setdefault("run", {})
        hosts = list(run.get("hosts", RUN.file_defaults()["hosts"]))
        if host not in hosts:
            hosts.append(host)
        run["hosts"] = hosts
        fill_list(self.form.hosts, host_choices(self.data, hosts), hosts)
        if self.check:
            self.action_check_drivers([host])

    # -- long work ------------------------------------------------------------------------
    def action_build_images(self) -> None:
        drivers = list(self.data.get("run", {}).get("drivers", []))
        if not drivers:
            self.notify("select the drivers whose images to build")
            return
        # the command knows each driver's image and daemon (the drivers say): it skips a
        # driver with none, builds a shared image once and names the daemon to start
        flags = [a for d in drivers for a in ("--driver", d)]
        work = self.work_line.follow(
            f"building the images of {', '.join(drivers)}",
            rtax_argv("images", "build", *flags),
            fix=f"the whole log: `rtax images build {' '.join(flags)}`",
        )
        self.run_worker(work, group="images", exclusive=True)

    def action_prepare_assets(self) -> None:
        self.run_worker(
            self.work_line.follow(
                "preparing the attrs assets",
                rtax_argv("assets", "prepare"),
                fix="see the whole log with `rtax assets prepare` (the sdist comes from PyPI)",
            ),
            group="assets",
            exclusive=True,
        )

    # -- start ---------------------------------------------------------------------------
    def action_start(self) -> None:
        focused = self.focused
        if focused is self.form.new_host and self.form.new_host.value.strip():
            self.add_host()
            return
        path = self.profiles.highlighted_path
        if path is not None:
            self.load_profile(path)
            self.lists.drivers.focus()  # the next enter starts it
            return
        self.start()

    def start(self) -> str | None:
        """Write the profile beside a new recording and ask the app for its run screen."""
        try:
            data = self.collect()
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return None
        missing = missing_choices(data)
        if missing:
            self.notify(f"choose at least one of: {', '.join(missing)}", severity="error")
            return None
        if a_run_is_going(self.app.screen_stack):  # two runs at once: each disturbs the other
            self.notify(
                "a run is still going: stop it (x on its screen) or let it end, then start",
                severity="warning",
            )
            return None
        name = str(data.get("name") or "console")
        record = recording_path(name)
        record.parent.mkdir(parents=True, exist_ok=True)
        prof = profile_beside(record)
        origin = f"rerun of {self.rerun_of}" if self.rerun_of else f"from {self.source}"
        note = f"made by the rtax console, {origin}"
        again = shlex.join(["rtax", "run", str(prof), *self.ssh_flags])
        text = dump(data, comment=f"{note}\nrun again: {again}").encode()
        try:  # whole or not at all (a full disk leaves no cut profile)
            atomic_write(prof, lambda f: f.write(text), flag="profile")
        except RtaxError as exc:
            self.notify(str(exc), severity="error")
            return None
        argv = engine_argv(str(prof), self.ssh_flags, str(record))
        self.post_message(OpenRun(argv, str(record), f"run {name} → {record}", self.rerun_of))
        self.started = str(record)
        return str(record)

    def action_save_profile(self) -> None:
        """The form as a profile of the user's own (`saved_profiles_dir`), never over a
        shipped or tracked file; over one saved before, only once the user says yes."""
        try:
            data = self.collect()
            out = saved_profile_path(str(data.get("name") or "console"))
        except (ValueError, RtaxError) as exc:
            self.notify(str(exc), severity="error")
            return
        if not out.exists():
            self._write_profile(out, data)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._write_profile(out, data)
            else:
                self.notify(f"not saved: {out} kept as it was")

        self.app.push_screen(Confirm(f"{out} exists: overwrite it?"), answered)

    def _write_profile(self, out: Path, data: dict[str, Any]) -> None:
        text = dump(data, comment=f"saved from the rtax console (from {self.source})").encode()
        try:  # whole or not at all (a full disk leaves no cut profile)
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(out, lambda f: f.write(text), flag="profile")
        except (OSError, RtaxError) as exc:
            self.notify(f"cannot save {out}: {exc}", severity="error")
            return
        self.notify(f"saved {out}: rtax run {shlex.quote(str(out))}")
        self.profiles.refill()

    def action_back(self) -> None:
        self.dismiss()


def launcher_for_recording(
    path: str, check: bool = True, ssh_flags: list[str] | None = None
) -> LauncherScreen:
    """The launcher filled in from a recording, to run it again with changes: the
    profile file beside it when the console made it, else its header's resolved profile."""
    beside = profile_beside(path)
    if beside.exists():
        data = anchor_paths(tomllib.loads(beside.read_text()), beside.parent)
        data.setdefault("name", beside.stem)
    else:
        from rtax_tui.model.recording import read_recording

        header = read_recording(path).header
        data = from_resolved(header.get("profile") or {})
    return LauncherScreen(path, data=data, rerun_of=path, check=check, ssh_flags=ssh_flags)
