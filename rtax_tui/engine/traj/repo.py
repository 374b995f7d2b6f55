"""The workspace of a replay: a profile's `repo` (a git directory or a tarball), checked
out at `commit` if given, prepared once into rtax's cache and copied into every
environment like the attrs assets are.

A tarball that holds no `.git` (a source distribution) is made a repository of one
commit, so that the agent's `git diff` and `git status` work as in its own checkout.

The cache entry is named by what it holds (the git commit's id, or the tarball's sha256
with the commit), so a changed source gets a new entry and an unchanged one is reused; it
is built beside its final place and renamed into it, so a killed rtax leaves at most a
`.tmp-` directory that the next preparation of the same entry removes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from rtax_tui.drivers.toolkit.archive import safe_extract
from rtax_tui.model.spec import RtaxError

_GIT = ("git", "-c", "advice.detachedHead=false", "-c", "safe.directory=*")


def is_tarball(path: str) -> bool:
    try:
        return os.path.isfile(path) and tarfile.is_tarfile(path)
    except OSError:
        return False


def _git(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_GIT, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def _commit_id(repo: str, commit: str | None) -> str | None:
    res = _git("-C", repo, "rev-parse", "--verify", "--quiet", f"{commit or 'HEAD'}^{{commit}}")
    return res.stdout.strip() if res.returncode == 0 else None


def check_repo(repo: str, commit: str | None) -> str | None:
    """Why `repo` (and `commit`) cannot be used, or None. A reason about the commit
    starts with `commit`."""
    if not os.path.exists(repo):
        return f"no such file or directory {repo}"
    if is_tarball(repo):
        return None
    if not os.path.isdir(repo):
        return f"{repo} is neither a git directory nor a tarball"
    if _git("-C", repo, "rev-parse", "--git-dir").returncode != 0:
        return f"{repo} is not a git directory"
    if _commit_id(repo, commit) is None:
        if commit is None:
            return f"{repo} has no commit to check out"
        return f"commit {commit!r} is not in {repo}"
    return None


def _key(repo: str, commit: str | None) -> str:
    h = hashlib.sha256()
    if is_tarball(repo):
        h.update(b"tar2\0")  # 2: a tarball without .git is made one commit
        with open(repo, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(f"\0{commit or ''}".encode())
    else:
        cid = _commit_id(repo, commit)
        if cid is None:
            raise RtaxError(f"{repo}: {check_repo(repo, commit)}")
        h.update(f"git\0{cid}".encode())
    return h.hexdigest()[:16]


def prepare_repo(repo: str, commit: str | None, log: Any = None) -> str:
    """The directory copied into each workspace: the repository at `commit` (HEAD when
    None), `.git` included."""
    from rtax_tui.drivers.toolkit.assets import cache_dir

    key = _key(repo, commit)
    base = cache_dir() / "replay"
    final = base / key
    if (final / "tree").is_dir():
        return str(final / "tree")
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".tmp-{key}"
    shutil.rmtree(tmp, ignore_errors=True)  # a preparation that was killed
    tmp.mkdir()
    if log is not None:
        log(f"preparing the replay workspace from {repo}{' at ' + commit if commit else ''}")
    try:
        _fill(repo, commit, tmp / "tree")
        try:
            os.rename(tmp, final)
        except OSError:  # prepared meanwhile by another rtax
            if not (final / "tree").is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(final / "tree")


def _fill(repo: str, commit: str | None, tree: Path) -> None:
    if is_tarball(repo):
        unpacked = tree.parent / "unpacked"
        safe_extract(repo, unpacked)
        tops = list(unpacked.iterdir())
        os.rename(tops[0] if len(tops) == 1 and tops[0].is_dir() else unpacked, tree)
        if commit is not None:
            if not (tree / ".git").exists():
                raise RtaxError(f"{repo}: commit {commit!r} given, but the tarball is no git tree")
            _checked(_git("-C", str(tree), "checkout", "-q", "--detach", commit), repo)
        elif not (tree / ".git").exists():
            _snapshot(tree, os.path.basename(repo), repo)
        return
    cid = _commit_id(repo, commit)
    if cid is None:
        raise RtaxError(f"{repo}: {check_repo(repo, commit)}")
    # a local clone copies every object, so any commit of the source can be checked out
    _checked(_git("clone", "-q", "--no-hardlinks", "--no-checkout", repo, str(tree)), repo)
    _checked(_git("-C", str(tree), "checkout", "-q", "--detach", cid), repo)


# a snapshot's commit is the same whenever it is made: its id names nothing of this machine
_SNAPSHOT_ENV = {
    "GIT_AUTHOR_NAME": "rtax",
    "GIT_AUTHOR_EMAIL": "rtax@localhost",
    "GIT_COMMITTER_NAME": "rtax",
    "GIT_COMMITTER_EMAIL": "rtax@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def _snapshot(tree: Path, what: str, repo: str) -> None:
    """`tree` as a git repository of one commit (what it holds ignored by its own
    .gitignore stays a file, untracked)."""
    env = {
        **os.environ,
        **_SNAPSHOT_ENV,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for args in (
        ("init", "-q", "-b", "main"),
        ("add", "-A"),
        ("commit", "-q", "--no-gpg-sign", "--allow-empty", "-m", f"{what} (rtax snapshot)"),
    ):
        res = subprocess.run(
            [*_GIT, "-C", str(tree), *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=env,
        )
        _checked(res, repo)


def _checked(res: subprocess.CompletedProcess[str], repo: str) -> None:
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or ["failed"])[-1]
        raise RtaxError(f"{repo}: git: {why}")
