"""The two container engines' drivers, `docker` (against a real dockerd) and `podman`
(against Podman's Docker-compatible API service), through one set of tests: the same
lifecycle, output, limits and labels as the daemon reports them, a timed-out exec's
processes, cleanup of only one run's containers, a missing image and a missing daemon,
the drivers' defaults, and T0, T1, T2 and a short trajectory through the engine in the
Debian workload image. conftest starts each daemon if none answers. What only one engine
has stays in its own module (tests/drivers/test_docker.py: the stream demuxer, a daemon
vanishing mid-run; tests/drivers/test_docker_workloads.py: the image choice;
tests/drivers/test_podman.py: conmon, ulimits).

Podman 4.x leaves two `conmon` processes per API exec session: for podman these tests
also require that teardown (and cleanup) leaves none of ours.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

docker = pytest.importorskip("docker", reason="the docker Python SDK is not installed")

from rtax_tui.drivers import get_driver  # noqa: E402
from rtax_tui.drivers.docker import LABEL_KEY  # noqa: E402
from rtax_tui.drivers.podman import NOFILE, NPROC  # noqa: E402
from rtax_tui.drivers.toolkit import images  # noqa: E402
from rtax_tui.drivers.toolkit.container import ContainerDriver  # noqa: E402

from rtax_tui.hosts.local import LocalHost  # noqa: E402
from rtax_tui.model.recording import read_recording  # noqa: E402
from rtax_tui.model.spec import EnvSpec, Limits, PhaseFailure, Step, SubstrateLost  # noqa: E402
from tests.containertools import busybox_image, conmon_of, containers_of, env_spec  # noqa: E402
from tests.procs import STREAM_FLAGS, nonblocking_streams  # noqa: E402

CHANNELS = ("exec", "shell")
LABEL = f"pyten{os.getpid()}{os.urandom(2).hex()}"
OTHER = LABEL + "x"  # a second run of this module's own
OUR_PREFIX = f"rtax-{LABEL}".encode()  # every container name of this module starts so


def _our_conmon() -> list[int]:
    """Live conmon processes of this module's containers (named after LABEL)."""
    return conmon_of(OUR_PREFIX)


@dataclass(frozen=True)
class Engine:
    """What differs between the two engines, as these tests see it."""

    name: str
    fixture: str  # conftest's: the daemon and the images
    socket: str  # the driver's default socket
    local: str  # what the driver puts before rtax's image tags ("localhost/" on podman)
    down: str  # the check's reason when the daemon's socket answers nothing
    start: str  # and its fix
    missing_image: str  # an image that does not exist
    sub_tail: tuple[str, ...] = ()  # the sub-phases after `first_command`
    in_container: dict[str, bytes] = field(default_factory=dict)  # step -> its output
    conmon: bool = False

    def image(self) -> str:
        """rtax's busybox image (built or found), as the driver names it."""
        return busybox_image(self.name)


ENGINES = {
    "docker": Engine(
        "docker",
        "docker_engine",
        "unix:///var/run/docker.sock",
        "",
        "dockerd is not running",
        "bash scripts/start-dockerd",
        "rtax/no-such-image:none",
    ),
    "podman": Engine(
        "podman",
        "podman_engine",
        "unix:///run/rtax-podman/podman.sock",
        "localhost/",
        "podman API socket is not running",
        "bash scripts/start-podman",
        "localhost/rtax/no-such-image:none",
        sub_tail=("conmon_reap",),
        in_container={"ulimit -n; ulimit -u": f"{NOFILE}\n{NPROC}\n".encode()},
        conmon=True,
    ),
}


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """One engine, its daemon answering and its image built; afterwards none of this
    module's containers (nor, for podman, conmon processes) is left."""
    e = ENGINES[request.param]
    if images.find_static_busybox() is None:
        pytest.skip("no static busybox (apt-get install busybox-static)")
    request.getfixturevalue(e.fixture)
    e.image()
    yield e
    left = _ours(e)
    conmon = _our_conmon() if e.conmon else []
    if left:
        for lab in (LABEL, OTHER):
            asyncio.run(driver(e).cleanup(lab))
    assert left == []
    assert conmon == []


def driver(e: Engine, **options: object) -> ContainerDriver:
    d = get_driver(e.name, LocalHost(), dict(options))
    assert isinstance(d, ContainerDriver)
    return d


def _client(e: Engine) -> docker.DockerClient:
    return docker.DockerClient(base_url=driver(e).socket, version="auto", timeout=30)


