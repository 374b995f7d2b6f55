"""Issue 34's H2, H3, H4 and H8, each as the attack a workload that read rtax's code
would make, on every driver it applies to, shown not to get through.

- H2 (gvisor): the sandbox init's stderr (`/proc/1/fd/2`) was a host file under
  /run/rtax/gvisor/<id>/: 100 MB written there must not grow anything on the host.
- H3 (docker, podman): the shell channel's shell is the container's init, whose output
  the engine logged to a host file of no size: 50 MB printed must leave no log.
- H4 (stage, docker, podman, gvisor): an asset workload could read the rest of rtax's
  cache (a sentinel, another asset): it sees only the assets it names.
- H8 (docker): a `pull` trial removed the engine's image, every tag, under a `cached`
  run on the same daemon: both runs side by side finish with every trial ok.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.toolkit import assets as A

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.spec import Cell, EnvSpec, Limits, Step, Workload
from tests.services import usable_driver

LABEL = f"pysink{os.getpid()}{os.urandom(2).hex()}"
ROOT = os.geteuid() == 0
MB = 1_000_000


def _spec(driver: str, channel: str, steps: tuple[Step, ...] = (), assets: bool = False):
    return EnvSpec(
        cell=Cell("local", driver, "t", channel),
        workload=Workload("t", steps, needs_assets=assets),
        limits=Limits(cpus=1, memory_mib=256, pids=128, workspace_mib=64),
        label=LABEL,
    )


def _usable(driver: str, request: pytest.FixtureRequest) -> Any:
    """The driver, what it needs up and its check passed (tests/services.py), or a skip."""
    if not ROOT:
        pytest.skip("these drivers need root here")
    return usable_driver(driver, request)


def _du_kib(path: str) -> int:
    res = subprocess.run(["du", "-skx", path], capture_output=True, text=True)
    return int(res.stdout.split()[0]) if res.returncode == 0 and res.stdout else 0


@pytest.fixture(autouse=True, scope="module")
def _cleanup():
    yield
    for d in ("docker", "podman", "gvisor", "stage"):
        try:
            asyncio.run(get_driver(d, LocalHost(), {}).cleanup(LABEL))
        except Exception:
            pass


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_h2_gvisor_init_stderr_grows_nothing_on_the_host(request, channel):
    """100 MB into /proc/1/fd/2: drained from a pipe, both ends kept, no host file."""
    drv = _usable("gvisor", request)
    write = Step(("sh", "-c", f"head -c {100 * MB} /dev/zero >/proc/1/fd/2; echo wrote"))

    async def run() -> tuple[int, int, int, bytes]:
        env: Any = drv.environment(_spec("gvisor", channel, (write,)))
        await env.create()
        try:
            await env.ready()
            before = _du_kib(env.dir)
            r = await env.action(write, 120)
            after = _du_kib(env.dir)
            await asyncio.sleep(0.5)  # the drain catches up
            return before, after, env.err.total, r.output
        finally:
            await env.teardown()

    before, after, drained, out = asyncio.run(run())
    assert b"wrote" in out[-200:] or channel == "shell", out[-300:]
    assert after - before < 1024, f"the sandbox's directory grew {before} -> {after} KiB"
    if channel == "exec":  # the shell channel's fd 2 is the framing's stream, read by rtax
        assert drained >= 100 * MB


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_h3_shell_output_leaves_no_engine_log(request, engine):
    """50 MB printed by a step of the shell channel (the shell is the container's init):
    the container has no log driver, no log file, and its directory stays small."""
    drv = _usable(engine, request)
    shout = Step(("sh", "-c", f"head -c {50 * MB} /dev/zero | tr '\\0' x; echo; echo done"))

    async def run() -> dict[str, Any]:
        env: Any = drv.environment(_spec(engine, "shell", (shout,)))
        await env.create()
        try:
            await env.ready()
            api = await drv.api()
            r = await env.action(shout, 120)
            assert r.rc == 0, r
            info = await asyncio.to_thread(api.inspect_container, env.cid)
            log = info.get("LogPath") or ""
            return {
                "driver": info["HostConfig"]["LogConfig"]["Type"],
                "log": os.path.getsize(log) if log and os.path.exists(log) else 0,
                "dir": _du_kib(os.path.dirname(log)) if log and os.path.exists(log) else 0,
            }
        finally:
            await env.teardown()

    got = asyncio.run(run())
    assert got["driver"] == "none", got
    assert got["log"] < 1 << 20 and got["dir"] < 4096, got


@pytest.mark.parametrize("driver", ["stage", "docker", "podman", "gvisor"])
def test_h4_an_asset_workload_sees_only_the_assets_it_names(request, driver, tmp_path):
    """A T2-like workload names the fix patch: a sentinel in rtax's cache and the
    assets it does not name (the working repository, the bare clone) are not there."""
    drv = _usable(driver, request)
    paths = A.find_prepared()
    if paths is None:
        pytest.skip("the attrs assets are not prepared (rtax assets prepare)")
    cache = A.cache_dir()
    sentinel = cache / f"rtax-h4-{os.urandom(4).hex()}"
    sentinel.mkdir()
    token = os.urandom(8).hex()
    (sentinel / "secret").write_text(token)
    look = (
        'cat "$1" >/dev/null && echo named-ok; cat "$2"/secret 2>/dev/null; '
        'ls -a "$3" "${1%/*}" 2>/dev/null; ls "$3"/*/ 2>/dev/null; true'
    )
    step = Step(("sh", "-c", look, "x", str(paths.patch), str(sentinel), str(cache)))

    async def run() -> bytes:
        env: Any = drv.environment(_spec(driver, "exec", (step,), assets=True))
        await env.create()
        try:
            await env.ready()
            return (await env.action(step, 60)).output
        finally:
            await env.teardown()

    try:
        out = asyncio.run(run()).decode(errors="replace")
    finally:
        shutil.rmtree(sentinel)
    assert "named-ok" in out, out
    assert token not in out and sentinel.name not in out, out
    for other in (paths.repo.name, paths.bare.name, "gvisor", "vm", "replay"):
        assert other not in out.split(), (other, out)


def _profile(path: Path, image: str) -> Path:
    path.write_text(
        '[run]\ndrivers = ["docker"]\nworkloads = ["t0"]\ntrials = 3\nwarmup = 0\n'
        f'images = ["{image}"]\n'
    )
    return path


def test_h8_a_pull_run_beside_a_cached_run_on_one_dockerd(request, tmp_path):
    """Two rtax runs on one dockerd at once, one pulling, one using the cached image:
    each finishes with every trial valid, and no tag of the engine is lost."""
    _usable("docker", request)
    import docker

    api = docker.APIClient(base_url="unix:///var/run/docker.sock")
    before = {t for img in api.images() for t in img.get("RepoTags") or ()}
    runs = {}
    for mode in ("pull", "cached"):
        out = tmp_path / f"{mode}.jsonl"
        argv = [sys.executable, "-m", "rtax_tui", "run", str(_profile(tmp_path / f"{mode}.toml",
                mode)), "--headless", "--quiet", "-o", str(out)]  # fmt: skip
        runs[mode] = (subprocess.Popen(argv, stderr=subprocess.PIPE, text=True), out)
    for mode, (proc, out) in runs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (mode, err[-2000:])
        events = [json.loads(line) for line in out.read_text().splitlines()]
        ends = [e for e in events if e["type"] == "trial_end"]
        assert len(ends) == 3 and all(e["valid"] for e in ends), (mode, ends)
    after = {t for img in api.images() for t in img.get("RepoTags") or ()}
    assert before <= after, before - after


def test_an_error_message_is_capped_in_the_recording():
    """A message carrying what an environment wrote (a runtime's stderr) is kept to
    ERROR_CHARS, its start and its end."""
    from rtax_tui.model.errors import ERROR_CHARS, ErrorKind, TrialError

    msg = "start " + "x" * 10_000_000 + " end"
    got = TrialError("create", ErrorKind.ERROR, msg).to_event()["message"]
    assert len(got) <= ERROR_CHARS and got.startswith("start ") and got.endswith(" end")
