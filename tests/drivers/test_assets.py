"""The attrs assets and the built-in workloads, executed for real on this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rtax_tui.drivers.toolkit import assets as A

from rtax_tui.engine.workloads import builtin_workloads, trajectory_steps
from rtax_tui.model.spec import WORKLOAD_NAMES, RtaxError, Workload

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is required")


@pytest.fixture(scope="session")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned sdist, downloaded once per session (or reused from the user's cache)."""
    for candidate in (
        os.environ.get(A.SDIST_ENV),
        A.cache_dir() / "downloads" / A.ATTRS_SDIST_NAME,
    ):
        if candidate and Path(candidate).is_file():
            try:
                A.verify_sdist(Path(candidate))
                return Path(candidate)
            except RtaxError:
                pass
    return A.download_sdist(tmp_path_factory.mktemp("sdist"))


@pytest.fixture(scope="module")
def prepared(sdist: Path, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("rtax-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(A.CACHE_ENV, str(cache))
        mp.setenv(A.SDIST_ENV, str(sdist))
        t = time.monotonic()
        paths = A.prepare()
        cold = time.monotonic() - t
        t = time.monotonic()
        again = A.prepare()
        warm = time.monotonic() - t
        assert again == paths
        print(f"\nprepare(): cold {cold:.2f}s, warm {warm * 1000:.2f}ms")
        yield paths


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def test_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(A.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert A.cache_dir() == tmp_path / "xdg" / "rtax"
    monkeypatch.setenv(A.CACHE_ENV, str(tmp_path / "c"))
    assert A.cache_dir() == tmp_path / "c"


def test_a_cache_path_with_a_line_break_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reaper and the probe's scripts take a path a line: a line break in the cache's
    path is a one-line error naming the variable, not a ValueError from deep inside."""
    monkeypatch.setenv(A.CACHE_ENV, f"{tmp_path}/a\nb")
    with pytest.raises(RtaxError, match=r"^RTAX_CACHE: .*line break"):
        A.cache_dir()
    monkeypatch.delenv(A.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", f"{tmp_path}/x\ry")
    with pytest.raises(RtaxError, match=r"^XDG_CACHE_HOME: "):
        A.cache_dir()
    monkeypatch.setenv(A.CACHE_ENV, os.fsdecode(os.fsencode(str(tmp_path)) + b"/c\xff"))
    with pytest.raises(RtaxError, match=r"^RTAX_CACHE: .*not UTF-8"):
        A.cache_dir()


def test_sha_verification_rejects_a_wrong_file(tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / A.ATTRS_SDIST_NAME
    bad.write_bytes(b"not attrs")
    with pytest.raises(RtaxError, match="sha256"):
        A.verify_sdist(bad)
    monkeypatch.setenv(A.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(A.SDIST_ENV, str(bad))
    with pytest.raises(RtaxError, match="sha256"):
        A.prepare()
    assert A.find_prepared() is None


def test_bug_edit_must_match_exactly_once(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(RtaxError, match="2 times"):
        A.apply_bug_edit(tmp_path, A.BugEdit("f.py", "x = 1", "x = 2"))
    with pytest.raises(RtaxError, match="0 times"):
        A.apply_bug_edit(tmp_path, A.BugEdit("f.py", "y", "z"))
    A.apply_bug_edit(tmp_path, A.BugEdit("f.py", "x = 1\nx", "x = 1\ny"))
    assert (tmp_path / "f.py").read_text() == "x = 1\ny = 1\n"


def test_repo_layout(prepared: A.AssetPaths) -> None:
    p = prepared
    assert A.find_prepared() == p
    assert A.status()["prepared"] is True
    assert _git(p.repo, "rev-list", "--count", "HEAD").strip() == "2"
    log = _git(p.repo, "log", "--format=%s").splitlines()
    assert log == ["introduce bug", f"attrs {A.ATTRS_VERSION}"]
    head = _git(p.repo, "rev-parse", "HEAD").strip()
    assert _git(p.repo, "rev-parse", "buggy").strip() == head
    assert _git(p.bare, "rev-parse", "buggy").strip() == head
    assert _git(p.repo, "status", "--porcelain") == ""
    assert (p.repo / A.BUG.file).read_text().count(A.BUG.replace) == 1
    patch = p.patch.read_text()
    assert "-" + A.BUG.replace.rstrip("\n") in patch
    assert "+" + A.BUG.find.rstrip("\n") in patch
    assert p.tests == A.PINNED_TESTS


def _run(wl: Workload, ws: Path) -> float:
    if wl.files is not None:
        shutil.copytree(wl.files, ws, symlinks=True, dirs_exist_ok=True)
    t = time.monotonic()
    for i, step in enumerate(wl.steps):
        proc = subprocess.run(
            list(step.argv), cwd=ws, capture_output=True, timeout=step.timeout_s or 120
        )
        out = proc.stdout + proc.stderr
        assert step.matches(proc.returncode, out), (
            f"{wl.name} step {i} {step.argv[:4]} rc={proc.returncode}: {out[-600:]!r}"
        )
    return time.monotonic() - t


def test_builtin_workloads_without_assets() -> None:
    wls = builtin_workloads(None)
    assert list(wls) == ["t0", "capacity"]
    assert set(WORKLOAD_NAMES) >= set(wls)


def test_trajectory_shape() -> None:
    for n in (10, 50, 150):
        steps = trajectory_steps(n)
        assert len(steps) == n
        assert steps == trajectory_steps(n)  # deterministic
        n_tests = sum("pytest" in s.argv for s in steps)
        assert n_tests == (n - 10) // 25 + 1


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_workload_steps_really_pass(name: str, prepared: A.AssetPaths, tmp_path: Path) -> None:
    wls = builtin_workloads(prepared)
    assert list(wls) == list(WORKLOAD_NAMES)
    wl = wls[name]
    assert wl.name == name
    assert wl.needs_assets == (name not in ("t0", "capacity"))
    for step in wl.steps:
        assert all(isinstance(a, str) for a in step.argv)
    ws = tmp_path / "ws"
    ws.mkdir()
    took = _run(wl, ws)
    print(f"\n{name}: {len(wl.steps)} steps in {took:.2f}s")
    if name == "t2":
        assert (ws / "repo" / A.BUG.file).read_text().count(A.BUG.find) == 1  # fixed
        # The test runs wrote nothing else into the clone (no caches, no .hypothesis).
        dirty = _git(ws / "repo", "status", "--porcelain", "--ignored", "-uall")
        assert dirty.splitlines() == [f" M {A.BUG.file}"]
        assert sorted(p.name for p in ws.iterdir()) == ["repo"]


def test_verify(prepared: A.AssetPaths) -> None:
    A.verify(prepared)


def test_prepare_force_rebuilds_identically(prepared: A.AssetPaths) -> None:
    head = _git(prepared.repo, "rev-parse", "HEAD")
    again = A.prepare(force=True)
    assert again == prepared
    assert _git(again.repo, "rev-parse", "HEAD") == head  # deterministic commits
    leftovers = [p.name for p in prepared.root.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []
