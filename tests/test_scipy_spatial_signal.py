"""scipy.spatial.distance (cdist, pdist, squareform), scipy.signal's
convolutions, scipy.ndimage's linear filters and
np.lib.stride_tricks.sliding_window_view on tracers: scipy's (numpy's) values,
gradients against central differences -- every case on the numpy backend, a
sum over each family's cases on both backends --, Hessians against jax,
nothing allocated per plan call, and the refusals.

Values are compared at rtol 1e-12 with an absolute floor of 1e-12 times the
largest value: scipy sums in another order, and an entry that cancels to
(near) zero -- a cosine distance of 1e-4, an odd Gaussian derivative of a
periodic row -- keeps only the absolute rounding.
"""

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.signal as sig
from scipy.spatial import distance

import hybridad as ha
from hybridad.testing import assert_no_alloc

from conftest import BACKENDS, assert_grad, rand

NUMPY = ("numpy",)


def traced_value(f, *args, argnum=0):
    """``f(*args)`` traced with ``args[argnum]`` the traced argument (numpy backend)."""
    def g(a):
        return f(*args[:argnum], a, *args[argnum + 1:])
    return ha.jacobian(g, args[argnum], backend="numpy").value


def assert_scipy(got, want, rtol=1e-12):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol,
                               atol=rtol * max(1.0, float(np.max(np.abs(want), initial=0))))


def weighted(shape, seed=99):
    """Fixed weights of an output's shape: every entry reaches the gradient."""
    return rand(shape, 0.5, 1.5, seed=seed)


# ----------------------------------------------------------------------------
# scipy.spatial.distance
# ----------------------------------------------------------------------------

XA, XB, X6 = rand((5, 3), seed=1), rand((4, 3), seed=2), rand((6, 3), seed=3)
W3, V3 = rand((3,), 0.5, 2.0, seed=4), rand((3,), 0.5, 2.0, seed=5)
_M = rand((3, 3), seed=6)
VI3 = _M @ _M.T + np.eye(3)
METRICS = [("euclidean", {}), ("sqeuclidean", {}), ("cityblock", {}), ("chebyshev", {}),
           ("minkowski", {}), ("minkowski", {"p": 3}), ("minkowski", {"p": 1.5}),
           ("minkowski", {"p": np.inf}), ("cosine", {}), ("correlation", {}),
           ("braycurtis", {}), ("canberra", {}), ("seuclidean", {}), ("seuclidean", {"V": V3}),
           ("mahalanobis", {}), ("mahalanobis", {"VI": VI3}), ("euclid", {}), ("sqe", {}),
           ("cos", {})]
METRICS += [(m, {"w": W3}) for m in ("euclidean", "sqeuclidean", "cityblock", "chebyshev",
                                     "cosine", "correlation", "braycurtis", "canberra")]
METRICS += [("minkowski", {"p": p, "w": W3}) for p in (1, 2, 3, 0.7, np.inf)]
METRIC_IDS = [f"{m}-{'-'.join(sorted(kw))}-{kw.get('p', '')}" for m, kw in METRICS]


@pytest.mark.parametrize("metric, kw", METRICS, ids=METRIC_IDS)
def test_cdist_values_and_gradients(metric, kw):
    want = distance.cdist(XA, XB, metric, **kw)
    for argnum in (0, 1):
        assert_scipy(traced_value(lambda a, b: distance.cdist(a, b, metric, **kw), XA, XB,
                                  argnum=argnum), want)
    R = weighted(want.shape)
    assert_grad(lambda a, b: np.sum(distance.cdist(a, b, metric, **kw) * R), (XA, XB),
                argnums=(0, 1), backends=NUMPY)


