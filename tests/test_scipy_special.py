"""scipy.special in traced code (scipy.stats: test_scipy_stats.py): values equal
scipy's, gradients and Hessians against central differences on both CPU
backends, zero allocations per repeated call, clear refusals naming the scipy
function.

(Each special ufunc's first derivative at several shapes is also in
test_ops.py, its CUDA spelling in test_cuda_source.py and test_backend_tables.py,
its untaken-branch behaviour in test_special_points.py: all driven by the
registry.)"""

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st
from conftest import BACKENDS, assert_grad, hessian_fd, rand

import hybridad as ha
from hybridad.errors import TracingError
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import derived
from hybridad.ops.special import SCIPY_SPECIAL
from hybridad.testing import assert_no_alloc, numerical_gradient


def _weights(n):
    return np.linspace(0.5, 1.5, n)


def _special_objective(name):
    """``sum(w * op(x[, c]))`` of one special op in its domain, differentiated
    in each operand with a rule (the other one a constant)."""
    op = REGISTRY[name]
    lo, hi = op.domain
    nin = op.ufunc.nin
    x = np.linspace(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo), 4)
    c = 0.5 * (lo + hi)
    w = _weights(4)
    if nin == 1:
        return lambda x: np.sum(w * op.ufunc(x)), x
    k = derived(op)[-1]  # zeta: q; jv, gammainc, ...: x; betainc: x

    def f(x):
        args = [c] * nin
        args[k] = x
        return np.sum(w * op.ufunc(*args))

    return f, x


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_special_op_value_gradient_hessian(backend):
    """One Hessian plan per backend for all ops (op k reads its own 4-element
    block of x, so the Hessian is block diagonal): each op's value equals
    scipy's to rounding, its gradient and Hessian block central differences."""
    fs, xs = zip(*(_special_objective(name) for name in SCIPY_SPECIAL), strict=True)
    x = np.concatenate(xs)

    def total(x):
        return sum(f(x[4 * k:4 * k + 4]) for k, f in enumerate(fs))

    res = ha.hessian(total, x, backend=backend)
    np.testing.assert_allclose(res.value, total(x), rtol=1e-14)
    off = res.hessian.copy()
    for k, (name, f, xk) in enumerate(zip(SCIPY_SPECIAL, fs, xs, strict=True)):
        block = slice(4 * k, 4 * k + 4)
        np.testing.assert_allclose(res.gradient[block], numerical_gradient(f, xk), rtol=1e-6,
                                   atol=1e-8, err_msg=name)
        np.testing.assert_allclose(res.hessian[block, block], hessian_fd(f, xk), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
        off[block, block] = 0
    assert not np.any(off)


def test_float32_kernels_round_scipys_double():
    x = np.linspace(0.3, 2.5, 6).astype(np.float32)

    def f(x):
        return np.sum(sp.gammaln(x) + sp.erf(x) * sp.i0e(x) + sp.expit(x))

    for backend in BACKENDS:
        res = ha.gradient(f, x, backend=backend)
        assert res.gradient.dtype == np.float32
        np.testing.assert_allclose(res.value, f(x), rtol=1e-6)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x.astype(np.float64)),
                                   rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["huber", "pseudo_huber", "exp10", "cosm1", "erfi", "powm1",
                                  "stdtr", "chdtr", "gdtr", "pdtr", "ellipk", "ellipe", "ellipkm1"])
def test_float32_of_the_newer_special_functions(name):
    """float32 arguments: the value and gradient of float64's to float32 rounding,
    float32 results, on both CPU backends."""
    f, x = _special_objective(name)
    x32 = x.astype(np.float32)
    want = ha.gradient(f, x, backend="numpy")
    for backend in BACKENDS:
        res = ha.gradient(f, x32, backend=backend)
        assert res.gradient.dtype == np.float32
        np.testing.assert_allclose(res.value, want.value, rtol=2e-6, err_msg=backend)
        np.testing.assert_allclose(res.gradient, want.gradient, rtol=2e-5, atol=1e-6,
                                   err_msg=backend)


LSE_KWARGS = [{}, {"axis": 0}, {"axis": 1, "keepdims": True},
              {"axis": -1, "b": np.array([0.5, 1.0, 2.0])}, {"axis": None, "b": 0.3}]


