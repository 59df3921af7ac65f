"""Complex intermediates (pairs of real tracers) and np.fft: values equal
numpy's, real losses differentiated against central differences on both CPU
backends, Hessians, zero allocations, and JAX where installed."""

import numpy as np
import pytest
from conftest import BACKENDS, assert_grad

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.linspace(0.1, 1.3, 8) ** 2
W = np.linspace(-1.0, 1.0, 8)

FFT_LOSSES = {
    "rfft_power": lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2),
    "fft_of_complex": lambda x: np.sum(np.real(np.fft.fft(x * np.exp(1j * x))) * W),
    "ifft_angle": lambda x: np.sum(np.angle(np.fft.ifft(x + 0.5j))),
    "irfft_even": lambda x: np.sum(np.fft.irfft(np.fft.rfft(x) * np.exp(-1j * x[:5]), n=8) ** 2),
    "irfft_odd_n": lambda x: np.sum(np.fft.irfft(np.fft.rfft(x), n=7) * W[:7]),
    "crop_pad_norms": lambda x: np.sum(np.abs(np.fft.fft(x, n=12, norm="forward"))) +
    np.sum(np.abs(np.fft.rfft(x, n=5, norm="ortho")) ** 2),
    "fft2_ortho": lambda x: np.sum(np.abs(np.fft.fft2(x.reshape(2, 4), norm="ortho"))),
    "fftn_axes": lambda x: np.sum(np.imag(np.fft.fftn((x * np.exp(1j * x)).reshape(2, 2, 2),
                                                      axes=(0, 2))) ** 2),
    "rfftn_irfftn": lambda x: np.sum(np.fft.irfftn(np.fft.rfftn(x.reshape(2, 4)) *
                                                   (1 + 0.5j), s=(2, 4), axes=(0, 1)) ** 3),
    "rfft2_irfft2": lambda x: np.sum(np.fft.irfft2(np.fft.rfft2(x.reshape(2, 4)) * 2) ** 3),
    "hfft_ihfft": lambda x: np.sum(np.fft.hfft(x[:5] + 1j * x[3:], n=8) ** 2) +
    np.sum(np.abs(np.fft.ihfft(x, norm="ortho")) ** 2),
    "shifts": lambda x: np.sum(np.fft.fftshift(x) * W) +
    np.sum(np.abs(np.fft.ifftshift(np.fft.fft(x))) * W),
    "axis0": lambda x: np.sum(np.abs(np.fft.fft(x.reshape(4, 2), axis=0)) ** 2),
}


def test_fft_values_and_gradients():
    """All transforms in one function per backend (one compiled plan), each
    term also checked alone against numpy's value."""
    for name, f in FFT_LOSSES.items():
        res = ha.gradient(f, X, backend="numpy")
        np.testing.assert_allclose(res.value, f(X), rtol=1e-13, err_msg=name)
        g = numerical_gradient(f, X)
        np.testing.assert_allclose(res.gradient, g, rtol=1e-6, atol=1e-7 * np.max(np.abs(g)),
                                   err_msg=name)

    def everything(x):
        return sum(f(x) for f in FFT_LOSSES.values())

    assert_grad(everything, (X,))


def test_fft_hessian_and_no_allocation():
    f = FFT_LOSSES["irfft_even"]
    for backend in BACKENDS:
        res = ha.hessian(f, X, backend=backend)
        num = np.array([numerical_gradient(lambda x: numerical_gradient(f, x)[i], X)
                        for i in range(X.size)])
        np.testing.assert_allclose(res.hessian, num, rtol=1e-4, atol=1e-4)
    plan = ha.compile(FFT_LOSSES["rfft_power"], X, backend="numba")
    out = ha.DiffResult(np.zeros(()), np.zeros(8))
    plan.gradient(X, out=out)
    assert_no_alloc(lambda: plan.gradient(X, out=out))


