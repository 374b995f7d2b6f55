"""Arrival patterns on Ray nodes without a cluster: a `Session` over two in-process node
engines (tests/raynodeinproc.py) runs `burst:N` and `rate:R` cells as it runs them on
`local` or SSH hosts: every planned trial recorded once, with its pattern and episode,
and a burst's trials asked for together (their arrival times one instant per episode)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rtax_tui.drivers import get_driver

from rtax_tui.engine.nodeengine import NodeEngine
from rtax_tui.engine.profile import load_profile
from rtax_tui.engine.runner import resolve_workloads
from rtax_tui.engine.session import Session
from tests.raynodeinproc import node_host


def _run(tmp: Path, arrivals: str) -> tuple[list[dict[str, Any]], Session]:
    path = tmp / "arrivals.toml"
    path.write_text(
        '[run]\nhosts = ["local"]\ndrivers = ["local"]\nworkloads = ["t0"]\n'
        f'channels = ["exec"]\ntrials = 4\nwarmup = 0\narrivals = [{arrivals}]\n'
        "[timeouts]\ncreate = 20\nready = 20\naction = 20\nteardown = 20\n"
    )
    profile = load_profile(str(path))
    workloads = resolve_workloads(profile)
    got: list[dict[str, Any]] = []

    async def go() -> Session:
        engines = [NodeEngine(f"ray-{i}", profile, profile.drivers) for i in range(2)]
        hosts = {e.name: node_host(i, profile, e, None) for i, e in enumerate(engines)}
        drivers = {(h, "local"): get_driver("local", host, {}) for h, host in hosts.items()}
        session = Session(
            profile, sinks=[got.append], argv=[], drivers=drivers, workloads=workloads,
            hosts=dict(hosts),
        )  # fmt: skip
        try:
            async with asyncio.timeout(120):
                await session.run()
        finally:
            for e in engines:
                await e.close()
        return session

    return got, asyncio.run(go())


def test_bursts_and_rates_run_on_every_node_with_their_episodes(tmp_path: Path) -> None:
    got, session = _run(tmp_path, '"burst:2", "rate:50"')
    assert next(e for e in got if e["type"] == "run_end")["status"] == "completed"
    starts = {e["trial"]: e for e in got if e["type"] == "trial_start"}
    ends = {e["trial"]: e for e in got if e["type"] == "trial_end"}
    assert sorted(starts) == sorted(ends)
    assert all(e["ok"] for e in ends.values()), [e for e in ends.values() if not e["ok"]]
    cells = {(s["host"], s["arrival"]) for s in starts.values()}
    assert cells == {(h, a) for h in ("ray-0", "ray-1") for a in ("burst:2", "rate:50")}
    for host in ("ray-0", "ray-1"):
        mine = [s for s in starts.values() if s["host"] == host and s["arrival"] == "burst:2"]
        assert len(mine) == 4 and all(s["episode"] for s in mine), mine
        episodes: dict[str, list[int]] = {}
        for s in mine:
            episodes.setdefault(s["episode"], []).append(s["arrival_ns"])
        assert sorted(len(v) for v in episodes.values()) == [2, 2], episodes
        for at in episodes.values():  # a burst: its trials asked for at one instant
            assert len(set(at)) == 1, at
