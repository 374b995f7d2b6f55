"""The python-attrs assets of the T1/T2/trajectory workloads.

`prepare()` turns the pinned attrs source distribution (checked by sha256) into:

- `attrs-repo/`: a git repository with two commits, "attrs 26.1.0" (the pristine
  source) and "introduce bug" (tag `buggy`, checked out), made by one `BugEdit`;
- `attrs.git`: a bare clone of it, for T2 to clone from;
- `fix.patch`: `git diff buggy buggy~1`, the patch that reverts the bug.

The pinned tests (`PINNED_TESTS`, run from the repository with `pinned_test_argv()`) fail
at `buggy` and pass once `fix.patch` is applied. Everything is built in a temporary
directory and renamed into place, so concurrent `prepare()` calls are safe; the
directory name carries a hash of the recipe, so changing the recipe rebuilds.
No terminal code here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rtax_tui.drivers.toolkit.archive import safe_extract

from rtax_tui.model.spec import RtaxError

ATTRS_VERSION = "26.1.0"
ATTRS_SDIST_NAME = f"attrs-{ATTRS_VERSION}.tar.gz"
ATTRS_SDIST_SHA256 = "d03ceb89cb322a8fd706d4fb91940737b6642aa36998fe130a9bc96c985eff32"
SDIST_ENV = "RTAX_ATTRS_SDIST"
CACHE_ENV = "RTAX_CACHE"

# Bump when the way the assets are built changes (the directory name changes too).
RECIPE_VERSION = 1

Log = Callable[[str], None]


@dataclass(frozen=True)
class BugEdit:
    """Replace `find` (which must occur exactly once) by `replace` in `file`."""

    file: str
    find: str
    replace: str
    message: str = "introduce bug"


# An off-by-one in `max_len`: values exactly `max_length` long are rejected.
BUG = BugEdit(
    file="src/attr/validators.py",
    find="        if len(value) > self.max_length:\n",
    replace="        if len(value) >= self.max_length:\n",
)

# attrs' own tests that catch BUG (TestMaxLen::test_check_valid[spam] fails).
PINNED_TESTS: tuple[str, ...] = (
    "tests/test_validators.py::TestMaxLen",
    "tests/test_validators.py::TestMinLen",
)
# What pytest prints when PINNED_TESTS run: with the bug (-x stops at the first
# failure) and after the fix.
PINNED_FAIL_SUMMARY = "1 failed"
PINNED_PASS_SUMMARY = "20 passed"
# Fast single tests for the trajectory workloads, which stay at `buggy`: one that
# reproduces the bug and one that passes regardless.
FAST_FAILING_TEST = "tests/test_validators.py::TestMaxLen::test_check_valid"
FAST_FAILING_SUMMARY = "1 failed"
FAST_PASSING_TEST = "tests/test_validators.py::TestMinLen"
FAST_PASSING_SUMMARY = "9 passed"

# Deterministic identities and dates for the two commits.
_GIT_IDENTITY = ("-c", "user.name=rtax", "-c", "user.email=rtax@localhost")
_GIT_NO_SIGN = ("-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false")
_DATE_PRISTINE = "1767225600 +0000"  # 2026-01-01T00:00:00Z
_DATE_BUGGY = "1767229200 +0000"  # one hour later
BRANCH = "main"


@dataclass(frozen=True)
class AssetPaths:
    root: Path  # the directory holding everything below
    repo: Path  # non-bare working repository, checked out at `buggy`
    bare: Path  # attrs.git, a bare clone for T2
    patch: Path  # fix.patch: reverts the bug
    tests: tuple[str, ...]  # pinned pytest node ids, relative to the repository


def pinned_test_argv(tests: tuple[str, ...] | list[str] = PINNED_TESTS) -> list[str]:
    """The argv that runs `tests` from a repository's top directory.

    `PYTHONPATH=src` makes the source tree's `attr`/`attrs` win over any installed
    copy; no cache, bytecode or plugin directory (e.g. pytest-benchmark's
    `.benchmarks`) is written, so the run is independent of which pytest plugins are
    installed and stays inside the repository; nothing needs the network.
    """
    return [
        "env",
        "PYTHONPATH=src",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1",
        "python3",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-x",
        *tests,
    ]


def recipe_id() -> str:
    recipe = {
        "recipe": RECIPE_VERSION,
        "attrs": ATTRS_VERSION,
        "sha256": ATTRS_SDIST_SHA256,
        "bug": asdict(BUG),
        "tests": list(PINNED_TESTS),
        "dates": [_DATE_PRISTINE, _DATE_BUGGY],
    }
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cache_dir() -> Path:
    """`$RTAX_CACHE`, else `$XDG_CACHE_HOME/rtax`, else `~/.cache/rtax`. A path with a
    line break, or not UTF-8, is refused here, in one line: the reaper takes a UTF-8 path
    a line (hosts/reaper.py) and the probe's scripts read one a line."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        path = Path(explicit).expanduser().absolute()  # the same wherever rtax runs from
        where = CACHE_ENV
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg).expanduser() if xdg else Path.home() / ".cache").absolute() / "rtax"
        where = "XDG_CACHE_HOME" if xdg else "HOME"
    text = str(path)
    if "\n" in text or "\r" in text:
        raise RtaxError(f"{where}: rtax's cache path has a line break: {text!r}")
    try:
        text.encode()
    except UnicodeEncodeError:  # a byte that is not UTF-8: the reaper's lines are UTF-8
        raise RtaxError(f"{where}: rtax's cache path is not UTF-8: {text!r}") from None
    return path


