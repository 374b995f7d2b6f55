"""`rtax probe`'s verdicts from crafted step outputs and host observations (no I/O),
the combination over channels and hosts, the document, and the scripts' syntax."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rtax_tui.engine.probe import scripts as S
from rtax_tui.engine.probe.classify import Context, Outcome, classify, facts, trim
from rtax_tui.model.checks import (
    ALL_CHECKS,
    BLOCKED,
    BREACHED,
    BY_NAME,
    CHECKS,
    FAILING_STEPS,
    HELD,
    NA,
    PROBE_FORMAT,
    RESULTS,
)
from rtax_tui.model.probedoc import build_document, combine, matrix, summarize

TOK = {
    "tmp_sentinel": "rtax-probe-tmp-aaa",
    "cache_sentinel": "rtax-probe-cache-bbb",
    "root_home": "rtax-probe-root-ccc",
    "probe_socket": "rtax-probe-hello-ddd",
    "loopback_tcp": "rtax-probe-hello-ddd",
    "host_processes": "rtax-probe-proc-eee",
    "other_env": "rtax-probe-mark-fff",
    "workspace_persists": "rtax-probe-mark-fff",
    "fresh_env": "rtax-probe-fresh-ggg",
    "usr_local": "rtax-probe-usr-hhh",
    "process_vm": "rtax-probe-pvm-iii",
    "init_kill": "rtax-probe-init-jjj",
    "cleanup_spares_live": "rtax-probe-life-kkk",
}


def ctx(**kw) -> Context:
    base = dict(
        tokens=dict(TOK),
        paths={
            "tmp_sentinel": "/tmp/rtax-probe-1/sentinel",
            "cache_sentinel": "/c/probe-1/sentinel",
            "root_home": "/root/.rtax-probe-1/sentinel",
            "usr_local": "/usr/local/.rtax-probe-1/sentinel",
            "probe_socket": "/tmp/rtax-probe-sock-1/probe.sock",
        },
        sockets={"docker": ["/run/docker.sock"], "podman": ["/p.sock"], "libvirt": ["/l.sock"]},
        shadow_md5="0123",
        cmdline_md5="c0ffee",
        blockdevs=[("loop0", 4096, "beef"), ("vda", 0, "")],
        host_boot="B1",
        host_mntns="mnt:[1]",
        env_boot="B1",
        env_mntns="mnt:[2]",
    )
    base.update(kw)
    return Context(**base)


def verdict(name: str, output: str = "", c: Context | None = None, **kw) -> str:
    return classify(name, Outcome(output=output, **kw), c or ctx()).result


HOST_PATHS = ["/tmp/rtax-ws-probe-1a2b", "/root/.cache/rtax", "/tmp/rtax-"]
MOUNTINFO_STAGE = """== /proc/self/mountinfo
66 65 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw
67 65 254:0 /var/cache/rtax/stage-public/etc-1-2 /etc ro,nosuid,nodev,relatime - ext4 /dev/vda rw
78 65 0:50 / /workspace rw,nosuid,nodev,relatime - tmpfs tmpfs rw
== /proc/self/cgroup
0::/
== /proc/1/cmdline
sh"""
MOUNTINFO_WS = MOUNTINFO_STAGE.replace(
    "0:50 / /workspace", "254:0 /tmp/rtax-ws-probe-1a2b /workspace"
)

# (check, output, observed, expected): a passing and a failing case for every check
CASES = [
    ("tmp_sentinel", "cat: no such file", {}, BLOCKED),
    ("tmp_sentinel", "rtax-probe-tmp-aaa\n", {}, BREACHED),
    ("tmp_sentinel", "@exists=/tmp/rtax-probe-1/sentinel\ncat: Permission denied", {}, BREACHED),
    ("cache_sentinel", "", {}, BLOCKED),
    ("cache_sentinel", "rtax-probe-cache-bbb", {}, BREACHED),
    ("root_home", "No such file", {}, BLOCKED),
    ("root_home", "rtax-probe-root-ccc", {}, BREACHED),
    ("usr_local", "cat: /usr/local/.rtax-probe-1/sentinel: No such file", {}, BLOCKED),
    ("usr_local", "rtax-probe-usr-hhh", {}, BREACHED),
    ("usr_local", "@exists=/usr/local/.rtax-probe-1/sentinel", {}, BREACHED),
    ("host_paths", MOUNTINFO_STAGE, {"host_paths": HOST_PATHS}, BLOCKED),
    ("host_paths", MOUNTINFO_WS, {"host_paths": HOST_PATHS}, BREACHED),
    ("host_paths", "== /proc/self/environ\nHOME=/root/.cache/rtax/x", {"host_paths": HOST_PATHS},
     BREACHED),
    ("vsock", "socket(AF_VSOCK): [Errno 97] Address family not supported by protocol", {},
     BLOCKED),
    ("vsock", "@made\n@bound=1234", {}, BREACHED),
    ("vsock", "@made\nbind: [Errno 98] Address in use", {}, BREACHED),
    ("proc_cmdline", "/proc/cmdline: cannot read it", {}, BLOCKED),
    ("proc_cmdline", "@md5=d41d8cd98f00b204e9800998ecf8427e\n/proc/cmdline: 0 bytes", {},
     BLOCKED),  # masked: reads empty
    ("proc_cmdline", "@md5=c0ffee\n/proc/cmdline: 520 bytes", {}, BREACHED),
    ("proc_cmdline", "@md5=beef\n/proc/cmdline: 80 bytes", {}, BLOCKED),  # another kernel's
    ("process_vm", "process_vm_readv: EPERM\npidfd_open: ok\npidfd_getfd: EPERM", {}, BLOCKED),
    ("process_vm", "@read=rtax-probe-pvm-iii\nprocess_vm_readv: read 18 bytes", {}, BREACHED),
    ("process_vm", "process_vm_readv: EPERM\npidfd_getfd: took a descriptor\n@took", {},
     BREACHED),
    ("process_vm", "@read=rtax-probe-pvm-zzz", {}, BLOCKED),  # not the sibling's token
    ("etc_shadow", "/etc/shadow: cannot read it", {}, BLOCKED),
    ("etc_shadow", "@md5=9999\n/etc/shadow: readable", {}, BLOCKED),  # its own shadow
    ("etc_shadow", "@md5=0123\n/etc/shadow: readable", {}, BREACHED),
    ("docker_socket", "/run/docker.sock: not visible", {}, BLOCKED),
    ("docker_socket", "@connected=/run/docker.sock\nHTTP/1.0 200 OK", {}, BREACHED),
    ("docker_socket", "/run/docker.sock: visible\n@notool=/run/docker.sock", {}, NA),
    ("podman_socket", "/p.sock: connect: [Errno 13] Permission denied", {}, BLOCKED),
    ("podman_socket", "@connected=/p.sock\nHTTP/1.0 200 OK", {}, BREACHED),
    ("libvirt_socket", "/l.sock: not visible", {}, BLOCKED),
    ("libvirt_socket", "@connected=/l.sock", {}, BREACHED),
    ("probe_socket", "not visible", {"unix_conns": 0}, BLOCKED),
    ("probe_socket", "", {"unix_conns": 1}, BREACHED),  # the host saw it
    ("probe_socket", "answered: rtax-probe-hello-ddd", {"unix_conns": 0}, BREACHED),
    ("remount_rw", "@wrote=/etc\n@wrote=/", {"reached_host": []}, BLOCKED),
    ("remount_rw", "/root: remounted\n@wrote=/root", {"reached_host": ["/root"]}, BREACHED),
    ("block_devices", "mknod: Operation not permitted", {}, BLOCKED),
    ("block_devices", "@read=loop0:4096:beef", {}, BREACHED),
    ("block_devices", "@read=loop0:4096:cafe", {}, BLOCKED),  # its own device
    ("block_devices", "@read=vda:4096:cafe", {}, BREACHED),  # host can't read: same kernel
    ("proc_sys", "write: Read-only file system", {}, BLOCKED),
    ("proc_sys", "@wrote=/proc/sys/fs/file-max (the value it had)", {}, BREACHED),
    ("sys_write", "@nofile (no known sysfs setting is readable)", {}, NA),
    ("sys_write", "@nosysfs (no /sys inside; mounting one was refused: EPERM)", {}, BLOCKED),
    ("sys_write", "write: Read-only file system", {}, BLOCKED),
    ("sys_write", "@wrote=/sys/x", {}, BREACHED),
    ("module_load", "@errno=EPERM", {}, BLOCKED),
    ("module_load", "@errno=ENOEXEC", {}, BREACHED),
    ("module_load", "@errno=ENOSYS", {}, NA),
    ("module_load", "@notool", {}, NA),
    ("module_load", "insmod: can't insert: Operation not permitted\n@insmod", {}, BLOCKED),
    ("module_load", "insmod: can't insert: invalid module format\n@insmod", {}, BREACHED),
    ("cgroup_escape", "before: 4:memory:/rtax/env\nafter: 4:memory:/rtax/env", {}, BLOCKED),
    ("cgroup_escape", "@moved=/sys/fs/cgroup/pids/cgroup.procs", {}, BREACHED),
    ("cgroup_escape", "@writable=/sys/fs/cgroup/pids/cgroup.procs", {}, BREACHED),
    ("pids_limit", "@spawned=120", {"attempts": 384, "host_ms": 3}, HELD),
    ("pids_limit", "@spawned=384", {"attempts": 384, "host_ms": 3}, BREACHED),
    ("pids_limit", "@spawned=120", {"attempts": 384, "host_ms": None}, BREACHED),
    ("pids_limit", "", {"attempts": 384, "host_ms": 3}, NA),
    ("memory_limit", "allocating 512 MiB\nKilled\nrc 137", {"host_ms": 2}, HELD),
    ("memory_limit", "allocating 512 MiB\n@allocated=512", {"host_ms": 2}, BREACHED),
    ("memory_limit", "", {"skipped": "the host has 100 MiB free"}, NA),
    ("memory_limit", "sh: cannot create cgroup.procs", {"host_ms": 2, "limit_mib": 256}, NA),
    ("loopback_tcp", "Connection refused", {"tcp_conns": 0}, BLOCKED),
    ("loopback_tcp", "connected; received: rtax-probe-hello-ddd", {"tcp_conns": 1}, BREACHED),
    ("loopback_tcp", "@notool", {"tcp_conns": 0}, NA),
    ("host_processes", "pid 1: not visible\nprocesses visible: 3", {}, BLOCKED),
    ("host_processes", "rtax-probe-proc-eee", {}, BREACHED),
    ("host_signal", "kill -CONT 5: delivered", {"signals": 0}, BLOCKED),  # its own pid 5
    ("host_signal", "kill -CONT 5: delivered", {"signals": 1}, BREACHED),
    ("other_env", "looked in: /workspace", {}, BLOCKED),
    ("other_env", "@found=/tmp/x\nrtax-probe-mark-fff", {}, BREACHED),
    ("workspace_persists", "rtax-probe-mark-fff", {}, HELD),
    ("workspace_persists", "cat: ./.rtax-probe-mark: No such file", {}, BREACHED),
    ("fresh_env", "looked for x", {}, HELD),
    ("fresh_env", "@found=/tmp/x\nrtax-probe-fresh-ggg", {}, BREACHED),
    ("pool_reuse_clean", "CLEAN", {}, HELD),
    ("pool_reuse_clean", "LEFT file:/tmp process:/proc/12", {}, BREACHED),
    # a fresh root on the host's disk: its /usr's root is under /var/tmp/rtax-..., which
    # does not name the host's /tmp/rtax-
    ("host_paths", "102 101 254:0 /var/tmp/rtax-newcomer/r/usr /usr ro - ext4",
     {"host_paths": ["/tmp/rtax-"]}, BLOCKED),
    ("host_paths", "99 98 0:5 /tmp/rtax-ws-x /workspace rw - tmpfs",
     {"host_paths": ["/tmp/rtax-"]}, BREACHED),
    ("result_integrity", "looked", {"truth": [("false", 1, 1)]}, BLOCKED),
    ("result_integrity", "looked", {"truth": [("false", 1, "shell_lost: x")]}, BLOCKED),
    ("result_integrity", "looked", {"truth": [("false", 1, 0)]}, BREACHED),
    ("result_integrity", "@memwritable=7", {"truth": [("false", 1, 1)]}, BREACHED),
    ("result_integrity", "", {}, NA),
    ("reset_links", "@link=/tmp\n@link=/dev/shm (replaced)\nplanted",
     {"intact": True, "host": "intact"}, HELD),
    ("reset_links", "@link=/tmp\nplanted", {"intact": False, "host": "gone"}, BREACHED),
    ("reset_links", "planted", {"intact": True}, NA),  # no link could be planted
    ("init_kill", "rtax-probe-init-jjj", {"marked": True, "killed": "kill -9 1: sent"}, BLOCKED),
    ("init_kill", "cat: ./.rtax-probe-init: No such file", {"marked": True, "killed": "sent"},
     BREACHED),  # a later action ran somewhere without the marker
    ("init_kill", "", {"marked": True, "killed": "@samepidns=pid:[1]"}, BREACHED),
    ("init_kill", "rtax-probe-init-jjj", {"marked": False}, NA),
    ("init_kill", "", {"marked": True, "killed": "@nohostns"}, NA),
    ("deep_tree", "@made=/workspace:1200\n@made=/tmp:1200",
     {"host_path": "/tmp/rtax-ws-x", "left": False, "teardown_error": None}, HELD),
    ("deep_tree", "@made=/workspace:1200", {"host_path": "/tmp/rtax-ws-x", "left": True}, BREACHED),
    ("deep_tree", "@made=/workspace:1200",
     {"host_path": "/tmp/rtax-ws-x", "teardown_error": "teardown_failed: rm"}, BREACHED),
    ("deep_tree", "@made=/workspace:1200", {"host_path": "", "no_path": "a VM's disk"}, NA),
    ("deep_tree", "@made=/workspace:0", {"host_path": "/tmp/rtax-ws-x"}, NA),
    ("default_limits", "@spawned=1019", {"attempts": 2048, "host_ms": 3}, HELD),
    ("default_limits", "@spawned=2048", {"attempts": 2048, "host_ms": 3}, BREACHED),
    ("default_limits", "", {"stated_none": "pids: none applied"}, BREACHED),
    ("workspace_size", "@wrote_mib=63\n@enospc",
     {"limit_mib": 64, "host_drop_mib": 63, "host_fs": "/tmp/rtax-ws-x"}, HELD),
    ("workspace_size", "@wrote_mib=128", {"limit_mib": 64, "host_drop_mib": None}, BREACHED),
    ("workspace_size", "@wrote_mib=60\n@enospc",  # the host's disk filled: not the limit
     {"limit_mib": 64, "host_drop_mib": 128, "host_fs": "/"}, BREACHED),
    ("workspace_size", "@wrote_mib=10", {"limit_mib": 64}, NA),  # stopped, not for space
    ("workspace_size", "@wrote_mib=1\n@enospc", {}, NA),  # no size asked for
    ("assets_view", "@named\n@listed=fix.patch", {"named": "/c/attrs/fix.patch"}, BLOCKED),
    ("assets_view", "@named\n@listed=fix.patch\n@listed=attrs-repo",
     {"named": "/c/attrs/fix.patch"}, BREACHED),
    ("assets_view", "@named\n@exists=/c/probe-1/sentinel", {"named": "/c/attrs/fix.patch"},
     BREACHED),
    ("assets_view", "", {"named": "/c/attrs/fix.patch"}, NA),  # the asset is not there
    ("assets_view", "", {"why": "no prepared assets"}, NA),
    ("host_sinks", "@stream=pid 1 fd 2\n@done", {"wrote_mib": 320, "drops": {"/run": 1}},
     HELD),
    ("host_sinks", "@stream=pid 1 fd 2\n@done", {"wrote_mib": 320, "drops": {"/run": 300}},
     BREACHED),
    ("host_sinks", "@stream=pid 1 fd 2", {"wrote_mib": 320, "drops": {"/run": 0}}, NA),
    ("cleanup_spares_live", "rtax-probe-life-kkk", {"cleanup": "removed 0"}, HELD),
    ("cleanup_spares_live", "cat: ./.rtax-probe-life: No such file", {"cleanup": "removed 3"},
     BREACHED),
]  # fmt: skip


@pytest.mark.parametrize(("name", "output", "observed", "expected"), CASES)
def test_classification(name: str, output: str, observed: dict, expected: str) -> None:
    assert verdict(name, output, observed=observed) == expected


def test_every_check_has_a_passing_and_a_failing_case() -> None:
    """A check that can never come back `breached` would prove nothing."""
    for c in CHECKS:
        results = {exp for name, _, _, exp in CASES if name == c.name}
        assert c.passed in results and BREACHED in results, c.name


def test_a_failed_step_is_not_a_pass() -> None:
    for c in CHECKS:
        if c.name in FAILING_STEPS:
            continue
        assert verdict(c.name, "", error="action_timeout: slow") == NA, c.name


def test_a_lost_environment_after_init_kill_is_blocked_and_a_failed_cleanup_check_breached():
    """init_kill: a later action failing as lost is no escape; cleanup_spares_live: a live
    environment that cannot answer after the cleanup lost to it."""
    obs = {"marked": True, "killed": "kill -9 1: sent"}
    assert verdict("init_kill", "", error="substrate_lost: gone", observed=obs) == BLOCKED
    obs = {"cleanup": "removed 2"}
    v = classify("cleanup_spares_live", Outcome("", error="shell_lost: gone", observed=obs), ctx())
    assert v.result == BREACHED and "shell_lost" in v.evidence


def test_the_memory_hog_taking_the_environment_down_is_contained() -> None:
    obs = {"host_ms": 3, "limit_mib": 256}
    assert verdict("memory_limit", "", error="substrate_lost: gone", observed=obs) == HELD
    obs = {"host_ms": None, "host_error": "timed out", "limit_mib": 256}
    assert verdict("memory_limit", "", error="substrate_lost: gone", observed=obs) == BREACHED


def test_own_kernel_writes_are_not_breaches_but_file_reads_still_are() -> None:
    vm = ctx(env_boot="B2")
    assert vm.own_kernel and not vm.same_mntns
    assert verdict("proc_sys", "@wrote=/proc/sys/fs/file-max", vm) == BLOCKED
    assert verdict("module_load", "@errno=ENOEXEC", vm) == BLOCKED
    assert verdict("cgroup_escape", "@moved=/x/cgroup.procs", vm) == BLOCKED
    obs = {"attempts": 384, "host_ms": 1}
    assert verdict("pids_limit", "@spawned=384", vm, observed=obs) == HELD
    assert verdict("tmp_sentinel", "rtax-probe-tmp-aaa", vm) == BREACHED
    assert verdict("block_devices", "@read=vda:4096:cafe", vm) == BLOCKED


def test_same_mount_namespace_is_detected() -> None:
    assert ctx(env_mntns="mnt:[1]").same_mntns
    assert not ctx().same_mntns


def test_unplanted_or_absent_things_are_na_with_a_reason() -> None:
    c = ctx(paths={}, sockets={}, shadow_md5=None, blockdevs=[], tokens={})
    for name in ("tmp_sentinel", "root_home", "docker_socket", "probe_socket", "block_devices",
                 "loopback_tcp", "host_processes", "host_signal"):  # fmt: skip
        v = classify(name, Outcome(output="whatever"), c)
        assert v.result == NA and v.evidence, name
    assert verdict("etc_shadow", "@md5=0123", c) == NA  # cannot compare with the host's


def test_evidence_is_one_trimmed_line_and_never_the_shadow_hash() -> None:
    v = classify("etc_shadow", Outcome(output="@md5=0123\n/etc/shadow: readable"), ctx())
    assert v.result == BREACHED and "0123" not in v.evidence
    long = "x" * 5000 + "\nline two"
    v = classify("tmp_sentinel", Outcome(output=long), ctx())
    assert "\n" not in v.evidence and len(v.evidence) <= 400
    assert trim("a\n\n b \nc") == "a | b | c"


def test_facts_reads_at_lines_only() -> None:
    f = facts("@a=1\nplain @b=2\n@a=3\n@bare\n@k=v=w")
    assert f == {"a": ["1", "3"], "bare": [""], "k": ["v=w"]}


def test_combine_breached_anywhere_then_na_then_pass() -> None:
    assert combine([BLOCKED, BLOCKED]) == BLOCKED
    assert combine([HELD, BREACHED]) == BREACHED
    assert combine([BLOCKED, NA]) == NA
    assert combine([NA, BREACHED]) == BREACHED
    assert combine([]) == NA


def _ev(driver: str, channel: str, check: str, result: str, promised: bool = False) -> dict:
    return {
        "type": "probe",
        "host": "local",
        "driver": driver,
        "channel": channel,
        "check": check,
        "result": result,
        "evidence": f"{channel} says {result}",
        "promised": promised,
    }


def test_document_shape_and_promises() -> None:
    evs = [
        _ev("stage", "exec", "root_home", BLOCKED, True),
        _ev("stage", "shell", "root_home", BREACHED, True),
        _ev("stage", "exec", "fresh_env", HELD, True),
        _ev("stage", "shell", "fresh_env", HELD, True),
        _ev("local", "exec", "root_home", BREACHED),
    ]
    doc = build_document(evs, hosts=["local"])
    assert doc["format"] == PROBE_FORMAT and doc["hosts"] == ["local"]
    st = doc["drivers"]["stage"]
    assert list(st["checks"]) == ["root_home", "fresh_env"]  # the catalogue's order
    rh = st["checks"]["root_home"]
    assert rh["result"] == BREACHED and rh["promised"]
    assert rh["evidence"] == "[local/shell] shell says breached"
    assert [r["channel"] for r in rh["runs"]] == ["exec", "shell"]
    assert st["summary"]["broken_promises"] == ["root_home"]
    assert st["summary"]["blocked"] == 0 and st["summary"]["breached"] == 1
    assert st["summary"]["held"] == 1 and st["summary"]["promised"] == 2
    loc = doc["drivers"]["local"]
    assert loc["checks"]["root_home"]["evidence"] == "exec says breached"  # one run: no tag
    assert loc["summary"]["broken_promises"] == []  # local promised nothing


def test_a_channel_that_does_not_promise_a_check_does_not_break_it() -> None:
    """pool_reuse_clean/reset_links: promised on exec (an in-place reset), n/a on shell."""
    evs = [
        _ev("stage", "exec", "reset_links", HELD, True),
        _ev("stage", "shell", "reset_links", NA, False),
        _ev("stage", "exec", "root_home", BLOCKED, True),
        _ev("stage", "shell", "root_home", NA, True),
    ]
    st = build_document(evs)["drivers"]["stage"]
    assert st["checks"]["reset_links"]["result"] == NA  # not measured everywhere
    assert st["summary"]["promised"] == 2
    # n/a on shell (it could not be measured there) breaks nothing; blocked on exec kept it
    assert st["summary"]["broken_promises"] == []
    assert "unchecked_promises" not in st["summary"]


def test_a_promise_that_could_not_be_measured_is_na_not_broken(tmp_path) -> None:
    """`no libvirt socket on the host` read `promises kept 34/35 (broken:
    libvirt_socket)`, in the probe and in every run's report after it (the header
    carries the last probe's summary). Now: neither kept nor broken, named as n/a."""
    from rtax_tui.analysis.report import build_report
    from rtax_tui.model.probedoc import honest_summary, summary_text
    from rtax_tui.model.recording import Recording
    from rtax_tui.render.reporting import boundary_line, print_probe, text_console

    evs = [_ev("libvirt", ch, "libvirt_socket", NA, True) for ch in ("exec", "shell")] + [
        _ev("libvirt", ch, "root_home", BLOCKED, True) for ch in ("exec", "shell")
    ]
    doc = build_document(evs)
    s = doc["drivers"]["libvirt"]["summary"]
    assert s["broken_promises"] == [] and s["unchecked_promises"] == ["libvirt_socket"]
    assert summary_text(s).endswith("; promises kept 1/1 measured, 1 n/a (libvirt_socket)")
    con = text_console(200)
    print_probe(doc, con)
    printed = con.export_text()
    line = next(ln for ln in printed.splitlines() if ln.startswith("libvirt:"))
    assert "broken" not in line and line.endswith("1 n/a (libvirt_socket)"), printed
    # a summary stored by an older probe: read by today's rule wherever it is shown
    old = {**{r: 0 for r in RESULTS}, "blocked": 1, "n/a": 1, "promised": 2,
           "breached_checks": [], "broken_promises": ["libvirt_socket"]}  # fmt: skip
    b = {"probed_at": "2026-12-01T00:00:00", "summary": old,
         "checks": {"libvirt_socket": NA, "root_home": BLOCKED}}  # fmt: skip
    assert honest_summary(old, b["checks"])["broken_promises"] == []
    assert "broken" not in boundary_line("local/libvirt", b)
    # a breach stays a breach, whatever the stored summary
    assert honest_summary(old, {"libvirt_socket": BREACHED})["broken_promises"] == [
        "libvirt_socket"
    ]
    # a run after that probe records its summary by today's rule
    from rtax_tui.engine.probe import state

    last = state.save({"local/libvirt": b}, tmp_path / "last.json")
    assert state.boundary("local", "libvirt", last)["summary"]["broken_promises"] == []
    header = {"type": "run", "format": "rtax/1", "run_id": "r", "t_ns": 0,
              "hosts": {"local": {"drivers": {"libvirt": {"boundary": b}}}}}  # fmt: skip
    rep = build_report(Recording("r.jsonl", header, []))
    got = rep["run"]["boundaries"]["local/libvirt"]["summary"]
    assert got["broken_promises"] == [] and got["unchecked_promises"] == ["libvirt_socket"]


