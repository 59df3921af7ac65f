"""scipy.ndimage's derivative and rank filters and scipy.signal's second-order
sections, detrending and spectral estimates in traced code
(hybridad.frontend.scipy_ndimage_more, scipy_signal_more): scipy's values,
derivatives against central differences on both CPU backends, nothing
allocated per call."""

import numpy as np
import pytest
import scipy.ndimage as nd
import scipy.signal as ss
from conftest import BACKENDS, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

IMG = rand((7, 8), seed=51)
SIG = rand((64,), seed=52)
SOS = ss.butter(4, 0.2, output="sos")
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], bool)

#: name -> (function of an array of the operand's shape, operand)
CASES = {
    "sobel": (lambda x: nd.sobel(x, 0), IMG),
    "sobel nearest": (lambda x: nd.sobel(x, -1, mode="nearest"), IMG),
    "prewitt wrap": (lambda x: nd.prewitt(x, 1, mode="wrap"), IMG),
    "laplace mirror": (lambda x: nd.laplace(x, mode="mirror"), IMG),
    "gaussian_laplace": (lambda x: nd.gaussian_laplace(x, 1.1), IMG),
    "gaussian_gradient_magnitude": (lambda x: nd.gaussian_gradient_magnitude(x, 0.9), IMG),
    "median_filter": (lambda x: nd.median_filter(x, 3), IMG),
    "median_filter even": (lambda x: nd.median_filter(x, (4, 2)), IMG),
    "median_filter footprint": (lambda x: nd.median_filter(x, footprint=CROSS,
                                                           mode="nearest"), IMG),
    "median_filter axes": (lambda x: nd.median_filter(x, 3, axes=1), IMG),
    "maximum_filter constant": (lambda x: nd.maximum_filter(x, 3, mode="constant", cval=0.5),
                                IMG),
    "minimum_filter footprint": (lambda x: nd.minimum_filter(x, footprint=CROSS), IMG),
    "percentile_filter": (lambda x: nd.percentile_filter(x, 30, size=3), IMG),
    "rank_filter origin": (lambda x: nd.rank_filter(x, -2, size=(3, 2), origin=(0, -1)), IMG),
    "sosfilt": (lambda x: ss.sosfilt(SOS, x), SIG),
    "sosfilt zi": (lambda x: ss.sosfilt(SOS, x, zi=ss.sosfilt_zi(SOS) * x[0])[0], SIG),
    "sosfiltfilt": (lambda x: ss.sosfiltfilt(SOS, x), SIG),
    "sosfiltfilt even": (lambda x: ss.sosfiltfilt(SOS, x, padtype="even", padlen=10), SIG),
    "sosfiltfilt 2-D": (lambda x: ss.sosfiltfilt(SOS, x.reshape(2, 32), axis=1, padlen=8),
                        SIG),
    "detrend": (lambda x: ss.detrend(x), SIG),
    "detrend breakpoints": (lambda x: ss.detrend(x, bp=[20, 41]), SIG),
    "detrend constant axis 0": (lambda x: ss.detrend(x.reshape(8, 8), axis=0,
                                                     type="constant"), SIG),
    "welch": (lambda x: ss.welch(x, nperseg=16)[1], SIG),
    "welch median spectrum": (lambda x: ss.welch(
        x, fs=3.0, window="hamming", nperseg=20, noverlap=5, nfft=25, scaling="spectrum",
        average="median", detrend="linear")[1], SIG),
    "welch 2-D": (lambda x: ss.welch(x.reshape(2, 32), nperseg=16, axis=1)[1], SIG),
    "periodogram": (lambda x: ss.periodogram(x)[1], SIG),
    "periodogram hann": (lambda x: ss.periodogram(x, window="hann", nfft=71,
                                                  detrend=False)[1], SIG),
    "decimate": (lambda x: ss.decimate(x, 3), SIG),
    "decimate forward": (lambda x: ss.decimate(x, 2, n=4, zero_phase=False), SIG),
    "resample down": (lambda x: ss.resample(x, 40), SIG),
    "resample up": (lambda x: ss.resample(x, 90), SIG),
    "resample odd": (lambda x: ss.resample(x[:63], 30), SIG),
    "resample window": (lambda x: ss.resample(x, 48, window="hann"), SIG),
    "resample 2-D": (lambda x: ss.resample(x.reshape(8, 8), 6, axis=1), SIG),
    "hilbert envelope": (lambda x: np.abs(ss.hilbert(x)), SIG),
    "hilbert N": (lambda x: np.abs(ss.hilbert(x, N=70)), SIG),
    "hilbert odd imaginary part": (lambda x: np.imag(ss.hilbert(x[:63])), SIG),
    "hilbert 2-D": (lambda x: np.real(ss.hilbert(x.reshape(8, 8), axis=0)), SIG),
    "stft": (lambda x: np.abs(ss.stft(x, nperseg=16)[2]), SIG),
    "stft even nfft linear": (lambda x: np.real(ss.stft(
        x, nperseg=20, noverlap=15, nfft=25, boundary="even", detrend="linear")[2]), SIG),
    "stft odd unpadded psd": (lambda x: np.imag(ss.stft(
        x, fs=2.0, nperseg=12, boundary="odd", padded=False, scaling="psd")[2]), SIG),
    "stft constant two-sided": (lambda x: np.abs(ss.stft(
        x, nperseg=10, boundary="constant", return_onesided=False, detrend="constant")[2]),
        SIG),
    "stft 2-D axis 0": (lambda x: np.abs(ss.stft(x.reshape(32, 2), nperseg=8, axis=0)[2]),
                        SIG),
    "stft window array": (lambda x: np.real(ss.stft(
        x, window=np.hamming(16), nperseg=16, boundary=None, padded=False)[2]), SIG),
    "spectrogram": (lambda x: ss.spectrogram(x, nperseg=16)[2], SIG),
    "spectrogram nfft spectrum": (lambda x: ss.spectrogram(
        x, fs=2.0, nperseg=12, noverlap=6, nfft=15, scaling="spectrum", detrend="linear")[2],
        SIG),
    "spectrogram magnitude 2-D": (lambda x: ss.spectrogram(
        x.reshape(2, 32), nperseg=8, mode="magnitude", axis=1)[2], SIG),
    "spectrogram complex two-sided": (lambda x: np.imag(ss.spectrogram(
        x, nperseg=10, mode="complex", return_onesided=False)[2]), SIG),
    "spectrogram phase": (lambda x: ss.spectrogram(x, nperseg=16, mode="phase",
                                                   detrend=False)[2], SIG),
    "csd": (lambda x: np.abs(ss.csd(x, x[::-1] * 2 + 1, nperseg=16)[1]), SIG),
    "csd median linear": (lambda x: np.imag(ss.csd(
        np.cos(x), x, nperseg=20, noverlap=12, nfft=25, detrend="linear", average="median",
        scaling="spectrum")[1]), SIG),
    "csd 2-D axis 0": (lambda x: np.real(ss.csd(x.reshape(32, 2), x.reshape(32, 2) ** 2,
                                                nperseg=8, axis=0)[1]), SIG),
    "coherence": (lambda x: ss.coherence(x, np.cos(x) + x[::-1], nperseg=16)[1], SIG),
    "istft of stft": (lambda x: ss.istft(ss.stft(x, nperseg=16)[2] *
                                         np.linspace(1.0, 0.5, 9)[:, None], nperseg=16)[1],
                      SIG),
    "istft odd, overlap, nfft, psd": (lambda x: ss.istft(ss.stft(
        np.sin(x), nperseg=15, noverlap=11, nfft=20, scaling="psd")[2], nperseg=15, noverlap=11,
        nfft=20, scaling="psd", boundary=True)[1], SIG),
    "istft axes": (lambda x: ss.istft(np.swapaxes(ss.stft(x.reshape(2, 32), nperseg=8)[2],
                                                  0, 2), nperseg=8, time_axis=0,
                                      freq_axis=1)[1], SIG),
}


