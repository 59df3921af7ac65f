"""More of scipy.linalg on tracers (hybridad.frontend.scipy_linalg_extra):
constructors, expm_frechet, Sylvester and Lyapunov equations, polar, signm,
eig/eigvals of real spectra -- scipy's values, derivatives against central
differences (signm's against scipy's own Frechet derivative, to AD
precision), one numba program against numpy with no allocation per call,
refusals by name."""

import numpy as np
import pytest
import scipy.linalg as sl

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient

RNG = np.random.default_rng(11)
A = RNG.standard_normal((4, 4))
S = A @ A.T + np.eye(4)
Q = RNG.standard_normal((4, 4))
Q = Q @ Q.T + np.eye(4)

#: name -> (function of a 4 x 4 matrix, the matrix)
CASES = {
    "companion": (lambda a: sl.companion(a[0]), A),
    "companion of a stack": (lambda a: sl.companion(a[:2]), A),
    "hankel": (lambda a: sl.hankel(a[0], a[1, :3]), A),
    "hankel of c": (lambda a: sl.hankel(a[0]), A),
    "convolution_matrix full": (lambda a: sl.convolution_matrix(a[0, :3], 5), A),
    "convolution_matrix same": (lambda a: sl.convolution_matrix(a[0, :3], 5, "same"), A),
    "convolution_matrix valid": (lambda a: sl.convolution_matrix(a[0], 2, "valid"), A),
    "khatri_rao": (lambda a: sl.khatri_rao(a, a[:3] ** 2), A),
    "expm_frechet": (lambda a: sl.expm_frechet(a / 4, Q / 4)[1], A),
    "expm_frechet's expm": (lambda a: sl.expm_frechet(a / 4, a.T, compute_expm=True)[0], A),
    "expm_frechet alone": (lambda a: sl.expm_frechet(Q / 8, a, compute_expm=False), A),
    "solve_sylvester": (lambda a: sl.solve_sylvester(a, a.T + 3 * np.eye(4), Q), S),
    "solve_continuous_lyapunov": (lambda a: sl.solve_continuous_lyapunov(a - 5 * np.eye(4), -Q),
                                  A),
    "solve_discrete_lyapunov": (lambda a: sl.solve_discrete_lyapunov(a / 5, Q), A),
    "polar u": (lambda a: sl.polar(a)[0], A),
    "polar p": (lambda a: sl.polar(a)[1], A),
    "polar left": (lambda a: sl.polar(a, "left")[1], A),
    "signm": (lambda a: sl.signm(a), S - 2 * np.eye(4)),
    "eigvals": (lambda a: sl.eigvals(a).real, S),
    "eig": (lambda a: sl.eig(a)[0].real + np.abs(sl.eig(a)[1]).sum(axis=0), S),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_derivatives(name):
    f, a = CASES[name]
    res = ha.jacobian(lambda z: f(z).ravel(), a, backend="numpy")
    want = np.asarray(f(a)).ravel()
    np.testing.assert_allclose(res.value, want, rtol=0, atol=1e-13 * np.abs(want).max())
    w = np.cos(np.arange(want.size))

    def scalar(z):
        return np.sum(f(z).ravel() * w)

    np.testing.assert_allclose(res.jacobian.reshape(want.size, -1).T @ w,
                               numerical_gradient(scalar, a).ravel(), rtol=1e-6, atol=1e-8)


def test_signm_derivative_is_the_frechet_derivative():
    a = S - 2 * np.eye(4)
    w = np.cos(np.arange(16.0)).reshape(4, 4)
    got = ha.gradient(lambda z: np.sum(w * sl.signm(z)), a, backend="numpy").gradient
    big = np.block([[a.T, w], [np.zeros((4, 4)), a.T]])
    want = sl.signm(big)[:4, 4:]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max())


