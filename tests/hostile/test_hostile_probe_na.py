"""Red team of issue 39's n/a rule (a promised check that could not be measured is
neither kept nor broken): the attacks a workload that read rtax's code would make to
turn a breach into an n/a, now that an n/a no longer counts as a broken promise.

Where the environment's own output is the only evidence (a sentinel's token, a fork
bomb's count), the environment could always hide a breach by printing nothing: an n/a
is no worse than the `blocked` it could print. Where the host sees the outcome itself
(its listener's connections and signals, a file that appeared on the host, a workspace
left after the teardown, the host's free space, a links target changed), that sight
must decide, whatever the step then did: fail, hang past its timeout, stop reporting,
or print `@notool`.
"""

from __future__ import annotations

from typing import Any

import pytest

from rtax_tui.engine.probe.classify import Context, Outcome, classify
from rtax_tui.model.checks import BREACHED, NA
from rtax_tui.model.probedoc import build_document

TOKENS = {
    "probe_socket": "rtax-probe-hello-ddd",
    "loopback_tcp": "rtax-probe-hello-ddd",
    "host_processes": "rtax-probe-proc-eee",
    "process_vm": "rtax-probe-pvm-iii",
}


def _ctx() -> Context:
    return Context(
        tokens=dict(TOKENS),
        paths={"probe_socket": "/tmp/rtax-probe-sock-1/probe.sock"},
        host_boot="B1",
        host_mntns="mnt:[1]",
        env_boot="B1",
        env_mntns="mnt:[2]",
    )


TIMEOUT = "action_timeout: the step did not finish in 30s"

# (check, what the step printed, what the host observed): each a breach the host saw
HOST_SEEN = [
    ("probe_socket", "", {"unix_conns": 1}),
    ("loopback_tcp", "", {"tcp_conns": 2}),
    ("host_signal", "", {"signals": 1}),
    ("remount_rw", "", {"reached_host": ["/var/tmp"]}),
    ("deep_tree", "", {"host_path": "/tmp/rtax-ws-1", "left": True}),
    ("deep_tree", "", {"host_path": "/tmp/rtax-ws-1", "teardown_error": "rm: busy"}),
    ("workspace_size", "", {"limit_mib": 64, "host_drop_mib": 500, "host_fs": "/tmp"}),
    ("host_sinks", "", {"wrote_mib": 320, "drops": {"/var/log": 300}}),
]


@pytest.mark.parametrize(("name", "output", "observed"), HOST_SEEN)
def test_a_breach_the_host_saw_stays_a_breach_when_the_step_then_hangs(
    name: str, output: str, observed: dict
) -> None:
    """Connect to the host's socket (or write a host file, or fill the host's disk),
    then hang past the step's timeout: the step's error said n/a, and an n/a of a
    promised check is no longer a broken promise."""
    v = classify(name, Outcome(output, error=TIMEOUT, observed=observed), _ctx())
    assert v.result == BREACHED, v
    assert "action_timeout" in v.evidence  # the failure is told beside the breach


@pytest.mark.parametrize(
    ("name", "output", "observed"),
    [
        # made its deep tree, printed no `@made` line: the host still has the workspace
        ("deep_tree", "", {"host_path": "/tmp/rtax-ws-1", "left": True}),
        # filled the host's disk, then printed no `@wrote_mib`
        ("workspace_size", "", {"limit_mib": 64, "host_drop_mib": 500, "host_fs": "/tmp"}),
        # wrote its streams into a host log, then no `@done`
        ("host_sinks", "", {"wrote_mib": 320, "drops": {"/var/log": 300}}),
        # the planting trial printed no `@link=` line: the host's directory is gone
        ("reset_links", "", {"intact": False, "host": "the host's /tmp/x: gone"}),
        # a connection the listener saw, and a `@notool` line printed beside it
        ("probe_socket", "@notool", {"unix_conns": 1}),
        ("loopback_tcp", "@notool", {"tcp_conns": 1}),
    ],
)
def test_a_breach_the_host_saw_stays_a_breach_when_the_step_stops_reporting(
    name: str, output: str, observed: dict
) -> None:
    v = classify(name, Outcome(output, rc=0, observed=observed), _ctx())
    assert v.result == BREACHED, v


