"""The vectorizable exp/expm1/log/log1p/logaddexp/tanh of the numba backend against numpy.

Accuracy in ulps over the whole double range (random samples on linear and
logarithmic scales, the neighbourhood of 0, the overflow and underflow edges)
and exact agreement on special values.
"""

import numpy as np
import pytest
from numba import njit

from hybridad.backends.numba import vmath


def _loop(fn):
    @njit(error_model="numpy")
    def apply(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    return apply


def _loop2(fn):
    @njit(error_model="numpy")
    def apply(x, y, out):
        for i in range(x.size):
            out[i] = fn(x[i], y[i])

    return apply


BINARY = {"logaddexp"}
KERNELS = {name: (_loop2 if name in BINARY else _loop)(getattr(vmath, fn))
           for name, fn in vmath.VECTOR_UFUNCS.items()}
MAX_ULP = {"exp": 2, "expm1": 2, "log": 2, "log1p": 2, "logaddexp": 2, "tanh": 3}

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, -1e-310,
                    2.2250738585072014e-308, 1e-300, -1e-300, 1e-20, -1e-20, 1e-8, -1e-8,
                    0.34657359027997264, -0.34657359027997264, 1.0, -1.0, 19.06, -19.06,
                    20.0, -20.0, 22.0, 40.0, -40.0, 60.0, -60.0, 100.0, -100.0,
                    709.78, 709.7827, 709.79, 710.0, -708.4, -708.39, -745.1, -745.13,
                    -745.14, -746.0, -1e300, 1e300, 1.7976931348623157e308])


def _samples(rng):
    n = 200_000
    return np.concatenate([
        rng.uniform(-750.0, 712.0, n),
        rng.uniform(-30.0, 30.0, n),
        rng.uniform(-1.0, 1.0, n),
        rng.uniform(-1e-3, 1e-3, n),
        np.exp(rng.uniform(-745.0, 709.0, n)),
        -np.exp(rng.uniform(-745.0, 709.0, n)),
        SPECIAL,
    ])


def _ulp_error(got, want, magnitude=None):
    with np.errstate(all="ignore"):
        magnitude = want if magnitude is None else magnitude
        scale = np.spacing(np.maximum(np.abs(magnitude), np.finfo(np.float64).tiny))
        err = np.abs(got - want) / scale
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0.0, err)


def _operands(name, x, rng):
    """``x`` as the operands of ``name``: a binary function's second operand
    is ``x`` shuffled, ``x`` itself (equal operands) and ``x`` moved by a
    little (close operands: the log1p of nearly 1)."""
    if name not in BINARY:
        return (x,)
    y = np.concatenate([rng.permutation(x), x, x * (1 + rng.uniform(-1e-6, 1e-6, x.size))])
    return np.concatenate([x, x, x]), y


@pytest.mark.parametrize("name", sorted(vmath.VECTOR_UFUNCS))
def test_within_ulps_of_numpy_over_the_whole_range(name):
    rng = np.random.default_rng(7)
    args = _operands(name, _samples(rng), rng)
    got = np.empty_like(args[0])
    KERNELS[name](*args, got)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(*args)
        # logaddexp is the larger operand plus a log1p in [0, log 2]: where they
        # cancel (x = y = -log 2 + a little) numpy's result is as far off, in its
        # own ulps; both are compared in the ulps of the larger of the two terms
        scale = want
        if name in BINARY:
            big = np.maximum(*args)
            scale = np.maximum(np.maximum(np.abs(want), np.abs(big)), np.abs(want - big))
    err = _ulp_error(got, want, scale)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP[name], (name, [a[worst] for a in args], got[worst],
                                         want[worst])


@pytest.mark.parametrize("name", sorted(vmath.VECTOR_UFUNCS))
def test_special_values_match_numpy_exactly_in_kind(name):
    if name in BINARY:  # every pair of special values
        x, y = np.meshgrid(SPECIAL, SPECIAL)
        args = (x.ravel(), y.ravel())
    else:
        args = (SPECIAL,)
    got = np.empty_like(args[0])
    KERNELS[name](*args, got)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(*args)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(want[~np.isnan(want)]))
    np.testing.assert_array_equal(got == 0, want == 0)


