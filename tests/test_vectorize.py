"""Python functions mapped over traced arrays (hybridad/frontend/numpy_map.py):
``np.vectorize`` and ``np.apply_along_axis``.  Values against numpy's own
loop, gradients against central differences on both backends
(``assert_grad``), the three ways a mapped function is traced (once and
batched; a branch on a value as one elementwise kernel; once per element),
a plan whose size does not grow with the number of elements, no allocation
per call, numpy's behaviour outside a trace, and the refusals."""

import math

import numpy as np
import pytest
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc

W = np.array([0.7, -1.3, 0.4, 2.0])


def _huber(t):
    if abs(t) < 1.0:
        return 0.5 * t * t
    return abs(t) - 0.5


def _smooth(t):
    return np.tanh(t) ** 2 + 0.5 * t * np.exp(-t * t)


huber = np.vectorize(_huber)
smooth = np.vectorize(_smooth)
polar = np.vectorize(lambda r, a: (r * np.cos(a), r * np.sin(a)))
rowdot = np.vectorize(lambda r, v: np.dot(r, v) ** 2, signature="(n),(n)->()")
outer = np.vectorize(lambda r: np.outer(r, r[:2]), signature="(n)->(n,m)")
powers = np.vectorize(lambda a, p: a ** p[0] + p[1] * a, excluded={1})
scaled = np.vectorize(lambda a, scale=1.0: a * scale + a ** 3)
as_float = np.vectorize(lambda a: a * 3 - 1, otypes=[np.float64])
expm = np.vectorize(lambda t: math.exp(-t) if t > 0 else 1.0 - t)  # math: an elementwise kernel


@np.vectorize
def soft(t):
    if t > 1:
        return t - 0.5
    if t < -1:
        return -t - 0.5
    return 0.5 * t * t


MAPS = {
    "batched": lambda x: np.sum(smooth(x) * np.arange(20.0).reshape(4, 5)),
    "branch_kernel": lambda x: np.sum(huber(2 * x) ** 2) + np.sum(soft(3 * x)),
    "math_kernel": lambda x: np.sum(expm(x - 0.2)),
    "two_args_broadcast": lambda x: sum(np.sum(p * k) for k, p in enumerate(polar(x, x[0]), 1)),
    "signature_reduce": lambda x: np.sum(rowdot(x[:, :4], W)),
    "signature_matrix": lambda x: np.sum(outer(x) * np.arange(40.0).reshape(4, 5, 2)),
    "excluded": lambda x: np.sum(powers(x, [3, 0.5])),
    "keyword": lambda x: np.sum(scaled(x, scale=2.5)) + np.sum(scaled(x, scale=x[0, 0])),
    "otypes": lambda x: np.sum(as_float(x) ** 2),
    "scalar": lambda x: smooth(x[1, 2]) * 3.0,
    "aaa_scalar": lambda x: np.sum(np.apply_along_axis(
        lambda r: np.sum(r ** 2) / (2 + r[0]), 1, x)),
    "aaa_vector_axis0": lambda x: np.sum(np.apply_along_axis(lambda r: np.cumsum(r) * r[0], 0, x) *
                                         np.arange(20.0).reshape(4, 5)),
    "aaa_matrix_3d": lambda x: np.sum(np.apply_along_axis(lambda r: np.outer(r, r), 1,
                                                          x.reshape(2, 2, 5)) ** 2),
    "aaa_sort": lambda x: np.sum(np.apply_along_axis(np.sort, -1, x) * np.arange(5.0)),
    "aaa_branch_rows": lambda x: np.sum(np.apply_along_axis(
        lambda r: np.sum(r ** 2) if r[0] > 0 else -np.sum(r), 1, x)),
    "aaa_extra_args": lambda x: np.sum(np.apply_along_axis(
        lambda r, v, s=1.0: np.dot(r, v) * s, 1, x[:, :4], x[0, :4], s=2.0) ** 2),
}


@pytest.mark.parametrize("name", sorted(MAPS))
def test_mapped_values_and_gradients(name):
    """Value against numpy's own loop (``assert_grad``: to 1e-12), gradient
    against central differences, the numba plan against the numpy reference."""
    x = rand((4, 5), seed=sum(map(ord, name)))
    x[np.abs(x) < 0.05] = 0.3  # (away from the branches' kinks)
    assert_grad(MAPS[name], (x,))