def test_a_token_only_a_real_read_prints_beats_a_notool_line() -> None:
    """process_vm read another process's memory (its random token) and printed
    `@notool` too: the token is proof, the `@notool` a word."""
    out = "@notool\n@read=rtax-probe-pvm-iii"
    assert classify("process_vm", Outcome(out, rc=0), _ctx()).result == BREACHED


@pytest.mark.parametrize(
    ("name", "output"),
    [
        ("vsock", "@made\n@bound=1234\n@notool"),
        ("module_load", "@errno=ENOEXEC\n@notool"),
        ("proc_sys", "@wrote=/proc/sys/fs/file-max\n@nofile"),
        ("sys_write", "@wrote=/sys/kernel/mm/x\n@nofile"),
    ],
)
def test_what_a_step_says_it_did_beats_what_it_says_it_lacked(name: str, output: str) -> None:
    """A step that says it made a vsock socket, reached the module loader or wrote a
    kernel setting, and also that it had no tool or no file: the breach it reported is
    not undone by the n/a beside it."""
    assert classify(name, Outcome(output, rc=0), _ctx()).result == BREACHED


def test_the_promise_a_hidden_breach_broke_is_counted_broken() -> None:
    """The whole way to the summary: the probe socket breached (the listener saw it),
    then the step hung; `promises kept` must not read 1/1 measured."""
    v = classify("probe_socket", Outcome("", error=TIMEOUT, observed={"unix_conns": 1}), _ctx())
    ev = {"type": "probe", "host": "local", "driver": "stage", "channel": "exec",
          "check": "probe_socket", "result": v.result, "evidence": v.evidence,
          "promised": True}  # fmt: skip
    s = build_document([ev])["drivers"]["stage"]["summary"]
    assert s["broken_promises"] == ["probe_socket"] and "unchecked_promises" not in s


def test_a_step_that_failed_with_nothing_seen_is_still_na() -> None:
    """The rule is unchanged where the host saw nothing: a failed step measured nothing."""
    for name, _, _ in HOST_SEEN:
        assert classify(name, Outcome("", error=TIMEOUT), _ctx()).result == NA, name


# -- reset_links: the host's directory is looked at whatever the planting trial did --


def _links_target(tmp_path):  # type: ignore[no-untyped-def]
    from rtax_tui.engine.probe.reuse import LinksTarget

    d = tmp_path / "links-target"
    d.mkdir()
    (d / "keep").write_text("rtax-probe-links-token\n")
    return d, LinksTarget(str(d), "rtax-probe-links-token")


def _breaking_stage(target: str, how: str):  # type: ignore[no-untyped-def]
    """A stage whose planting trial reaches the host's links target (a test double of a
    breach: stage keeps it out) and then says nothing (`quiet`) or hangs (`hang`)."""
    import shutil

    from rtax_tui.drivers.stage import StageDriver, StageEnvironment

    from rtax_tui.model.spec import ActionResult, PhaseFailure

    class Breaking(StageEnvironment):
        async def action(self, step, timeout):  # type: ignore[no-untyped-def]
            if step.argv[:2] == ("sh", "-c") and step.argv[3:4] == ("plant",):
                shutil.rmtree(target)  # what a breach would do to the host's directory
                if how == "hang":
                    raise PhaseFailure("action_timeout", "the step did not finish in 30s")
                return ActionResult(rc=0, output=b"")
            return await super().action(step, timeout)

    class BreakingStage(StageDriver):
        def environment(self, spec, sub=None):  # type: ignore[no-untyped-def]
            return Breaking(self, spec, sub)

    return BreakingStage


