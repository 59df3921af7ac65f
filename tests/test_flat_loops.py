"""Loop nests collapsed into one loop (``backends/numba/loops.py``,
:func:`collapse`): a fused region whose operands and results are all
C-contiguous arrays of its whole shape runs as ONE loop over its elements
through flat views.  With a constant inner axis of a few elements (particle
coordinates ``(N, 3)``, a layer of 8 units) LLVM unrolled the inner loop and
vectorized neither: a ``(125000, 8)`` tanh gradient took 3x a ``(10^6,)``
one.  The flat loop visits the same elements in the same order, so its bits
are the nest's."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from conftest import divides_vectors

import hybridad as ha
from hybridad.backends.numba import loops as L
from hybridad.testing import count_allocations

RNG = np.random.default_rng(3)

CASES = {
    # a full sum (blocks of rows in a prange), a product of two full arrays, a
    # region without a reduction read by a matmul, a small serial one, 3-D
    "tanh_sum": (lambda x: np.sum(np.tanh(x)), [RNG.standard_normal((20000, 8))]),
    "two_arrays": (lambda x, y: np.sum(np.exp(-x * x) * y + np.sin(y)),
                   [RNG.standard_normal((9000, 4)), RNG.standard_normal((9000, 4))]),
    "into_matmul": (lambda x, W: np.sum((np.tanh(x) * x) @ W),
                    [RNG.standard_normal((3000, 8)), RNG.standard_normal((8, 5))]),
    "small": (lambda x: np.sum(np.log1p(x * x)), [RNG.standard_normal((7, 3))]),
    "three_d": (lambda x: np.sum(np.cos(x) ** 2), [RNG.standard_normal((200, 30, 3))]),
}


def _plan(f, args, **kw):
    return ha.compile(f, *args, argnums=tuple(range(len(args))), **kw)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_collapsed_nest_gives_the_nests_bits(name, dtype, parallel, monkeypatch):
    f, args = CASES[name]
    args = [a.astype(dtype) for a in args]
    plan = _plan(f, args, parallel=parallel)
    source = plan._program.source
    assert "_fl[i0]" in source, source
    res = plan.new_result()
    plan.gradient(*args, out=res)
    with count_allocations() as counts:
        plan.gradient(*args, out=res)
    assert counts.allocations == 0, counts
    # the same plan with every nest kept: the same bits
    monkeypatch.setattr(L, "collapse", lambda *a, **k: None)
    nested = _plan(f, args, parallel=parallel)
    assert "_fl[i0]" not in nested._program.source
    want = nested.gradient(*args)
    assert float(res.value) == float(want.value)
    for got, ref in zip(res.gradient, want.gradient, strict=True):
        np.testing.assert_array_equal(got, ref)
    # and right: the numpy reference, and central differences in float64
    ref = _plan(f, args, backend="numpy").gradient(*args)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for got, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, r, **tol)
    if dtype == np.float64:
        _check_some_differences(f, args, res.gradient[0])


def _check_some_differences(f, args, g, count=5):
    """Central differences of ``f`` in its first argument at a few elements."""
    x = args[0].copy()
    for k in np.linspace(0, x.size - 1, count).astype(int):
        at = np.unravel_index(k, x.shape)
        h = 1e-6 * max(1.0, abs(x[at]))
        old = x[at]
        x[at] = old + h
        up = f(x, *args[1:])
        x[at] = old - h
        down = f(x, *args[1:])
        x[at] = old
        assert abs((up - down) / (2 * h) - g[at]) <= 1e-6 * max(1.0, abs(g[at])), (at, g[at])


def test_what_is_not_one_array_of_the_whole_shape_stays_a_nest():
    """A column broadcast along the columns, a transposed operand, a
    reduction over rows of 40: the nest is kept (a flat loop would need a
    division or a stride; a row broadcast, a bias, is read from a tile:
    test_row_tiles.py; short rows reduced run in blocks: test_row_blocks.py)."""
    x = RNG.standard_normal((3000, 8))
    c = RNG.standard_normal((3000, 1))
    for f, args in ((lambda x, c: np.sum(np.tanh(x * c)), [x, c]),
                    (lambda x, y: np.sum(np.tanh(x * y.T)), [x, RNG.standard_normal((8, 3000))]),
                    (lambda x: np.sum(np.sum(np.tanh(x), axis=1) ** 2),
                     [RNG.standard_normal((300, 40))])):
        plan = _plan(f, args)
        region = plan._program.source.split("region(", 1)[1].split("# %", 1)[0]
        assert "_fl[i0]" not in region, region
        _check_some_differences(f, args, plan.gradient(*args).gradient[0])


def test_collapse_refuses_any_other_read():
    body = ["v = a[i0, i1] * b[i1]", "o[i0, i1] = v"]
    assert L.collapse((10, 8), body, {"a", "b", "o"}) is None  # b broadcast
    assert L.collapse((10, 8), ["o[i0, i1] = a[i1, i0]"], {"a", "o"}) is None  # transposed
    assert L.collapse((10, 8), ["o[i0, i1] = a[i0, i1] + i1"], {"a", "o"}) is None  # an index
    assert L.collapse((10, 8), ["o[i0, i1] = a[i0, i1]"], {"o"}) is None  # a not known flat
    shape, body, views = L.collapse(("nr", 8), ["o[i0, i1] = a[i0, i1] * 2.0"], {"a", "o"})
    assert shape == ("(nr) * 8",) and body == ["o_fl[i0] = a_fl[i0] * 2.0"]
    assert views == ["o_fl = o.reshape(o.size)", "a_fl = a.reshape(a.size)"]


_EIGHT = """
import numpy as np, hybridad as ha
x = np.random.default_rng(0).standard_normal((125000, 8))
plan = ha.compile(lambda x: np.sum(np.tanh(x)), x)
plan.gradient(x)
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 vectors")
def test_an_inner_axis_of_eight_vectorizes(tmp_path):
    """The (125000, 8) tanh gradient's loop divides vectors in the optimized
    IR of hybridad's compiler (tanh's ``e / (e + 2)``); as a nest with a
    constant inner count of 8 every division was scalar."""
    assert divides_vectors(tmp_path, _EIGHT), "the tanh loop stayed scalar"
