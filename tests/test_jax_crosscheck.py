"""Cross-check against JAX (issue 30): the linalg, scipy.linalg, signal/scatter
and array-construction ops, each inside a scalar loss written once for both
libraries (``m.np`` is numpy or jax.numpy, ``m.sl`` scipy.linalg or
jax.scipy.linalg, and so on: see :data:`NP` and :data:`JX`).  hybridad's value,
gradient (``ha.gradient``) and Hessian (``ha.hessian``) on both CPU backends
agree with ``jax.grad`` / ``jax.hessian`` to AD precision: 1e-9 relative for
linalg, 1e-11 for the elementwise, signal and scatter ops.

The losses are invariant to what a decomposition leaves free (signs of
singular vectors, QR's and eigh's columns), so they compare the functions,
not LAPACK's choices.  Symmetric inputs are symmetrized inside the loss:
numpy and scipy read one triangle where JAX symmetrizes, and the two agree on
the symmetrized function.  Each loss groups several ops, so the numba
backend compiles few plans; numba's cold Hessian plans of LAPACK ops still take
5-30 s per op, so on numba the default run checks a light variant of each
loss (each op once; Hessians where cheap) and the full losses are marked slow.
"""

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg

import hybridad as ha

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
jsl = jax.scipy.linalg

RNG = np.random.default_rng(20260430)


def _w(*shape, seed):
    """Fixed weights of the sums differentiated."""
    return np.random.default_rng(seed).standard_normal(shape)


def _sym(a):
    """The symmetric part (the matrix numpy's and JAX's symmetric routines agree on)."""
    return (a + a.T) / 2


# ----------------------------------------------------------------------------
# numpy/scipy and jax.numpy/jax.scipy, where the spelling differs
# ----------------------------------------------------------------------------


def _np_fancy_iadd(a, idx, v):
    """numpy's buffered ``a[idx] += v``: a repeated index is written once, by
    its last occurrence."""
    a[idx] += v
    return a


def _jax_fancy_iadd(a, idx, v):
    last = np.array([i for i in range(len(idx)) if idx[i] not in idx[i + 1:]])
    return jnp.asarray(a).at[idx[last]].set(a[idx[last]] + v[last])


def _np_add_at(a, idx, v):
    np.add.at(a, idx, v)
    return a


def _jax_eigvals(e):
    w = jax.lax.linalg.eig(e, compute_left_eigenvectors=False,
                           compute_right_eigenvectors=False, enable_eigvec_derivs=True)[0]
    return jnp.real(w)


def _jax_eigh_subset(s, lo, hi):
    w, v = jsl.eigh(s)
    return w[lo:hi + 1], v[:, lo:hi + 1]


NP = SimpleNamespace(
    np=np, la=np.linalg, sl=scipy.linalg,
    eigvals=np.linalg.eigvals, eig_values=lambda e: np.linalg.eig(e)[0],
    eigh_subset=lambda s, lo, hi: scipy.linalg.eigh(s, subset_by_index=[lo, hi]),
    eigvalsh_subset=lambda s, lo, hi: scipy.linalg.eigh(s, eigvals_only=True,
                                                        subset_by_index=[lo, hi]),
    add_at=_np_add_at,
    bincount=lambda idx, w, n: np.bincount(idx, weights=w, minlength=n),
    fancy_iadd=_np_fancy_iadd, full=True,
)

JX = SimpleNamespace(
    np=jnp, la=jnp.linalg, sl=jsl,
    eigvals=_jax_eigvals, eig_values=_jax_eigvals,
    eigh_subset=_jax_eigh_subset,
    eigvalsh_subset=lambda s, lo, hi: _jax_eigh_subset(s, lo, hi)[0],
    add_at=lambda a, idx, v: jnp.asarray(a).at[idx].add(v),
    bincount=lambda idx, w, n: jax.ops.segment_sum(w, idx, num_segments=n),
    fancy_iadd=_jax_fancy_iadd, full=True,
)

#: the lighter variants of the losses (see LIGHT)
NP_LIGHT = SimpleNamespace(**{**vars(NP), "full": False})
JX_LIGHT = SimpleNamespace(**{**vars(JX), "full": False})


