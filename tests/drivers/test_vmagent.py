"""The VM guest agent against hostile exec steps, in real guests (TCG here) of both VM
drivers (issue 19): each exec step is uid 1000, the agent that reports its status is
root, so a step that attacks the agent, its output file or a later step still has its
real status recorded. The shell channel's steps stay the guest's root (its
`Driver.integrity` says so)."""

from __future__ import annotations

import asyncio
import os

import pytest

from rtax_tui.model.spec import Step, Workload
from tests.vmtools import ensure_guest, nothing_left, vm_driver, vm_spec

pytestmark = pytest.mark.slow
LABEL = f"pyvmag{os.getpid()}{os.urandom(2).hex()}"
DRIVERS = ("microvm", "libvirt")

# Each line that achieves its attack prints BREACH; none may. Then a fake trailer (the
# step does not know the environment's mark: it guesses) and a failure.
ATTACKS = r"""
b() { echo "BREACH $1"; }
for a in /agent /.rtax/agent /.rtax/busybox /bin/busybox; do
  [ -e "$a" ] || continue
  (echo x >>"$a") 2>/dev/null && b "write $a"
  mv "$a" "$a.old" 2>/dev/null && b "move $a"
done
kill -9 1 2>/dev/null && b kill-agent
kill -STOP 1 2>/dev/null && b stop-agent
ls /run/rtax >/dev/null 2>&1 && b list-run-rtax
(echo x >/run/rtax/out) 2>/dev/null && b write-run-rtax
(exec 4<>/proc/1/mem) 2>/dev/null && b agent-mem
(exec 4<>/proc/$PPID/mem) 2>/dev/null && b parent-mem
[ -e /proc/$$/fd/3 ] && b port-fd
for p in /dev/vport*; do (exec 4<>"$p") 2>/dev/null && b "open $p"; done
(echo 0 >/proc/sys/kernel/yama/ptrace_scope) 2>/dev/null && b yama
printf '\n__RTAX_0123456789abcdef__ 1 0 0\n'
exit 3
"""


@pytest.fixture(scope="module", autouse=True)
def guest(vm_guest):  # conftest: the guest built
    g = ensure_guest(root=True)
    yield g
    assert nothing_left(LABEL) == ([], [])


def sh(script: str) -> Step:
    return Step(("sh", "-c", script))


async def _boot(name: str, channel: str, workload: Workload | None = None, src=None):
    env = vm_driver(name).environment(vm_spec(name, LABEL, channel, workload, src))
    try:
        await asyncio.wait_for(env.create(), 120)
        await asyncio.wait_for(env.ready(), 180)
    except BaseException:
        await env.teardown()
        raise
    return env


def _needs(name: str, request) -> None:
    if name == "libvirt":
        request.getfixturevalue("libvirtd")  # conftest: libvirtd answering


def test_integrity_is_stated_on_exec_only():
    for name in DRIVERS:
        drv = vm_driver(name)
        assert drv.integrity("exec") is None
        why = drv.integrity("shell")
        assert why is not None and "root" in why


@pytest.mark.parametrize("name", DRIVERS)
def test_exec_steps_are_uid_1000_and_cannot_forge_their_status(name, request, tmp_path):
    """The attacks of ATTACKS all fail and `exit 3` is recorded 3; a process left by one
    step can neither write a later one's memory nor its output; the workspace is the
    step's, not what its symlinks point to (the agent chowns it with -h)."""
    _needs(name, request)
    src = tmp_path / "ws"
    src.mkdir()
    (src / "f").write_text("from host\n")
    os.symlink("/agent", src / "link")  # the initramfs agent, root's

    async def run():
        env = await _boot(name, "exec", src=str(src))
        try:

            async def act(script: str) -> tuple[int, bytes]:
                r = await env.action(sh(script), 60)
                return r.rc, r.output

            rc, out = await act(
                "id -u; id -g; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"
            )
            assert (rc, out) == (
                0,
                b"1000\n1000\n1000\nCapEff:\t" + b"0" * 16 + b"\nNoNewPrivs:\t1\n",
            )
            rc, out = await act(ATTACKS)
            assert b"BREACH" not in out, out
            assert rc == 3, out
            assert out == b"\n__RTAX_0123456789abcdef__ 1 0 0\n"  # printed, not taken
            assert (await act("false"))[0] == 1  # the agent still serves, unchanged
            assert (await act("true")) == (0, b"")
            # a process left running by a step, then a later step: neither can write the
            # other's memory (same uid: yama's ptrace_scope 1)
            rc, out = await act("sleep 300 >/dev/null 2>&1 & echo $!")
            left = int(out)
            script = f"cat /proc/sys/kernel/yama/ptrace_scope; grep ^Uid /proc/{left}/status\n"
            script += f"(exec 4<>/proc/{left}/mem) 2>/dev/null && echo BREACH; exit 3"
            assert await act(script) == (3, b"1\nUid:\t1000\t1000\t1000\t1000\n")
            # a step's child that outlives it still holds its output file: not the next's
            assert await act("(sleep 1; echo LATE) & echo now") == (0, b"now\n")
            assert await act("(sleep 1; echo LATE) &") == (0, b"")  # its file not removed
            assert await act("sleep 3; echo next") == (0, b"next\n")
            # the workspace: the step's to write; a symlink in it changed nothing outside
            rc, out = await act("cat f; echo new >>f && echo made >g && stat -c '%u %g' f g .")
            assert (rc, out) == (0, b"from host\n1000 1000\n1000 1000\n1000 1000\n"), out
            rc, out = await act("stat -c %u /agent; echo x >>link")
            assert rc != 0 and out.startswith(b"0\n"), out
        finally:
            await env.teardown()

    asyncio.run(run())
    assert nothing_left(LABEL) == ([], [])


def test_exec_on_the_root_disk_cannot_reach_the_agent():
    """On the Debian root disk (microvm): the agent is /.rtax/agent, root's, and the
    attacks fail there too; python3 runs as uid 1000 with no_new_privs (the disk's
    setuid programs give no root back)."""
    w = Workload("t1ish", (Step(("python3", "-c", "1")),))
    status = (
        "import os; print(os.getuid(), open('/proc/self/status').read().count('NoNewPrivs:\\t1'))"
    )

    async def run():
        env = await _boot("microvm", "exec", w)
        try:
            r = await env.action(sh(ATTACKS), 60)
            assert b"BREACH" not in r.output and r.rc == 3, r.output
            r = await env.action(sh("stat -c %u /.rtax/agent /.rtax"), 60)
            assert (r.rc, r.output) == (0, b"0\n0\n")
            r = await env.action(Step(("python3", "-c", status)), 60)
            assert (r.rc, r.output) == (0, b"1000 1\n")
        finally:
            await env.teardown()

    asyncio.run(run())


def test_shell_channel_steps_are_the_guest_s_root():
    """Why `integrity("shell")` is not None: the agent's own shell runs them."""

    async def run():
        env = await _boot("microvm", "shell")
        try:
            r = await env.action(Step(("id", "-u")), 60)
            assert (r.rc, r.output) == (0, b"0\n")
        finally:
            await env.teardown()

    asyncio.run(run())
