"""The FFT ops (hybridad/ops/fft.py): numpy's values (bit for bit where numpy
runs the same transform), derivative
rules equal to the exact adjoint (the transposed DFT matrix, built from
numpy's own transforms of the identity), second order, every length (even,
odd, prime, long), float32, batches, rolled loops, zero allocations, and
the compiled path's pocketfft loops (hybridad/ops/fft_kernels.py) against
its object-mode fallback."""

import numpy as np
import pytest
from conftest import BACKENDS

import hybridad as ha
from hybridad.ops import fft_kernels
from hybridad.testing import assert_no_alloc

RNG = np.random.default_rng(11)
NORMS = (None, "ortho", "forward")


def _matrix(fn, n, m=None):
    """The real matrix of a real-linear map (columns: the images of the unit
    vectors; complex results as [real parts, imaginary parts])."""
    cols = []
    for k in range(n if m is None else m):
        e = np.zeros(n if m is None else m)
        e[k] = 1.0
        y = np.asarray(fn(e))
        cols.append(np.concatenate([y.real.ravel(), y.imag.ravel()]) if np.iscomplexobj(y)
                    else y.ravel())
    return np.array(cols).T


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 7, 12, 13])
@pytest.mark.parametrize("norm", NORMS)
def test_gradients_are_the_exact_adjoint(backend, n, norm):
    """d/dx <c, T(x)> = T^T c for T = rfft, fft, ifft (of real and complex
    inputs) and irfft: exact to rounding, not to finite differences."""
    transforms = {
        "rfft": lambda x: np.fft.rfft(x, norm=norm),
        "fft_real": lambda x: np.fft.fft(x, norm=norm),
        "ifft_real": lambda x: np.fft.ifft(x, norm=norm),
        "fft_complex": lambda x: np.fft.fft(x * (1 + 0.5j) + x[::-1] * 1j, norm=norm),
        "ifft_complex": lambda x: np.fft.ifft(x * (0.3 - 1j) + x[::-1], norm=norm),
        "irfft": lambda x: np.fft.irfft(x[:n // 2 + 1] + 1j * x[::-1][:n // 2 + 1], n=n,
                                        norm=norm),
    }
    x = RNG.standard_normal(n)
    for name, t in transforms.items():
        mat = _matrix(t, n)
        c = RNG.standard_normal(mat.shape[0])
        m, complex_out = mat.shape[0] // 2, np.iscomplexobj(t(x))

        def loss(x, t=t, c=c, m=m, complex_out=complex_out):
            y = t(x)
            if complex_out:
                return np.sum(np.real(y) * c[:m]) + np.sum(np.imag(y) * c[m:])
            return np.sum(y * c)

        res = ha.gradient(loss, x, backend=backend)
        np.testing.assert_allclose(res.gradient, mat.T @ c, rtol=1e-12,
                                   atol=1e-13 * np.abs(mat.T @ c).max(), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_are_numpys(backend):
    """A vector output: rfft, irfft and the transforms of complex inputs are
    pocketfft's, as numpy runs it, bit for bit; fft of a real input is its
    half spectrum extended by symmetry (numpy transforms it as complex), equal
    to rounding."""
    x = RNG.standard_normal(30)

    def same(x):
        spec = np.fft.rfft(x) * np.exp(-0.1 * np.arange(16))
        y = np.fft.irfft(spec, 30)
        z = np.fft.ifft(np.fft.fft(x * 1j + y), norm="ortho")
        return np.concatenate([y, z.real, z.imag])

    def real_input(x):
        z = np.fft.fft2(x.reshape(5, 6))
        return np.concatenate([z.real.ravel(), z.imag.flatten(), np.fft.ifft(x).imag])

    assert np.array_equal(ha.jacobian(same, x, backend=backend).value, same(x))
    np.testing.assert_allclose(ha.jacobian(real_input, x, backend=backend).value, real_input(x),
                               rtol=0, atol=4e-15 * np.abs(real_input(x)).max())


@pytest.mark.parametrize("n", [4099, 18000])
def test_long_and_prime_lengths(n):
    """Long signals (beyond any dense table) and a prime length (Bluestein):
    a quadratic loss, whose central difference with any step is exact."""
    x = RNG.standard_normal(n)
    w = np.linspace(0.0, 1.0, n // 2 + 1)

    def f(x):
        return np.sum(np.abs(np.fft.rfft(x)) ** 2 * w) + 0.5 * np.sum(np.fft.ifft(x * 1j).imag ** 2)

    res = ha.gradient(f, x)
    assert res.value == pytest.approx(f(x), rel=1e-12)
    d = RNG.standard_normal(n)
    exact = (f(x + d) - f(x - d)) / 2
    assert res.gradient @ d == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_of_a_quadratic_is_twice_the_gram_matrix(backend):
    n = 9
    x = RNG.standard_normal(n)
    w = np.array([1.0, 2.0, 0.5, 3.0, 1.5])

    def f(x):
        return np.sum(np.abs(np.fft.rfft(x, norm="ortho")) ** 2 * w)

    mat = _matrix(lambda e: np.fft.rfft(e, norm="ortho"), n)
    gram = 2 * mat.T @ np.diag(np.concatenate([w, w])) @ mat
    res = ha.hessian(f, x, backend=backend)
    np.testing.assert_allclose(res.hessian, gram, rtol=1e-12, atol=1e-12)
    v = RNG.standard_normal(n)
    hv = ha.hvp(f, x, v, backend=backend)
    np.testing.assert_allclose(getattr(hv, "hvp", hv), gram @ v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_stays_single_precision(backend):
    x = RNG.standard_normal(64).astype(np.float32)

    def f(x):
        return np.sum(np.abs(np.fft.rfft(x)) ** 2) + np.sum(np.fft.ifft(x * x).real)

    res = ha.gradient(f, x, backend=backend)
    assert res.gradient.dtype == np.float32
    ref = ha.gradient(f, x.astype(np.float64), backend=backend).gradient
    np.testing.assert_allclose(res.gradient, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_jacobian_chunks_and_batched_axes(backend):
    """Forward-mode chunks carry a leading batch axis through the ops; an
    n-d transform over several axes."""
    x = RNG.standard_normal(24)

    def f(x):
        a = x.reshape(2, 3, 4)
        return np.abs(np.fft.fftn(a * 1j + a ** 2, axes=(0, 2))).ravel() + \
            np.fft.irfftn(np.fft.rfftn(a), s=(3, 4), axes=(1, 2)).ravel()

    J = ha.jacobian(f, x, backend=backend).jacobian
    h = 1e-6
    num = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(24)]).T
    np.testing.assert_allclose(J, num, rtol=1e-6, atol=1e-7)


def test_spectral_time_stepping_rolls_and_matches_the_unrolled_plan(monkeypatch):
    """A pseudo-spectral step (rfft, a decay, irfft, a nonlinearity) per
    iteration: the loop rolls, and its gradient and HVP are the unrolled
    plan's."""
    from hybridad.transforms import rolling

    u0 = RNG.standard_normal(32)
    decay = np.exp(-0.01 * np.arange(17) ** 2)

    def f(u, steps=40):
        for _ in range(steps):
            u = np.fft.irfft(np.fft.rfft(u) * decay, 32) + 0.05 * np.sin(u)
        return np.sum(u ** 2)

    v = RNG.standard_normal(32)
    rolled = ha.compile(f, u0, hvp=True)
    assert any(n.op == "loop" for n in rolled.graph.nodes)
    got = rolled.hvp(u0, v=v)
    for name in ("ROLL_BREAKS", "LONG_RUN", "HEAVY_STEP"):
        monkeypatch.setattr(rolling, name, 10 ** 9)
    unrolled = ha.compile(f, u0, hvp=True, backend="numpy")
    assert not any(n.op == "loop" for n in unrolled.graph.nodes)
    want = unrolled.hvp(u0, v=v)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.hvp, want.hvp, rtol=1e-11, atol=1e-13)
    d = RNG.standard_normal(32) * 1e-5
    assert got.gradient @ d == pytest.approx((f(u0 + d) - f(u0 - d)) / 2, rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_allocation_per_call(backend):
    x = RNG.standard_normal(100)

    def f(x):
        return np.sum(np.fft.irfft(np.fft.rfft(x) ** 2, 100) ** 2) + \
            np.sum(np.abs(np.fft.fft2(x.reshape(10, 10) * 1j + 1)) ** 2)

    plan = ha.compile(f, x, backend=backend)
    out = plan.gradient(x)
    assert_no_alloc(lambda: plan.gradient(x, out=out))


def test_compiled_plans_call_pocketffts_loops_and_agree_with_object_mode(monkeypatch):
    """The numba backend calls numpy's pocketfft loops directly (no object
    mode), and gives the bits of the object-mode fallback."""
    assert fft_kernels.AVAILABLE
    x = RNG.standard_normal(48)

    def f(x):
        return np.sum(np.abs(np.fft.fft(x + 1j * x[::-1], norm="ortho")) ** 3) + \
            np.sum(np.fft.irfft(np.fft.rfft(x) * 1j, 47) ** 2)

    plan = ha.compile(f, x)
    source = plan.explain()
    assert "_pf_lines(" in source and "_objmode" not in source
    direct = plan.gradient(x)
    monkeypatch.setattr(fft_kernels, "AVAILABLE", False)
    fallback = ha.compile(f, x)
    assert "_objmode" in fallback.explain()
    other = fallback.gradient(x)
    assert direct.value == other.value
    assert np.array_equal(direct.gradient, other.gradient)


def test_sparsity_of_a_transform_is_its_lines():
    x = RNG.standard_normal(12)
    p = ha.jacobian_sparsity(lambda x: np.abs(np.fft.rfft(x.reshape(3, 4), axis=1)) ** 2, x)
    assert p.shape == (9, 12) and p.nnz == 9 * 4
    rows, cols = p.nonzero()
    assert np.all(rows // 3 == cols // 4)


def test_device_runs_follow_cupys_fft_api(monkeypatch):
    """The GPU program's FFT runs (hybridad/backends/cuda/fft.py) through an
    array module that has only the public FFT functions, as cupy does."""
    import types

    from hybridad.backends.cuda import fft as device_fft

    xp = types.SimpleNamespace(fft=types.SimpleNamespace(fft=np.fft.fft, ifft=np.fft.ifft,
                                                         rfft=np.fft.rfft, irfft=np.fft.irfft),
                               ascontiguousarray=np.ascontiguousarray)
    monkeypatch.setattr(device_fft, "array_module", lambda a: xp)
    from hybridad.ops.fft import transform

    z = RNG.standard_normal((3, 10, 2))
    r = RNG.standard_normal((3, 10))
    h = RNG.standard_normal((3, 6, 2))
    cases = [("fft", z, (3, 10, 2), {"inverse": False}), ("fft", z, (3, 10, 2), {"inverse": True}),
             ("rfft", r, (3, 6, 2), {}), ("irfft", h, (3, 10), {"n": 10}),
             ("irfft", h, (3, 11), {"n": 11})]
    for kind, x, shape, attrs in cases:
        for norm in ("backward", "ortho", "forward"):
            want, got = np.empty(shape), np.empty(shape)
            transform(kind, want, x, norm=norm, **attrs)
            device_fft.DEVICE_FFT[kind](got, x, norm=norm, **attrs)
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14, err_msg=(kind, norm))


@pytest.mark.parametrize("backend", BACKENDS)
def test_spectral_paths_allocate_nothing(backend):
    """The paths built on the FFT ops -- stft, istft, spectrogram, csd, welch,
    fftconvolve, np.convolve with a long kernel, the fast dct, freqz in its
    coefficients -- in one function: gradient and HVP plans allocate nothing."""
    import scipy.fft as sf
    import scipy.signal as ss

    x = RNG.standard_normal(256)
    k = RNG.standard_normal(50)

    def f(x):
        z = ss.stft(x, nperseg=32)[2]
        return (np.sum(np.abs(z) ** 2) + np.sum(ss.istft(z, nperseg=32)[1] ** 2) +
                np.sum(ss.spectrogram(x, nperseg=32)[2]) +
                np.sum(np.abs(ss.csd(x, x[::-1], nperseg=32)[1])) +
                np.sum(ss.welch(x, nperseg=32)[1]) +
                np.sum(ss.fftconvolve(x, k, mode="same") ** 2) + np.sum(np.convolve(x, k) ** 2) +
                np.sum(sf.dct(x, norm="ortho") ** 2 * np.arange(256.0)) +
                np.sum(np.abs(ss.freqz(x[:3], [1.0, -0.3], worN=32)[1]) ** 2))

    plan = ha.compile(f, x, backend=backend)
    out = plan.gradient(x)
    assert out.value == pytest.approx(f(x), rel=1e-11)
    assert_no_alloc(lambda: plan.gradient(x, out=out))
    hvp = ha.compile(f, x, hvp=True, backend=backend)
    res = hvp.hvp(x, v=x)
    assert_no_alloc(lambda: hvp.hvp(x, v=x, out=res))