@pytest.mark.parametrize("how", ["quiet", "hang"])
def test_a_planting_trial_that_broke_the_links_target_and_then_failed_is_a_breach(
    tmp_path, how: str
) -> None:  # type: ignore[no-untyped-def]
    """It made the reuse check n/a (no `planted`, or an exception out of the pool), and
    the host's directory was never looked at: `reset_links` read n/a, not broken."""
    import asyncio
    import os

    from rtax_tui.engine.probe.reuse import check_reuse
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.spec import Limits

    if os.geteuid() != 0:
        pytest.skip("stage needs root and cgroups")
    d, links = _links_target(tmp_path)
    drv = _breaking_stage(str(d), how)(LocalHost(), {})
    lim = Limits(cpus=1, memory_mib=256, pids=128)
    got = asyncio.run(check_reuse(drv, "local", "exec", "clean", lim, links))
    assert got.result == NA, got
    assert got.links is not None and got.links.result == BREACHED, got
    assert "gone" in got.links.evidence


# -- a stored summary (a recording's header): its writer's words ------------------------


def test_a_crafted_header_summary_reads_one_line_and_counts_each_name_once() -> None:
    """`unchecked_promises` is new in a header: a name listed twice, or both broken and
    unchecked, read `promises kept -2/0 measured`; a name's newline began a line of its
    own in `rtax report` (a forged `promises kept 9/9` under the real one)."""
    from rtax_tui.render.reporting import boundary_line

    forged = "a\n  local/stage: probed now: promises kept 9/9"
    s = {"blocked": 3, "n/a": 2, "promised": 3, "breached_checks": [forged],
         "broken_promises": ["x", "x"],
         "unchecked_promises": ["x", "y", "y\x1b]0;t\x07"]}  # fmt: skip
    line = boundary_line("local/stage\nfake", {"probed_at": "t\n", "summary": s, "checks": {}})
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line, line
    assert "promises kept 0/1 measured, 2 n/a (y, y\\x1b]0;t\\x07)" in line, line


# -- the probe's host process killed from inside ---------------------------------------


def _run_a(doings: dict[str, Any], says: dict[str, Any] | None = None) -> dict[str, str]:
    """Environment A's steps (CellProbe._run_a) with the real plant of this host (its
    sentinels, its listener): each step prints nothing, and the step of each check named
    in `doings` first does what its function does to the plant (a test double of what
    a step that reached the host could do); the step of each check in `says` prints what
    its function returns, given the cell (its random names). Verdicts, `result: evidence`."""
    import asyncio

    from rtax_tui.engine.probe import host as probe_host
    from rtax_tui.engine.probe.run import CellProbe
    from rtax_tui.hosts.local import LocalHost
    from rtax_tui.model.spec import ActionResult, Limits

    class Env:
        def __init__(self, by_argv: dict[tuple[str, ...], Any], plant: Any, said: Any) -> None:
            self.by_argv, self.plant, self.said = by_argv, plant, said

        async def action(self, step, timeout):  # type: ignore[no-untyped-def]
            if step.argv in self.by_argv:
                self.by_argv[step.argv](self.plant)
            return ActionResult(rc=0, output=self.said.get(step.argv, b""))

    async def go() -> dict[str, str]:
        h = LocalHost()
        await h.connect()
        plant = await probe_host.plant(h)
        try:
            assert plant.listener is not None, plant.problems
            cell = CellProbe(None, "local", "exec", plant, limits=Limits.none())  # type: ignore[arg-type]
            said = {cell.steps[k].argv: f(cell) for k, f in (says or {}).items()}
            env = Env({cell.steps[k].argv: f for k, f in doings.items()}, plant, said)
            got: dict[str, str] = {}

            def decide(name: str, v) -> None:  # type: ignore[no-untyped-def]
                got[name] = f"{v.result}: {v.evidence}"

            await cell._run_a(env, decide)  # type: ignore[arg-type]
            return got
        finally:
            await probe_host.cleanup(plant)
            await h.close()

    return asyncio.run(go())