def _ours(e: Engine) -> list[str]:
    # Only this module's containers (LABEL, or OTHER): never another run's.
    return containers_of(driver(e).socket, (LABEL, OTHER))


def spec(e: Engine, channel: str, *, src: str | None = None, label: str = LABEL) -> EnvSpec:
    return env_spec(e.name, label, channel, src)


async def act(env, *argv: str, timeout: float = 30):
    return await env.action(Step(tuple(argv)), timeout)


def test_driver_defaults(engine):
    """The name, channels, socket and images a driver starts with, no option given."""
    d = driver(engine)
    assert d.name == type(d).name == engine.name
    assert d.channels == type(d).channels == CHANNELS
    module = importlib.import_module(f"rtax_tui.drivers.{engine.name}")
    assert d.socket == module.DEFAULT_SOCKET == engine.socket
    assert d.image == engine.image() == engine.local + images.image_tag()
    assert d.workload_image == engine.local + images.debian_image_tag()


@pytest.mark.parametrize("channel", CHANNELS)
def test_t0_t1_t2_trajectory_valid(engine, channel, tmp_path):
    """T0, T1, T2 and a short trajectory through the engine (`rtax run`, then `rtax
    report`), in the Debian workload image (conftest builds it, or imports it into podman
    from the same cached root filesystem): every cell valid. A valid T2 trial proves that
    the clone from the bound assets, the pinned tests failing, the patch and the tests
    passing all ran inside a container of that image."""
    out = tmp_path / "r.jsonl"
    workloads = "t0,t1,t2,trajectory-10"
    res = subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", "t2", "--driver", engine.name]
        + ["--workload", workloads, "--channel", channel, "--trials", "1", "--warmup", "0"]
        + ["-o", str(out)],
        capture_output=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr.decode()
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rtax_tui", "report", str(out), "--format", "json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    cells = {c["workload"]: c for c in rep["cells"]}
    assert set(cells) == set(workloads.split(","))
    rec = read_recording(out)
    errors = [e["error"] for e in rec.events if e["type"] == "trial_end" and e["error"]]
    for name, c in cells.items():
        assert (c["n"], c["failed"], c["invalid"]) == (1, 0, 0), (name, c["errors"], errors)
    facts = rec.header["hosts"]["local"]["drivers"][engine.name]
    assert facts["image"] == engine.local + images.image_tag("busybox")
    assert facts["workload_image"] == engine.local + images.debian_image_tag()
    # T2's pinned tests failed before the patch and passed after it, in the container
    events = rec.events
    t2 = {e["trial"] for e in events if e["type"] == "trial_start" and e["workload"] == "t2"}
    rcs = [e["rc"] for e in events if e["type"] == "action" and e["trial"] in t2]
    assert len(rcs) == 6 and rcs[3] != 0 and rcs[5] == 0
    # none of the run's containers is left (the run's own label: the daemon is shared with
    # other test runs, whose containers come and go meanwhile)
    assert containers_of(engine.socket, [rec.header["run_id"]]) == []