def test_kernels_use_the_vectorizable_forms():
    """Generated region code calls vmath: float64 directly, float32 through
    the float32 twins in float64 (one rounding) or, for exp and tanh, vmath's
    float32 functions, since libm's float32 functions do not vectorize."""
    import hybridad as ha

    def f(x):
        return np.sum(np.tanh(np.exp(x)) + np.log1p(x * x))

    x = np.linspace(0.1, 1.0, 5)
    src = ha.compile(f, x)._program.source
    assert "_vm_exp(" in src and "_vm_tanh(" in src and "_vm_log1p(" in src
    assert "np.log1p(" not in src
    src32 = ha.compile(f, x.astype(np.float32))._program.source
    body32 = src32.split("def plan_fn")[1]
    assert "_vm_expf(" in body32 and "_vm_tanhf(" in body32
    assert "np.float64(_vm_tanh" not in body32 and "np.float64(_vm_exp" not in body32


KERNELS32 = {name: (_loop2 if name in BINARY else _loop)(getattr(vmath, fn))
             for name, fn in vmath.FLOAT32_UFUNCS.items()}


def _float32_samples():
    """Every 251st float32 bit pattern, both signs: ~34 million values over
    the whole range (subnormals, the overflow edges, inf and nan included)."""
    bits = np.arange(0, 0x7F800001, 251, dtype=np.uint32)
    pos = bits.view(np.float32)
    edges = np.array([0.0, np.inf, np.nan, 88.72283, 88.72284, 89.0, -87.33655, -103.97208,
                      -103.9721, -104.0, 1e-45, 9.0, 9.02, 10.0, 1.0, 0.5], dtype=np.float32)
    return np.concatenate([pos, -pos, edges, -edges])


@pytest.mark.parametrize("name", sorted(vmath.FLOAT32_UFUNCS))
def test_float32_twins_round_to_within_half_an_ulp_and_a_bit(name):
    """Widened, evaluated and rounded once, a float32 twin is within
    0.5 + 1/16 ulp of the exact value (its float64 error is below 2**-30
    relative), and special values come out as numpy's float32 function gives."""
    x32 = _float32_samples()
    if name in BINARY:  # (a sample of pairs: the neighbours, shuffled, and equal ones)
        rng = np.random.default_rng(3)
        x32 = x32[rng.choice(x32.size, 2_000_000, replace=False)]
        args32 = _operands(name, x32, rng)
        args32 = (args32[0], args32[1].astype(np.float32))
    else:
        args32 = (x32,)
    args = tuple(a.astype(np.float64) for a in args32)
    x = args[0]
    got = np.empty_like(x)
    KERNELS32[name](*args, got)
    got32 = got.astype(np.float32)
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(*args)  # float64: exact to far below a float32 ulp
        want32 = getattr(np, name)(*args32)
    finite = np.isfinite(exact) & np.isfinite(got32.astype(np.float64)) & \
        (np.abs(exact) <= np.finfo(np.float32).max)
    ulp = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64)
    err = np.abs(got32[finite].astype(np.float64) - exact[finite]) / ulp
    worst = int(np.argmax(err))
    assert err[worst] <= 0.5 + 1 / 16, (name, x[finite][worst], got32[finite][worst])
    np.testing.assert_array_equal(np.isnan(got32), np.isnan(want32))
    np.testing.assert_array_equal(np.isposinf(got32), np.isposinf(want32))
    np.testing.assert_array_equal(np.isneginf(got32), np.isneginf(want32))
    np.testing.assert_array_equal(np.signbit(got32[~np.isnan(got32)]),
                                  np.signbit(want32[~np.isnan(want32)]))


KERNELS_F = {name: _loop(getattr(vmath, fn)) for name, fn in vmath.FLOAT32_NATIVE.items()}


