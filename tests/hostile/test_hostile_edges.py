"""The red team's pass over issue 35 ("bad input and faults, the edges"): each attack
that got through at 42814d3 (15 of them; docs/boundaries.md lists what was tried and what
held), as the promise it broke. A real `python -m rtax_tui` process, its exit status,
and stderr of one line without a traceback or a raw escape.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import tmpfs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
SMALL = ROOT / "recordings" / "examples" / "t2-local-stage.jsonl"
TRAJ = next((ROOT / "tests" / "data" / "trajectories" / "codex").iterdir())
AS_ROOT = os.geteuid() == 0
RUN = ["run", "t0", "--driver", "local", "--trials", "1", "--warmup", "0", "--quiet"]


def rtax(*args: str | bytes, **kw: object) -> subprocess.CompletedProcess[bytes]:
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 120)
    kw.setdefault("cwd", "/tmp")
    return subprocess.run([sys.executable, "-m", "rtax_tui", *args], **kw)  # type: ignore[call-overload,no-any-return]


def one_line(err: bytes) -> str:
    text = err.decode(errors="replace")
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "\x1b" not in lines[0], text
    return lines[0]


def with_header(tmp_path: Path, change: dict, src: Path = SMALL) -> Path:
    lines = src.read_bytes().split(b"\n")
    h = json.loads(lines[0])
    h["profile"].update(change)
    out = tmp_path / "crafted.jsonl"
    out.write_bytes(b"\n".join([json.dumps(h).encode(), *lines[1:]]))
    return out


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of 16 KiB (a page free after a few writes; root only)."""
    if not AS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs(tmp_path / "disk", "size=16k", "atk") as disk:
        yield disk


# -- 1. a recording header's profile.thresholds that is not a table: AttributeError ------
@pytest.mark.parametrize("value", [[1], "x", 5, -1])
def test_header_thresholds_not_a_table_is_one_line(tmp_path: Path, value: object) -> None:
    rec = with_header(tmp_path, {"thresholds": value})
    res = rtax("report", str(rec))
    assert res.returncode == 2
    one_line(res.stderr)


# -- 2. rtax report on a FIFO blocks forever (read_header uses a plain open) --------------
def test_report_on_a_fifo_is_refused_not_blocked(tmp_path: Path) -> None:
    fifo = tmp_path / "rec.jsonl"
    os.mkfifo(fifo)
    res = rtax("report", str(fifo), timeout=15)  # TimeoutExpired on main
    assert res.returncode == 2
    assert "not a regular file" in one_line(res.stderr)


# -- 3. non-ASCII digits in thresholds and --min-effect ------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["report", str(EXAMPLE), "--threshold", "failed < ٣"],
        ["report", str(EXAMPLE), "--threshold", "create p95 < ３０ms"],
        ["compare", str(EXAMPLE), str(EXAMPLE), "--min-effect", "٥%,0.5ms"],
    ],
)
def test_numbers_in_gates_are_ascii_digits_only(args: list[str]) -> None:
    res = rtax(*args)
    assert res.returncode == 2, res.stderr.decode()
    one_line(res.stderr)


def test_profile_thresholds_are_ascii_digits_only(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\ntrials = 1\ndrivers = ["local"]\nworkloads = ["t0"]\n'
                    '[thresholds]\nfailed = "< ٣"\n')  # fmt: skip
    res = rtax("run", str(prof), "-o", str(tmp_path / "r.jsonl"), "--quiet")
    assert res.returncode == 2, res.stderr.decode()
    one_line(res.stderr)


# -- 4. --junit / --summary are not written atomically -------------------------------------
def test_junit_onto_a_full_disk_leaves_no_cut_file(small_disk: Path) -> None:
    (small_disk / "filler").write_bytes(b"x" * 12288)  # one page left: the XML needs two
    res = rtax("compare", str(EXAMPLE), str(EXAMPLE), "--junit", str(small_disk / "j.xml"))
    assert res.returncode == 2
    one_line(res.stderr)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # main: a 4096-byte j.xml


