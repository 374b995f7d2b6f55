"""The checks of CI, run by the test command: ruff (on what a fresh clone holds), the
layers (import-linter), no import cycle, and `mypy --strict` over every package (the
console included).

grimp (import-linter's graph) and mypy find modules by path, and `rtax_tui.drivers`
lives in `drivers/` (pyproject's `package-dir`): they read a tree of links laid out
as pip installs the packages, so a fresh clone checks what a wheel would hold.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
# what `mypy --strict` covers (per-module exceptions: [[tool.mypy.overrides]])
TYPED = tuple(
    f"rtax_tui/{p}"
    for p in ("model", "hosts", "drivers", "engine", "analysis", "render", "ui", "commands")
)


def installed_layout(dest: Path) -> Path:
    """Links to this checkout's modules, one real directory per package of pyproject's
    `packages` (a package's sources found through `package-dir`); returns `dest`."""
    cfg = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    dirs = cfg.get("package-dir", {})
    for pkg in cfg["packages"]:
        # a subpackage of a mapped package lives under its parent's directory
        base = max((b for b in dirs if pkg == b or pkg.startswith(b + ".")), key=len, default="")
        rest = pkg[len(base) :].lstrip(".").replace(".", "/")
        src = ROOT / (dirs[base] if base else "") / rest
        out = dest / pkg.replace(".", "/")
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.glob("*.py")):
            (out / f.name).symlink_to(f)
    return dest


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_layout(tmp_path_factory.mktemp("layout"))


def run(argv: list[str], cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)  # this tree's rtax_tui, not the installed one
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of this checkout that git would commit (tracked, and new ones it does not
    ignore), copied: what a fresh clone holds. ruff sorts an import as first-party when
    its module's file exists, so a link left in a work tree (rtax_tui/drivers) would
    change its verdict."""
    res = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    if res.returncode != 0:  # not a git checkout (an unpacked sdist): check it as it is
        return ROOT
    dest = tmp_path_factory.mktemp("checkout")
    for name in filter(None, res.stdout.split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_ruff_check(checkout):
    res = run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], checkout)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format(checkout):
    res = run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], checkout)
    assert res.returncode == 0, res.stdout + res.stderr


def test_layers_import_linter(layout):
    code = (
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(PYPROJECT)!r}, no_cache=True,"
        " no_logo=True))\n"
    )
    res = run([sys.executable, "-c", code], layout, path=layout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout, res.stdout


def import_graph(layout: Path) -> dict[str, set[str]]:
    """Module -> the modules it imports (anywhere in it: inside functions and under
    TYPE_CHECKING too), as grimp reads the tree."""
    code = (
        "import json, grimp\n"
        "g = grimp.build_graph('rtax_tui', cache_dir=None)\n"
        "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m))"
        " for m in g.modules}))\n"
    )
    res = run([sys.executable, "-c", code], layout, path=layout)
    assert res.returncode == 0, res.stderr
    return {m: set(v) for m, v in json.loads(res.stdout).items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle_through_three_modules():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules(layout):
    graph = import_graph(layout)
    # the tree is whole: the drivers are there (else every contract holds vacuously)
    assert {"rtax_tui.drivers.base", "rtax_tui.engine.session", "rtax_tui.ui.app"} <= set(graph)
    assert "rtax_tui.drivers.base" in graph["rtax_tui.drivers.local"]
    found = cycles(graph)
    edges = {m: sorted(graph[m] & set(c)) for c in found for m in c}
    assert found == [], f"import cycles: {found}; edges inside them: {edges}"


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The layer packages (`rtax_tui.<name>`) and the ones each imports: a cycle between
    packages made of modules that do not form one themselves is still a cycle here."""
    out: dict[str, set[str]] = {}

    def pkg(m: str) -> str | None:
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 and parts[1] != "__main__" else None

    for m, deps in graph.items():
        p = pkg(m)
        if p is None:
            continue
        out.setdefault(p, set()).update(q for d in deps if (q := pkg(d)) not in (None, p))
    return out


def test_package_graph_collapses_modules_into_their_layer():
    g = {"rtax_tui.a.x": {"rtax_tui.b.y"}, "rtax_tui.b.y": {"rtax_tui.a.z"}, "rtax_tui.a.z": set()}
    assert cycles(g) == []  # no cycle between modules...
    assert cycles(package_graph(g)) == [["rtax_tui.a", "rtax_tui.b"]]  # ...but between packages


def test_no_import_cycle_between_packages(layout):
    graph = package_graph(import_graph(layout))
    assert {"rtax_tui.model", "rtax_tui.engine", "rtax_tui.drivers"} <= set(graph)
    assert cycles(graph) == [], {p: sorted(d) for p, d in graph.items()}


def test_mypy_strict(layout, tmp_path):
    argv = [sys.executable, "-m", "mypy", "--config-file", str(PYPROJECT)]
    argv += ["--cache-dir", str(tmp_path / "mypy-cache"), *TYPED]
    res = run(argv, layout, path=layout)
    assert res.returncode == 0, res.stdout + res.stderr


# What crosses the seam between the layers: a parameter (or a class's field) by one of
# these names holds a host, a driver or an environment, and is typed as one (issue 37).
SEAM_NAMES = frozenset({"host", "driver", "drv", "env", "env_a"})


def untyped_seam(source: str, name: str = "<src>") -> list[str]:
    """`FILE:LINE name` for each parameter or class-body field named in SEAM_NAMES (and
    each `make_host`'s return) whose annotation holds `Any`, and each parameter typed
    `dict[tuple[str, str], Any]` (drivers by host and name)."""
    out: list[str] = []

    def bad(ann: ast.expr | None) -> bool:
        return ann is not None and any(
            isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(ann)
        )

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                ann = arg.annotation
                text = ast.unparse(ann) if ann is not None else ""
                if (arg.arg in SEAM_NAMES and bad(ann)) or text == "dict[tuple[str, str], Any]":
                    out.append(f"{name}:{arg.lineno} {arg.arg}")
            if node.name == "make_host" and bad(node.returns):
                out.append(f"{name}:{node.lineno} make_host's return")
        elif isinstance(node, ast.ClassDef):
            for st in node.body:
                tgt = st.target if isinstance(st, ast.AnnAssign) else None
                if isinstance(tgt, ast.Name) and tgt.id in SEAM_NAMES and bad(st.annotation):
                    out.append(f"{name}:{st.lineno} {tgt.id}")
    return out


def test_untyped_seam_finds_a_host_typed_any():
    src = (
        "from typing import Any\n"
        "def f(host: Any, n: int) -> None: ...\n"
        "def g(drivers: dict[tuple[str, str], Any]) -> None: ...\n"
        "def make_host(name: str) -> Any: ...\n"
        "class P:\n    env: Any\n    other: Any\n"
        "def h(host: Host, facts: dict[str, Any]) -> None: ...\n"
    )
    assert untyped_seam(src) == [
        "<src>:2 host",
        "<src>:3 drivers",
        "<src>:4 make_host's return",
        "<src>:6 env",
    ]


def test_the_seam_between_the_layers_is_typed():
    """Hosts, drivers and environments are passed as `Host`, `Driver`, `Environment` (or
    the model's Protocols for them), never as `Any`, in what mypy checks."""
    files = [f for d in (*TYPED, "drivers") for f in sorted((ROOT / d).rglob("*.py"))]
    files = [f for f in files if "rtax_tui/drivers" not in str(f.relative_to(ROOT))]
    assert any(f.name == "pool.py" for f in files) and any(f.name == "stage.py" for f in files)
    found = [hit for f in files for hit in untyped_seam(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == [], found
