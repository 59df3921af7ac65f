"""scipy.stats in traced code, driven by hybridad's tables of distributions
(:mod:`hybridad.frontend.scipy_stats`): every distribution and method in them
gives scipy's values -- inside the support, at its ends and beyond them, at
the probabilities 0 and 1 and outside [0, 1] -- and derivatives in ``x`` (or
``q``) and in every parameter against central differences; one numba program
of all of them gives the numpy reference's values and gradients to rounding
and allocates nothing per call.  The multivariate distributions and
``gaussian_kde`` likewise (:mod:`hybridad.frontend.scipy_stats_multivariate`)."""

import warnings

import numpy as np
import pytest
import scipy.stats as st
from conftest import BACKENDS, assert_grad, rand

import hybridad as ha
from hybridad.frontend.scipy_stats import (CDF, DISCRETE_CDF, LOGPDF, LOGPMF, PPF,
                                          SHAPE_FIXED_TAILS)
from hybridad.testing import assert_no_alloc, numerical_gradient

#: a continuous distribution's shape parameters for the tests (every one in LOGPDF)
SHAPES = {
    "norm": (), "t": (3.5,), "gamma": (2.5,), "beta": (2.0, 3.5), "expon": (),
    "lognorm": (0.7,), "cauchy": (), "laplace": (), "logistic": (), "uniform": (),
    "chi2": (3.0,), "invgamma": (2.5,), "weibull_min": (1.7,), "weibull_max": (1.7,),
    "gumbel_r": (), "gumbel_l": (), "pareto": (2.5,), "lomax": (2.5,), "halfnorm": (),
    "halfcauchy": (), "rayleigh": (), "maxwell": (), "levy": (), "powerlaw": (1.7,),
    "skewnorm": (2.0,), "f": (3.0, 5.0), "gennorm": (1.5,), "truncnorm": (-0.8, 1.7),
    "vonmises": (2.0,), "vonmises_line": (2.0,), "wrapcauchy": (0.4,), "loggamma": (2.0,),
    "genpareto": (0.3,), "genextreme": (0.3,), "invgauss": (0.8,), "wald": (),
    "betaprime": (2.5, 3.5), "chi": (3.0,), "nakagami": (1.5,), "fisk": (2.5,),
    "burr12": (2.0, 1.5), "halflogistic": (), "gompertz": (1.5,), "johnsonsu": (0.5, 1.5),
    "hypsecant": (), "genlogistic": (1.5,), "moyal": (), "arcsine": (), "semicircular": (),
    "exponnorm": (1.5,), "rice": (1.2,), "foldnorm": (1.1,), "dweibull": (1.8,),
    "dgamma": (2.2,), "loguniform": (0.5, 4.0), "reciprocal": (0.5, 4.0), "truncexpon": (2.5,),
}
#: more cases: shapes that move the support or the density's behaviour at its ends
OTHER_SHAPES = [("genpareto", (-0.4,)), ("genextreme", (-0.3,)), ("gamma", (0.5,)),
                ("gamma", (1.0,)), ("beta", (0.5, 1.0)), ("weibull_min", (0.7,)),
                ("chi", (1.0,)), ("chi2", (2.0,)), ("powerlaw", (0.5,)), ("fisk", (1.0,)),
                ("genpareto", (-1.0,)), ("truncnorm", (-np.inf, 0.5)), ("truncnorm", (2.0, 9.0))]
LOC, SCALE = 0.2, 1.3
QS = np.array([0.1, 0.3, 0.45, 0.7, 0.9])
TAILS = ("cdf", "sf", "logcdf", "logsf")


def _cases():
    return [(n, SHAPES[n]) for n in sorted(SHAPES)] + OTHER_SHAPES


def _methods(name):
    return ("logpdf", "pdf") + (TAILS if name in CDF else ())


def _stacked(dist, methods, shapes):
    """``x -> concatenate of every method at x`` (one traced program)."""
    def f(x, *params):
        sh, loc, scale = (params[0][:-2], params[0][-2], params[0][-1]) if params else (
            shapes, LOC, SCALE)  # params: a sequence of the shapes, loc and scale
        return np.concatenate([getattr(dist, m)(x, *sh, loc=loc, scale=scale)
                               for m in methods])
    return f


