"""scipy.special beyond the basics: incomplete gamma and beta functions, Bessel
functions of real order, exponential integrals, spence, kl_div, dawsn,
factorial, multigammaln.

Values against scipy on grids with edge regions (both CPU backends in one
plan, CUDA helpers by an nvcc host build), gradients and Hessians against
central differences away from the registry's sample domains (one plan per
backend), a cross-check with jax.scipy.special, zero allocations per call and
the partials without a rule refused by name.  (Each op's first derivative on
its domain is also in test_ops.py, its CUDA spelling in test_cuda_source.py,
its value, gradient and Hessian on its domain in test_scipy_special.py.)"""

import ctypes
import hashlib
import os

import numpy as np
import pytest
import scipy.special as sp
from conftest import BACKENDS, hessian_fd
from cuda_host import NVCC, nvcc_build

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

inf, nan = np.inf, np.nan


# --------------------------------------------------------------------------
# values on edge grids: every op on data arguments, one plan per backend
# --------------------------------------------------------------------------
X = np.array([-3.5, -1.0, -0.0, 0.0, 1e-300, 1e-8, 0.3, 1.0, 2.5, 7.0, 30.0, 200.0, 800.0,
              inf, -inf, nan])
ORDER = np.array([-2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 40.5])
UNARY = ["gammasgn", "k0", "k1", "k0e", "k1e", "exp1", "expi", "spence", "dawsn"]
BINARY = ["gammainc", "gammaincc", "beta", "poch", "jv", "yv", "iv", "ive", "kv", "kve",
          "kl_div", "binom", "boxcox", "boxcox1p"]


def _grid_values(x, a, b, c, n):
    """Each op on its grid (the second operand broadcast across the first)."""
    out = [getattr(sp, name)(x) for name in UNARY]
    out += [getattr(sp, name)(a, b) for name in BINARY]
    out += [sp.betainc(a[:, :, None], b[:, :, None], c), sp.expn(n, b), sp.yn(n, b),
            sp.jn(n, b)]
    return np.concatenate([np.ravel(v) for v in out])


def test_values_equal_scipys_on_edge_grids():
    """Zeros, negatives, tiny and huge arguments, infinities and NaN: the
    kernels' values are scipy's to the bit (numba calls scipy's compiled
    functions; an integer order is truncated as scipy's ufunc does)."""
    a = np.concatenate([ORDER, [2.0, 0.01, 100.0]])[:, None]
    b = X[None, :]
    c = np.array([0.0, 1e-9, 0.3, 0.99, 1.0, 1.5, nan])
    n = np.array([0, 1, 2, 5, 50])[:, None]
    want = _grid_values(X, a, b, c, n)

    def f(x, X, a, b, c):
        return _grid_values(X, a, b, c, n) + 0.0 * x[0]

    for backend in BACKENDS:
        res = ha.jacobian(f, np.ones(1), X, a, b, c, backend=backend)
        np.testing.assert_array_equal(res.value, want, err_msg=backend)


