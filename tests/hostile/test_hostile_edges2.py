"""The red team's second pass over issue 35: attacks on the first pass's fixes
(tests/hostile/test_hostile_edges.py) that got through at 5c6c382, each as the promise it broke;
docs/boundaries.md lists what was tried and what is left (a newline in a recorded cell
name, a profile's `[hosts.NAME]`). A real `python -m rtax_tui` process where possible."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"
SMALL = ROOT / "recordings" / "examples" / "t2-local-stage.jsonl"
AS_ROOT = os.geteuid() == 0
RUN = ["run", "t0", "--driver", "local", "--trials", "1", "--warmup", "0", "--quiet"]
# as root, a read-only directory or a mode-0200 file still lets root in: drop the caps
NOCAP = (["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner",
          "--inh-caps", "-all"] if AS_ROOT else [])  # fmt: skip


def rtax(
    *args: str | bytes, prefix: tuple[str, ...] | list[str] = (), **kw: object
) -> subprocess.CompletedProcess[bytes]:
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 120)
    kw.setdefault("cwd", "/tmp")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*prefix, sys.executable, "-m", "rtax_tui", *args], env=env, **kw)  # type: ignore[call-overload,no-any-return]


def one_line(err: bytes) -> str:
    text = err.decode(errors="replace")
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "\x1b" not in lines[0] and "\x07" not in lines[0], text
    return lines[0]


def no_raw(err: bytes) -> list[str]:
    """Every line printed: none holds a raw escape or BEL; returns the lines."""
    text = err.decode(errors="replace")
    assert "Traceback" not in text, text
    assert "\x1b" not in text and "\x07" not in text, text
    return text.splitlines()


# -- A. --summary through a symbolic link: the link is replaced, its target never written --
def test_summary_through_a_symlink_appends_to_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_text("# an earlier step\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    res = rtax("report", str(EXAMPLE), "--threshold", "failed == 0", "--summary", str(link))
    assert res.returncode == 0
    assert link.is_symlink()  # 5c6c382: os.replace put a regular file where the link was
    assert "rtax report" in real.read_text()  # 5c6c382: the target kept only its old text


# -- B. --summary / --junit rewritten: a private file (0600, another owner) becomes 0644 ------
@pytest.mark.parametrize("flag", ["--summary", "--junit"])
def test_gate_file_keeps_its_mode(tmp_path: Path, flag: str) -> None:
    out = tmp_path / "out"
    out.write_text("old\n")
    out.chmod(0o600)
    res = rtax("report", str(EXAMPLE), "--threshold", "failed == 0", flag, str(out))
    assert res.returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # 5c6c382: 0o644, readable by all


# -- C. a writable summary in a directory rtax cannot create files in: refused ---------------
@pytest.mark.parametrize("mode", ["ro-dir", "write-only-file"])
def test_writable_summary_is_appended_to(tmp_path: Path, mode: str) -> None:
    if AS_ROOT and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's capabilities")
    d = tmp_path / "d"
    d.mkdir()
    s = d / "summary.md"
    s.write_text("# before\n")
    s.chmod(0o666 if mode == "ro-dir" else 0o222)
    rec = tmp_path / "rec.jsonl"
    shutil.copy(EXAMPLE, rec)
    rec.chmod(0o644)
    if mode == "ro-dir":
        d.chmod(0o555)
    try:
        res = rtax("report", str(rec), "--threshold", "failed == 0", "--summary", str(s),
                   prefix=NOCAP, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    finally:
        d.chmod(0o755)
    # `echo >> summary.md` works here; 5c6c382: exit 2 "--summary ...: permission denied"
    # (ro-dir: mkstemp beside it) or "cannot open the summary (Permission denied)" (0222)
    assert res.returncode == 0, res.stderr.decode()
    s.chmod(0o644)
    assert "rtax report" in s.read_text()


# -- D. steps appending at once: a read-modify-rename lost some (O_APPEND loses none) -------
def test_summary_keeps_every_concurrent_append(tmp_path: Path) -> None:
    s = tmp_path / "s.md"
    s.write_text("# step 1\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "rtax_tui", "report", str(EXAMPLE), "--threshold",
            "failed == 0", "--summary", str(s)]  # fmt: skip
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    assert s.read_text().count("## Gates") == 6  # 5c6c382: 4 of 6 kept


# -- E. --summary onto a file over 64 MiB: refused by the rewrite (and the line named no
# flag); appended to, as a summary always was
def test_summary_over_64mib_is_appended_to(tmp_path: Path) -> None:
    s = tmp_path / "big.md"
    with open(s, "wb") as f:
        f.truncate((64 << 20) + 1)
    res = rtax("report", str(EXAMPLE), "--threshold", "failed == 0", "--summary", str(s),
               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    with open(s, "rb") as f:
        f.seek(64 << 20)
        assert b"## Gates" in f.read()


# -- F. --junit / --summary naming the recording read: the data is replaced / corrupted -----
@pytest.mark.parametrize("flag", ["--junit", "--summary"])
def test_gate_file_never_replaces_the_recording(tmp_path: Path, flag: str) -> None:
    rec = tmp_path / "rec.jsonl"
    shutil.copy(SMALL, rec)
    before = rec.read_bytes()
    rtax("report", str(rec), "--threshold", "failed == 0", flag, str(rec))
    assert rec.read_bytes() == before  # 5c6c382: XML (exit 0) / Markdown appended: unreadable


# -- G. --min-effect: a percentage holding a unit is a traceback ---------------------------
@pytest.mark.parametrize("value", ["5ms%", "1s%"])
def test_min_effect_unit_and_percent_is_one_line(value: str) -> None:
    res = rtax("compare", str(EXAMPLE), str(EXAMPLE), "--min-effect", value)
    assert res.returncode == 2  # 5c6c382: 1, ValueError from float('5ms') (gates.py:149)
    one_line(res.stderr)


# -- H. infinite gate values: a threshold that can never breach ----------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["report", str(EXAMPLE), "--threshold", "failed < 1e999"],
        ["report", str(EXAMPLE), "--threshold", "create p95 < 1e308s"],  # 1e308 * 1e3 = inf
        ["compare", str(EXAMPLE), str(EXAMPLE), "--min-effect", "1e999%"],
    ],
)
def test_gate_values_are_finite(args: list[str]) -> None:
    res = rtax(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert res.returncode == 2, res.stderr.decode()  # 5c6c382: 0, "threshold held"


# -- I. the gate lines print a threshold's cell glob raw (argv or profile) ------------------
def test_gate_line_shows_escapes_of_the_threshold() -> None:
    res = rtax("report", str(SMALL), "--threshold", "local/\x1b]0;PWNED\x07\x1b[31m* failed < 1")
    assert res.returncode == 1
    no_raw(res.stderr)  # 5c6c382: an OSC title sequence and ESC[31m raw (gating.py:86)


# -- K. --host: an IPv6 zone id passes host_name_wrong (ipaddress accepts any scope text) ---
@pytest.mark.parametrize(
    "host",
    ["ssh://[::1%\x1b[31mRED\nX b]:9", "ssh://[::1%-oProxyCommand=x]:9", "ssh://[::1%\u202e]:9"],
)
def test_ipv6_zone_id_is_checked_by_the_flag(tmp_path: Path, host: str) -> None:
    res = rtax(*RUN, "--host", host, "-o", str(tmp_path / "r.jsonl"), timeout=60)
    assert res.returncode == 2
    assert "--host" in one_line(res.stderr)  # 5c6c382: `left out:` over two lines, a connect


# -- L. `left out:` is printed with `visible`, not `one_line`: a newline splits it ----------
def test_left_out_line_is_one_line(tmp_path: Path) -> None:
    key = tmp_path / "key\nX"
    key.write_text("junk")
    res = rtax(*RUN, "--host", "ssh://127.0.0.1:9", "--identity", str(key),
               "-o", str(tmp_path / "r.jsonl"), timeout=60)  # fmt: skip
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.decode().splitlines() if ln.strip()]
    assert all(ln.startswith(("left out:", "rtax: error:")) for ln in lines), lines
    # 5c6c382: "left out: --identity /tmp/.../key" then "X: not a private key ..."