# ----------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------

def _general(n, shift):
    return RNG.standard_normal((n, n)) + shift * np.eye(n)


def _pd(n):
    b = RNG.standard_normal((n, n))
    return b @ b.T + n * np.eye(n) + 0.3 * RNG.standard_normal((n, n))


_Q = _general(4, 3.0)
EIG = _Q @ np.diag([-2.0, -0.5, 1.0, 3.0]) @ np.linalg.inv(_Q)  # real, distinct spectrum


def _split(x, *shapes):
    """Consecutive pieces of the flat vector ``x`` reshaped."""
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(x[at:at + n].reshape(s))
        at += n
    assert at == x.size
    return out


# ----------------------------------------------------------------------------
# the losses: x a flat vector, m the library (NP or JX)
# ----------------------------------------------------------------------------

def svd_pinv(x, m):
    """Singular values (tall and wide), sign-free functions of U and Vt, pinv."""
    t, w = _split(x, (4, 3), (3, 4))
    u, s, vt = m.la.svd(t, full_matrices=False)
    total = m.np.sum(s ** 3 * _w(3, seed=1))
    total = total + m.np.sum(((u * m.np.log(s)) @ vt) * _w(4, 3, seed=2))  # log(t t^T)-like
    total = total + m.np.sum(m.la.pinv(w) ** 2 * _w(4, 3, seed=9))
    if m.full:
        total = total + m.np.sum((u * s ** 2) @ u.T * _w(4, 4, seed=3))
        u, s, vt = m.la.svd(w, full_matrices=False)
        total = total + m.np.sum(m.np.sqrt(s) * _w(3, seed=4))
        total = total + m.np.sum(((u / s) @ vt) * _w(3, 4, seed=5))
        total = total + m.np.sum(vt.T @ (vt * s[:, None]) * _w(4, 4, seed=6))
        total = total + m.np.sum(m.la.svd(w, compute_uv=False) ** 2 * _w(3, seed=7))
        total = total + m.np.sum(m.la.pinv(t) * _w(3, 4, seed=8))
    return total


MATRIX_ORDS = (None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)
VECTOR_ORDS = (None, 1, 2, np.inf, -np.inf, 3, 0.5, -1)


def norms(x, m):
    a, v = _split(x, (3, 4), (5,))
    if m.full:
        terms = [m.la.norm(a, o) for o in MATRIX_ORDS]
        terms += [m.la.norm(a.T, o) for o in (2, -2, 1)]
        terms += [m.la.norm(v, o) for o in VECTOR_ORDS]
        terms += [m.la.norm(a, o, axis=1) for o in (1, 2)]
        terms += [m.la.norm(a, o, axis=0) for o in (np.inf, -1)]
    else:
        terms = [m.la.norm(a, o) for o in ("nuc", -2, 1)] + [m.la.norm(v, 3)]
    return sum(m.np.sum(t ** 2) * (1.0 + 0.25 * k) for k, t in enumerate(terms))


def eig_qr(x, m):
    """eig/eigvals (sorted real spectrum); QR with R's diagonal made positive
    (the unique factorization: Q and R in full), tall and wide."""
    e, t, w = _split(x, (4, 4), (4, 3), (3, 4))
    total = m.np.sum(m.np.sort(m.eigvals(e)) * _w(4, seed=10))
    if m.full:
        total = total + m.np.sum(m.np.sort(m.eig_values(e * e)) ** 2 * _w(4, seed=11))
    for k, a in enumerate((t, w) if m.full else (t,)):
        q, r = m.la.qr(a)
        d = m.np.sign(m.np.diagonal(r))
        total = total + m.np.sum((q * d) * _w(*q.shape, seed=12 + k))
        total = total + m.np.sum(m.np.sin(r * d[:, None]) * _w(*r.shape, seed=14 + k))
        total = total + m.np.sum(m.np.log(m.np.abs(m.np.diagonal(r))))
    return total


