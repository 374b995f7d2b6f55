"""The one rule for what of rtax's cache an environment sees: only the assets its workload
names.

`named_assets` is the rule: paths under rtax's attrs assets that the workload's steps or
environment name (a file brings only itself), plus what the caller adds (stage's
`ro_binds`). A step naming any other host path (rtax's cache, another replay's
repository, the host's `/tmp`) makes nothing visible.

stage binds each named path (a copy its sandbox uid can read). The container drivers and
gVisor bind one directory at the cache's own path (steps name the assets by their host
paths): `view_dir`, a directory that holds the named paths, at the same place relative to
the cache, and nothing else. It is made once per set of paths, of hard links (a copy
across file systems), and renamed into place, so concurrent runs share it; its mount is
read-only, so a hard link cannot be written through.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping

from rtax_tui.drivers.toolkit.assets import assets_root, cache_dir

from rtax_tui.model.spec import RtaxError, Workload

VIEWS = "views"  # <cache>/views/<key>: the views, beside the assets


def named_assets(
    workload: Workload, env: Mapping[str, str] | None = None, extra: Iterable[str] = ()
) -> list[str]:
    """Host paths of the assets `workload` names (outermost only, sorted), plus `extra`."""
    root = os.path.realpath(assets_root())
    words: list[str] = [w for step in workload.steps for w in step.argv]
    words += list((env or {}).values())
    found: set[str] = set()
    for w in words:
        for part in re.split(r"[=:,\s]", w):
            if not part.startswith("/"):
                continue
            p = os.path.normpath(part)
            if p.startswith(root + "/") and os.path.exists(p) and ".." not in p.split("/"):
                found.add(p)
    found.update(os.path.normpath(p) for p in extra)
    out: list[str] = []
    for p in sorted(found):  # keep only the outermost of nested paths
        if not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _key(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        st = os.stat(p)
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def _link_tree(src: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.isdir(src):
        res = subprocess.run(["cp", "-al", src, dest], capture_output=True, timeout=600)
        if res.returncode != 0:  # another file system: a copy
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(src, dest, symlinks=True)
        return
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def view_dir(paths: list[str]) -> str:
    """The directory bound at the cache's path for an environment that names `paths`
    (each under the cache): made if missing. Raises RtaxError when it cannot be."""
    cache = os.path.realpath(cache_dir())
    base = os.path.join(cache, VIEWS)
    final = os.path.join(base, _key(paths) if paths else "empty")
    if os.path.isdir(final):
        return final
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=base)
    try:
        for p in paths:
            rel = os.path.relpath(os.path.realpath(p), cache)
            if rel.startswith(".."):
                raise RtaxError(f"asset {p} is not under rtax's cache {cache}")
            _link_tree(p, os.path.join(tmp, rel))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:  # made meanwhile by another rtax
            if not os.path.isdir(final):
                raise
    except (OSError, subprocess.SubprocessError) as exc:
        raise RtaxError(f"cannot make the assets' view {final}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def view_mount() -> str:
    """Where an environment sees its workload's view: the cache's own path (steps name
    the assets by their host paths: T2 clones from, and applies a patch at, absolute
    paths under it)."""
    return os.path.abspath(cache_dir())


def workload_view(workload: Workload, env: Mapping[str, str] | None = None) -> str | None:
    """(for the container drivers and gVisor) The view bound read-only at the cache's
    path for `workload`, or None when it needs no assets."""
    if not workload.needs_assets:
        return None
    return view_dir(named_assets(workload, env))