# The cache's stores of what rtax builds from its own recipes and inputs, written only by
# rtax's builders (under a build lock, or by an atomic rename), never from what a step
# prints: the Debian root's tar (images), the VM guest (vm), gVisor's extracted roots
# (gvisor), downloads, the assets (attrs-*, staged as .attrs-*), the assets' views (hard
# links, bound read-only), the Python sdists (sdist), the trajectories' repositories
# (replay), seccomp filters (seccomp) and stage's helper (stage). An environment sees them
# read-only or not at all. The probe's `host_sinks` measures the rest of the cache:
# another rtax building an image there at the same time is not a step's output.
BUILT_STORES = (
    "images", "vm", "gvisor", "downloads", "attrs-*", ".attrs-*", "views", "sdist", "replay",
    "seccomp", "stage",
)  # fmt: skip


def assets_root() -> Path:
    return cache_dir() / f"attrs-{ATTRS_VERSION}-{recipe_id()}"


def _paths(root: Path) -> AssetPaths:
    return AssetPaths(
        root=root,
        repo=root / "attrs-repo",
        bare=root / "attrs.git",
        patch=root / "fix.patch",
        tests=PINNED_TESTS,
    )


_STAMP = "READY.json"


def find_prepared() -> AssetPaths | None:
    """The prepared assets of the current recipe, or None (builds nothing)."""
    root = assets_root()
    if (root / _STAMP).is_file():
        return _paths(root)
    return None


def status() -> dict[str, Any]:
    """For `doctor`: whether the assets are prepared and where."""
    root = assets_root()
    prepared = (root / _STAMP).is_file()
    cached_sdist = cache_dir() / "downloads" / ATTRS_SDIST_NAME
    info: dict[str, Any] = {
        "prepared": prepared,
        "root": str(root),
        "cache_dir": str(cache_dir()),
        "attrs_version": ATTRS_VERSION,
        "recipe": recipe_id(),
        "sdist_cached": cached_sdist.is_file(),
        "sdist_override": os.environ.get(SDIST_ENV) or None,
    }
    if prepared:
        p = _paths(root)
        info.update(repo=str(p.repo), bare=str(p.bare), patch=str(p.patch), tests=list(p.tests))
    return info


