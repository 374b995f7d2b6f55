"""The edges of the process (issue 35): its standard streams, the names of its files, its
first moments, and a cleanup that hangs. One test per row of the issue's table (T1-T10,
F1, F2, C1), each a real `python -m rtax_tui` process; then property tests (hypothesis)
over streams, paths and early signals, bounded to a few seconds.

What every row asks: no traceback, one line that names what was wrong, the exit status a
shell expects, and no file left cut, empty or half-named.
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtax_tui.commands import cli, output
from rtax_tui.model.recording import read_recording
from tests.procs import tmpfs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
TRAJ = next((ROOT / "tests" / "data" / "trajectories" / "codex").iterdir())
LONG = "a" * 300  # one component over NAME_MAX (255 bytes)
AS_ROOT = os.geteuid() == 0
RUN = ["run", "t0", "--driver", "local", "--trials", "2", "--warmup", "0"]


def rtax(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 120)
    return subprocess.run([sys.executable, "-m", "rtax_tui", *args], **kw)  # type: ignore[call-overload,no-any-return]


def one_line(err: bytes) -> str:
    """stderr holds exactly one line, and no traceback."""
    text = err.decode()
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


def no_part_files(d: Path) -> None:
    assert not [p.name for p in d.iterdir() if p.name.endswith(".part")]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of 12 KiB: full after a few writes (root only)."""
    if not AS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs(tmp_path / "disk", "size=12k", "rtaxedge") as disk:
        yield disk


@pytest.fixture
def ro_dir(tmp_path: Path) -> Iterator[Path]:
    """A real read-only file system (a tmpfs mounted ro: root writes nowhere in it)."""
    if not AS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs(tmp_path / "ro", "ro,size=64k", "rtaxro") as d:
        yield d


# -- T1: a run's event stream to a pipe that closes, a full device, a closed stdout -----------


def test_t1_run_stream_into_a_pipe_that_closes_ends_quietly_with_141(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", *RUN, "-o", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(100)
    p.stdout.close()  # `| head -c 100`
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141
    assert b"Traceback" not in err and b"Error" not in err, err.decode()


def test_t1_run_stream_kept_in_record_when_the_pipe_closes(tmp_path: Path) -> None:
    rec = tmp_path / "kept.jsonl"
    p = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", *RUN, "-o", "-", "--record", str(rec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0
    assert b"Traceback" not in err, err.decode()
    assert read_recording(rec).end is not None  # the whole run, to its run_end


@pytest.mark.parametrize("where", ["/dev/full", "closed"])
def test_t1_run_stream_that_cannot_be_written_is_one_line(tmp_path: Path, where: str) -> None:
    argv = [sys.executable, "-m", "rtax_tui", *RUN, "-o", "-"]
    if where == "closed":
        res = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *argv], capture_output=True)
    else:
        with open(where, "wb") as full:
            res = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert res.returncode == 1
    assert "cannot write to standard output" in one_line(res.stderr)
    assert not list(tmp_path.iterdir())


