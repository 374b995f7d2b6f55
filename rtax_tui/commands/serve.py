"""`rtax serve`: the console in a browser, through textual-serve, on loopback by default.

textual-serve starts one console process per browser connection, with Textual's
web driver (its terminal is xterm.js in the page, over a websocket). It starts that
process through a shell, so the command is an argv list joined with `shlex`. The
console runs what `rtax ARGS...` would run in a terminal (by default the console on
the default profile; e.g. `rtax serve replay FILE`); `run.interactive` treats the
web driver as a terminal.

The console can start runs with any driver option, so only its user may reach it: the
default host is 127.0.0.1 (another address prints a warning), and every request needs
the secret token of the URL printed, a `Host` naming the address served and, from a
browser, an `Origin` of that same address (`servegate.py` holds the rule,
`servehttp.py` asks it before textual-serve's handlers).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable

from rtax_tui.commands.argtypes import port
from rtax_tui.commands.command import Command
from rtax_tui.model.spec import RtaxError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
SERVE_HELP = """\
ARGS are what follows `rtax` for the console (default: none, the console on the
default profile); each browser tab gets its own console process, ended when the tab
closes or the server stops (Ctrl-C, SIGTERM).

It prints the URL to open, with a secret token (http://127.0.0.1:8000/?token=...);
without the token, or from a page of another site, every request gets 403.

examples:
  rtax serve                                    the default console, on 127.0.0.1:8000
  rtax serve --port 8080 replay recordings/examples/t0-local-stage.jsonl
  rtax serve run t0 --trials 50
"""


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})")
    s.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"({DEFAULT_PORT})")
    s.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the console's command")


def console_command(args: list[str]) -> str:
    """The shell command textual-serve runs per connection: this Python, this rtax."""
    if args and args[0] == "--":
        args = args[1:]
    return shlex.join([sys.executable, "-m", "rtax_tui", *args])


def run_serve(args: argparse.Namespace, check: Callable[[list[str]], None]) -> int:
    """Serve the console once `check` (the CLI's) has loaded what ARGS name: a bad
    profile or recording is one line and exit 2 here, not a broken page per tab."""
    console_args = list(args.args)
    if console_args and console_args[0] == "--":
        console_args = console_args[1:]
    check(console_args)
    command = console_command(console_args)
    try:
        from rtax_tui.commands.servehttp import GatedServer
    except ImportError:
        raise RtaxError("serve needs textual-serve: pip install 'rtax[serve]'") from None
    # deferred: 2.3 ms (hmac, secrets) that `rtax --help` does not make
    from rtax_tui.commands.servegate import Gate, bind_warning

    warning = bind_warning(args.host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    title = "rtax " + " ".join(console_args) if console_args else "rtax"
    server = GatedServer(command, Gate(args.host, args.port), title=title)
    try:
        server.serve()
    except OSError as exc:  # the port is taken, the address is not ours
        where = f"{args.host}:{args.port}"
        raise RtaxError(f"serve: cannot listen on {where} ({exc.strerror})") from None
    return 0


def command(check: Callable[[list[str]], None]) -> Command:
    """`rtax serve`, with the CLI's check of ARGS (`cli.check_console`: it needs the
    whole parser, which holds this command)."""
    return Command(
        "serve",
        "the console in a web browser, on loopback by default",
        add_arguments,
        lambda args, argv: run_serve(args, check),
        description="rtax serve: the console in a web browser.",
        epilog=SERVE_HELP,
    )
