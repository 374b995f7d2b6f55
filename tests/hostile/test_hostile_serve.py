"""`rtax serve` against forged clients: what a web page (or a local process) could send.

One real `rtax serve` (a replay console) on a free loopback port; each case sends a
request as raw bytes, so every header is exactly what the attack needs: a websocket
from a foreign Origin (`http://evil.example`, `null`, another port of 127.0.0.1,
https), a foreign Host (DNS rebinding: the attacker's name resolving to 127.0.0.1),
no token, a wrong token, the right token in a wrong place (path, Referer, a header,
another query name, another port's cookie). Each gets 403, and the server's process
tree stays empty: no console was started. A control with the right token, Host and
Origin gets its websocket and a console, so the check can fail. A flood of refused
requests leaves a bounded number of lines on stderr, and the token is in none of them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import dead, stop_gracefully

pytest.importorskip("textual_serve", reason="textual-serve is not installed (rtax[serve])")

ROOT = Path(__file__).resolve().parents[2]
T0 = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
WS = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


class Served:
    def __init__(self, proc: subprocess.Popen, port: int, token: str, log: Path) -> None:
        self.proc, self.port, self.token, self.log = proc, port, token, log
        self.here = f"127.0.0.1:{port}"

    def send(self, path: str, headers: str, *, ws: bool = True) -> tuple[int, bytes, socket.socket]:
        """Sends `GET path` with `headers` (each ending in CRLF); the status, the
        response's head and the socket, left open (an accepted websocket stays up)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        close = "" if ws else "Connection: close\r\n"  # then the whole answer, to its end
        s.sendall(f"GET {path} HTTP/1.1\r\n{headers}{WS if ws else close}\r\n".encode())
        head = b""
        while ws is False or b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                break
            head += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
        assert m, head[:200]
        return int(m.group(1)), head, s

    def status(self, path: str, headers: str, *, ws: bool = True) -> int:
        code, _, s = self.send(path, headers, ws=ws)
        s.close()
        return code

    def tree(self) -> list[int]:
        """The server's descendants (a console, its shell, its engine)."""
        kids: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [self.proc.pid]
        while todo:
            for k in kids.get(todo.pop(), []):
                if not dead(k, 0):
                    out.append(k)
                    todo.append(k)
        return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("hostile-serve")
    rec = tmp / "hostile-t0.jsonl"
    rec.write_bytes(T0.read_bytes())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, err = tmp / "serve.out", tmp / "serve.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui", "serve", "--port", str(port), "replay", str(rec)],
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=o,
            stderr=e,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(r"\?token=([A-Za-z0-9_-]+)", out.read_text())):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "rtax serve printed no URL"
            time.sleep(0.1)
        yield Served(proc, port, m.group(1), err)
    finally:
        stop_gracefully(proc)


def _cases(port: int, t: str) -> list[tuple[str, str, str]]:
    here = f"127.0.0.1:{port}"
    own = f"Host: {here}\r\nOrigin: http://{here}\r\n"
    return [
        # a page of another site opens the websocket (it knows no token)
        ("foreign Origin", "/ws", f"Host: {here}\r\nOrigin: http://evil.example\r\n"),
        # ... and even with the token: Origin alone refuses it
        (
            "foreign Origin, token",
            f"/ws?token={t}",
            f"Host: {here}\r\nOrigin: http://evil.example\r\n",
        ),
        ("Origin null", f"/ws?token={t}", f"Host: {here}\r\nOrigin: null\r\n"),
        ("another local port", f"/ws?token={t}", f"Host: {here}\r\nOrigin: http://127.0.0.1:1\r\n"),
        ("https Origin", f"/ws?token={t}", f"Host: {here}\r\nOrigin: https://{here}\r\n"),
        # DNS rebinding: the attacker's name now resolves to 127.0.0.1
        (
            "rebinding ws",
            f"/ws?token={t}",
            f"Host: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\n",
        ),
        (
            "rebinding cookie",
            "/ws",
            f"Host: evil.example:{port}\r\nCookie: rtax-serve-{port}={t}\r\n",
        ),
        ("userinfo Host", f"/ws?token={t}", f"Host: {here}@evil.example\r\n"),
        ("no token", "/ws", own),
        ("wrong token", "/ws?token=" + "A" * len(t), own),
        ("wrong cookie", "/ws", own + f"Cookie: rtax-serve-{port}=nope\r\n"),
        ("two tokens", f"/ws?token={t}&token=x", own),
        # the right token in a wrong place
        ("token in path", f"/ws/{t}", own),
        ("token in Referer", "/ws", own + f"Referer: http://{here}/?token={t}\r\n"),
        ("token in a header", "/ws", own + f"Authorization: token {t}\r\nX-Token: {t}\r\n"),
        ("another query name", f"/ws?Token={t}&t={t}", own),
        ("another port's cookie", "/ws", own + f"Cookie: rtax-serve-{port + 1}={t}\r\n"),
        ("token in Origin", "/ws", f"Host: {here}\r\nOrigin: http://{here}/?token={t}\r\n"),
    ]


