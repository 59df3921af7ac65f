"""scipy.fft and scipy.fftpack on tracers (hybridad.frontend.scipy_fft).

Every transform of the table, with its parameters (lengths that crop and
pad, axes, normalizations, types), inside a nonlinear scalar function:
values against scipy's own call, gradients against central differences on
the numpy backend; all of them at once on the numba backend against the
numpy one (one compiled program); float32 kept; refusals by name.
"""

import numpy as np
import pytest
import scipy.fft as sf
import scipy.fftpack as fp

import hybridad as ha
from hybridad.testing import assert_no_alloc

from conftest import assert_grad, assert_same_as_reference, rand


def _w(shape, seed):
    return np.cos(np.arange(int(np.prod(shape))) * 0.7 + seed).reshape(shape)


def scalar(y, seed=0):
    """A nonlinear scalar of a real or complex result (every element counts)."""
    r, i = np.real(y), np.imag(y)
    return np.sum(np.sin(r) * _w(np.shape(r), seed)) + np.sum(i ** 2 * _w(np.shape(i), seed + 1))


V, M = (8,), (5, 6)  # a vector, a matrix
CASES = {
    # scipy.fft's complex transforms
    "fft": (lambda x: sf.fft(x), V),
    "fft n pad, ortho": (lambda x: sf.fft(x, n=11, norm="ortho"), V),
    "fft n crop, axis 0": (lambda x: sf.fft(x, n=3, axis=0, norm="forward"), M),
    "ifft of fft": (lambda x: sf.ifft(sf.fft(x) * np.exp(1j * np.arange(8.0))), V),
    "rfft": (lambda x: sf.rfft(x, norm="ortho"), M),
    "irfft of rfft": (lambda x: sf.irfft(sf.rfft(x) * (1 + 1j), n=9), V),
    "hfft": (lambda x: sf.hfft(x * (1 - 0.5j), n=12), V),
    "ihfft": (lambda x: sf.ihfft(x, norm="forward"), V),
    "fft2": (lambda x: sf.fft2(x, s=(4, 7)), M),
    "ifft2": (lambda x: sf.ifft2(x * 1j + x ** 2), M),
    "fftn axes": (lambda x: sf.fftn(x, axes=(0,), norm="ortho"), M),
    "ifftn": (lambda x: sf.ifftn(x), M),
    "rfft2": (lambda x: sf.rfft2(x), M),
    "irfft2": (lambda x: sf.irfft2(sf.rfft2(x), s=(5, 6)), M),
    "rfftn": (lambda x: sf.rfftn(x, s=(6, 4)), M),
    "irfftn": (lambda x: sf.irfftn(x + 0.5j * x, norm="forward"), M),
    "hfft2": (lambda x: sf.hfft2(x * (1 + 1j), s=(5, 8), norm="ortho"), M),
    "hfftn": (lambda x: sf.hfftn(x - 2j * x ** 2), M),
    "ihfft2": (lambda x: sf.ihfft2(x), M),
    "ihfftn": (lambda x: sf.ihfftn(x, axes=(0,), norm="ortho"), M),
    # scipy.fft's cosine, sine and Hankel transforms
    **{f"dct type {t} {norm}": (lambda x, t=t, norm=norm: sf.dct(x, type=t, norm=norm), V)
       for t in (1, 2, 3, 4) for norm in (None, "ortho", "forward")},
    "dct ortho not orthogonalized": (lambda x: sf.dct(x, 1, norm="ortho", orthogonalize=False), V),
    "dct n pad, axis 0": (lambda x: sf.dct(x, n=7, axis=0), M),
    "dct n crop": (lambda x: sf.dct(x, 4, n=4), M),
    **{f"idct type {t}": (lambda x, t=t: sf.idct(x, type=t, norm="ortho"), V)
       for t in (1, 2, 3, 4)},
    **{f"dst type {t}": (lambda x, t=t: sf.dst(x, type=t), V) for t in (1, 2, 3, 4)},
    **{f"idst type {t}": (lambda x, t=t: sf.idst(x, type=t, norm="forward"), V)
       for t in (1, 2, 3, 4)},
    "dctn": (lambda x: sf.dctn(x, norm="ortho"), M),
    "idctn s": (lambda x: sf.idctn(x, type=3, s=(4, 8)), M),
    "dstn axes": (lambda x: sf.dstn(x, type=1, axes=(1,)), M),
    "idstn": (lambda x: sf.idstn(x, type=4), M),
    "dct of complex": (lambda x: sf.dct(x * (2 - 1j), norm="ortho"), V),
    "fht": (lambda x: sf.fht(x + 2.0, dln=0.1, mu=0.5, offset=0.2, bias=0.3), M),
    "ifht": (lambda x: sf.ifht(x, dln=0.05, mu=-0.5), V),
    # scipy.fftpack
    "fftpack fft": (lambda x: fp.fft(x, n=10), V),
    "fftpack ifft": (lambda x: fp.ifft(x, axis=0), M),
    "fftpack fft2": (lambda x: fp.fft2(x, shape=(3, 6)), M),
    "fftpack ifftn": (lambda x: fp.ifftn(x), M),
    "fftpack rfft": (lambda x: fp.rfft(x), V),
    "fftpack rfft n, axis 0": (lambda x: fp.rfft(x, n=7, axis=0), M),
    "fftpack irfft": (lambda x: fp.irfft(x, n=9), V),
    "fftpack dct": (lambda x: fp.dct(x, type=3, norm="ortho"), M),
    "fftpack idst": (lambda x: fp.idst(x, type=2), V),
    "fftpack dctn shape": (lambda x: fp.dctn(x, shape=(4, 7)), M),
    "fftpack idctn": (lambda x: fp.idctn(x, type=1), M),
    "fftpack diff": (lambda x: fp.diff(x, order=2, period=3.0), V),
    "fftpack diff of complex": (lambda x: fp.diff(x * (1 + 1j)), V),
    "fftpack hilbert": (lambda x: fp.hilbert(x), V),
    "fftpack ihilbert": (lambda x: fp.ihilbert(x), V),
    "fftpack tilbert": (lambda x: fp.tilbert(x, 0.5), V),
    "fftpack itilbert": (lambda x: fp.itilbert(x, 0.5, period=4.0), V),
    "fftpack shift": (lambda x: fp.shift(x, 0.3), V),
    "fftpack cs_diff": (lambda x: fp.cs_diff(x, 0.5, 0.7), V),
    "fftpack sc_diff": (lambda x: fp.sc_diff(x, 0.5, 0.7), V),
    "fftpack ss_diff": (lambda x: fp.ss_diff(x, 0.5, 0.7), V),
    "fftpack cc_diff": (lambda x: fp.cc_diff(x, 0.5, 0.7, period=5.0), V),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name):
    transform, shape = CASES[name]
    x = rand(shape, seed=len(name))
    assert_grad(lambda x: scalar(transform(x)), (x,), backends=("numpy",))


