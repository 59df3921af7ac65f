"""scipy.interpolate in traced code (hybridad.frontend.scipy_interpolate):
interpolants of constant data evaluated at traced points, and interpolants of
traced values -- scipy's values inside, at and beyond the data's range,
derivatives against central differences on both CPU backends, scipy's errors
for points out of bounds, refusals by name, nothing allocated per call."""

import pickle

import numpy as np
import pytest
import scipy.interpolate as si
from conftest import BACKENDS

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

XT = np.linspace(0.0, 3.0, 9)
YT = np.sin(XT) + 0.1 * XT ** 2
Y2 = np.stack([YT, np.cos(XT)], axis=1)  # (9, 2): two curves along axis 0
INSIDE = np.array([0.15, 0.7, 1.33, 2.05, 2.9])
OUTSIDE = np.array([-0.4, 3.0, 3.5])  # below, at the end, above
GRID = (np.linspace(0, 2, 5), np.linspace(-1, 1, 4))
VALUES = np.add.outer(np.sin(GRID[0]), GRID[1] ** 2)

#: name -> the interpolant of constant data (scipy's object)
OBJECTS = {
    "CubicSpline": si.CubicSpline(XT, YT),
    "CubicSpline no extrapolation": si.CubicSpline(XT, YT, extrapolate=False),
    "CubicSpline periodic": si.CubicSpline(XT, np.r_[YT[:-1], YT[0]], bc_type="periodic"),
    "CubicSpline of two curves": si.CubicSpline(XT, Y2),
    "CubicSpline along axis 1": si.CubicSpline(XT, Y2.T, axis=1),
    "PchipInterpolator": si.PchipInterpolator(XT, YT),
    "Akima1DInterpolator": si.Akima1DInterpolator(XT, YT),
    "make_interp_spline k=1": si.make_interp_spline(XT, YT, k=1),
    "make_interp_spline k=5": si.make_interp_spline(XT, YT, k=5),
    "BSpline of two curves": si.make_interp_spline(XT, Y2, k=3),
    "BSpline periodic": si.make_interp_spline(XT, np.r_[YT[:-1], YT[0]], bc_type="periodic"),
    "interp1d linear": si.interp1d(XT, YT, bounds_error=False),
    "interp1d linear extrapolate": si.interp1d(XT, YT, fill_value="extrapolate"),
    "interp1d cubic": si.interp1d(XT, YT, kind="cubic", bounds_error=False, fill_value=(-1, 2)),
    "interp1d quadratic of curves": si.interp1d(XT, Y2.T, kind="quadratic",
                                                fill_value="extrapolate"),
    "interp1d nearest": si.interp1d(XT, YT, kind="nearest", bounds_error=False),
    "interp1d previous": si.interp1d(XT, YT, kind="previous", bounds_error=False),
    "interp1d next": si.interp1d(XT, YT, kind="next", bounds_error=False),
    "UnivariateSpline": si.UnivariateSpline(XT, YT, s=0.05),
    "UnivariateSpline zeros": si.UnivariateSpline(XT, YT, s=0.05, ext="zeros"),
    "UnivariateSpline const": si.UnivariateSpline(XT, YT, s=0.05, ext="const"),
}


def _weights(v):
    return np.linspace(0.5, 1.5, np.size(v)).reshape(np.shape(v))


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_constant_interpolants_at_traced_points(name):
    spline = OBJECTS[name]
    points = np.concatenate([INSIDE, OUTSIDE])
    got = ha.jacobian(lambda x: np.ravel(spline(x)), points, backend="numpy")
    np.testing.assert_allclose(got.value, np.ravel(spline(points)), rtol=1e-12, atol=1e-14,
                               equal_nan=True)

    def f(x):
        return np.sum(_weights(spline(x)) * spline(x))

    res = ha.gradient(f, INSIDE, backend="numpy")
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, INSIDE), rtol=1e-6,
                               atol=1e-9, err_msg=name)


@pytest.mark.parametrize("nu", [1, 2])
def test_derivatives_of_a_spline_at_traced_points(nu):
    cs = OBJECTS["CubicSpline"]
    for f in (lambda x: np.sum(cs(x, nu) ** 2), lambda x: np.sum(cs.derivative(nu)(x) ** 2),
              lambda x: np.sum(si.splev(x, si.splrep(XT, YT), der=nu) ** 2)):
        res = ha.gradient(f, INSIDE, backend="numpy")
        np.testing.assert_allclose(res.value, f(INSIDE), rtol=1e-12)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, INSIDE), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("method", ["linear", "nearest", "slinear"])
