"""`rtax serve`: the console in a browser, through textual-serve, on loopback by default.

textual-serve starts one console process per browser connection, with Textual's
web driver (its terminal is xterm.js in the page, over a websocket). It starts that
process through a shell, so the command is an argv list joined with `shlex`. The
console runs what `rtax ARGS...` would run in a terminal (by default the console on
the default profile; e.g. `rtax serve replay FILE`); `cli._interactive` treats the
web driver as a terminal.

Anyone who can reach the port gets a console that can start runs: the default host
is 127.0.0.1, and another address has to be asked for.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from rtax_tui.model.spec import RtaxError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
SERVE_HELP = """\
ARGS are what follows `rtax` for the console (default: none, the console on the
default profile); each browser tab gets its own console process, ended when the tab
closes or the server stops (Ctrl-C, SIGTERM).

examples:
  rtax serve                                    http://127.0.0.1:8000, the default console
  rtax serve --port 8080 replay recordings/examples/t0-local-stage.jsonl
  rtax serve run t0 --trials 50
"""


def add_serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from rtax_tui.commands.argtypes import one_line_errors, port

    s = sub.add_parser(
        "serve",
        help="the console in a browser (textual-serve), on loopback by default",
        description="rtax serve: the console in a web browser.",
        epilog=SERVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})")
    s.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"({DEFAULT_PORT})")
    s.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the console's command")
    one_line_errors(s, "serve")


def console_command(args: list[str]) -> str:
    """The shell command textual-serve runs per connection: this Python, this rtax."""
    if args and args[0] == "--":
        args = args[1:]
    if args and args[0] in ("serve", "plot", "report", "compare", "project", "doctor"):
        raise RtaxError(f"serve: `rtax {args[0]}` is not a console; try `replay FILE` or `run P`")
    return shlex.join([sys.executable, "-m", "rtax_tui", *args])


def run_serve(args: argparse.Namespace) -> int:
    command = console_command(list(args.args))
    try:
        from textual_serve.server import Server
    except ImportError:
        raise RtaxError("serve needs textual-serve: pip install 'rtax[serve]'") from None
    title = "rtax " + " ".join(args.args) if args.args else "rtax"
    server = Server(command, host=args.host, port=args.port, title=title)
    try:
        server.serve()
    except OSError as exc:  # the port is taken, the address is not ours
        where = f"{args.host}:{args.port}"
        raise RtaxError(f"serve: cannot listen on {where} ({exc.strerror})") from None
    return 0
