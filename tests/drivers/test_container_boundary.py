"""The docker and podman drivers' boundary options (`user`, `cap_drop`, `cap_add`,
`read_only`, `no_new_privileges`, `security_opt`, `userns`), measured from inside the
container against a real dockerd and Podman API service.

Every check compares with the engine's default, measured the same way, so that an
option that is not applied makes the test fail. The profile-layer checks (bad values,
one line, exit 2) need no engine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rtax_tui.drivers import get_driver
from rtax_tui.drivers.docker import LABEL_KEY, DockerDriver
from rtax_tui.drivers.podman import PodmanDriver
from rtax_tui.drivers.toolkit import images
from rtax_tui.drivers.toolkit.container import ContainerDriver
from rtax_tui.drivers.toolkit.container_env import _tar_workspace

from rtax_tui.hosts.local import LocalHost
from rtax_tui.model.recording import read_recording
from rtax_tui.model.spec import Cell, EnvSpec, Limits, OptionError, Step, Workload
from tests.containertools import conmon_of

ENGINES = ("docker", "podman")
LABEL = f"pytbd{os.getpid()}{os.urandom(2).hex()}"
HARDENED = {
    "user": "65534:65534",
    "cap_drop": ["ALL"],
    "read_only": True,
    "no_new_privileges": True,
}
HARDENED_TOML = (
    'user = "65534:65534"\ncap_drop = ["ALL"]\nread_only = true\nno_new_privileges = true\n'
)
# What the container reports about itself, one `key=value` a line; a write is
# `writable`, `read-only` (EROFS) or `denied` (EACCES and the like).
SELF = (
    'echo "uid=$(id -u) gid=$(id -g)"; '
    "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t' "
    "| sed 's/:/=/'; "
    'w() { if e=$(touch "$1" 2>&1); then echo "$2=writable"; else case "$e" in '
    '*Read-only*) echo "$2=read-only";; *) echo "$2=denied";; esac; fi; }; '
    "w /usr/rtax-probe usr; w /tmp/rtax-probe tmp; w /workspace/rtax-probe workspace; "
    "cat /workspace/seed.txt 2>/dev/null || echo seed=missing"
)


def needs(engine: str):
    """The engine answering, with its images (conftest's session fixtures)."""
    return pytest.mark.usefixtures(f"{engine}_engine")


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str:
    """An engine of ENGINES (parametrized indirectly), answering, with its images."""
    request.getfixturevalue(f"{request.param}_engine")
    return str(request.param)


def _client(engine: str):
    import docker

    return docker.DockerClient(base_url=_driver(engine).socket, version="auto", timeout=30)


def _driver(engine: str, **options) -> ContainerDriver:
    d = get_driver(engine, LocalHost(), options)
    assert isinstance(d, ContainerDriver)
    return d


def _labelled(engine: str, label: str) -> list[str]:
    c = _client(engine)
    try:
        found = c.containers.list(all=True, filters={"label": f"{LABEL_KEY}={label}"})
        return [x.name for x in found]
    finally:
        c.close()


def _leftovers(engine: str, label: str) -> list[str]:
    """Containers, host workspaces and (podman) conmon processes of this label."""
    left = _labelled(engine, label)
    tmp = Path(tempfile.gettempdir())
    left += [str(p) for p in tmp.glob(f"rtax-ws-*{label}*")]
    if engine == "podman":
        left += [f"conmon {pid}" for pid in conmon_of(f"rtax-{label}".encode())]
    return left


@pytest.fixture
def nothing_left(engine: str):
    """After the test: nothing with this module's label is left on its engine."""
    yield
    left = _leftovers(engine, LABEL)
    if left:
        asyncio.run(_driver(engine).cleanup(LABEL))
    assert left == [], f"{engine} left {left}"


def _spec(engine: str, channel: str, src: str | None) -> EnvSpec:
    return EnvSpec(
        cell=Cell("local", engine, "t", channel),
        workload=Workload("t", ()),
        limits=Limits(pids=128),
        workspace_src=src,
        label=LABEL,
    )


def measure(engine: str, channel: str, src: str | None, **options) -> dict[str, str]:
    """Create an environment with these options, run SELF in it, tear it down; the
    `key=value` lines it printed."""

    async def run() -> bytes:
        env = _driver(engine, **options).environment(_spec(engine, channel, src))
        try:
            await env.create()
            await env.ready()
            res = await env.action(Step(("sh", "-c", SELF)), 30)
            assert res.rc == 0, res.output
            return res.output
        finally:
            await env.teardown()

    out = asyncio.run(run()).decode()
    facts: dict[str, str] = {}
    for line in out.split():
        key, _, value = line.partition("=")
        facts[key] = value
    return facts


@pytest.fixture
def seed(tmp_path) -> str:
    (tmp_path / "seed.txt").write_text("seed=present\n")
    return str(tmp_path)


# -- each option, applied -------------------------------------------------------


@pytest.mark.parametrize("channel", ["exec", "shell"])
@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_engine_default_is_root_with_capabilities(engine, channel, seed, nothing_left):
    """The baseline the options are measured against: root, the engine's default
    capabilities, a writable root filesystem, NoNewPrivs 0, a seccomp filter."""
    f = measure(engine, channel, seed)
    assert (f["uid"], f["gid"]) == ("0", "0")
    assert int(f["CapEff"], 16) != 0 and int(f["CapBnd"], 16) != 0
    assert f["NoNewPrivs"] == "0" and f["Seccomp"] == "2"
    assert (f["usr"], f["tmp"], f["workspace"], f["seed"]) == (
        "writable",
        "writable",
        "writable",
        "present",
    )


@pytest.mark.parametrize("channel", ["exec", "shell"])
@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_hardened_set_applies_every_option(engine, channel, seed, nothing_left):
    """user + cap_drop ALL + read_only + no_new_privileges, at once: the user's uid/gid,
    no capabilities even in the bounding set, /usr refused, /tmp and /workspace (with
    the copied file) writable, NoNewPrivs 1."""
    f = measure(engine, channel, seed, **HARDENED)
    assert (f["uid"], f["gid"]) == ("65534", "65534")
    assert int(f["CapEff"], 16) == 0 and int(f["CapBnd"], 16) == 0
    assert f["NoNewPrivs"] == "1"
    assert (f["usr"], f["tmp"], f["workspace"], f["seed"]) == (
        "read-only",
        "writable",
        "writable",
        "present",
    )


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_cap_drop_all_as_root_leaves_no_capability(engine, nothing_left):
    """As root (no `user`), CapEff is the capabilities themselves: 0 with cap_drop ALL,
    and cap_add gives back exactly the one named (CHOWN is bit 0)."""
    f = measure(engine, "exec", None, cap_drop=["ALL"])
    assert f["uid"] == "0" and int(f["CapEff"], 16) == 0 and int(f["CapBnd"], 16) == 0
    f = measure(engine, "exec", None, cap_drop=["ALL"], cap_add=["cap_chown"])
    assert int(f["CapEff"], 16) == 1 and int(f["CapBnd"], 16) == 1
    f = measure(engine, "exec", None, cap_drop=["NET_RAW"])
    assert int(f["CapEff"], 16) != 0 and not int(f["CapEff"], 16) & (1 << 13)  # CAP_NET_RAW


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_read_only_as_root_keeps_tmp_and_workspace_writable(engine, seed, nothing_left):
    """Root cannot write the root filesystem either; /tmp is a tmpfs, /workspace a host
    directory bound in with the copied files."""
    f = measure(engine, "exec", seed, read_only=True)
    assert f["uid"] == "0"
    assert (f["usr"], f["tmp"], f["workspace"], f["seed"]) == (
        "read-only",
        "writable",
        "writable",
        "present",
    )


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_user_only_and_no_new_privileges_only(engine, seed, nothing_left):
    f = measure(engine, "exec", seed, user="65534")
    assert f["uid"] == "65534" and f["workspace"] == "writable" and f["seed"] == "present"
    assert f["usr"] == "denied"  # not root any more, and the root filesystem is still rw
    assert f["NoNewPrivs"] == "0"
    f = measure(engine, "exec", None, no_new_privileges=True)
    assert f["uid"] == "0" and f["NoNewPrivs"] == "1"


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_security_opt_is_passed_on(engine, nothing_left):
    """The engine's default seccomp filter (Seccomp 2, see the default test) is gone
    with seccomp=unconfined; no-new-privileges works as a security_opt too."""
    f = measure(engine, "exec", None, security_opt=["seccomp=unconfined", "no-new-privileges"])
    assert f["Seccomp"] == "0" and f["NoNewPrivs"] == "1"


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_seccomp_profile_file_is_applied(engine, tmp_path, nothing_left):
    """`seccomp=PATH` works on both engines (docker's API wants the JSON text, podman's
    the path): a profile refusing mkdir makes mkdir fail with EPERM, where the default
    filter lets it through."""
    prof = tmp_path / "no-mkdir.json"
    prof.write_text(
        '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": '
        '[{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}'
    )

    async def run(**options) -> bytes:
        env = _driver(engine, **options).environment(_spec(engine, "exec", None))
        try:
            await env.create()
            await env.ready()
            res = await env.action(Step(("sh", "-c", "mkdir /tmp/d 2>&1 && echo made")), 30)
            return res.output
        finally:
            await env.teardown()

    assert asyncio.run(run()) == b"made\n"
    out = asyncio.run(run(security_opt=[f"seccomp={prof}"]))
    assert b"Operation not permitted" in out and b"made" not in out


@pytest.mark.parametrize("mode", ["copy", "bind", "none"])
@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_workspace_belongs_to_the_user_in_every_mode(engine, mode, read_only, seed, nothing_left):
    """Whatever the workspace mode, /workspace is writable for `user` (an archive entry
    owned by the user, or a chowned host directory)."""
    src = None if mode == "none" else seed
    f = measure(engine, "exec", src, user="1000:1000", workspace=mode, read_only=read_only)
    assert f["uid"] == "1000" and f["workspace"] == "writable"
    assert f["seed"] == ("missing" if mode == "none" else "present")
    assert f["usr"] == ("read-only" if read_only else "denied")


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_userns_host(engine, nothing_left):
    """userns = "host": the host's user namespace (uid 0 maps to host uid 0), as the
    engine records it."""

    async def run() -> tuple[bytes, dict]:
        env = _driver(engine, userns="host").environment(_spec(engine, "exec", None))
        try:
            await env.create()
            await env.ready()
            res = await env.action(Step(("cat", "/proc/self/uid_map")), 30)
            c = _client(engine)
            try:
                hc = c.api.inspect_container(env.cid)["HostConfig"]
            finally:
                c.close()
            return res.output, hc
        finally:
            await env.teardown()

    out, hc = asyncio.run(run())
    assert out.split()[:2] == [b"0", b"0"]
    # dockerd keeps the value; podman 4.3 reports the host namespace as ""
    assert hc.get("UsernsMode") == ("host" if engine == "docker" else "")


# -- what the engines refuse, before any trial --------------------------------------


def run_profile(tmp_path: Path, text: str, timeout: float = 300) -> subprocess.CompletedProcess:
    prof = tmp_path / "p.toml"
    prof.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(tmp_path / "r.jsonl")],
        capture_output=True,
        timeout=timeout,
    )


