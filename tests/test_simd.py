"""Generated numba functions ask LLVM for 512-bit vectors where the cost table
says the machine runs them faster (hybridad.backends.numba.simd): the mark is
the first statement of every function and prange body, it reaches the LLVM
function, and a plan gives the same bits with it as without it."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import hybridad as ha
from hybridad.backends.numba import simd
from hybridad.testing import count_allocations
from hybridad.transforms import costs as C


def f(x, w):
    return np.sum(np.tanh(x * w) * np.exp(-x * x)) + np.sum(np.sin(x) * w) / x.size


@pytest.fixture
def bits(monkeypatch):
    def use(value):
        monkeypatch.setattr(C.costs(), "simd_bits", value)
        ha.clear_cache()

    yield use
    ha.clear_cache()


def _marked(source):
    """Whether every @njit function and every prange body starts with the mark."""
    lines = source.split("\n")
    starts = [k + 1 for k, line in enumerate(lines)
              if (line.startswith("def ") and lines[k - 1].startswith("@njit("))
              or " in prange(" in line]
    return bool(starts) and all(lines[k].strip() == simd.CALL for k in starts)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parallel", [True, False])
def test_wide_plans_are_marked_and_give_the_same_bits(bits, dtype, parallel):
    x = np.linspace(-2.0, 2.0, 40000).astype(dtype)
    w = np.linspace(0.5, 1.5, 40000).astype(dtype)
    bits(None)
    narrow = ha.compile(f, x, w, parallel=parallel, tiered=False)
    assert simd.CALL not in narrow._program.source
    bits(512)
    wide = ha.compile(f, x, w, parallel=parallel, tiered=False)
    source = wide._program.source
    assert simd.IMPORT in source and _marked(source)
    assert ("prange(" in source) == parallel
    a, b = narrow.gradient(x, w), wide.gradient(x, w)
    assert a.value == b.value
    for ga, gb in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_array_equal(ga, gb)
    ref = ha.gradient(f, x, w, backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for gr, gb in zip(ref.gradient, b.gradient, strict=True):
        np.testing.assert_allclose(gb, gr, rtol=tol, atol=tol)
    wide.gradient(x, w, out=b)
    with count_allocations() as counts:
        for _ in range(3):
            wide.gradient(x, w, out=b)
    assert counts.allocations == 0, counts


def test_the_mark_reaches_the_llvm_function_and_nothing_else():
    @njit(cache=False)
    def marked(x):
        simd.prefer_wide()
        return x + 1.0

    @njit(cache=False)
    def plain(x):
        return x + 1.0

    assert marked(1.0) == 2.0 and plain(1.0) == 2.0
    ir = next(iter(marked.inspect_llvm().values()))
    assert simd.ATTRIBUTE in ir
    assert simd.ATTRIBUTE not in next(iter(plain.inspect_llvm().values()))


def test_widen_marks_functions_and_prange_bodies_only():
    src = ["@njit(cache=True)", "def g(a):", "    for i in prange(3):  # rows",
           "        for j in range(2):", "            a[i] += j", "    return a",
           "def helper(b):", "    return b"]
    out = simd.widen(src)
    assert out == ["@njit(cache=True)", "def g(a):", "    " + simd.CALL,
                   "    for i in prange(3):  # rows", "        " + simd.CALL,
                   "        for j in range(2):", "            a[i] += j", "    return a",
                   "def helper(b):", "    return b"]


def test_calibration_measures_a_ratio():
    ratio = simd.measure(n=1024, rounds=2)
    assert 0.0 < ratio < 10.0
