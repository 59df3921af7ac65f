"""A region's partials that differ by a number share one stored array
(hybridad/ops/region.py, ``_scaled_partials``): the weights of a linear
combination before a nonlinearity -- a stencil's ``-4``, a convolution's taps,
a constant weight the trace made an operand -- multiply the cotangent, not a
partial of their own.  Gradients against central differences and the numpy
reference on both backends, and the arena such plans hold: a few arrays the
size of the input, not one per weight (a 25-tap Gaussian filter held 25)."""

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.signal as ss
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc

TAPS = np.array([0.3, -1.1, 2.7, 0.05, -0.4, 1.9, 0.7])  # (no ratio of two is a power of two)


def laplacian_energy(u):
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return np.sum(np.tanh(lap) ** 2)


def weighted_taps(x):
    y = sum(x[k:x.size - 6 + k] * TAPS[k] for k in range(7))
    return np.sum(np.tanh(y) ** 2)


def where_between(x):
    y = 0.5 * x[:-1] - 3.0 * x[1:]
    return np.sum(np.where(y > 0, np.exp(-y), 1.0 - y) ** 2)


CASES = {
    "laplacian": (laplacian_energy, (12, 11)),
    "taps": (weighted_taps, (40,)),
    "convolve": (lambda x: np.sum(np.tanh(ss.convolve(x, TAPS, mode="same")) ** 2), (40,)),
    "gaussian_2d": (lambda x: np.sum(np.sin(ndi.gaussian_filter(x, 1.3)) ** 2), (9, 10)),
    "select": (where_between, (30,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients(name):
    f, shape = CASES[name]
    assert_grad(f, (rand(shape, seed=sum(map(ord, name))),))


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    f, shape = CASES[name]
    x = rand(shape, seed=3).astype(np.float32)
    got = ha.gradient(f, x).gradient
    want = ha.gradient(f, x.astype(np.float64), backend="numpy").gradient
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("f, bound", [
    (laplacian_energy, 1.5),  # one partial (was two: the weights 1 and -4)
    (lambda u: np.sum(np.tanh(ss.convolve(u.ravel(), TAPS, mode="same")) ** 2), 3.0),  # (7)
    (lambda u: np.sum(ndi.gaussian_filter(u, 2.0) ** 2), 6.0),  # (2 x 17 taps: 56x before)
])
def test_the_arena_does_not_grow_with_the_weights(f, bound):
    u = rand((200, 200), seed=4)
    plan = ha.compile(f, u)
    plan.gradient(u)
    assert plan.memory.total_bytes <= bound * u.nbytes, plan.explain()


@pytest.mark.parametrize("name", ["laplacian", "convolve", "gaussian_2d"])
def test_no_allocation_per_call(name):
    f, shape = CASES[name]
    x = rand(shape, seed=5)
    plan = ha.compile(f, x)
    res = plan.gradient(x)
    assert_no_alloc(plan.gradient, x, out=res, n=10)