def lstsq_power(x, m):
    t, b, bm, a = _split(x, (5, 3), (5,), (5, 2), (4, 4))
    total = m.np.sum(m.la.lstsq(t, b, rcond=None)[0] * _w(3, seed=20))
    total = total + m.np.sum(m.la.matrix_power(a, -2) * _w(4, 4, seed=23))
    if m.full:
        total = total + m.np.sum(m.la.lstsq(t, bm, rcond=None)[0] ** 2 * _w(3, 2, seed=21))
        total = total + m.np.sum(m.la.matrix_power(a / 4, 3) * _w(4, 4, seed=22))
    return total


def numpy_factor_solve(x, m):
    """cholesky, solve, inv, det, slogdet, eigh (values, and |vectors| times
    a sign-free factor)."""
    s, a, b = _split(x, (4, 4), (4, 4), (4, 2))
    s = _sym(s)
    total = m.np.sum(m.la.cholesky(s) * _w(4, 4, seed=30))
    total = total + m.np.sum(m.la.solve(a, b) * _w(4, 2, seed=31))
    total = total + m.np.sum(m.la.inv(a) * _w(4, 4, seed=33))
    total = total + m.la.det(a / 3) + m.la.slogdet(a)[1] * 0.5
    w, v = m.la.eigh(s)
    total = total + m.np.sum(w ** 2 * _w(4, seed=34))
    total = total + m.np.sum(v * v[:1] * _w(4, 4, seed=36))
    if m.full:
        total = total + m.np.sum(m.la.solve(a, b[:, 0]) ** 2 * _w(4, seed=32))
        total = total + m.la.slogdet(-a)[0]
        total = total + m.np.sum(m.np.abs(v) * _w(4, 4, seed=35))
    return total


def scipy_solves(x, m):
    """cho_factor/cho_solve, solve_triangular (lower/upper, trans 0/1),
    lu_factor/lu_solve, solve with assume_a 'pos' and 'sym', cholesky."""
    s, a, b = _split(x, (4, 4), (4, 4), (4, 2))
    s = _sym(s)
    lu = m.sl.lu_factor(a)
    total = m.np.sum(m.sl.cho_solve(m.sl.cho_factor(s), b) * _w(4, 2, seed=40))
    total = total + m.np.sum(m.sl.lu_solve(lu, b) * _w(4, 2, seed=46))
    total = total + m.np.sum(m.sl.solve(s, b, assume_a="pos") * _w(4, 2, seed=49))
    y = m.sl.solve_triangular(a, b, lower=True, trans="T")  # reads one triangle of a
    total = total + m.np.sum(y * _w(4, 2, seed=45))
    if not m.full:
        return total
    total = total + m.np.sum(m.sl.cho_solve(m.sl.cho_factor(s, lower=True), b[:, 1]) ** 2)
    tri = (m.np.tril(a), m.np.triu(a))
    for lower in (False, True):
        for trans in (0, 1):
            y = m.sl.solve_triangular(tri[lower], b, lower=lower, trans=trans)
            total = total + m.np.sum(y * _w(4, 2, seed=41 + 2 * lower + trans))
    total = total + m.np.sum(m.sl.lu_solve(lu, b, trans=1) ** 2 * _w(4, 2, seed=47))
    total = total + m.np.sum(m.np.sin(lu[0]) * _w(4, 4, seed=48))
    total = total + m.np.sum(m.sl.solve(s, b, assume_a="sym") ** 2 * _w(4, 2, seed=50))
    total = total + m.np.sum(m.sl.solve(a, b) * _w(4, 2, seed=51))
    total = total + m.np.sum(m.sl.cholesky(s) * _w(4, 4, seed=52))
    return total + m.np.sum(m.sl.cholesky(s, lower=True) ** 2 * _w(4, 4, seed=53))


