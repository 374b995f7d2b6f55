"""`rtax serve` for real: the console in headless Chromium, through textual-serve.

The test starts `rtax serve` on a free loopback port, opens the page in Debian's
`chromium` driven over the DevTools protocol, waits for the page's terminal to get
its first byte, and then checks what a user would see: the websocket frames the page
received hold the console's table (the replayed cells and "trials 36/36"), a key
typed into the page reaches the console (the selection moves to the next cell), and
a screenshot shows a drawn screen, not a blank page or textual-serve's intro dialog.
The page is opened at the URL `rtax serve` printed (its token in the query); the
page gives the token to its websocket; no cookie is set.
At the end the server is stopped (SIGTERM, as Ctrl-C would) while the browser is
still connected, and no process of it is left: server, console, engine.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.procs import dead, stop_gracefully

ROOT = Path(__file__).resolve().parents[2]
T0 = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
CHROMIUM = shutil.which("chromium")
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _assert_nothing_outlives(marker: str) -> None:
    """No process whose command line names `marker` is left, 10 s after the server ended."""
    deadline = time.monotonic() + 10
    while _pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_with(marker) == [], "a process of rtax serve outlived it"


def _pids_with(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (the test's own temporary path)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd and not dead(int(d.name), 0):
                out.append(int(d.name))
    return out


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> str:
    """Waits until `rtax serve` listens; returns the URL it printed (with its token)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"rtax serve exited with {proc.returncode}")
        m = re.search(r"(http://\S+/\?token=[A-Za-z0-9_-]+)", log.read_text())
        if m:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return m.group(1)
        time.sleep(0.1)
    raise AssertionError("rtax serve did not listen in time")


