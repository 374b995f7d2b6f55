"""The launcher's list of profiles to start from: the built-ins, ./profiles, the user's
saved ones (`ctrl+s`), and the profiles of recent console runs; choosing one posts
`ProfileList.Chosen`."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from rtax_tui.analysis.history import find_recordings, profile_beside
from rtax_tui.engine.profile_toml import profiles_dir, saved_profiles_dir
from rtax_tui.render.plaintext import styled


def profile_sources(recent: int = 8) -> list[tuple[str, str, Path]]:
    """(group, label, path) of the profiles to start from: the built-ins, ./profiles,
    the user's saved ones, and those of recent console runs (the files beside their
    recordings)."""
    out: list[tuple[str, str, Path]] = []
    seen: set[Path] = set()

    def add(group: str, p: Path, label: str | None = None) -> None:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            out.append((group, label or p.stem, p))

    builtin = profiles_dir()
    for p in sorted(builtin.glob("*.toml")):
        add("built-in", p)
    local = Path("profiles")
    if local.is_dir():
        for p in sorted(local.glob("*.toml")):
            add("./profiles", p)
    saved = saved_profiles_dir()
    if saved.is_dir():
        for p in sorted(saved.glob("*.toml")):
            add("saved", p)
    n = 0
    for rec in find_recordings([Path("recordings")]):
        beside = profile_beside(rec)
        if beside.exists() and n < recent:
            add("recent", beside, beside.stem)
            n += 1
    return out


class ProfileList(Vertical):
    """The profiles, grouped; enter on one loads it into the form (the screen does)."""

    class Chosen(Message):
        """A profile was chosen: `path` is its file."""

        def __init__(self, path: str) -> None:
            super().__init__()
            self.path = path

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.options = OptionList(id="profiles")

    def compose(self) -> ComposeResult:
        yield self.options

    def on_mount(self) -> None:
        self.border_title = "profiles ⏎ load"

    def refill(self) -> None:
        """The profiles again (a profile was saved)."""
        ol = self.options
        ol.clear_options()
        group = None
        for g, label, path in profile_sources():
            if g != group:
                group = g
                ol.add_option(Option(f"[dim]{g}[/dim]", disabled=True))
            ol.add_option(Option(styled(f"  {label}"), id=str(path)))

    @property
    def highlighted_path(self) -> str | None:
        """The file of the highlighted profile, if the list has focus."""
        if not self.options.has_focus:
            return None
        opt = self.options.highlighted_option
        return opt.id if opt is not None and opt.id else None

    @on(OptionList.OptionSelected)
    def _chosen(self, ev: OptionList.OptionSelected) -> None:
        ev.stop()
        if ev.option.id:
            self.post_message(self.Chosen(ev.option.id))