#: one case of each construction (numpy's DFT tables, the real and Hermitian
#: ones, a transform's matrix, applied whole or row by row, cropped, padded)
COMPILED = ["fft n crop, axis 0", "ifft of fft", "irfft of rfft", "hfft2", "ihfftn",
            "dct type 1 ortho", "idstn", "dct n pad, axis 0", "dct of complex", "fht",
            "fftpack rfft n, axis 0", "fftpack diff of complex", "fftpack fft2"]


def test_the_compiled_backend_agrees():
    """One case of each construction in one function (one program), numba
    against numpy; its plan allocates nothing per call."""
    names = COMPILED
    xs = {name: rand(CASES[name][1], seed=len(name)) for name in names}

    def f(*xs):
        pairs = enumerate(zip(names, xs, strict=True))
        return sum(scalar(CASES[n][0](x), seed=k) for k, (n, x) in pairs)

    args = tuple(xs.values())
    argnums = tuple(range(len(args)))
    ref = ha.gradient(f, *args, argnums=argnums, backend="numpy")
    plan = ha.compile(f, *args, argnums=argnums, backend="numba")
    res = plan.gradient(*args)
    np.testing.assert_allclose(float(ref.value), f(*args), rtol=1e-12)
    assert_same_as_reference(res, ref, "numba")
    assert_no_alloc(lambda: plan.gradient(*args, out=res))


def test_float32_stays_float32():
    x = rand((16,), seed=3).astype(np.float32)

    def f(x):
        return np.sum(sf.dct(x, norm="ortho") ** 3) + np.sum(np.abs(sf.rfft(x)) ** 2)

    res = ha.gradient(f, x)
    assert res.gradient.dtype == np.float32
    assert float(res.value) == pytest.approx(float(f(x)), rel=1e-5)
    want = ha.gradient(f, x.astype(np.float64)).gradient
    np.testing.assert_allclose(res.gradient, want, rtol=1e-4, atol=1e-4)