def test_complex_arithmetic_and_elementary_functions():
    c = np.array([0.5 - 1j, 2.0 + 0.25j, -1.0 + 0.5j, 0.3 + 0j] * 2)

    def f(x):
        z = (x + 2j) ** 3 / (1 - 1j * x) * np.sqrt(x - 1j) + np.log(x + 1j) * np.cos(x * 1j)
        z = z + np.exp(1j * x) * c - np.conj(c) * np.tanh(z / 10) + np.sinh(x * c) / c
        w = np.sum(z * np.conj(z)) + np.vdot(c, z) + (c @ z)
        return np.abs(w) + np.real(np.sum(np.square(z))) + np.sum(np.angle(z, deg=True))

    res = assert_grad(f, (X,))
    np.testing.assert_allclose(res.value, f(X), rtol=1e-13)


def test_complex_shapes_and_reductions():
    def f(x):
        z = (x + 1j * x[::-1]).reshape(2, 4)
        z = np.concatenate([z, np.conj(z)], axis=0).T
        return np.real(np.sum(np.mean(z, axis=1) * np.arange(4.0))) + \
            np.linalg.norm(np.stack([z[0], z[1]]))

    assert_grad(f, (X,))


def test_complex_values_refused_where_unsupported():
    with pytest.raises(NotImplementedError, match=r"numpy\.sort of complex"):
        ha.gradient(lambda x: np.sum(np.abs(np.sort(x + 1j))), X)
    with pytest.raises(NotImplementedError, match=r"numpy\.median of complex"):
        ha.gradient(lambda x: np.abs(np.median(x + 1j)), X)
    with pytest.raises((TypeError, ValueError), match="scalar"):
        ha.gradient(lambda x: np.sum(x + 1j), X)


def test_against_jax_where_installed():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def f(xp):
        return lambda x: xp.sum(xp.abs(xp.fft.rfft(x * xp.exp(1j * x).real)) ** 2) + \
            xp.sum(xp.fft.irfft(xp.fft.fft(x)[:5] * (1 + 0.5j), n=8) ** 2)

    res = ha.hessian(f(np), X, backend="numba")
    np.testing.assert_allclose(res.gradient, np.asarray(jax.grad(f(jnp))(X)), rtol=1e-11)
    np.testing.assert_allclose(res.hessian, np.asarray(jax.hessian(f(jnp))(X)), rtol=1e-9,
                               atol=1e-10)


def test_complex_arguments_follow_autograds_convention():
    """``du/dx - 1j du/dy`` for a real ``u`` of ``z = x + iy`` (autograd, JAX)."""
    z = np.array([1 + 1j, 0.5 - 2j, -0.3 + 0.2j])
    w = np.array([0.3, -1.2, 2.0])

    def u(z, w):
        return np.abs(np.sum(np.exp(z) * w)) + np.sum(np.abs(z) ** 2)

    for backend in BACKENDS:
        res = ha.gradient(u, z, w, argnums=(0, 1), backend=backend)
        gz, gw = res.gradient
        assert gz.dtype == np.complex128 and gw.dtype == np.float64
        dx = numerical_gradient(lambda x: u(x + 1j * z.imag, w), z.real)
        dy = numerical_gradient(lambda y: u(z.real + 1j * y, w), z.imag)
        np.testing.assert_allclose(gz, dx - 1j * dy, rtol=1e-7)
        np.testing.assert_allclose(gw, numerical_gradient(lambda v: u(z, v), w), rtol=1e-7)
        np.testing.assert_allclose(res.value, u(z, w), rtol=1e-14)
    out = ha.DiffResult(np.zeros(()), np.zeros(3, complex))
    assert ha.gradient(lambda z: np.sum(np.abs(z) ** 2), z, out=out) is out
    np.testing.assert_allclose(out.derivs[0], 2 * np.conj(z), rtol=1e-15)
    with pytest.raises(ValueError, match="complex"):
        ha.gradient(lambda z: np.sum(np.abs(z) ** 2), z, out=ha.DiffResult(np.zeros(()),
                                                                           np.zeros(3)))
    with pytest.raises(TypeError, match="complex value"):
        ha.gradient(lambda z: np.sum(np.sin(z)), z)


