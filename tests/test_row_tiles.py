"""Operands constant along a region's rows, read from tiles
(``backends/numba/tiles.py``): a bias, a per-feature scale or mean read as
``b[i1]`` kept the loop a nest, and with an inner extent of 5 to 15 LLVM
unrolled it and vectorized nothing (``tanh(X + b)`` over (10^5, 10): 6.5 ms,
1.3 at (62500, 16)).  Read from a tile -- the operand repeated over a block's
rows, written once per call into the region's scratch -- the loop is one
loop over each block's elements.  The same values in the same order: the
nest's bits."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from conftest import assert_same_bits_and_right, divides_vectors

import hybridad as ha
from hybridad.backends.numba import tiles

RNG = np.random.default_rng(5)


def _r(*shape):
    return RNG.standard_normal(shape)


CASES = {
    # a full sum's blocks (a prange of blocks), its bias gradient summed over rows
    "bias_sum": (lambda x, b: np.sum(np.tanh(x + b) ** 2), [_r(20000, 10), _r(10)], True),
    # a region read by a matmul: blocks of the tile's rows, 3001 rows not a multiple
    "scale_into_matmul": (lambda x, s, W: np.sum(np.tanh(x * s) @ W),
                          [_r(3001, 10), _r(10), _r(10, 3)], True),
    # recomputed partials: the backward's vjp regions read the row operand too
    "vjp_rows": (lambda x, b, W: np.sum(((x - b) * (x + b)) @ W),
                 [_r(4000, 6), _r(6), _r(6, 2)], True),
    # a diagonal Gaussian's mean and log-scale
    "diag_gauss": (lambda x, mu, ls: 0.5 * np.sum(((x - mu) * np.exp(-ls)) ** 2)
                   + x.shape[0] * np.sum(ls), [_r(5000, 7), _r(7), _r(7)], True),
    # 3-D: an operand over the two inner axes, one over the last, one (4, 1)
    "three_d": (lambda x, a, c, m: np.sum(np.sin(x * a + c) * m),
                [_r(300, 4, 5), _r(4, 5), _r(1, 5), _r(4, 1)], True),
    # a column (changes along axis 0): no tile, the nest stays
    "column": (lambda x, c: np.sum(np.tanh(x * c)), [_r(3000, 10), _r(3000, 1)], False),
}


def _plan(f, args, **kw):
    return ha.compile(f, *args, argnums=tuple(range(len(args))), **kw)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_tiled_rows_give_the_nests_bits(name, dtype, parallel, monkeypatch):
    f, args, tiled = CASES[name]
    args = [a.astype(dtype) for a in args]
    plan = _plan(f, args, parallel=parallel)
    assert ("_tl" in plan._program.source) == tiled, plan._program.source
    assert parallel or "prange(" not in plan._program.source  # (serial: no loop on threads)
    # the same plan with no tiles: the same bits
    monkeypatch.setattr(tiles, "TILE_BELOW", 1)
    nested = _plan(f, args, parallel=parallel)
    assert "_tl" not in nested._program.source
    assert_same_bits_and_right(f, args, plan, nested, dtype, differences=len(args))


def test_small_loops_and_wide_rows_are_not_tiled():
    """Tiles only where they pay: a loop of fewer than TILE_MIN_WORK
    elements, and an inner extent from 16 (a constant loop that vectorizes)."""
    for shape in ((50, 10), (3000, 16)):
        x, b = _r(*shape), _r(shape[1])
        plan = _plan(lambda x, b: np.sum(np.tanh(x + b)), [x, b])
        assert "_tl" not in plan._program.source


_TEN = """
import numpy as np, hybridad as ha
rng = np.random.default_rng(0)
x, b = rng.standard_normal((100000, 10)), rng.standard_normal(10)
plan = ha.compile(lambda x, b: np.sum(np.tanh(x + b)), x, b)
plan.gradient(x, b)
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 vectors")
def test_a_bias_over_ten_columns_vectorizes(tmp_path):
    """The (100000, 10) ``tanh(x + b)`` loop divides vectors in the optimized IR
    of hybridad's compiler; as a nest with a constant inner count of 10 every
    division was scalar."""
    assert divides_vectors(tmp_path, _TEN), "the tanh loop stayed scalar"
