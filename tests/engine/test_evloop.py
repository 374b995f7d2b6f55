"""The event loop `rtax run` and `rtax probe` run on (engine.evloop): uvloop where it is
installed, asyncio's on request or without it, and the run's header saying which."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtax_tui.engine import evloop
from rtax_tui.model.spec import RtaxError

uvloop = pytest.importorskip("uvloop")


async def _which() -> str:
    return evloop.describe()


@pytest.fixture(autouse=True)
def _asyncio_policy() -> None:
    """asyncio's own policy, as in an `rtax` process (conftest makes uvloop's the
    tests' default): `evloop.run` chooses the loop here."""
    asyncio.set_event_loop_policy(None)


def test_uvloop_by_default_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(evloop.ENV, raising=False)
    assert evloop.chosen() == "uvloop"
    assert evloop.run(_which()) == f"uvloop {uvloop.__version__}"
    monkeypatch.setenv(evloop.ENV, "asyncio")
    assert evloop.chosen() == "asyncio"
    assert evloop.run(_which()) == "asyncio"
    monkeypatch.setenv(evloop.ENV, " UVloop ")
    assert evloop.run(_which()).startswith("uvloop ")


def test_without_uvloop_asyncio_unless_uvloop_was_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evloop, "_uvloop", lambda: None)
    monkeypatch.delenv(evloop.ENV, raising=False)
    assert evloop.chosen() == "asyncio" and evloop.loop_factory() is None
    assert evloop.run(_which()) == "asyncio"
    monkeypatch.setenv(evloop.ENV, "uvloop")
    with pytest.raises(RtaxError, match="uvloop is not installed"):
        evloop.chosen()


def test_an_unknown_loop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(evloop.ENV, "trio")
    with pytest.raises(RtaxError, match="RTAX_LOOP='trio': expected one of uvloop, asyncio"):
        evloop.run(_which())


def test_another_loop_is_named_by_its_class() -> None:
    class Other(asyncio.SelectorEventLoop):
        pass

    loop = Other()
    try:
        assert evloop.describe(loop) == f"{__name__}.{Other.__qualname__}"
    finally:
        loop.close()


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_the_run_header_names_the_loop_that_ran(tmp_path: Path, choice: str) -> None:
    """`rtax run` on each loop: the actions run (a step's output and status come back)
    and the header says which loop took them."""
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[run]\ntrials = 1\nwarmup = 0\ndrivers = ["local"]\nworkloads = ["w"]\n'
        'channels = ["exec", "shell"]\n'
        '[workloads.w]\nsteps = [{argv = ["sh", "-c", "echo hi; exit 3"], expect_rc = 3}]\n'
    )
    rec = tmp_path / "r.jsonl"
    env = {**os.environ, evloop.ENV: choice}
    subprocess.run(
        [sys.executable, "-m", "rtax_tui", "run", str(prof), "-o", str(rec), "--quiet"],
        check=True, capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    evs = [json.loads(line) for line in rec.read_text().splitlines()]
    want = f"uvloop {uvloop.__version__}" if choice == "uvloop" else "asyncio"
    assert evs[0]["loop"] == want
    acts = [e for e in evs if e["type"] == "action"]
    assert [(a["rc"], a["ok"], a["out_bytes"]) for a in acts] == [(3, True, 3)] * 2
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "completed"
