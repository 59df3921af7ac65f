"""scipy.special ufuncs traced as compositions (hybridad.frontend.scipy_special_composites):
scipy's values on grids through every edge case (counts out of range,
probabilities outside [0, 1], zeros, signs, non-integer counts), derivatives
in the continuous arguments against central differences on both CPU
backends, second derivatives, and the shape and count arguments refused by
name."""

import itertools
import warnings

import numpy as np
import pytest
import scipy.special as sp

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

#: name -> (edge grid per argument, the continuous arguments' positions, an
#: interior point)
CASES = {
    "chdtrc": ([[0.5, 1, 3.3, 0, -1], [-1, 0, 0.5, 3, 40]], (1,), [2.5, 1.7]),
    "gdtrc": ([[0.5, 2], [0.5, 3.3], [-1, 0, 0.5, 3]], (0, 2), [1.3, 2.2, 1.1]),
    "pdtrc": ([[-1, 0, 0.5, 1, 3.7, 10], [-1, 0, 0.2, 3, 20]], (1,), [3.0, 2.4]),
    "bdtr": ([[-1, 0, 1, 2.5, 5, 6], [0, 1, 5, 5.5, 10], [-0.1, 0, 0.3, 1, 1.1]], (2,),
             [2.0, 7.0, 0.35]),
    "bdtrc": ([[-1, 0, 1, 2.5, 5, 6], [0, 1, 5, 5.5, 10], [-0.1, 0, 0.005, 0.3, 1, 1.1]],
              (2,), [2.0, 7.0, 0.35]),
    "nbdtr": ([[-1, 0, 1, 2.5, 5], [-1, 0, 1, 5.5], [-0.1, 0, 0.3, 1, 1.1]], (2,),
              [3.0, 4.0, 0.45]),
    "nbdtrc": ([[-1, 0, 1, 2.5, 5], [-1, 0, 1, 5.5], [-0.1, 0, 0.3, 1, 1.1]], (2,),
               [3.0, 4.0, 0.45]),
    "betaincc": ([[0.5, 2], [0.7, 3], [0, 0.3, 1]], (2,), [1.5, 2.5, 0.4]),
    "kn": ([[0, 1, 3], [0.1, 1, 5]], (1,), [2, 1.3]),
    "jve": ([[-2.5, 0, 1, 3.2], [0, 0.5, 10]], (1,), [1.5, 2.2]),
    "yve": ([[-2.5, 0, 1, 3.2], [0.5, 10]], (1,), [1.5, 2.2]),
    "agm": ([[-2, -0.5, 0, 0.5, 3], [-1, 0, 0.7, 4]], (0, 1), [1.2, 3.1]),
    "radian": ([[-10, 0, 45], [0, 30], [0, 15.5]], (0, 1, 2), [12.0, 20.0, 33.0]),
    "sindg": ([[-720, -90, 0, 30, 90, 180, 270, 360, 1000.5]], (0,), [37.0]),
    "cosdg": ([[-720, -90, 0, 30, 90, 180, 270, 360, 1000.5]], (0,), [37.0]),
    "inv_boxcox": ([[-0.5, 0, 2], [-0.5, 0, 0.3, 2]], (0, 1), [0.7, 0.4]),
    "inv_boxcox1p": ([[-0.5, 0, 2], [-0.5, 0, 0.3, 2]], (0, 1), [0.7, 0.4]),
}