def test_stft_frequencies_and_times_are_scipys():
    for kw in ({"nperseg": 16}, {"nperseg": 12, "fs": 3.0, "boundary": None},
               {"nperseg": 10, "return_onesided": False, "padded": False}):
        seen = {}

        def f(x, kw=kw, seen=seen):
            seen["f"], seen["t"], z = ss.stft(x, **kw)
            return np.sum(np.abs(z))

        ha.gradient(f, SIG, backend="numpy")
        want_f, want_t, _ = ss.stft(SIG, **kw)
        np.testing.assert_array_equal(seen["f"], want_f)
        np.testing.assert_array_equal(seen["t"], want_t)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_derivatives(name):
    f, x = CASES[name]
    res = ha.jacobian(lambda v: np.ravel(f(v.reshape(x.shape))), x.ravel(), backend="numpy")
    expected = np.ravel(f(x))
    np.testing.assert_allclose(res.value, expected, rtol=1e-12, atol=1e-14)

    def g(v):
        out = np.ravel(f(v.reshape(x.shape)))
        return np.sum(out * np.linspace(0.5, 1.5, out.size))

    grad = ha.gradient(g, x.ravel(), backend="numpy")
    np.testing.assert_allclose(grad.gradient, numerical_gradient(g, x.ravel()), rtol=1e-6,
                               atol=1e-8, err_msg=name)