def test_complex_scalar_argument_keeps_its_shape():
    for z in (1.5 - 0.5j, np.complex128(1.5 - 0.5j), np.array(1.5 - 0.5j)):
        g = ha.gradient(lambda z: np.abs(np.sin(z)) ** 2, z).gradient
        assert np.shape(g) == ()
        d = 1e-7
        u = lambda z: abs(np.sin(z)) ** 2  # noqa: E731
        expected = (u(z + d) - u(z - d)) / (2 * d) - 1j * (u(z + 1j * d) - u(z - 1j * d)) / (2 * d)
        np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_more_complex_functions():
    c = np.array([1 + 2j, 0.5 - 1j, -0.3 + 0.1j, 0.5 + 2j])  # off the branch cuts
    x = np.linspace(0.2, 1.0, 4)

    def f(x):
        z = x * c
        w = (np.exp2(z) + np.expm1(z) + np.log2(x + c) + np.log10(x + c) + np.log1p(z) +
             np.arcsinh(z) + np.arccosh(x + c) + np.arctanh(0.3 * z) + np.sqrt(-x + 0j))
        bil = np.sum(np.outer(z, c)) + np.sum(np.kron(z, c)) + np.tensordot(z, c, 1) + \
            np.einsum("i,i->", z, c) + np.inner(z, x)
        return np.abs(np.sum(w) + bil) + np.abs(np.prod(z)) + np.var(z) + \
            np.std(z, ddof=1) + np.ndim(z)

    res = assert_grad(f, (x,))
    np.testing.assert_allclose(res.value, f(x), rtol=1e-13)