@pytest.mark.parametrize("metric, kw", METRICS, ids=METRIC_IDS)
def test_pdist_values_and_gradients(metric, kw):
    want = distance.pdist(X6, metric, **kw)
    assert_scipy(traced_value(lambda a: distance.pdist(a, metric, **kw), X6), want)
    R = weighted(want.shape)
    assert_grad(lambda a: np.sum(distance.pdist(a, metric, **kw) * R), (X6,), backends=NUMPY)


def test_metric_parameters_are_differentiated():
    """w, V and VI traced: their gradients (scipy takes them as data too)."""
    R = weighted((5, 4))
    for metric, key, value in [("minkowski", "w", W3), ("canberra", "w", W3),
                               ("correlation", "w", W3), ("seuclidean", "V", V3),
                               ("mahalanobis", "VI", VI3)]:
        def f(a, p, metric=metric, key=key):
            return np.sum(distance.cdist(a, XB, metric, **{key: p}) * R)
        assert_grad(f, (XA, value), argnums=(0, 1), backends=NUMPY)


def test_squareform_both_ways():
    v = distance.pdist(X6)
    M = distance.squareform(v)
    np.testing.assert_array_equal(traced_value(distance.squareform, v), M)
    np.testing.assert_array_equal(traced_value(lambda m: distance.squareform(m, checks=False), M),
                                  v)
    np.testing.assert_array_equal(traced_value(lambda m: distance.squareform(m, "tovector"), M),
                                  v)
    np.testing.assert_array_equal(traced_value(distance.squareform, np.zeros(0)), np.zeros((1, 1)))
    np.testing.assert_array_equal(traced_value(distance.squareform, np.zeros((1, 1))), np.zeros(0))
    R = weighted((6, 6))
    assert_grad(lambda u: np.sum(distance.squareform(u) * R), (v,), backends=NUMPY)
    assert_grad(lambda m: np.sum(distance.squareform(m, checks=False) ** 2), (M,),
                backends=NUMPY)
    with pytest.raises(ValueError, match="binomial coefficient"):
        ha.gradient(lambda u: np.sum(distance.squareform(u)), np.ones(4), backend="numpy")
    with pytest.raises(ValueError, match="square"):
        ha.gradient(lambda m: np.sum(distance.squareform(m)), np.ones((2, 3)), backend="numpy")


def test_zero_distances_have_a_zero_derivative():
    """cdist(X, X)'s diagonal: the roots' derivative 0 there, no NaN (the
    diagonal is identically 0, so 0 is also the central differences')."""
    for metric, kw in [("euclidean", {}), ("minkowski", {"p": 3}), ("minkowski", {"p": 0.7}),
                       ("seuclidean", {"V": V3}), ("mahalanobis", {"VI": VI3})]:
        assert_grad(lambda a: np.sum(distance.cdist(a, a, metric, **kw)), (XA,), backends=NUMPY)


_R54, _R15 = weighted((5, 4)), weighted((15,))


def _cdist_all(a, b):
    return sum(np.sum(distance.cdist(a, b, m, **kw) * _R54) for m, kw in METRICS)


def _pdist_all(a):
    return sum(np.sum(distance.pdist(a, m, **kw) * _R15) for m, kw in METRICS) + \
        np.sum(distance.squareform(distance.pdist(a, "sqeuclidean")) * weighted((6, 6)))


def test_every_metric_on_both_backends():
    assert_grad(_cdist_all, (XA, XB), argnums=(0, 1))
    assert_grad(_pdist_all, (X6,))


# ----------------------------------------------------------------------------
# scipy.signal
# ----------------------------------------------------------------------------

# (odd and even kernels, each operand the longer, 1-D to 3-D)
SHAPES = [((7,), (3,)), ((7,), (4,)), ((4,), (7,)), ((3,), (6,)), ((6,), (6,)),
          ((5, 6), (2, 3)), ((5, 6), (3, 3)), ((2, 3), (4, 4)), ((3, 4, 5), (2, 2, 3))]
MODES = ["full", "same", "valid"]