def test_outside_a_trace_scipy_runs_as_itself():
    x = rand((6,), seed=1)
    assert np.array_equal(sf.dct(x), sf.dct.__hybridad_original__(x))
    assert sf.dct.__hybridad_original__ is not sf.dct


@pytest.mark.parametrize("f, error, match", [
    (lambda x: sf.fft(x, plan=object()), NotImplementedError, r"scipy.fft.fft with plan="),
    (lambda x: sf.fht(x, dln=x[0], mu=0.5), NotImplementedError, r"fht with a traced dln"),
    (lambda x: fp.rfft(x * 1j), TypeError, r"real sequence"),
    (lambda x: fp.diff(x.reshape(2, 3)), ValueError, r"fftpack.diff takes a 1-D sequence"),
    (lambda x: sf.dct(x, n=0), ValueError, r"invalid number of data points"),
    (lambda x: sf.dct(x, type=5), ValueError, r"type"),
    (lambda x: sf.dct(x, axis=3), ValueError, r"axis 3 is out of bounds"),
    (lambda x: sf.dct(np.tile(x, 2000), type=1), NotImplementedError,
     r"dct of length 12000.*GiB table"),  # (types 2 and 3 run as FFTs, at any length)
])
def test_refusals(f, error, match):
    with pytest.raises(error, match=match):
        ha.gradient(lambda x: scalar(f(x)), rand((6,), seed=2), backend="numpy")


#: (module, function, type, norm, orthogonalize) of the cosine and sine transforms
#: that run as real FFTs of twice their length (types 2 and 3, FAST_COSINE_FROM
#: or longer)
FAST_COSINES = [(mod, name, typ, norm, orth)
                for mod in (sf, fp) for name in ("dct", "idct", "dst", "idst")
                for typ in (2, 3)
                for norm in ((None, "ortho", "forward") if mod is sf else (None, "ortho"))
                for orth in ((None, False, True) if mod is sf else (None,))]


@pytest.mark.parametrize("mod, name, typ, norm, orth", FAST_COSINES,
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_long_cosine_transforms_by_fft(mod, name, typ, norm, orth):
    """Cosine and sine transforms of types 2 and 3 at 100 points and more:
    scipy's values (cropped and padded too) to 1e-12, exact gradients (a
    quadratic: central differences of any step are exact), no n x n matrix
    held."""
    from hybridad.frontend.scipy_fft import FAST_COSINE_FROM

    rng = np.random.default_rng(typ * 7 + len(str(norm)))
    kw = {"type": typ, "norm": norm, **({} if orth is None else {"orthogonalize": orth})}
    fn = getattr(mod, name)
    for m, n in ((100, None), (130, 100), (90, 120)):
        assert (n or m) >= FAST_COSINE_FROM
        x, w = rng.standard_normal(m), rng.standard_normal(n or m)

        def f(x, n=n, w=w):
            y = fn(x, n=n, **kw)
            return np.sum(y * w) + np.sum(y ** 2)

        res = ha.gradient(f, x, backend="numpy")
        assert float(res.value) == pytest.approx(f(x), rel=1e-12)
        d = rng.standard_normal(m)
        assert res.gradient @ d == pytest.approx((f(x + d) - f(x - d)) / 2, rel=1e-10)
    plan = ha.compile(lambda x: np.sum(fn(x, **kw) ** 2), np.ones(200), backend="numpy")
    assert max(n.size for n in plan.graph.nodes if n.op == "const") < 200 * 200 // 4


def test_a_long_dct_is_served():
    """20 000 points: the matrix would be 3.2 GB (refused); by FFTs it runs (and
    reading off scipy's scaling makes no n x n identity: 5.8 s and 3.2 GB once)."""
    x = np.random.default_rng(3).standard_normal(20000)
    w = np.linspace(0.0, 1.0, 20000)
    res = ha.gradient(lambda x: np.sum(sf.dct(x, norm="ortho") ** 2 * w), x)
    assert float(res.value) == pytest.approx(np.sum(sf.dct(x, norm="ortho") ** 2 * w),
                                             rel=1e-12)
    d = np.random.default_rng(4).standard_normal(20000)
    exact = np.sum(sf.dct(x + d, norm="ortho") ** 2 * w) - \
        np.sum(sf.dct(x - d, norm="ortho") ** 2 * w)
    assert res.gradient @ d == pytest.approx(exact / 2, rel=1e-9)
