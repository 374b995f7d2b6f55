"""What making every event visible costs the engine: `python3 bench/emit_cost.py`.

Every event the engine emits goes through `Emitter.__call__`, which runs `events.visible`
over it (a control character in a string, an error's message written by a step, becomes
a visible `\\xNN`). That is on the path of every trial, so it is measured here apart
from everything else a trial does: the events of a real recording (an example under
recordings/examples, `t_ns` removed) are emitted again through an `Emitter` whose one
sink is a `RecordingWriter` onto /dev/null, as `rtax run` writes them, in rounds that
alternate the emitter as it is and the same emitter with `visible` replaced by the
identity. Prints the median over rounds of the cost per event and per trial (the
recording's events divided by its trials), and the difference. Asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtax_tui.model import events as E  # noqa: E402
from rtax_tui.model.recording import RecordingWriter, read_recording  # noqa: E402

DEFAULT = ROOT / "recordings" / "examples" / "t0-local-stage.jsonl"


def _round(evs: list[dict], visible: bool) -> int:
    """ns to emit every event of `evs` once."""
    saved = E.visible
    if not visible:
        E.visible = lambda v: v  # type: ignore[assignment]
    try:
        with open("/dev/null", "wb") as f:
            em = E.Emitter([RecordingWriter(f).write])
            gc.collect()
            t0 = time.monotonic_ns()
            for ev in evs:
                em(ev)  # type: ignore[arg-type]
            return time.monotonic_ns() - t0
    finally:
        E.visible = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording", nargs="?", default=str(DEFAULT))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--repeat", type=int, default=20, help="passes over the events a round")
    a = ap.parse_args()
    rec = read_recording(a.recording)
    evs = [{k: v for k, v in e.items() if k != "t_ns"} for e in rec.events] * a.repeat
    trials = sum(1 for e in rec.events if e.get("type") == "trial_end") * a.repeat
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(a.rounds):
        for vis in (True, False) if r % 2 == 0 else (False, True):
            times[vis].append(_round(evs, vis) / len(evs) / 1000)
    n = len(evs)
    print(f"{Path(a.recording).name}: {n} events, {trials} trials a round, {a.rounds} rounds")
    med = {v: statistics.median(t) for v, t in times.items()}
    per_trial = n / max(trials, 1)
    for vis, label in ((False, "without visible"), (True, "with visible (as rtax runs)")):
        print(f"  {label}: {med[vis]:.2f} us/event, {med[vis] * per_trial:.1f} us/trial")
    d = med[True] - med[False]
    print(
        f"  visible adds {d:.2f} us/event, {d * per_trial:.1f} us/trial "
        f"({per_trial:.1f} events a trial)"
    )


if __name__ == "__main__":
    main()