def test_complex_dot_has_numpys_semantics_for_every_rank():
    """np.dot of an N-d pair sums the last axis of a with the second-to-last of b
    (not matmul's broadcasting): the autograd suite's (2, 3) . (2, 3, 4) case."""
    rng = np.random.default_rng(5)
    a = rng.normal(size=(2, 3)) + 1j * rng.normal(size=(2, 3))
    b = rng.normal(size=(2, 3, 4))
    for f in (lambda b: np.sum(np.abs(np.dot(a, b)) ** 2),
              lambda b: np.abs(np.sum(np.dot(b[0, :, 0], a[0] * 1j))),
              lambda b: np.abs(np.dot(a[0, 0], b[0, 0, 0]))):
        res = ha.gradient(f, b, backend="numpy")
        np.testing.assert_allclose(res.value, f(b), rtol=1e-13)
        np.testing.assert_allclose(res.gradient, numerical_gradient(f, b), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("ord_", [3, 1, np.inf, -np.inf, 0.5])
def test_complex_vector_norms_are_norms_of_the_moduli(ord_):
    rng = np.random.default_rng(7)
    z = rng.normal(size=5) + 1j * rng.normal(size=5)
    res = ha.gradient(lambda z: np.linalg.norm(z, ord=ord_), z, backend="numpy")
    assert res.value == pytest.approx(np.linalg.norm(z, ord=ord_), rel=1e-13)
    gx = numerical_gradient(lambda x: np.linalg.norm(x + 1j * z.imag, ord=ord_), z.real)
    gy = numerical_gradient(lambda y: np.linalg.norm(z.real + 1j * y, ord=ord_), z.imag)
    np.testing.assert_allclose(res.gradient, gx - 1j * gy, rtol=1e-7, atol=1e-9)
    with pytest.raises(NotImplementedError, match="complex matrices"):
        ha.gradient(lambda z: np.linalg.norm(z.reshape(1, 5), ord="nuc"), z)


_KEEPS = [(fn, dt) for fn, kinds in ((np.fft.fft, "fc"), (np.fft.ifft, "fc"), (np.fft.fftn, "fc"),
                                     (np.fft.rfft, "f"), (np.fft.rfftn, "f"), (np.fft.ihfft, "f"),
                                     (np.fft.irfft, "fc"), (np.fft.irfftn, "fc"),
                                     (np.fft.hfft, "fc"))
          for dt in (np.float32, np.float64, np.complex64, np.complex128)
          if np.dtype(dt).kind in kinds]  # (rfft, rfftn, ihfft: real input only)


@pytest.mark.parametrize("fn,dtype", _KEEPS,
                         ids=[f"{f.__name__}-{np.dtype(d).name}" for f, d in _KEEPS])
def test_transforms_keep_numpys_precision(fn, dtype):
    """numpy 2's FFT keeps single precision: float32 and complex64 input give
    complex64 or float32 results.  The traced transform gives numpy's dtype
    (its tables were float64, and float32 signals came out complex128: found
    by the array-api-tests suite), and numpy's values to its precision."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(6)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(6)
    x = x.astype(dtype)
    got = ha.jacobian(lambda d, x: fn(x), np.zeros(()), x, backend="numpy").value
    want = fn(x)
    assert got.dtype == want.dtype
    tol = 1e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-14
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())


_WEAK = {"exp_1j": lambda x: np.exp(1j * x), "times": lambda x: x * (1 + 2j),
         "plus": lambda x: x + 0.5j, "over": lambda x: 1 / (x + 1j),
         "square": lambda x: (x + 1j) ** 2, "inverse_square": lambda x: (x + 1j) ** -2,
         "root": lambda x: (x + 1j) ** 0.5, "log2": lambda x: np.log2(x + 1j),
         "log10": lambda x: np.log10(x + 1j), "exp2": lambda x: np.exp2(x + 1j),
         "expm1": lambda x: np.expm1(x * 1j), "sqrt": lambda x: np.sqrt(x - 2j),
         "tanh": lambda x: np.tanh(x + 0.5j), "minus": lambda x: 2 - (x + 1j)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(_WEAK))
def test_python_complex_numbers_are_weak(name, dtype):
    """numpy 2 promotes a Python number weakly: a float32 array times ``1j``
    is complex64.  Traced, a Python complex number became a float64 constant
    (``exp(1j * x)``, ``(x + 1j) ** -2``, ``exp2``: complex128); its parts
    now stay Python numbers, and functions of a zero part take the value's
    precision."""
    f = _WEAK[name]
    x = np.linspace(0.1, 1.0, 5).astype(dtype)
    got = ha.jacobian(lambda d, x: f(x), np.zeros(()), x, backend="numpy").value
    want = f(x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == np.float32 else 1e-13)


def test_complex_casts_and_result_type():
    """``x.astype(complex)`` makes a complex value, a complex value's
    ``astype`` casts its parts (to a real dtype: the real part, with numpy's
    ComplexWarning), ``np.result_type`` sees complex values: what
    scipy.signal.freqz does with its coefficients."""
    import scipy.signal as ss

    b, a = np.array([0.2, 0.3, 0.2]), np.array([1.0, -0.4, 0.1])

    def response(p):
        _, h = ss.freqz(p[:3], p[3:], worN=32)
        return np.sum(np.abs(h) ** 2)

    def casts(x):
        z = (x + 1j * x ** 2).astype(np.complex128)
        assert (x * (1 + 1j)).astype(np.complex64).dtype == np.complex64
        with pytest.warns(np.exceptions.ComplexWarning):
            r = (x * 1j + x).astype(np.float64)
        assert np.result_type(z, 1.0) == np.complex128
        return np.sum(np.abs(z) ** 2) + np.sum(np.abs(x.astype(np.complex128) * (1 - 2j))) + \
            np.sum(r)

    assert_grad(response, (np.concatenate([b, a]),))
    assert_grad(casts, (X,))
