"""scipy.linalg's sqrtm, logm and fractional_matrix_power on tracers
(hybridad.frontend.scipy_linalg_matfuncs): scipy's values; gradients against
the Frechet derivative's adjoint computed by scipy itself (the upper right
block of ``f([[A^T, W], [0, A^T]])``, to 1e-13: AD precision, not finite
differences') on both CPU backends, for symmetric, repeated-eigenvalue,
non-normal and complex-spectrum matrices; Hessian-vector products against
differences of the gradient; a plan re-traced when a matrix needs another
number of steps; refusals; zero allocations per call."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import hybridad as ha
from hybridad.testing import assert_no_alloc

RNG = np.random.default_rng(5)
B, C = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))
W = RNG.standard_normal((4, 4))
MATRICES = {
    "spd": B @ B.T + np.eye(4),
    "product of two spd": (B @ B.T + np.eye(4)) @ (C @ C.T + np.eye(4)) / 8,
    "repeated eigenvalues": np.eye(4) + np.outer(B[0], B[0]),
    "complex spectrum": 2.0 * sl.expm(0.4 * (B - B.T)),
    "non-normal": np.triu(B) + 5 * np.eye(4),
    "near the identity": np.eye(4) + 1e-3 * C,
}
FUNCTIONS = {
    "sqrtm": sl.sqrtm,
    "logm": sl.logm,
    "fractional_matrix_power": lambda a: sl.fractional_matrix_power(a, 0.3),
}


def _adjoint(fn, a, w):
    """The gradient of ``sum(w * fn(a))``: ``L_fn(a^T, w)``, the upper right
    block of ``fn`` of the block matrix (scipy's own functions)."""
    n = a.shape[0]
    big = np.block([[a.T, w], [np.zeros((n, n)), a.T]])
    return np.real(fn(big))[:n, n:]


@pytest.mark.parametrize("fname", sorted(FUNCTIONS))
@pytest.mark.parametrize("mname", sorted(MATRICES))
def test_values_and_exact_gradients(mname, fname):
    fn, a = FUNCTIONS[fname], MATRICES[mname]
    res = ha.gradient(lambda a: np.sum(W * fn(a)), a, backend="numpy")
    want = np.sum(W * np.real(fn(a)))
    assert float(res.value) == pytest.approx(want, rel=1e-13, abs=1e-13)
    np.testing.assert_allclose(res.gradient, _adjoint(fn, a, W), rtol=0,
                               atol=2e-14 * np.abs(res.gradient).max())


def test_the_compiled_backend_agrees_and_allocates_nothing():
    """The three functions in one numba program (its compile takes seconds:
    the unrolled iterations), against numpy's to rounding, at two matrices
    needing the same steps; no allocation per call."""
    def f(a):
        return sum(np.sum(W * (k + 1) * fn(a)) for k, fn in enumerate(FUNCTIONS.values()))

    u = B[0] / np.linalg.norm(B[0])
    a = np.eye(4) + 0.6 * np.outer(u, u)  # (eigenvalues 1, 1, 1, 1.6: few steps, a short compile)
    plan = ha.compile(f, a, backend="numba")
    out = ha.GradientResult(a)
    for x in (a, a + 1e-3 * W @ W.T):
        plan.gradient(x, out=out)
        ref = ha.gradient(f, x, backend="numpy")
        assert float(out.value) == pytest.approx(float(ref.value), rel=1e-13)
        np.testing.assert_allclose(out.gradient, ref.gradient, rtol=0,
                                   atol=1e-14 * np.abs(ref.gradient).max())
    assert_no_alloc(lambda: plan.gradient(a, out=out))


@pytest.mark.parametrize("fname", sorted(FUNCTIONS))
def test_hvp_against_differences_of_the_gradient(fname):
    fn, a = FUNCTIONS[fname], MATRICES["product of two spd"]
    v = RNG.standard_normal(a.shape)

    def f(a):
        return np.sum(W * fn(a)) + np.sum(fn(a) ** 2)

    got = ha.hvp(f, a, v, backend="numpy").hvp
    h = 1e-5
    grad = [ha.gradient(f, a + s * h * v, backend="numpy").gradient for s in (1, -1)]
    np.testing.assert_allclose(got, (grad[0] - grad[1]) / (2 * h), rtol=0,
                               atol=1e-7 * np.abs(got).max())


def test_float32_stacks_and_scipy_dtypes():
    a = np.stack([MATRICES["spd"], MATRICES["non-normal"]])
    seen = {}

    def f(a):
        s, lg = sl.sqrtm(a), sl.logm(a[0])
        seen["dtypes"] = s.dtype, lg.dtype
        return np.sum(s ** 2) + np.sum(lg)

    res = ha.gradient(f, a.astype(np.float32), backend="numpy")
    with warnings.catch_warnings():  # (scipy: "logm result may be inaccurate" in float32)
        warnings.simplefilter("ignore")
        assert seen["dtypes"] == (sl.sqrtm(a.astype(np.float32)).dtype,
                                  sl.logm(a[0].astype(np.float32)).dtype)
    assert res.gradient.dtype == np.float32
    want = ha.gradient(f, a, backend="numpy")
    np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sl.sqrtm(a), np.stack([sl.sqrtm(m) for m in a]))


def test_another_number_of_steps_traces_again():
    """The steps are guarded decisions: a matrix that needs more of them (far
    from the identity) gets its own trace, the right value and gradient."""
    plan = ha.compile(lambda a: np.sum(W * sl.sqrtm(a)), MATRICES["near the identity"])
    out = ha.GradientResult(MATRICES["spd"])
    for a in (MATRICES["near the identity"], 40 * MATRICES["spd"], MATRICES["spd"]):
        plan.gradient(a, out=out)
        assert float(out.value) == pytest.approx(np.sum(W * sl.sqrtm(a)), rel=1e-13)
        np.testing.assert_allclose(out.gradient, _adjoint(sl.sqrtm, a, W), rtol=0,
                                   atol=2e-14 * np.abs(out.gradient).max())


@pytest.mark.parametrize("f, error, match", [
    (lambda a: sl.sqrtm(a - 3 * np.eye(4)), NotImplementedError,
     r"sqrtm of a matrix with an eigenvalue on the closed negative real axis"),
    (lambda a: sl.logm(a * 0), NotImplementedError, r"logm of a matrix with an eigenvalue"),
    (lambda a: sl.fractional_matrix_power(a, a[0, 0]), NotImplementedError, r"traced power t"),
    (lambda a: sl.sqrtm(a[:3]), ValueError, r"sqrtm: expected a square matrix"),
])
def test_refusals(f, error, match):
    a = np.diag([1.0, 2.0, 0.5, 4.0])
    with pytest.raises(error, match=match):
        ha.gradient(lambda a: np.sum(f(a)), a, backend="numpy")