def _riccati(solver, seed, scale, cross):
    """A 4-state, 2-input problem (the cross term ``s`` or none), the gradient
    of ``sum(w * X)`` w.r.t. A, and scipy's ``X``."""
    rng = np.random.default_rng(seed)
    a, b = scale * rng.standard_normal((4, 4)), rng.standard_normal((4, 2))
    q, r = np.eye(4), 0.5 * np.eye(2)
    s = 0.1 * rng.standard_normal((4, 2)) if cross else None
    w = np.cos(np.arange(16.0)).reshape(4, 4)
    res = ha.gradient(lambda z: np.sum(w * solver(z, b, q, r, s=s)), a, backend="numpy")
    x = solver(a, b, q, r, s=s)
    assert float(res.value) == pytest.approx(np.sum(w * x), rel=1e-12)
    gain = np.linalg.solve(r, b.T @ x + (0 if s is None else s.T))  # (continuous)
    return a, b, r, s, w, res.gradient, x, gain


@pytest.mark.parametrize("cross", [False, True])
def test_continuous_riccati_equation(cross):
    """The stabilizing solution: scipy's to 1e-12 (its own residual is larger
    than hybridad's), the gradient w.r.t. A to AD precision against implicit
    differentiation (``Acl Y + Y Acl^T = W``, ``-(X Y^T + X Y)``)."""
    a, b, r, s, w, got, x, gain = _riccati(sl.solve_continuous_are, 3, 1.0, cross)
    y = sl.solve_continuous_lyapunov(a - b @ gain, w)
    want = -(x @ y.T + x @ y)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.abs(want).max())


@pytest.mark.parametrize("cross", [False, True])
def test_discrete_riccati_equation(cross):
    """scipy's solution to 1e-12, the gradient w.r.t. A to AD precision
    against implicit differentiation (``Y = Acl Y Acl^T + W``, ``X Acl (Y^T +
    Y)``)."""
    a, b, r, s, w, got, x, _ = _riccati(sl.solve_discrete_are, 4, 0.8, cross)
    gain = np.linalg.solve(r + b.T @ x @ b, b.T @ x @ a + (0 if s is None else s.T))
    closed = a - b @ gain
    y = sl.solve_discrete_lyapunov(closed, w)
    want = x @ closed @ (y.T + y)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_the_compiled_backend_agrees_and_allocates_nothing():
    def f(a):
        return (np.sum(sl.companion(a[0]) ** 2) + np.sum(sl.hankel(a[1]) * S)
                + np.sum(sl.solve_sylvester(a, a.T + 3 * np.eye(4), Q))
                + np.sum(sl.polar(a)[1] ** 2) + np.sum(sl.khatri_rao(a, a) ** 2))

    plan = ha.compile(f, A, backend="numba")
    out = ha.GradientResult(A)
    plan.gradient(A, out=out)
    ref = ha.gradient(f, A, backend="numpy")
    assert float(out.value) == pytest.approx(float(ref.value), rel=1e-13)
    np.testing.assert_allclose(out.gradient, ref.gradient, rtol=1e-11, atol=1e-12)
    assert_no_alloc(lambda: plan.gradient(A, out=out))


@pytest.mark.parametrize("f, match", [
    (lambda a: sl.solve_sylvester(*[np.kron(np.kron(a, a), np.eye(3))] * 3),  # (48 x 48)
     r"2304 unknowns"),
    (lambda a: sl.polar(a[:3]), r"polar of a non-square matrix"),
    (lambda a: sl.solve_continuous_are(a, a, a, a, e=a), r"generalized equation"),
    (lambda a: sl.solve_discrete_are(a, a, a, a, e=a), r"generalized equation"),
    (lambda a: sl.eig(a, left=True)[0].real, r"left=True"),
    (lambda a: sl.eigvals(a, a).real, r"generalized problem"),
    (lambda a: sl.signm(np.array([[0.0, -1.0], [1.0, 0.0]]) * a[0, 0]),
     r"signm did not converge"),
])
def test_refusals(f, match):
    with pytest.raises(NotImplementedError, match=match):
        ha.gradient(lambda a: np.sum(f(a)), S, backend="numpy")
