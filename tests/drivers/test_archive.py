"""safe_extract against hostile tarballs, with and without tarfile's `data` filter (which
Python < 3.11.4, Debian 12's 3.11.2 among them, lacks)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from rtax_tui.drivers.toolkit import archive
from rtax_tui.drivers.toolkit.archive import safe_extract

from rtax_tui.model.spec import RtaxError

Member = tuple[str, str, str | bytes]  # (type, name, data or link target)


# without the filter on every Python; with it too where it exists (from 3.11.4 on)
MODES = ["no_data_filter", *(["data_filter"] if hasattr(tarfile, "data_filter") else [])]


@pytest.fixture(params=MODES)
def filter_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no_data_filter":
        monkeypatch.setattr(archive, "_HAS_DATA_FILTER", False)
    return str(request.param)


def _tar(path: Path, members: list[Member], mode: int = 0o644) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for kind, name, payload in members:
            ti = tarfile.TarInfo(name)
            data = None
            if kind == "file":
                raw = payload if isinstance(payload, bytes) else payload.encode()
                ti.size, ti.mode, data = len(raw), mode, io.BytesIO(raw)
            elif kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "chr":
                ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "blk":
                ti.type, ti.devmajor, ti.devminor = tarfile.BLKTYPE, 8, 0
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            tf.addfile(ti, data)
    return path


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, Path, Callable[[], list[str]]]:
    """(destination, a sentinel outside it, what exists outside besides the two)."""
    dest = tmp_path / "dest"
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    known = {"dest", "outside.txt", "t.tar.gz"}

    def stray() -> list[str]:
        return sorted(set(os.listdir(tmp_path)) - known)

    return dest, outside, stray


def test_a_plain_archive_extracts_with_its_inner_links(tmp_path: Path, filter_mode: str) -> None:
    tar = _tar(
        tmp_path / "t.tar.gz",
        [
            ("dir", "proj", ""),
            ("file", "proj/a.txt", "hello"),
            ("sym", "proj/link", "a.txt"),
            ("hard", "proj/hard", "proj/a.txt"),
            ("dir", "proj/sub", ""),
            ("sym", "proj/sub/up", "../a.txt"),
        ],
    )
    safe_extract(tar, tmp_path / "dest")
    p = tmp_path / "dest" / "proj"
    assert (p / "a.txt").read_text() == "hello"
    assert os.readlink(p / "link") == "a.txt" and (p / "link").read_text() == "hello"
    assert (p / "hard").read_text() == "hello"
    assert (p / "sub" / "up").read_text() == "hello"


@pytest.mark.parametrize(
    "members, why",
    [
        ([("file", "/abs.txt", "x")], "absolute"),
        ([("file", "../outside.txt", "pwned")], "'..'"),
        ([("file", "a/../../outside.txt", "pwned")], "'..'"),
        ([("sym", "l", "/etc/passwd")], "absolute"),
        ([("sym", "l", "../outside.txt")], "outside"),
        ([("dir", "d", ""), ("sym", "d/l", "../../outside.txt")], "outside"),
        ([("hard", "h", "/etc/passwd")], "hard link"),
        ([("hard", "h", "../outside.txt")], "hard link"),
        ([("chr", "null", "")], "device"),
        ([("blk", "disk", "")], "device"),
        ([("fifo", "pipe", "")], "device"),
        # through links made earlier: each link alone stays inside, together they escape
        (
            [
                ("dir", "d", ""),
                ("sym", "d/l1", ".."),
                ("sym", "d/l1/l2", ".."),
                ("file", "d/l1/l2/outside.txt", "pwned"),
            ],
            "outside",
        ),
        ([("sym", "x", "y/.."), ("sym", "y", "."), ("file", "x/outside.txt", "pwned")], "outside"),
        ([("sym", "x", "y/.."), ("sym", "y", ".")], "outside"),
    ],
)
def test_a_hostile_archive_is_refused_and_nothing_lands_outside(
    members: list[Member],
    why: str,
    box: tuple[Path, Path, Callable[[], list[str]]],
    filter_mode: str,
) -> None:
    dest, outside, stray = box
    tar = _tar(dest.parent / "t.tar.gz", members)
    with pytest.raises(RtaxError, match=why):
        safe_extract(tar, dest)
    assert outside.read_text() == "untouched"
    assert stray() == []
    root = os.path.realpath(dest)
    left = [
        os.path.join(d, n)
        for d, dirs, files in os.walk(dest)
        for n in dirs + files
        if os.path.islink(os.path.join(d, n))
        and os.path.commonpath([root, os.path.realpath(os.path.join(d, n))]) != root
    ]
    assert left == [], "a link pointing outside was left behind"


def test_set_uid_bits_and_write_for_others_are_dropped(tmp_path: Path, filter_mode: str) -> None:
    tar = _tar(tmp_path / "t.tar.gz", [("file", "tool", "#!/bin/sh\n")], mode=0o6777)
    safe_extract(tar, tmp_path / "dest")
    mode = stat.S_IMODE((tmp_path / "dest" / "tool").stat().st_mode)
    assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH), oct(mode)


def test_a_file_that_is_no_archive_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(RtaxError, match="not a readable tar archive"):
        safe_extract(bad, tmp_path / "dest")


def test_no_module_extracts_an_archive_but_through_safe_extract() -> None:
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for top in ("rtax_tui", "drivers"):
        for py in (root / top).rglob("*.py"):
            if py.name == "archive.py" and py.parent.name == "toolkit":
                continue
            text = py.read_text()
            if ".extractall(" in text or "shutil.unpack_archive" in text or ".extract(" in text:
                offenders.append(str(py.relative_to(root)))
    assert offenders == []
