"""Regions reduced over short rows, in blocks of rows
(``backends/numba/rowblocks.py``): ``sum(exp(Z - m[:, None]), axis=1)`` over 10
classes ran one row at a time, LLVM unrolled the row's constant loop of 10
and vectorized nothing (8 ns an element).  In blocks, the block's values are
one collapsed loop (row operands from tiles, the row's own operands from the
block's expansion) and the rows are accumulated side by side, each in
order: the bits of the row-at-a-time loop."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp

import hybridad as ha
from hybridad.backends.numba import rowblocks
from conftest import assert_same_bits_and_right

RNG = np.random.default_rng(9)


def _r(*shape):
    return RNG.standard_normal(shape)


CASES = {
    # a row's maximum subtracted (an expansion), the log of the row sums
    "logsumexp_rows": (lambda Z, m: np.sum(np.log(np.sum(np.exp(Z - m), axis=1))),
                       [_r(3001, 10), _r(3001, 1)]),
    # softmax cross-entropy: the vjp w.r.t. the row's logsumexp summed over the row
    "cross_entropy": (lambda Z, Y: -np.sum(Y * (Z - sp.logsumexp(Z, axis=1, keepdims=True))),
                      [_r(4000, 9), np.abs(_r(4000, 9))]),
    # each row's sum of a scaled tanh (a tile), not kept
    "row_tile_sum": (lambda Z, s: np.sum(np.sum(np.tanh(Z) * s, axis=1) ** 2),
                     [_r(2500, 12), _r(12)]),
    # a row norm, and a max over the rows (not fused: a reduction of its own)
    "row_norm": (lambda Z, w: np.sum(Z * w / np.sqrt(np.sum(Z * Z, axis=1, keepdims=True)))
                 + np.sum(np.max(Z * Z, axis=1)), [_r(5000, 8), _r(8)]),
}


def _plan(f, args, **kw):
    return ha.compile(f, *args, argnums=tuple(range(len(args))), tiered=False, **kw)


def _blocked(plan):
    return "scb = " in plan._program.source


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_in_blocks_give_the_row_loops_bits(name, dtype, parallel, monkeypatch):
    f, args = CASES[name]
    args = [a.astype(dtype) for a in args]
    plan = _plan(f, args, parallel=parallel)
    assert _blocked(plan), plan._program.source
    assert parallel or "prange(" not in plan._program.source  # (serial: no loop on threads)
    monkeypatch.setattr(rowblocks, "ROWS_BELOW", 2)  # one row at a time
    rows = _plan(f, args, parallel=parallel)
    assert not _blocked(rows)
    assert_same_bits_and_right(f, args, plan, rows, dtype)


def test_rows_shorter_than_eight_stay_a_row_at_a_time():
    """Below 8 a row is summed plainly (not compensated) and the row loop is
    the faster -- but for a transcendental of the row's own operand (a
    softmax's ``exp(Z - m)``)."""
    Z, m = _r(5000, 5), _r(5000, 1)
    assert not _blocked(_plan(lambda Z: np.sum(np.log(np.sum(np.exp(Z), axis=1))), [Z]))
    assert not _blocked(_plan(lambda Z: np.sum(np.sum(Z * Z - m, axis=1) ** 2), [Z]))
    assert _blocked(_plan(lambda Z: np.sum(np.log(np.sum(np.exp(Z - m), axis=1))), [Z]))


def test_nan_and_infinity_in_a_row_as_numpy():
    """A NaN in a row makes its sum NaN, an infinity infinite, as the
    row-at-a-time loop (and numpy) did."""
    Z = _r(2000, 11)
    Z[3, 2], Z[7, 0] = np.nan, np.inf
    f = lambda Z: np.sum(np.sum(Z * 3.0, axis=1)[:9])  # noqa: E731
    plan = _plan(f, [Z])
    assert _blocked(plan)
    with np.errstate(invalid="ignore"):
        assert np.isnan(plan.gradient(Z).value) and np.isnan(f(Z))
    Z[3, 2] = 0.0
    assert plan.gradient(Z).value == np.inf == f(Z)