def test_summarize_counts_every_result() -> None:
    s = summarize({"a": {"result": NA}, "root_home": {"result": BLOCKED, "promised": True}})
    assert s[NA] == 1 and s[BLOCKED] == 1 and s["broken_promises"] == []


def test_matrix_from_probe_events_or_from_the_header() -> None:
    evs = [_ev("stage", "exec", "root_home", BLOCKED), _ev("stage", "shell", "root_home", NA)]
    cols = matrix({"type": "run"}, evs)
    assert cols == {"stage": {"checks": {"root_home": NA}, "note": "measured in this recording"}}
    header = {
        "hosts": {
            "local": {
                "drivers": {
                    "stage": {
                        "boundary": {
                            "probed_at": "2026-01-01T00:00:00.000+00:00",
                            "channels": ["exec"],
                            "checks": {"root_home": BREACHED},
                        }
                    },
                    "docker": {"boundary": {"status": "not probed"}},
                    "local": {"version": "x"},  # an old header: no boundary at all
                }
            }
        }
    }
    cols = matrix(header, [])
    assert cols["stage"]["checks"] == {"root_home": BREACHED}
    assert cols["stage"]["note"].startswith("probed 2026-01-01")
    assert cols["docker"] == {"checks": {}, "note": "not probed"}
    assert "local" not in cols


