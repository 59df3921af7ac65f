"""Every second-order entry point gives one Hessian-vector product.

The ``hvp=True`` plan, a Hessian plan's ``hvp(x, v=)``, ``linearize`` then
``hvp(v=)`` (into a result, or ``H v`` alone into an array), ``ha.hvp`` with
``out=`` and the dense Hessian times ``v``: against central differences of
the gradient and against each other to rounding, on both CPU backends, for
functions of one array with further arguments (an array, a tuple of arrays,
a static Python float), and with no allocation per call.
"""

from __future__ import annotations

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations

RNG = np.random.default_rng(55)
N = 24
A = RNG.standard_normal((40, N)) / 4
Y = np.sign(RNG.standard_normal(40))
B = RNG.standard_normal(N)


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def logistic(x, A, y, lam):
    """A matrix product inside an elementwise chain, a static float."""
    return np.sum(np.logaddexp(0.0, -y * (A @ x))) + 0.5 * lam * np.sum(x ** 2)


def tupled(x, parts):
    """The further argument a tuple of arrays."""
    A, b = parts
    return np.sum(np.tanh(A @ x + 0.1) ** 2) + np.sum(b * np.exp(0.1 * x))


CASES = {
    "rosen": (rosen, ()),
    "logistic": (logistic, (A, Y, 0.3)),
    "tupled": (tupled, ((A, B),)),
}


def _fd_hvp(f, x, v, args, eps=1e-6):
    def g(z):
        return ha.gradient(f, z, *args, backend="numpy").gradient
    return (g(x + eps * v) - g(x - eps * v)) / (2 * eps)


def _plans(name, backend):
    """``(f, args, x, v, hvp=True plan, Hessian plan)`` of case ``name``."""
    f, args = CASES[name]
    x, v = RNG.uniform(-0.8, 0.8, N), RNG.standard_normal(N)
    return (f, args, x, v, ha.compile(f, x, *args, hvp=True, backend=backend),
            ha.compile(f, x, *args, hessian=True, backend=backend))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_entry_point_against_differences_and_each_other(name, backend):
    f, args, x, v, fused, hess = _plans(name, backend)
    got = {
        "hvp=True": fused.hvp(x, *args, v=v).hvp,
        "hessian plan hvp(x, v=)": hess.hvp(x, *args, v=v).hvp,
        "ha.hvp(out=)": ha.hvp(f, x, v, *args, out=ha.HvpResult(x), backend=backend).hvp,
        "dense hessian @ v": hess.hessian(x, *args).hessian @ v,
    }
    point = ha.GradientResult(x)
    hess.linearize(x, *args, out=point)
    got["linearize + hvp(v=)"] = hess.hvp(v=v, out=ha.HvpResult(x)).hvp
    alone = np.full(N, np.nan)
    assert hess.hvp(v=v, out=alone) is alone
    got["linearize + H v alone"] = alone
    ref = got["hvp=True"]
    scale = np.abs(ref).max()
    for what, hv in got.items():
        np.testing.assert_allclose(hv, ref, rtol=1e-12, atol=1e-12 * scale, err_msg=what)
    np.testing.assert_allclose(ref, _fd_hvp(f, x, v, args), rtol=1e-6, atol=1e-6 * scale)
    # the point's value and gradient, as every entry point reports them
    g = ha.gradient(f, x, *args, backend=backend)
    np.testing.assert_allclose(point.gradient, g.gradient, rtol=1e-13, atol=1e-14)
    assert float(point.value) == pytest.approx(float(g.value), rel=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_entry_point_allocates(name, backend):
    f, args, x, v, fused, hess = _plans(name, backend)
    res = [ha.HvpResult(x) for _ in range(4)]
    point, alone, full = ha.GradientResult(x), np.zeros(N), ha.HessianResult(x)

    def calls():
        fused.hvp(x, *args, v=v, out=res[0])
        hess.hvp(x, *args, v=v, out=res[1])
        hess.linearize(x, *args, out=point)
        hess.hvp(v=v, out=res[2])
        hess.hvp(v=v, out=alone)
        ha.hvp(f, x, v, *args, out=res[3], backend=backend)
        hess.hessian(x, *args, out=full)

    for _ in range(3):
        calls()
    with count_allocations() as counts:
        for _ in range(20):
            calls()
    assert counts.allocations == 0, f"{counts.allocations} allocations in 20 rounds"
    for r in res[1:]:
        np.testing.assert_allclose(r.hvp, res[0].hvp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(alone, res[0].hvp, rtol=1e-12, atol=1e-12)
