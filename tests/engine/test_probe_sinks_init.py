"""The probe's `host_sinks` check writes through pid 1's streams only where pid 1 is the
environment's own: in the host's pid namespace (`local`, or a host whose namespace is
unknown) pid 1 is the host's init, whose stderr may be a CI runner's log. A run of the
probe under `local` in a fresh Debian root once wrote 320 MiB of NULs into the CI log
that way, so the CI's output of that run could not be read."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rtax_tui.engine.probe import scripts as S

MIB = 1 << 20


def _sinks_under_own_init(tmp_path: Path, host_ns: str) -> tuple[str, int]:
    """Run the check as a child of pid 1 of a new pid namespace whose stderr is a file;
    `host_ns`: `same` (the check is told that namespace is the host's) or a stranger's.
    Returns the check's output and how many bytes reached pid 1's stderr."""
    log, out = tmp_path / "init-stderr", tmp_path / "out"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    init = (
        'exec 2>"$LOG"; ns=$(readlink /proc/self/ns/pid); '
        '[ "$HOSTNS" = same ] || ns="$HOSTNS"; '
        'sh -c "$SCRIPT" s 1 exec "$BOOT" "$ns" >"$OUT" 2>/dev/null & wait'
    )  # `&`: dash applies a foreground command's redirections in pid 1 itself meanwhile
    env = {**os.environ, "LOG": str(log), "OUT": str(out), "BOOT": boot, "HOSTNS": host_ns,
           "SCRIPT": S.SINKS}  # fmt: skip
    subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", init],
        env=env, check=True, timeout=60,
    )  # fmt: skip
    return out.read_text(errors="replace")[:4096], log.stat().st_size


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a pid namespace of the test's own needs root and unshare(1)",
)


@needs_root
def test_the_hosts_own_init_is_never_written(tmp_path: Path) -> None:
    out, wrote = _sinks_under_own_init(tmp_path, "same")
    assert wrote == 0
    assert "@skipped=pid 1's streams" in out and "@stream=pid 1" not in out
    assert "@done" in out  # the step's own output still goes through


@needs_root
def test_an_environments_own_init_is_written(tmp_path: Path) -> None:
    """The same check, told the host's namespace is another: pid 1 is the environment's,
    and its streams are what the check is for (container logs, a sandbox init's stderr)."""
    out, wrote = _sinks_under_own_init(tmp_path, "pid:[1]")
    assert wrote == MIB
    assert "@stream=pid 1 fd 2" in out and "@skipped" not in out


@needs_root
def test_an_unknown_host_namespace_counts_as_the_hosts(tmp_path: Path) -> None:
    out, wrote = _sinks_under_own_init(tmp_path, "-")
    assert wrote == 0 and "@skipped" in out


def test_the_verdict_says_which_streams_were_not_written() -> None:
    from rtax_tui.engine.probe.classify import Context, Outcome, classify

    out = Outcome(
        "@skipped=pid 1's streams (the host's own init)\n@stream=own stdout\n@done",
        0, None, {"wrote_mib": 320, "drops": {"/run": 0}},
    )  # fmt: skip
    v = classify("host_sinks", out, Context())
    assert v.result == "held", v
    assert "not written: pid 1's streams (the host's own init)" in v.evidence


def test_the_cache_is_measured_without_the_stores_its_builders_fill(tmp_path: Path) -> None:
    """A CI run once read a VM probe's `host_sinks` as breached: rtax's cache grew by 370
    MiB while the step wrote 320 - another worker extracting gVisor's root there. What
    rtax's builders fill (BUILT_STORES) is left out; anything else in the cache counts,
    a new entry or a hidden one too."""
    import asyncio

    from rtax_tui.engine.probe.run import _held_mib
    from rtax_tui.hosts.local import LocalHost

    cache = tmp_path / "cache"
    for d in ("images", "gvisor", "attrs-26.1.0-abc", ".attrs-26.1.0-abc.tmp-x", "replay", "probe"):
        (cache / d).mkdir(parents=True)

    def held() -> int:
        got = asyncio.run(_held_mib(LocalHost(), [], str(cache)))
        return got[str(cache)]

    start = held()
    (cache / "images" / "workload.tar").write_bytes(b"x" * 3 * MIB)
    (cache / "gvisor" / "root").mkdir()
    (cache / "gvisor" / "root" / "big").write_bytes(b"x" * 3 * MIB)
    (cache / "attrs-26.1.0-abc" / "f").write_bytes(b"x" * 3 * MIB)
    (cache / ".attrs-26.1.0-abc.tmp-x" / "f").write_bytes(b"x" * 3 * MIB)
    (cache / "replay" / "repo").write_bytes(b"x" * 3 * MIB)
    assert held() == start  # the builders' stores: not a step's output
    (cache / "probe" / "log").write_bytes(b"x" * 2 * MIB)
    assert held() == start + 2
    (cache / ".hidden").write_bytes(b"x" * 2 * MIB)
    (cache / "new-store").mkdir()
    (cache / "new-store" / "f").write_bytes(b"x" * 2 * MIB)
    assert held() == start + 6  # what rtax does not build is counted, hidden or new