def test_catalogue_is_consistent() -> None:
    assert len(ALL_CHECKS) == len(CHECKS) >= 20
    for c in CHECKS:
        assert BY_NAME[c.name] is c and c.means and c.kind in ("escape", "guarantee")


def test_driver_promises_name_known_checks() -> None:
    from rtax_tui.drivers import get_driver, names

    from rtax_tui.hosts.local import LocalHost

    for name in names():
        drv = get_driver(name, LocalHost(), {})
        promised = drv.promised_checks()
        assert promised <= ALL_CHECKS, name
    local = {"workspace_persists", "workspace_size", "deep_tree", "cleanup_spares_live"}
    assert get_driver("local", LocalHost(), {}).promised_checks() == local
    # measured with the engines here (issue 19): see their `boundary`
    ws = {"workspace_size", "deep_tree"}  # a sized workspace with a host path to look at
    docker = ALL_CHECKS - {"vsock"}  # dockerd 20.10's own seccomp profile lets vsock in
    assert get_driver("docker", LocalHost(), {}).promised_checks() == docker
    # a remote engine: its workspace is the container's own layer (no size, no path)
    remote = get_driver("docker", LocalHost(), {"socket": "tcp://127.0.0.1:2375"})
    assert remote.promised_checks() == docker - ws
    # podman under its default profile narrowed to stage's policy; with a profile of the
    # user's own, what that profile lets through is not promised
    assert get_driver("podman", LocalHost(), {}).promised_checks() == ALL_CHECKS
    own = get_driver("podman", LocalHost(), {"security_opt": ["seccomp=unconfined"]})
    assert own.promised_checks() == ALL_CHECKS - {"vsock", "process_vm"}
    assert get_driver("stage", LocalHost(), {}).promised_checks() == ALL_CHECKS
    open_net = get_driver("docker", LocalHost(), {"network": "host"}).promised_checks()
    assert "loopback_tcp" not in open_net
    swx = get_driver("swerex", LocalHost(), {"deployment": "docker"}).promised_checks()
    assert not swx & ws
    for vm in ("libvirt", "microvm"):
        # a booted guest's workspace is a disk of workspace_mib; a restored one has none
        got = get_driver(vm, LocalHost(), {}).promised_checks()
        # and no asset workload runs in a guest (no cache is shared with it)
        assert got == ALL_CHECKS - {"process_vm", "default_limits", "deep_tree", "assets_view"}
        restored = get_driver(vm, LocalHost(), {"start": "restore"}).promised_checks()
        assert restored == got - {"workspace_size"}


