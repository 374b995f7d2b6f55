"""Replay as a workload: `[workloads.NAME] trajectory = "PATH"` in a profile.

A trajectory's replay plan (`replay.py`) becomes ordinary workload steps, so that each
is timed by the engine like any other action, through the cell's own channel:
- a shell step runs as `timeout -s KILL T SHELL -c COMMAND` in the workspace (in the
  subdirectory its recorded cwd names under the trajectory's root). T is the profile's
  action timeout: a command that does not end (a server, a prompt waiting for input) is
  killed inside the environment, so the channel stays usable on every driver (a shell
  or a VM agent that the engine had to abandon could not run the next step), the step
  is recorded as timed out, and the replay goes on. The engine's own deadline for the
  step is T + KILL_GRACE_S: it fires only when the environment stops answering;
- a write is `printf %s` of the content (in argv chunks) into the file, its directory
  made first; a replacement reads the file, replaces in rtax, and writes it back (two
  round trips, one action); a read is `cat` of the file;
- paths are mapped into the workspace: relative ones as they are, absolute ones under
  the trajectory's root (its first recorded cwd, else the common directory of the
  files it names) relative to it; any other (outside the root, or climbing out with
  `..`) is not replayed, and counted with the skipped steps: a replay never writes
  outside its workspace, even on `local`.

Replayed steps expect nothing (a replay measures cost): the trial stays valid whatever
they return; how many steps with a recorded exit code got the same one is the cell's
fidelity (`model/fidelity.py`), from the `expect_rc` that each such step adds to its event.
"""

from __future__ import annotations

import os
import posixpath
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rtax_tui.engine.traj import find_trajectories, read_trajectories
from rtax_tui.engine.traj.model import Trajectory
from rtax_tui.engine.traj.replay import ReplayAction, ReplayPlan, replay_plan
from rtax_tui.model.spec import (
    ActionResult,
    ReplaySource,
    RtaxError,
    Step,
    StepTarget,
    Workload,
)

KILL_GRACE_S = 10.0  # the engine's deadline past the in-environment kill
# `timeout`'s own status, a SIGKILLed command as a shell says it (128 + 9), and as a
# process's parent sees it (-9: the exec channel of `local`, a host's own subprocess)
TIMED_OUT_RCS = (124, 137, -9)
CHUNK_CHARS = 16384  # argv pieces of a write: 4 bytes a char at most, under 128 KiB each
# The keys of a replay table (`[workloads.NAME]` with `trajectory`).
REPLAY_KEYS: dict[str, tuple[type, ...]] = {
    "trajectory": (str,),
    "repo": (str,),
    "commit": (str,),
    "project": (str,),
    "index": (str,),
    "at_root": (bool,),
    "allow_unisolated": (bool,),
    "description": (str,),
}
_WRITE_SH = 'p=$1; shift; mkdir -p -- "$(dirname -- "$p")" && printf %s "$@" > "$p"'
_CD_SH = 'cd -- "$1" 2>/dev/null; shift; eval "$1"'


class ReplayError(RtaxError):
    """A bad replay table: `FILE:LINE: workloads.NAME.KEY: what` (exit status 2)."""


