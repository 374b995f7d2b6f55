"""textual-serve's server with `servegate`'s rule in front of every route.

textual-serve (1.1) answers any request: its page, its static files, its downloads,
and a websocket that starts a console process. `GatedServer` keeps its page, static
files and websocket (rtax's console delivers no file, so there is no download route)
and puts one aiohttp middleware before all of them (unknown paths included), so a
refused request gets 403 before a handler runs: no console process is started for it.
The page is served only with the token in its URL, and gives the terminal a websocket
URL with the same token, on the request's own (checked) Host; no cookie is ever set.
Every answer says: no Referer, no framing, no cache, and a content policy that lets the
page load only from this server (textual-serve's page links a font on Google's servers:
the link is taken out of its template), so the page's URL, token included, goes to no
other server. aiohttp's access log is off (it would write every request's URL, token
included, and grow with a flood); refusals go through the gate's bounded log instead.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp_jinja2
import jinja2
from aiohttp import web
from aiohttp.web_runner import GracefulExit
from textual_serve.server import Server

from rtax_tui.commands.servegate import TOKEN_PARAM, Gate, RefusalLog, shown

_FOREIGN_LINK = re.compile(r"<link\s[^>]*href=\"https?://[^>]*>", re.S)
_HEAD = '<head>\n    <meta name="referrer" content="no-referrer" />'
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Refused(logging.Handler):
    """aiohttp's own log lines (a request its parser refused before any route: a
    duplicate `Host`, a bad path; each would be a traceback) go through the same
    bounded log as the gate's refusals: one short line each, at most 10 a minute."""

    def __init__(self, refusals: RefusalLog) -> None:
        super().__init__(logging.WARNING)
        self.refusals = refusals

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        why = f"{record.getMessage()}: {type(exc).__name__}" if exc else record.getMessage()
        self.refusals.refused(f"rtax serve: refused a request aiohttp could not take: {shown(why)}")


def _policy(host: str) -> str:
    return (
        "default-src 'self'; "
        f"connect-src 'self' ws://{host}; "
        "script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; font-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


class GatedServer(Server):
    """A textual-serve Server whose every route first asks the gate."""

    def __init__(self, command: str, gate: Gate, title: str) -> None:
        super().__init__(command, host=gate.bind or "0.0.0.0", port=gate.port, title=title)
        self.gate = gate
        self.refusals = RefusalLog()

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FunctionLoader(self._template))
        app.add_routes(
            [
                web.get("/", self.handle_index, name="index"),
                web.get("/ws", self.handle_websocket, name="websocket"),
                web.static("/static", self.statics_path, show_index=False, name="static"),
            ]
        )
        return app

    def _template(self, name: str) -> str:
        """textual-serve's page template, without its link to Google's fonts (the
        terminal's font is among the static files): the page asks only this server."""
        text = (Path(self.templates_path) / Path(name).name).read_text()
        return _FOREIGN_LINK.sub("", text).replace("<head>", _HEAD, 1)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        origin = request.headers.get("Origin")
        tokens = request.query.getall(TOKEN_PARAM, [])
        # the route aiohttp matched (after it normalized the path), not the path's text
        public = request.match_info.route.name == "static"
        why = self.gate.refusal(host, origin, tokens, public=public)
        if why is not None:
            self.refusals.refused(
                f"rtax serve: refused {request.method} {shown(request.path)}: {why} "
                f"(Host {shown(host)}, Origin {shown(origin)}, from {request.remote})"
            )
            return self._headers(web.Response(status=403, text="403: forbidden\n"), "")
        response = await handler(request)
        if response.prepared:  # a websocket: its headers are already sent
            return response
        return self._headers(response, request.host)

    @staticmethod
    def _headers(response: web.StreamResponse, host: str) -> web.StreamResponse:
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-store"
        policy = _policy(host) if host else "default-src 'none'"
        response.headers["Content-Security-Policy"] = policy
        return response

    async def handle_index(self, request: web.Request) -> web.Response:
        """textual-serve's page, its URLs on the Host the browser used (checked), its
        websocket's with the token the page was asked with (the gate checked it)."""
        token = request.query[TOKEN_PARAM]
        try:
            font_size = min(max(int(request.query.get("fontsize", "16")), 6), 64)
        except ValueError:
            font_size = 16
        context: dict[str, Any] = {
            "font_size": font_size,
            # textual.js appends "?width=...&height=..." to this URL: the `&` makes
            # that a parameter of its own ("?width"), which `handle_websocket` reads
            "app_websocket_url": f"ws://{request.host}/ws?{urlencode({TOKEN_PARAM: token})}&",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's websocket, its terminal's size read where textual.js put it
        (after the token: `/ws?token=...&?width=80&height=24`)."""
        query = request.query
        if "?width" in query:
            size = {"width": query["?width"], "height": query.get("height", "24")}
            request = request.clone(rel_url=request.rel_url.with_query(size))
        return await super().handle_websocket(request)

    def _announce(self, *_: object) -> None:
        """Called by aiohttp once the port listens: the URL to open."""
        print(f"rtax serve: the console at {self.gate.url()}", flush=True)
        print("rtax serve: Ctrl-C stops it (and every console it started)", flush=True)

    def serve(self, debug: bool = False) -> None:
        """textual-serve's `serve`, without its access log and banner."""
        self.debug = debug
        aiohttp_log = logging.getLogger("aiohttp")
        aiohttp_log.handlers = [_Refused(self.refusals)]
        aiohttp_log.propagate = False
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.add_signal_handler(signal.SIGINT, self.request_exit)
        loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        try:
            web.run_app(
                self._make_app(),
                host=self.host,
                port=self.port,
                handle_signals=False,
                loop=loop,
                access_log=None,
                print=self._announce,
            )
        except GracefulExit:
            pass
        finally:
            self.refusals.flush()