# --------------------------------------------------------------------------
# gradients and Hessians off the sample domains
# --------------------------------------------------------------------------
#: (label, f of a 4-vector, the 4 points): derivative in x; orders and shapes constant
CASES = [
    ("gammainc small x, small a", lambda x: sp.gammainc(0.4, x), [0.02, 0.3, 1.1, 4.0]),
    ("gammainc large a", lambda x: sp.gammainc(30.0, x), [20.0, 28.0, 31.0, 45.0]),
    ("gammaincc", lambda x: sp.gammaincc(2.5, x), [0.05, 1.0, 6.0, 15.0]),
    ("betainc", lambda x: sp.betainc(0.7, 2.5, x), [0.02, 0.3, 0.8, 0.97]),
    ("betainc large", lambda x: sp.betainc(30.0, 40.0, x), [0.3, 0.42, 0.5, 0.6]),
    ("beta negative", lambda x: sp.beta(x, 2.5), [-2.2, -0.3, 0.6, 5.0]),
    ("beta second", lambda x: sp.beta(-1.7, x), [0.4, 1.3, 2.2, 6.5]),
    ("poch", lambda x: sp.poch(x, 2.5) + sp.poch(-1.7, x / 3), [-2.6, -0.4, 1.5, 4.0]),
    ("gammasgn", lambda x: sp.gammasgn(x) * x, [-2.5, -0.5, 0.5, 3.0]),
    ("jv", lambda x: sp.jv(-2.3, x) + sp.jv(0, x) + sp.jv(5.5, x), [0.4, 3.0, 9.0, 30.0]),
    ("jn integer order", lambda x: sp.jn(2, x) + sp.jv(-3, x), [-4.0, -0.5, 2.0, 11.0]),
    ("yv", lambda x: sp.yv(-0.6, x) + sp.yv(3.0, x), [0.7, 2.0, 8.0, 25.0]),
    ("yn", lambda x: sp.yn(3, x) + sp.yn(0, x) + sp.yn(-2, x), [0.8, 3.0, 9.0, 40.0]),
    ("iv", lambda x: sp.iv(-1.5, x + 4) + sp.iv(4, x / 2), [-3.0, 0.3, 2.0, 9.0]),
    ("ive", lambda x: sp.ive(0.4, x + 6) + sp.ive(2, x), [-5.0, 0.1, 3.0, 50.0]),
    ("kv", lambda x: sp.kv(-0.6, x) + sp.kv(7.5, x), [0.6, 1.5, 4.0, 12.0]),
    ("kve", lambda x: sp.kve(2.2, x), [0.3, 1.0, 20.0, 200.0]),
    ("k0 k1", lambda x: sp.k0(x) + sp.k1(x) + sp.k0e(x) + sp.k1e(x), [0.2, 1.0, 5.0, 40.0]),
    ("exp1", lambda x: sp.exp1(x), [0.05, 0.8, 3.0, 20.0]),
    ("expi", lambda x: sp.expi(x), [-4.0, -0.2, 0.3, 1.5]),
    ("expn", lambda x: sp.expn(0, x) + sp.expn(1, x) + sp.expn(3, x), [0.1, 1.0, 2.5, 9.0]),
    ("spence around 1", lambda x: sp.spence(x), [0.05, 1.0, 1.0004, 2.5]),
    ("spence large", lambda x: sp.spence(x), [0.999, 4.0, 9.0, 30.0]),
    ("kl_div", lambda x: sp.kl_div(x, 1.3) + sp.kl_div(0.8, x), [0.1, 0.9, 1.3, 3.0]),
    ("dawsn", lambda x: sp.dawsn(x), [-3.0, 0.0, 0.9, 8.0]),
    ("binom", lambda x: sp.binom(x, 2.5) + sp.binom(6.2, x), [3.1, 3.6, 4.4, 4.9]),
    ("boxcox", lambda x: sp.boxcox(x, 0.3) + sp.boxcox(x, -1.2), [0.2, 0.9, 1.0, 4.0]),
    ("boxcox lmbda", lambda x: sp.boxcox(1.7, x) + sp.boxcox(0.4, x), [-0.5, 0.0, 1e-5, 0.8]),
    ("boxcox1p", lambda x: sp.boxcox1p(x, 0.3) + sp.boxcox1p(0.6, x / 2), [-0.5, 0.0, 0.7, 3.0]),
    ("factorial", lambda x: sp.factorial(x), [-0.5, 0.4, 2.5, 4.0]),
    ("multigammaln", lambda x: sp.multigammaln(x, 4), [1.7, 2.2, 3.5, 6.0]),
]
W = np.linspace(0.5, 1.5, 4)


@pytest.mark.parametrize("backend", [
    "numpy", pytest.param("numba", marks=pytest.mark.slow)])  # numba: 50 s of compiles
def test_gradients_and_hessians_off_the_sample_domains(backend):
    """One Hessian plan per backend, case k on its own block of x."""
    fs = [f for _, f, _ in CASES]
    x = np.concatenate([np.asarray(p, float) for _, _, p in CASES])

    def total(x):
        return sum(np.sum(W * f(x[4 * k:4 * k + 4])) for k, f in enumerate(fs))

    res = ha.hessian(total, x, backend=backend)
    np.testing.assert_allclose(res.value, total(x), rtol=1e-13)
    off = res.hessian.copy()
    for k, (label, f, points) in enumerate(CASES):
        block = slice(4 * k, 4 * k + 4)
        xk = np.asarray(points, float)

        def fk(xk, f=f):
            return np.sum(W * f(xk))

        scale = max(1.0, float(np.max(np.abs(res.gradient[block]))))
        np.testing.assert_allclose(res.gradient[block], numerical_gradient(fk, xk), rtol=1e-6,
                                   atol=1e-8 * scale, err_msg=label)
        hs = max(1.0, float(np.max(np.abs(res.hessian[block, block]))))
        np.testing.assert_allclose(res.hessian[block, block], hessian_fd(fk, xk), rtol=1e-4,
                                   atol=1e-5 * hs, err_msg=label)
        off[block, block] = 0
    assert not np.any(off)


