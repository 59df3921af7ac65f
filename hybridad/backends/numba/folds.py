"""The pairwise fold closing each block of a full reduction, and the in-order
compensated sum of the blocks' sums (:mod:`.reduce` emits the calls).

Shared, compiled once per dtype (not emitted into every plan: numba spends
milliseconds per generated line).  ``block`` has a power-of-two length; its
first ``n`` elements hold the block's values.  The tail is padded with the
identity and halves are folded: each level is a dependency-free loop that
vectorizes under strict IEEE order, as accurate as numpy's pairwise sum.
The sums fold two levels per pass (``(b[i] + b[i + 2q]) + (b[i + q] + b[i +
3q])``, the additions of the two levels, so the same bits): half the passes,
and each reads a quarter where a level wrote back a half (an exp -> sum over
10^6 elements on one thread, medians: the folds of float32 blocks 387 -> 227 us
of 1058 -> 898, of float64 blocks 255 -> 192 us of 1964 -> 1901).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from ..._libcache import install

__all__ = ["fold_max", "fold_min", "fold_prod", "fold_sum", "fold_sum_wide", "sum_compensated"]


install()  # numba's cache of the functions below: stamped with their imports' source


#: fewer values than this a block adds in order, as numpy's pairwise sum does
#: (its base case): ``[1e17, -1e17, 1]`` sums to 1 as in numpy, where the
#: fold's pairs ``(1e17 + 1) + -1e17`` gave 0
IN_ORDER = 8


@njit(cache=True)
def fold_sum(block, n):
    if n < IN_ORDER:
        return _in_order(block, n)
    for t in range(n, block.size):
        block[t] = 0
    return _fold_levels(block)


@njit(inline="always", cache=True)
def _in_order(block, n):
    """The first ``n`` values added in order from +0, as numpy does (float32
    in float64; a complex block's sum complex)."""
    s = 0.0
    for t in range(n):
        s += block[t]
    return s


@njit(inline="always", cache=True)
def _fold_levels(block):
    """The pairwise levels of a padded ``block``, two per pass (each quarter
    a slice: LLVM then sees four streams and the one it writes)."""
    s = block.size
    while s >= 4:
        q = s // 4
        a, b, c, d = block[:q], block[q:2 * q], block[2 * q:3 * q], block[3 * q:4 * q]
        for i in range(q):
            a[i] = (a[i] + c[i]) + (b[i] + d[i])
        s = q
    return block[0] + block[1] if s == 2 else block[0]


@njit(cache=True)
def fold_sum_wide(block, n, wide):
    """:func:`fold_sum` of a float32 ``block`` in float64: padded with zeros
    from ``n``, its first two levels' sums (widened) into ``wide`` (float64,
    at least a quarter of the block's size, not overlapping it), then folded
    there -- the additions :func:`fold_sum` makes on the block widened to
    float64, so the same bits.  A float32 region's loop then stores float32
    values: with float64 stores LLVM ran the loop four elements wide, with
    float32 eight (an exp -> sum region over 10^6 float32: 1.70 -> 0.95 ms)."""
    if n < IN_ORDER:
        return _in_order(block, n)
    for t in range(n, block.size):
        block[t] = 0
    s = block.size
    if s < 4:
        return np.float64(block[0]) + np.float64(block[1]) if s == 2 else np.float64(block[0])
    q = s // 4  # slices, not block[i + h]: that loop did not vectorize
    a, b, c, d = block[:q], block[q:2 * q], block[2 * q:3 * q], block[3 * q:4 * q]
    w = wide[:q]
    for i in range(q):
        w[i] = (np.float64(a[i]) + np.float64(c[i])) + (np.float64(b[i]) + np.float64(d[i]))
    return _fold_levels(w)  # the levels after the first two


@njit(cache=True)
def sum_compensated(a):
    """The sum of ``a`` (non-empty, 1-D) added in order with Knuth's TwoSum
    compensation (see :mod:`.reduce`): the blocks' sums of a parallel full
    reduction, in an order that does not depend on the thread count."""
    s = a[0]
    c = s - s  # NaN only when s is not finite, and then s stays so
    for i in range(1, a.size):
        v = a[i]
        t = s + v
        z = t - s
        c += (s - (t - z)) + (v - z)
        s = t
    return s + c if s - s == 0 else s


@njit(cache=True)
def fold_prod(block, n):
    for t in range(n, block.size):
        block[t] = 1
    h = block.size // 2
    while h >= 1:
        for i in range(h):
            block[i] *= block[i + h]
        h //= 2
    return block[0]


@njit(cache=True)
def fold_max(block, n, pad):
    for t in range(n, block.size):  # pad: the identity in the block's dtype
        block[t] = pad
    h = block.size // 2
    while h >= 1:
        for i in range(h):  # selects, no branches; NaN propagates like numpy
            va, vb = block[i], block[i + h]
            block[i] = vb if (vb > va or vb != vb) else va
        h //= 2
    return block[0]


@njit(cache=True)
def fold_min(block, n, pad):
    for t in range(n, block.size):
        block[t] = pad
    h = block.size // 2
    while h >= 1:
        for i in range(h):
            va, vb = block[i], block[i + h]
            block[i] = vb if (vb < va or vb != vb) else va
        h //= 2
    return block[0]
