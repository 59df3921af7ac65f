"""Reductions written so that LLVM vectorizes them, with the same bits as the
plain form:

* a sum over the batch axis into a short row of accumulators (a bias
  gradient: ``acc[j] += v[i, j]``, 16 features) runs its loop over the row to
  a count LLVM cannot see, so that the loop vectorizes instead of unrolling
  into scalar code (hybridad.backends.numba.reduce.accumulates_across);
* a float32 sum's two-phase blocks hold float32 values (folded in float64 by
  folds.fold_sum_wide), so its loop stores float32 only and runs eight wide.

Checked: the same bits as the plain form, right against finite differences
or a float64 reference, packed vector arithmetic in the machine code on x86-64."""

import platform
import re

import numpy as np
import pytest

from conftest import divides_vectors

import hybridad as ha
from hybridad.backends.numba import reduce as R
from hybridad.testing import assert_no_alloc, check_grads


def _loss(W, b, X):
    return np.sum(np.tanh(X @ W + b) ** 2)


def _problem(dtype, batch=40000):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((batch, 16)).astype(dtype)
    W = (rng.standard_normal((16, 16)) / 4).astype(dtype)
    b = (rng.standard_normal(16) / 10).astype(dtype)
    return W, b, X


def _plan(dtype, parallel, hidden=True, monkeypatch=None):
    W, b, X = _problem(dtype)
    if not hidden:
        monkeypatch.setattr(R, "accumulates_across", lambda *a: False)
    plan = ha.compile(_loss, W, b, X, argnums=(0, 1), parallel=parallel)
    return plan, (W, b, X)


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_float32_batch_sum_hides_its_row_count_and_keeps_the_bits(parallel, monkeypatch):
    plan, args = _plan(np.float32, parallel)
    src = plan._program.source
    # the bias gradient's region: a sum over axis 0 of (40000, 16), float64 partials
    assert "range(_ln)" in src and "_ln = 16 + (" in src
    res = ha.GradientResult((args[0], args[1]))
    plan.gradient(*args, out=res)
    with monkeypatch.context() as m:
        plain, _ = _plan(np.float32, parallel, hidden=False, monkeypatch=m)
    assert "_ln" not in plain._program.source
    ref = ha.GradientResult((args[0], args[1]))
    plain.gradient(*args, out=ref)
    for got, want in zip(res.gradient, ref.gradient, strict=True):  # same order of additions
        np.testing.assert_array_equal(got, want)
    assert res.value == ref.value
    assert_no_alloc(plan.gradient, *args, out=res, n=10)  # repeated calls allocate nothing
    # and right: against the float64 numpy backend
    exact = ha.compile(_loss, *(a.astype(np.float64) for a in args), argnums=(0, 1),
                       backend="numpy")
    ex = ha.GradientResult((args[0].astype(np.float64), args[1].astype(np.float64)))
    exact.gradient(*(a.astype(np.float64) for a in args), out=ex)
    for got, want in zip(res.gradient, ex.gradient, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-3 * np.abs(want).max())


def test_float64_compensated_sums_keep_their_constant_count():
    """float64 batch sums are compensated (two arrays per element): they
    vectorize with the constant count, so no ``_ln`` there -- and the
    gradient matches finite differences."""
    plan, (W, b, X) = _plan(np.float64, True)
    assert "_ln" not in plan._program.source
    check_grads(lambda b, W, X: _loss(W, b, X), b, W, X)  # the bias's batch sum


def _batch_sum_kernel(hidden, monkeypatch):
    """The emitter's float32 sum over axis 0 of (4096, 16) as a numba function
    compiled here (not from the disk cache, whose code cannot be inspected)."""
    from numba import njit

    from hybridad.backends.numba.loops import LoopWriter

    with monkeypatch.context() as m:
        if not hidden:
            m.setattr(R, "accumulates_across", lambda *a: False)
        w = LoopWriter(indent=1)
        R.reduction_nest(w, "sum", np.float32, (0,), True, (4096, 16), [], "x[i0, i1]", "out",
                         scratch="sc", parallel=False)
    ns = {"np": np}
    exec("def kernel(x, out, sc):\n" + "\n".join(w.lines), ns)  # noqa: S102
    return njit(error_model="numpy")(ns["kernel"]), "_ln" in "\n".join(w.lines)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 machine code")
def test_the_hidden_count_loop_vectorizes(monkeypatch):
    """Packed (ymm/zmm) float64 adds in the machine code of the emitter's
    float32 batch sum (four or eight accumulators per instruction; with the
    count in sight numba 0.68's LLVM emits scalar adds only) -- and the same
    bits as the constant count's loop."""
    x = np.random.default_rng(0).standard_normal((4096, 16)).astype(np.float32)
    outs = []
    for hidden in (True, False):
        kernel, has = _batch_sum_kernel(hidden, monkeypatch)
        assert has == hidden
        out, sc = np.empty((1, 16), np.float32), np.empty(1024, np.float64)
        kernel(x, out, sc)
        outs.append(out)
        asm = "\n".join(kernel.inspect_asm(sig) for sig in kernel.signatures)
        if hidden:
            assert re.search(r"vaddpd\s+[^\n]*[yz]mm", asm), "the batch sum did not vectorize"
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0][0], x.astype(np.float64).sum(axis=0), rtol=1e-6)