# --- sdist ------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_sdist(path: Path, expected: str = ATTRS_SDIST_SHA256) -> None:
    """Raise RtaxError unless `path` has the pinned sha256."""
    if not path.is_file():
        raise RtaxError(f"attrs sdist not found: {path}")
    got = sha256_file(path)
    if got != expected:
        raise RtaxError(
            f"attrs sdist {path} has sha256 {got}, expected {expected} "
            f"(attrs=={ATTRS_VERSION}); refusing to use it"
        )


def download_sdist(dest_dir: Path, log: Log | None = None) -> Path:
    """`pip download` the pinned attrs sdist into `dest_dir`, verified; returns its path."""
    _log(log, f"downloading attrs=={ATTRS_VERSION} sdist with pip")
    dest_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        # Only attrs itself must come as source. `--no-binary :all:` would apply to
        # pip's metadata build dependencies (hatchling, hatch-vcs, ...) too and build
        # them all from source: ~5 min with a cold pip cache instead of ~4 s. The
        # sdist is the same file either way (the sha256 is checked).
        "--no-binary",
        "attrs",
        f"attrs=={ATTRS_VERSION}",
        "-d",
        str(dest_dir),
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RtaxError(f"pip download of attrs=={ATTRS_VERSION} failed: {e}") from e
    path = dest_dir / ATTRS_SDIST_NAME
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RtaxError(
            f"pip download of attrs=={ATTRS_VERSION} failed (rc={proc.returncode}): "
            + " | ".join(tail)
            + f"; set {SDIST_ENV}=path to use a local copy"
        )
    verify_sdist(path)
    return path


def _obtain_sdist(log: Log | None) -> Path:
    override = os.environ.get(SDIST_ENV)
    if override:
        path = Path(override).expanduser()
        _log(log, f"using attrs sdist from {SDIST_ENV}: {path}")
        verify_sdist(path)
        return path
    downloads = cache_dir() / "downloads"
    cached = downloads / ATTRS_SDIST_NAME
    if cached.is_file():
        try:
            verify_sdist(cached)
            return cached
        except RtaxError:
            _log(log, f"cached sdist {cached} is corrupt; downloading again")
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=downloads) as tmp:
        got = download_sdist(Path(tmp), log)
        os.replace(got, cached)  # atomic; same bytes if two processes race
    return cached