def test_regular_grid_interpolator_at_traced_points(method):
    rgi = si.RegularGridInterpolator(GRID, VALUES, method=method, bounds_error=False)
    pts = np.array([[0.3, -0.2], [1.7, 0.9], [0.9, 0.1], [2.5, 0.0], [-0.1, 0.4]])
    got = ha.jacobian(lambda p: rgi(p.reshape(5, 2)), pts.ravel(), backend="numpy")
    np.testing.assert_allclose(got.value, rgi(pts), rtol=1e-12, equal_nan=True)

    def f(p):
        return np.sum(rgi(p.reshape(3, 2)) ** 2)

    res = ha.gradient(f, pts[:3].ravel(), backend="numpy")
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, pts[:3].ravel()),
                               rtol=1e-6, atol=1e-9)


#: name -> the interpolant of traced values y, as a function of (y, points)
TRACED_VALUES = {
    "CubicSpline not-a-knot": lambda y, x: si.CubicSpline(XT, y)(x),
    "CubicSpline natural": lambda y, x: si.CubicSpline(XT, y, bc_type="natural")(x),
    "CubicSpline clamped": lambda y, x: si.CubicSpline(XT, y, bc_type="clamped")(x),
    "CubicSpline derivative values": lambda y, x: si.CubicSpline(
        XT, y, bc_type=((1, 0.5), (2, -0.3)))(x),
    "CubicSpline derivative": lambda y, x: si.CubicSpline(XT, y).derivative()(x),
    "CubicSpline curves": lambda y, x: si.CubicSpline(XT, y.reshape(2, 9), axis=1)(x),
    "make_interp_spline k=3": lambda y, x: si.make_interp_spline(XT, y)(x),
    "make_interp_spline k=2": lambda y, x: si.make_interp_spline(XT, y, k=2)(x),
    "interp1d linear": lambda y, x: si.interp1d(XT, y)(x),
    "interp1d cubic": lambda y, x: si.interp1d(XT, y, kind="cubic")(x),
    "interp1d nearest": lambda y, x: si.interp1d(XT, y, kind="nearest")(x),
    "interp1d curves": lambda y, x: si.interp1d(XT[::-1], y.reshape(9, 2), axis=0)(x),
    # B-splines of traced coefficients at constant knots (9 of them for 13 knots)
    "BSpline coefficients": lambda c, x: si.BSpline(KT, c, 3)(x),
    "BSpline extra coefficients": lambda c, x: si.BSpline(KT, np.r_[c, c[:2]], 3)(x),
    "BSpline derivative": lambda c, x: si.BSpline(KT, c, 3).derivative(2)(x),
    "BSpline periodic": lambda c, x: si.BSpline(np.linspace(-1.0, 3.5, 13), c, 3,
                                                extrapolate="periodic")(x * 1.3),
    "BSpline curves": lambda c, x: si.BSpline(KT, c.reshape(2, 9), 3, axis=1)(x),
}
KT = np.r_[0.0, 0.0, 0.0, np.linspace(0.0, 3.0, 7), 3.0, 3.0, 3.0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(TRACED_VALUES))
def test_interpolants_of_traced_values(name, backend):
    build = TRACED_VALUES[name]
    y = np.concatenate([YT, np.cos(XT)]) if "curves" in name else YT

    def f(y, x):
        v = build(y, x)
        return np.sum(_weights(v) * v ** 2)

    res = ha.gradient(f, y, INSIDE, argnums=(0, 1), backend=backend)
    np.testing.assert_allclose(res.value, f(y, INSIDE), rtol=1e-12)
    np.testing.assert_allclose(res.gradient[0], numerical_gradient(lambda v: f(v, INSIDE), y),
                               rtol=1e-6, atol=1e-9, err_msg=name)
    if "nearest" not in name:
        np.testing.assert_allclose(res.gradient[1], numerical_gradient(lambda x: f(y, x), INSIDE),
                                   rtol=1e-6, atol=1e-9, err_msg=name)


def test_periodic_spline_of_traced_values_checks_its_ends():
    y = np.r_[YT[:-1], YT[0]]

    def f(y):
        return np.sum(si.CubicSpline(XT, y, bc_type="periodic")(INSIDE + 2.0))

    res = ha.gradient(f, y, backend="numpy")
    np.testing.assert_allclose(res.value, f(y), rtol=1e-12)
    with pytest.raises(ValueError, match="periodic"):
        ha.gradient(f, YT, backend="numpy")

    def g(v):  # the values but the last, which repeats the first
        y = np.concatenate([v, v[:1]])
        return np.sum(si.make_interp_spline(XT, y, bc_type="periodic")(INSIDE + 2.0) ** 2)

    res = ha.gradient(g, y[:-1], backend="numpy")
    np.testing.assert_allclose(res.value, g(y[:-1]), rtol=1e-12)
    np.testing.assert_allclose(res.gradient, numerical_gradient(g, y[:-1]), rtol=1e-6,
                               atol=1e-9)
    res = ha.gradient(lambda v: f(np.concatenate([v, v[:1]])), y[:-1], backend="numpy")
    np.testing.assert_allclose(res.gradient, numerical_gradient(
        lambda v: f(np.concatenate([v, v[:1]])), y[:-1]), rtol=1e-6, atol=1e-9)


