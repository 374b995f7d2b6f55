"""The built-in workloads (docs/profiles.md, "Workloads").

Every step is an argv list run with cwd = the environment's workspace; whatever a
shell must see goes through `sh -c` with shlex quoting. Each step carries an
`expect_out` that really occurs in its output, so `Step.matches` is a real check.
When a workload has `files`, the driver copies the *contents* of that directory
(the attrs repository, `.git` included) into the workspace.
"""

from __future__ import annotations

import shlex

from rtax_tui.drivers.toolkit import assets as A
from rtax_tui.model.spec import WORKLOAD_NAMES, Step, Workload

TRAJECTORY_LENGTHS: tuple[int, ...] = (10, 50, 150)
TEST_EVERY = 25  # the trajectories run one fast pinned test every TEST_EVERY steps
TEST_OFFSET = 9  # ... at steps 10, 35, 60, ... (1-based), so trajectory-10 runs one

# Python AST search over src/attr: prints `path:line:function` for every function
# that calls sys.argv[1] (a plain name or an attribute).
AST_SEARCH = """\
import ast, pathlib, sys
target = sys.argv[1]
for p in sorted(pathlib.Path("src/attr").rglob("*.py")):
    tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name == target:
                        print(f"{p}:{fn.lineno}:{fn.name}")
                        break
"""

# The capacity workload's held memory (pVisor: each task touches its private memory and
# holds it until the common barrier releases the batch). HOLD_PY forks a holder that
# touches argv[1] MiB, page by page, keeps it in its address space and writes its pid
# to HOLD_PID in the workspace; the step returns once the memory is touched ("held
# <bytes>"), or says how the holder died (an OOM kill is a SIGKILL, rc 137). The holder
# stays in the step's process group (a shell channel's teardown ends it with the shell)
# and ends on its own after argv[2] seconds, so nothing outlives a driver that does not
# end its environment's processes (`local` over exec without a budget cgroup).
# RELEASE_SH is the release sent through the channel: it ends the holder (SIGTERM) and
# returns once the holder is gone or a zombie, whose memory the kernel has already
# taken back (exit_mm comes first in do_exit): "released" means the memory was let go.
# It is a shell script, not Python: at the release every environment still holds its
# memory, and N Python interpreters starting at once would cost N x 3 MiB more.
HOLD_PID = ".rtax-hold"
HOLD_PY = f"""\
import os, sys, time
n = int(sys.argv[1]) << 20
r, w = os.pipe()
pid = os.fork()
if pid:
    os.close(w)
    if os.read(r, 1):
        with open({HOLD_PID!r}, "w") as f:
            f.write(str(pid))
        print("held", n)
        sys.exit(0)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        print("holder killed by signal", os.WTERMSIG(st))
        sys.exit(128 + os.WTERMSIG(st))
    print("holder exited with", os.WEXITSTATUS(st))
    sys.exit(1)
os.close(r)
fd = os.open(os.devnull, os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
b = bytearray(n)
b[::4096] = b"x" * len(b[::4096])
os.write(w, b"1")
os.close(w)
time.sleep(float(sys.argv[2]))
"""
RELEASE_SH = f"""\
p=$(cat {HOLD_PID} 2>/dev/null) || {{ echo "no holder"; exit 1; }}
alive() {{ s=$(cat /proc/$p/stat 2>/dev/null) || return 1; s=${{s##*) }}; [ "${{s%% *}}" != Z ]; }}
alive || {{ echo "no holder: it was gone before the release"; exit 1; }}
kill "$p"
while alive; do sleep 0.005; done
echo released
"""
# Python without site and environment (-S -I): the holder's own heap is about 3 MiB
# instead of 7 on top of what it holds.
PY = ("python3", "-S", "-I", "-c")
TOUCH_MIB = 32  # pVisor's figure: 32 MiB of private data per task
CAPACITY_GIT = (
    "git init -q g && "
    "git -C g -c user.name=r -c user.email=r@r -c commit.gpgsign=false "
    "commit -q --allow-empty -m rtax-capacity && "
    "git -C g log --oneline"
)