# -- T2: the other commands' output ----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["report", str(EXAMPLE)],
        ["report", str(EXAMPLE), "--format", "json"],
        ["compare", str(EXAMPLE), str(EXAMPLE)],
        ["project", str(EXAMPLE)],
        ["traj", "inspect", str(TRAJ)],
    ],
    ids=lambda a: "-".join(a[:2]) if a[0] == "traj" else a[0] + ("-json" if "json" in a else ""),
)
def test_t2_output_to_a_full_device_is_one_line_and_status_1(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        res = rtax(*args, stdout=full, stderr=subprocess.PIPE, capture_output=False)
    assert res.returncode == 1
    assert one_line(res.stderr) == (
        "rtax: error: cannot write to standard output (No space left on device)"
    )


def test_t2_output_into_a_pipe_that_closes_is_141_and_silent() -> None:
    for args in (["report", str(EXAMPLE)], ["report", str(EXAMPLE), "--format", "json"]):
        p = subprocess.Popen(
            [sys.executable, "-m", "rtax_tui", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()  # before its first write (a report fits in a pipe's buffer)
        err = p.stderr.read()
        assert p.wait(timeout=60) == 141, err.decode()
        assert err == b""


# -- T3: --control reads any stdin -----------------------------------------------------------


@pytest.mark.parametrize("stdin", ["devnull", "file", "zero"])
def test_t3_control_reads_a_file_or_dev_null(tmp_path: Path, stdin: str) -> None:
    """/dev/zero: a line that never ends is no console; it ends the input (it once spun a
    core beside the trials, reading zeros for the whole run)."""
    src = tmp_path / "commands"
    src.write_text("pause\nresume\nstop\n")
    rec = tmp_path / "r.jsonl"
    path = {"devnull": os.devnull, "file": str(src), "zero": "/dev/zero"}[stdin]
    with open(path, "rb") as f:
        res = rtax(*RUN, "--control", "--quiet", "-o", str(rec), stdin=f)
    assert res.returncode == 130, res.stderr.decode()  # end of input (or `stop`) stops it
    assert b"Traceback" not in res.stderr
    assert read_recording(rec).end["status"] == "interrupted"  # type: ignore[index]


# -- T4: names too long, everywhere a path is taken ------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["run", f"{LONG}/p.toml"], "PROFILE"),
        (["run", "t0", "--driver", "local", "-o", f"{LONG}/r.jsonl"], "too long"),
        (["home", LONG], "PROFILE"),
        (["probe", "--profile", LONG, "--driver", "local"], "--profile"),
        (["traj", "inspect", LONG], "FILE"),
        (["traj", "prepare", LONG, "-o", "x.jsonl"], "FILE_OR_DIR"),
        (["traj", "prepare", str(TRAJ), "-o", f"{LONG}.jsonl"], "-o"),
        (["project", str(EXAMPLE), "--steps-from", LONG], "--steps-from"),
        (["plot", str(EXAMPLE), "--kind", "cdf", "-o", f"{LONG}.svg"], "-o"),
        (["report", LONG], LONG),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else "",
)
def test_t4_a_name_too_long_is_one_line_naming_the_flag(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    res = rtax(*args, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert res.returncode == 2
    line = one_line(res.stderr)
    assert flag in line and "too long" in line, line
    no_part_files(tmp_path)


@pytest.mark.parametrize("where", ["value", "key"])
def test_t4_a_value_quoted_in_an_error_is_cut_to_one_short_line(tmp_path: Path, where: str) -> None:
    """A 5,000-character option (or key) quoted whole made a 5 KB error line; it is cut
    in its middle, the file, line and field kept at its head."""
    opt = f'memory_mib = "{"x" * 5000}"' if where == "value" else f"{'y' * 5000} = 1"
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ndrivers = ["libvirt"]\nworkloads = ["t0"]\n[drivers_options.libvirt]\n' + opt
    )
    res = rtax("run", str(prof), "-o", str(tmp_path / "r.jsonl"), cwd=tmp_path)
    assert res.returncode == 2
    [line] = res.stderr.decode().splitlines()
    assert line.startswith(f"rtax: error: {prof}:5: drivers_options.libvirt"), line[:200]
    assert len(line) <= 1100 and "characters ...]" in line


# -- T5: traj prepare -o onto a dangling link, a read-only place, a full disk ----------------


def test_t5_prepare_onto_a_dangling_link(tmp_path: Path) -> None:
    out = tmp_path / "dangling.jsonl"
    out.symlink_to(tmp_path / "nowhere" / "x")
    res = rtax("traj", "prepare", str(TRAJ), "-o", str(out), "--repeat", "1")
    assert res.returncode == 2
    assert "points nowhere" in one_line(res.stderr)
    assert out.is_symlink() and not (tmp_path / "nowhere").exists()


def test_t5_prepare_into_a_read_only_file_system(ro_dir: Path) -> None:
    res = rtax("traj", "prepare", str(TRAJ), "-o", str(ro_dir / "x.jsonl"), "--repeat", "1")
    assert res.returncode == 2
    assert "-o" in (line := one_line(res.stderr)) and "read-only" in line
    assert not list(ro_dir.iterdir())


def test_t5_prepare_onto_a_full_disk_leaves_nothing(small_disk: Path) -> None:
    out = small_disk / "x.jsonl"
    res = rtax("traj", "prepare", str(TRAJ), "-o", str(out), "--repeat", "3")
    assert res.returncode == 2
    assert "nothing was kept" in one_line(res.stderr)
    assert not list(small_disk.iterdir())  # neither a cut recording nor its temporary file


# -- T6: a header's nested fields ------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"probed_at": "x", "summary": {"blocked": 1, "breached_checks": [1, {"a": 2}]}},
        {"summary": {"broken_promises": "abc"}},
        {"summary": {"held": -3}},
        {"status": 7},
        ["not", "an", "object"],
    ],
)
def test_t6_a_header_nested_field_of_the_wrong_type_is_one_line(
    tmp_path: Path, bad: object
) -> None:
    lines = EXAMPLE.read_text().splitlines()
    header = json.loads(lines[0])
    header["hosts"]["local"]["drivers"]["local"]["boundary"] = bad
    rec = tmp_path / "r.jsonl"
    rec.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    for args in (["report", str(rec)], ["compare", str(rec), str(EXAMPLE)]):
        res = rtax(*args)
        assert res.returncode == 2
        assert "r.jsonl:1: run.hosts.local.drivers.local.boundary" in one_line(res.stderr)


# -- T7: driver options declared, depth bounded ----------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("[drivers_options.local]\nzzz = 1\n", "local.zzz: unknown key (allowed: env)"),
        (
            "[drivers_options.stage]\nzzz = 1\n",
            "zzz: unknown key (allowed: sandbox, uid, ro_binds)",
        ),
        ("[drivers_options.stage]\nuid = 0\n", "stage.uid: must be at least 1, got 0"),
        ("[drivers_options.stage]\nro_binds = [1]\n", "stage.ro_binds: expected string, got 1"),
        ('[drivers_options.stage]\nro_binds = ["a"]\n', "expected absolute host paths, got 'a'"),
        ("[drivers_options.stage]\nro_binds = " + "[" * 300 + "]" * 300 + "\n", "nested"),
    ],
    ids=["local-unknown", "stage-unknown", "stage-uid", "stage-binds", "stage-relative", "deep"],
)
def test_t7_driver_options_are_declared(tmp_path: Path, body: str, says: str) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\ndrivers = ["local"]\nworkloads = ["t0"]\n' + body)
    res = rtax("run", str(prof), "--trials", "1", "-o", str(tmp_path / "r.jsonl"))
    assert res.returncode == 2
    line = one_line(res.stderr)
    assert says in line and "p.toml:" in line, line
    assert not (tmp_path / "r.jsonl").exists()