@pytest.mark.parametrize("channel", CHANNELS)
def test_lifecycle_output_isolation_labels_limits(engine, channel, tmp_path):
    (tmp_path / "seed.txt").write_text("seed\n")
    sub_names: list[str] = []

    @asynccontextmanager
    async def sub(name):
        sub_names.append(name)
        yield

    async def run():
        env = driver(engine).environment(spec(engine, channel, src=str(tmp_path)), sub)
        try:
            await env.create()
            await env.ready()
            r = await act(env, "sh", "-c", "echo hi; exit 3")
            assert (r.rc, r.output) == (3, b"hi\n")
            r = await act(env, "printf", "no newline")
            assert (r.rc, r.output) == (0, b"no newline")
            r = await act(env, "sh", "-c", "echo out; echo err >&2; echo out2")
            if channel == "shell":  # one stream: the order of the writes
                assert (r.rc, r.output) == (0, b"out\nerr\nout2\n")
            else:  # two pipes merged as they arrive: each stream's own order only
                assert r.rc == 0 and r.output.replace(b"err\n", b"", 1) == b"out\nout2\n"
                assert b"err\n" in r.output
            r = await act(env, "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x")
            assert r.output == b"x" * 300000
            assert (await act(env, "pwd")).output == b"/workspace\n"
            assert (await act(env, "cat", "seed.txt")).output == b"seed\n"
            r = await act(env, "sh", "-c", "echo $HOME $TMPDIR")
            assert r.output == b"/workspace /tmp\n"
            r = await act(env, "sh", "-c", "echo d > /workspace/f && cat f")
            assert (r.rc, r.output) == (0, b"d\n")
            for cmd, want in engine.in_container.items():
                assert (await act(env, "sh", "-c", cmd)).output == want, cmd
            # /workspace: a tmpfs of the spec's size, bound from the host (the files above
            # went into it through the API); the host kernel's command line: masked.
            size = spec(engine, channel).limits.workspace_mib
            r = await act(env, "sh", "-c", "grep ' /workspace ' /proc/mounts; df -m /workspace")
            assert r.output.startswith(b"tmpfs /workspace tmpfs "), r.output
            assert f" {size} ".encode() in r.output.splitlines()[-1], r.output
            assert env.host_workspace and os.path.ismount(env.host_workspace)
            assert (await act(env, "cat", "/proc/cmdline")).output == b""
            # Network: only lo.
            r = await act(env, "cat", "/proc/net/dev")
            ifaces = {ln.split(":")[0].strip() for ln in r.output.decode().splitlines()[2:]}
            assert ifaces == {"lo"}
            # Labels and limits, as the daemon sees them.
            c = _client(engine)
            try:
                info = c.api.inspect_container(env.cid)
            finally:
                c.close()
            assert info["Config"]["Labels"][LABEL_KEY] == LABEL
            assert info["Config"]["Labels"]["rtax.cell"] == f"local/{engine.name}/t/{channel}"
            assert info["Config"]["Image"] == engine.image()
            hc = info["HostConfig"]
            assert hc["NetworkMode"] == "none"
            assert hc["NanoCpus"] == 1_000_000_000
            assert hc["Memory"] == 256 << 20
            assert hc["PidsLimit"] == 128
            assert info["State"]["Running"]
            if engine.conmon:
                assert _our_conmon()  # the container's monitor, at least
        finally:
            ws = env.host_workspace
            await env.teardown()
            await env.teardown()  # twice is harmless
        assert ws is not None and not os.path.exists(ws)
        if engine.conmon:
            assert _our_conmon() == []

    asyncio.run(run())
    want = ["image_lookup", "workspace_dir", "container_create", "workspace"]
    want += ["attach"] if channel == "shell" else []
    assert sub_names == [*want, "start", "first_command", *engine.sub_tail]


def test_a_timed_out_exec_leaves_no_process_in_the_container(engine):
    """Beyond the contract's hanging action: `docker exec` has no kill, so the driver
    kills the timed-out action's processes itself (in the background); none is left,
    not even a zombie, by the next action."""

    async def run():
        env = driver(engine).environment(spec(engine, "exec"))
        try:
            await env.create()
            await env.ready()
            with pytest.raises(asyncio.TimeoutError):
                await act(env, "sh", "-c", "sleep 300 & sleep 300", timeout=0.5)
            if env._bg:  # the background kill, if it has not finished yet
                await asyncio.wait(set(env._bg), timeout=10)
            r = await act(env, "ps", "-o", "stat,args")
            assert b"sleep 300" not in r.output and b"Z" not in r.output, r
        finally:
            await env.teardown()

    asyncio.run(run())
    assert _ours(engine) == []


def test_check_facts_and_cleanup(engine):
    async def run():
        d = driver(engine)
        assert await d.check() == []
        facts = await d.facts()
        assert facts["server"] and facts["api"] and facts["image"] == d.image
        # Leave containers behind, as a crashed run would (with exec sessions), then clean up.
        env = d.environment(spec(engine, "exec"))
        await env.create()
        await env.ready()
        for _ in range(3):
            await act(env, "true")
        other = d.environment(spec(engine, "exec", label=OTHER))
        await other.create()
        assert len(_ours(engine)) == 2
        if engine.conmon:
            assert len(_our_conmon()) >= 1
        # only that run's: its container and the host workspace (a tmpfs) it had bound
        assert await d.cleanup(LABEL) == 2
        assert len(_ours(engine)) == 1
        assert not os.path.exists(env.host_workspace)
        assert os.path.ismount(other.host_workspace)
        # Without a label: every rtax run's (the only test that calls it so, on a
        # container of its own; it asserts only about that one).
        assert await d.cleanup() >= 1
        assert _ours(engine) == []
        assert not os.path.exists(other.host_workspace)
        if engine.conmon:
            assert _our_conmon() == []
        assert await d.cleanup(LABEL) == 0
        await env.teardown()  # still safe: the container is already gone
        await other.teardown()

    asyncio.run(run())


