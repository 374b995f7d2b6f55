"""Image delivery (issue 24): the `image` phase, its modes, the bytes the server counted,
and nothing left mounted or serving, on stage with a real nginx, rclone and squashfs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from rtax_tui.drivers.toolkit import delivery

from rtax_tui.analysis.image_report import image_mode
from rtax_tui.model.spec import Cell

ROOT = Path(__file__).resolve().parents[2]


def _rtax(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args], capture_output=True, text=True, timeout=timeout
    )


def _mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if ln.split()[4].startswith(path)]


def _rclones(pid: int) -> list[str]:
    """rclone processes whose mount is one of run `pid`'s."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "rclone" in ln and f"-{pid}-" in ln]


def _group(pgid: int) -> list[str]:
    """The live processes of a process group (a zombie has ended: its parent, killed by
    the test, left it to an init that reaps when it will)."""
    out = subprocess.run(["ps", "-eo", "pgid=,pid=,stat=,args="], capture_output=True, text=True)
    return [ln for ln in out.stdout.splitlines()
            if ln.split()[0] == str(pgid) and not ln.split()[2].startswith("Z")]  # fmt: skip


def test_a_cell_carries_its_image_mode_and_one_without_keeps_its_id() -> None:
    assert Cell("local", "stage", "t0", "exec").id == "local/stage/t0/exec"
    c = Cell("local", "stage", "t0", "exec", "cold", "burst:4", "lazy")
    assert c.id == "local/stage/t0/exec~lazy@burst:4"
    assert image_mode(c.id) == "lazy" and image_mode("local/stage/t0/exec") is None
    assert image_mode("ssh://a~b/stage/t0/exec") is None  # a host's ~ is not a mode