def test_points_out_of_bounds_raise_as_scipys():
    li = si.interp1d(XT, YT)  # bounds_error by default
    rgi = si.RegularGridInterpolator(GRID, VALUES)
    plan = ha.compile(lambda x: np.sum(li(x)), INSIDE, backend="numpy")
    np.testing.assert_allclose(plan.gradient(INSIDE).value, np.sum(li(INSIDE)), rtol=1e-13)
    with pytest.raises(ValueError, match="interpolation range"):
        plan.gradient(np.r_[INSIDE[:-1], 3.2])
    with pytest.raises(ValueError, match="out of bounds"):
        ha.gradient(lambda p: np.sum(rgi(p.reshape(1, 2))), np.array([2.5, 0.0]),
                    backend="numpy")


def test_refused_by_name():
    with pytest.raises(NotImplementedError, match="BSpline of traced knots"):
        ha.gradient(lambda t: np.sum(si.BSpline(t, YT, 3)(INSIDE)), KT, backend="numpy")
    with pytest.raises(NotImplementedError, match="CubicSpline of traced abscissae"):
        ha.gradient(lambda x: np.sum(si.CubicSpline(x, YT)(INSIDE)), XT, backend="numpy")
    for cls in (si.PchipInterpolator, si.Akima1DInterpolator, si.UnivariateSpline):
        with pytest.raises(NotImplementedError, match=f"{cls.__name__} of traced values"):
            ha.gradient(lambda y, cls=cls: np.sum(cls(XT, y)(INSIDE)), YT, backend="numpy")
    with pytest.raises(NotImplementedError, match="RegularGridInterpolator with method"):
        ha.gradient(lambda p: np.sum(si.RegularGridInterpolator(GRID, VALUES, method="cubic")(
            p.reshape(1, 2))), np.array([0.5, 0.2]), backend="numpy")


def test_scipys_objects_still_pickle_and_call_on_values():
    for obj in (si.CubicSpline(XT, YT), si.interp1d(XT, YT, kind="cubic"),
                si.PchipInterpolator(XT, YT), si.UnivariateSpline(XT, YT),
                si.BSpline(KT, YT, 3)):
        back = pickle.loads(pickle.dumps(obj))
        np.testing.assert_array_equal(back(INSIDE), obj(INSIDE))
    assert type(si.CubicSpline(XT, YT)) is si.CubicSpline
    assert type(si.BSpline(KT, YT, 3)) is si.BSpline
    assert type(si.BSpline.construct_fast(KT, YT, 3)) is si.BSpline


def test_numba_plan_allocates_nothing():
    cs, rgi = OBJECTS["CubicSpline"], si.RegularGridInterpolator(GRID, VALUES,
                                                                 bounds_error=False)

    def f(y, x):
        return (np.sum(si.CubicSpline(XT, y)(x) ** 2) + np.sum(cs(x, 1))
                + np.sum(si.interp1d(XT, y, kind="cubic")(x))
                + np.sum(rgi(np.stack([x / 2, x / 3 - 0.2], axis=1))))

    plan = ha.compile(f, YT, INSIDE, argnums=(0, 1), backend="numba")
    out = ha.GradientResult((YT, INSIDE))
    plan.gradient(YT, INSIDE, out=out)
    np.testing.assert_allclose(out.value, f(YT, INSIDE), rtol=1e-12)
    assert_no_alloc(lambda: plan.gradient(YT, INSIDE, out=out))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("kind", ["cubic", "natural", "bspline"])
def test_integrals_and_antiderivatives_of_traced_splines(kind, backend):
    """``CubicSpline(x, y).integrate(a, b)`` and ``.antiderivative(nu)`` of
    traced values (beyond the breakpoints too): scipy's values, gradients
    against finite differences (they raised AttributeError naming an
    internal class)."""
    import scipy.interpolate as si

    x = np.linspace(0.0, 2.0, 6)
    make = {"cubic": lambda y: si.CubicSpline(x, y),
            "natural": lambda y: si.CubicSpline(x, y, bc_type="natural"),
            "bspline": lambda y: si.make_interp_spline(x, y, k=3)}[kind]

    def f(y):
        s = make(y)
        return s.integrate(0.1, 1.7) ** 2 + np.sum(s.antiderivative()(np.array([0.3, 1.9]))) \
            + s.integrate(0.0, 2.5) + np.sum(s.antiderivative(2)(np.array([1.1])))

    y = np.sin(x) + 0.3
    res = ha.gradient(f, y, backend=backend)
    assert res.value == pytest.approx(f(y), rel=1e-13)
    eps = 1e-6
    fd = np.array([(f(y + eps * e) - f(y - eps * e)) / (2 * eps) for e in np.eye(y.size)])
    np.testing.assert_allclose(res.gradient, fd, rtol=1e-6, atol=1e-8)