def test_float32_images_are_filtered_as_scipy_rounds():
    x = IMG.astype(np.float32)
    for f in (lambda v: nd.sobel(v, 0), lambda v: nd.median_filter(v, 3),
              lambda v: nd.laplace(v)):
        res = ha.jacobian(lambda v: np.ravel(f(v.reshape(7, 8))), x.ravel(), backend="numpy")
        assert res.value.dtype == np.float32
        np.testing.assert_allclose(res.value, np.ravel(f(x)), rtol=1e-6, atol=1e-6)


def test_sections_differentiated_in_their_coefficients():
    def f(p):  # each section's b and a[1:] (scipy's a[0] is 1)
        p = p.reshape(2, 5)
        sos = np.concatenate([p[:, :3], np.ones((2, 1)), p[:, 3:]], axis=1)
        return np.sum(ss.sosfilt(sos, SIG) ** 2)

    p = np.delete(SOS[:2], 3, axis=1).ravel()
    res = ha.gradient(f, p, backend="numpy")
    np.testing.assert_allclose(res.value, f(p), rtol=1e-12)
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, p), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_compiled_plan_allocates_nothing(backend):
    def f(img, sig):
        return (np.sum(nd.sobel(img, 0) ** 2) + np.sum(nd.median_filter(img, 3))
                + np.sum(ss.sosfiltfilt(SOS, sig) ** 2) + np.sum(ss.welch(sig, nperseg=16)[1])
                + np.sum(ss.detrend(sig) ** 2))

    plan = ha.compile(f, IMG, SIG, argnums=(0, 1), backend=backend)
    out = ha.GradientResult((IMG, SIG))
    plan.gradient(IMG, SIG, out=out)
    np.testing.assert_allclose(out.value, f(IMG, SIG), rtol=1e-12)
    for g, x, k in zip(out.gradient, (IMG, SIG), (0, 1), strict=True):
        def fk(v, k=k):
            return f(v, SIG) if k == 0 else f(IMG, v)
        np.testing.assert_allclose(g, numerical_gradient(fk, x), rtol=1e-6, atol=1e-8)
    if backend == "numba":
        assert_no_alloc(lambda: plan.gradient(IMG, SIG, out=out))


def test_refused_by_name():
    with pytest.raises(NotImplementedError, match="return_onesided"):
        ha.gradient(lambda x: np.sum(ss.welch(x, return_onesided=False)[1]), SIG,
                    backend="numpy")
    with pytest.raises(NotImplementedError, match="ftype='fir'"):
        ha.gradient(lambda x: np.sum(ss.decimate(x, 2, ftype="fir")), SIG, backend="numpy")
    with pytest.raises(NotImplementedError, match="mode per axis"):
        ha.gradient(lambda x: np.sum(nd.median_filter(x.reshape(7, 8), 3,
                                                      mode=["reflect", "wrap"])),
                    IMG.ravel(), backend="numpy")


def test_scipys_solvers_on_traced_values_are_refused_with_the_way_out():
    """A solver asked for what hybridad does not differentiate inside the
    differentiated function (a minimizer under bounds), or for what a graph
    cannot hold (solve_ivp's own time points): a TracingError naming it and
    what to write instead."""
    from scipy.integrate import solve_ivp
    from scipy.optimize import minimize, newton

    p = np.array([0.5, 1.2])
    with pytest.raises(ha.TracingError, match=r"solve_ivp .*needs t_eval"):
        ha.gradient(lambda p: np.sum(solve_ivp(lambda t, y: -p[0] * y, (0, 1), [1.0]).y),
                    p, backend="numpy")
    with pytest.raises(ha.TracingError, match=r"minimize .*bounds="):
        ha.gradient(lambda p: minimize(lambda z: np.sum((z - p) ** 2), np.zeros(2),
                                       bounds=[(0, 1)] * 2).fun, p, backend="numpy")
    # (newton is Python: traced through, its convergence tests decisions on values)
    root = ha.gradient(lambda p: newton(lambda t: t ** 3 - p[0], 1.0), p, backend="numpy")
    assert float(root.gradient[0]) == pytest.approx(1.0 / (3.0 * 0.5 ** (2 / 3)), rel=1e-8)