def test_every_forged_websocket_gets_403_and_starts_nothing(served: Served) -> None:
    for name, path, headers in _cases(served.port, served.token):
        assert served.status(path, headers) == 403, name
    # HTTP/1.1 without a Host: aiohttp's parser refuses it (400) before the gate
    assert served.status(f"/ws?token={served.token}", "") in (400, 403)
    time.sleep(1)  # a console, had one been started, would show by now
    assert served.tree() == [], "a refused request started a process"


@pytest.mark.parametrize("path", ["/", "/download/x", "/nowhere"])
def test_every_route_needs_the_token_and_the_host(served: Served, path: str) -> None:
    t, here = served.token, served.here
    assert served.status(path, f"Host: {here}\r\n", ws=False) == 403
    sep = "&" if "?" in path else "?"
    rebound = f"Host: evil.example:{served.port}\r\n"
    assert served.status(f"{path}{sep}token={t}", rebound, ws=False) == 403
    # no cookie lets anything in (a browser sends 127.0.0.1's cookies to every port)
    cookie = f"Host: {here}\r\nCookie: rtax-serve-{served.port}={t}; token={t}\r\n"
    assert served.status(path, cookie, ws=False) == 403
    expected = 200 if path == "/" else 404  # rtax's console delivers no download
    assert served.status(f"{path}{sep}token={t}", f"Host: {here}\r\n", ws=False) == expected
    assert served.tree() == []


def test_the_static_files_need_only_the_host(served: Served) -> None:
    """textual-serve's script and style, the same for everyone, hold nothing secret."""
    here, rebound = served.here, f"evil.example:{served.port}"
    assert served.status("/static/js/textual.js", f"Host: {here}\r\n", ws=False) == 200
    assert served.status("/static/js/textual.js", f"Host: {rebound}\r\n", ws=False) == 403
    origin = f"Host: {here}\r\nOrigin: http://evil.example\r\n"
    assert served.status("/static/js/textual.js", origin, ws=False) == 403
    # a path that climbs out of /static/ is the route it lands on, with its rule
    assert served.status("/static/../ws", f"Host: {here}\r\n") == 403
    assert served.tree() == []


def test_the_page_sets_no_cookie_and_leaks_no_referer(served: Served) -> None:
    path = f"/?fontsize=20&token={served.token}"
    _, head, s = served.send(path, f"Host: {served.here}\r\n", ws=False)
    s.close()
    text = head.decode()
    assert "Set-Cookie" not in text
    # the terminal's websocket carries the token; the page asks nothing of another server
    assert f'"ws://{served.here}/ws?token={served.token}&amp;"' in text
    assert 'href="/static/' in text and not re.search(r'(?:href|src)="(?:https?:)?//', text)
    assert "Referrer-Policy: no-referrer" in text
    assert "frame-ancestors 'none'" in text and "X-Frame-Options: DENY" in text


