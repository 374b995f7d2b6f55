"""The probe's `pool_reuse_clean` check: a planting trial, then a checking trial, on the
same environment of a real warm pool (`engine.pool`, size 1) between which it was reset.

The planting trial leaves a token in every place a trial can leave state: a file in
the workspace, in /tmp, in /dev/shm and in /dev itself, a /dev entry of the start
rebuilt as something else (`/dev/fd`, a link, made a directory), a process still
running (its command line holds the token) and one that hides (a new session,
renamed, the token only in its environment), SysV shared memory, a message queue and
a semaphore set, and, on a persistent shell, an exported variable and a changed
working directory. The checking trial looks for the token in each and prints where
it found it. The token is passed in two halves that only the scripts join, so the
checking script's own command line never holds it. After a clean reset (the
environment's init lives on; a snapshot brings its memory back) the checking trial
also tries to open the init's memory for writing, /proc/1/mem: a step that can could
have rewritten the one process every reset spares, and have it plant anything later.

The check is also differential (engine.probe.fingerprint): the pool's environment is
fingerprinted before the planting trial (as fresh as the pool made it), the planting
trial then also changes all it can of what the fingerprint sees (`ATTACK`: modes,
xattrs, special files and links, IPC objects, the IPC namespace's sysctls, message
queues, the init's limits and priority), and after the reset the fingerprint is taken
again: any difference is a breach, whatever the token search says.

Held: the checking trial ran on the same environment (the pool's event says so),
found nothing and saw the fingerprint it saw fresh. Breached: it found something, or
the fingerprint differs (the reset let the last trial's state through).
`reset_links`: held when, after the reset and the teardown, the host
directory and its file are intact (the host checks), breached when not.
n/a: the driver has no clean (or snapshot) reset for this channel, or an
environment did not start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rtax_tui.engine.pool import EnvPool, effective_reset
from rtax_tui.engine.poolspec import PoolSpec
from rtax_tui.engine.probe import fingerprint as fp
from rtax_tui.engine.probe.classify import Context, Outcome, Verdict, classify, reuse_verdict
from rtax_tui.model.checks import LINKS_CHECK
from rtax_tui.model.events import Emitter
from rtax_tui.model.spec import Cell, EnvSpec, Limits, PhaseFailure, Step, Timeouts, Workload

if TYPE_CHECKING:  # the engine sits above the drivers and the hosts (pyproject's layers)
    from rtax_tui.drivers.base import Driver, Environment
    from rtax_tui.hosts.base import Host

TIMEOUT_S = 60.0

PLANT = r"""t="$1$2"
cd /workspace 2>/dev/null || cd /
echo "$t" > "/workspace/.rtax-reuse-$t" 2>/dev/null
echo "$t" > "/tmp/.rtax-reuse-$t" 2>/dev/null
[ -d /dev/shm ] && echo "$t" > "/dev/shm/.rtax-reuse-$t" 2>/dev/null
echo "$t" > "/dev/.rtax-reuse-$t" 2>/dev/null
if [ -L /dev/fd ]; then rm -f /dev/fd 2>/dev/null && mkdir /dev/fd 2>/dev/null; fi
L=$3
if [ -n "$L" ]; then
  for d in /workspace /tmp /dev/shm; do
    [ -d "$d" ] && ln -s "$L" "$d/.rtax-reuse-link-$t" 2>/dev/null && echo "@link=$d"
  done
  b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); m=$(readlink /proc/self/ns/mnt 2>/dev/null)
  if [ "$5" != - ] && { [ "$b" != "$4" ] || [ "$m" != "$5" ]; }; then
    mv /dev/shm "/dev/.rtax-shm-$t" 2>/dev/null && ln -s "$L" /dev/shm 2>/dev/null \
      && echo "@link=/dev/shm (replaced)"
  fi
fi
sh -c "sleep 3600; : $t" </dev/null >/dev/null 2>&1 &
RTAX_REUSE_HIDDEN=$t setsid sh -c 'exec -a kworker sleep 3600' </dev/null >/dev/null 2>&1 &
command -v ipcmk >/dev/null && { ipcmk -M 4096; ipcmk -Q; ipcmk -S 1; } >/dev/null 2>&1
echo planted
"""
# a persistent shell's own state: run in that shell (no `sh -c`), after PLANT
PLANT_SHELL = "export RTAX_REUSE_{a}{b}=1; cd /tmp; echo planted-shell"

CHECK = r"""t="$1$2"
found=""
for d in /workspace /tmp /dev/shm /dev; do
  [ -e "$d/.rtax-reuse-$t" ] && found="$found file:$d"
  [ -L "$d/.rtax-reuse-link-$t" ] && found="$found link:$d"