# -- T8, T9: SSH client errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "says"),
    [
        ("empty", "not a private key"),  # a regular file asyncssh cannot import
        ("devnull", "cannot read a private key (not a regular file)"),
        ("fifo", "cannot read a private key (not a regular file)"),  # never waited on
    ],
)
def test_t8_an_identity_that_is_no_key_is_one_line_naming_the_flag(
    tmp_path: Path, make: str, says: str
) -> None:
    from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url
    from rtax_tui.model.spec import RtaxError

    path = str(tmp_path / "id")
    if make == "empty":
        Path(path).write_bytes(b"")
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path = os.devnull
    host = SSHHost(parse_ssh_url("ssh://127.0.0.1:1", identity=path))
    with pytest.raises(RtaxError, match=rf"^--identity {re.escape(path)}: {re.escape(says)}"):
        host._options()
    res = rtax("doctor", "--host", "ssh://127.0.0.1:1", "--identity", path)
    assert b"Traceback" not in res.stderr and b"KeyImportError" not in res.stdout + res.stderr
    assert f"--identity {path}: {says}".encode() in res.stdout + res.stderr


def test_t9_a_host_label_over_63_bytes_is_one_line_naming_the_flag() -> None:
    res = rtax("doctor", "--host", f"ssh://{'a' * 70}.example")
    assert res.returncode == 2
    line = one_line(res.stderr)
    assert "--host" in line and "not a host name" in line


# -- T10: ASCII digits only ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--port", "\u0663", "replay", str(EXAMPLE)],  # Arabic-Indic 3
        ["run", "t0", "--trials", "\u0665"],
        ["run", "t0", "--arrival", "burst:\u0663"],
        ["report", str(EXAMPLE), "--fidelity-min", "\uff18\uff10"],  # fullwidth 80
    ],
    ids=["serve-port", "trials", "arrival", "fidelity"],
)
def test_t10_numbers_take_ascii_digits_only(tmp_path: Path, args: list[str]) -> None:
    res = rtax(*args, cwd=tmp_path, timeout=30)
    assert res.returncode == 2
    one_line(res.stderr)
    assert not list(tmp_path.iterdir())


# -- F1: a signal in a run's first moments ---------------------------------------------------


def _handles(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has installed a handler for `sig` (SigCgt of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (sig - 1)))


