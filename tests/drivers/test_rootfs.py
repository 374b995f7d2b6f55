"""The root filesystems both image kinds are made from (`drivers.toolkit.rootfs`): no
engine needed."""

import os

from rtax_tui.drivers.toolkit import rootfs


def test_apt_mirror_reads_deb822_and_legacy(tmp_path):
    d = tmp_path / "debian.sources"
    d.write_text(
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert rootfs.apt_mirror(str(d), str(tmp_path / "none")) == "http://mirror.example/debian"
    legacy = tmp_path / "sources.list"
    legacy.write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64] http://old.example/debian bookworm main\n"
    )
    assert rootfs.apt_mirror(str(tmp_path / "none"), str(legacy)) == "http://old.example/debian"
    none = str(tmp_path / "none")
    assert rootfs.apt_mirror(none, none) == rootfs.DEBIAN_FALLBACK_MIRROR


def test_static_busybox_is_told_from_a_dynamic_binary():
    bb = rootfs.find_static_busybox()
    assert bb is None or rootfs.is_static_elf(bb)
    assert not rootfs.is_static_elf("/bin/sh") or os.path.realpath("/bin/sh").endswith("busybox")
    assert not rootfs.is_static_elf("/nonexistent")