@pytest.mark.parametrize("name", sorted(vmath.FLOAT32_NATIVE))
def test_float32_arithmetic_functions_within_one_and_a_half_ulps(name):
    """vmath's float32-arithmetic functions (exp, tanh) on float32 values:
    within 1.5 ulp of the exact value (numpy's float32 exp: 2.36, tanh: 1.37;
    found over every float32 of their finite range: exp 1.02, tanh 1.33),
    tanh exactly odd, special values (inf, nan, signed zeros, subnormals,
    overflow) as numpy's float32 function gives, and every float32 where the
    error peaks checked too (tanh: from 0.55 to 0.7, the switch between its
    two formulas; exp: the subnormal results, within one subnormal step)."""
    x32 = _float32_samples()
    lo, hi = {"tanh": (0.55, 0.7), "exp": (87.0, 104.0)}[name]  # magnitudes, both signs
    near = np.arange(np.float32(lo).view(np.int32), np.float32(hi).view(np.int32),
                     dtype=np.int32).view(np.float32)
    x32 = np.concatenate([x32, near, -near])
    got32 = np.empty_like(x32)
    KERNELS_F[name](x32, got32)
    with np.errstate(all="ignore"):
        exact = getattr(np, name)(x32.astype(np.float64))
        want32 = getattr(np, name)(x32)
    finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(np.float32).max)
    ulp = np.spacing(np.maximum(np.abs(exact[finite]).astype(np.float32),
                                np.finfo(np.float32).tiny)).astype(np.float64)
    sub = finite & (np.abs(exact) < np.finfo(np.float32).tiny)
    step = np.abs(got32[sub].astype(np.float64) - exact[sub]) / 2.0 ** -149
    assert step.size == 0 or step.max() <= 1.0, (name, x32[sub][np.argmax(step)])
    err = np.abs(got32[finite].astype(np.float64) - exact[finite]) / ulp
    worst = int(np.argmax(err))
    assert err[worst] <= 1.5, (name, x32[finite][worst], got32[finite][worst])
    assert err[worst] > 0.5  # (the check sees float32 arithmetic's rounding)
    if name == "tanh":
        neg = np.empty_like(x32)
        KERNELS_F[name](-x32, neg)
        np.testing.assert_array_equal(neg, -got32)
    np.testing.assert_array_equal(np.isnan(got32), np.isnan(want32))
    np.testing.assert_array_equal(np.isinf(got32), np.isinf(want32))
    np.testing.assert_array_equal(np.signbit(got32[~np.isnan(got32)]),
                                  np.signbit(want32[~np.isnan(want32)]))
    np.testing.assert_array_equal(got32 == 0, want32 == 0)


def test_float32_through_vmath_is_correctly_rounded_mostly():
    import hybridad as ha

    x = np.linspace(-4.0, 4.0, 20001).astype(np.float32)
    w = np.ones_like(x)
    for u in (np.exp, np.tanh, np.expm1, np.log):
        v = np.abs(x) + np.float32(0.01) if u is np.log else x
        res = ha.gradient(lambda v, w, u=u: np.sum(u(v) * w), v, w, argnums=1)  # = u(v)
        exact = u(v.astype(np.float64))
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert res.gradient.dtype == np.float32
        bound = 1.5 if u in (np.tanh, np.exp) else 1.0  # (numpy's: <= 1-4 ulp)
        assert np.max(np.abs(res.gradient - exact) / ulp) <= bound, u


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_prange_regions_call_the_inlined_functions(dtype):
    """A parallel plan's prange loops (a region nest and a blocked full sum),
    and a serial plan's nests as long, call vmath's numba-inlined twins;
    gradients agree with the serial plan and the numpy reference, against
    finite differences, and a repeated call allocates nothing."""
    import hybridad as ha
    from hybridad.testing import count_allocations, numerical_gradient

    def f(x, W):
        h = np.tanh(x[:, None] * W) * np.exp(-0.5 * x[:, None] ** 2)
        return np.sum(np.log(1.5 + h)) + np.sum(np.expm1(0.25 * h))

    x = np.linspace(-1.5, 1.5, 4096).astype(dtype)
    W = np.linspace(0.5, 1.0, 16).astype(dtype)
    par = ha.compile(f, x, W, tiered=False)
    tanh = "_vmi_tanh(" if dtype == np.float64 else "_vmi_tanhf("
    assert "prange(" in par._program.source and tanh in par._program.source
    ref = ha.gradient(f, x, W, backend="numpy")
    serial = ha.compile(f, x, W, parallel=False)
    # serial, the nests of 2^16 elements call them too (in a large plan
    # function LLVM stops inlining the plain ones after a few call sites)
    assert "prange(" not in serial._program.source and tanh in serial._program.source
    ser = serial.gradient(x, W)
    res = par.gradient(x, W)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(res.gradient, ser.gradient, rtol=tol, atol=tol)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=tol, atol=tol)
    if dtype == np.float64:
        fd = numerical_gradient(lambda z: f(np.concatenate([z, x[64:]]), W), x[:64].copy())
        np.testing.assert_allclose(res.gradient[:64], fd, rtol=1e-6, atol=1e-8)
    par.gradient(x, W, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            par.gradient(x, W, out=res)
    assert counts.allocations == 0, counts