@pytest.mark.parametrize("name", ["convolve", "correlate", "fftconvolve"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_convolve_correlate(name, mode, shapes):
    func = getattr(sig, name)
    a, b = rand(shapes[0], seed=7), rand(shapes[1], seed=8)
    want = func(a, b, mode)
    for argnum in (0, 1):
        assert_scipy(traced_value(lambda x, y: func(x, y, mode), a, b, argnum=argnum), want)
    if name != "fftconvolve":
        for method in ("direct", "fft"):
            assert_scipy(traced_value(lambda x: func(x, b, mode, method=method), a), want)
    R = weighted(want.shape)
    assert_grad(lambda x, y: np.sum(func(x, y, mode) * R), (a, b), argnums=(0, 1),
                backends=NUMPY)


def test_fftconvolve_axes():
    a, b, c = rand((3, 7), seed=9), rand((1, 3), seed=10), rand((3, 4), seed=11)
    for x, y, axes in [(a, b, 1), (a, c, [1]), (a, c, -1), (c, a, 1)]:
        for mode in MODES:
            want = sig.fftconvolve(x, y, mode, axes=axes)
            got = traced_value(lambda p, q: sig.fftconvolve(p, q, mode, axes=axes), x, y,
                               argnum=1)
            assert_scipy(got, want)
    R = weighted(sig.fftconvolve(a, c, "same", axes=1).shape)
    assert_grad(lambda p, q: np.sum(sig.fftconvolve(p, q, "same", axes=1) * R), (a, c),
                argnums=(0, 1), backends=NUMPY)


# kernels past SHIFTED_TAPS elements: by real FFTs (odd and even lengths, each
# operand the longer, axes of length 1 broadcast as scipy's fftconvolve does)
LONG_SHAPES = [((120,), (45,)), ((45,), (120,)), ((64,), (64,)), ((9, 12), (5, 8)),
               ((5, 40), (1, 50)), ((6, 30), (6, 1)), ((4, 9, 10), (3, 1, 12))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shapes", LONG_SHAPES, ids=str)
def test_long_kernels_by_fft(mode, shapes):
    a, b = rand(shapes[0], seed=12), rand(shapes[1], seed=13)
    calls = [(sig.fftconvolve, {}), (sig.convolve, {"method": "fft"}),
             (sig.correlate, {"method": "fft"})]
    if 1 not in shapes[0] + shapes[1]:  # (scipy's direct method does not broadcast)
        calls += [(sig.convolve, {}), (sig.correlate, {"method": "auto"})]
    for func, kw in calls:
        try:
            want = func(a, b, mode, **kw)
        except ValueError as e:  # (scipy's convolve checks 'valid' on every axis)
            with pytest.raises(ValueError, match=str(e)[:30]):
                ha.gradient(lambda x: np.sum(func(x, b, mode, **kw)), a)
            continue
        for argnum in (0, 1):
            got = traced_value(lambda x, y: func(x, y, mode, **kw), a, b, argnum=argnum)
            assert_scipy(got, want)
    if shapes != LONG_SHAPES[-1] or mode != "valid":  # (the one case scipy refuses)
        R = weighted(sig.fftconvolve(a, b, mode).shape)
        assert_grad(lambda x, y: np.sum(sig.fftconvolve(x, y, mode) * R), (a, b),
                    argnums=(0, 1), backends=BACKENDS if shapes == LONG_SHAPES[0] else NUMPY)


SHAPES_2D = [((5, 6), (2, 3)), ((5, 6), (3, 3)), ((4, 4), (2, 2)), ((3, 4), (4, 6)),
             ((2, 3), (5, 7))]


@pytest.mark.parametrize("name", ["convolve2d", "correlate2d"])
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shapes", SHAPES_2D, ids=str)
def test_convolve2d_correlate2d(name, boundary, mode, shapes):
    func = getattr(sig, name)
    a, b = rand(shapes[0], seed=12), rand(shapes[1], seed=13)
    want = func(a, b, mode, boundary, 0.7)
    for argnum in (0, 1):
        assert_scipy(traced_value(lambda x, y: func(x, y, mode, boundary, 0.7), a, b,
                                  argnum=argnum), want)
    R = weighted(want.shape)
    assert_grad(lambda x, y: np.sum(func(x, y, mode, boundary, 0.7) * R), (a, b),
                argnums=(0, 1), backends=NUMPY)


def test_a_traced_fill_value():
    a, b = rand((4, 5), seed=14), rand((2, 3), seed=15)
    assert_grad(lambda x, f: np.sum(sig.convolve2d(x, b, "same", "fill", f) ** 2),
                (a, np.array(0.3)), argnums=(0, 1), backends=NUMPY)


_A1, _B1, _A2, _B2 = rand((7,), seed=16), rand((4,), seed=17), rand((5, 6), seed=18), \
    rand((2, 3), seed=19)


def _signal_all(a1, b1, a2, b2):
    total = 0.0
    for mode in MODES:
        for func in (sig.convolve, sig.correlate, sig.fftconvolve):
            total = total + np.sum(func(a1, b1, mode) * np.linspace(0.5, 1.5,
                                                                   func(_A1, _B1, mode).size))
            total = total + np.sum(func(b1, a1, mode) ** 2)
            total = total + np.sum(func(a2, b2, mode) ** 2)
        for boundary in ("fill", "wrap", "symm"):
            for func in (sig.convolve2d, sig.correlate2d):
                total = total + np.sum(func(a2, b2, mode, boundary, 0.5) ** 2)
    return total


def test_every_convolution_on_both_backends():
    assert_grad(_signal_all, (_A1, _B1, _A2, _B2), argnums=(0, 1, 2, 3))


# ----------------------------------------------------------------------------
# scipy.ndimage
# ----------------------------------------------------------------------------

ND_MODES = ["reflect", "mirror", "nearest", "wrap", "constant", "grid-mirror", "grid-wrap",
            "grid-constant"]
IMG = rand((5, 6), seed=20)


@pytest.mark.parametrize("mode", ND_MODES)
@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("name", ["correlate", "convolve"])
def test_ndimage_correlate_convolve(name, size, mode):
    func = getattr(ndi, name)
    w = rand((size, size + 1), seed=21)
    for origin in (0, -(size // 2), (size - 1) // 2, ((size - 1) // 2, -1)):
        want = func(IMG, w, mode=mode, cval=0.7, origin=origin)
        for argnum in (0, 1):
            assert_scipy(traced_value(lambda x, k: func(x, k, mode=mode, cval=0.7,
                                                        origin=origin), IMG, w, argnum=argnum),
                         want)
    R = weighted(IMG.shape)
    assert_grad(lambda x, k: np.sum(func(x, k, mode=mode, cval=0.7) * R), (IMG, w),
                argnums=(0, 1), backends=NUMPY)


@pytest.mark.parametrize("mode", ND_MODES)
@pytest.mark.parametrize("name", ["correlate1d", "convolve1d"])
def test_ndimage_1d(name, mode):
    func = getattr(ndi, name)
    for size in (1, 2, 3, 4, 8):  # (8: wider than the axis)
        w = rand((size,), seed=22)
        for axis in (0, -1):
            for origin in sorted({0, -(size // 2), (size - 1) // 2}):
                want = func(IMG, w, axis, mode=mode, cval=-0.4, origin=origin)
                for argnum in (0, 1):
                    got = traced_value(lambda x, k: func(x, k, axis, mode=mode, cval=-0.4,
                                                         origin=origin), IMG, w, argnum=argnum)
                    assert_scipy(got, want)
    w = rand((4,), seed=23)
    R = weighted(IMG.shape)
    assert_grad(lambda x, k: np.sum(func(x, k, 0, mode=mode, origin=1) * R), (IMG, w),
                argnums=(0, 1), backends=NUMPY)


@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_gaussian_filters(mode):
    R = weighted(IMG.shape)
    for sigma in (0.5, 1.0, 1.7):
        for order in (0, 1, 2):
            for kw in ({}, {"truncate": 2.0}, {"radius": 1}):
                want = ndi.gaussian_filter1d(IMG, sigma, 0, order, mode=mode, cval=0.3, **kw)
                assert_scipy(traced_value(lambda x: ndi.gaussian_filter1d(
                    x, sigma, 0, order, mode=mode, cval=0.3, **kw), IMG), want)
                want = ndi.gaussian_filter(IMG, sigma, order, mode=mode, cval=0.3, **kw)
                assert_scipy(traced_value(lambda x: ndi.gaussian_filter(
                    x, sigma, order, mode=mode, cval=0.3, **kw), IMG), want)
    assert_grad(lambda x: np.sum(ndi.gaussian_filter(x, 1.2, mode=mode) * R), (IMG,),
                backends=NUMPY)
    assert_grad(lambda x: np.sum(ndi.gaussian_filter1d(x, 0.8, order=1, mode=mode) * R),
                (IMG,), backends=NUMPY)


def test_gaussian_filter_per_axis_arguments():
    for kw in ({"sigma": [1.0, 0.0], "order": [0, 1]}, {"sigma": [1.0, 0.7], "order": [1, 2],
               "mode": ["wrap", "nearest"], "radius": [2, 1]}, {"sigma": 1.2, "axes": (1,)},
               {"sigma": 0.0}):
        assert_scipy(traced_value(lambda x: ndi.gaussian_filter(x, **kw), IMG),
                     ndi.gaussian_filter(IMG, **kw))
    x32 = IMG.astype(np.float32)  # (filtered in float64, rounded after each axis: scipy's)
    np.testing.assert_array_equal(traced_value(lambda x: ndi.gaussian_filter(x, 1.0), x32),
                                  ndi.gaussian_filter(x32, 1.0))


@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_uniform_filters(mode):
    for size in (1, 2, 3, 4, 7):
        for origin in sorted({0, -(size // 2), (size - 1) // 2}):
            want = ndi.uniform_filter1d(IMG, size, 0, mode=mode, cval=0.2, origin=origin)
            assert_scipy(traced_value(lambda x: ndi.uniform_filter1d(
                x, size, 0, mode=mode, cval=0.2, origin=origin), IMG), want)
            want = ndi.uniform_filter(IMG, size, mode=mode, cval=0.2, origin=origin)
            assert_scipy(traced_value(lambda x: ndi.uniform_filter(
                x, size, mode=mode, cval=0.2, origin=origin), IMG), want)
    kw = {"size": [3, 2], "origin": [1, 0], "mode": [mode, "constant"], "cval": 2.0}
    assert_scipy(traced_value(lambda x: ndi.uniform_filter(x, **kw), IMG),
                 ndi.uniform_filter(IMG, **kw))
    R = weighted(IMG.shape)
    assert_grad(lambda x: np.sum(ndi.uniform_filter(x, 3, mode=mode) * R), (IMG,),
                backends=NUMPY)


_K23, _K3 = rand((2, 3), seed=24), rand((3,), seed=25)


def _ndimage_all(x, k, k1):
    total = np.sum(ndi.correlate(x, k, mode="mirror") ** 2) + \
        np.sum(ndi.correlate(x, k, mode="nearest") ** 2)
    for mode in ("reflect", "wrap", "constant"):  # (the modes differ in constant indices)
        total = total + np.sum(ndi.correlate(x, k, mode=mode, cval=0.5) ** 2) + \
            np.sum(ndi.convolve(x, k, mode=mode, origin=(0, 1)) ** 2) + \
            np.sum(ndi.correlate1d(x, k1, 0, mode=mode) ** 2) + \
            np.sum(ndi.convolve1d(x, k1, mode=mode) ** 2) + \
            np.sum(ndi.gaussian_filter(x, 1.0, mode=mode) ** 2) + \
            np.sum(ndi.gaussian_filter1d(x, 0.7, 0, 1, mode=mode) ** 2) + \
            np.sum(ndi.uniform_filter(x, 3, mode=mode) ** 2) + \
            np.sum(ndi.uniform_filter1d(x, 2, mode=mode) ** 2)
    return total


def test_every_filter_on_both_backends():
    assert_grad(_ndimage_all, (IMG, _K23, _K3), argnums=(0, 1, 2))


# ----------------------------------------------------------------------------
# sliding_window_view
# ----------------------------------------------------------------------------

SWV = [((2, 3), None), ((3,), 1), ((2,), 0), ((2, 2), (0, 1)), ((2, 3), (1, 0)), (2, -1)]


def _windows_all(x):
    return sum(np.sum(np.lib.stride_tricks.sliding_window_view(x, w, a) ** 2 * (i + 1))
               for i, (w, a) in enumerate(SWV))


def test_sliding_window_view():
    from numpy.lib.stride_tricks import sliding_window_view

    for window, axis in SWV:
        for f in (lambda x: sliding_window_view(x, window, axis),
                  lambda x: np.lib.stride_tricks.sliding_window_view(x.T, window, axis)):
            np.testing.assert_array_equal(traced_value(f, IMG), f(IMG))
    assert_grad(_windows_all, (IMG,))
    with pytest.raises(NotImplementedError, match="writeable"):
        ha.gradient(lambda x: np.sum(sliding_window_view(x, 2, 0, writeable=True)), IMG,
                    backend="numpy")


# ----------------------------------------------------------------------------
# Hessians: a GP kernel, a pair energy
# ----------------------------------------------------------------------------

_Y = rand((3, 2), seed=26)


def _gp(X, Y, ell=0.9):
    K = np.exp(-distance.cdist(X, Y, "sqeuclidean") / (2 * ell ** 2))
    return np.sum(K * weighted((4, 3)))


def _energy(X):
    r = distance.pdist(X)
    return np.sum(1.0 / r) + np.sum(np.exp(-distance.pdist(X, "sqeuclidean"))) + np.sum(r ** 2)


def _jax_hessians():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    i, j = np.triu_indices(4, 1)

    def gp(X):
        d2 = jnp.sum((X[:, None, :] - _Y[None, :, :]) ** 2, axis=-1)
        return jnp.sum(jnp.exp(-d2 / (2 * 0.9 ** 2)) * weighted((4, 3)))

    def energy(X):
        d2 = jnp.sum((X[i] - X[j]) ** 2, axis=-1)
        r = jnp.sqrt(d2)
        return jnp.sum(1.0 / r) + jnp.sum(jnp.exp(-d2)) + jnp.sum(r ** 2)

    return {f: np.asarray(jax.hessian(g)(jnp.asarray(X))).reshape(X.size, X.size)
            for f, g, X in ((_gp, gp, _XG), (_energy, energy, _XG))}


_XG = rand((4, 2), seed=27)


def test_gp_kernel_and_pair_energy_hessians():
    assert_grad(_gp, (_XG, _Y), argnums=(0, 1))
    assert_grad(_energy, (_XG,))
    want = _jax_hessians()
    for f, rest in ((_gp, (_Y,)), (_energy, ())):
        for backend in ("numpy", "numba"):
            got = ha.hessian(f, _XG, *rest, backend=backend).hessian
            np.testing.assert_allclose(got, want[f], rtol=1e-10,
                                       atol=1e-12 * np.abs(want[f]).max())


# ----------------------------------------------------------------------------
# no allocation per call; refusals
# ----------------------------------------------------------------------------

FAMILIES = {"cdist": (_cdist_all, (XA, XB), (0, 1)), "pdist": (_pdist_all, (X6,), 0),
            "signal": (_signal_all, (_A1, _B1, _A2, _B2), (0, 1, 2, 3)),
            "ndimage": (_ndimage_all, (IMG, _K23, _K3), (0, 1, 2)),
            "sliding_window_view": (_windows_all, (IMG,), 0),
            "gp": (_gp, (_XG, _Y), (0, 1)), "energy": (_energy, (_XG,), 0)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_allocation_per_call(family):
    f, args, argnums = FAMILIES[family]
    plan = ha.compile(f, *args, argnums=argnums)
    res = plan.gradient(*args)
    assert_no_alloc(plan.gradient, *args, out=res, n=10)


@pytest.mark.parametrize("f, error, match", [
    (lambda x: distance.cdist(x, x, "hamming"), NotImplementedError, "'hamming'"),
    (lambda x: distance.pdist(x, "jensenshannon"), NotImplementedError, "'jensenshannon'"),
    (lambda x: distance.pdist(x, "nosuchmetric"), NotImplementedError, "'nosuchmetric'"),
    (lambda x: distance.cdist(x, x, lambda u, v: np.sum(u - v)), NotImplementedError,
     "callable metric '<lambda>'"),
    (lambda x: distance.pdist(x, distance.euclidean), NotImplementedError,
     "callable metric 'euclidean'"),
    (lambda x: distance.cdist(x, x, out=np.empty((5, 5))), NotImplementedError, "out="),
    (lambda x: distance.cdist(x, x, "seuclidean", w=W3), TypeError, "unexpected keyword"),
    (lambda x: distance.pdist(x, "minkowski", p=-1.0), ValueError, "p must be greater"),
    (lambda x: distance.pdist(x[:3], "mahalanobis"), ValueError, "too small"),
    (lambda x: sig.convolve(x, x[0]), ValueError, "same dimensionality"),
    (lambda x: sig.convolve(x, x, "bad"), ValueError, "mode flags"),
    (lambda x: sig.convolve(x, x, method="bad"), ValueError, "method flags"),
    (lambda x: sig.convolve(x, np.ones((2, 2), complex)), NotImplementedError, "complex"),
    (lambda x: sig.convolve(x[:2], x[:, :2].T[:1], "valid"), ValueError, "at least as large"),
    (lambda x: sig.convolve2d(x, x, boundary="bad"), ValueError, "boundary flags"),
    (lambda x: sig.convolve2d(x[0], x[0]), ValueError, "2-D arrays"),
    (lambda x: ndi.correlate(x, np.ones((3, 3)), origin=2), ValueError, "Invalid origin"),
    (lambda x: ndi.uniform_filter1d(x, 3, origin=-2), ValueError, "invalid origin"),
    (lambda x: ndi.correlate(x, np.ones(3)), RuntimeError, "must match"),
    (lambda x: ndi.correlate(x, np.ones((3, 3)), mode="bad"), RuntimeError, "mode"),
    (lambda x: ndi.gaussian_filter(x, 1.0, output=np.empty((5, 3))), NotImplementedError,
     "output="),
    (lambda x: ndi.gaussian_filter(x, 1.0, output=np.int64), NotImplementedError, "int64"),
    (lambda x: ndi.gaussian_filter1d(x, x[0, 0]), NotImplementedError, "traced sigma"),
    (lambda x: ndi.gaussian_filter1d(x, 1.0, order=-1), ValueError, "non-negative"),
])
def test_refusals_name_what_is_refused(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(lambda x: np.sum(f(x)), XA, backend="numpy")


def test_the_wrappers_are_what_users_bind():
    from scipy.ndimage import gaussian_filter
    from scipy.signal import convolve2d
    from scipy.spatial.distance import cdist

    for func in (cdist, convolve2d, gaussian_filter, distance.squareform, sig.fftconvolve,
                 ndi.uniform_filter1d):
        assert getattr(func, "__hybridad_original__", None) is not None, func