done
[ -L /dev/shm ] && found="$found dev:/dev/shm"
[ -e "/dev/.rtax-shm-$t" ] && found="$found dev:/dev/.rtax-shm"
[ -d /dev/fd ] && [ ! -L /dev/fd ] && found="$found dev:/dev/fd"
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) $(tr '\0' ' ' < "$p/environ" 2>/dev/null)" in
    *"$t"*) found="$found process:$p";;
  esac
done
if command -v ipcs >/dev/null; then
  n=$(ipcs 2>/dev/null | grep -c '^0x')
  [ "$n" -gt 0 ] && found="$found ipc:$n"
fi
case "$(env)" in *"RTAX_REUSE_$t"*) found="$found env:RTAX_REUSE";; esac
[ "$PWD" = /tmp ] && found="$found cwd:/tmp"
if [ "$3" = clean ] && (exec 3<>/proc/1/mem) 2>/dev/null; then
  found="$found init-memory:/proc/1/mem"
fi
if [ -n "$found" ]; then echo "LEFT$found"; else echo CLEAN; fi
"""

# On the host: the links' target directory, a real directory still holding its file.
HOST_LINKS = r"""d=$1
if [ -L "$d" ]; then echo "a link now"
elif [ -d "$d" ]; then cat -- "$d/keep" 2>&1
else echo "gone"; fi
"""


def in_place_reset(driver: Driver, channel: str) -> tuple[str | None, str]:
    """The driver's in-place reset for `channel` (clean, else snapshot), or None and why."""
    got = driver.pool_resets(channel)
    for reset in ("clean", "snapshot"):
        if got.get(reset) is None:
            return reset, ""
    return None, f"no in-place reset: clean: {got.get('clean')}; snapshot: {got.get('snapshot')}"


@dataclass(frozen=True)
class LinksTarget:
    """The host directory (holding `keep` with `token`) the planting trial links to,
    and the host's boot_id and mount namespace (no /dev/shm is moved in the host's)."""

    path: str
    token: str
    host_boot: str = ""
    host_mntns: str = ""


@dataclass(frozen=True)
class ReuseResult:
    result: str  # "held", "breached", "n/a"
    evidence: str
    links: Verdict | None = None  # `reset_links`, when a LinksTarget was given
    # the fingerprints: fresh, after the planting trial, after the reset (engine.probe
    # .fingerprint); empty where the environment did not get that far
    fresh: tuple[str, ...] = ()
    attacked: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


def _steps(
    channel: str, links: LinksTarget | None, reset: str = "clean"
) -> tuple[Step, Step, list[Step]]:
    a, b = os.urandom(4).hex(), os.urandom(4).hex()
    ln = (links.path, links.host_boot or "-", links.host_mntns or "-") if links else ("", "", "")
    plant = Step(("sh", "-c", PLANT, "plant", a, b, *ln), timeout_s=TIMEOUT_S)
    check = Step(("sh", "-c", CHECK, "check", a, b, reset), timeout_s=TIMEOUT_S)
    extra = [Step(("sh", "-c", fp.ATTACK + "\necho planted"), timeout_s=TIMEOUT_S)]
    if channel == "shell":  # the shell's own variables and cwd: the framed shell runs argv
        extra.append(Step(("eval", PLANT_SHELL.format(a=a, b=b)), timeout_s=TIMEOUT_S))
    return plant, check, extra


FINGERPRINT_STEP = Step(("sh", "-c", fp.FINGERPRINT), timeout_s=TIMEOUT_S)


async def _fingerprint(env: Environment) -> list[str]:
    res = await env.action(FINGERPRINT_STEP, TIMEOUT_S)
    return fp.parse(res.output.decode(errors="replace"))


async def links_intact(host: Host, links: LinksTarget) -> tuple[bool, str]:
    """On the host: is the directory still a directory, its file still the token?"""
    res = await host.run(["sh", "-c", HOST_LINKS, "rtax-probe", links.path], timeout=TIMEOUT_S)
    said = res.stdout.decode(errors="replace").strip()
    if links.token in said:
        return True, f"the host's {links.path}/keep is intact"
    return False, f"the host's {links.path}: {said or 'gone'}"


def _links_verdict(links: LinksTarget, planted: str, intact: bool, said: str) -> Verdict:
    out = Outcome(output=planted, observed={"intact": intact, "host": said})
    return classify(LINKS_CHECK, out, Context())