def scipy_eigh_expm_structured(x, m):
    """eigh (eigvals_only, subset_by_index), expm, block_diag, toeplitz, circulant."""
    s, a, c = _split(x, (4, 4), (3, 3), (4,))
    s = _sym(s)
    w, v = m.eigh_subset(s, 1, 2)
    total = m.np.sum(w * _w(2, seed=61)) + m.np.sum(v * v[:1] * _w(4, 2, seed=62))
    total = total + m.np.sum(m.sl.expm(a / 2) * _w(3, 3, seed=64))
    total = total + m.np.sum(m.np.sin(m.sl.toeplitz(c, a[0])) * _w(4, 3, seed=67))
    if m.full:
        total = total + m.np.sum(m.sl.eigh(s, eigvals_only=True) ** 2 * _w(4, seed=60))
        total = total + m.np.sum(m.eigvalsh_subset(s, 0, 2) ** 3 * _w(3, seed=63))
        bd = m.sl.block_diag(a, c[:2], c[3])
        total = total + m.np.sum(m.np.sin(bd) * _w(*bd.shape, seed=66))
        total = total + m.np.sum(m.sl.toeplitz(a[1]) ** 2 * _w(3, 3, seed=68))
        total = total + m.np.sum(m.sl.circulant(c) ** 3 * _w(4, 4, seed=69))
    return total


def signal(x, m):
    """np.convolve and np.correlate in every mode, both operand orders;
    np.trapezoid with traced x and with dx; np.cumsum, np.cumprod."""
    a, v, y, t = _split(x, (5,), (3,), (4,), (4,))
    total = 0.0
    modes = ("full", "same", "valid") if m.full else ("same",)
    for k, mode in enumerate(modes):
        for j, (p, q) in enumerate(((a, v), (v, a)) if m.full else ((a, v),)):
            c = m.np.convolve(p, q, mode)
            r = m.np.correlate(p, q, mode)
            total = total + m.np.sum(m.np.sin(c) * _w(c.size, seed=70 + 2 * k + j))
            total = total + m.np.sum(r ** 2 * _w(r.size, seed=80 + 2 * k + j))
    grid = m.np.cumsum(m.np.exp(t))  # increasing sample points
    total = total + m.np.trapezoid(y ** 2, x=grid)
    total = total + m.np.sum(m.np.cumprod(1 + v / 4) * _w(3, seed=92))
    if m.full:
        total = total + m.np.trapezoid(m.np.sin(y), dx=0.3)
        total = total + m.np.trapezoid(m.np.outer(y, v), x=a[:4], axis=0) @ _w(3, seed=90)
        total = total + m.np.sum(m.np.cumsum(y * a[:4]) * _w(4, seed=91))
    return total


XP = np.array([-2.0, -1.0, 0.25, 1.0, 2.5])
FP = np.array([0.5, -1.0, 2.0, 1.5, -0.5])


def interp(x, m):
    """np.interp differentiated in its points (the samples constant), inside
    and past either end, with a nonlinear outer function."""
    return m.np.sum(m.np.interp(x, XP, FP) ** 3 * _w(x.size, seed=95)) + \
        m.np.sum(m.np.interp(x * x, XP, FP, left=-2.0, right=3.0) * _w(x.size, seed=96))


IDX = np.array([0, 2, 2, 5, 0, 0, 3])  # repeats: 0 three times, 2 twice


def scatter(x, m):
    """np.add.at, np.bincount(weights=), fancy ``+=`` with repeated indices."""
    base, v = _split(x, (6,), (7,))
    a = m.add_at(base * 1.0, IDX, v * base[1])
    total = m.np.sum(a ** 2 * np.arange(1.0, 7.0))
    total = total + m.np.sum(m.bincount(IDX, v * base[IDX], 8) ** 2 * np.arange(8.0))
    b = m.fancy_iadd(base * 1.0, IDX, v ** 2)
    total = total + m.np.sum(m.np.sin(b) * _w(6, seed=97))
    c = m.fancy_iadd(base[:4] * base[:4], np.array([1, 3, 1, 1]), v[:4] * base[0])
    return total + m.np.sum(c ** 3 * _w(4, seed=98))


