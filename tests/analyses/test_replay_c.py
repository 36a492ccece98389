"""The what-if replay's C loop (nsyscomm/analyses/_replay.c) gives the numpy loop's numbers, bit
for bit, NaNs included, and the same levels and cycle errors."""

from __future__ import annotations

import numpy as np
import pytest

from nsyscomm.analyses import replay as R

pytestmark = pytest.mark.skipif(R._replay_module() is None, reason="nsyscomm.analyses._replay not built")


def _chains(rng, ranks: int, calls: int) -> R.Graph:
    n = ranks * calls
    src = [r * calls + c for r in range(ranks) for c in range(calls - 1)]
    dst = [s + 1 for s in src]
    group = np.full(n, -1)
    for c in range(0, calls, 2):  # every other call a collective of all ranks
        group[[r * calls + c for r in range(ranks)]] = c
    return R.build(n, src, dst, group, rng.random(n))


def _both(monkeypatch, fn):
    fast = fn()
    monkeypatch.setenv("NSYSCOMM_REPLAY_PY", "1")
    try:
        slow = fn()
    finally:
        monkeypatch.delenv("NSYSCOMM_REPLAY_PY")
    return fast, slow


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_replay_c_equals_numpy(monkeypatch):
    rng = np.random.default_rng(0)
    for trial in range(40):
        g = _chains(rng, int(rng.integers(1, 5)), int(rng.integers(2, 120)))
        dur, delay = rng.random(g.n), rng.random(g.n)
        if trial % 5 == 0:
            dur[rng.integers(0, g.n)] = np.nan
        for reduce in ("max", "min", rng.random(max(g.n_groups, 1)) > 0.5):
            fast, slow = _both(monkeypatch, lambda: R.replay(g, dur, delay, reduce))
            for a, b in zip(fast, slow):
                assert np.array_equal(a, b, equal_nan=True)


def test_levels_c_equals_numpy(monkeypatch):
    rng = np.random.default_rng(1)
    for trial in range(200):
        n, m = int(rng.integers(1, 60)), int(rng.integers(0, 150))
        perm = rng.permutation(n)
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = a != b
        src, dst = perm[np.minimum(a, b)[keep]], perm[np.maximum(a, b)[keep]]
        if trial % 10 == 0 and len(src):  # a cycle
            src, dst = np.append(src, dst[0]), np.append(dst, src[0])

        def levels():
            try:
                return R._levels(n, src.astype(np.int64), dst.astype(np.int64)).tolist()
            except R.CycleError as e:
                return str(e)

        fast, slow = _both(monkeypatch, levels)
        assert fast == slow
