"""The levels kept in rings are the levels computed afresh, bit for bit, at any hour."""

import numpy as np

from soak.analysis.equilibrium import Series, level_of
from soak.analysis.equilibrium.levels import BATCHES, Rings, pieces
from soak.profile import Windows

W = Windows()


def _series(hours: float, seed: int = 1) -> Series:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.5, 1.5, int(hours * 3600)))
    y = 7e14 * (1 + 0.01 * np.sin(t / 500)) * (1 + rng.normal(0, 0.003, t.size))
    y[rng.random(t.size) < 0.02] = np.nan  # unreadable now and then
    y[(t > 1000) & (t < 1100)] = np.nan  # and a gap: batches with no readings
    return Series(t, y)


def _same(a, b) -> bool:
    return a == b or (a is None and b is None)


def test_levels_from_the_rings_are_the_levels_computed_afresh():
    s = _series(2.0)
    kept = s.cached(1590.0)
    ends = 600.0 + 30.0 * np.arange(200)
    for end in ends:  # in order, as the checks come, then a few again from the rings
        for n in (1, 2):
            assert _same(level_of(kept, end, W, n), level_of(s, end, W, n)), (end, n)
    for end in ends[-20:]:
        assert _same(level_of(kept, end, W), level_of(s, end, W))
        fresh, ring = pieces(s, end, 600.0, 2 * BATCHES), pieces(kept, end, 600.0, 2 * BATCHES)
        assert [p.squares for p in fresh] == [p.squares for p in ring]


def test_the_rings_hold_the_same_entries_at_hour_1_and_hour_12():
    s = _series(12.0).cached(1590.0)
    sizes = []
    for end in 600.0 + 30.0 * np.arange(12 * 120 - 20):
        level_of(s, end, W)
        if end in (3600.0, 43200.0 - 1200.0):
            rings = s.cache
            sizes.append((rings.size, len(rings._pieces), sum(t >= 0 for t in rings._tags)))
    assert sizes[0] == sizes[1]


def test_a_late_sample_drops_what_holds_its_time():
    t = np.arange(0.0, 1800.0)
    y = np.full_like(t, 60.0)
    kept = Series(t, y).cached(1590.0)
    before = level_of(kept, 1500.0, W)
    y[1381:1411] = 90.0  # readings that came late, into a batch already kept
    kept.cache.forget_from(1381.0)
    after = level_of(kept, 1500.0, W)
    assert after == level_of(Series(t, y), 1500.0, W) and after != before


def test_rings_are_sized_by_their_reach_not_by_the_run():
    rings = Rings(1590.0)
    assert rings.grid(0.0, 30.0) == 0 and rings.grid(45.0, 30.0) is None
    assert rings.size == 53 + 64 + 2 * BATCHES