def constructs(x, m):
    """np.array of traced scalars, np.select, np.piecewise, np.append, einsum's
    sublist form."""
    built = m.np.array([[x[0], x[1] * x[2], 2.0], [m.np.sin(x[3]), 1.5, x[4] ** 2]])
    total = m.np.sum(built ** 3 * _w(2, 3, seed=100))
    sel = m.np.select([x > 0.5, x < -0.5], [x ** 2, m.np.sin(x)], default=x * 0.1)
    total = total + m.np.sum(m.np.exp(sel) * _w(x.size, seed=101))
    pw = m.np.piecewise(x, [x < -0.5, x > 0.5],
                        [lambda u: u ** 3, lambda u: m.np.exp(u), lambda u: 2 * u])
    total = total + m.np.sum(pw * pw * _w(x.size, seed=102))
    app = m.np.append(x[:3], m.np.array([1.0, x[0] * x[5]]))
    total = total + m.np.sum(m.np.cos(app) * _w(5, seed=103))
    ein = m.np.einsum(x.reshape(2, 3), [0, 1], x.reshape(3, 2), [1, 2], [0, 2])
    total = total + m.np.sum(ein ** 2 * _w(2, 2, seed=105))
    if m.full:
        app2 = m.np.append(x.reshape(2, 3), x.reshape(2, 3) ** 2, axis=0)
        total = total + m.np.sum(app2 ** 2 * _w(4, 3, seed=104))
        total = total + m.np.einsum(x, [0], x ** 2, [0]) + m.np.sum(m.np.einsum(
            x.reshape(2, 3), [Ellipsis, 1], _w(3, seed=106), [1], [Ellipsis]))
    return total


# ----------------------------------------------------------------------------
# the cases: loss, point, relative tolerance
# ----------------------------------------------------------------------------

LINALG, ELEMENTWISE = 1e-9, 1e-11

CASES = {
    "svd_pinv": (svd_pinv, np.concatenate([RNG.standard_normal(12), RNG.standard_normal(12)]),
                 LINALG),
    "norms": (norms, RNG.uniform(0.3, 2.0, 17) * RNG.choice([-1.0, 1.0], 17), LINALG),
    "eig_qr": (eig_qr, np.concatenate([EIG.ravel(), RNG.standard_normal(24)]), LINALG),
    "lstsq_power": (lstsq_power, np.concatenate([RNG.standard_normal(30),
                                                 _general(4, 4.0).ravel()]), LINALG),
    "numpy_factor_solve": (numpy_factor_solve, np.concatenate([
        _pd(4).ravel(), _general(4, 4.0).ravel(), RNG.standard_normal(8)]), LINALG),
    "scipy_solves": (scipy_solves, np.concatenate([
        _pd(4).ravel(), (np.abs(_general(4, 0.0)) + 4 * np.eye(4)).ravel(),
        RNG.standard_normal(8)]), LINALG),
    "scipy_eigh_expm_structured": (scipy_eigh_expm_structured, np.concatenate([
        _pd(4).ravel(), RNG.standard_normal(9), RNG.standard_normal(4)]), LINALG),
    "signal": (signal, RNG.uniform(-1.5, 1.5, 16), ELEMENTWISE),
    "interp": (interp, np.array([-2.6, -1.7, -0.4, 0.6, 1.8, 2.9]), ELEMENTWISE),
    "scatter": (scatter, RNG.uniform(-1.5, 1.5, 13), ELEMENTWISE),
    "constructs": (constructs, np.array([0.3, -1.2, 0.8, 1.7, -0.4, 0.9]), ELEMENTWISE),
}


#: the cases whose loss has a lighter variant (``m.full`` False): each op once
LIGHT = {"svd_pinv", "norms", "eig_qr", "lstsq_power", "numpy_factor_solve", "scipy_solves",
         "scipy_eigh_expm_structured", "signal", "constructs"}


def _numpy_loss(name, full):
    loss, lib = CASES[name][0], NP if full else NP_LIGHT
    return lambda x: loss(x, lib)


#: one function per case and variant: the plans are cached
_LOSSES = {(name, full): _numpy_loss(name, full) for name in CASES for full in (True, False)}


@lru_cache(maxsize=None)
def _jax_reference(name, full):
    """JAX's value, gradient and Hessian (computed once for both backends;
    compiled: far faster than JAX's op-by-op Hessians)."""
    loss, x, _ = CASES[name]
    lib = JX if full else JX_LIGHT

    def f(z):
        return loss(z, lib)

    return (float(jax.jit(f)(x)), np.asarray(jax.jit(jax.grad(f))(x)),
            np.asarray(jax.jit(jax.hessian(f))(x)))