@dataclass(frozen=True)
class ReplayStep(Step):
    """One replayed step: `op` is `shell`, `write`, `replace` or `read` (see the module
    docstring); `recorded_rc` the trajectory's exit code (None: none recorded)."""

    op: str = "shell"
    recorded_rc: int | None = None
    kill_s: float = 0.0  # the in-environment kill of a shell step (0: none)
    path: str = ""
    old: str = ""
    new: str = ""
    replace_all: bool = False

    def matches(self, rc: int, output: bytes) -> bool:
        return True  # a replay expects nothing; fidelity is counted apart

    def observed(self, rc: int | None, dur_ns: int, remote_ns: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.recorded_rc is not None:
            out["expect_rc"] = self.recorded_rc
        # the kill is timed by the environment's clock: a VM's may run apart from ours
        took = max(dur_ns, remote_ns or 0)
        if self.kill_s > 0 and rc in TIMED_OUT_RCS and took >= int(self.kill_s * 1e9):
            out["timed_out"] = True
        return out

    async def perform(self, env: StepTarget, timeout: float | None) -> ActionResult:
        if self.op != "replace":
            return await super().perform(env, timeout)
        got: ActionResult = await env.action(Step(("cat", "--", self.path)), timeout)
        if got.rc != 0:
            return got
        if got.dropped:  # only its first OUTPUT_LIMIT bytes were kept: writing them back
            # would cut the file short
            return ActionResult(
                1, f"{self.path}: larger than rtax keeps of an action's output\n".encode()
            )
        try:
            text = got.output.decode()
        except UnicodeDecodeError:
            return ActionResult(1, f"{self.path}: not UTF-8 text\n".encode())
        if self.old not in text:
            return ActionResult(1, f"{self.path}: the text to replace is not there\n".encode())
        text = text.replace(self.old, self.new, -1 if self.replace_all else 1)
        put: ActionResult = await env.action(Step(write_argv(self.path, text)), timeout)
        return ActionResult(put.rc, put.output, None)


def write_argv(path: str, content: str) -> tuple[str, ...]:
    """`content` into `path` (its directory made), passed as argv (no quoting to get
    wrong), in pieces under the kernel's limit on one argument."""
    chunks = [content[i : i + CHUNK_CHARS] for i in range(0, len(content), CHUNK_CHARS)]
    return ("sh", "-c", _WRITE_SH, "rtax-write", path, *chunks)


def shell_argv(command: str, shell: str, cwd: str | None, kill_s: float) -> tuple[str, ...]:
    """The command as the agent sent it, under the in-environment kill, from `cwd` (a
    workspace-relative directory) when it is not the workspace itself."""
    head = ("timeout", "-s", "KILL", f"{kill_s:g}")
    if cwd in (None, ".", ""):
        return (*head, shell, "-c", command)
    return (*head, shell, "-c", _CD_SH, "rtax-cd", str(cwd), command)


def trajectory_root(plan: ReplayPlan) -> str | None:
    """Where the agent worked: its first recorded cwd, else the common directory of the
    absolute paths its file steps name."""
    for a in plan.actions:
        if a.op == "shell" and a.cwd and a.cwd.startswith("/"):
            return posixpath.normpath(a.cwd)
    dirs = [
        posixpath.dirname(posixpath.normpath(a.path))
        for a in plan.actions
        if a.path and a.path.startswith("/")
    ]
    return posixpath.commonpath(dirs) if dirs else None


def map_path(path: str, root: str | None) -> str | None:
    """`path` relative to the workspace, or None when it is outside the trajectory's root."""
    if path.startswith("/"):
        if root is None:
            return None
        p = posixpath.normpath(path)
        if p != root and not p.startswith(root.rstrip("/") + "/"):
            return None
        path = posixpath.relpath(p, root)
    rel = posixpath.normpath(path)
    if rel == ".." or rel.startswith("../") or rel.startswith("/"):
        return None
    return rel


def replay_steps(plan: ReplayPlan, kill_s: float) -> tuple[list[ReplayStep], Counter[str]]:
    """The plan's actions as workload steps; the actions not replayable here, by reason."""
    root = trajectory_root(plan)
    steps: list[ReplayStep] = []
    skipped: Counter[str] = Counter()
    engine_s = kill_s + KILL_GRACE_S
    for a in plan.actions:
        step = _step(a, root, kill_s, engine_s)
        if step is None:
            skipped[f"{a.op} (outside the trajectory's root)"] += 1
        else:
            steps.append(step)
    return steps, skipped


def _step(a: ReplayAction, root: str | None, kill_s: float, engine_s: float) -> ReplayStep | None:
    if a.op == "shell":
        cwd = map_path(a.cwd, root) if a.cwd else None
        argv = shell_argv(a.command or "", a.shell, cwd, kill_s)
        return ReplayStep(
            argv, timeout_s=engine_s, op="shell", recorded_rc=a.expect_rc, kill_s=kill_s
        )
    path = map_path(a.path or "", root)
    if path is None or path == ".":
        return None
    if a.op == "read":
        return ReplayStep(("cat", "--", path), timeout_s=engine_s, op="read", path=path)
    if a.op == "write":
        argv = write_argv(path, a.content or "")
        return ReplayStep(argv, timeout_s=engine_s, op="write", path=path)
    return ReplayStep(
        ("cat", "--", path),  # what `perform` starts with; the argv names the step
        timeout_s=engine_s,
        op="replace",
        path=path,
        old=a.old or "",
        new=a.new or "",
        replace_all=a.all,
    )


def one_workload(name: str, traj: Trajectory, kill_s: float, description: str) -> Workload:
    """The replay of one trajectory."""
    plan = replay_plan(traj)
    steps, not_here = replay_steps(plan, kill_s)
    skipped = sum(plan.skipped.values()) + sum(not_here.values())
    return Workload(
        name=name,
        steps=tuple(steps),
        needs_assets=True,  # agents' commands want the full image: python3, git, bash
        description=description or f"replay of {traj.path} ({traj.format})",
        replay=ReplaySource(
            traj.path, traj.format, len(traj.steps), skipped, root=trajectory_root(plan)
        ),
    )


def load_trajectories(path: str) -> list[Trajectory]:
    """Every trajectory of a file, a conversation directory, or a directory of them."""
    out: list[Trajectory] = []
    for p in find_trajectories([path]):
        out.extend(read_trajectories(p))
    return out


def step_counts(paths: Sequence[str]) -> list[int]:
    """Per trajectory, the steps its replay runs in an environment (`rtax project
    --steps-from`): the distribution of S."""
    counts = []
    for path in paths:
        for traj in load_trajectories(path):
            steps, _ = replay_steps(replay_plan(traj), 1.0)
            counts.append(len(steps))
    if not counts:
        raise RtaxError(f"{', '.join(paths)}: no trajectory found")
    return counts


def parse_replay_table(
    name: str,
    body: dict[str, Any],
    locate: Callable[[str | None], str],
    base_dir: Path,
    kill_s: float,
) -> Workload:
    """A `[workloads.NAME]` table with `trajectory`: its keys checked, its trajectories
    read (a malformed one is `FILE:LINE: what` behind the profile's own place), its
    repository found. Paths are relative to the profile's directory."""
    table = f"workloads.{name}"
    for key, value in body.items():
        if key not in REPLAY_KEYS:
            raise ReplayError(
                f"{locate(key)}: {table}.{key}: unknown key in a replay workload "
                f"(allowed: {', '.join(REPLAY_KEYS)})"
            )
        types = REPLAY_KEYS[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            kind = "true or false" if bool in types else "a string"
            raise ReplayError(f"{locate(key)}: {table}.{key}: expected {kind}, got {value!r}")
    traj_path = _resolve(base_dir, body["trajectory"])
    if not os.path.exists(traj_path):
        raise ReplayError(f"{locate('trajectory')}: {table}.trajectory: no such file {traj_path}")
    try:
        trajs = load_trajectories(traj_path)
    except RtaxError as exc:
        raise ReplayError(f"{locate('trajectory')}: {table}.trajectory: {exc}") from None
    if not trajs:
        raise ReplayError(
            f"{locate('trajectory')}: {table}.trajectory: no trajectory in {traj_path}"
        )
    desc = str(body.get("description", ""))
    variants = tuple(one_workload(name, t, kill_s, desc) for t in trajs)
    if not any(v.steps for v in variants):
        raise ReplayError(
            f"{locate('trajectory')}: {table}.trajectory: no step to replay in {traj_path}"
        )
    repo = commit = project = index = None
    if "project" in body:
        if "repo" in body:
            raise ReplayError(
                f"{locate('project')}: {table}.project: give `repo` or `project`, not both"
            )
        from rtax_tui.engine.traj.sdist import parse_project

        project = body["project"]
        try:
            parse_project(project)
        except ValueError as exc:
            raise ReplayError(f"{locate('project')}: {table}.project: {exc}") from None
    if "index" in body:
        index = body["index"]
        if project is None:
            raise ReplayError(f"{locate('index')}: {table}.index: needs `project`")
        if not index.startswith(("https://", "http://")):
            raise ReplayError(
                f"{locate('index')}: {table}.index: expected an http(s) URL of a package "
                f"index's Simple API, got {index!r}"
            )
    if "repo" in body:
        repo = _resolve(base_dir, body["repo"])
        commit = body.get("commit")
        from rtax_tui.engine.traj.repo import check_repo

        why = check_repo(repo, commit)
        if why is not None:
            key = "commit" if why.startswith("commit") else "repo"
            raise ReplayError(f"{locate(key)}: {table}.{key}: {why}")
    elif "commit" in body:
        raise ReplayError(f"{locate('commit')}: {table}.commit: needs `repo`")
    allow = bool(body.get("allow_unisolated", False))
    at_root = bool(body.get("at_root", True))

    def sourced(src: ReplaySource) -> ReplaySource:
        return replace(
            src,
            allow_unisolated=allow,
            repo=repo,
            commit=commit,
            project=project,
            index=index,
            at_root=at_root,
        )

    variants = tuple(
        replace(v, replay=sourced(v.replay)) if v.replay is not None else v for v in variants
    )
    if len(variants) == 1:
        return variants[0]
    formats = {v.replay.format for v in variants if v.replay is not None}
    roots = {v.replay.root for v in variants if v.replay is not None}
    src = sourced(
        ReplaySource(
            traj_path,
            formats.pop() if len(formats) == 1 else "mixed",
            sum(v.replay.steps for v in variants if v.replay is not None),
            sum(v.replay.skipped for v in variants if v.replay is not None),
            root=roots.pop() if len(roots) == 1 else None,  # a pool's environments: one root
        )
    )
    return Workload(
        name=name,
        steps=variants[0].steps,
        needs_assets=True,
        description=desc or f"replay of {len(variants)} trajectories in {traj_path}",
        replay=src,
        variants=variants,
    )


def _resolve(base_dir: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else base_dir / p)


def keeps_host_out(driver: str, options: dict[str, Any] | None = None) -> bool:
    """Whether `driver` (a registered name or a profile's instance of one, with its
    options) promises to keep the host's files out (`tmp_sentinel` among its promised
    checks): only there may a model's commands run unasked. A driver that states nothing,
    or cannot be made, keeps nothing out."""
    from rtax_tui.drivers.registry import resolve
    from rtax_tui.hosts import LocalHost

    try:
        cls, opts = resolve(driver, options)
        return "tmp_sentinel" in cls(LocalHost(), opts).promised_checks()
    except Exception:
        return False


def refuse_unisolated(
    drivers: Sequence[str],
    workloads: dict[str, Workload],
    options: Mapping[str, dict[str, Any]] | None = None,
) -> None:
    """Replayed commands were written by a model: a driver that keeps nothing out
    (`local`, SWE-ReX's local or remote deployment, an instance of either under another
    name: `keeps_host_out`) runs them on this machine itself, so only a workload that
    says `allow_unisolated = true` may."""
    unasked = [
        n for n, w in workloads.items() if w.replay is not None and not w.replay.allow_unisolated
    ]
    if not unasked:
        return
    for drv in drivers:
        if not keeps_host_out(drv, (options or {}).get(drv)):
            name = unasked[0]
            raise RtaxError(
                f"workload {name}: replay refuses the `{drv}` driver: its commands were "
                f"written by a model and `{drv}` keeps nothing out (set "
                f"`allow_unisolated = true` in [workloads.{name}] to run them on this "
                "machine)"
            )


def with_sources(w: Workload, log: Any = None) -> Workload:
    """The replay workload with its workspace source: the repository prepared at its
    commit (cached), else the attrs assets' repository."""
    src = w.replay
    if src is None:
        return w
    if src.project is not None:
        from rtax_tui.engine.traj.repo import prepare_repo
        from rtax_tui.engine.traj.sdist import fetch_sdist

        files = prepare_repo(fetch_sdist(src.project, src.index, log), None, log)
    elif src.repo is not None:
        from rtax_tui.engine.traj.repo import prepare_repo

        files = prepare_repo(src.repo, src.commit, log)
    else:
        from rtax_tui.drivers.toolkit import assets

        files = str(assets.prepare(log=log).repo)
    variants = tuple(replace(v, files=files) for v in w.variants)
    return replace(w, files=files, variants=variants)