@needs("docker")
def test_docker_userns_remap_refused_by_a_daemon_that_does_not_remap(tmp_path):
    c = _client("docker")
    try:
        sec = c.api.info().get("SecurityOptions") or []
    finally:
        c.close()
    if any("name=userns" in o for o in sec):
        pytest.skip("this dockerd runs with --userns-remap")
    res = run_profile(
        tmp_path, '[run]\ndrivers = ["docker"]\n[drivers_options.docker]\nuserns = "remap"\n'
    )
    err = res.stderr.decode().strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1, err
    assert 'drivers_options.docker.userns = "remap": dockerd runs without --userns-remap' in err
    assert not (tmp_path / "r.jsonl").exists()


@needs("podman")
def test_podman_rootless_userns_refused_by_a_root_service(tmp_path):
    """keep-id is for rootless podman; the service here runs as root, and says so
    through `check()`, before any trial, naming the option."""
    res = run_profile(
        tmp_path, '[run]\ndrivers = ["podman"]\n[drivers_options.podman]\nuserns = "keep-id"\n'
    )
    err = res.stderr.decode().strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1, err
    assert "keep-id is only supported in rootless mode" in err
    assert "check [drivers_options.podman] userns" in err


@needs("docker")
def test_t2_as_a_user_is_refused_when_the_assets_are_under_root(tmp_path):
    """T2 clones from, and patches with, files under rtax's cache; under /root the
    image's /root (0700) hides them from a `user`: refused before any trial, not
    recorded as invalid trials."""
    from rtax_tui.drivers.toolkit.assets import cache_dir

    if not os.path.abspath(cache_dir()).startswith("/root/"):
        pytest.skip("rtax's cache is not under /root here")
    res = run_profile(
        tmp_path,
        '[run]\ndrivers = ["docker"]\nworkloads = ["t1", "t2"]\n'
        '[drivers_options.docker]\nuser = "65534"\n',
    )
    # a machine that has not fetched T2's assets yet prints that progress first
    lines = res.stderr.decode().strip().splitlines()
    err = lines[-1] if lines else ""
    assert res.returncode == 2 and err.startswith("rtax: error: "), lines
    assert sum(line.startswith("rtax: error") for line in lines) == 1, lines
    assert "workload t2 reads /root/" in err and "which user 65534 cannot reach" in err
    assert "workload t1" not in err  # T1's files are copied into /workspace


