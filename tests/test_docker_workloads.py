"""T1, T2 (and a short trajectory) on the `docker` driver through the engine, for real.

Builds the Debian workload image (debootstrap, about a minute the first time; cached
after) in a module fixture. A valid T2 trial proves that the clone from the bound
assets, the pinned tests failing, the patch and the tests passing all ran inside a
container of that image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers.docker import DEFAULT_SOCKET, LABEL_KEY  # noqa: E402
from rtax_tui.drivers.toolkit import images, rootfs  # noqa: E402

from rtax_tui.model.recording import read_recording  # noqa: E402

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images


@pytest.fixture(scope="module", autouse=True)
def built_images() -> tuple[str, str]:
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    if os.geteuid() != 0 and not images.image_exists(images.debian_image_tag()):
        pytest.skip("building the Debian workload image needs root (debootstrap)")
    return images.build_busybox_image("docker"), images.build_debian_image("docker")


def run_and_report(tmp_path: Path, *args: str) -> tuple[dict, list[dict], dict]:
    out = tmp_path / "r.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", *args, "-o", str(out)],
        capture_output=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr.decode()
    rep = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
        capture_output=True,
        check=True,
    )
    rec = read_recording(out)
    return json.loads(rep.stdout), rec.events, rec.header


def _ours() -> list[str]:
    c = docker.DockerClient(base_url=DEFAULT_SOCKET, version="auto", timeout=30)
    try:
        return [x.name for x in c.containers.list(all=True, filters={"label": LABEL_KEY})]
    finally:
        c.close()


def test_debian_image_is_cached_and_has_the_tools(built_images):
    busybox, debian = built_images
    assert debian == images.debian_image_tag() and debian.startswith("rtax/workload:")
    assert os.path.isfile(rootfs.debian_rootfs_path())  # podman can import the same
    assert images.build("docker") == [busybox, debian]  # cached: no rebuild
    c = docker.DockerClient(base_url=DEFAULT_SOCKET, version="auto", timeout=60)
    try:
        out = c.containers.run(
            debian,
            ["sh", "-c", "python3 -c 'import pytest, hypothesis' && git --version && echo ok"],
            network_mode="none",
            remove=True,
        )
    finally:
        c.close()
    assert out.decode().endswith("ok\n") and b"git version" in out


@pytest.mark.parametrize("channel", ["exec", "shell"])
def test_t1_t2_trajectory_valid_on_docker(tmp_path, channel):
    rep, events, header = run_and_report(
        tmp_path,
        "t2",
        "--driver",
        "docker",
        "--workload",
        "t0,t1,t2,trajectory-10",
        "--channel",
        channel,
        "--trials",
        "1",
        "--warmup",
        "0",
    )
    cells = {c["workload"]: c for c in rep["cells"]}
    assert set(cells) == {"t0", "t1", "t2", "trajectory-10"}
    for name, c in cells.items():
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), (name, c["errors"])
    facts = header["hosts"]["local"]["drivers"]["docker"]
    assert facts["image"] == images.image_tag("busybox")
    assert facts["workload_image"] == images.debian_image_tag()
    # T2's pinned tests failed before the patch and passed after it, in the container
    t2 = {e["trial"] for e in events if e["type"] == "trial_start" and e["workload"] == "t2"}
    rcs = [e["rc"] for e in events if e["type"] == "action" and e["trial"] in t2]
    assert len(rcs) == 6 and rcs[3] != 0 and rcs[5] == 0
    assert _ours() == []


def test_image_option_overrides_the_choice():
    from rtax_tui.drivers.docker import DockerDriver
    from rtax_tui.drivers.toolkit.needs import needs_full_image

    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.spec import Step, Workload

    t0 = Workload("t0", (Step(("true",)),))
    py = Workload("c", (Step(("sh", "-c", "git init -q g && python3 -V")),))
    assets = Workload("t1", (Step(("cat", "x")),), needs_assets=True)
    assert not needs_full_image(t0) and needs_full_image(py) and needs_full_image(assets)
    d = DockerDriver(LocalHost(), {})
    assert d.image_for(t0) == images.image_tag("busybox")
    assert d.image_for(py) == d.image_for(assets) == images.debian_image_tag()
    d = DockerDriver(LocalHost(), {"image": "example/img:1"})
    assert {d.image_for(w) for w in (t0, py, assets)} == {"example/img:1"}


def test_a_missing_workload_image_is_found_before_any_trial():
    import asyncio

    from rtax_tui.drivers.docker import DockerDriver

    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.spec import Step, Workload

    t0 = Workload("t0", (Step(("true",)),))
    t1 = Workload("t1", (Step(("cat", "x")),), needs_assets=True)
    d = DockerDriver(LocalHost(), {})
    assert asyncio.run(d.check_workloads([t0, t1])) == []
    d.workload_image = "rtax/workload:no-such-tag"
    assert asyncio.run(d.check_workloads([t0])) == []  # t0 needs only busybox
    probs = asyncio.run(d.check_workloads([t0, t1]))
    assert len(probs) == 1 and "rtax/workload:no-such-tag is missing" in probs[0].reason
