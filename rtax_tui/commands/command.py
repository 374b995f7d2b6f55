"""What a subcommand of `rtax` is: a name, a line of help, its parser's set-up and its
run, kept beside each other in the command's own module (`cli.COMMANDS` lists them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    # the parsed arguments and the whole command line (`["rtax", ...]`, as recorded)
    run: Callable[[argparse.Namespace, list[str]], int]
    description: str | None = None
    # with an epilog, the help keeps its lines as written
    epilog: str | None = None
    # what the console of `rtax serve ARGS` loads first (None: the command is no console)
    load: Callable[[argparse.Namespace], None] | None = None
    # a path argument this command names otherwise than `cli.PATH_FLAGS` does, by its key
    path_names: Mapping[str, str] = field(default_factory=dict)

    def add_to(self, sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
        kwargs: dict[str, Any] = {}
        if self.description is not None:
            kwargs["description"] = self.description
        if self.epilog is not None:
            kwargs["epilog"] = self.epilog
            kwargs["formatter_class"] = argparse.RawDescriptionHelpFormatter
        p: argparse.ArgumentParser = sub.add_parser(self.name, help=self.help, **kwargs)
        self.add_arguments(p)
        return p