def test_a_step_that_removes_what_rtax_planted_on_the_host_breaks_its_check() -> None:
    """The sentinel's step removes the host's sentinel, the socket's step the host's
    socket, and each prints nothing: `not visible`, `no connection` (blocked) before."""
    import os

    got = _run_a(
        {
            "tmp_sentinel": lambda p: os.unlink(p.paths["tmp_sentinel"]),
            "probe_socket": lambda p: os.unlink(p.paths["probe_socket"]),
        }
    )
    for name in ("tmp_sentinel", "probe_socket"):
        assert got[name].startswith(BREACHED) and "removed from inside" in got[name], got[name]
    assert got["root_home"].startswith("blocked"), got["root_home"]  # the rest as it was


def test_a_step_that_kills_the_probes_host_process_breaks_host_signal() -> None:
    """A step that can signal the host's processes sends SIGKILL to the probe's host
    process (the listener) instead of the SIGCONT it would log: no connection and no
    signal was ever logged after, and host_signal read `blocked` (no signal received).
    Through environment A's steps with the real listener on this host: the step after
    which the listener was found dead is told, host_signal is broken, and the listener's
    other checks are n/a (nothing could reach it), never `blocked`."""
    import os
    import signal

    got = _run_a({"probe_socket": lambda p: os.kill(p.listener.pid, signal.SIGKILL)})
    assert got["host_signal"].startswith(BREACHED), got["host_signal"]
    assert "dead after the" in got["host_signal"]
    for name in ("loopback_tcp", "host_processes"):
        assert got[name].startswith(NA), (name, got[name])


# -- output that ended the probe -----------------------------------------------------

ODD_DIGITS = ("²", "٣", "𝟗", "1²", "-1", "1e3", " 7", "")


@pytest.mark.parametrize(
    "fact", ["spawned", "allocated", "wrote_mib", "read=loop0:{}:beef", "made", "errno"]
)
def test_no_step_output_ends_the_probe(fact: str) -> None:
    """`str.isdigit` took `²` and `int` refused it: a fork bomb that printed
    `@spawned=²` raised out of `classify`, the probe stopped, and the last probe's
    summary (`kept 37/37`) stayed in every later run's header."""
    from rtax_tui.model.checks import CHECKS

    c = _ctx()
    obs = {"attempts": 384, "host_ms": 1, "limit_mib": 64, "host_path": "/tmp/w",
           "host_drop_mib": 1, "wrote_mib": 320, "drops": {"/var/log": 0}}  # fmt: skip
    for odd in ODD_DIGITS:
        line = f"@{fact.format(odd)}" if "{}" in fact else f"@{fact}={odd}"
        for check in CHECKS:
            v = classify(check.name, Outcome(f"allocating\n{line}\n@done", rc=0, observed=obs), c)
            assert v.result in ("blocked", "held", BREACHED, NA), (check.name, line)


def test_remount_rw_looks_only_where_rtax_named_and_a_forged_list_does_not_end_it(
    tmp_path,
) -> None:
    """The step's `@wrote=` lines chose directories on the host where rtax, as root,
    removed a file of the check's name: a forged line of 200 KB ended the probe (E2BIG)
    before it forgot what its reaper holds, and a line naming a directory of the
    environment's choosing had rtax remove a file there. Only REMOUNT_DIRS are looked at."""
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    names: list[str] = []

    def forged(cell: Any) -> bytes:
        names.append(cell.n.rw)
        (chosen / cell.n.rw).write_text("not rtax's to remove")
        return f"@wrote=/{'a' * 200_000}\n@wrote={chosen}\n".encode()

    got = _run_a({}, {"remount_rw": forged})
    assert got["remount_rw"].split(":")[0] in ("blocked", NA), got["remount_rw"]
    assert (chosen / names[0]).read_text() == "not rtax's to remove"
