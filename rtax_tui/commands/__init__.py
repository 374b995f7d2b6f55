"""The command line: `rtax` and its subcommands (`cli`), headless runs (`headless`),
`rtax doctor`, `rtax traj`, `rtax plot`, `rtax serve`, and the argument types and host
flags they share. The top layer, beside the console.
"""


def main() -> int:
    """The `rtax` executable: the stop signals are handled before anything else is
    imported (model/signals.py), then the command line runs."""
    from rtax_tui.model import signals

    signals.early()
    from rtax_tui.commands.cli import main as cli_main

    try:
        return cli_main()
    finally:
        signals.done()