class Page:
    """A Chromium page over the DevTools protocol; keeps the websocket frames it saw."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.n = 0
        self.received = bytearray()  # what the page's websocket received, decoded
        self.requests: list[dict] = []  # every request the page made (url, headers)
        self.sizes: list[tuple[int, int]] = []  # the terminal sizes the page sent its app
        self.mark = 0  # len(received) when the last size was sent

    async def call(self, method: str, **params):
        self.n += 1
        me = self.n
        await self.ws.send_json({"id": me, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=30)
            if msg.get("id") == me:
                assert "error" not in msg, msg
                return msg.get("result", {})
            if msg.get("method") == "Network.requestWillBeSent":
                self.requests.append(msg["params"]["request"])
            if msg.get("method") == "Network.webSocketCreated":
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(msg["params"]["url"]).query)
                if "width" in q and "height" in q:  # textual-serve's first size
                    self.sizes.append((int(q["width"][0]), int(q["height"][0])))
                    self.mark = len(self.received)
            if msg.get("method") == "Network.webSocketFrameSent":
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    sent = json.loads(msg["params"]["response"]["payloadData"])
                    if isinstance(sent, list) and sent and sent[0] == "resize":
                        self.sizes.append((int(sent[1]["width"]), int(sent[1]["height"])))
                        self.mark = len(self.received)
            if msg.get("method") == "Network.webSocketFrameReceived":
                frame = msg["params"]["response"]
                data = frame["payloadData"]
                self.received += base64.b64decode(data) if frame["opcode"] == 2 else data.encode()

    async def js(self, expression: str):
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"].get("value")

    def text(self) -> str:
        """The console's output so far, escape sequences removed."""
        return ANSI.sub(b"", bytes(self.received)).decode("utf-8", "replace")

    async def until(self, cond, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while not await cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"not met in time; page text ends: {self.text()[-800:]!r}")
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def chromium(user_dir: Path, *flags: str) -> AsyncIterator[Page]:
    """Headless Chromium with one page driven over the DevTools protocol."""
    import aiohttp

    chrome = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={user_dir}",
            "--window-size=1280,800",
            *flags,
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        portfile = user_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (portfile.exists() and portfile.read_text().strip()):
            assert time.monotonic() < deadline and chrome.poll() is None, "chromium did not start"
            await asyncio.sleep(0.05)
        port = int(portfile.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [p for p in json.load(r) if p["type"] == "page"]
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Network.enable")
                await page.call("Page.enable")
                yield page
    finally:
        os.killpg(chrome.pid, signal.SIGKILL)
        chrome.wait()


async def _browse(url: str, user_dir: Path, shot: Path, marker: str, seen: list[int]) -> str:
    """Opens `url`, checks the console in it; `seen` gets the processes holding `marker`
    while the page is still connected (its console ends when the browser goes)."""
    async with chromium(user_dir) as page:
        await page.call("Page.navigate", url=url)

        async def first_byte() -> bool:
            return "-first-byte" in str(await page.js("document.body.className"))

        await page.until(first_byte)

        async def drawn() -> bool:
            await page.js("1")  # collect the frames that arrived meanwhile
            return "trials 36/36" in page.text()

        await page.until(drawn)
        # the page asks only its server (textual-serve's Google font is not fetched), so
        # its URL (the token) goes to no other server, and it keeps no cookie
        here = urllib.parse.urlsplit(url).netloc
        asked = [r for r in page.requests if not r["url"].startswith(("data:", "blob:"))]
        assert {urllib.parse.urlsplit(r["url"]).netloc for r in asked} == {here}, asked
        cookies = await page.call("Network.getAllCookies")
        assert cookies["cookies"] == [], cookies
        text = page.text()
        assert "local/local/t0/exec" in text and "local/stage/t0/shell" in text
        assert "selected: local/local/t0/exec" in text
        # a key typed into the page reaches the console: the next cell
        await page.js("document.querySelector('.xterm-helper-textarea').focus()")
        await page.call(
            "Input.dispatchKeyEvent",
            type="keyDown",
            key="s",
            text="s",
            code="KeyS",
            windowsVirtualKeyCode=83,
        )
        await page.call(
            "Input.dispatchKeyEvent",
            type="keyUp",
            key="s",
            code="KeyS",
            windowsVirtualKeyCode=83,
        )

        async def moved() -> bool:
            await page.js("1")
            return "selected: local/local/t0/shell" in page.text()

        await page.until(moved)
        seen += _pids_with(marker)
        await asyncio.sleep(0.5)  # the browser paints the last frames
        res = await page.call("Page.captureScreenshot", format="png")
        shot.write_bytes(base64.b64decode(res["data"]))
        assert "-closed" not in str(await page.js("document.body.className"))
        return page.text()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_serve_shows_the_console_in_headless_chromium(tmp_path: Path) -> None:
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (rtax[serve])")
    from PIL import Image

    rec = tmp_path / "served-t0.jsonl"  # its path marks every process of this test
    shutil.copy(T0, rec)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtax_tui",
            "serve",
            "--port",
            str(port),
            "replay",
            str(rec),
            "--speed",
            "max",
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    shot = tmp_path / "console.png"
    try:
        url = _wait_listening(port, server, tmp_path / "serve.log")
        assert url.startswith(f"http://127.0.0.1:{port}/?token=")
        with socket.socket() as s:  # loopback only by default
            assert s.connect_ex((_an_address_not_loopback() or "127.0.0.2", port)) != 0
        seen: list[int] = []
        browser_done = asyncio.run(_browse(url, tmp_path / "chr", shot, str(rec), seen))
        assert "rtax" in browser_done
        consoles = [p for p in seen if p != server.pid]
        assert consoles, "no console process was started for the page"
    finally:
        stop_gracefully(server)
    _assert_nothing_outlives(str(rec))
    log.close()
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()[-2000:]

    img = Image.open(shot).convert("RGB")
    assert img.size[0] >= 1000 and img.size[1] >= 600
    colors = img.getcolors(maxcolors=1 << 16) or []
    assert len(colors) >= 16, "the screenshot is (nearly) blank"
    intro_bg = (0x0C, 0x18, 0x1F)  # textual-serve's page behind its intro dialog
    share = sum(n for n, c in colors if c == intro_bg) / (img.size[0] * img.size[1])
    assert share < 0.5, "the screenshot shows textual-serve's intro, not the console"


def _an_address_not_loopback() -> str | None:
    """One of this machine's own non-loopback IPv4 addresses, if it has one."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5)
    except OSError:
        return None
    for a in out.stdout.split():
        if "." in a and not a.startswith("127."):
            return a
    return None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "--port: expected an integer 1..65535, got 70000"),
        (["--port", "0"], "argument --port"),
        (["report", "x.jsonl"], "`rtax report` is not a console"),
        (["probe"], "`rtax probe` is not a console"),
        (["run", "no-such-profile"], "no-such-profile.toml: cannot open profile"),
        (["run", "bad.toml"], "bad.toml: not valid TOML"),  # it exists, and does not parse
        (["run", "wrong.toml"], "wrong.toml:2: run.trials: expected integer"),
        (["replay", "missing.jsonl"], "missing.jsonl: cannot open the recording"),
        (["run", "t0", "--trials", "0"], "--trials"),
        # each tab got a headless run it could not see or stop, and no console
        (["run", "t0", "--headless"], "serve: --headless runs without the console"),
    ],
)
def test_bad_serve_input_is_one_line_and_exit_2(tmp_path: Path, args, message) -> None:
    (tmp_path / "bad.toml").write_text("name = \n")
    (tmp_path / "wrong.toml").write_text('[run]\ntrials = "many"\n')
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "serve", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert "token=" not in res.stdout  # it failed before serving


def test_the_served_command_is_this_rtax_quoted_for_the_shell() -> None:
    from rtax_tui.commands.serve import console_command

    cmd = console_command(["replay", "a file; rm -rf x"])
    assert cmd == f"{sys.executable} -m rtax_tui replay 'a file; rm -rf x'"
    assert console_command([]).endswith("-m rtax_tui")


@pytest.mark.parametrize(("host", "warns"), [("0.0.0.0", True), ("127.0.0.1", False)])
def test_serving_beyond_loopback_warns_before_the_url(tmp_path: Path, host, warns) -> None:
    """The warning is `servegate.bind_warning`'s (one rule of what is loopback), printed by
    the command itself on stderr before it serves, not only a function that could say it."""
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (rtax[serve])")
    port = _free_port()
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    with open(out, "wb") as o, open(err, "wb") as e:
        server = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui", "serve", "--host", host, "--port", str(port)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=o,
            stderr=e,
            start_new_session=True,
        )
        try:
            _wait_listening(port, server, out)
        finally:
            stop_gracefully(server)
    lines = [ln for ln in err.read_text().splitlines() if "warning" in ln]
    if warns:
        assert len(lines) == 1 and f"listening on {host}, not loopback" in lines[0], lines
    else:
        assert lines == []


SIZES = [(100, 30), (200, 50), (250, 70)]
CROP = """(() => { const r = document.querySelector('.xterm-screen').getBoundingClientRect();
  return [r.left, r.top, r.width, r.height]; })()"""
GEOMETRY = """(() => { const t = document.querySelector('.textual-terminal');
  return [t.clientWidth, t.clientHeight, innerWidth, innerHeight]; })()"""


MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")


def _lines(received: bytes, rows: int) -> dict[int, str]:
    """The console's rows as drawn by its last whole frame at `rows` rows (a cursor move to
    row 1, column 1, then each row from column 1 down to a footer on row `rows`) and the
    rows it drew whole after it, by row number from 1, escape sequences removed."""
    moves = list(MOVE.finditer(received))
    texts = []
    for m, nxt in zip(moves, [*moves[1:], None], strict=False):
        end = nxt.start() if nxt else len(received)
        text = ANSI.sub(b"", received[m.end() : end]).decode("utf-8", "replace")
        texts.append((int(m.group(1)), int(m.group(2)), text))
    feet = [i for i, (r, c, t) in enumerate(texts) if (r, c) == (rows, 1) and "^p palette" in t]
    if not feet:
        return {}
    tops = [i for i, (r, c, _) in enumerate(texts[: feet[-1]]) if (r, c) == (1, 1)]
    return {r: t for r, c, t in texts[tops[-1] if tops else 0 :] if c == 1 and t}


async def _at_size(page: Page, url: str, cols: int, rows: int) -> tuple[dict[int, str], bytes]:
    """Opens the console with the page's terminal at exactly `cols`×`rows`: once the console
    has drawn, the viewport is corrected by the cells missing or over (a cell's pixels
    measured from xterm's screen), reading back the size the page sends its app (the
    websocket's first size, then its `resize` messages), until it is the one asked; then
    waits until the console has drawn itself whole at that size. Returns its rows as last
    drawn after that resize and a PNG of the terminal (cropped to it)."""
    width, height = cols * 9 + 40, rows * 19 + 40  # a first guess; measured below

    async def viewport() -> None:
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    await viewport()
    await page.call("Page.navigate", url=url)

    async def drawn() -> bool:  # a resize sent before the console is up can be lost
        await page.js("1")
        return bool(page.sizes) and "trials 36/36" in page.text()

    await page.until(drawn)
    for _ in range(8):
        got = page.sizes[-1]
        if got == (cols, rows):
            break
        sw, sh = (await page.js(CROP))[2:]
        tw, th, iw, ih = await page.js(GEOMETRY)
        cw, ch = sw / got[0], sh / got[1]
        # the fit takes floor(room / cell): aim half a cell past the wanted edge
        width = int(round(iw + (cols + 0.5) * cw - tw))
        height = int(round(ih + (rows + 0.5) * ch - th))
        n = len(page.sizes)
        await viewport()

        async def resized(n=n) -> bool:
            await page.js("1")
            return len(page.sizes) > n

        with contextlib.suppress(AssertionError):
            await page.until(resized, timeout=3)
    assert page.sizes[-1] == (cols, rows), (page.sizes, width, height)
    mark = page.mark

    async def redrawn() -> bool:
        await page.js("1")
        last = _lines(bytes(page.received[mark:]), rows)
        return "total" in last.get(2, "") + last.get(3, "")

    await page.until(redrawn)
    await asyncio.sleep(1.0)  # the last frames arrive and are painted
    await page.js("1")
    x, y, w, h = await page.js(CROP)
    res = await page.call(
        "Page.captureScreenshot",
        format="png",
        clip={"x": x, "y": y, "width": w, "height": h, "scale": 1},
    )
    return _lines(bytes(page.received[mark:]), rows), base64.b64decode(res["data"])


@contextlib.contextmanager
def _serving(tmp_path: Path):
    """`rtax serve` replaying t0 on a free loopback port; yields its URL and the marker
    of its processes; stops it (SIGTERM) and checks none of them is left."""
    rec = tmp_path / "served-t0.jsonl"
    shutil.copy(T0, rec)
    port = _free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui", "serve", "--port", str(port)]
            + ["replay", str(rec), "--speed", "max"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield _wait_listening(port, server, log)
        finally:
            stop_gracefully(server)
    _assert_nothing_outlives(str(rec))


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize(("cols", "rows"), SIZES)
def test_serve_at_each_terminal_size(tmp_path: Path, cols: int, rows: int) -> None:
    """The served console at 100×30, 200×50 and 250×70: the page's terminal has exactly
    that size (what it sent its app), the console drew itself again at it, and its
    footer's keys are whole. With RTAX_DOCS_PNG=1 the screenshot is written to
    docs/serve-run-WxH.png (referenced from docs/console.md)."""
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (rtax[serve])")
    from PIL import Image
    from rich.cells import cell_len

    async def browse(url: str) -> tuple[dict[int, str], bytes]:
        async with chromium(tmp_path / "chr") as page:
            return await _at_size(page, url, cols, rows)

    with _serving(tmp_path) as url:
        lines, png = asyncio.run(browse(url))
    # the console's own frames: `rows` rows, none beyond; none longer than `cols` cells,
    # the title's and the footer's exactly that (a row may be drawn again in parts)
    assert max(lines) == rows, sorted(lines)
    assert all(cell_len(ln) <= cols for ln in lines.values()), {
        r: (cell_len(ln), ln) for r, ln in lines.items() if cell_len(ln) > cols
    }
    assert cell_len(lines[1]) == cols and cell_len(lines[rows]) == cols, (lines[1], lines[rows])
    assert "rtax — replay served-t0.jsonl (t0)" in lines[1]
    assert not [ln for ln in lines.values() if "…" in ln], lines  # no title cut to fit
    footer = lines[rows].rstrip()
    assert "q back" in footer and footer.endswith("^p palette"), footer
    (tmp_path / "shot.png").write_bytes(png)
    img = Image.open(tmp_path / "shot.png").convert("RGB")
    colors = img.getcolors(maxcolors=1 << 16) or []
    assert len(colors) >= 16, "the screenshot is (nearly) blank"
    if os.environ.get("RTAX_DOCS_PNG"):
        small = img.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
        small.save(ROOT / "docs" / f"serve-run-{cols}x{rows}.png", optimize=True)