@dataclass
class _Planting:
    """How far the planting trial got: `tried` once its first step was sent, `planted`
    what its steps printed (their `@link=` lines)."""

    tried: bool = False
    planted: str = ""


async def check_reuse(
    driver: Driver,
    host: str,
    channel: str,
    reset: str = "clean",
    limits: Limits | None = None,
    links: LinksTarget | None = None,
) -> ReuseResult:
    """Plant, release, reset, acquire the same environment, look (see the docstring);
    with `links`, then (after the pool's teardown) look on the host at its directory.

    The host looks whenever the planting trial was sent its first step, whatever came
    after: a trial that broke the links' target and then failed, hung or printed no
    `planted` made the reuse check n/a, and the host's directory is what decides
    `reset_links` (red team 2026-12-06: it was looked at only after a whole planting)."""
    state = _Planting()
    try:
        got = await _check_reuse(driver, host, channel, reset, limits, links, state)
    except Exception as exc:
        if links is None or not state.tried:
            raise
        intact, said = await links_intact(driver.host, links)
        lv = _links_verdict(links, state.planted, intact, said)
        why = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return ReuseResult("n/a", f"the pooled environment failed: {why}", lv)
    if links is None or not state.tried:
        return got
    intact, said = await links_intact(driver.host, links)
    return replace(got, links=_links_verdict(links, state.planted, intact, said))


async def _check_reuse(
    driver: Driver,
    host: str,
    channel: str,
    reset: str,
    limits: Limits | None,
    links: LinksTarget | None,
    state: _Planting,
) -> ReuseResult:
    got, why = effective_reset(driver, channel, reset)
    if got != reset:
        return ReuseResult("n/a", why or "")
    plant, check, extra = _steps(channel, links, reset)
    spec = EnvSpec(
        cell=Cell(host, driver.name, "probe-reuse", channel, "pool"),
        workload=Workload("probe-reuse", (plant, *extra, check)),
        limits=limits or Limits(),
        label=f"reuse-{os.urandom(3).hex()}",
    )
    pool_events: list[dict[str, Any]] = []
    pool = EnvPool(
        spec.cell,
        driver,
        spec,
        PoolSpec(size=1, reset=reset, refill="eager"),
        Timeouts(create=TIMEOUT_S, ready=TIMEOUT_S, teardown=TIMEOUT_S),
        Emitter([pool_events.append]),
    )
    pool.start()
    try:
        try:
            pe, _ = await pool.acquire()
        except PhaseFailure as exc:
            return ReuseResult("n/a", f"the environment did not start: {exc.message}")
        first = pe.n
        healthy = True
        try:
            fresh = await _fingerprint(pe.env)
            if not fp.complete(fresh):
                return ReuseResult("n/a", f"no fingerprint: {' | '.join(fresh[-3:])}")
            for step in (plant, *extra):
                state.tried = True
                res = await pe.env.action(step, TIMEOUT_S)
                state.planted += res.output.decode(errors="replace")
                if b"planted" not in res.output:
                    return ReuseResult(
                        "n/a", f"the planting trial failed: rc {res.rc} {res.output[-200:]!r}"
                    )
            attacked = await _fingerprint(pe.env)
        except Exception:
            healthy = False
            raise
        finally:
            pool.release(pe, healthy)
        try:
            pe, _ = await pool.acquire()
        except PhaseFailure as exc:
            return ReuseResult("n/a", f"no environment after the reset: {exc.message}")
        try:
            if pe.n != first:
                resets = [e for e in pool_events if e["op"] == "reset"]
                why = resets[-1]["error"] if resets else "no reset ran"
                return ReuseResult("n/a", f"the pool did not hand the same environment back: {why}")
            res = await pe.env.action(check, TIMEOUT_S)
            after = await _fingerprint(pe.env)
        finally:
            pool.release(pe, True)
    finally:
        await pool.close()
    v = reuse_verdict(res.output.decode(errors="replace").strip())
    fps: dict[str, Any] = {
        "fresh": tuple(fresh),
        "attacked": tuple(attacked),
        "after": tuple(after),
    }
    diff = fp.differences(fresh, after)
    if diff:
        said = f"{v.evidence}; " if v.result == "breached" else ""
        evidence = (
            said + "the fingerprint after the reset is not the fresh one's: " + "; ".join(diff)
        )
        return ReuseResult("breached", f"after a {reset} reset: {evidence}", **fps)
    if v.result == "held" and not fp.complete(after):
        return ReuseResult("n/a", f"no fingerprint after the reset: {after[-3:]}", **fps)
    return ReuseResult(v.result, f"after a {reset} reset: {v.evidence}", **fps)
