"""A replay's project from a package index: `project = "NAME==VERSION"` in a replay table
fetches NAME's source distribution at VERSION, the release a trajectory's agent worked on
(SWE-bench's astropy-12907 is astropy 4.3), so that the replay's workspace holds the
project's own files where no git repository of it is at hand.

The index is read through the Simple API (PEP 691 JSON, else PEP 503 HTML: every index
pip reads), `https://pypi.org/simple` unless the profile's `index` says another. The file
is checked against the sha256 the index gives, and kept under rtax's cache by that hash,
so a second run reads nothing from the network. Only a pinned version is accepted: a
replay is measured against one tree, not whichever release is newest today.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rtax_tui.model.spec import RtaxError

DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT_S = 60.0
MAX_BYTES = 512 << 20  # an sdist larger than this is refused (a bad index, not a project)
_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$")
_ANCHOR = re.compile(r"<a\s[^>]*href=\"([^\"]+)\"[^>]*>([^<]+)</a>", re.I)
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class ProjectError(RtaxError):
    """The project could not be had: what and why, in one line (exit status 2)."""


def parse_project(value: str) -> tuple[str, str]:
    """(name, version) of `NAME==VERSION`; ValueError with what is expected otherwise."""
    m = _SPEC.match(value)
    if m is None:
        raise ValueError(
            f"expected NAME==VERSION (a pinned release, e.g. astropy==4.3), got {value!r}"
        )
    return m.group(1), m.group(2)


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _sdist_version(filename: str, name: str) -> str | None:
    """The version of an sdist file name of project `name` (`NAME-VERSION.tar.gz`), else
    None (a wheel, a zip, another project's file)."""
    if not filename.endswith(".tar.gz"):
        return None
    stem = filename[: -len(".tar.gz")]
    base, sep, version = stem.rpartition("-")
    if not sep or normalize(base) != normalize(name):
        return None
    return version


def _get(url: str, accept: str | None = None) -> tuple[bytes, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - http(s) only
        data = resp.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ProjectError(f"{url}: larger than {MAX_BYTES >> 20} MiB")
        return data, str(resp.headers.get("Content-Type", ""))


def _files(index: str, name: str) -> list[tuple[str, str, str | None]]:
    """(filename, absolute url, sha256 or None) of every file the index lists for `name`."""
    page = f"{index.rstrip('/')}/{normalize(name)}/"
    data, ctype = _get(page, _ACCEPT)
    out: list[tuple[str, str, str | None]] = []
    if "json" in ctype:
        doc: Any = json.loads(data)
        for f in doc.get("files", []):
            url = urllib.parse.urljoin(page, str(f.get("url", "")))
            sha = (f.get("hashes") or {}).get("sha256")
            out.append((str(f.get("filename", "")), url, sha if isinstance(sha, str) else None))
        return out
    for href, text in _ANCHOR.findall(data.decode("utf-8", "replace")):
        url = urllib.parse.urljoin(page, href.replace("&amp;", "&"))
        frag = urllib.parse.urlparse(url).fragment
        sha = frag[len("sha256=") :] if frag.startswith("sha256=") else None
        out.append((text.strip(), url.split("#", 1)[0], sha))
    return out


def fetch_sdist(project: str, index: str | None = None, log: Any = None) -> str:
    """The path of `project`'s (NAME==VERSION) source distribution, fetched once from
    `index` into rtax's cache and checked against the index's sha256."""
    from rtax_tui.drivers.toolkit.assets import cache_dir, sha256_file

    name, version = parse_project(project)
    index = index or DEFAULT_INDEX
    base = cache_dir() / "sdist"
    # what the index said the last time: a run after the first reads no network
    note = (
        base
        / "by-name"
        / hashlib.sha256(f"{index}\0{normalize(name)}\0{version}".encode()).hexdigest()
    )
    try:
        seen = json.loads(note.read_text())
        cached = base / seen["sha256"] / seen["filename"]
        if cached.is_file() and sha256_file(cached) == seen["sha256"]:
            return str(cached)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        files = _files(index, name)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ProjectError(
            f"project {project}: the index {index} could not be read: {exc}"
        ) from None
    found = [(f, u, s) for f, u, s in files if _sdist_version(f, name) == version]
    if not found:
        have = sorted({v for f, _, _ in files if (v := _sdist_version(f, name))})
        also = f" (source distributions there: {', '.join(have[-8:])})" if have else ""
        raise ProjectError(f"project {project}: no source distribution {version} at {index}{also}")
    filename, url, sha = found[0]
    if sha is None or not re.fullmatch(r"[0-9a-f]{64}", sha) or "/" in filename:
        raise ProjectError(f"project {project}: the index gives no sha256 for {filename}")
    final = base / sha / filename
    if final.is_file() and sha256_file(final) == sha:
        _remember(note, sha, filename)
        return str(final)
    if log is not None:
        log(f"fetching {filename} from {index}")
    try:
        data, _ = _get(url)
    except (urllib.error.URLError, OSError) as exc:
        raise ProjectError(f"project {project}: {url} could not be fetched: {exc}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise ProjectError(f"project {project}: {filename} has sha256 {got}, the index says {sha}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{os.getpid()}-{filename}")
    tmp.write_bytes(data)
    os.replace(tmp, final)
    _remember(note, sha, filename)
    return str(final)


def _remember(note: Path, sha: str, filename: str) -> None:
    note.parent.mkdir(parents=True, exist_ok=True)
    tmp = note.with_name(f".tmp-{os.getpid()}-{note.name}")
    tmp.write_text(json.dumps({"sha256": sha, "filename": filename}))
    os.replace(tmp, note)
