"""Complex dtypes end to end: complex Jacobians (complex values, holomorphic
df/dz, real values of complex arguments), Hessians and Hessian-vector
products of real functions of complex arguments, complex results written
into preallocated buffers without allocating, and numpy's lexicographic
order of complex values -- against central differences, and JAX where
installed."""

import threading

import numpy as np
import pytest
from conftest import BACKENDS

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

X = np.array([0.3, -1.1, 0.7, 1.6])
Z = np.array([1 + 1j, 0.5 - 2j, -0.3 + 0.2j])
W = np.array([0.3, -1.2, 2.0])
C = np.array([[1 + 2j, 0.5 - 1j, -0.3 + 0.1j], [0.2 + 0j, 1j, 2 - 1j]])
V = np.array([1 + 0.5j, -1j, 0.3])


def numerical_jacobian(f, x):
    """Central differences of ``f`` (flattened) along each real input element."""
    x = np.asarray(x, float)
    cols, h = [], 1e-6
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        e = e.reshape(x.shape)
        cols.append((np.ravel(f(x + e)) - np.ravel(f(x - e))) / (2 * h))
    return np.stack(cols, axis=1)


def d_dx(f, z):
    """Central differences of ``f`` (flattened) along the real axis of each z_j."""
    return numerical_jacobian(lambda x: f(x + 1j * z.imag), z.real)


def d_dy(f, z):
    return numerical_jacobian(lambda y: f(z.real + 1j * y), z.imag)


def complex_valued(x):
    return np.stack([np.exp(1j * x) * x[::-1], (x + 2j) ** 2 / (1 - 1j * x)]) @ \
        np.array([1.0, 0.5j, -1.0, 2.0])[:, None] * x[:2]


def holomorphic(z):
    return np.concatenate([np.sin(z) * z, C @ z ** 2, np.exp(z[:1]) / (z[1:2] + 3)])


def real_of_complex(z, w):
    return np.concatenate([np.abs(z) ** 2 * w, np.real(np.exp(z) * np.conj(C[0])),
                           np.reshape(np.sum(np.angle(z + 2)), (1,))])


def loss(z, w):
    return np.abs(np.sum(np.exp(z) * w)) ** 2 + np.sum(np.abs(z) ** 4) + \
        np.real(np.sum(C @ (z * z)))


def test_jacobian_of_complex_values_of_a_real_argument():
    """J = dRe f/dx + 1j dIm f/dx (jax.jacfwd); the value complex."""
    num = numerical_jacobian(complex_valued, X)
    for backend in BACKENDS:
        for mode in ("forward", "reverse"):
            res = ha.jacobian(complex_valued, X, backend=backend, mode=mode)
            assert res.value.dtype == np.complex128 and res.jacobian.dtype == np.complex128
            np.testing.assert_allclose(res.value, complex_valued(X), rtol=1e-14)
            np.testing.assert_allclose(res.jacobian, num, rtol=1e-7, atol=1e-8)
    out = ha.JacobianResult(complex_valued(X), X)
    assert ha.jacobian(complex_valued, X, out=out) is out
    np.testing.assert_allclose(out.jacobian, num, rtol=1e-7, atol=1e-8)


def test_holomorphic_jacobian_is_df_dz():
    """holomorphic=True: df/dz = df/dx = -1j df/dy (Cauchy-Riemann)."""
    dx, dy = d_dx(holomorphic, Z), d_dy(holomorphic, Z)
    np.testing.assert_allclose(dx, -1j * dy, rtol=1e-6)  # the test function is holomorphic
    for backend in BACKENDS:
        for mode in ("forward", "reverse"):
            res = ha.jacobian(holomorphic, Z, holomorphic=True, backend=backend, mode=mode)
            np.testing.assert_allclose(res.value, holomorphic(Z), rtol=1e-14)
            np.testing.assert_allclose(res.jacobian, dx, rtol=1e-7)
    np.testing.assert_allclose(res.jacobian[:3], np.diag(np.cos(Z) * Z + np.sin(Z)), rtol=1e-12)
    np.testing.assert_allclose(res.jacobian[3:5], 2 * C * Z, rtol=1e-12)