ENV_SCRIPTS = {
    name: getattr(S, name)
    for name in (
        "IDENTIFY", "FILE_SENTINEL", "SHADOW", "UNIX_SOCKETS", "LOOPBACK_TCP", "REMOUNT",
        "BLOCK_DEVICES", "PROC_SYS", "SYS_WRITE", "MODULE", "CGROUP", "FORK_BOMB",
        "MEMORY_HOG", "PROCESSES_SEE", "PROCESSES_SIGNAL", "WRITE_MARKS", "READ_FILE",
        "OTHER_ENV", "FRESH", "HOST_PLANT", "HOST_WROTE", "HOST_CLEANUP", "VSOCK",
        "PROCESS_VM", "PROC_CMDLINE", "HOST_PATHS", "WRITE_MARK", "INIT_KILL", "DEEP_TREE",
        "WORKSPACE_FILL", "FILL_REMOVE", "HOST_FREE",
    )
}  # fmt: skip
SHELLS = [s for s in (["dash"], ["busybox", "sh"]) if shutil.which(s[0])]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("name", sorted(ENV_SCRIPTS))
def test_scripts_parse_under_dash_and_busybox(name: str, shell: list[str]) -> None:
    res = subprocess.run([*shell, "-n", "-c", ENV_SCRIPTS[name]], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "name", ["PY_UNIX", "PY_TCP", "PY_INIT_MODULE", "LISTENER", "PY_VSOCK", "PY_PROCESS_VM"]
)
def test_python_snippets_compile(name: str) -> None:
    compile(getattr(S, name), name, "exec")


