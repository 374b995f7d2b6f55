"""Remote hosts in profiles and on the command line: parsed, checked, named (no network)."""

from __future__ import annotations

import pytest

from rtax_tui.engine.profile import ProfileError, parse_profile
from rtax_tui.engine.runner import make_host
from rtax_tui.hosts.ssh import SSHHost

TEXT = """\
[run]
hosts = ["local", "box", "ssh://bench@10.0.0.5:2200"]
[hosts.box]
address = "192.0.2.7"
user = "rtax"
port = 2222
identity = "/keys/id"
concurrency = 3
"""


def _parse(text: str):
    import tomllib

    return parse_profile(tomllib.loads(text), text, "p.toml", default_name="p")


def test_host_tables_and_urls_make_named_ssh_hosts() -> None:
    prof = _parse(TEXT).with_overrides(ssh_options={"known_hosts": "/kh"})
    box = make_host("box", prof)
    assert isinstance(box, SSHHost) and box.name == "box" and box.concurrency == 3
    t = box.target
    assert (t.address, t.user, t.port, t.identity, t.known_hosts) == (
        "192.0.2.7", "rtax", 2222, "/keys/id", "/kh",
    )  # fmt: skip
    url = make_host("ssh://bench@10.0.0.5:2200", prof)
    assert url.name == "bench@10.0.0.5:2200" and url.target.known_hosts == "/kh"
    assert make_host("local", prof).name == "local"
    assert prof.to_dict()["host_tables"]["box"]["address"] == "192.0.2.7"


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (TEXT + "password = 'x'\n", "p.toml:9", "hosts.box.password: unknown key"),
        (TEXT.replace("port = 2222", 'port = "22"'), "p.toml:6", "hosts.box.port: expected"),
        (TEXT.replace('address = "192.0.2.7"\n', ""), "p.toml:3", "hosts.box.address: required"),
        (TEXT.replace('"box", ', '"nobox", '), "p.toml:2", "hosts: unknown 'nobox'"),
    ],
)
def test_bad_host_entries_name_file_line_and_field(text: str, where: str, what: str) -> None:
    with pytest.raises(ProfileError) as ei:
        _parse(text)
    msg = str(ei.value)
    assert msg.startswith(where) and what in msg, msg


def test_command_line_host_is_checked() -> None:
    prof = _parse(TEXT)
    with pytest.raises(ProfileError, match="command line: hosts: unknown 'nowhere'"):
        prof.with_overrides(hosts=["nowhere"])
