"""The rule of `rtax serve` (rtax_tui/commands/servegate.py), case by case."""

from __future__ import annotations

import pytest

from rtax_tui.commands.servegate import Gate, RefusalLog, bind_warning, shown, split_host

TOKEN = "s3cret-token_value"


def gate(bind: str = "127.0.0.1", port: int = 8000, own=lambda h: h == "10.1.2.3") -> Gate:
    return Gate(bind, port, token=TOKEN, own_address=own, hostnames=("box", "box.lan"))


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("LOCALHOST:8000", ("localhost", 8000)),
        ("[::1]:8000", ("::1", 8000)),
        ("example.org", ("example.org", 80)),
        ("127.0.0.1:8000@evil.example", None),
        ("evil.example/127.0.0.1:8000", None),
        ("127.0.0.1:99999", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1 :8000", None),
        ("", None),
        ("::1:8000", None),
    ],
)
def test_host_headers_are_parsed_strictly(value, parsed) -> None:
    assert split_host(value) == parsed


def test_the_served_address_with_the_token_passes() -> None:
    g = gate()
    assert g.refusal("127.0.0.1:8000", None, [TOKEN]) is None
    assert g.refusal("127.0.0.1:8000", "http://127.0.0.1:8000", [TOKEN]) is None
    assert g.refusal("localhost:8000", "http://localhost:8000", [TOKEN]) is None
    # the static files need the Host (and Origin) only: the same for everyone
    assert g.refusal("127.0.0.1:8000", None, [], public=True) is None
    assert g.refusal("evil.example:8000", None, [], public=True) == "foreign Host"
    assert g.refusal("127.0.0.1:8000", "http://evil.example", [], public=True) == "foreign Origin"


@pytest.mark.parametrize(
    ("host", "origin", "tokens", "why"),
    [
        ("127.0.0.1:8000", None, [], "no token"),
        ("127.0.0.1:8000", None, ["nope"], "wrong token"),
        ("127.0.0.1:8000", None, [TOKEN, TOKEN], "more than one token"),
        ("127.0.0.1:8000", None, [TOKEN + "x"], "wrong token"),
        ("127.0.0.1:8000", None, ["é" * 300], "wrong token"),
        ("evil.example:8000", None, [TOKEN], "foreign Host"),  # DNS rebinding
        ("127.0.0.1:8001", None, [TOKEN], "foreign Host"),
        ("127.0.0.1", None, [TOKEN], "foreign Host"),  # port 80
        (None, None, [TOKEN], "foreign Host"),
        ("10.1.2.3:8000", None, [TOKEN], "foreign Host"),  # bound to loopback only
        ("127.0.0.1:8000", "http://evil.example", [TOKEN], "foreign Origin"),
        ("127.0.0.1:8000", "null", [TOKEN], "foreign Origin"),
        ("127.0.0.1:8000", "https://127.0.0.1:8000", [TOKEN], "foreign Origin"),
        ("127.0.0.1:8000", "http://127.0.0.1:9999", [TOKEN], "foreign Origin"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000/x", [TOKEN], "foreign Origin"),
        ("127.0.0.1:8000", "", [TOKEN], "foreign Origin"),
    ],
)
def test_each_refusal_names_its_reason(host, origin, tokens, why) -> None:
    assert gate().refusal(host, origin, tokens) == why


def test_loopback_names_only_when_listening_on_loopback() -> None:
    outside = gate("10.1.2.3")
    assert outside.refusal("10.1.2.3:8000", "http://10.1.2.3:8000", [TOKEN]) is None
    assert outside.refusal("localhost:8000", None, [TOKEN]) == "foreign Host"
    assert outside.refusal("127.0.0.1:8000", None, [TOKEN]) == "foreign Host"
    assert outside.refusal("box:8000", None, [TOKEN]) == "foreign Host"
    every = gate("0.0.0.0")
    for host in ("10.1.2.3", "box", "box.lan", "localhost"):
        assert every.refusal(f"{host}:8000", None, [TOKEN]) is None, host
    assert every.refusal("evil.example:8000", None, [TOKEN]) == "foreign Host"
    assert every.refusal("10.9.9.9:8000", None, [TOKEN]) == "foreign Host"
    v6 = gate("::1")
    assert v6.refusal("[::1]:8000", "http://[::1]:8000", [TOKEN]) is None
    assert v6.url() == f"http://[::1]:8000/?token={TOKEN}"


def test_the_printed_url_and_the_token() -> None:
    g = gate()
    assert g.url() == f"http://127.0.0.1:8000/?token={TOKEN}"
    assert gate("0.0.0.0").url().startswith("http://box:8000/?token=")
    assert len(Gate("127.0.0.1", 1).token) >= 40  # 32 random bytes
    assert Gate("127.0.0.1", 1).token != Gate("127.0.0.1", 1).token


def test_a_bind_beyond_loopback_warns_in_one_line() -> None:
    assert bind_warning("127.0.0.1") is None and bind_warning("::1") is None
    assert bind_warning("localhost") is None
    line = bind_warning("0.0.0.0")
    assert line is not None and "\n" not in line and "not loopback" in line
    # an address with an escape sequence (OSC 52: the clipboard) is shown, not sent
    line = bind_warning("evil\x1b]52;c;QUJD\x07\nx")
    assert line is not None and "evil\\x1b]52;c;QUJD\\x07\\x0ax" in line
    assert not any(ch in line for ch in "\x1b\x07\n")


def test_shown_headers_are_bounded_and_escaped() -> None:
    assert shown(None) == "-"
    assert shown("\x1b[2Jx") == "'\\x1b[2Jx'"
    assert len(shown("a" * 10_000)) < 100


def test_the_refusal_log_is_bounded_per_minute() -> None:
    now = [0.0]
    lines: list[str] = []
    log = RefusalLog(per_minute=3, clock=lambda: now[0], write=lines.append)
    for i in range(1000):
        log.refused(f"r{i}")
    assert lines == ["r0", "r1", "r2"]
    now[0] = 61.0
    log.refused("late")
    assert lines[3:] == ["rtax serve: 997 more requests refused (not shown)", "late"]
    log.refused("x")
    log.refused("y")
    log.refused("z")
    log.flush()
    assert lines[5:] == ["x", "y", "rtax serve: 1 more requests refused (not shown)"]