def test_jacobian_of_real_values_of_a_complex_argument_follows_the_gradient():
    """Row i is grad f_i = df_i/dx - 1j df_i/dy (jax.jacrev)."""
    f = real_of_complex
    expected = d_dx(lambda z: f(z, W), Z) - 1j * d_dy(lambda z: f(z, W), Z)
    for backend in BACKENDS:
        res = ha.jacobian(f, Z, W, backend=backend)
        assert res.value.dtype == np.float64 and res.jacobian.dtype == np.complex128
        np.testing.assert_allclose(res.value, f(Z, W), rtol=1e-14)
        np.testing.assert_allclose(res.jacobian, expected, rtol=1e-6, atol=1e-8)
    # a real scalar: the Jacobian's one row is the gradient
    row = ha.jacobian(lambda z, w: np.reshape(loss(z, w), (1,)), Z, W).jacobian[0]
    np.testing.assert_allclose(row, ha.gradient(loss, Z, W).gradient, rtol=1e-13)
    # a complex constant argument, a real differentiated one
    res = ha.jacobian(lambda w, z: np.abs(z * w) ** 2, W, Z)
    assert res.jacobian.dtype == np.float64
    np.testing.assert_allclose(res.jacobian, np.diag(2 * W * np.abs(Z) ** 2), rtol=1e-13)


def test_complex_jacobians_refused_as_jax_refuses_them():
    untouched = ha.JacobianResult(holomorphic(Z), Z)
    with pytest.raises(TypeError, match="holomorphic=True"):
        ha.jacobian(holomorphic, Z, out=untouched)
    with pytest.raises(TypeError, match="holomorphic=True needs a complex differentiated"):
        ha.jacobian(complex_valued, X, holomorphic=True)
    with pytest.raises(TypeError, match="returns real values"):
        ha.jacobian(real_of_complex, Z, W, holomorphic=True)
    with pytest.raises(ValueError, match="out.jacobian"):  # a real buffer for a complex J
        ha.jacobian(real_of_complex, Z, W, out=ha.DiffResult(np.zeros(7), np.zeros((7, 3))))
    with pytest.raises(ValueError, match="out.value"):  # a real buffer for complex values
        ha.jacobian(complex_valued, X, out=ha.DiffResult(np.zeros((2, 4)),
                                                         np.zeros((8, 4), complex)))
    assert not np.any(untouched.value) and not np.any(untouched.jacobian)
    with pytest.raises(TypeError, match="complex value"):  # grad of a complex scalar
        ha.gradient(lambda z: np.sum(np.sin(z)), Z)
    with pytest.raises(TypeError, match="complex value"):
        ha.hessian(lambda z: np.sum(z * z), Z)


def real_hessian(f, z):
    """Central differences of the real gradient over (z.real, z.imag)."""
    n = z.size

    def grad_xy(xy):
        g = ha.gradient(f, xy[:n] + 1j * xy[n:], backend="numpy").gradient
        return np.concatenate([g.real, -g.imag])  # du/dx, du/dy
    return numerical_jacobian(grad_xy, np.concatenate([z.real, z.imag]))