def signal_early(out: Path, sig: signal.Signals, delay_s: float) -> tuple[int, bytes]:
    """`rtax run -o out`, sent `sig` `delay_s` after it handles it (its first moments)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "rtax_tui", *RUN, "-o", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    # SIGTERM's handler is rtax's (Python catches SIGINT from its start): all three are
    while not _handles(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(delay_s)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def check_kept_or_absent(out: Path) -> None:
    """No recording, or one that reads back (its header whole); never an empty one, never
    a temporary file left beside it."""
    if out.exists():
        assert out.stat().st_size > 0
        read_recording(out)
    no_part_files(out.parent)


def test_a_signal_between_a_recordings_making_and_its_owners_try_leaves_no_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The early-signal property test found a `.part` left beside the recording under
    load: the signal landed after the temporary file was made and before the code that
    removes it was entered. rtax's ending on a signal removes what it left unfinished."""
    from rtax_tui.commands import headless
    from rtax_tui.model.recording import RecordingWriter

    def opened_then_interrupted(path: Path) -> RecordingWriter:
        RecordingWriter.open(path)  # made, registered, and never seen by the caller
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(headless, "_open_recording", opened_then_interrupted)
    out = tmp_path / "r.jsonl"
    status, err = run_main([*RUN, "-o", str(out), "--quiet"], io.StringIO())
    assert status == 130 and "interrupted" in err
    assert not out.exists()
    no_part_files(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_f1_a_signal_in_the_first_half_second_is_130_and_no_empty_recording(
    tmp_path: Path, sig: signal.Signals
) -> None:
    rng = random.Random(sig)
    for i, delay in enumerate([0.0, *(rng.uniform(0, 0.5) for _ in range(2))]):
        out = tmp_path / f"r{i}.jsonl"
        rc, err = signal_early(out, sig, delay)
        assert rc in (130, 0), (delay, rc, err.decode())  # 0: it finished first
        assert b"Traceback" not in err, err.decode()
        check_kept_or_absent(out)


# -- F2: plot onto a full disk ---------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_f2_plot_onto_a_full_disk_leaves_no_cut_figure(small_disk: Path, suffix: str) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"x" * 4096)
    res = rtax("plot", str(EXAMPLE), "--kind", "cdf", "-o", str(small_disk / f"f.{suffix}"))
    assert res.returncode == 2
    assert "no space left" in one_line(res.stderr)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


# -- C1: a driver's cleanup that fails or hangs ----------------------------------------------

STUCK = """
import asyncio
from rtax_tui.drivers.local import LocalDriver


class Stuck(LocalDriver):
    name = "stuck"

    async def cleanup(self, label=None):
        await asyncio.sleep(3600)  # a read of /proc that never returns, say
        return 0


class Broken(LocalDriver):
    name = "broken"

    async def cleanup(self, label=None):
        raise TimeoutError("the cleanup script ran past its 60 s")
"""


def plugin_site(tmp_path: Path) -> Path:
    """Two drivers from another package: a module and its dist-info, no pip needed."""
    site = tmp_path / "site"
    info = site / "rtax_edge_drivers-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "rtax_edge_drivers.py").write_text(STUCK)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rtax-edge-drivers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rtax.drivers]\nstuck = rtax_edge_drivers:Stuck\nbroken = rtax_edge_drivers:Broken\n"
    )
    return site


def test_c1_a_cleanup_that_hangs_or_fails_is_named_and_the_others_run(tmp_path: Path) -> None:
    site = plugin_site(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    t0 = time.monotonic()
    res = rtax(
        "cleanup", "--driver", "stuck", "--driver", "broken", "--driver", "local",
        "--timeout", "2", env=env,
    )  # fmt: skip
    assert time.monotonic() - t0 < 30
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("rtax: cleanup:")]
    assert len(lines) == 2, err
    assert any("stuck: did not finish within 2 s" in ln for ln in lines)
    assert any("broken: failed: the cleanup script ran past its 60 s" in ln for ln in lines)
    # local's ran: the summary line is printed after every driver had its turn
    assert "clean up" in res.stdout.decode() or "removed" in res.stdout.decode()


# -- property tests: streams, paths, early signals (bounded) ---------------------------------


class _Failing(output.StdoutRaw):
    """A stdout whose writes fail with `err` after `after` bytes (the system call's
    double: what it raises is marked stdout's as the real one's is)."""

    def __init__(self, err: int, after: int) -> None:
        super().__init__(1)
        self.err, self.left = err, after

    def _os_write(self, b: object) -> int:
        n = len(b)  # type: ignore[arg-type]
        if self.left <= 0:
            raise OSError(self.err, os.strerror(self.err))
        took = min(n, self.left)
        self.left -= took
        return took


COMMANDS = [
    ["report", str(EXAMPLE)],
    ["report", str(EXAMPLE), "--format", "json"],
    ["report", str(EXAMPLE), "--format", "markdown"],
    ["report", str(EXAMPLE), "--format", "csv"],
    ["compare", str(EXAMPLE), str(EXAMPLE), "--format", "json"],
    ["project", str(EXAMPLE)],
    ["traj", "inspect", str(TRAJ), "--format", "json"],
]