def _close(got, want, rtol, what):
    np.testing.assert_allclose(got, want, rtol=rtol,
                               atol=rtol * max(1.0, float(np.max(np.abs(want), initial=0))),
                               err_msg=what)


#: the cases whose numba Hessian plans compile in seconds, not minutes
CHEAP_NUMBA_HESSIAN = {"constructs", "interp", "scatter", "signal"}


def _params():
    """Every op in every variant on the numpy backend.  On numba, whose cold
    Hessian plans of LAPACK ops take 5-30 s each to compile (a Hessian plan
    compiles a primal, a tangent and a batched-tangent program): the light
    variant's value and gradient, its Hessian where cheap, and the full
    losses' gradient and Hessian marked slow."""
    out = []
    for name in sorted(CASES):
        light, cheap = name in LIGHT, name in CHEAP_NUMBA_HESSIAN
        out.append(pytest.param(name, "numpy", True, True, id=f"{name}-numpy"))
        out.append(pytest.param(name, "numba", not light, cheap, id=f"{name}-numba" + (
            "-light" if light else "") + ("" if cheap else "-gradient")))
        if light or not cheap:
            out.append(pytest.param(name, "numba", True, True, id=f"{name}-numba-full",
                                    marks=pytest.mark.slow))
    return out


@pytest.mark.parametrize("name, backend, full, hessian", _params())
def test_against_jax(name, backend, full, hessian):
    _, x, rtol = CASES[name]
    f = _LOSSES[name, full]
    value, grad, hess = _jax_reference(name, full)
    expected = float(f(x.copy()))  # numpy's and scipy's own value
    np.testing.assert_allclose(value, expected, rtol=1e-12, err_msg="jax vs numpy value")

    res = ha.gradient(f, x, backend=backend)
    np.testing.assert_allclose(float(res.value), expected, rtol=1e-12, err_msg="value")
    _close(res.gradient, grad, rtol, f"gradient ({backend}) vs jax.grad")
    if not hessian:
        return
    res = ha.hessian(f, x, backend=backend)
    np.testing.assert_allclose(float(res.value), expected, rtol=1e-12, err_msg="value")
    _close(res.gradient, grad, rtol, f"Hessian plan's gradient ({backend}) vs jax.grad")
    _close(res.hessian, hess, rtol, f"Hessian ({backend}) vs jax.hessian")


def test_light_variants_are_lighter():
    """Each LIGHT loss reads ``m.full`` (differs from its full variant), the others do not."""
    for name, (loss, x, _) in CASES.items():
        differs = loss(x, NP) != loss(x, NP_LIGHT)
        assert differs == (name in LIGHT), name


def test_jax_references_are_jaxs_own_functions():
    """The JAX side of the losses that differ in spelling (eig, fancy ``+=``,
    bincount, eigh's subset) computes numpy's and scipy's values."""
    s = np.reshape(CASES["scipy_solves"][1][:16], (4, 4))
    s = (s + s.T) / 2
    np.testing.assert_allclose(np.sort(_jax_eigvals(EIG)), np.sort(np.linalg.eigvals(EIG).real),
                               rtol=1e-12)
    for a, b in zip(_jax_eigh_subset(s, 1, 2), NP.eigh_subset(s, 1, 2), strict=True):
        np.testing.assert_allclose(np.abs(a), np.abs(b), rtol=1e-12, atol=1e-14)
    base, v = np.arange(6.0), np.arange(10.0, 17.0)
    np.testing.assert_array_equal(_jax_fancy_iadd(jnp.asarray(base), IDX, v),
                                  _np_fancy_iadd(base.copy(), IDX, v))
    np.testing.assert_array_equal(JX.bincount(IDX, v, 8), NP.bincount(IDX, v, 8))
    np.testing.assert_array_equal(JX.add_at(jnp.asarray(base), IDX, v),
                                  _np_add_at(base.copy(), IDX, v))