def test_spence_at_one_and_the_zero_derivatives():
    """spence's partial log(z)/(1-z) is its Taylor polynomial near 1 (so the
    second derivative there is 1/2); gammasgn's derivative is 0."""
    z = np.array([1.0, 1.0 - 1e-12, 1.0 + 1e-4])
    res = ha.hessian(lambda z: np.sum(sp.spence(z) + sp.gammasgn(z - 2.5)), z)
    np.testing.assert_allclose(res.gradient, np.log(z) / (1 - np.where(z == 1, 0, z))
                               * (z != 1) - (z == 1), rtol=1e-12)
    np.testing.assert_allclose(np.diag(res.hessian), [0.5, 0.5, 0.5 - 2e-4 / 3], rtol=1e-7)


def test_float32_and_integer_orders():
    x32 = np.linspace(0.4, 2.5, 5).astype(np.float32)
    n = np.arange(5)

    def f(x):
        return np.sum(sp.jv(1.5, x) + sp.expn(n, x) + sp.yn(2, x) + sp.gammainc(2.0, x)
                      + sp.betainc(2.0, 3.0, x / 3) + sp.kve(0.5, x) + sp.dawsn(x))

    x64 = x32.astype(np.float64)
    ref = ha.gradient(f, x64, backend="numpy")
    for backend in BACKENDS:
        res = ha.gradient(f, x32, backend=backend)
        assert res.gradient.dtype == np.float32
        np.testing.assert_allclose(res.value, f(x64), rtol=1e-5)
        np.testing.assert_allclose(res.gradient, ref.gradient, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(ref.gradient, numerical_gradient(f, x64), rtol=1e-7)


# --------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------
UNDERIVED = [  # (name, f of the differentiated argument, which argument)
    ("gammainc", lambda a: sp.gammainc(a, 1.5), "first"),
    ("gammaincc", lambda a: sp.gammaincc(a, 1.5), "first"),
    ("betainc", lambda a: sp.betainc(a, 2.0, 0.4), "first"),
    ("betainc", lambda b: sp.betainc(2.0, b, 0.4), "second"),
    ("jv", lambda v: sp.jv(v, 1.5), "first"), ("jv", lambda v: sp.jn(v, 1.5), "first"),
    ("yv", lambda v: sp.yv(v, 1.5), "first"), ("iv", lambda v: sp.iv(v, 1.5), "first"),
    ("ive", lambda v: sp.ive(v, 1.5), "first"), ("kv", lambda v: sp.kv(v, 1.5), "first"),
    ("kve", lambda v: sp.kve(v, 1.5), "first"), ("yn", lambda n: sp.yn(n, 1.5), "first"),
    ("expn", lambda n: sp.expn(n, 1.5), "first"),
]


@pytest.mark.parametrize("name,f,which", UNDERIVED, ids=[f"{n}-{w}" for n, _, w in UNDERIVED])
def test_partials_without_a_rule_are_refused_by_name(name, f, which):
    with pytest.raises(NotImplementedError, match=rf"scipy\.special\.{name} .*{which}"):
        ha.gradient(lambda p: np.sum(f(p)), np.array([2.0, 3.0]), backend="numpy")


def test_the_other_operands_differentiate_with_an_underived_one_as_data():
    v = np.array([0.5, 1.5, 2.0])
    x = np.array([0.7, 1.9, 3.2])
    res = ha.gradient(lambda x, v: np.sum(sp.jv(v, x) + sp.gammainc(v, x)), x, v)
    np.testing.assert_allclose(res.gradient, 0.5 * (sp.jv(v - 1, x) - sp.jv(v + 1, x))
                               + np.exp(-x) * x ** (v - 1) / sp.gamma(v), rtol=1e-13)


def test_factorial_and_multigammaln_refusals():
    x = np.array([1.5, 2.5])
    with pytest.raises(NotImplementedError, match=r"factorial\(n, exact=True\)"):
        ha.gradient(lambda x: np.sum(sp.factorial(x, exact=True)), x)
    with pytest.raises(NotImplementedError, match=r"multigammaln with a traced dimension"):
        ha.gradient(lambda d: np.sum(sp.multigammaln(5.0, d)), x)
    assert sp.factorial(4, exact=True) == 24  # untraced calls are scipy's
    assert sp.multigammaln(3.0, 2) == sp.multigammaln.__hybridad_original__(3.0, 2)


# --------------------------------------------------------------------------
# against jax, allocations
# --------------------------------------------------------------------------
def _mixed(xp, special):
    def f(x):
        return xp.sum(special.gammainc(1.5, x) + special.gammaincc(2.5, x)
                      + special.betainc(0.7, 2.5, x / 4) + special.beta(x, 1.3)
                      + special.beta(0.8, x) + special.poch(x, 1.7) + special.poch(2.1, x)
                      + special.expi(x) + special.kl_div(x, 0.7) + special.kl_div(0.6, x)
                      + special.dawsn(x) + special.factorial(x) + special.gammasgn(x)
                      + special.multigammaln(x + 2, 3) + xp.sinc(x)
                      + special.boxcox(x, 0.3) + special.boxcox(1.7, x - 1)
                      + special.boxcox1p(x, -0.4) + special.boxcox1p(0.6, x)
                      + special.i0e(x) * special.i1e(x))
    return f


def test_against_jax_where_installed():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp, jsp = jax.numpy, jax.scipy.special
    x = np.array([0.3, 0.7, 1.4, 2.5, 3.1])
    res = ha.hessian(_mixed(np, sp), x, backend="numpy")  # (numba agrees: tests above)
    np.testing.assert_allclose(res.gradient, np.asarray(jax.grad(_mixed(jnp, jsp))(x)),
                               rtol=1e-11)
    np.testing.assert_allclose(res.hessian, np.asarray(jax.hessian(_mixed(jnp, jsp))(x)),
                               rtol=1e-9, atol=1e-11)

    def g(xp, special):  # jax differentiates these once only
        return lambda x: xp.sum(special.exp1(x) + special.expn(2, x) + special.spence(x))

    x = np.array([0.3, 0.7, 2.5])
    np.testing.assert_allclose(ha.gradient(g(np, sp), x).gradient,
                               np.asarray(jax.grad(g(jnp, jsp))(x)), rtol=1e-11)


def test_repeated_calls_allocate_nothing():
    x = np.linspace(0.3, 2.0, 8)
    v = np.linspace(0.5, 3.0, 8)

    def f(x, v):
        return np.sum(sp.jv(v, x) * sp.kve(v, x) + sp.gammainc(v, x) + sp.betainc(v, 2.0, x / 3)
                      + sp.expn(2, x) + sp.spence(x) + sp.kl_div(x, v) + sp.factorial(x)
                      + sp.multigammaln(x + 1, 2))

    plan = ha.compile(f, x, v, backend="numba")
    out = ha.DiffResult(np.zeros(()), np.zeros(8))
    plan.gradient(x, v, out=out)
    assert_no_alloc(lambda: plan.gradient(x, v, out=out))
    np.testing.assert_allclose(out.value, f(x, v), rtol=1e-13)


# --------------------------------------------------------------------------
# CUDA: the device helpers, built for the host by nvcc, against scipy
# --------------------------------------------------------------------------
_ARITY = {**{n: 1 for n in UNARY}, **{n: 2 for n in BINARY}, "betainc": 3, "expn": 2,
          "yn": 2}


def _host_library():
    from hybridad.backends.cuda.source import PREAMBLE
    from hybridad.backends.cuda.special import SPECIAL_FUNCS

    lines = [PREAMBLE]
    for name, nin in _ARITY.items():
        fn = SPECIAL_FUNCS[name] + ("<double, double>" if name in ("expn", "yn") else "")
        args = ", ".join(f"double a{k}" for k in range(nin))
        call = ", ".join(f"a{k}" for k in range(nin))
        lines.append(f'extern "C" double w_{name}({args}) {{ return {fn}({call}); }}')
        lines.append(f'extern "C" float f_{name}({args}) {{ return '
                     f'{SPECIAL_FUNCS[name]}({", ".join(f"float(a{k})" for k in range(nin))}); }}')
    source = "\n".join(lines) + "\n"
    from hybridad.backends.numba.cache import cache_dir

    directory = os.path.join(cache_dir() or "/tmp", "cuda-host")
    os.makedirs(directory, exist_ok=True)
    lib = os.path.join(directory, f"special-{hashlib.sha256(source.encode()).hexdigest()[:16]}.so")
    if not os.path.exists(lib):
        nvcc_build(source, lib, shared=True)
    return ctypes.CDLL(lib)


def _call(lib, prefix, name, *args):
    fn = getattr(lib, f"{prefix}_{name}")
    ctype = ctypes.c_double if prefix == "w" else ctypes.c_float
    fn.restype, fn.argtypes = ctype, [ctypes.c_double] * len(args)
    args = np.broadcast_arrays(*args)
    return np.array([fn(*map(float, t)) for t in zip(*(a.ravel() for a in args), strict=True)]
                    ).reshape(args[0].shape)


def _check(got, want, rtol, label):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-300, equal_nan=True, err_msg=label)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_cuda_helpers_match_scipy_on_edge_grids():
    lib = _host_library()
    x = np.concatenate([X, [0.01, 0.5, 1.5, 1.9999, 2.0, 3.3, 15.0, 19.99, 50.0]])
    for name in UNARY:
        _check(_call(lib, "w", name, x), getattr(sp, name)(x), 1e-13, name)
        _check(_call(lib, "f", name, x), getattr(sp, name)(x.astype(np.float32)), 1e-6, name)
    # scipy's conventions hold exactly at zeros, poles, infinities, NaN; elsewhere the
    # relative error is ~1e-13 (J and Y: absolute near their zeros).  Left out: x = 1e-300
    # (scipy underflows iv(v, 1e-300) to 0), infinite orders of the Bessel functions and of
    # poch's z, beta, poch, binom at 1e4 (scipy's own error is ~1e-11 there).
    b = x[(x != 1e-300)][None, :]
    base = np.concatenate([ORDER, [0.2, 2.0, 7.3, 0.01, 100.0, nan]])
    orders = {name: base for name in ("jv", "yv", "iv", "ive", "kv", "kve", "poch", "binom")}
    orders.update({name: np.concatenate([base, [inf, -inf]]) for name in (
        "beta", "kl_div", "boxcox", "boxcox1p")})
    orders.update({name: np.concatenate([base, [1e4, inf]]) for name in ("gammainc",
                                                                       "gammaincc")})
    orders.update({name: np.concatenate([orders[name], [1e4]]) for name in (
        "jv", "yv", "iv", "ive", "kv", "kve", "kl_div")})
    for name in BINARY:
        a = orders[name][:, None]
        want = getattr(sp, name)(a, b)
        got = _call(lib, "w", name, a, b)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        close = np.isclose(got, want, rtol=2e-12, atol=1e-13 if name in ("jv", "yv") else 0)
        bad = np.nonzero(~(same | close))
        assert not bad[0].size, (name, list(zip(a[bad[0], 0], b[0, bad[1]], strict=True)))
    # betainc, expn, yn
    aa, bb = np.array([0.3, 1.0, 2.5, 30.0, 0.0, nan])[:, None, None], \
        np.array([0.5, 2.0, 45.0, 0.0])[None, :, None]
    c = np.array([0.0, 1e-6, 0.2, 0.5, 0.9, 1.0, 1.2, nan])[None, None, :]
    _check(_call(lib, "w", "betainc", aa, bb, c), sp.betainc(aa, bb, c), 1e-12, "betainc")
    n = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 60.0, -1.0])[:, None]
    xp = np.array([0.0, 1e-9, 0.3, 1.0, 2.0, 9.0, 80.0, inf, nan])[None, :]
    _check(_call(lib, "w", "expn", n, xp), sp.expn(n.astype(int), xp), 1e-13, "expn")
    _check(_call(lib, "w", "yn", n, xp), sp.yv(n, xp), 1e-13, "yn")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_cuda_region_with_betainc_and_integer_orders(tmp_path):
    """A fused region with the three-operand betainc (test_cuda_source covers the
    one- and two-operand ops) and integer orders, run on the host: value and
    partial against numpy's."""
    from test_cuda_source import run_on_host

    from hybridad.backends.cuda.source import region_kernel
    from hybridad.transforms.partition import find_regions

    def body(x):
        return (sp.betainc(2.0, 3.5, x / 3) + sp.expn(2, x) + sp.yn(1, x) + sp.jv(2, x)
                + sp.kve(1, x) * sp.gammaincc(2, x) + sp.spence(x) * sp.dawsn(x))

    x = np.linspace(0.3, 2.4, 6)
    plan = ha.compile(lambda x: np.sum(body(x)), x, backend="numpy")
    fwd = [n for n in plan.graph.nodes if n.phase == "forward"]
    (region,) = [r for r in find_regions(fwd, [plan.graph.outputs[0]])
                 if any(n.op == "betainc" for n in r.nodes)]
    seeds = tuple(k for k, n in enumerate(region.inputs) if n.op == "input")
    kernel = region_kernel(region, "value", region.inputs, seeds=seeds)
    ins = [x if n.op == "input" else n.attrs["value"] for n in region.inputs
           if not (n.is_literal and n.size == 1)]
    (value, partial), = run_on_host([(kernel, ins, [np.float64, np.float64])], tmp_path)
    np.testing.assert_allclose(value, body(x), rtol=1e-13)
    ref = ha.gradient(lambda x: np.sum(body(x)), x, backend="numpy")
    np.testing.assert_allclose(partial, ref.gradient, rtol=1e-12)
