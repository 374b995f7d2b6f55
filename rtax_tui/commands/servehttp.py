"""textual-serve's server with `servegate`'s rule in front of every route.

textual-serve (1.1) answers any request: its page, its static files, its downloads,
and a websocket that starts a console process. `GatedServer` keeps its handlers and
puts one aiohttp middleware before all of them (unknown paths included), so a refused
request gets 403 before a handler runs: no console process is started for it. The
printed URL's page answers with the cookie and a script that opens the page without
the token. The
page's URLs are built from the request's own (checked) Host, so a user who opened
`localhost` keeps talking to `localhost` and the cookie goes along. Every answer says:
no Referer (the page's URL holds the token), no framing, no cache, and a content
policy that lets the page load only from this server (textual-serve's page links a font
on Google's servers: the link is taken out of its template). aiohttp's access log is
off (it would write every request's URL, token included, and grow with a flood);
refusals go through the gate's bounded log instead.
"""

from __future__ import annotations

import asyncio
import json
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
_ONWARD = """<!DOCTYPE html>
<html><head><meta name="referrer" content="no-referrer" /><title>rtax</title>
<script>window.location.replace(%s);</script></head><body></body></html>
"""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
                web.get("/download/{key}", self.handle_download, name="download"),
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
        why = self.gate.refusal(host, origin, tokens, request.cookies.get(self.gate.cookie))
        if why is not None:
            self.refusals.refused(
                f"rtax serve: refused {request.method} {shown(request.path)}: {why} "
                f"(Host {shown(host)}, Origin {shown(origin)}, from {request.remote})"
            )
            return self._headers(web.Response(status=403, text="403: forbidden\n"), "")
        if tokens and request.path == "/":
            return self._headers(self._without_token(request), request.host)
        response = await handler(request)
        if tokens and not response.prepared:  # a websocket's headers are already sent
            response.headers["Set-Cookie"] = self.gate.set_cookie()
        if response.prepared:
            return response
        return self._headers(response, request.host)

    def _without_token(self, request: web.Request) -> web.StreamResponse:
        """The page opened with the token: the cookie, and a page of nothing but a
        script that replaces itself with the console's page without the token (so the
        token is in no Referer, and not in the address bar or the history's entry:
        Chromium sent the page's URL as Referer for an inline style's image despite the
        no-referrer policy). Not an HTTP redirect: after a link on another site's page,
        the browser would not send the `Strict` cookie to the redirect's target; a
        navigation this page starts is this site's own."""
        rest = [(k, v) for k, v in request.query.items() if k != TOKEN_PARAM]
        location = json.dumps("/" + ("?" + urlencode(rest) if rest else "")).replace("<", "\\u003c")
        page = _ONWARD % location
        response = web.Response(text=page, content_type="text/html")
        response.headers["Set-Cookie"] = self.gate.set_cookie()
        return response

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
        """textual-serve's page, its URLs on the Host the browser used (checked)."""
        try:
            font_size = min(max(int(request.query.get("fontsize", "16")), 6), 64)
        except ValueError:
            font_size = 16
        context: dict[str, Any] = {
            "font_size": font_size,
            "app_websocket_url": f"ws://{request.host}/ws",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    def _announce(self, *_: object) -> None:
        """Called by aiohttp once the port listens: the URL to open."""
        print(f"rtax serve: the console at {self.gate.url()}", flush=True)
        print("rtax serve: Ctrl-C stops it (and every console it started)", flush=True)

    def serve(self, debug: bool = False) -> None:
        """textual-serve's `serve`, without its access log and banner."""
        self.debug = debug
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