@pytest.mark.parametrize("width, n", [(1, 1), (2, 1), (8, 8), (1024, 1000), (1024, 3)])
def test_fold_sum_wide_is_fold_sum_in_float64(width, n):
    """folds.fold_sum_wide on a float32 block: the bits of folds.fold_sum on the same
    block widened to float64 (the same additions), its half-size float64
    buffer the only memory it writes besides the block's padding."""
    from hybridad.backends.numba.folds import fold_sum, fold_sum_wide

    rng = np.random.default_rng(width + n)
    block = (rng.standard_normal(width) * 10 ** rng.uniform(-3, 3, width)).astype(np.float32)
    wide64 = block.astype(np.float64)
    want = fold_sum(wide64.copy(), n)
    wide = np.full(max(width // 2, 1), np.nan)
    got = fold_sum_wide(block.copy(), n, wide)
    assert got == want and isinstance(got, float)
    assert got == np.sum(block[:n].astype(np.float64)) or n > 2  # tiny blocks: exact


def _levels(block, n):
    """The pairwise sum level by level, in Python: pad with zeros from ``n``,
    then ``b[i] += b[i + h]`` for halves ``h``; fewer than 8 values in order
    from 0 (numpy's base case: folds.IN_ORDER)."""
    if n < 8:
        s = 0.0
        for v in block[:n]:
            s += float(v)
        return s
    b = [float(v) for v in block[:n]] + [0.0] * (block.size - n)
    h = len(b) // 2
    while h >= 1:
        b = [b[i] + b[i + h] for i in range(h)]
        h //= 2
    return b[0]


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
def test_folds_add_level_by_level(width):
    """folds.fold_sum (two levels per pass) and fold_sum_wide (its float32
    block widened): the bits of the level-by-level pairwise sum, at every
    power-of-two width (an odd and an even count of levels), full and
    padded blocks, values over twelve decades (every addition rounds), and
    inf and nan where they come."""
    from hybridad.backends.numba.folds import fold_sum, fold_sum_wide

    rng = np.random.default_rng(width)
    for n in sorted({1, max(1, width // 2 + 1), max(1, width - 3), width}):
        block = rng.standard_normal(width) * 10 ** rng.uniform(-6, 6, width)
        block32 = block.astype(np.float32)
        assert fold_sum(block.copy(), n) == _levels(block, n)
        got = fold_sum_wide(block32.copy(), n, np.full(max(width // 4, 1), np.nan))
        assert got == _levels(block32.astype(np.float64), n)
    if width >= 4:
        block = rng.standard_normal(width)
        block[width // 3] = np.inf
        assert fold_sum(block.copy(), width) == np.inf
        block[width - 1] = -np.inf
        assert np.isnan(fold_sum(block.copy(), width))
        assert np.isnan(fold_sum_wide(block.astype(np.float32), width, np.zeros(width // 4)))


def _sums(x):
    return np.sum(np.exp(-x * x)) + np.sum(np.sin(x) ** 2, axis=1) @ np.ones(x.shape[0],
                                                                             x.dtype)


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_float32_block_sums_store_float32_and_keep_the_bits(parallel, monkeypatch):
    """A full float32 sum (two-phase blocks) and a row sum over 5000 float32
    values (blocked rows) store their values as float32 and fold them with
    fold_sum_wide: the same value and gradient bits as with float64 blocks,
    and the value within float32 rounding of the float64 sum."""
    x = np.random.default_rng(5).uniform(-2, 2, (8, 5000)).astype(np.float32)
    plan = ha.compile(_sums, x, parallel=parallel)
    src = plan._program.source
    assert src.count("_fold_sum_wide(") >= 2 and "_n = _view(" in src
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    with monkeypatch.context() as m:
        m.setattr(R, "_narrow", lambda *a: False)
        wide = ha.compile(_sums, x, parallel=parallel)
    assert "_fold_sum_wide(" not in wide._program.source
    ref = ha.GradientResult(x)
    wide.gradient(x, out=ref)
    assert res.value == ref.value
    np.testing.assert_array_equal(res.gradient, ref.gradient)
    assert_no_alloc(plan.gradient, x, out=res, n=10)  # repeated calls allocate nothing
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(res.value, _sums(x64), rtol=2e-7)
    g64 = -2 * x64 * np.exp(-x64 * x64) + 2 * np.sin(x64) * np.cos(x64)
    np.testing.assert_allclose(res.gradient, g64, rtol=1e-5, atol=1e-6)


_LAYER = """
import numpy as np, hybridad as ha
rng = np.random.default_rng(0)
X, W, b = rng.standard_normal((4096, 16)), rng.standard_normal((16, 16)), rng.standard_normal(16)
plan = ha.compile(lambda W, b, X: np.sum(np.tanh(X @ W + b) @ W), W, b, X, argnums=(0, 1),
                  parallel=False)
src = plan._program.source
assert "_lz = (" in src and "_vmi_tanh(" in src, src
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 vectors")
def test_a_hidden_inner_count_is_non_negative_and_its_tanh_loop_vectorizes(tmp_path):
    """A serial nest's hidden zero (``(address >> 63) & 1``) lets LLVM drop
    the wraparound of negative indices, so the loop over a tanh layer's 16
    columns vectorizes: the optimized IR of hybridad's compiler divides
    vectors (tanh's ``e / (e + 2)``).  With the arithmetic shift alone (0 or
    -1) every division was scalar (the MLP's serial gradient 4.8 -> 1.8 ms
    at B = 10^4)."""
    assert divides_vectors(tmp_path, _LAYER), "the tanh loop stayed scalar"
