"""Verdicts kept until reboot (drivers/toolkit/bootcache.py): read back only for the same
key, only from a file this user alone may write, never through a link."""

from __future__ import annotations

import os

import pytest
from rtax_tui.drivers.toolkit import bootcache


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setattr(bootcache, "BASE", str(tmp_path / "run"))
    monkeypatch.delenv(bootcache.FRESH_ENV, raising=False)
    return tmp_path / "run"


def _only_file(base) -> str:
    (name,) = [n for n in os.listdir(base) if n.endswith(".json")]
    return str(base / name)


def test_a_verdict_is_read_back_for_its_key_only(base) -> None:
    bootcache.write("kvm", {"qemu": 1}, {"ok": False, "why": "hangs"})
    assert bootcache.read("kvm", {"qemu": 1}) == {"ok": False, "why": "hangs"}
    assert bootcache.read("kvm", {"qemu": 2}) is None
    assert bootcache.read("gvisor-platform", {"qemu": 1}) is None
    assert oct(os.stat(base).st_mode & 0o777) == oct(0o700)
    assert [n for n in os.listdir(base) if n.endswith(".tmp")] == []


def test_fresh_probes_ignore_what_is_kept(base, monkeypatch) -> None:
    bootcache.write("kvm", {"k": 1}, {"ok": True, "why": ""})
    monkeypatch.setenv(bootcache.FRESH_ENV, "1")
    assert bootcache.read("kvm", {"k": 1}) is None


def test_a_verdict_anyone_else_could_write_is_not_believed(base) -> None:
    bootcache.write("kvm", {"k": 1}, {"ok": True, "why": ""})
    path = _only_file(base)
    os.chmod(path, 0o666)
    assert bootcache.read("kvm", {"k": 1}) is None
    os.chmod(path, 0o644)
    assert bootcache.read("kvm", {"k": 1}) == {"ok": True, "why": ""}
    if os.geteuid() == 0:  # another user's file, however it reads
        os.chown(path, 4242, 4242)
        assert bootcache.read("kvm", {"k": 1}) is None


def test_a_link_in_its_place_is_not_followed(base, tmp_path) -> None:
    bootcache.write("kvm", {"k": 1}, {"ok": False, "why": "x"})
    path = _only_file(base)
    forged = tmp_path / "forged.json"
    forged.write_text('{"ok": true, "why": ""}')
    os.unlink(path)
    os.symlink(forged, path)
    assert bootcache.read("kvm", {"k": 1}) is None


@pytest.mark.parametrize("body", [b"[1, 2]", b"{not json", b"{" + b" " * 5000 + b"}"])
def test_a_file_that_is_no_small_object_is_no_verdict(base, body: bytes) -> None:
    bootcache.write("kvm", {"k": 1}, {"ok": False, "why": "x"})
    with open(_only_file(base), "wb") as f:
        f.write(body)
    assert bootcache.read("kvm", {"k": 1}) is None


def test_no_place_to_keep_it_keeps_nothing(tmp_path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(bootcache, "BASE", str(tmp_path / "file" / "run"))
    bootcache.write("kvm", {"k": 1}, {"ok": True, "why": ""})  # no error
    assert bootcache.read("kvm", {"k": 1}) is None