# (pattern, where, a substring of the output)
_GREPS: tuple[tuple[str, str, str], ...] = (
    ("def max_len", "src/", "src/attr/validators.py:554:def max_len(length):"),
    ("class _MaxLengthValidator", "src/attr", "validators.py"),
    ("raise ValueError", "src/attr", "raise ValueError"),
    ("_compile_and_eval", "src/attr", "def _compile_and_eval("),
    ("max_length", "src/attr/validators.py", "self.max_length"),
    ("class TestMaxLen", "tests", "tests/test_validators.py"),
    ("def evolve", "src/attr", "src/attr/_make.py"),
    ("def optional", "src/attr/converters.py", "def optional(converter):"),
)
# (argv, a substring of the output)
_READS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("cat", "src/attr/validators.py"), "def max_len(length):"),
    (("head", "-n", "40", "src/attr/__init__.py"), "Classes Without Boilerplate"),
    (("wc", "-l", "src/attr/_make.py", "src/attr/validators.py"), "total"),
    (("sed", "-n", "536,552p", "src/attr/validators.py"), "class _MaxLengthValidator"),
    (("cat", "tests/test_validators.py"), "class TestMaxLen"),
    (("head", "-n", "60", "src/attr/converters.py"), "def optional(converter):"),
    (("cat", "src/attr/_funcs.py"), "def astuple("),
    (("wc", "-l", "tests/test_validators.py", "tests/test_converters.py"), "total"),
)
# (called name, a function that calls it)
_AST_TARGETS: tuple[tuple[str, str], ...] = (
    ("_compile_and_eval", ":_add_repr"),
    ("_linecache_and_compile", ":_eval_snippets"),
    ("TypeError", ":evolve"),
    ("getattr", ":astuple"),
    ("setattr", ":_patch_original_class"),
)
_GITS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("git", "log", "--oneline", "-n", "5"), "introduce bug"),
    (("git", "status", "--porcelain=v1", "--branch"), f"## {A.BRANCH}"),
    (("git", "show", "--stat", "--format=%s", "HEAD"), "src/attr/validators.py"),
    (("git", "diff", "HEAD~1", "HEAD", "--", "src/"), "self.max_length"),
)


def _grep(k: int) -> Step:
    pattern, where, expect = _GREPS[k % len(_GREPS)]
    return Step(("grep", "-rn", pattern, where), expect_out=expect)


def _read(k: int) -> Step:
    argv, expect = _READS[k % len(_READS)]
    return Step(argv, expect_out=expect)


def _ast(k: int) -> Step:
    target, expect = _AST_TARGETS[k % len(_AST_TARGETS)]
    return Step(("python3", "-c", AST_SEARCH, target), expect_out=expect)


def _git(k: int) -> Step:
    argv, expect = _GITS[k % len(_GITS)]
    return Step(argv, expect_out=expect)


def _note(k: int) -> str:
    return f"rtax note {k}"


def _edit(k: int) -> Step:
    script = f"printf '%s\\n' {shlex.quote(_note(k))} >> README.md"
    return Step(("sh", "-c", script))


def _diff(k: int) -> Step:
    return Step(("git", "diff", "--", "README.md"), expect_out="+" + _note(k))


def _pytest_step(test: str, fail: bool) -> Step:
    if fail:
        return Step(
            tuple(A.pinned_test_argv([test])),
            expect_rc="nonzero",
            expect_out=A.FAST_FAILING_SUMMARY,
        )
    return Step(tuple(A.pinned_test_argv([test])), expect_out=A.FAST_PASSING_SUMMARY)


# The rotation of the T1-style steps in a trajectory; "edit" is always followed
# (possibly after a test step) by the "diff" that shows it.
_ROTATION = ("grep", "read", "ast", "git", "grep", "read", "edit", "diff", "ast", "git", "read")


def trajectory_steps(n: int) -> tuple[Step, ...]:
    """n deterministic T1-style steps; every TEST_EVERY steps a fast pinned test,
    alternately one that reproduces the bug and one that passes."""
    steps: list[Step] = []
    counts: dict[str, int] = {}
    tests = 0
    r = 0
    last_note = 0
    for i in range(n):
        if i % TEST_EVERY == TEST_OFFSET:
            fail = tests % 2 == 0
            test = A.FAST_FAILING_TEST if fail else A.FAST_PASSING_TEST
            steps.append(_pytest_step(test, fail))
            tests += 1
            continue
        kind = _ROTATION[r % len(_ROTATION)]
        r += 1
        k = counts.get(kind, 0)
        counts[kind] = k + 1
        if kind == "grep":
            steps.append(_grep(k))
        elif kind == "read":
            steps.append(_read(k))
        elif kind == "ast":
            steps.append(_ast(k))
        elif kind == "git":
            steps.append(_git(k))
        elif kind == "edit":
            last_note = k + 1
            steps.append(_edit(last_note))
        else:  # diff
            steps.append(_diff(last_note))
    return tuple(steps)