def test_missing_image_and_missing_daemon(engine, tmp_path):
    async def run():
        d = driver(engine, image=engine.missing_image)
        probs = await d.check()
        assert len(probs) == 1 and "missing" in probs[0].reason
        env = d.environment(spec(engine, "exec"))
        with pytest.raises(PhaseFailure) as ei:
            await env.create()
        assert ei.value.kind == "image_missing"
        await env.teardown()

        d = driver(engine, socket=f"unix://{tmp_path}/{engine.name}.sock")
        probs = await d.check()
        assert len(probs) == 1
        assert engine.down in probs[0].reason
        assert probs[0].fix == engine.start
        env = d.environment(spec(engine, "shell"))
        with pytest.raises(SubstrateLost):
            await env.create()
        await env.teardown()
        assert await d.cleanup(LABEL) == 0

    asyncio.run(run())


def test_a_write_past_the_workspace_size_stops_there(engine):
    """B8 on a container: /workspace is a tmpfs of `workspace_mib` on the host, so a
    write past it fails (ENOSPC) at the size instead of filling the host's disk."""

    async def run():
        s = spec(engine, "exec")
        s = EnvSpec(
            **{**s.__dict__, "limits": Limits(cpus=1, memory_mib=256, pids=128, workspace_mib=16)}
        )
        env = driver(engine).environment(s)
        try:
            await env.create()
            await env.ready()
            r = await act(
                env, "sh", "-c", "head -c 48m /dev/zero 2>/dev/null > big; echo $?; wc -c < big"
            )
            rc, size = r.output.split()
            assert int(rc) != 0 and int(size) <= 16 << 20, r.output
            assert os.path.getsize(os.path.join(env.host_workspace, "big")) == int(size)
        finally:
            await env.teardown()

    asyncio.run(run())


def test_no_step_can_rewrite_the_exec_channels_init(engine):
    """B2 on a container: a pooled container's init outlives every clean reset, and a
    step is root with the init's uid and capabilities, so only the init's own dumpable
    flag keeps /proc/1/mem shut. rtax's init (`rtax-enter --init hold`) clears it; the
    sleeper shell it replaced (init_binary None: a remote engine's) does not: the same
    step opens that one's memory for writing."""
    probe = (
        'tr "\\0" " " < /proc/1/cmdline; echo; '
        "(exec 3<>/proc/1/mem) 2>/dev/null && echo OPEN || echo REFUSED"
    )

    async def attempt(d):
        env = d.environment(spec(engine, "exec"))
        try:
            await env.create()
            await env.ready()
            r = await act(env, "sh", "-c", probe)
            killed = await act(env, "sh", "-c", "kill -9 1; sleep 0.2; echo alive")
            return r.output.decode(), killed
        finally:
            await env.teardown()

    ours, killed = asyncio.run(attempt(driver(engine)))
    assert ours.startswith("/.rtax-init --init hold") and ours.endswith("REFUSED\n"), ours
    assert killed.rc == 0 and killed.output == b"alive\n"  # pid 1 of its namespace: no-op
    sleeper = driver(engine)
    sleeper.init_binary = lambda: None  # type: ignore[method-assign]
    theirs, _ = asyncio.run(attempt(sleeper))
    assert theirs.startswith("sh -c while") and theirs.endswith("OPEN\n"), theirs


@pytest.mark.parametrize("channel", CHANNELS)
def test_runtime_runsc_runs_under_gvisor(engine, channel, request):
    """`runtime = "runsc"`: the engine starts the container under gVisor (its kernel is
    gVisor's, not the host's), the check passes, the facts say so, and the steps' output
    and exit codes come back as on runc. podman's goes through a service of its own."""
    import shutil

    if shutil.which("runsc") is None:
        pytest.skip("runsc is not installed (apt-get install runsc; scripts/bootstrap does)")
    if engine.name == "podman":
        request.getfixturevalue("podman_runsc_service")
    d = driver(engine, runtime="runsc")
    assert asyncio.run(d.check()) == []
    assert asyncio.run(d.facts())["runtime"] == "runsc"

    async def go() -> tuple[bytes, int, bytes, bytes]:
        env = d.environment(spec(engine, channel))
        await env.create()
        try:
            await env.ready()
            kernel = (await act(env, "uname", "-r")).output
            rc = (await act(env, "sh", "-c", "echo out; exit 7")).rc
            dmesg = (await act(env, "dmesg")).output
            flags = (await act(env, *STREAM_FLAGS)).output
        finally:
            await env.teardown()
        return kernel, rc, dmesg, flags

    kernel, rc, dmesg, flags = asyncio.run(go())
    assert kernel.strip() != os.uname().release.encode()
    assert b"gVisor" in dmesg  # the sentry's own boot log
    assert rc == 7
    # the step's stdout and stderr block (the gvisor driver's exec made one non-blocking
    # for the step while they were two copies of one pipe: docs/boundaries.md)
    assert nonblocking_streams(flags) == [False, False], flags


