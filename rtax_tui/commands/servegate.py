"""Who may use `rtax serve`: the one rule (token, Host, Origin) and its bounded log.

A page in the user's browser can reach the console's port (it is on the user's own
machine), and the console can start runs with any driver option (the docker socket,
`cap_add`, added hosts). So every request must show three things before anything runs:

- the secret token of the URL `rtax serve` printed, as the `token` query parameter,
  on the two routes that reach a console: the page (which holds it in the websocket's
  URL it gives the terminal) and the websocket (which starts the console). Nothing
  else carries it: no cookie, since a browser sends a cookie of 127.0.0.1 to every
  port of 127.0.0.1 (another local server the user visits would learn it) and along
  with any navigation a same-site page starts. A page on another site does not know
  it; a guessed one fails (`secrets.token_urlsafe(32)`). The static files (textual-serve's
  script, style and font, the same for everyone) need no token, only the Host;
- a `Host` that names the address served, port included: a page on a name whose DNS
  answer was switched to 127.0.0.1 (DNS rebinding) sends its own name and is refused;
- an `Origin`, when the browser sends one (always, on a websocket), that is this same
  address over http: a page of another origin, or of the same host on another port,
  or `null` (a sandboxed frame, a `data:` page), is refused.

Loopback names (`localhost`) are accepted only when the server listens on loopback
(or on every address, which includes loopback). This module decides; `serve.py` only
asks it, before textual-serve's handlers, so a refused request starts nothing.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rtax_tui.model.events import one_line
from rtax_tui.model.netaddr import is_loopback

TOKEN_PARAM = "token"
WILDCARDS = ("", "0.0.0.0", "::")
REFUSALS_PER_MINUTE = 10
_SHOWN = 80  # characters of a client's header shown in a refusal line
_HOST = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]{2,45})\]|(?P<name>[A-Za-z0-9][A-Za-z0-9.-]{0,252}))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)


def new_token() -> str:
    """256 random bits, URL-safe: what a page would have to guess."""
    return secrets.token_urlsafe(32)


def split_host(value: str) -> tuple[str, int] | None:
    """`Host` (or an Origin's host part) as (lowercased host, port; 80 when absent), or
    None when it is anything else (userinfo, a path, spaces, a port out of range)."""
    m = _HOST.fullmatch(value)
    if m is None:
        return None
    port = int(m["port"]) if m["port"] else 80
    if not 0 < port < 65536:
        return None
    return (m["v6"] or m["name"]).lower(), port


def is_own_address(host: str) -> bool:
    """An IP literal that this machine has: binding a socket to it succeeds."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
    except OSError:
        return False
    return True


@dataclass
class Gate:
    """The rule for one server: the address it listens on, its port, its token."""

    bind: str
    port: int
    token: str = field(default_factory=new_token, repr=False)
    own_address: Callable[[str], bool] = is_own_address
    hostnames: tuple[str, ...] = ()  # a wildcard bind's names; default: this machine's

    def __post_init__(self) -> None:
        self.bind = self.bind.strip("[]").lower()
        if self.bind in WILDCARDS and not self.hostnames:
            names = (socket.gethostname().lower(), socket.getfqdn().lower())
            self.hostnames = tuple(dict.fromkeys(names))

    @property
    def loopback(self) -> bool:
        return is_loopback(self.bind)

    def serves(self, host: str) -> bool:
        """Whether `host` (lowercased, no port) names the address listened on."""
        if self.bind in WILDCARDS:
            return host == "localhost" or host in self.hostnames or self.own_address(host)
        if host == self.bind or (self.loopback and host == "localhost"):
            return True
        return self.bind == "localhost" and host in ("127.0.0.1", "::1")

    def url_host(self) -> str:
        """The host part of the printed URL."""
        host = self.hostnames[0] if self.bind in WILDCARDS else self.bind
        return f"[{host}]" if ":" in host else host

    def url(self) -> str:
        return f"http://{self.url_host()}:{self.port}/?{TOKEN_PARAM}={self.token}"

    def _token_ok(self, given: str) -> bool:
        if len(given) > 200:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def refusal(
        self, host: str | None, origin: str | None, tokens: list[str], *, public: bool = False
    ) -> str | None:
        """Why a request is refused (one short phrase), or None when it may proceed.

        `tokens` are the values of the `token` query parameter (more than one is
        refused); a `public` route (the static files) needs the Host and Origin only."""
        where = split_host(host or "")
        if where is None or where[1] != self.port or not self.serves(where[0]):
            return "foreign Host"
        if origin is not None:
            if not origin.startswith("http://"):
                return "foreign Origin"
            seen = split_host(origin[len("http://") :])
            if seen is None or seen[1] != self.port or not self.serves(seen[0]):
                return "foreign Origin"
        if public:
            return None
        if len(tokens) > 1:
            return "more than one token"
        if not tokens:
            return "no token"
        return None if self._token_ok(tokens[0]) else "wrong token"


def bind_warning(bind: str) -> str | None:
    """One line when the server listens beyond loopback, else None."""
    if is_loopback(bind.strip("[]").lower()):
        return None
    return (  # `--host` shown one line, escapes visible: it is echoed to a terminal
        f"rtax serve: warning: listening on {one_line(bind) or '*'}, not loopback: whoever "
        "reaches it with the URL's token can start runs, and plain HTTP carries the token "
        "in clear"
    )


def shown(value: str | None) -> str:
    """A client's header for a log line: quoted, escapes visible, bounded."""
    if value is None:
        return "-"
    return ascii(value[:_SHOWN]) + ("..." if len(value) > _SHOWN else "")


class RefusalLog:
    """At most `per_minute` refusal lines a minute, then one line with the count of the
    rest, so a flood of bad requests cannot grow stderr (or a log file) without bound."""

    def __init__(
        self,
        per_minute: int = REFUSALS_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], object] | None = None,
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.start = clock()
        self.shown = 0
        self.dropped = 0

    def _roll(self) -> None:
        if self.clock() - self.start >= 60:
            self.flush()
            self.start = self.clock()
            self.shown = 0

    def refused(self, line: str) -> None:
        self._roll()
        if self.shown < self.per_minute:
            self.shown += 1
            self.write(line)
        else:
            self.dropped += 1

    def flush(self) -> None:
        """The count of the lines not shown, if any (at a minute's end, at exit)."""
        if self.dropped:
            self.write(f"rtax serve: {self.dropped} more requests refused (not shown)")
            self.dropped = 0