def test_the_user_gets_a_console_and_the_log_stays_bounded(served: Served) -> None:
    """The control: right token, Host and Origin start a console (so the 403s above
    are the gate's). Then a flood: stderr gains a bounded count of lines, no token."""
    here = served.here
    code, _, s = served.send(
        f"/ws?token={served.token}", f"Host: {here}\r\nOrigin: http://{here}\r\n"
    )
    try:
        assert code == 101
        deadline = time.monotonic() + 20
        while not served.tree():
            assert time.monotonic() < deadline, "no console was started for the user"
            time.sleep(0.1)
        for pid in served.tree():  # the console (and what it starts) never learns the token
            for what in ("cmdline", "environ"):
                try:
                    assert served.token.encode() not in Path(f"/proc/{pid}/{what}").read_bytes()
                except OSError:
                    pass  # it ended meanwhile
    finally:
        s.close()
    deadline = time.monotonic() + 20
    while served.tree() and time.monotonic() < deadline:
        time.sleep(0.1)
    before = served.log.read_text().count("\n")
    for i in range(300):
        assert served.status(f"/ws?token=guess{i}", f"Host: {here}\r\n") == 403
    time.sleep(0.5)
    text = served.log.read_text()
    assert text.count("\n") - before <= 10, text[-2000:]
    assert served.token not in text and "guess" not in text