def test_hessian_is_the_real_hessian_over_real_and_imaginary_parts():
    def f(z):
        return loss(z, W)

    num = real_hessian(f, Z)
    grad = ha.gradient(f, Z).gradient
    for backend in BACKENDS:
        res = ha.hessian(f, Z, backend=backend)
        assert res.hessian.shape == (6, 6) and res.hessian.dtype == np.float64
        np.testing.assert_allclose(res.hessian, num, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res.hessian, res.hessian.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(res.gradient, grad, rtol=1e-13)
        np.testing.assert_allclose(res.value, f(Z), rtol=1e-14)
    out = ha.HessianResult(Z)
    assert out.gradient.dtype == np.complex128 and out.value.dtype == np.float64
    assert ha.hessian(loss, Z, W, out=out) is out
    np.testing.assert_allclose(out.hessian, num, rtol=1e-6, atol=1e-6)
    # a real differentiated argument next to a complex constant: the usual Hessian
    res = ha.hessian(lambda w, z: loss(z, w), W, Z)
    assert res.hessian.shape == (3, 3) and res.gradient.dtype == np.float64


def test_hvp_is_the_derivative_of_the_gradient_along_v():
    """hvp(f, z, v) = d/dt grad(z + t v), and r[:n] - 1j r[n:] for r = H [v.re; v.im]."""
    h = 1e-6
    num = (ha.gradient(loss, Z + h * V, W, backend="numpy").gradient -
           ha.gradient(loss, Z - h * V, W, backend="numpy").gradient) / (2 * h)
    H = ha.hessian(loss, Z, W).hessian
    r = H @ np.concatenate([V.real, V.imag])
    for backend in BACKENDS:
        res = ha.hvp(loss, Z, V, W, backend=backend)
        np.testing.assert_allclose(res.hvp, num, rtol=1e-6)
        np.testing.assert_allclose(res.hvp, r[:3] - 1j * r[3:], rtol=1e-12)
        np.testing.assert_allclose(res.gradient, ha.gradient(loss, Z, W).gradient, rtol=1e-13)
    # argnums a tuple, v a tuple (a real direction for the real argument)
    Wv = np.array([0.5, -1.0, 0.25])
    res = ha.hvp(loss, Z, (V, Wv), W, argnums=(0, 1))
    gz, gw = res.gradient
    assert gz.dtype == np.complex128 and gw.dtype == np.float64

    def grads(t):
        return ha.gradient(loss, Z + t * V, W + t * Wv, argnums=(0, 1), backend="numpy").gradient
    for got, plus, minus in zip(res.hvp, grads(h), grads(-h), strict=True):
        np.testing.assert_allclose(got, (plus - minus) / (2 * h), rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        ha.hvp(loss, Z, V[:2], W)


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def holo(np_):
        return lambda z: np_.concatenate([np_.sin(z) * z, C @ z ** 2,
                                          np_.exp(z[:1]) / (z[1:2] + 3)])

    for jac in (jax.jacfwd, jax.jacrev):
        np.testing.assert_allclose(ha.jacobian(holo(np), Z, holomorphic=True).jacobian,
                                   jac(holo(jnp), holomorphic=True)(Z), rtol=1e-12)

    def cval(np_):
        return lambda x: np_.exp(1j * x) * x[::-1] + (x + 2j) ** 2 / (1 - 1j * x)

    np.testing.assert_allclose(ha.jacobian(cval(np), X).jacobian, jax.jacfwd(cval(jnp))(X),
                               rtol=1e-12, atol=1e-14)

    def rval(np_):
        return lambda z: np_.concatenate([np_.abs(z) ** 2 * W, np_.real(np_.exp(z) * C[0])])

    np.testing.assert_allclose(ha.jacobian(rval(np), Z).jacobian, jax.jacrev(rval(jnp))(Z),
                               rtol=1e-12, atol=1e-14)

    def u(np_):
        return lambda z: np_.abs(np_.sum(np_.exp(z) * W)) ** 2 + np_.sum(np_.abs(z) ** 4)

    np.testing.assert_allclose(ha.gradient(u(np), Z).gradient, jax.grad(u(jnp))(Z), rtol=1e-12)
    np.testing.assert_allclose(ha.hvp(u(np), Z, V).hvp,
                               jax.jvp(jax.grad(u(jnp)), (Z,), (V,))[1], rtol=1e-12)

    def u_xy(xy):  # JAX's Hessian of the real view is ours
        return u(jnp)(xy[:3] + 1j * xy[3:])

    np.testing.assert_allclose(ha.hessian(u(np), Z).hessian,
                               jax.hessian(u_xy)(np.concatenate([Z.real, Z.imag])), rtol=1e-12)
    with pytest.raises(TypeError):  # JAX refuses the Hessian of a complex argument
        jax.hessian(u(jnp))(Z)


def test_preallocated_complex_results_are_written_in_place_without_allocating():
    outs = {"gradient": ha.GradientResult(Z), "hvp": ha.HvpResult(Z),
            "hessian": ha.HessianResult(Z), "holomorphic": ha.JacobianResult(holomorphic(Z), Z),
            "complex values": ha.JacobianResult(complex_valued(X), X),
            "real values": ha.JacobianResult(real_of_complex(Z, W), Z)}
    assert outs["gradient"].gradient.dtype == np.complex128
    assert outs["holomorphic"].jacobian.dtype == np.complex128
    assert outs["real values"].value.dtype == np.float64
    assert ha.GradientResult(Z.astype(np.complex64)).value.dtype == np.float32
    calls = {
        "gradient": lambda: ha.gradient(loss, Z, W, out=outs["gradient"]),
        "hvp": lambda: ha.hvp(loss, Z, V, W, out=outs["hvp"]),
        "hessian": lambda: ha.hessian(loss, Z, W, out=outs["hessian"]),
        "holomorphic": lambda: ha.jacobian(holomorphic, Z, out=outs["holomorphic"],
                                           holomorphic=True),
        "complex values": lambda: ha.jacobian(complex_valued, X, out=outs["complex values"]),
        "real values": lambda: ha.jacobian(real_of_complex, Z, W, out=outs["real values"]),
    }
    for name, call in calls.items():
        first = [np.copy(b) for b in (outs[name].value, *outs[name].derivs)]
        assert call() is outs[name]
        assert_no_alloc(call, n=20)
        for a, b in zip(first, (outs[name].value, *outs[name].derivs), strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(outs["gradient"].gradient, ha.gradient(loss, Z, W).gradient)
    np.testing.assert_allclose(outs["holomorphic"].jacobian, d_dx(holomorphic, Z), rtol=1e-7)


def test_complex_calls_from_threads_agree():
    zs = [Z * (1 + 0.1 * k) for k in range(8)]
    expected = [ha.gradient(loss, z, W, backend="numpy").gradient for z in zs]
    got = [None] * len(zs)

    def work(k):
        out = ha.GradientResult(Z)
        for _ in range(20):
            ha.gradient(loss, zs[k], W, out=out, backend="numpy")
        got[k] = out.gradient

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(zs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-14)


class _Model:
    def __init__(self, c):
        self.c = c

    def response(self, x):
        return np.exp(1j * x * self.c)


def test_complex_values_of_a_method_and_a_plan_cache_hit():
    m = _Model(2.0)
    for _ in range(3):
        res = ha.jacobian(m.response, X)
        np.testing.assert_allclose(res.jacobian, np.diag(2j * np.exp(2j * X)), rtol=1e-14)
    m.c = 3.0  # read at call time
    np.testing.assert_allclose(ha.jacobian(m.response, X).jacobian,
                               np.diag(3j * np.exp(3j * X)), rtol=1e-14)


# --------------------------------------------------------------------------
# numpy's order of complex values
# --------------------------------------------------------------------------
A = np.array([[1 + 1j, 2 + 0j, 2 - 3j, 1 + 5j], [0.5 + 1j, 3 + 1j, 3 + 2j, 3 + 2j],
              [0.5 + 0j, 0.5 - 1j, -2 + 5j, 0.5 + 0j]])
B = np.array([[1 + 2j, 2 + 0.5j, 2 - 1j, 0j], [1 + 0j, 3 + 1j, 3 + 3j, 4 - 1j],
              [0.5 + 0j, 0.5 - 2j, 9 + 0j, -1 + 0j]])
ORDER = {
    "max": lambda a, b: np.max(a),
    "min": lambda a, b: np.min(a),
    "max_axis0": lambda a, b: np.max(a, axis=0),
    "min_axis1_keepdims": lambda a, b: np.min(a, axis=1, keepdims=True),
    "amax_axes": lambda a, b: np.amax(b, axis=(0, 1)),
    "amin_negative_axis": lambda a, b: np.amin(b, axis=-1),
    "maximum": lambda a, b: np.maximum(a, b),
    "minimum": lambda a, b: np.minimum(a, b),
    "fmax": lambda a, b: np.fmax(a, b),
    "fmin": lambda a, b: np.fmin(a, b),
    "maximum_real": lambda a, b: np.maximum(a, np.real(b)),
    "methods": lambda a, b: a.max(axis=1) + b.min(axis=0)[:3],
}
ARG = {
    "argmax": lambda a: np.argmax(a),
    "argmin_axis1": lambda a: np.argmin(a, axis=1),
    "argmax_axis0_keepdims": lambda a: np.argmax(a, axis=0, keepdims=True),
    "argmin_method": lambda a: a.argmin(),
}


def _parts(fn, xy):
    r = fn(xy[0] + 1j * xy[1], xy[2] + 1j * xy[3])
    return np.stack([np.real(r), np.imag(r)])


@pytest.mark.parametrize("name", list(ORDER))
def test_complex_order_values_and_derivatives(name):
    """Lexicographic, ties in the real part broken by the imaginary part (A and
    B have such ties); the derivative follows the selected element."""
    fn = ORDER[name]
    xy = np.stack([A.real, A.imag, B.real, B.imag])
    res = ha.jacobian(lambda xy: _parts(fn, xy), xy, backend="numpy")
    np.testing.assert_array_equal(res.value, _parts(fn, xy))
    rng = np.random.default_rng(3)  # no ties: the derivative is defined
    xy = rng.normal(size=xy.shape)
    res = ha.jacobian(lambda xy: _parts(fn, xy), xy, backend="numpy")
    num = numerical_jacobian(lambda xy: _parts(fn, xy), xy)
    np.testing.assert_allclose(res.jacobian, num, atol=1e-8)


def test_complex_order_arg_functions_and_nan():
    for name, fn in ARG.items():
        got = ha.jacobian(lambda x, fn=fn: fn(A * x[0]) + 0.0 * x[0], np.ones(1),
                          backend="numpy").value
        np.testing.assert_array_equal(got, fn(A) * 1.0, err_msg=name)
    nan = np.nan  # complex constants reach f as their parts: no 1j * nan in between
    An = np.array([[1 + 1j, complex(2, nan), 3 + 0j], [complex(nan, 0), 3 + 1j, complex(nan, 1)],
                   [0j, 1 + 0j, 1 + 0j]])
    Bn = np.array([[complex(1, nan), 2 + 0j, 3 + 1j], [1 + 0j, complex(nan, nan), 0j],
                   [0j, 1 - 1j, 1 + 1j]])
    for name, fn in {**ORDER, **{k: (lambda a, b, f=f: f(a)) for k, f in ARG.items()}}.items():
        res = ha.jacobian(lambda x, a, b, fn=fn: fn(a, b) + 0.0 * x[0], np.ones(1), An, Bn,
                          backend="numpy")
        expected = fn(An, Bn)
        np.testing.assert_array_equal(np.real(res.value), np.real(expected), err_msg=name)
        np.testing.assert_array_equal(np.imag(res.value), np.imag(expected), err_msg=name)


def test_complex_order_compiled_and_in_a_loss():
    def f(x):
        z = (x + 1j * x[::-1]) * np.array([1, 1j, -1, 0.5 + 1j])
        return np.abs(np.max(z)) ** 2 + np.sum(np.abs(np.maximum(z, 0.5j * x))) + \
            np.real(np.min(z.reshape(2, 2), axis=0)).sum() + np.argmax(z) * 1.0

    ref = ha.gradient(f, X, backend="numpy")
    np.testing.assert_allclose(ref.value, f(X), rtol=1e-14)
    np.testing.assert_allclose(ref.gradient, numerical_gradient(f, X), rtol=1e-6, atol=1e-8)
    res = ha.gradient(f, X, backend="numba")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12)