# -- bad values: the profile layer, one line, exit 2 (no engine needed) ---------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "line, message",
    [
        ('user = "nobody"', 'user: \'nobody\' (expected "UID" or "UID:GID" with numeric'),
        ('user = "1:2:3"', "user: '1:2:3' (expected"),
        ("user = true", "user: expected string or integer, got True"),
        ('cap_drop = "ALL"', "cap_drop: expected array of string, got 'ALL'"),
        ('cap_add = ["NET_RAWW"]', "cap_add: 'NET_RAWW' is not a Linux capability"),
        ('read_only = "yes"', "read_only: expected boolean, got 'yes'"),
        ("no_new_privileges = 1", "no_new_privileges: expected boolean, got 1"),
        ('security_opt = ["nonsense=1"]', "security_opt: 'nonsense=1' (keys: apparmor"),
        ('security_opt = "seccomp=unconfined"', "security_opt: expected array of string, got"),
        ('userns = "private"', "userns: 'private' (allowed: host, "),
        (
            'security_opt = ["seccomp=/nonexistent/p.json"]',
            "security_opt: 'seccomp=/nonexistent/p.json' (cannot read /nonexistent/p.json",
        ),
        ('userns = "host"\nread_only = "no"', "read_only: expected boolean, got 'no'"),
    ],
)
def test_bad_values_are_one_line_naming_file_table_and_field(tmp_path, engine, line, message):
    res = run_profile(
        tmp_path,
        f'[run]\ndrivers = ["{engine}"]\n\n[drivers_options.{engine}]\nimage = "x"\n{line}\n',
    )
    err = res.stderr.decode().strip()
    assert res.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    field = message.split(":")[0]
    lineno = 6 + next(i for i, ln in enumerate(line.splitlines()) if ln.startswith(field))
    assert f"{tmp_path / 'p.toml'}:{lineno}: drivers_options.{engine}.{message}" in err, err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_userns_with_a_host_directory_workspace_is_refused(tmp_path, engine):
    value = "remap" if engine == "docker" else "auto"
    res = run_profile(
        tmp_path,
        f'[run]\ndrivers = ["{engine}"]\n[drivers_options.{engine}]\nread_only = true\n'
        f'userns = "{value}"\n',
    )
    err = res.stderr.decode().strip()
    assert res.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"p.toml:5: drivers_options.{engine}.userns: '{value}' with read_only" in err