ATTACK = """<!doctype html><html><body><script>
window.results = {};
const P = %d;
function ws(name, url) {
  return new Promise((resolve) => {
    const w = new WebSocket(url);
    w.onopen = () => resolve("open");
    w.onerror = () => resolve("error");
    setTimeout(() => resolve("timeout"), 8000);
  }).then((r) => { window.results[name] = r; });
}
const framed = new Promise((resolve) => {  // a sandboxed frame: Origin null
  const f = document.createElement("iframe");
  f.sandbox = "allow-scripts";
  f.srcdoc = "<script>const w = new WebSocket('ws://127.0.0.1:" + P + "/ws');"
    + "w.onopen = () => parent.postMessage('open', '*');"
    + "w.onerror = () => parent.postMessage('error', '*');<\\/script>";
  window.addEventListener("message", (e) => { window.results["Origin null"] = e.data; resolve(); });
  document.body.appendChild(f);
});
const console_frame = document.createElement("iframe");  // the console itself, framed
console_frame.src = "http://127.0.0.1:" + P + "/";
document.body.appendChild(console_frame);
Promise.all([
  ws("ws", "ws://127.0.0.1:" + P + "/ws"),
  ws("ws localhost", "ws://localhost:" + P + "/ws"),
  ws("ws guessed token", "ws://127.0.0.1:" + P + "/ws?token=guess"),
  fetch("http://127.0.0.1:" + P + "/", {credentials: "include"})
    .then((r) => r.status, () => "unreadable").then((v) => { window.results["fetch"] = v; }),
  framed,
]).then(() => { window.finished = true; });
</script></body></html>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_pages_of_other_origins_in_chromium_get_nothing(served: Served, tmp_path: Path) -> None:
    """The user opened the console; then a server on another port of 127.0.0.1 is
    visited and hears no token; a page of it sends the browser to the console and gets
    403; pages of another port of 127.0.0.1 (same site), of another site, and of a
    rebound name (evil.example resolving to 127.0.0.1) try the websocket, a sandboxed
    frame (Origin null), a framed console and a read of the page: nothing opens."""
    import asyncio
    import functools
    import http.server
    import threading

    from tests.commands.test_serve import chromium

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "attack.html").write_text(ATTACK % served.port)
    url = f"http://127.0.0.1:{served.port}/?token={served.token}"
    (tmp_path / "www" / "link.html").write_text(f'<a id="l" href="{url}">the console</a>')
    heard: list[str] = []  # every request line and header the attacker's server got

    class Listening(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(f"{self.requestline}\n{self.headers}")
            super().do_GET()

        def log_message(self, *a: object) -> None:
            pass

    handler = functools.partial(Listening, directory=str(tmp_path / "www"))
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    q = evil.server_address[1]

    async def attack() -> None:
        rules = "--host-resolver-rules=MAP evil.example 127.0.0.1"
        async with chromium(tmp_path / "chr", rules) as page:

            async def until(expr: str, timeout: float = 30) -> None:
                deadline = time.monotonic() + timeout
                while not await page.js(expr):
                    assert time.monotonic() < deadline, expr
                    await asyncio.sleep(0.1)

            # the user, once: the printed URL, as a link on another site's page (a chat,
            # a notebook)
            await page.call("Page.navigate", url=f"http://evil.example:{q}/link.html")
            await until("document.getElementById('l') !== null")
            await page.js("document.getElementById('l').click()")
            await until("document.body && document.body.className.includes('-first-byte')")
            assert served.tree(), "the user's page started no console"
            # then another server on the user's loopback (any port: cookies ignore
            # ports) is visited, as a page and as a fetch with credentials: it hears no
            # token (no cookie holds it, no Referer carries it)
            await page.call("Page.navigate", url=f"http://127.0.0.1:{q}/link.html")
            await until("document.getElementById('l') !== null")
            await page.js(f"fetch('http://127.0.0.1:{q}/x', {{credentials: 'include'}})")
            await page.js("document.getElementById('l').click()")  # the console again
            await until("document.body && document.body.className.includes('-first-byte')")
            await page.call("Page.navigate", url=f"http://127.0.0.1:{q}/link.html?back")
            await until("document.getElementById('l') !== null")
            assert len(heard) >= 3 and not [h for h in heard if served.token in h], heard
            # a same-site page (127.0.0.1, another port) sends the browser to the
            # console, as a top-level navigation: no token, nothing starts
            await until("true")
            deadline = time.monotonic() + 20
            while served.tree():
                assert time.monotonic() < deadline, "the user's console did not end"
                await asyncio.sleep(0.1)
            await page.js(f"window.location.href = 'http://127.0.0.1:{served.port}/'")
            await until(f"window.location.port === '{served.port}'")
            await until("document.readyState === 'complete'")
            assert "403" in await page.js("document.body.innerText")
            await asyncio.sleep(1)
            assert served.tree() == [], "a same-site page's navigation started a console"
            await page.call("Page.navigate", url="about:blank")
            deadline = time.monotonic() + 20
            while served.tree():
                assert time.monotonic() < deadline, "the user's console did not end"
                await asyncio.sleep(0.1)
            for origin in (f"http://127.0.0.1:{q}", f"http://evil.example:{q}"):
                await page.call("Page.navigate", url=f"{origin}/attack.html")
                await until("window.finished === true")
                results = await page.js("window.results")
                assert results.pop("fetch") == "unreadable"  # no CORS: the page reads nothing
                assert set(results.values()) == {"error"}, (origin, results)
                await asyncio.sleep(1)
                assert served.tree() == [], f"a page of {origin} started a console"
            # DNS rebinding: the attacker's page, its name now resolving to 127.0.0.1
            # (the attacker's page came from its own server, with no policy of ours: the
            # browser's CSP is bypassed to run its script in that origin)
            rebound = f"evil.example:{served.port}"
            await page.call("Page.setBypassCSP", enabled=True)
            await page.call("Page.navigate", url=f"http://{rebound}/")
            await until("document.readyState === 'complete'")
            assert "403" in await page.js("document.body.innerText")
            res = await page.call(
                "Runtime.evaluate",
                expression="fetch('/').then((r) => r.status)",
                awaitPromise=True,
                returnByValue=True,
            )
            assert res["result"]["value"] == 403
            await page.js(
                f"window.r = 'wait'; const w = new WebSocket('ws://{rebound}/ws');"
                "w.onopen = () => { window.r = 'open'; };"
                "w.onerror = () => { window.r = 'error'; };"
            )
            await until("window.r !== 'wait'")
            assert await page.js("window.r") == "error"
            await asyncio.sleep(1)
            assert served.tree() == [], "the rebound page started a console"

    try:
        asyncio.run(attack())
    finally:
        evil.shutdown()
        evil.server_close()
