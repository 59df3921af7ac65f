"""Element writes into a block of slices of step 1 (``lap[1:-1] = ...``,
``u[1:-1, 1:-1] = ...``, ``a[..., -3:] = ...``, ``u[1:-1] += ...`` through
the view, ``U[k + 1, 1:-1] = ...`` into a row): traced as the block and the
parts of the array around it concatenated, one sliced axis at a time, not as
a gather of every element through an index array -- a 1-D stencil's gradient
24.5 -> 12.2 us at n = 10^4, a 2-D one's 323 -> 176 us at 300 x 300.  Values
are numpy's own (the function run on arrays), gradients agree with central
differences and with the numpy backend, on every kind of block; other
indices keep the gather."""

import numpy as np
import pytest

import hybridad as ha
from conftest import directional_difference
from hybridad.testing import count_allocations

RNG = np.random.default_rng(11)
U1 = RNG.standard_normal(40)
U2 = RNG.standard_normal((9, 12))
U3 = RNG.standard_normal((3, 5, 6))


def lap1(u):
    lap = np.zeros_like(u)
    lap[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
    return np.sum((u + 0.2 * lap - 0.01 * u ** 3) ** 2)


def lap2(u):
    lap = np.zeros_like(u)
    lap[1:-1, 1:-1] = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
    return np.sum(np.sin(u + 0.1 * lap))


def several(u):
    """Writes into a copy of the argument: a column band, a corner block, a
    scalar into a prefix, a broadcast row, an Ellipsis; the target read after."""
    out = u.copy()
    out[:, 2:5] = np.tanh(u[:, :3])
    out[1:, 1:] = 0.5 * (out[1:, 1:] + u[:-1, :-1])
    out[:2] = 0.25
    out[4:7, :] = np.exp(-u[0] ** 2)  # a row broadcast over the block
    out[..., -3:] = out[..., :3] * u[..., 3:6]
    return np.sum(out ** 2 * np.arange(u.shape[1])) + np.sum(out[3] * u[5])


def three_d(u):
    a = np.ones_like(u)
    a[:, 1:4, 2:] = u[:, :3, :4] ** 2
    a[1:, ...] = a[1:, ...] * np.cos(u[:-1])
    return np.sum(a * u)


def integer_value(u):
    a = np.zeros_like(u)
    a[2:-3] = 3  # an int into a float array: cast as numpy does
    a[5:9] = u[5:9] * u[:4]
    return np.sum(a * np.sin(u))


def in_a_loop(u):
    """A Python loop of writes into a block: rolled by the plan."""
    for _ in range(6):
        lap = np.zeros_like(u)
        lap[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
        u = u + 0.1 * lap - 0.01 * u ** 3
    return np.sum(u ** 2)


def augmented(u):
    """numpy's ``u[1:-1] += ...`` (a write through the view ``u[1:-1]``) and a
    view's in-place multiply: the same concatenation."""
    u = u.copy()
    u[1:-1] += 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
    w = u[3:-4]
    w *= np.cos(w)
    return np.sum(u ** 2)


def augmented_2d(u):
    v = u.copy()
    v[1:-1, 1:-1] -= 0.1 * (v[2:, 1:-1] + v[:-2, 1:-1] - 2 * v[1:-1, 1:-1])
    return np.sum(np.tanh(v) * u)


def recorded_rows(u):
    """A time-stepping record: each step's interior written into a row of an
    array made before the loop (``U[k + 1, 1:-1] = ...``), rolled."""
    T = 8
    U = np.zeros((T + 1, u.size))
    U[0] = u
    for k in range(T):
        U[k + 1, 1:-1] = U[k, 1:-1] + 0.2 * (U[k, 2:] - 2 * U[k, 1:-1] + U[k, :-2])
    return np.sum(U ** 2) / T


CASES = [(lap1, U1), (lap2, U2), (several, U2), (three_d, U3), (integer_value, U1),
         (in_a_loop, U1), (augmented, U1), (augmented_2d, U2), (recorded_rows, U1)]


def _fd(f, x):
    """Central differences along three random directions."""
    return [directional_difference(f, [x], 0, seed=k) for k in range(3)]


@pytest.mark.parametrize("f, x", CASES, ids=[f.__name__ for f, _ in CASES])
def test_block_writes_match_numpy_and_differences(f, x):
    plan = ha.compile(f, x)
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    assert res.value == pytest.approx(f(x), rel=1e-12)  # (numpy's own run of f)
    for d, slope in _fd(f, x):
        assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-8)
    ref = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-13)
    ops = {n.op for n in plan.graph.nodes}
    assert "gather" not in ops and "scatter_flat" not in ops, ops
    with count_allocations() as counts:
        plan.gradient(x, out=res)
    assert counts.allocations == 0, counts


def test_other_indices_keep_the_gather():
    """A strided slice, a whole-array write and a reversed one are not a
    block of step 1: the gather, numpy's values all the same."""
    def f(u):
        a = np.zeros_like(u)
        a[::2] = u[::2] ** 2
        b = np.ones_like(u)
        b[:] = np.sin(u)
        c = np.zeros_like(u)
        c[5:1:-1] = u[:4]
        return np.sum(a * b + c)
    plan = ha.compile(f, U1)
    res = plan.gradient(U1)
    assert res.value == pytest.approx(f(U1), rel=1e-12)
    for d, slope in _fd(f, U1):
        assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=1e-8)
    assert "gather" in {n.op for n in plan.graph.nodes}


def test_a_block_write_of_the_wrong_shape_raises_as_numpy():
    def f(u):
        a = np.zeros_like(u)
        a[1:4] = u[:5]
        return np.sum(a)
    with pytest.raises(ValueError):
        f(U1)  # (numpy's own error)
    with pytest.raises(ValueError):
        ha.compile(f, U1)