def _call(name, args):
    """scipy's own values (its warnings -- domain errors, the deprecation of
    non-integer counts -- silenced)."""
    if name == "kn":
        args = [np.asarray(args[0]).astype(int), *args[1:]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(sp, name)(*args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_are_scipys_through_the_edges(name):
    grids, continuous, _ = CASES[name]
    points = np.array(list(itertools.product(*grids)), dtype=float)
    cols = [points[:, i].copy() for i in range(points.shape[1])]
    want = _call(name, cols)
    seen = {}

    def f(*cs):
        seen["values"] = getattr(sp, name)(*cs)
        return np.sum(np.where(np.isfinite(seen["values"]), seen["values"], 0.0))

    plan = ha.compile(f, *cols, argnums=continuous[-1], backend="numpy")
    res = plan.gradient(*cols)
    assert float(res.value) == pytest.approx(np.sum(np.where(np.isfinite(want), want, 0.0)),
                                             rel=1e-13, abs=1e-300)
    # element by element: each point on its own (one plan of shape (1,))
    one = ha.compile(lambda *cs: np.sum(getattr(sp, name)(*cs)),
                     *(c[:1] for c in cols), argnums=continuous[-1], backend="numpy")
    got = np.array([float(one.gradient(*(c[j:j + 1] for c in cols)).value)
                    for j in range(len(points))])
    both_nan = np.isnan(got) & np.isnan(want)
    np.testing.assert_allclose(got[~both_nan], want[~both_nan], rtol=1e-13, atol=1e-15,
                               err_msg=f"{name} at {points[~both_nan]}")
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_in_the_continuous_arguments(name):
    _, continuous, point = CASES[name]
    x = np.array([point[i] for i in continuous])

    def f(z):
        args = list(point)
        for k, i in enumerate(continuous):
            args[i] = z[k]
        return np.sum(_call(name, args) ** 2) if not isinstance(z, ha.core.tracer.Tracer) \
            else np.sum(getattr(sp, name)(*args) ** 2)

    res = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, x), rtol=1e-6, atol=1e-9)


def test_the_compiled_backend_agrees_and_hessians():
    def f(z):
        return (sp.bdtr(3, 9, z[0]) + sp.chdtrc(2.5, z[1]) ** 2 + sp.agm(z[2], z[1])
                + sp.inv_boxcox(z[3], z[0]) + sp.kn(2, z[1]) * sp.cosdg(z[4])
                + sp.nbdtrc(2, 5, z[0]) * sp.jve(1.5, z[2]) + sp.betaincc(1.5, 2.5, z[0]))

    z = np.array([0.35, 1.7, 2.2, 0.6, 33.0])
    ref = ha.gradient(f, z, backend="numpy")
    plan = ha.compile(f, z, backend="numba")
    got = plan.gradient(z)
    assert float(got.value) == pytest.approx(float(ref.value), rel=1e-13)
    np.testing.assert_allclose(got.gradient, ref.gradient, rtol=1e-12)
    assert_no_alloc(lambda: plan.gradient(z, out=got))
    H = ha.hessian(f, z, backend="numpy").hessian
    G = np.stack([numerical_gradient(lambda x, i=i: ha.gradient(f, x, backend="numpy")
                                     .gradient[i], z) for i in range(z.size)])
    np.testing.assert_allclose(H, G, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f, match", [
    (lambda z: sp.bdtr(3, z[0] * 10, 0.3), r"betainc has no derivative rule"),
    (lambda z: sp.chdtrc(z[0], 1.5), r"gammaincc has no derivative rule"),
    (lambda z: sp.kn(z[0], 1.5), r"kv has no derivative rule"),
])
def test_shape_and_count_arguments_are_refused_by_name(f, match):
    with pytest.raises(NotImplementedError, match=match):
        ha.gradient(f, np.array([0.9]), backend="numpy")


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_in_scipys_dtype(name):
    """scipy's loop for float32 (computed in double, rounded) or float64 (kn,
    radian of Python numbers: its loops' dtypes)."""
    _, continuous, point = CASES[name]
    x = np.array([point[continuous[-1]]], dtype=np.float32)
    seen = {}

    def f(z):
        args = list(point)
        args[continuous[-1]] = z
        seen["value"] = getattr(sp, name)(*args)
        return np.sum(seen["value"])

    res = ha.gradient(f, x, backend="numpy")
    args = list(point)
    args[continuous[-1]] = x
    want = _call(name, args)
    assert seen["value"].dtype == want.dtype
    assert float(res.value) == pytest.approx(float(want[0]), rel=1e-6)


#: orthogonal polynomials: name -> parameters (before x), the points x
POLYNOMIALS = {
    "eval_legendre": ((), np.linspace(-1, 1, 9)),
    "eval_sh_legendre": ((), np.linspace(0, 1, 9)),
    "eval_chebyt": ((), np.linspace(-1, 1, 9)),
    "eval_chebyu": ((), np.linspace(-1, 1, 9)),
    "eval_chebyc": ((), np.linspace(-2, 2, 9)),
    "eval_chebys": ((), np.linspace(-2, 2, 9)),
    "eval_sh_chebyt": ((), np.linspace(0, 1, 9)),
    "eval_sh_chebyu": ((), np.linspace(0, 1, 9)),
    "eval_hermite": ((), np.linspace(-3, 3, 9)),
    "eval_hermitenorm": ((), np.linspace(-3, 3, 9)),
    "eval_laguerre": ((), np.linspace(0, 8, 9)),
    "eval_genlaguerre": ((0.7,), np.linspace(0, 8, 9)),
    "eval_gegenbauer": ((0.7,), np.linspace(-1, 1, 9)),
}
DEGREES = np.array([0, 1, 2, 3, 5, 8, 13, 21, 30])


