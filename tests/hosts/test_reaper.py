"""The reaper process on its own: it reads registrations in batches (it sleeps between
reads so that the engine's writes do not wake it each time) and still ends, at the
pipe's end, exactly what is registered and not dropped, even after more lines than the
pipe holds."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from rtax_tui.hosts.reaper import Reaper


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_registered_things_end_and_dropped_ones_stay():
    r = Reaper()
    r.start()
    kept, ended = _sleeper(), _sleeper()
    d = tempfile.mkdtemp(prefix="rtax-reaper-test-")
    try:
        r.add_pgid(ended.pid)
        r.add_pgid(kept.pid)
        r.add_path(d)
        # far more than a pipe's 64 KiB while the reaper sleeps between reads: the
        # writer blocks at worst for one batch, nothing is lost
        for i in range(20000):
            r.add_pgid(4_000_000 + i)
            r.drop_pgid(4_000_000 + i)
        r.drop_pgid(kept.pid)
        t = time.monotonic()
        r.close()  # the engine's end: EOF on the pipe
        assert time.monotonic() - t < 5
        assert ended.wait(5) == -9
        assert kept.poll() is None
        assert not os.path.exists(d)
    finally:
        for p in (kept, ended):
            p.kill()
            p.wait()


def test_a_cgroup_slow_to_empty_does_not_keep_the_workspaces_for_its_wait(monkeypatch):
    """The reaper gives every cgroup a short first pass, removes the paths, and only then
    waits long for a cgroup still busy: a kill -9 of a pooled run left a stage workspace
    past the 30 s a test allowed when the paths waited behind the cgroups."""
    from rtax_tui.hosts import reaper as reaper_mod
    from rtax_tui.hosts.cgroups import Cgroup, CgroupError

    d = tempfile.mkdtemp(prefix="rtax-reaper-test-")
    seen: list[tuple[float, bool]] = []

    class Busy:  # a double: a cgroup whose last process outlives the first pass
        def __init__(self, rel: str) -> None:
            self.rel = rel

        def remove(self, timeout: float) -> None:
            seen.append((timeout, os.path.exists(d)))
            if timeout <= reaper_mod.CGROUP_FIRST_S:
                raise CgroupError(f"cgroup {self.rel} still busy")

    monkeypatch.setattr(Cgroup, "at", staticmethod(Busy))
    reaper_mod._reap(set(), {"rtax/env-x-1"}, {d})
    assert seen == [(reaper_mod.CGROUP_FIRST_S, True), (reaper_mod.CGROUP_WAIT_S, False)]
    assert not os.path.exists(d)


def test_a_workspace_not_wholly_removed_stays_with_the_reaper(tmp_path, monkeypatch):
    """`LocalHost.remove_tree` ignored what `safefs` could not remove (here a mount inside
    the workspace, which it never crosses) and made the reaper forget the path: nothing
    would try again at the run's end. It is forgotten only once it is gone."""
    import asyncio

    import pytest

    from rtax_tui.hosts import reaper as reaper_mod
    from rtax_tui.hosts import safefs
    from rtax_tui.hosts.local import LocalHost

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    dropped: list[str] = []

    class Recorder:  # a double of the reaper's client: what was dropped
        def drop_path(self, path: str) -> None:
            dropped.append(path)

    monkeypatch.setattr(reaper_mod, "current", Recorder)
    ws = tmp_path / "rtax-ws-t-1"
    (ws / "sub").mkdir(parents=True)
    safefs.mount_tmpfs(str(ws / "sub"), 1)
    try:
        asyncio.run(LocalHost().remove_tree(str(ws)))
        assert ws.exists() and dropped == []
    finally:
        safefs.unmount(str(ws / "sub"))
    asyncio.run(LocalHost().remove_tree(str(ws)))
    assert not ws.exists() and dropped == [str(ws)]