def _extract(sdist: Path, dest: Path) -> None:
    """Extract the sdist's single top directory as `dest`."""
    staging = dest.parent / (dest.name + ".extract")
    staging.mkdir()
    safe_extract(sdist, staging)
    tops = list(staging.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise RtaxError(f"unexpected layout in {sdist}: {[t.name for t in tops]}")
    tops[0].rename(dest)
    staging.rmdir()


# --- git --------------------------------------------------------------------------------


def _git_env(date: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # No user/system config, hooks or templates may change what gets built.
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        TZ="UTC",
    )
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(k, None)
    if date is not None:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    return env


def _git(*args: str, cwd: Path, date: str | None = None) -> str:
    argv = ["git", *_GIT_IDENTITY, *_GIT_NO_SIGN, *args]
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=_git_env(date), capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RtaxError(f"git {' '.join(args)} failed: {e}") from e
    if proc.returncode != 0:
        raise RtaxError(
            f"git {' '.join(args)} failed (rc={proc.returncode}): {proc.stderr.strip()}"
        )
    return proc.stdout


def apply_bug_edit(repo: Path, edit: BugEdit) -> None:
    """Apply `edit` to the working tree of `repo`; `find` must occur exactly once."""
    path = repo / edit.file
    if not path.is_file():
        raise RtaxError(f"bug edit: {edit.file} does not exist in {repo}")
    text = path.read_text(encoding="utf-8")
    n = text.count(edit.find)
    if n != 1:
        raise RtaxError(
            f"bug edit: the text to replace occurs {n} times in {edit.file}, expected once"
        )
    path.write_text(text.replace(edit.find, edit.replace), encoding="utf-8")


def _build(sdist: Path, root: Path, log: Log | None) -> None:
    p = _paths(root)
    _log(log, "extracting the sdist")
    _extract(sdist, p.repo)
    _log(log, "making the git repository")
    _git("init", "-q", "-b", BRANCH, cwd=p.repo)
    _git("add", "-A", "-f", cwd=p.repo)
    _git(
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"attrs {ATTRS_VERSION}",
        cwd=p.repo,
        date=_DATE_PRISTINE,
    )
    apply_bug_edit(p.repo, BUG)
    _git("add", "-A", "-f", cwd=p.repo)
    _git("commit", "-q", "--no-verify", "-m", BUG.message, cwd=p.repo, date=_DATE_BUGGY)
    _git("tag", "buggy", cwd=p.repo)
    patch = _git("diff", "--no-color", "--no-ext-diff", "buggy", "buggy~1", cwd=p.repo)
    if not patch.strip():
        raise RtaxError("the fix patch is empty")
    p.patch.write_text(patch, encoding="utf-8")
    _git("gc", "-q", "--prune=now", cwd=p.repo)
    _git("clone", "-q", "--bare", "--no-hardlinks", str(p.repo), str(p.bare), cwd=root)
    _git("remote", "remove", "origin", cwd=p.bare)  # it named the temporary path
    status_out = _git("status", "--porcelain", cwd=p.repo)
    if status_out.strip():
        raise RtaxError(f"attrs-repo is not clean after building: {status_out.strip()}")
    stamp = {
        "recipe": recipe_id(),
        "attrs": ATTRS_VERSION,
        "sha256": ATTRS_SDIST_SHA256,
        "buggy": _git("rev-parse", "buggy", cwd=p.repo).strip(),
        "tests": list(PINNED_TESTS),
        "built_at": time.time(),
    }
    (root / _STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")


def prepare(force: bool = False, log: Log | None = None) -> AssetPaths:
    """Build the attrs assets if needed (idempotent; safe to run concurrently)."""
    root = assets_root()
    if not force and (root / _STAMP).is_file():
        return _paths(root)
    sdist = _obtain_sdist(log)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it 0700; drivers may read it as another user
        _build(sdist, tmp, log)
        if force and root.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
            try:
                os.rename(root, old / "x")
            except FileNotFoundError:
                pass
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(tmp, root)
        except OSError:
            # Another process won the race (the target exists and is not empty).
            if not (root / _STAMP).is_file():
                raise
            _log(log, "assets were prepared concurrently by another process")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _log(log, f"attrs assets ready in {root}")
    return _paths(root)


def verify(paths: AssetPaths, log: Log | None = None) -> None:
    """Check in a scratch clone that the pinned tests fail at `buggy` and pass after
    `fix.patch` (runs the system `python3`; needs pytest and hypothesis)."""
    with tempfile.TemporaryDirectory(prefix="rtax-verify-") as tmp:
        work = Path(tmp) / "repo"
        _git("clone", "-q", str(paths.bare), str(work), cwd=Path(tmp))
        for stage, want_fail in (("before the patch", True), ("after the patch", False)):
            if not want_fail:
                _git("apply", str(paths.patch), cwd=work)
            _log(log, f"running the pinned tests {stage}")
            proc = subprocess.run(
                pinned_test_argv(paths.tests), cwd=work, capture_output=True, text=True, timeout=300
            )
            out = proc.stdout + proc.stderr
            if want_fail:
                ok = proc.returncode != 0 and PINNED_FAIL_SUMMARY in out
            else:
                ok = proc.returncode == 0 and PINNED_PASS_SUMMARY in out
            if not ok:
                tail = " | ".join(out.strip().splitlines()[-3:])
                want = "fail" if want_fail else "pass"
                raise RtaxError(
                    f"pinned tests should {want} {stage} (rc={proc.returncode}): {tail}"
                )


def _log(log: Log | None, msg: str) -> None:
    if log is not None:
        log(msg)