def test_logsumexp():
    """Every form in one plan per backend; each value against scipy's."""
    x = rand((4, 3), seed=7)
    w = _weights(4).reshape(4, 1)

    def term(x, kwargs):
        return np.sum(w[: x.shape[0]] * sp.logsumexp(x, **kwargs))

    for kwargs in LSE_KWARGS:
        res = ha.gradient(lambda x, kw=kwargs: term(x, kw), x, backend="numpy")
        np.testing.assert_allclose(res.value, term(x, kwargs), rtol=1e-14, err_msg=str(kwargs))
    assert_grad(lambda x: sum(term(x, kw) for kw in LSE_KWARGS), (x,))


def test_logsumexp_return_sign_and_infinities():
    x = np.array([-np.inf, 0.5, 1.0])
    b = np.array([1.0, -2.0, 1.0])

    def f(x):
        v, s = sp.logsumexp(x, b=b, return_sign=True)
        return v * s

    ref_v, ref_s = sp.logsumexp(x, b=b, return_sign=True)
    for backend in BACKENDS:
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_allclose(res.value, ref_v * ref_s, rtol=1e-14)
        assert res.gradient[0] == 0.0 and np.all(np.isfinite(res.gradient))
    y = np.array([[0.1, 0.2, 0.3], [0.1, 1.0, 0.1]])  # (the second row's sum is negative)
    want = sp.logsumexp(y, axis=1, b=b)
    assert np.isnan(want[1]) and np.isfinite(want[0])
    for backend in BACKENDS:  # without return_sign: scipy's nan
        got = ha.jacobian(lambda y: sp.logsumexp(y, axis=1, b=b), y, backend=backend).value
        np.testing.assert_allclose(got, want, rtol=1e-14)
    allinf = np.full(3, -np.inf)
    assert ha.gradient(lambda x: sp.logsumexp(x), allinf).value == -np.inf


def test_logsumexp_backward_reads_no_max():
    """The shift is the max rounded down, piecewise constant: no derivative
    flows through it (its exact one is 0), so the backward pass has no
    mask of the max's elements -- softmax's gradient alone, as jax's
    stop_gradient makes it.  Large values (1e3: exp overflows unshifted) and
    ties of the max keep the gradient and Hessian finite differences'."""
    x = np.array([[1000.0, 999.5, 1000.0, -3.0], [0.25, 0.5, -0.5, 0.5], [-800., -801., -799.5,
                                                                          -800.]])
    w = _weights(3)

    def f(x):
        return np.sum(w * sp.logsumexp(x, axis=1)) + np.sum(sp.log_softmax(x, axis=0) ** 2)
    for backend in BACKENDS:
        plan = ha.compile(f, x, backend=backend)
        back = [n for n in plan.graph.nodes if n.phase == "backward"]
        assert not any(n.op == "max" or "equal" in str(n.attrs.get("body", "")) for n in back)
        res = plan.gradient(x)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-14)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-8)

    def g(y):  # (ties in the rows' and the columns' maxima)
        y = y.reshape(2, 3)
        return np.sum(w[:2] * sp.logsumexp(y, axis=1)) + np.sum(sp.log_softmax(y, axis=0) ** 2)
    y = np.array([0.5, 0.5, -0.2, 0.1, 0.5, -0.2])
    fd = np.stack([(ha.gradient(g, y + e).gradient - ha.gradient(g, y - e).gradient) / 2e-6
                   for e in np.eye(6) * 1e-6], axis=1)  # (of the gradient: no nested differences)
    np.testing.assert_allclose(ha.hessian(g, y).hessian, fd, rtol=1e-6, atol=1e-8)


def test_zero_weights_and_huge_values_as_scipy():
    """A zero weight at the max of ``a`` is no term (scipy's max is over the
    weighted terms): ``logsumexp([1000, 0], b=[0, 1])`` is 0, not -inf or nan;
    its derivative in that weight is still ``exp(a - m) / sum`` (not 0).
    softmax and log_softmax beside 1e17 keep their log 2 (scipy's form, not
    ``x - logsumexp(x)``, which rounds it away)."""
    x, w = np.array([1000.0, 0.0]), np.array([0.0, 1.0])
    for backend in BACKENDS:
        res = ha.gradient(lambda x: sp.logsumexp(x, b=w), x, backend=backend)
        assert res.value == sp.logsumexp(x, b=w) == 0.0
        np.testing.assert_array_equal(res.gradient, [0.0, 1.0])
    a, b = np.array([1.0, 2.0, 0.5]), np.array([0.5, 0.0, 2.0])
    res = ha.gradient(lambda b: sp.logsumexp(a, b=b), b)
    assert float(res.value) == pytest.approx(sp.logsumexp(a, b=b), rel=1e-14)
    np.testing.assert_allclose(res.gradient, np.exp(a) / np.sum(b * np.exp(a)), rtol=1e-14)
    for a, b in ((np.array([-np.inf, np.inf]), np.array([0.6, 1.5])),  # (weighted infinities)
                 (np.array([0.0, np.inf]), np.array([1.0, 1.0]))):
        for backend in BACKENDS:
            assert ha.gradient(lambda a: sp.logsumexp(a, b=b), a, backend=backend).value == np.inf
    for y in (np.array([1e17, 1e17]), np.array([1e8 + 0.5, 1e8, -1e8])):
        for fn in (sp.softmax, sp.log_softmax):
            got = ha.jacobian(lambda y, fn=fn: fn(y), y).value
            np.testing.assert_allclose(got, fn(y), rtol=1e-14)


