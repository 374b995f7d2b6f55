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


def test_two_builders_at_once_build_the_root_once(tmp_path, monkeypatch):
    """Two processes building the cached Debian root at once (the suite's two workers, a
    container image and the VM's root disk) debootstrap once: the second waits on the
    first's lock and finds the tarball built."""
    import threading
    import time

    dest = tmp_path / "images" / "workload.tar"
    builds: list[int] = []

    def fake_build(path: str, say) -> str:
        builds.append(threading.get_ident())
        time.sleep(0.3)  # the other builder arrives while this one works
        with open(path + ".part", "w") as f:
            f.write("root")
        os.replace(path + ".part", path)
        return path

    monkeypatch.setattr(rootfs, "debian_rootfs_path", lambda: str(dest))
    monkeypatch.setattr(rootfs, "_debootstrap_into", fake_build)
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 0)
    said: list[str] = []
    got: list[str] = []
    threads = [
        threading.Thread(target=lambda: got.append(rootfs.build_debian_rootfs(log=said.append)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == [str(dest), str(dest)]
    assert len(builds) == 1, "both builders debootstrapped"
    assert any("meanwhile" in s for s in said)
    assert any("waiting" in s for s in said), said
    assert dest.read_text() == "root"


def test_a_lock_file_rtax_did_not_make_is_refused(tmp_path):
    """At the lock's name, a link, a FIFO or a file another user owns (who could hold it
    locked for ever) ends the build with a one-line error naming it, not a hang."""
    import pytest

    from rtax_tui.model.spec import RtaxError

    target = tmp_path / "elsewhere"
    target.write_text("x")
    cases = {"link": lambda p: os.symlink(target, p), "fifo": os.mkfifo}
    if os.geteuid() == 0:
        cases["foreign"] = lambda p: (open(p, "w").close(), os.chown(p, 65534, 65534))
    for name, plant in cases.items():
        path = str(tmp_path / name)
        plant(path + ".lock")
        with pytest.raises((RtaxError, OSError)) as exc:
            with rootfs.build_lock(path):
                raise AssertionError(f"{name}: locked")
        assert path + ".lock" in str(exc.value), (name, exc.value)
    assert target.read_text() == "x"
    with rootfs.build_lock(str(tmp_path / "fresh")):
        pass  # rtax's own: taken