def test_options_are_parsed_and_normalised():
    o = DockerDriver.check_options(
        {"user": 1000, "cap_drop": ["all"], "cap_add": ["cap_net_raw", "Chown"]}
    )
    assert (o.user, o.uid, o.gid) == ("1000", 1000, None)
    assert o.cap_drop == ("ALL",) and o.cap_add == ("NET_RAW", "CHOWN")
    o = PodmanDriver.check_options({"userns": "auto:size=65536", "nofile": 1024})
    assert o.userns == "auto:size=65536"
    with pytest.raises(OptionError) as exc:
        DockerDriver.check_options({"userns": "auto"})
    assert exc.value.key == "userns"
    with pytest.raises(OptionError) as exc:
        PodmanDriver.check_options({"nproc": "many"})
    assert exc.value.key == "nproc"
    b = DockerDriver.check_options({"no_new_privileges": True, "security_opt": ["label=disable"]})
    assert b.security_opts() == ["label=disable", "no-new-privileges"]
    assert DockerDriver.check_options({}).boundary() == {
        "user": None,
        "cap_drop": [],
        "cap_add": [],
        "read_only": False,
        "no_new_privileges": False,
        "security_opt": [],
        "userns": None,
        "runtime": None,
    }


def test_workspace_archive_belongs_to_the_container_user(tmp_path):
    import io
    import tarfile

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    if os.geteuid() == 0:  # a host owner that must not show in the container
        os.chown(tmp_path / "d" / "f", 4321, 4321)
    for uid, gid, top in ((None, None, None), (65534, 65534, "workspace"), (1000, None, None)):
        data = _tar_workspace(str(tmp_path), uid, gid, top)
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            members = tf.getmembers()
        want = ["d", "d/f"] if top is None else [top, f"{top}/d", f"{top}/d/f"]
        assert [m.name for m in members] == want
        assert {(m.uid, m.gid) for m in members} == {(uid or 0, gid or 0)}
        assert {(m.uname, m.gname) for m in members} == {("", "")}
        if top is not None:
            assert members[0].isdir() and members[0].mode == 0o755