def test_every_table_entry_has_its_test_case():
    assert set(SHAPES) == set(LOGPDF)
    assert set(CDF) <= set(LOGPDF) and set(PPF) <= set(LOGPDF)


@pytest.mark.parametrize("name,shapes", _cases())
def test_continuous_values_and_derivatives_in_x(name, shapes):
    """Every method of the distribution at points inside its support (its
    quantiles), at its finite ends and beyond them: scipy's values; in ``x``,
    central differences inside."""
    dist = getattr(st, name)
    methods = _methods(name)
    inside = dist.ppf(QS, *shapes, loc=LOC, scale=SCALE)
    lo, hi = dist.support(*shapes, loc=LOC, scale=SCALE)
    ends = [v for v in (lo - 0.5, lo, hi, hi + 0.5) if np.isfinite(v)]
    x = np.concatenate([inside, ends])
    f = _stacked(dist, methods, shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = ha.jacobian(f, x, backend="numpy")
        expected = f(x)
    np.testing.assert_allclose(res.value, expected, rtol=1e-12, atol=1e-15, equal_nan=True)
    n = x.size
    for k, m in enumerate(methods):
        block = res.jacobian[k * n:(k + 1) * n, :]
        for i in range(QS.size):
            def fi(t, i=i, m=m):
                return getattr(dist, m)(t, *shapes, loc=LOC, scale=SCALE)[0]
            num = numerical_gradient(fi, x[i:i + 1])[0]
            np.testing.assert_allclose(block[i, i], num, rtol=1e-6, atol=1e-9,
                                       err_msg=f"{name}.{m} at {x[i]}")
        np.testing.assert_array_equal(block[~np.eye(n, dtype=bool)], 0.0)  # elementwise


@pytest.mark.parametrize("name,shapes", _cases())
def test_continuous_derivatives_in_every_parameter(name, shapes):
    dist = getattr(st, name)
    x = dist.ppf(QS, *shapes, loc=LOC, scale=SCALE)
    every = np.array([*shapes, LOC, SCALE], dtype=float)
    free = np.isfinite(every)  # (an infinite truncation bound stays as it is)
    methods = [m for m in _methods(name) if m not in TAILS or name not in SHAPE_FIXED_TAILS]
    stacked = _stacked(dist, methods, shapes)

    def f(x, p=None):  # p: the finite parameters
        if p is None:
            return stacked(x)
        it = iter(p[i] for i in range(p.size))
        return stacked(x, [next(it) if ok else v for v, ok in zip(every, free, strict=True)])

    params = every[free]
    res = ha.jacobian(lambda p: f(x, p), params, backend="numpy")
    np.testing.assert_allclose(res.value, f(x), rtol=1e-12)
    for r in range(res.value.size):
        num = numerical_gradient(lambda p, r=r: f(x, p)[r], params)
        np.testing.assert_allclose(res.jacobian[r], num, rtol=2e-6, atol=1e-8,
                                   err_msg=f"{name} row {r}")
    if name in SHAPE_FIXED_TAILS and name in CDF and shapes:
        with pytest.raises(NotImplementedError, match=r"scipy\.special\.\w+ has no derivative"):
            ha.gradient(lambda p: np.sum(dist.cdf(x, *p)), np.array(shapes), backend="numpy")
        g = ha.gradient(lambda p: np.sum(dist.logsf(x, *shapes, loc=p[0], scale=p[1])),
                        np.array([LOC, SCALE]), backend="numpy")
        np.testing.assert_allclose(g.gradient, numerical_gradient(
            lambda p: np.sum(dist.logsf(x, *shapes, loc=p[0], scale=p[1])),
            np.array([LOC, SCALE])), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", sorted(PPF))
def test_quantile_functions(name):
    """``ppf`` and ``isf``: scipy's values in (0, 1), the support's ends at 0 and
    1, NaN outside; derivatives in ``q`` and in the parameters."""
    dist = getattr(st, name)
    shapes = SHAPES[name]
    q = np.concatenate([QS, [0.0, 1.0, -0.1, 1.1]])
    for method in ("ppf", "isf"):
        def f(q, p=None, method=method):
            sh, loc, scale = (shapes, LOC, SCALE) if p is None else (p[:-2], p[-2], p[-1])
            return getattr(dist, method)(q, *sh, loc=loc, scale=scale)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = ha.jacobian(f, q, backend="numpy")
            expected = f(q)
        np.testing.assert_allclose(res.value, expected, rtol=1e-12, atol=1e-15,
                                   equal_nan=True, err_msg=method)
        num = [numerical_gradient(lambda t, i=i: f(t)[0], q[i:i + 1], eps=1e-7)[0]
               for i in range(QS.size)]
        np.testing.assert_allclose(np.diag(res.jacobian)[:QS.size], num, rtol=1e-6,
                                   err_msg=method)
        params = np.array([*shapes, LOC, SCALE])
        g = ha.gradient(lambda p, method=method: np.sum(f(QS, p, method)), params,
                        backend="numpy")
        np.testing.assert_allclose(g.gradient, numerical_gradient(
            lambda p: np.sum(f(QS, p)), params), rtol=1e-6, atol=1e-9, err_msg=method)


def test_gennorm_cdf_at_its_centre():
    """The generalized normal's cdf at z = 0 (its formula's derivative is 0 * inf
    there): the density."""
    for beta in (0.6, 1.5, 3.0):
        g = ha.gradient(lambda x: np.sum(st.gennorm.cdf(x, beta, loc=0.2)), np.array([0.2]))
        np.testing.assert_allclose(g.gradient, st.gennorm.pdf(0.0, beta), rtol=1e-14)
        np.testing.assert_allclose(g.value, 0.5)


#: a discrete distribution's shapes (every one in LOGPMF), which of them are
#: differentiated (the others are counts)
DISCRETE = {"poisson": ((2.5,), (0,)), "binom": ((9, 0.3), (1,)), "nbinom": ((4.0, 0.4), (1,)),
            "bernoulli": ((0.3,), (0,)), "geom": ((0.35,), (0,)),
            "betabinom": ((9, 2.5, 1.5), (1, 2)), "logser": ((0.6,), (0,)),
            "planck": ((0.7,), (0,)), "dlaplace": ((0.8,), (0,)),
            "skellam": ((2.5, 1.5), (0, 1))}


def test_every_discrete_table_entry_has_its_test_case():
    assert set(DISCRETE) == set(LOGPMF) and set(DISCRETE_CDF) <= set(LOGPMF)


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_discrete_values_and_derivatives_in_the_parameters(name):
    """logpmf, pmf and where tabled the tails at counts inside, at and beyond
    the support's ends and between counts: scipy's values; in the continuous
    parameters, central differences."""
    dist = getattr(st, name)
    shapes, free = DISCRETE[name]
    k = np.array([-3.0, -1.0, 0.0, 1.0, 2.0, 2.5, 3.0, 6.0, 9.0, 10.0, 12.0])
    methods = ("logpmf", "pmf") + (TAILS if name in DISCRETE_CDF else ())

    def f(p):
        sh = list(shapes)
        for j, i in enumerate(free):
            sh[i] = p[j]
        return np.concatenate([getattr(dist, m)(k, *sh, loc=1) for m in methods])

    p0 = np.array([shapes[i] for i in free], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = ha.jacobian(f, p0, backend="numpy")
        expected = f(p0)
    np.testing.assert_allclose(res.value, expected, rtol=1e-11, atol=1e-15)
    finite = np.isfinite(expected) & (expected != 0) & (np.abs(expected) != 1)
    for r in np.flatnonzero(finite):
        num = numerical_gradient(lambda p, r=r: f(p)[r], p0)
        np.testing.assert_allclose(res.jacobian[r], num, rtol=1e-6, atol=1e-9,
                                   err_msg=f"{name} row {r}")


def test_one_numba_program_of_every_distribution_allocates_nothing():
    """Every continuous distribution's logpdf and tails, every quantile function
    and every discrete logpmf in ONE numba program: the numpy reference's value
    and gradient to rounding, nothing allocated per call."""
    names = sorted(SHAPES)
    X = np.stack([getattr(st, n).ppf(QS, *SHAPES[n], loc=LOC, scale=SCALE) for n in names])
    k = np.array([0.0, 1.0, 2.0, 4.0, 5.0])

    def f(X, q):
        total = 0.0
        for i, n in enumerate(names):
            d, sh = getattr(st, n), SHAPES[n]
            total = total + np.sum(d.logpdf(X[i], *sh, loc=LOC, scale=SCALE))
            if n in CDF:
                total = total + np.sum(d.logcdf(X[i], *sh, loc=LOC, scale=SCALE)
                                       + d.sf(X[i], *sh, loc=LOC, scale=SCALE))
            if n in PPF:
                total = total + np.sum(d.ppf(q, *sh) - d.isf(q, *sh))
        for n, (sh, free) in DISCRETE.items():
            p = [X[0, 2] * s if j in free else s for j, s in enumerate(sh)]
            total = total + np.sum(getattr(st, n).logpmf(k, *p))
            if n in DISCRETE_CDF:
                total = total + np.sum(getattr(st, n).cdf(k, *p))
        return total

    q = QS.copy()
    ref = ha.gradient(f, X, q, argnums=(0, 1), backend="numpy")
    plan = ha.compile(f, X, q, argnums=(0, 1), backend="numba")
    out = ha.GradientResult((X, q))
    plan.gradient(X, q, out=out)
    np.testing.assert_allclose(out.value, f(X, q), rtol=1e-12)
    for g, g0 in zip(out.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-13 * np.max(np.abs(g0)))
    assert_no_alloc(lambda: plan.gradient(X, q, out=out))


def test_frozen_distributions_and_support():
    x = np.array([-1.0, 0.5, 2.0])

    def f(x):
        return np.sum(st.norm(0.5, 2.0).logpdf(x) + st.expon(scale=2.0).logpdf(x + 1.5)
                      + st.truncnorm(-1.0, 1.5, loc=0.1).logcdf(x / 3)
                      + st.genextreme(0.2).ppf(x / 5 + 0.5))

    assert_grad(f, (x,))
    v = ha.gradient(lambda x: np.sum(np.exp(st.gamma.logpdf(x, 2.0))), x)
    np.testing.assert_allclose(v.value, np.sum(st.gamma.pdf(x, 2.0)), rtol=1e-14)
    assert v.gradient[0] == 0.0  # outside the support: -inf log-density, no derivative
    m = ha.gradient(lambda p: np.sum(st.gamma(p[0], scale=p[1]).logpdf(x[1:])),
                    np.array([2.5, 1.5]))
    np.testing.assert_allclose(m.gradient, numerical_gradient(
        lambda p: np.sum(st.gamma(p[0], scale=p[1]).logpdf(x[1:])), np.array([2.5, 1.5])),
        rtol=1e-7)


def test_unsupported_distributions_and_methods_are_refused_by_name():
    x = np.linspace(0.5, 1.5, 3)
    with pytest.raises(NotImplementedError, match=r"scipy\.stats\.nct\.logpdf .*ppf|logpdf"):
        ha.gradient(lambda x: np.sum(st.nct.logpdf(x, 3.0, 0.5)), x)
    with pytest.raises(NotImplementedError, match=r"scipy\.stats\.gamma\.ppf"):
        ha.gradient(lambda x: np.sum(st.gamma.ppf(x / 2, 2.0)), x)
    with pytest.raises(NotImplementedError, match=r"scipy\.stats\.vonmises\.cdf"):
        ha.gradient(lambda x: np.sum(st.vonmises.cdf(x, 2.0)), x)


# multivariate distributions and kernel density estimates
# --------------------------------------------------------------------------
def test_multivariate_normal_logpdf():
    x = rand((4, 3), seed=21)
    A = rand((3, 3), seed=22)
    cov = A @ A.T + 3 * np.eye(3)

    def f(x, mean, A):  # a symmetric covariance (scipy reads one triangle)
        return np.sum(st.multivariate_normal.logpdf(x, mean, A @ A.T + 3 * np.eye(3)))

    mean = np.array([0.1, -0.2, 0.3])
    res = assert_grad(f, (x, mean, A), argnums=(0, 1, 2))
    np.testing.assert_allclose(res.value, f(x, mean, A), rtol=1e-13)
    one = ha.gradient(lambda x: st.multivariate_normal.logpdf(x, mean, cov), x[0])
    np.testing.assert_allclose(one.value, st.multivariate_normal.logpdf(x[0], mean, cov),
                               rtol=1e-13)


def _spd(a, k):
    a = a.reshape(k, k)
    return a @ a.T + 3 * np.eye(k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_multivariate_frozen_and_pdf(backend):
    """``multivariate_normal`` and ``multivariate_t``, frozen with constants and a
    traced ``x``, frozen with traced parameters, and ``pdf`` of both forms:
    scipy's values, derivatives to central differences."""
    X = rand((4, 3), seed=23)
    A = rand((3, 3), seed=24)
    S = _spd(A, 3)
    m0 = np.array([0.2, -0.1, 0.4])
    frozen = st.multivariate_normal(m0, S)
    frozen_t = st.multivariate_t(m0, S, df=4.5)
    cases = [
        (lambda x: np.sum(frozen.logpdf(x.reshape(4, 3))), X.ravel()),
        (lambda x: np.sum(frozen.pdf(x.reshape(4, 3))), X.ravel()),
        (lambda x: frozen.logpdf(x), X[0]),
        (lambda m: np.sum(st.multivariate_normal(m, S).logpdf(X)), m0),
        (lambda m: np.sum(st.multivariate_normal(mean=m, cov=S).pdf(X)), m0),
        (lambda a: np.sum(st.multivariate_normal(m0, _spd(a, 3)).logpdf(X)), A.ravel()),
        (lambda x: np.sum(st.multivariate_normal.pdf(x.reshape(4, 3), m0, S)), X.ravel()),
        (lambda x: np.sum(frozen_t.logpdf(x.reshape(4, 3))), X.ravel()),
        (lambda x: np.sum(st.multivariate_t.pdf(x.reshape(4, 3), m0, S, df=3.0)), X.ravel()),
        (lambda p: np.sum(st.multivariate_t(p[:3], S, df=p[3]).logpdf(X)),
         np.array([*m0, 4.5])),
        (lambda a: np.sum(st.multivariate_t.logpdf(X, m0, _spd(a, 3), 2.5)), A.ravel()),
        (lambda x: np.sum(st.multivariate_t.logpdf(x.reshape(4, 3), m0, S, df=np.inf)),
         X.ravel()),
    ]
    for f, x in cases:
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dirichlet_and_multinomial(backend):
    alpha = np.array([1.5, 2.0, 3.5])
    X = np.array([[0.2, 0.3, 0.6], [0.3, 0.5, 0.1], [0.5, 0.2, 0.3]])  # components: rows

    cases = [
        (lambda a: st.dirichlet.logpdf(X[:, 0], a), alpha),
        (lambda x: st.dirichlet.logpdf(x, alpha), X[:2, 1]),  # k - 1 components
        (lambda x: np.sum(st.dirichlet.logpdf(x.reshape(2, 3), alpha)), X[:2].ravel()),
        (lambda x: st.dirichlet.pdf(x, alpha), X[:2, 0]),
        (lambda a: np.sum(st.dirichlet.pdf(X, a)), alpha),
        # p on the simplex as a softmax (scipy replaces the last entry of a p that
        # does not sum to one: differences of p itself leave the simplex)
        (lambda t: st.multinomial.logpmf([1, 2, 3], 6, np.exp(t) / np.sum(np.exp(t))),
         np.array([0.2, -0.3, 0.5])),
        (lambda t: np.sum(st.multinomial.pmf(np.array([[1, 2, 3], [0, 6, 0]]), 6,
                                             np.exp(t) / np.sum(np.exp(t)))),
         np.array([0.2, -0.3, 0.5])),
    ]
    for f, x in cases:
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-9)
    # all k components traced: the partials of the density's formula
    res = ha.gradient(lambda x: np.sum(st.dirichlet.logpdf(x.reshape(3, 3), alpha)), X.ravel(),
                      backend=backend)
    np.testing.assert_allclose(res.value, np.sum(st.dirichlet.logpdf(X, alpha)), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, ((alpha[:, None] - 1) / X).ravel(), rtol=1e-14)
    # p itself: the partials of the mass's formula, x / p (as JAX's)
    p = np.array([0.2, 0.3, 0.5])
    res = ha.gradient(lambda p: st.multinomial.logpmf([1, 2, 3], 6, p), p, backend=backend)
    np.testing.assert_allclose(res.value, st.multinomial.logpmf([1, 2, 3], 6, p), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, np.array([1, 2, 3]) / p, rtol=1e-14)
    # off the simplex and bad counts: NaN and -inf where scipy raises or gives -inf
    off = ha.gradient(lambda x: st.dirichlet.logpdf(x, alpha), np.array([0.5, 0.6, 0.1]),
                      backend=backend)
    assert np.isnan(off.value)
    bad = ha.gradient(lambda p: st.multinomial.logpmf([1, 2, 2], 6, p),
                      np.array([0.2, 0.3, 0.5]), backend=backend)
    assert bad.value == -np.inf and np.all(bad.gradient == 0)
    with pytest.raises(ValueError, match="dirichlet"):
        ha.gradient(lambda x: st.dirichlet.logpdf(x, alpha), np.full(5, 0.2), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_kde_of_traced_points(backend):
    rng = np.random.default_rng(5)
    kde1 = st.gaussian_kde(rng.standard_normal(40))
    kde2 = st.gaussian_kde(rng.standard_normal((2, 30)), weights=rng.uniform(0.5, 1.5, 30))
    pts1 = np.array([-0.4, 0.1, 1.3])
    pts2 = rng.standard_normal((2, 4))
    cases = [
        (lambda x: np.sum(kde1.logpdf(x)), pts1),
        (lambda x: np.sum(kde1(x)), pts1),
        (lambda x: np.sum(kde1.pdf(x) * kde1.evaluate(x)), pts1),
        (lambda x: np.sum(kde2.logpdf(x.reshape(2, 4))), pts2.ravel()),
        (lambda x: np.sum(kde2.pdf(x)), pts2[:, 0]),  # one 2-d point
    ]
    for f, x in cases:
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_allclose(res.value, f(x), rtol=1e-12)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6,
                                   atol=1e-9)


def test_multivariate_plans_allocate_nothing():
    X = rand((4, 3), seed=31)
    S = _spd(rand((3, 3), seed=32), 3)
    kde = st.gaussian_kde(np.random.default_rng(1).standard_normal((3, 20)))
    alpha = np.array([1.5, 2.0, 3.5])

    def f(x, m):
        return (np.sum(st.multivariate_t.logpdf(x, m, S, df=3.5))
                + np.sum(st.multivariate_normal(m, S).logpdf(x)) + np.sum(kde.logpdf(x.T))
                + st.dirichlet.logpdf(np.exp(m) / np.sum(np.exp(m)), alpha)
                + st.multinomial.logpmf([2, 1, 3], 6, np.exp(m) / np.sum(np.exp(m))))

    m = np.array([0.1, -0.3, 0.2])
    plan = ha.compile(f, X, m, argnums=(0, 1), backend="numba")
    out = ha.GradientResult((X, m))
    plan.gradient(X, m, out=out)
    np.testing.assert_allclose(out.value, f(X, m), rtol=1e-12)
    assert_no_alloc(lambda: plan.gradient(X, m, out=out))


# scipy.stats' summary statistics: scipy's array-API code, run on tracers
# --------------------------------------------------------------------------
SUMMARIES = {
    "skew": lambda x: st.skew(x), "kurtosis": lambda x: st.kurtosis(x),
    "moment": lambda x: st.moment(x, 3), "entropy": lambda x: st.entropy(np.abs(x) + 0.1),
    "entropy relative": lambda x: st.entropy(np.abs(x) + 0.1, np.linspace(1, 2, 8)),
    "gmean": lambda x: st.gmean(np.abs(x) + 0.5), "hmean": lambda x: st.hmean(np.abs(x) + 0.5),
    "pmean": lambda x: st.pmean(np.abs(x) + 0.5, 2.5), "sem": lambda x: st.sem(x),
    "trim_mean": lambda x: st.trim_mean(x, 0.1), "iqr": lambda x: st.iqr(x),
    "median_abs_deviation": lambda x: st.median_abs_deviation(x),
    "tvar": lambda x: st.tvar(x), "circvar": lambda x: st.circvar(x),
    "circstd": lambda x: st.circstd(x), "circmean": lambda x: st.circmean(x),
    "zscore": lambda x: np.sum(st.zscore(x) ** 3), "boxcox_llf": lambda x: st.boxcox_llf(
        0.5, np.abs(x) + 1), "yeojohnson_llf": lambda x: st.yeojohnson_llf(0.5, x),
}


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_summary_statistics_of_traced_samples(name):
    f = SUMMARIES[name]
    x = rand((8,), seed=61)
    res = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(res.value, f(x), rtol=1e-12)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-9,
                               err_msg=name)


def test_results_that_are_objects_are_refused_by_name():
    """A function with no rules that returns an object (linregress's result, pearsonr's)
    is refused naming it (its traced stand-in had no attributes: AttributeError)."""
    x = rand((8,), seed=62)
    for f, name in ((lambda y: st.linregress(np.arange(8.0), y).slope, "linregress"),
                    (lambda y: st.pearsonr(y, np.arange(8.0)).statistic, "pearsonr")):
        with pytest.raises(NotImplementedError, match=rf"scipy\.stats\.{name} .*returns a"):
            ha.gradient(f, x, backend="numpy")


def test_float32_samples_are_computed_in_float64_as_scipy():
    """scipy computes a distribution's methods in float64 whatever the sample's
    dtype: a float32 sample gives scipy's float64 values, not float32 rounding."""
    x = np.linspace(0.1, 2.0, 5).astype(np.float32)
    for f in (lambda v: st.norm.logpdf(v, 0.3, 1.2), lambda v: st.gamma.logcdf(v, 2.5),
              lambda v: st.poisson.logpmf(np.arange(5.0), v),
              lambda v: st.multivariate_normal.logpdf(v, np.zeros(5), np.eye(5))):
        res = ha.jacobian(lambda v, f=f: np.ravel(f(v)), x, backend="numpy")
        assert res.value.dtype == np.float64
        np.testing.assert_allclose(res.value, np.ravel(f(x)), rtol=1e-14)


def test_lists_and_tuples_as_values_and_parameters():
    """``poisson.logpmf([1, 2, 0], mu)``: scipy takes lists and tuples for the
    values and the parameters; the discrete methods (and a continuous one
    whose ``loc`` was a number) raised ``TypeError: unsupported operand
    type(s) for -: 'list' and 'int'``.  Against scipy's values and finite
    differences."""
    counts = [1, 2, 0, 3, 1, 2]

    def f(x):
        return (np.sum(st.poisson.logpmf(counts, x)) +
                np.sum(st.binom.logpmf(counts, [5, 5, 4, 6, 5, 5], x / 3)) +
                np.sum(st.nbinom.cdf(counts, 3.0, x / 3)) +
                np.sum(st.norm.logpdf([0.1, 0.5, 1.0], loc=x[0], scale=x[1])) +
                np.sum(st.norm.logpdf([x[0], 0.5], loc=0.2)) +
                np.sum(st.gamma.logpdf((0.5, 1.0, 2.0), a=x[:3] + 1)) +
                np.sum(st.poisson(x[:3]).logpmf([1, 2, 0])))

    x = np.array([0.3, 1.2, 0.7, 2.1, 0.4, 1.5])
    assert_grad(f, (x,))
