"""The `docker` driver's workload images, for real: the Debian workload image built,
cached and holding the tools, and which image a workload gets.

Builds the Debian workload image (debootstrap, about a minute the first time; cached
after) in a module fixture. T0, T1, T2 and a short trajectory through the engine in it
are tested over both engines in tests/drivers/test_engines.py.
"""

from __future__ import annotations

import os

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers.docker import DEFAULT_SOCKET  # noqa: E402
from rtax_tui.drivers.toolkit import images, rootfs  # noqa: E402

pytestmark = pytest.mark.usefixtures("docker_engine")  # conftest: dockerd and the images


@pytest.fixture(scope="module", autouse=True)
def built_images() -> tuple[str, str]:
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    if os.geteuid() != 0 and not images.image_exists(images.debian_image_tag()):
        pytest.skip("building the Debian workload image needs root (debootstrap)")
    return images.build_busybox_image("docker"), images.build_debian_image("docker")


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