@pytest.mark.parametrize("channel", CHANNELS)
def test_runtime_runsc_a_killed_init_loses_the_environment(engine, channel, request):
    """Under gVisor a step can kill the container's pid 1 (runc's kernel refuses it from
    inside). The next action must fail as lost, not come back as a command that exited
    126 (what runsc's exec answers for a stopped container: the probe's `init_kill`
    called that a later action that "succeeded" elsewhere)."""
    import shutil

    from rtax_tui.model.errors import ErrorKind
    from rtax_tui.model.spec import PhaseFailure

    if shutil.which("runsc") is None:
        pytest.skip("runsc is not installed (apt-get install runsc; scripts/bootstrap does)")
    if engine.name == "podman":
        request.getfixturevalue("podman_runsc_service")
    d = driver(engine, runtime="runsc")

    async def go() -> tuple[object, object, int]:
        env = d.environment(spec(engine, channel))
        await env.create()
        try:
            await env.ready()
            legit = (await act(env, "sh", "-c", "exit 126")).rc  # a step's own 126 stays
            killed: object = None
            try:  # the step itself may fail, or its stream stay open until its timeout
                killed = await act(env, "sh", "-c", "kill -9 1; kill -9 -1; sleep 1")
            except (PhaseFailure, TimeoutError) as exc:
                killed = exc
            try:  # at once, as the probe does: the runtime may not have told the engine yet
                got = await act(env, "true")
            except PhaseFailure as exc:
                return killed, exc, legit
            return killed, got, legit
        finally:
            await env.teardown()

    killed, later, legit = asyncio.run(go())
    assert legit == 126
    assert isinstance(later, PhaseFailure), f"the next action came back: {later} ({killed})"
    assert later.kind in (ErrorKind.ENV_LOST, ErrorKind.SHELL_LOST), later


def test_runtime_unknown_is_a_problem_naming_the_fix(engine):
    """A runtime the engine does not know: `check()` says so, with the command that
    starts an engine that has it; a malformed name is refused with the profile."""
    from rtax_tui.model.spec import OptionError

    if engine.name == "docker":
        (problem,) = asyncio.run(driver(engine, runtime="nosuchrt").check())
        assert "does not know it" in problem.reason and "runc" in problem.reason
        assert "start-dockerd" in problem.fix
    else:
        d = driver(engine, runtime="nosuchrt")
        assert d.socket.endswith("podman-nosuchrt.sock")
        (problem,) = asyncio.run(d.check())
        assert problem.fix == "bash scripts/start-podman --runtime nosuchrt"
    with pytest.raises(OptionError) as exc:
        driver(engine, runtime="runsc; rm -rf /")
    assert exc.value.key == "runtime"


def test_runtime_runsc_pid_limit_refuses_forks_and_keeps_the_sandbox(engine, request):
    """Under gVisor the engine's pid limit is the sandbox's RLIMIT_NPROC, the container's
    cgroup a backstop above it (the sentry's host threads count there: a cgroup limit of
    the sandbox's own size hit first killed the sentry, env_lost). Under pids = 16, of 40
    background sleeps some are refused, and the container still answers."""
    import dataclasses
    import shutil

    if shutil.which("runsc") is None:
        pytest.skip("runsc is not installed (apt-get install runsc; scripts/bootstrap does)")
    if engine.name == "podman":
        request.getfixturevalue("podman_runsc_service")
    d = driver(engine, runtime="runsc")
    script = (
        "( i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); echo $i > /tmp/n; done ) "
        "2>/dev/null; read n </tmp/n; echo started $n"
    )

    async def go() -> tuple[bytes, int | None]:
        limits = Limits(cpus=1, memory_mib=512, pids=16)
        env = d.environment(dataclasses.replace(spec(engine, "exec"), limits=limits))
        await env.create()
        try:
            await env.ready()
            out = (await act(env, "sh", "-c", script, timeout=120)).output
            rc = (await act(env, "true")).rc
        finally:
            await env.teardown()
        return out, rc

    out, rc = asyncio.run(go())
    assert out.startswith(b"started "), out
    assert 4 <= int(out.split()[1]) < 40
    assert rc == 0
    assert "RLIMIT_NPROC" in asyncio.run(d.facts())["limits"]
