from collections import Counter

from rtax_tui.engine.plan import build_capacity_plan, build_plan, make_cells


def cells():
    return make_cells(("local",), ("local", "stage"), ("t0", "t1"), ("exec",))


def test_same_seed_same_order_and_different_seed_differs():
    a = build_plan(cells(), 20, 2, seed=7)
    b = build_plan(cells(), 20, 2, seed=7)
    c = build_plan(cells(), 20, 2, seed=8)
    assert [t.cell for t in a] == [t.cell for t in b]
    assert [t.cell for t in a] != [t.cell for t in c]


def test_warmups_first_then_every_cell_n_times_interleaved():
    plan = build_plan(cells(), 20, 2, seed=3)
    assert len(plan) == 4 * 22
    warm = [t for t in plan if t.warmup]
    assert plan[: len(warm)] == warm and len(warm) == 8
    measured = [t for t in plan if not t.warmup]
    assert Counter(t.cell for t in measured) == {c: 20 for c in cells()}
    # interleaved: the measured order is not cell-by-cell blocks
    runs = sum(1 for a, b in zip(measured, measured[1:], strict=False) if a.cell != b.cell)
    assert runs > 20
    assert [t.id for t in plan] == list(range(1, len(plan) + 1))


def test_capacity_plan_batches():
    plan = build_capacity_plan(cells(), batches=3, size=4, warmup=1, seed=1)
    assert len(plan) == 4 + 12
    assert all(len(b.trials) == 4 for b in plan)
    assert all(t.batch == b.id for b in plan for t in b.trials)
    ids = [t.id for b in plan for t in b.trials]
    assert ids == sorted(set(ids))


def test_capacity_curve_plan_runs_every_size_per_cell_interleaved():
    plan = build_capacity_plan(cells(), batches=3, size=(2, 5, 3), warmup=1, seed=4)
    warm = [b for b in plan if b.warmup]
    assert len(warm) == 4 and all(len(b.trials) == 2 for b in warm)  # the smallest size
    measured = [b for b in plan if not b.warmup]
    assert Counter((b.cell, len(b.trials)) for b in measured) == {
        (c, n): 3 for c in cells() for n in (2, 5, 3)
    }
    # interleaved across cells and sizes, and seeded
    keys = [(b.cell, len(b.trials)) for b in measured]
    assert sum(1 for a, b in zip(keys, keys[1:], strict=False) if a != b) > len(keys) // 2
    again = build_capacity_plan(cells(), batches=3, size=(2, 5, 3), warmup=1, seed=4)
    assert [(b.cell, len(b.trials)) for b in again] == [(b.cell, len(b.trials)) for b in plan]
    ids = [t.id for b in plan for t in b.trials]
    assert ids == list(range(1, len(ids) + 1))
