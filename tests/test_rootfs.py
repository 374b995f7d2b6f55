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


def test_a_killed_builds_directory_goes_at_the_next_build(tmp_path):
    """A build killed by a signal leaves its partial root; the next build removes it (its
    pid is gone), not a running build's, and never crosses a mount inside one."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    left = tmp_path / f"{rootfs.BUILD_PREFIX}{dead.stdout.strip()}-abc"
    (left / "root" / "usr").mkdir(parents=True)
    (left / "root" / "usr" / "f").write_text("x")
    live = tmp_path / f"{rootfs.BUILD_PREFIX}{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / ".rtax-rootfs-notapid"  # not a name this build gives: kept
    other.mkdir()
    with rootfs.build_dir(str(tmp_path)) as tmp:
        assert os.path.basename(tmp).startswith(f"{rootfs.BUILD_PREFIX}{os.getpid()}-")
        assert not left.exists() and live.exists() and other.exists()
    assert not os.path.exists(tmp)
    # a mount inside an abandoned directory is not crossed: what it holds stays
    left.mkdir()
    inner = left / "proc"
    inner.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(inner)]).returncode == 0:
        try:
            (inner / "kept").write_text("y")
            assert rootfs.remove_abandoned(str(tmp_path)) == [str(left)]
            assert (inner / "kept").read_text() == "y"
        finally:
            subprocess.run(["umount", str(inner)], check=True)