@pytest.mark.parametrize("name", sorted(POLYNOMIALS))
def test_orthogonal_polynomials(name):
    """Values of degrees 0 to 30 against scipy's (each point its own degree),
    their x-derivatives against central differences of scipy's."""
    params, x = POLYNOMIALS[name]
    u = getattr(sp, name)
    res = ha.jacobian(lambda z: u(DEGREES, *params, z), x, backend="numpy")
    want = u(DEGREES, *params, x)
    np.testing.assert_allclose(res.value, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    h = 1e-6 * np.maximum(1.0, np.abs(x))
    slope = (u(DEGREES, *params, x + h) - u(DEGREES, *params, x - h)) / (2 * h)
    np.testing.assert_allclose(np.diag(res.jacobian), slope, rtol=1e-6,
                               atol=1e-7 * np.abs(slope).max())


@pytest.mark.parametrize("name", ["eval_genlaguerre", "eval_gegenbauer"])
def test_polynomial_parameters_are_differentiable(name):
    u = getattr(sp, name)

    def f(z):
        return np.sum(u(np.array([2, 5, 9]), z[0], z[1:]) ** 2)

    z = np.array([0.6, 0.3, -0.4, 0.8])
    res = ha.gradient(f, z, backend="numpy")
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, z), rtol=1e-6, atol=1e-9)
    plan = ha.compile(f, z, backend="numba")
    got = plan.gradient(z)
    np.testing.assert_allclose(got.gradient, res.gradient, rtol=1e-12)
    assert_no_alloc(lambda: plan.gradient(z, out=got))


@pytest.mark.parametrize("f, match", [
    (lambda z: sp.eval_legendre(z[0], z), r"traced degree n"),
    (lambda z: sp.eval_chebyt(2.5, z), r"non-integer or negative degrees"),
    (lambda z: sp.eval_hermite(-1, z), r"non-integer or negative degrees"),
])
def test_polynomial_degrees_are_constant_integers(f, match):
    with pytest.raises(NotImplementedError, match=match):
        ha.gradient(lambda z: np.sum(f(z)), np.array([0.3, 0.6]), backend="numpy")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", ["inv_boxcox", "inv_boxcox1p"])
def test_inverse_box_cox_in_lambda_at_and_near_zero(name, backend):
    """The derivatives in ``lmbda`` at 0 are ``-e^y y^2 / 2`` and ``e^y (y^4 /
    4 + 2 y^3 / 3)``: the value there is ``exp(y)`` (``expm1(y)``), whose own
    derivative in ``lmbda`` is 0 -- the gradient was exactly 0 at lmbda = 0,
    and the quotient's second derivative 0 at 1e-9 (its terms cancel).  Near
    0 they are the series' (|lmbda y| < 1e-3); beyond, the quotient's."""
    fn = getattr(sp, name)
    y = np.array([0.3, -0.4, 1.5])
    d1 = -np.sum(np.exp(y) * y ** 2 / 2)
    d2 = np.sum(np.exp(y) * (y ** 4 / 4 + 2 * y ** 3 / 3))

    def f(lam):
        return np.sum(fn(y, lam[0]))

    for lam, rtol in ((0.0, 1e-14), (1e-9, 1e-7), (-1e-9, 1e-7)):
        at = np.array([lam])
        res = ha.gradient(f, at, backend=backend)
        assert res.value == pytest.approx(f(at), rel=1e-15)
        assert res.gradient[0] == pytest.approx(d1, rel=rtol)
        h = ha.hessian(f, at, backend=backend).hessian
        assert h[0, 0] == pytest.approx(d2, rel=max(rtol, 1e-12))
    for lam in (5e-4, 2e-3, 0.3):  # (both sides of the series' edge at |lmbda y| = 1e-3)
        at = np.array([lam])
        res = ha.gradient(f, at, backend=backend)
        assert res.value == pytest.approx(f(at), rel=1e-14)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, at), rtol=1e-7)