def run_main(args: list[str], stdout: io.TextIOBase) -> tuple[int, str]:
    """`rtax ARGS` in this process, stdout replaced; (status, stderr)."""
    old_out, old_err = sys.stdout, sys.stderr
    err = io.StringIO()
    sys.stdout, sys.stderr = stdout, err  # type: ignore[assignment]
    try:
        try:
            status = cli.main(args)
        except SystemExit as exc:  # argparse's
            status = int(exc.code or 0)
    finally:
        sys.stdout, sys.stderr = old_out, old_err
    return status, err.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    args=st.sampled_from(COMMANDS),
    err=st.sampled_from([errno.EPIPE, errno.ENOSPC, errno.EBADF, errno.EIO]),
    after=st.integers(0, 6000),
)
def test_property_a_stream_that_fails_is_141_or_one_line(
    args: list[str], err: int, after: int
) -> None:
    out = io.TextIOWrapper(io.BufferedWriter(_Failing(err, after), 512), write_through=True)
    status, text = run_main(args, out)
    assert "Traceback" not in text
    if status == 0:  # all of it fitted before the fault
        return
    if err == errno.EPIPE:
        assert (status, text) == (141, "")
    else:
        assert status == 1 and text.count("\n") == 1 and "standard output" in text, text


def test_an_error_of_stdouts_number_from_elsewhere_is_not_stdouts(monkeypatch) -> None:
    """A descriptor of rtax's own used after it was closed raises EBADF with no file name,
    as a closed stdout does: it was read as stdout's ("cannot write to standard output",
    a kill -9 test's run with stdout on /dev/null). Only what a write to stdout raised is
    stdout's; the other says where it came from."""

    def dispatch(args: object, argv: object) -> int:
        os.close(2**30)  # past any descriptor table: EBADF, as a descriptor closed twice
        return 0

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    out = io.TextIOWrapper(io.BufferedWriter(_Failing(errno.EBADF, 10**6)), write_through=True)
    status, text = run_main(["report", str(EXAMPLE)], out)
    assert status == 1
    assert text.startswith("rtax: error: Bad file descriptor (at "), text
    assert "standard output" not in text and "in dispatch)" in text, text
    assert not output.is_stream_error(OSError(errno.EBADF, "Bad file descriptor"))


def test_a_write_to_stdout_marks_its_error_and_nothing_else() -> None:
    r, w = os.pipe()
    os.close(r)
    raw = output.StdoutRaw(w)
    try:
        with pytest.raises(BrokenPipeError) as got:
            raw.write(b"x")
    finally:
        os.close(w)
    assert output.is_stream_error(got.value)
    assert not output.is_stream_error(BrokenPipeError(errno.EPIPE, "Broken pipe"))


def _component() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["a", "..", ".", "dangling", "dir", "file", "ro", "x" * 255, "y" * 256]),
        st.text(
            st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/"),
            min_size=1,
            max_size=12,
        ),
    )


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("paths")
    (d / "dir").mkdir()
    (d / "file").write_text("not a recording\n")
    (d / "dangling").symlink_to(d / "missing" / "x")
    return d


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    parts=st.lists(_component(), min_size=1, max_size=4),
    use=st.sampled_from(
        ["report", "traj", "project-steps", "prepare-in", "run-profile", "compare"]
    ),
)
def test_property_a_bad_path_is_one_line(playground: Path, parts: list[str], use: str) -> None:
    path = str(playground.joinpath(*parts))
    args = {
        "report": ["report", path],
        "traj": ["traj", "inspect", path],
        "project-steps": ["project", str(EXAMPLE), "--steps-from", path],
        "prepare-in": ["traj", "prepare", path, "-o", str(playground / "never.jsonl")],
        "run-profile": ["run", path + ".toml", "--headless"],
        "compare": ["compare", path, str(EXAMPLE)],
    }[use]
    status, text = run_main(args, io.StringIO())  # type: ignore[arg-type]
    assert "Traceback" not in text
    assert status == 2 and text.count("\n") == 1, (args, status, text)
    assert not (playground / "never.jsonl").exists()
    no_part_files(playground)


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sig=st.sampled_from([signal.SIGTERM, signal.SIGHUP, signal.SIGINT]),
    delay=st.floats(0, 0.6),
)
def test_property_an_early_signal_never_leaves_an_empty_recording(
    tmp_path: Path, sig: signal.Signals, delay: float
) -> None:
    out = tmp_path / f"r-{time.monotonic_ns()}.jsonl"
    rc, err = signal_early(out, sig, delay)
    assert rc in (130, 0) and b"Traceback" not in err, (rc, err.decode())
    check_kept_or_absent(out)