def test_image_modes_that_cannot_run_are_refused_with_the_line(tmp_path: Path) -> None:
    cases = [
        ('"stage"]\nimages = ["cached", "warm"]',
         ":3: images: unknown 'warm' (allowed: cached, pull, lazy)"),
        ('"stage"]\nimages = ["pull", "pull"]', ":3: images: a mode is listed twice"),
        ('"stage", "local"]\nimages = ["pull"]',
         ":3: images: driver local has no image mode pull (its modes: none)"),
        ('"stage"]\nmodes = ["pool"]\nimages = ["cached"]',
         ":4: images: a pooled environment's image is delivered before a trial asks for it"),
    ]  # fmt: skip
    for body, want in cases:
        bad = tmp_path / "bad.toml"
        bad.write_text(f"[run]\ndrivers = [{body}\n")
        res = _rtax("run", str(bad), "-o", str(tmp_path / "r.jsonl"))
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and want in lines[0] and str(bad) in lines[0], res.stderr
    nocache = tmp_path / "nocache.toml"
    nocache.write_text('[run]\ndrivers = ["stage"]\npage_cache = "dropped"\n')
    res = _rtax("run", str(nocache), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2, res.stderr
    assert f"{nocache}:3: page_cache: dropped before an image phase: needs [run] images" in (
        res.stderr
    )
    # a driver that has some of the modes: its cells of the others are left out, and said
    some = tmp_path / "some.toml"
    some.write_text('[run]\ndrivers = ["local"]\nimages = ["cached"]\n')
    res = _rtax("run", str(some), "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2 and "driver local has no image mode cached" in res.stderr
    res = _rtax("run", "t0", "--driver", "stage", "--image", "lazy,eager", "-o",
                str(tmp_path / "r.jsonl"))  # fmt: skip
    assert res.returncode == 2 and "command line: images: unknown 'eager'" in res.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.fixture(scope="module")
def image_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("image delivery mounts images: root only")
    lacking = delivery.missing_tools()
    assert not lacking, f"bootstrap installs these: {lacking}"


def test_each_mode_delivers_the_image_root_and_the_server_counts_what_it_sent(
    tmp_path: Path, image_tools: None
) -> None:
    prof = tmp_path / "img.toml"
    # the image's root, not the host's: rclone is on the host, not in the workload image
    prof.write_text(
        '[run]\ndrivers = ["stage"]\nworkloads = ["t0", "own"]\ntrials = 2\nwarmup = 1\n'
        'images = ["cached", "pull", "lazy"]\n'
        '[workloads.own]\nsteps = [{argv = ["sh", "-c", "test ! -e /usr/bin/rclone && '
        'python3 -c \\"import hypothesis\\""], expect_rc = 0}]\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events[0]["profile"]["images"] == ["cached", "pull", "lazy"]
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 18 and all(e["valid"] for e in ends), [e for e in ends if not e["valid"]]
    starts = {e["trial"]: e for e in events if e["type"] == "trial_start"}
    images = [e for e in events if e["type"] == "image"]
    assert len(images) == 18
    phase = {e["trial"]: e["dur_ns"] for e in events if e["type"] == "phase"
             and e["name"] == "image"}  # fmt: skip
    assert set(phase) == set(starts)
    size = os.path.getsize(delivery.squashfs_image())
    for e in images:
        mode = starts[e["trial"]]["image"]
        assert e["mode"] == mode and e["cell"] == starts[e["trial"]]["cell"]
        assert e["cell"].endswith(f"~{mode}") and e["size"] == size
        if mode == "cached":
            assert e["fetched"] == 0 and e["requests"] == 0
        elif mode == "pull":  # the whole image in one response, its headers on top
            assert size < e["fetched"] < size + 4096 and e["requests"] == 1
        else:  # only what was read: a small part of the image
            assert 0 < e["fetched"] < size // 4 and e["requests"] >= 2
    res = _rtax("report", str(out), "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {r["cell"]: r for r in json.loads(res.stdout)["image"]}
    assert len(rows) == 6
    for cell, row in rows.items():
        mine = sorted(e["fetched"] for e in images if e["cell"] == cell and not e["warmup"])
        assert row["fetched_p50"] == (mine[0] + mine[1]) / 2  # a second way: the raw events
        assert row["mode"] == cell.rsplit("~", 1)[1] and row["n"] == 2
        assert row["image"]["p50_ms"] is not None
    lazy = rows["local/stage/t0/exec~lazy"]
    assert 0 < lazy["fraction"] < 0.25
    md = _rtax("report", str(out), "--format", "markdown").stdout
    assert "image delivery: per cell and image mode" in md and "of 111 MB" in md.replace(
        f"{size / 1e6:.3g} MB", "111 MB"
    )
    # worker-hours count the image phase once a trajectory (recomputed from the events)
    res = _rtax("project", str(out), "--trajectories", "1000", "--steps", "10", "--format",
                "json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    proj = {c["cell"]: c for c in json.loads(res.stdout)["cells"]}
    pull = proj["local/stage/t0/exec~pull"]
    measured = {t for t, e in starts.items() if not e["warmup"] and e["cell"] == pull["cell"]}

    def med(name: str) -> float:
        vals = sorted(e["dur_ns"] for e in events if e["type"] == "phase"
                      and e["name"] == name and e["trial"] in measured)  # fmt: skip
        return (vals[0] + vals[1]) / 2 / 1e9

    assert pull["inputs"]["image"]["p50_s"] == pytest.approx(med("image"))
    acts = sorted(e["dur_ns"] for e in events if e["type"] == "action" and e["trial"] in measured)
    per = med("image") + med("create") + med("ready") + med("teardown")
    per += 10 * (acts[len(acts) // 2] + acts[(len(acts) - 1) // 2]) / 2 / 1e9
    assert pull["per_trajectory_s"] == pytest.approx(per)
    svg = tmp_path / "image.svg"
    res = _rtax("plot", str(out), "--kind", "image", "-o", str(svg))
    assert res.returncode == 0, res.stderr
    assert 'id="series:local/stage/t0/exec~lazy#' in svg.read_text()
    assert _mounts_under(delivery.TRIALS) == []
    assert os.listdir(delivery.TRIALS) == []


def test_the_image_plot_says_when_a_run_has_no_image_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    res = _rtax("run", "t0", "--driver", "local", "--trials", "1", "--warmup", "0",
                "--headless", "--quiet", "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = _rtax("plot", str(out), "--kind", "image", "-o", str(tmp_path / "i.svg"))
    assert res.returncode == 2
    want = "rtax: error: r.jsonl: no image mode to plot (a run with [run] images)"
    assert res.stderr.strip() == want


def _in_a_lazy_step(tmp_path: Path) -> subprocess.Popen[str]:
    """A run of stage on a lazy root whose one step sleeps, once its root is mounted."""
    prof = tmp_path / "img.toml"
    prof.write_text(
        '[run]\ndrivers = ["stage"]\nworkloads = ["slow"]\ntrials = 2\nwarmup = 0\n'
        'images = ["lazy"]\n[workloads.slow]\nsteps = [{argv = ["sleep", "60"]}]\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "--headless", "--quiet", "-o",
         str(tmp_path / "r.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not any(f"-{proc.pid}-" in m and m.endswith("/root")
                  for m in _mounts_under(delivery.TRIALS)):  # fmt: skip
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"no lazy root mounted: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.1)
    return proc


def test_a_run_killed_mid_lazy_trial_leaves_nothing_mounted_or_serving(
    tmp_path: Path, image_tools: None
) -> None:
    proc = _in_a_lazy_step(tmp_path)
    try:
        assert _rclones(proc.pid), "the lazy trial's FUSE client"
        (conf,) = Path(tempfile.gettempdir()).glob(f"rtax-nginx-{proc.pid}-*")
        nginx = int((conf / "nginx.pid").read_text())  # its master: its group's leader
        assert len(_group(nginx)) >= 2  # the master and its worker
        time.sleep(0.5)  # in its step
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            [m for m in _mounts_under(delivery.TRIALS) if f"-{proc.pid}-" in m]
            or _rclones(proc.pid)
            or _group(nginx)
        ):
            time.sleep(0.2)
        assert [m for m in _mounts_under(delivery.TRIALS) if f"-{proc.pid}-" in m] == []
        assert _rclones(proc.pid) == [] and _group(nginx) == []
        assert not conf.exists()
        assert [d for d in os.listdir(delivery.TRIALS) if f"-{proc.pid}-" in d] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_docker_pulls_from_a_registry_behind_the_server_and_keeps_its_copy_after(
    tmp_path: Path, image_tools: None, docker_engine: list[str]
) -> None:
    """`pull` on docker: pulled from a real docker-registry through nginx under the
    trial's prefix, by digest, under that name of its own, the same image id; nothing is
    removed first (another run may use the image), so the engine fetches the manifest and
    what it lacks; `cached` beside it fetches nothing; every tag as before after."""
    import docker

    api = docker.APIClient(base_url="unix:///var/run/docker.sock")
    before = {t for img in api.images() for t in img.get("RepoTags") or ()}
    prof = tmp_path / "img.toml"
    prof.write_text(
        '[run]\ndrivers = ["docker"]\nworkloads = ["t0"]\ntrials = 2\nwarmup = 0\n'
        'images = ["pull", "cached"]\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 4 and all(e["valid"] for e in ends), ends
    images = {e["trial"]: e for e in events if e["type"] == "image"}
    subs = {(e["trial"], e["name"]) for e in events if e["type"] == "phase"}
    for t, e in images.items():
        assert (t, "image.before") in subs and (t, "image") in subs
        if e["mode"] == "pull":  # the manifest at least; layers the engine holds: not
            assert (t, "image.pull") in subs
            assert 0 < e["fetched"] < e["size"] + 8192 and e["requests"] >= 1
        else:
            assert e["fetched"] == 0 and (t, "image.pull") not in subs
    assert sorted(e["mode"] for e in images.values()) == ["cached", "cached", "pull", "pull"]
    after = {t for img in api.images() for t in img.get("RepoTags") or ()}
    assert after == before  # no trial's tag left, the local one back
    # docker has no lazy mode: with stage's lazy beside it, docker's lazy cells are left out
    both = tmp_path / "both.toml"
    both.write_text(
        prof.read_text()
        .replace('["docker"]', '["docker", "stage"]')
        .replace('["pull", "cached"]', '["lazy", "cached"]')
        .replace("trials = 2", "trials = 1")
    )
    out = tmp_path / "both.jsonl"
    res = _rtax("run", str(both), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events[0]["profile"]["images_left_out"] == {"docker": ["lazy"]}
    assert {e["cell"] for e in events if e["type"] == "trial_start"} == {
        "local/docker/t0/exec~cached",
        "local/stage/t0/exec~lazy",
        "local/stage/t0/exec~cached",
    }
    from rtax_tui.ui.livestate import LiveState

    live = LiveState()  # the console's count of the plan follows the cells run
    for ev in events:
        live.ingest(ev)
    assert live.planned == 3 == sum(1 for e in events if e["type"] == "trial_start")


def test_a_dropped_page_cache_is_recorded_and_dropped_outside_the_image_phase(
    tmp_path: Path, image_tools: None
) -> None:
    prof = tmp_path / "img.toml"
    prof.write_text(
        '[run]\ndrivers = ["stage"]\nworkloads = ["t0"]\ntrials = 1\nwarmup = 0\n'
        'images = ["lazy"]\npage_cache = "dropped"\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert events[0]["profile"]["page_cache"] == "dropped"
    names = [e["name"] for e in events if e["type"] == "phase"]
    assert names.index("image.before") < names.index("image") < names.index("create")
    assert all(e["valid"] for e in events if e["type"] == "trial_end")


def test_gvisor_runs_on_the_lazy_root_too(tmp_path: Path, image_tools: None) -> None:
    """The same delivery, another driver: gVisor's root is the image's mount (T1, which
    binds the assets at their host path: a mount point the image was made with)."""
    import shutil

    if shutil.which("runsc") is None:
        pytest.skip("no runsc here (bootstrap installs it)")
    prof = tmp_path / "img.toml"
    prof.write_text(
        '[run]\ndrivers = ["gvisor"]\nworkloads = ["t1"]\ntrials = 1\nwarmup = 0\n'
        'images = ["cached", "lazy"]\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    ends = [e for e in events if e["type"] == "trial_end"]
    assert len(ends) == 2 and all(e["valid"] for e in ends), ends
    got = {e["mode"]: e for e in events if e["type"] == "image"}
    assert got["cached"]["fetched"] == 0
    assert 0 < got["lazy"]["fetched"] < got["lazy"]["size"] // 4
    assert _mounts_under(delivery.TRIALS) == []


def test_rtax_cleanup_removes_what_a_run_killed_with_its_reaper_left(
    tmp_path: Path, image_tools: None
) -> None:
    """rtax and its reaper both killed (kill -9): the mounts, the FUSE client and nginx
    stay, and `rtax cleanup` removes them (a live run's, named by its pid, it spares)."""
    proc = _in_a_lazy_step(tmp_path)
    try:
        reapers = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "hosts.reaper"],
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
        assert len(reapers) == 1
        (conf,) = Path(tempfile.gettempdir()).glob(f"rtax-nginx-{proc.pid}-*")
        nginx = int((conf / "nginx.pid").read_text())
        # rtax, its reaper and nginx's master (its worker names no path), at once
        for pid in [proc.pid, int(reapers[0]), nginx]:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
        time.sleep(1)
        left = [m for m in _mounts_under(delivery.TRIALS) if f"-{proc.pid}-" in m]
        assert left and _rclones(proc.pid), "the kill left its mounts and FUSE client"
        res = _rtax("cleanup")
        assert res.returncode == 0, res.stderr
        assert "image delivery: removed" in res.stdout, res.stdout
        assert [m for m in _mounts_under(delivery.TRIALS) if f"-{proc.pid}-" in m] == []
        assert _rclones(proc.pid) == []
        assert [d for d in os.listdir(delivery.TRIALS) if f"-{proc.pid}-" in d] == []
        assert list(Path(tempfile.gettempdir()).glob(f"rtax-nginx-{proc.pid}-*")) == []
        assert _group(nginx) == []  # the orphaned worker too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _rtax("cleanup")


@pytest.mark.usefixtures("vm_guest")  # conftest: the guest built
def test_a_microvm_boots_on_a_root_disk_read_through_the_server(
    tmp_path: Path, image_tools: None
) -> None:
    """The lazy mode for a VM: QEMU's http block driver under the trial's overlay reads
    the root disk from nginx as the guest boots and runs T1: a small part of it."""
    prof = tmp_path / "img.toml"
    prof.write_text(
        '[run]\ndrivers = ["microvm"]\nworkloads = ["t1"]\ntrials = 1\nwarmup = 0\n'
        'images = ["lazy"]\n'
    )
    out = tmp_path / "r.jsonl"
    res = _rtax("run", str(prof), "--headless", "--quiet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["valid"] for e in events if e["type"] == "trial_end"] == [True]
    (img,) = [e for e in events if e["type"] == "image"]
    assert img["mode"] == "lazy" and 0 < img["fetched"] < img["size"] // 4
    assert os.listdir(delivery.TRIALS) == []


def test_a_tag_forged_in_the_registry_does_not_change_what_a_pull_gets(
    image_tools: None, docker_engine: list[str]
) -> None:
    """A step with the host's network (docker's `network` option) could push to the
    run's registry on loopback: pulls go by the pushed manifest's digest, so a tag
    pushed over it afterwards changes nothing that rtax pulls."""
    import asyncio
    import shutil

    import docker
    from rtax_tui.drivers.toolkit.engine_api import pull_as
    from rtax_tui.drivers.toolkit.images import BUSYBOX_REPO, DEBIAN_REPO

    api = docker.APIClient(base_url="unix:///var/run/docker.sock")
    tags = {t for img in api.images() for t in img.get("RepoTags") or ()}
    busybox = next(t for t in tags if t.startswith(BUSYBOX_REPO + ":"))
    other = next(t for t in tags if t.startswith(DEBIAN_REPO + ":"))

    async def go() -> None:
        d = delivery.Delivery()
        try:
            await d.prepare(("pull",), registry=True)
            repo, digest, _ = await d.push(api, busybox)
            assert d.registry is not None
            remote = f"127.0.0.1:{d.registry.port}/{repo}"
            forged_tag = busybox.rpartition(":")[2]
            api.tag(other, remote, forged_tag)  # the forgery: another image, same tag
            for _ in api.push(remote, tag=forged_tag, stream=True, decode=True):
                pass
            api.remove_image(f"{remote}:{forged_tag}", noprune=True)
            for _ in api.pull(remote, tag=forged_tag, stream=True, decode=True):
                pass  # the forgery took: a pull by the tag gets the other image
            assert (
                api.inspect_image(f"{remote}:{forged_tag}")["Id"]
                == (api.inspect_image(other)["Id"])
            )
            api.remove_image(f"{remote}:{forged_tag}", noprune=True)
            await asyncio.to_thread(pull_as, api, remote, digest, "rtax-test/forged:check")
            assert (
                api.inspect_image("rtax-test/forged:check")["Id"]
                == (api.inspect_image(busybox)["Id"])
            )
        finally:
            try:
                api.remove_image("rtax-test/forged:check", noprune=True)
            except docker.errors.APIError:
                pass
            await d.close()
            # the forged tag stays the registry's until a push of the image overwrites
            # it: no forged manifest is left for later runs
            shutil.rmtree(delivery.REGISTRY_ROOT, ignore_errors=True)

    asyncio.run(go())