def test_a_file_is_unlinked_alone_and_what_else_stands_at_its_name_is_left(tmp_path):
    """`file`: one name rtax chose in a directory it does not own (the probe's
    `.rtax-probe-rw-*` in the host's /etc, /var/tmp). Whatever an environment put at the
    name instead is not rtax's to remove: a link goes, its target stays; a directory
    stays with what it holds. Locally and through the remote reaper's awk (SSH hosts),
    which ran `umount -l` on a path, and umount(8) follows a link."""
    from rtax_tui.hosts.ssh import REAPER_AWK

    for how in ("local", "awk"):
        d = tmp_path / how
        d.mkdir()
        target = d / "target"
        target.mkdir()
        (target / "kept").write_text("kept")
        plain, link, folder = d / "plain", d / "link", d / "folder"
        plain.write_text("rtax's")
        link.symlink_to(target)
        folder.mkdir()
        (folder / "inside").write_text("kept")
        if how == "local":
            r = Reaper()
            r.start()
            for p in (plain, link, folder):
                r.add_file(str(p))
            r.close()
        else:
            lines = "".join(f"+f {p}\n" for p in (plain, link, folder))
            subprocess.run(["awk", REAPER_AWK], input=lines.encode(), check=True, timeout=30)
        deadline = time.monotonic() + 10
        while (plain.exists() or link.is_symlink()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not plain.exists() and not link.is_symlink(), how
        assert (target / "kept").read_text() == "kept", how
        assert (folder / "inside").read_text() == "kept", how


def test_every_shell_that_removes_a_workspace_unmounts_it_but_never_through_a_link(tmp_path):
    """`safefs.GONE_SH`, the one rule the remote reaper's awk, the SSH workspace's remover
    and `rtax cleanup`'s sweeps run: a workspace with a mount on it is unmounted and
    removed; a link at a workspace's name is removed, and the mount it points at stays
    (umount(8) follows a link: the reaper once detached a mount through one)."""
    from rtax_tui.hosts import safefs
    from rtax_tui.hosts.ssh import REAPER_AWK

    for how in ("sh", "awk"):
        d = tmp_path / how
        d.mkdir()
        target, ws, link = d / "target", d / "ws", d / "link"
        for m in (target, ws):
            m.mkdir()
            safefs.mount_tmpfs(str(m), 1)
        try:
            (target / "kept").write_text("kept")
            (ws / "junk").write_text("x")
            link.symlink_to(target)
            if how == "sh":
                for p in (ws, link):
                    script = safefs.GONE_SH + '; rtax_gone "$1"'
                    subprocess.run(["sh", "-c", script, "t", str(p)], check=True, timeout=30)
            else:
                lines = f"+p {ws}\n+p {link}\n"
                subprocess.run(["awk", REAPER_AWK], input=lines.encode(), check=True, timeout=30)
            assert not link.is_symlink() and not ws.exists(), how
            assert safefs.is_mount_point(str(target)), how
            assert (target / "kept").read_text() == "kept", how
        finally:
            for m in (ws, target):
                if m.exists():
                    safefs.unmount(str(m))


def test_cleanup_sweeps_take_a_name_with_spaces_or_a_glob_as_one_name(tmp_path):
    """`rtax cleanup`'s sweeps (stage's and the workspaces') list the names in the host's
    /tmp that carry the workspace prefix: anyone can make `rtax-ws-x -a` or `rtax-ws-y *`
    there. Each is one name: removed whole; its words never reach umount (`-a`: every
    mount on the host) nor rm as names in the current directory. umount is a stand-in that
    writes down what it was given, so a failing run touches no real mount."""
    from rtax_tui.drivers.toolkit import stage_site, workspace

    from rtax_tui.hosts import names
    from rtax_tui.model import runlock

    bin_, cwd, runs = tmp_path / "bin", tmp_path / "cwd", tmp_path / "runs"
    for d in (bin_, cwd, runs):
        d.mkdir()
    log = tmp_path / "umount.log"
    stub = bin_ / "umount"
    stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> {log}\n')
    stub.chmod(0o755)
    for name in ("etc", "keep"):
        (cwd / name).mkdir()
    prefix = f"{names.WORKSPACE}zz{os.getpid()}"
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "RTAX_RUNS_DIR": str(runs)}
    scripts = {
        "workspace": (workspace.CLEANUP_SH, [prefix]),
        "stage": (stage_site.CLEANUP_SH, [prefix, "rtax-no-such-cg-", "rtax-no-such-root"]),
    }
    for how, (script, args) in scripts.items():
        t = tmp_path / f"tmp-{how}"
        t.mkdir()
        made = [t / f"{prefix}a -a", t / f"{prefix}b *", t / f"{prefix}c"]
        for m in made:
            m.mkdir()
            (m / "junk").write_text("x")
        log.write_text("")
        res = subprocess.run(
            ["sh", "-c", runlock.script(script), "rtax-cleanup", *args],
            cwd=cwd, env={**env, "TMPDIR": str(t)}, capture_output=True, timeout=60,
        )  # fmt: skip
        assert res.stdout.split()[-2:] == [b"3", b"0"], (how, res.stdout, res.stderr)
        assert not any(m.exists() for m in made), how
        assert sorted(p.name for p in cwd.iterdir()) == ["etc", "keep"], how
        said = log.read_text().splitlines()
        calls = sorted(said[i : i + 3] for i in range(0, len(said), 3))
        assert calls == sorted(["-l", "--", str(m)] for m in made), (how, said)


def test_the_remote_reaper_takes_only_absolute_paths_of_safe_characters():
    """What the remote reaper is handed goes unquoted to a shell and to umount and rm:
    a relative name (`-a`: umount's "every file system") or a space is refused."""
    import pytest

    from rtax_tui.hosts.ssh import _reaper_lines

    assert _reaper_lines("+", "path", "/tmp/rtax-ws-1") == ["+p /tmp/rtax-ws-1"]
    assert _reaper_lines("-", "file", "/etc/.rtax-probe-rw-1") == ["-f /etc/.rtax-probe-rw-1"]
    for kind in ("path", "file"):
        for bad in ("-a", "tmp/x", "/tmp/a b", "/tmp/a;b"):
            with pytest.raises(ValueError):
                _reaper_lines("+", kind, bad)


def test_a_newline_never_registers_a_second_leftover():
    import pytest

    r = Reaper()
    r.start()
    try:
        with pytest.raises(ValueError, match="newline"):
            r.add_path("/tmp/x\n+p /etc")
    finally:
        r.close()
