"""`rtax doctor`'s details in words (issue 39): the table says a driver's facts as a user
reads them (no Python repr, no sha256 digest); `--format json` keeps the raw facts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from rtax_tui.render.fact_words import facts_words

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "3f2a1b9c0d4e" + "5" * 52
# what Python's repr leaves in a text: True/False/None, a list's or a dict's brackets, a
# digest
REPR = re.compile(r"\b(True|False|None)\b|[\[\]{}]|sha256")

# the shapes a container driver's facts() has (drivers/toolkit/container.py): a dict of
# boundary options, a daemon's list of security options, image digests, booleans, None
CONTAINER_FACTS = {
    "sdk": "7.1.0",
    "image": "rtax/t0:latest",
    "boundary_options": {
        "user": None,
        "cap_drop": ["ALL"],
        "cap_add": [],
        "read_only": True,
        "no_new_privileges": True,
        "security_opt": [],
        "userns": None,
        "runtime": None,
    },
    "security_options": ["name=seccomp,profile=builtin", "name=cgroupns"],
    "image_id": DIGEST,
    "workload_image_id": None,
    "overlay": False,
    "memory_mib": 512,
    "platform": "ptrace",
    "platform_reason": "systrap: not in this runsc",
    "daemon": {"call": "dockerd (GET /_ping)", "answer_ms": 3.4},
}


def test_facts_are_said_in_words():
    lines = facts_words(CONTAINER_FACTS)
    text = "\n".join(lines)
    assert not REPR.search(text), REPR.search(text)
    assert "image id 3f2a1b9c0d4e" in lines  # the 12 hex digits `docker images` shows
    assert "security options: seccomp (profile builtin), cgroupns" in lines
    assert "overlay: no" in lines and "memory 512 MiB" in lines
    assert "platform ptrace (systrap: not in this runsc)" in lines  # its reason beside it
    assert not any(x.startswith("platform reason") for x in lines)
    assert "workload image id: none" in lines
    assert "dockerd (GET /_ping) answered in 3 ms" in lines
    opts = next(x for x in lines if x.startswith("boundary options"))
    assert "cap drop: ALL" in opts and "read only: yes" in opts and "user: none" in opts
    assert len(lines) == len(CONTAINER_FACTS) - 1  # one a fact, the reason with its key


def test_a_daemon_that_did_not_answer_is_said_so():
    assert facts_words({"daemon": {"call": "libvirtd (version)", "answer_ms": None}}) == [
        "libvirtd (version) did not answer"
    ]


def rtax(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtax_tui", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def test_doctor_says_details_in_words_and_json_keeps_the_raw_facts():
    """The real doctor on this machine: the table's details of each working driver read
    as words; the JSON rows hold the same facts raw (a uid a number, a flag a boolean)."""
    res = rtax("doctor", "--format", "json")
    rows = [json.loads(x) for x in res.stdout.splitlines()][1:]
    ok = [r for r in rows if r.get("ok")]
    assert ok, res.stdout + res.stderr
    for r in ok:
        assert r["details"] == facts_words(r["facts"])  # the words of those raw facts
        assert not REPR.search("\n".join(r["details"])), (r["driver"], r["details"])
    by = {r["driver"]: r for r in ok}
    if "stage" in by:
        assert isinstance(by["stage"]["facts"]["uid"], int)
    if "gvisor" in by:
        assert isinstance(by["gvisor"]["facts"]["overlay"], bool)
    table = rtax("doctor")
    assert "drivers on local" in table.stdout, table.stdout + table.stderr
    assert "steadier figures: " in table.stdout  # local's advice (test_noise: its content)
    for r in ok:  # each working driver's details are in the table, in words
        for line in r["details"]:
            assert line.split(" ")[0] in table.stdout
    body = table.stdout.split("warm pool resets")[0]
    assert not re.search(r"\b(True|False|None)\b|sha256|\{'", body), body