def _t0() -> Workload:
    return Workload(
        name="t0",
        steps=(Step(("true",)),),
        description="the minimal command (`true`), isolating start-up",
    )


def capacity_workload(touch_mib: int = TOUCH_MIB, hold_s: float = 600.0) -> Workload:
    """Touch `touch_mib` MiB of private memory and hold it (a Python holder process),
    run a git step while holding it, then wait at the barrier; its release step ends
    the holder. `hold_s` bounds the holder's life if no release ever comes."""
    return Workload(
        name="capacity",
        steps=(
            Step(
                (*PY, HOLD_PY, str(touch_mib), f"{hold_s:g}"),
                expect_out=f"held {touch_mib << 20}",
            ),
            Step(("sh", "-c", CAPACITY_GIT), expect_out="rtax-capacity"),
        ),
        release=Step(("sh", "-c", RELEASE_SH), expect_out="released"),
        description=(
            f"touch {touch_mib} MiB of private memory and hold it in a Python process, "
            "a git step, then the barrier; the release lets the memory go"
        ),
    )


def _t1(assets: A.AssetPaths) -> Workload:
    return Workload(
        name="t1",
        steps=(
            Step(("grep", "-rn", "def max_len", "src/"), expect_out="src/attr/validators.py"),
            Step(("python3", "-c", AST_SEARCH, "_compile_and_eval"), expect_out=":_add_repr"),
            Step(("cat", "src/attr/validators.py"), expect_out="class _MaxLengthValidator"),
            Step(("head", "-n", "40", "src/attr/__init__.py"), expect_out="Classes Without"),
            Step(("wc", "-l", "src/attr/_make.py", "src/attr/validators.py"), expect_out="total"),
        ),
        files=str(assets.repo),
        needs_assets=True,
        description="code inspection in the preloaded attrs repository: grep, AST search, reads",
    )


def _t2(assets: A.AssetPaths) -> Workload:
    run_tests = "cd repo && exec " + shlex.join(A.pinned_test_argv(assets.tests))
    return Workload(
        name="t2",
        steps=(
            Step(("git", "clone", "-q", str(assets.bare), "repo")),
            Step(
                ("grep", "-rn", "max_length", "repo/src/attr/validators.py"),
                expect_out="self.max_length",
            ),
            Step(("git", "-C", "repo", "log", "--oneline", "-n", "3"), expect_out="introduce bug"),
            Step(("sh", "-c", run_tests), expect_rc="nonzero", expect_out=A.PINNED_FAIL_SUMMARY),
            Step(("git", "-C", "repo", "apply", str(assets.patch))),
            Step(("sh", "-c", run_tests), expect_rc=0, expect_out=A.PINNED_PASS_SUMMARY),
        ),
        files=None,
        needs_assets=True,
        description=(
            "clone attrs at a buggy commit, inspect, run the pinned tests (must fail), "
            "apply the fix patch, run them again (must pass)"
        ),
    )


def _trajectory(n: int, assets: A.AssetPaths) -> Workload:
    return Workload(
        name=f"trajectory-{n}",
        steps=trajectory_steps(n),
        files=str(assets.repo),
        needs_assets=True,
        description=f"{n} steps of a realistic mix of inspection, edits, git and tests",
    )


def builtin_workloads(
    assets: A.AssetPaths | None, *, touch_mib: int = TOUCH_MIB, hold_s: float = 600.0
) -> dict[str, Workload]:
    """The built-in workloads by name, in WORKLOAD_NAMES order; without assets only
    those that need none (t0, capacity). `touch_mib` and `hold_s`: the capacity
    workload's held memory and the longest its holder waits for the release."""
    out: dict[str, Workload] = {"t0": _t0()}
    if assets is not None:
        out["t1"] = _t1(assets)
        out["t2"] = _t2(assets)
        for n in TRAJECTORY_LENGTHS:
            out[f"trajectory-{n}"] = _trajectory(n, assets)
    out["capacity"] = capacity_workload(touch_mib, hold_s)
    return {name: out[name] for name in WORKLOAD_NAMES if name in out}