def test_values_are_numpys_and_shapes_too():
    x = rand((3, 4), seed=3)
    cases = [
        lambda x: huber(x * 2), lambda x: smooth(x), lambda x: polar(x, x[0])[1],
        lambda x: outer(x), lambda x: rowdot(x, W), lambda x: powers(x, [2, 1.0]),
        lambda x: np.apply_along_axis(lambda r: np.outer(r, r[:2]), 1, x.reshape(3, 2, 2)),
        lambda x: np.apply_along_axis(lambda r: r[::-1] * 2, 0, x),
    ]
    for k, f in enumerate(cases):
        want = f(x)
        got = ha.jacobian(f, x, backend="numpy").value
        assert got.shape == want.shape, k
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15, err_msg=str(k))


def test_a_closure_over_a_differentiated_parameter():
    """The mapped function reads a traced parameter it closes over, the mapped
    array a constant: numpy's own call meets the tracer, and the map is
    traced instead (batched; with a branch: once per element)."""
    x = rand((6,), seed=4)
    x[np.abs(x) < 0.05] = 0.3

    def plain(w):
        return np.sum(np.vectorize(lambda t: t * w[0] + np.sin(t * w[1]))(x)) + \
            np.sum(np.apply_along_axis(lambda r: r @ w[:3], 1, x.reshape(2, 3)))

    def branching(w):
        return np.sum(np.vectorize(lambda t: t * w[0] if t > 0 else np.sin(t) * w[1])(x))

    for f in (plain, branching):
        assert_grad(f, (rand((3,), seed=5),))


def test_traced_once_whatever_the_number_of_elements():
    """A map traced once and batched, and a branching scalar function as one
    kernel: the plan's traced nodes do not grow with the elements (numpy's
    loop calls the function once per element)."""
    counts = {}
    for n in (10, 2000):
        x = rand((n,), seed=6)
        for name, f in (("batched", lambda x: np.sum(smooth(x))),
                        ("kernel", lambda x: np.sum(huber(x)))):
            counts.setdefault(name, []).append(ha.compile(f, x).build_times.nodes)
    assert counts["batched"][0] == counts["batched"][1], counts
    assert counts["kernel"][0] == counts["kernel"][1], counts


@pytest.mark.parametrize("name", ["batched", "branch_kernel", "signature_matrix", "aaa_scalar",
                                  "aaa_branch_rows"])
def test_no_allocation_per_call(name):
    x = rand((4, 5), seed=7)
    plan = ha.compile(MAPS[name], x)
    res = plan.gradient(x)
    assert_no_alloc(plan.gradient, x, out=res, n=10)


def test_hessian_through_a_batched_map():
    x = rand((5,), seed=8)
    f = lambda x: np.sum(smooth(x) * x)  # noqa: E731
    H = ha.hessian(f, x).hessian
    eps = 1e-5
    fd = np.array([(ha.gradient(f, x + eps * e).gradient - ha.gradient(f, x - eps * e).gradient)
                   / (2 * eps) for e in np.eye(5)])
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H, H.T, rtol=1e-13)


def test_numpy_is_unchanged_outside_a_trace():
    x = np.linspace(-2, 2, 7)
    assert np.array_equal(huber(x), np.array([_huber(t) for t in x]))
    assert np.vectorize(lambda t: t > 0)(x).dtype == bool
    assert np.apply_along_axis(np.sum, 1, x[:6].reshape(2, 3)).shape == (2,)
    assert np.vectorize.__call__.__hybridad_original__ is not None


def test_refusals_name_the_problem():
    x = rand((3,), seed=9)
    with pytest.raises(ValueError, match="signature"):
        ha.gradient(lambda x: np.sum(np.vectorize(np.sum, signature="(n->()")(x)), x)
    with pytest.raises(ValueError, match="zero elements"):
        ha.gradient(lambda x: np.sum(smooth(x[:0])) + np.sum(x), x)
    with pytest.raises(ValueError, match="core dimension"):
        ha.gradient(lambda x: np.sum(rowdot(x, W)), x)
    with pytest.raises(np.exceptions.AxisError):
        ha.gradient(lambda x: np.sum(np.apply_along_axis(np.sum, 2, x.reshape(1, 3))), x)


@pytest.mark.parametrize("name", ["batched", "branch_kernel", "aaa_scalar"])
def test_float32(name):
    """float32 elements are computed in float32, each path: the float64
    plan's gradient to float32's rounding, and a float32 result."""
    x = rand((4, 5), seed=11)
    x[np.abs(x) < 0.05] = 0.3
    got = ha.gradient(MAPS[name], x.astype(np.float32)).gradient
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ha.gradient(MAPS[name], x).gradient, rtol=2e-4, atol=2e-5)
