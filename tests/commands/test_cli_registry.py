"""The command registry (`cli.COMMANDS`): every subcommand's help prints, `rtax --help`
lists them in the order they always had, and a name runs the command that owns it."""

from __future__ import annotations

import argparse

import pytest

from rtax_tui.commands import cli
from rtax_tui.commands.command import Command

ORDER = (
    "run", "replay", "home", "report", "compare", "history", "project", "reproduce", "probe",
    "traj", "plot", "serve", "doctor", "assets", "images", "cleanup",
)  # fmt: skip


def test_help_lists_the_commands_in_their_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert tuple(c.name for c in cli.COMMANDS) == ORDER
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")]
    assert tuple(listed) == ORDER  # each command's name and help on one line
    assert "    cleanup    remove leftovers of earlier runs\n" in out


@pytest.mark.parametrize("argv", [[n] for n in ORDER] + [["traj", "inspect"], ["traj", "prepare"]])
def test_every_command_prints_its_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # `compare --help` once died on the `%` of its --min-effect default
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: rtax {' '.join(argv)} ")


def test_a_name_runs_the_command_that_owns_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, list[str]]] = []

    def owner(name: str) -> Command:
        real = cli.BY_NAME[name]
        return Command(name, real.help, real.add_arguments,
                       lambda args, argv: seen.append((args.command, argv)) or 7)  # fmt: skip

    monkeypatch.setattr(cli, "BY_NAME", {n: owner(n) for n in cli.BY_NAME})
    assert cli.main(["images", "build"]) == 7
    assert seen == [("images", ["rtax", "images", "build"])]


def test_serve_refuses_a_command_that_is_no_console() -> None:
    consoles = {c.name for c in cli.COMMANDS if c.load is not None}
    assert consoles == {"run", "replay", "home"}
    with pytest.raises(cli.RtaxError, match=r"serve: `rtax report` is not a console"):
        cli.check_console(["report", "x.jsonl"])
    cli.check_console([])  # `rtax` alone: the default profile, loaded
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)