def test_a_path_through_piecewise_constant_ops_has_no_derivative():
    """An input that reaches a fused region's value only through floor, sign,
    rint or a comparison gets no backward work at all (its derivative is 0,
    not a multiple of a partial stored or computed): the plan differentiating
    it too has the backward pass of the one that does not."""
    x, y = rand((50,), seed=1), rand((50,), seed=2)

    def f(x, y):
        return np.sum(np.exp(x) * np.floor(3 * y) + np.sign(y) * x + np.where(y > 0.5, x, 0.0))
    plan = ha.compile(f, x, y, argnums=(0, 1))
    res = plan.gradient(x, y)
    np.testing.assert_array_equal(res.gradient[1], 0.0)
    np.testing.assert_allclose(res.gradient[0], np.exp(x) * np.floor(3 * y) + np.sign(y) +
                               (y > 0.5), rtol=1e-14)
    def backward(plan):
        return [n.op for n in plan.graph.nodes if n.phase == "backward"]
    assert backward(plan) == backward(ha.compile(f, x, y))


def test_softmax_and_log_softmax():
    x = rand((3, 5), seed=3)
    w = rand((3, 5), seed=4)
    forms = [(fn, axis) for fn in (sp.softmax, sp.log_softmax) for axis in (None, 0, 1)]

    def f(x):
        return sum(np.sum(w * fn(x, axis=axis)) for fn, axis in forms)

    res = assert_grad(f, (x,))
    np.testing.assert_allclose(res.value, f(x), rtol=1e-13)


def test_polygamma_and_digamma():
    x = np.linspace(0.4, 3.0, 5)

    def f(x):
        return np.sum(sp.polygamma(1, x) + sp.polygamma(np.array([0, 1, 2, 3, 0]), x)
                      + sp.digamma(x) * x)

    res = assert_grad(f, (x,))
    np.testing.assert_allclose(res.value, f(x), rtol=1e-13)
    with pytest.raises(NotImplementedError, match="traced order"):
        ha.gradient(lambda n: np.sum(sp.polygamma(n, 1.5)), np.ones(2))


def test_zeta_order_refused_by_name_q_differentiated():
    q = np.linspace(0.5, 2.0, 4)
    assert_grad(lambda q: np.sum(sp.zeta(3.0, q)), (q,))
    with pytest.raises(NotImplementedError, match="scipy.special.zeta .*first"):
        ha.gradient(lambda s: np.sum(sp.zeta(s, 2.0)), np.array([2.5, 3.0]))
    # the order as a non-differentiated argument is fine
    s = np.array([2.5, 3.0])
    res = ha.gradient(lambda q, s: np.sum(sp.zeta(s, q)), np.array([1.0, 2.0]), s)
    np.testing.assert_allclose(res.value, np.sum(sp.zeta(s, [1.0, 2.0])), rtol=1e-14)