@pytest.mark.parametrize("flag", ["--junit", "--summary"])
def test_gate_files_onto_a_full_disk_leave_no_empty_file(small_disk: Path, flag: str) -> None:
    (small_disk / "filler").write_bytes(b"x" * 16384)
    res = rtax("report", str(EXAMPLE), flag, str(small_disk / "out"), "--threshold", "failed == 0",
               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert res.returncode == 2
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # main: a 0-byte out


# -- 5. a byte that is not UTF-8 on the command line: tracebacks ---------------------------
@pytest.mark.parametrize("flag", ["--junit", "--summary"])
def test_non_utf8_threshold_with_gate_files_is_one_line(tmp_path: Path, flag: str) -> None:
    out = tmp_path / "out"
    res = rtax("report", str(EXAMPLE), "--threshold", b"\xff/* failed == 0", flag, str(out),
               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert "Traceback" not in res.stderr.decode(errors="replace")  # main: UnicodeEncodeError
    assert not out.exists() or out.stat().st_size > 0  # main: a 0-byte file


@pytest.mark.parametrize(
    "extra",
    [
        ["-o", b"r\xff.jsonl"],  # the recording's own name
        ["-o", "-", "--record", b"rec\xff.jsonl"],
        ["-o", "ok.jsonl", "--threshold", b"\xff/* failed == 0"],
    ],
)
def test_run_with_a_non_utf8_argument_is_one_line(tmp_path: Path, extra: list) -> None:
    res = rtax(*RUN, *extra, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # main: TypeError: str is not valid UTF-8 (orjson, encoding argv into the header)
    assert "Traceback" not in res.stderr.decode(errors="replace")


def test_traj_inspect_json_of_a_non_utf8_path_is_one_line(tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/t\xff.jsonl"
    Path(os.fsdecode(name)).write_bytes(TRAJ.read_bytes())
    res = rtax("traj", "inspect", name, "--format", "json", stdout=subprocess.DEVNULL,
               stderr=subprocess.PIPE)  # fmt: skip
    assert "Traceback" not in res.stderr.decode(errors="replace")


# -- 6. the run's fault line is printed raw (a newline and an escape in -o) ----------------
def test_run_fault_on_a_full_disk_is_one_line_with_escapes_visible(small_disk: Path) -> None:
    (small_disk / "filler").write_bytes(b"x" * 16384)
    res = rtax(*RUN, "-o", str(small_disk / "a\nb\x1b[31mRED.jsonl"))
    assert res.returncode == 1
    assert "no space left" in one_line(res.stderr).lower()  # main: two lines, a raw ESC


# -- 7. argparse's "unrecognized arguments" is not escaped ---------------------------------
@pytest.mark.parametrize(
    "args", [["report", str(EXAMPLE), "x\ny\x1b[31m"], ["--bogus\nX\x1b]0;title\x07"]]
)
def test_unrecognized_arguments_are_one_line(args: list[str]) -> None:
    res = rtax(*args)
    assert res.returncode == 2
    one_line(res.stderr)


def test_cleanup_unknown_driver_is_one_line() -> None:
    # in-process: `cleanup.run` refuses the unknown driver before it cleans anything
    code = (
        f"import argparse, sys; sys.path.insert(0, {str(ROOT)!r});"
        "from rtax_tui.commands import cleanup;"
        "sys.exit(cleanup.run(argparse.Namespace(run=None, host=None,"
        " driver=['zz\\n\\x1b[2Jevil'], timeout=1), ['rtax', 'cleanup']))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert res.returncode == 2
    one_line(res.stderr)  # main: two lines, a raw ESC


# -- 8. SSH: a host name with control characters passes --host; a user is not checked ------
@pytest.mark.parametrize("host", ["ssh://a\nb\x1b[31m", "ssh://us\ner@host", "ssh://a b"])
def test_bad_ssh_host_is_refused_by_the_flag(tmp_path: Path, host: str) -> None:
    res = rtax(*RUN, "--host", host, "-o", str(tmp_path / "r.jsonl"), timeout=60)
    assert res.returncode == 2
    assert "--host" in one_line(res.stderr)  # main: a DNS lookup, `left out:` over 2 lines


# -- 9. --identity is read with no bound and blocks the loop ------------------------------
def test_identity_fifo_does_not_make_rtax_deaf_to_sigterm(tmp_path: Path) -> None:
    fifo = tmp_path / "id"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "rtax_tui", *RUN, "--host", "ssh://127.0.0.1:9",
                          "--identity", str(fifo), "-o", str(tmp_path / "r.jsonl")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail("SIGTERM did not end rtax (blocked in open() of --identity's FIFO)")
    assert rc in (2, 130)


def test_identity_dev_zero_is_bounded(tmp_path: Path) -> None:
    def cap() -> None:  # without a cap, main grew to 8 GB in 14 s
        resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))

    res = rtax(*RUN, "--host", "ssh://127.0.0.1:9", "--identity", "/dev/zero",
               "-o", str(tmp_path / "r.jsonl"), preexec_fn=cap, timeout=60)  # fmt: skip
    assert res.returncode == 2
    err = res.stderr.decode(errors="replace")  # `left out: ...`, then the run's error
    assert "Traceback" not in err and "MemoryError" not in err  # it was read whole
    assert "--identity /dev/zero: cannot read a private key" in err.splitlines()[-1]


# -- 10. driver options: libvirt/microvm are not declared (unknown keys accepted) ----------
@pytest.mark.parametrize("driver", ["libvirt", "microvm"])
def test_vm_driver_options_unknown_key_refused(tmp_path: Path, driver: str) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('[run]\ntrials = 1\ndrivers = ["local"]\nworkloads = ["t0"]\n'
                    f"[drivers_options.{driver}]\nzzz = {{bar = 1}}\n")  # fmt: skip
    res = rtax("run", str(prof), "-o", str(tmp_path / "r.jsonl"), "--quiet")
    assert res.returncode == 2  # main: 0, the option recorded in the header
    assert "zzz" in one_line(res.stderr)


# -- 11. --help / --version into /dev/full: status 0, nothing said -------------------------
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["report", "--help"]])
def test_help_into_a_full_device_is_an_error(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        res = rtax(*args, stdout=full, stderr=subprocess.PIPE)
    assert res.returncode == 1  # main: 0 (argparse swallows the OSError)
    assert "cannot write" in one_line(res.stderr)


# -- 12. a threshold's regular expression is quadratic (a header, a profile, argv) ---------
def test_threshold_parse_is_not_quadratic(tmp_path: Path) -> None:
    """A run of spaces in a threshold (a header's, here 1 MiB of them) is refused, not
    backtracked over: a quadratic parse would take hours; this one ends within the
    subprocess's timeout."""
    rec = with_header(tmp_path, {"thresholds": {"a" + " " * (1 << 20) + "b": "x"}})
    res = rtax("report", str(rec), timeout=60)
    assert res.returncode == 2
    assert "threshold" in one_line(res.stderr)


# -- 13. smaller: wrong reasons (one line, but it says something false) --------------------
def test_report_header_over_16mib_is_not_called_empty(tmp_path: Path) -> None:
    rec = with_header(tmp_path, {"description": "d" * (17 << 20)})
    # every reader the same: a line longer than any rtax writes (recording.LINE_MAX) is
    # refused by its number, not read whole by one reader and called empty by another
    for command in ("project", "report"):
        res = rtax(command, str(rec))
        err = res.stderr.decode()
        assert res.returncode == 2 and "empty recording" not in err  # once: "empty recording"
        assert f"{rec}:1: a line longer than rtax reads (16 MiB)" in err


def test_output_under_a_regular_file_is_not_already_exists(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    res = rtax(*RUN, "-o", str(tmp_path / "afile" / "x.jsonl"))
    assert res.returncode == 2
    assert "already exists" not in one_line(res.stderr)  # main: "already exists; never overwrites"