# -- T0 and T1, hardened, through `rtax run` --------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_t0_t1_valid_hardened_both_channels_and_header(tmp_path, engine):
    images.build_debian_image(engine)
    res = run_profile(
        tmp_path,
        f'[run]\ntrials = 2\nwarmup = 0\ndrivers = ["{engine}"]\nworkloads = ["t0", "t1"]\n'
        f'channels = ["exec", "shell"]\n[drivers_options.{engine}]\n{HARDENED_TOML}',
        timeout=600,
    )
    assert res.returncode == 0, res.stderr.decode()
    rec = read_recording(tmp_path / "r.jsonl")
    ends = [e for e in rec.events if e["type"] == "trial_end"]
    bad = [(e["trial"], e["valid"], e["error"]) for e in ends if not (e["ok"] and e["valid"])]
    assert len(ends) == 8 and bad == [], bad
    facts = rec.header["hosts"]["local"]["drivers"][engine]
    assert facts["boundary_options"] == {
        "user": "65534:65534",
        "cap_drop": ["ALL"],
        "cap_add": [],
        "read_only": True,
        "no_new_privileges": True,
        "security_opt": [],
        "userns": None,
        "runtime": None,
    }
    assert "security_options" in facts
    assert rec.header["profile"]["driver_options"][engine] == HARDENED
    assert _leftovers(engine, rec.header["run_id"]) == []