def test_the_workload_names_python3_as_a_word() -> None:
    """Docker and the VMs pick their Debian image (with python3) from the steps' words."""
    import shlex

    assert "python3" in shlex.split(S.IDENTIFY)


def test_the_new_checks_rest_on_the_hosts_knowledge() -> None:
    """issue 19: a VM's vsock is its own; the host's own mount namespace shows every host
    path; a readable /proc/cmdline without the host's own to compare is not a pass."""
    vm = ctx(env_boot="B2")
    assert verdict("vsock", "@made\n@bound=1234", vm) == BLOCKED
    same = ctx(env_mntns="mnt:[1]")
    assert verdict("host_paths", "== /proc/self/mountinfo", same, observed={}) == BREACHED
    assert verdict("host_paths", MOUNTINFO_WS, observed={}) == NA  # nothing to look for
    assert verdict("proc_cmdline", "@md5=c0ffee", ctx(cmdline_md5=None)) == NA
    assert verdict("vsock", "@notool") == NA
    assert verdict("process_vm", "@notool") == NA
    # the evidence names the path and the line that showed it
    v = classify("host_paths", Outcome(MOUNTINFO_WS, observed={"host_paths": HOST_PATHS}), ctx())
    assert "/tmp/rtax-ws-probe-1a2b /workspace" in v.evidence