def test_special_function_of_data_argument():
    """``gammaln(y + 1)`` of a data argument that is not differentiated."""
    y = np.array([0.0, 1.0, 3.0, 7.0])
    mu = np.array([0.5, 1.5, 2.0, 6.0])

    def nll(mu, y):
        return np.sum(mu - y * np.log(mu) + sp.gammaln(y + 1))

    for backend in BACKENDS:
        res = ha.gradient(nll, mu, y, backend=backend)
        np.testing.assert_allclose(res.value, nll(mu, y), rtol=1e-14)
        np.testing.assert_allclose(res.gradient, 1 - y / mu, rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_huber_losses_at_their_edges(backend):
    """scipy.special.huber and pseudo_huber at delta = 0, delta < 0, r = 0, NaN
    and the kink |r| = delta: scipy's values; the delta-partial at delta = 0
    is the right derivative |r|, and every partial is finite where the value is."""
    delta = np.array([0.0, -1.0, 0.5, 0.5, 0.5, np.nan, 0.7, 2.0])
    r = np.array([0.3, 0.2, 0.0, 0.5, -0.5, 0.1, 0.0, -3.0])
    for fn in (sp.huber, sp.pseudo_huber):
        def f(z):
            return fn(z[:8], z[8:]) * np.linspace(1.0, 2.0, 8)
        res = ha.jacobian(f, np.concatenate([delta, r]), backend=backend)
        np.testing.assert_array_equal(res.value, f(np.concatenate([delta, r])))
        jd, jr = np.diag(res.jacobian[:, :8]), np.diag(res.jacobian[:, 8:])
        w = np.linspace(1.0, 2.0, 8)
        assert jd[0] == pytest.approx(0.3 * w[0]) and jr[0] == 0.0, fn.__name__
        finite = np.isfinite(res.value)
        assert np.all(np.isfinite(jd[finite])) and np.all(np.isfinite(jr[finite])), fn.__name__
        # away from the edges: central differences
        dd, rr = np.array([0.5, 0.9, 1.3]), np.array([0.2, -1.4, 2.0])
        g = ha.gradient(lambda z: np.sum(fn(z[:3], z[3:])), np.concatenate([dd, rr]),
                        backend=backend)
        np.testing.assert_allclose(g.gradient, numerical_gradient(
            lambda z: np.sum(fn(z[:3], z[3:])), np.concatenate([dd, rr])), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scipys_copies_of_numpys_ufuncs_and_distribution_functions(backend):
    """scipy.special's expm1, log1p, exp2, cbrt and round are traced as numpy's
    ufuncs (scipy's values to rounding); the distribution functions stdtr,
    chdtr, gdtr and pdtr are differentiable in their continuous arguments (pdtr's
    count floors: no derivative), their other parameters refused by name."""
    x = np.array([0.3, 0.9, 1.7, 2.6])

    def f(x):
        return np.sum(sp.expm1(x) * sp.log1p(x) + sp.exp2(x) - sp.cbrt(x) * sp.round(3 * x)
                      + sp.stdtr(2.5, x - 1) + sp.chdtr(3.0, x) + sp.gdtr(1.5, 2.0, x)
                      + sp.pdtr(2.7, x) + sp.powm1(x, 1.3) + sp.erfi(x / 3) + sp.cosm1(x))

    res = ha.gradient(f, x, backend=backend)
    np.testing.assert_allclose(res.value, f(x), rtol=1e-14)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-9)
    k = ha.gradient(lambda k: np.sum(sp.pdtr(k, x)), np.array([2.7, 2.7, 2.7, 2.7]),
                    backend=backend)
    np.testing.assert_array_equal(k.gradient, 0.0)
    for g in (lambda d: np.sum(sp.stdtr(d, x)), lambda v: np.sum(sp.chdtr(v, x)),
              lambda b: np.sum(sp.gdtr(1.5, b, x))):
        with pytest.raises(NotImplementedError, match="scipy.special"):
            ha.gradient(g, np.full(4, 2.0), backend=backend)


def test_unsupported_scipy_is_refused_by_name_at_the_users_line():
    x = np.linspace(0.5, 1.5, 3)
    with pytest.raises(NotImplementedError,
                       match=r"scipy\.special\.wrightomega .*test_scipy_special"):
        ha.gradient(lambda x: np.sum(sp.wrightomega(x)), x)
    # a Python function: refused while tracing, or as a host call a derivative reaches
    with pytest.raises((TracingError, NotImplementedError),
                       match=r"scipy\.special\.perm .*test_scipy_special"):
        ha.gradient(lambda x: np.sum(sp.perm(x, 2)), x)
    with pytest.raises(NotImplementedError, match=r"scipy\.stats\.nct\.logpdf"):
        ha.gradient(lambda x: np.sum(st.nct.logpdf(x, 3.0, 0.5)), x)


def test_outside_tracing_scipy_is_scipys():
    """The wrappers pass plain calls to scipy unchanged."""
    x = np.array([0.1, 0.7, 2.0])
    assert sp.logsumexp.__hybridad_original__(x) == sp.logsumexp(x)
    np.testing.assert_array_equal(st.norm.logpdf(x, 1.0, 2.0),
                                  st.norm.logpdf.__func__.__hybridad_original__(
                                      st.norm, x, 1.0, 2.0))


def test_repeated_calls_allocate_nothing():
    x = np.linspace(0.3, 2.0, 16)
    y = np.arange(16.0)

    def f(x, y):
        return np.sum(sp.gammaln(x) * sp.expit(x) + sp.xlogy(y, x)) + sp.logsumexp(x) + \
            np.sum(st.norm.logpdf(x, 0.5, 1.5))

    plan = ha.compile(f, x, y, backend="numba")
    out = ha.DiffResult(np.zeros(()), np.zeros(16))
    plan.gradient(x, y, out=out)
    assert_no_alloc(lambda: plan.gradient(x, y, out=out))

    frozen = st.multivariate_normal(np.zeros(4), np.eye(4) * 2.0)

    def g(x, y):  # the robust losses, the elementary, elliptic and distribution functions
        m = x / 2.5
        return np.sum(sp.huber(0.7, x - 1) + sp.pseudo_huber(0.7, x - 1) + sp.exp10(m)
                      + sp.cosm1(x) + sp.erfi(m) + sp.powm1(x, 1.3) + sp.stdtr(2.5, x)
                      + sp.chdtr(3.0, x) + sp.gdtr(1.5, 2.0, x) + sp.pdtr(2.0, x)
                      + sp.ellipk(m) + sp.ellipe(m) + sp.ellipkm1(m) + sp.expm1(m)
                      + st.weibull_min.logpdf(x, 1.7) + st.gumbel_r.cdf(x)) \
            + np.sum(frozen.logpdf(x.reshape(4, 4)))

    plan = ha.compile(g, x, y, backend="numba")
    plan.gradient(x, y, out=out)
    np.testing.assert_allclose(out.value, g(x, y), rtol=1e-13)
    assert_no_alloc(lambda: plan.gradient(x, y, out=out))


def test_against_jax_where_installed():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp, jsp = jax.numpy, jax.scipy.special
    x = np.linspace(0.3, 2.5, 7)

    def f(xp, special):
        return lambda x: xp.sum(special.gammaln(x) * special.erf(x) + special.digamma(x)
                                + special.xlogy(x, x + 1) + special.i0e(x)
                                + special.ndtri(x / 3) + special.log_ndtr(x - 1))

    res = ha.hessian(f(np, sp), x, backend="numba")
    g = jax.grad(f(jnp, jsp))(x)
    h = jax.hessian(f(jnp, jsp))(x)
    np.testing.assert_allclose(res.gradient, np.asarray(g), rtol=1e-12)
    np.testing.assert_allclose(res.hessian, np.asarray(h), rtol=1e-10, atol=1e-12)


def test_ufuncs_without_rules_are_values_of_data():
    """A ufunc hybridad has no rules for runs as numpy runs it on values that are
    not differentiated, and is refused by name where a derivative must pass."""
    mu = np.array([0.5, 1.5, 2.0, 3.0])
    y = np.array([0.3, 1.0, 2.0, 0.1])

    def f(mu, y):
        return np.sum(mu * sp.wrightomega(y) + mu ** 2 * np.spacing(y) * 1e15)

    expected = sp.wrightomega(y) + 2 * mu * np.spacing(y) * 1e15
    for backend in BACKENDS:
        res = ha.gradient(f, mu, y, backend=backend)
        np.testing.assert_allclose(res.value, f(mu, y), rtol=1e-14)
        np.testing.assert_allclose(res.gradient, expected, rtol=1e-14)
        h = ha.hessian(f, mu, y, backend=backend)
        np.testing.assert_allclose(h.hessian, np.diag(2 * np.spacing(y) * 1e15), rtol=1e-14)
    plan = ha.compile(f, mu, y, backend="numba")
    out = ha.DiffResult(np.zeros(()), np.zeros(4))
    plan.gradient(mu, y, out=out)
    assert_no_alloc(lambda: plan.gradient(mu, y, out=out))
    y2 = y + 0.5  # a new data value: recomputed on every call
    np.testing.assert_allclose(plan.gradient(mu, y2, out=out).value, f(mu, y2), rtol=1e-14)
    with pytest.raises(NotImplementedError, match=r"scipy\.special\.wrightomega \(at test_scipy"):
        ha.gradient(lambda y: np.sum(sp.wrightomega(y)), y)
    with pytest.raises(NotImplementedError, match=r"numpy\.spacing"):
        ha.hessian(lambda y: np.sum(np.spacing(y) * y), y)
