"""Loops over the elements of arrays, as code ported from C or Fortran writes
them: ``K[i, j] = k(x[i], x[j])`` in two nested loops, ``y[j] = f(x[j])``,
scalars appended to a list, a band of a matrix assembled row by row.

The trace unrolls them into one scalar step per element.  Element writes are
chained per row (the row's own slab writes), a row read from its writes; a
run of steps that read nothing of one another (a *map*) becomes one batched
step over the stacked inputs -- numpy's vectorized form of the loop -- so the
plan does not grow with the number of elements.  Every result is compared
with the plan that keeps the loops as traced (``HYBRIDAD_ROLL=0``, which
neither forwards rows nor rolls) and with central differences, on both CPU
backends.
"""

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import count_allocations, numerical_gradient

N = 9
X0 = np.random.default_rng(5).uniform(0.2, 1.0, N)


def kernel_matrix(x):
    n = x.shape[0]
    K = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            K[i, j] = np.exp(-0.5 * (x[i] - x[j]) ** 2)
    return np.linalg.slogdet(K + np.eye(n))[1] + np.sum(np.linalg.solve(K + np.eye(n), x))


def column_major(x):
    n = x.shape[0]
    A = np.zeros((n, n))
    for j in range(n):
        for i in range(n):
            A[i, j] = np.sin(x[i] * x[j]) + (i == j)
    return np.sum(np.linalg.solve(A + n * np.eye(n), x))


def band(x):
    n = x.shape[0]
    A = np.zeros((n, n))
    for i in range(n):
        A[i, i] = 2.0 + x[i] ** 2
        if i > 0:
            A[i, i - 1] = -x[i]
        if i < n - 1:
            A[i, i + 1] = -1.0
    return np.sum(np.linalg.solve(A, np.ones(n)))


def elementwise(x):
    y = np.empty_like(x)
    for j in range(x.shape[0]):
        y[j] = np.log1p(x[j] ** 2) * x[(j + 1) % x.shape[0]]
    return np.sum(y * x)


def appended(x):
    ys = []
    for j in range(x.shape[0]):
        ys.append(np.tanh(x[j]) * x[-1 - j])
    return np.sum(np.array(ys) ** 2)


def two_arrays(x):
    u, v = np.zeros_like(x), np.zeros_like(x)
    for i in range(x.shape[0]):
        u[i] = np.exp(-x[i])
        v[i] = u[i] * x[i] ** 2
    return np.sum(u * v) + np.sum(v)


def three_axes(x):
    T = np.zeros((3, x.shape[0], 4))
    for a in range(3):
        for b in range(x.shape[0]):
            for c in range(4):
                T[a, b, c] = x[b] ** (a + 1) * (c + 1)
    return np.sum(np.tanh(T))


def time_and_space(x):
    """A time loop carrying a state, each step written element by element."""
    steps, n = 12, x.shape[0]
    u = np.zeros((steps, n))
    for t in range(steps):
        for i in range(n):
            u[t, i] = np.sin(x[i]) * (t + 1) * 0.01
        x = x + u[t]
    return np.sum(u ** 2) + np.sum(x ** 3)


def pair_distances(x):
    pos = x.reshape(-1, 3)
    m = pos.shape[0]
    D = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            d = pos[i] - pos[j]
            D[i, j] = np.sqrt(d @ d + 0.1)
    return np.sum(np.exp(-D))


def sweeps(x):
    """Gauss-Seidel sweeps: each element reads the one just written (carried)."""
    y = x.copy()
    for _ in range(4):
        for i in range(1, y.shape[0]):
            y[i] = 0.5 * (y[i] + np.tanh(y[i - 1]))
    return np.sum(y ** 2)


def summed(x):
    """A running sum over the elements (``s = s + ...``): the addends batched,
    added in the loop's order (a cumulative sum)."""
    s = 0.0
    for j in range(x.shape[0]):
        s = s + np.exp(-0.5 * (x[0] - x[j]) ** 2) * x[j]
    return s * s


def summed_vectors(x):
    """A vector accumulator, subtracted from, and one updated in place."""
    acc, tot = np.zeros(3), np.zeros(())
    for j in range(x.shape[0]):
        acc = acc - np.sin(x[j] * np.arange(1.0, 4.0))
        tot += x[j] ** 3
    return np.sum(acc ** 2) + tot


def running_values(x):
    """The running sum read at every step: a loop, not a sum after it."""
    s, out = 0.0, []
    for j in range(x.shape[0]):
        s = s + np.tanh(x[j])
        out.append(s)
    return np.sum(np.stack(out) ** 2)


LOOPS = [kernel_matrix, column_major, band, elementwise, appended, two_arrays, three_axes,
         time_and_space, pair_distances, sweeps, summed, summed_vectors, running_values]


def _plans(f, x, backend, monkeypatch, **kw):
    monkeypatch.setenv("HYBRIDAD_ROLL", "1")
    plan = ha.compile(f, x, backend=backend, **kw)
    monkeypatch.setenv("HYBRIDAD_ROLL", "0")
    traced = ha.compile(f, x, backend="numpy", **kw)
    monkeypatch.delenv("HYBRIDAD_ROLL")
    return plan, traced


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", LOOPS, ids=lambda f: f.__name__)
def test_element_loops_match_the_loops_as_traced_and_fd(f, backend, monkeypatch):
    plan, traced = _plans(f, X0, backend, monkeypatch)
    got, want = ha.GradientResult(X0), traced.gradient(X0)
    plan.gradient(X0, out=got)
    assert float(got.value) == pytest.approx(float(f(X0.copy())), rel=1e-13)
    assert float(got.value) == pytest.approx(float(want.value), rel=1e-13)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got.gradient, numerical_gradient(f, X0), rtol=1e-6, atol=1e-8)
    again = ha.GradientResult(X0)
    plan.gradient(X0, out=again)
    assert np.array_equal(again.gradient, got.gradient)  # (the same bits, call after call)


@pytest.mark.parametrize("f", [kernel_matrix, elementwise, pair_distances, summed,
                               summed_vectors], ids=lambda f: f.__name__)
def test_maps_are_vectorized_and_do_not_grow_with_the_elements(f):
    """The plan of a map over n elements (n^2 for the matrices) is one batched
    step: its graph is the same size at n = 8 and n = 24."""
    sizes = []
    for n in (8, 24):
        x = np.random.default_rng(n).uniform(0.2, 1.0, 3 * n if f is pair_distances else n)
        plan = ha.compile(f, x, backend="numpy")
        np.testing.assert_allclose(plan.gradient(x).gradient, numerical_gradient(f, x),
                                   rtol=1e-6, atol=1e-8)
        sizes.append(len(plan.graph.nodes))
    assert sizes[1] <= sizes[0] + 8, sizes


def test_a_band_assembled_row_by_row_rolls_with_fixed_shapes():
    """Rows of a tridiagonal matrix write three elements at moving positions:
    each row's value is one gather of the row and its elements (shapes that do
    not move with the row), so the rows batch too."""
    x = np.random.default_rng(3).uniform(0.2, 1.0, 40)
    plan = ha.compile(band, x, backend="numpy")
    assert len(plan.graph.nodes) < 150, len(plan.graph.nodes)
    np.testing.assert_allclose(plan.gradient(x).gradient, numerical_gradient(band, x),
                               rtol=1e-6, atol=1e-8)


def test_hessian_of_an_element_loop(monkeypatch):
    plan, traced = _plans(kernel_matrix, X0, "numba", monkeypatch, hessian=True)
    got = ha.HessianResult(X0)
    plan.hessian(X0, out=got)
    np.testing.assert_allclose(got.hessian, traced.hessian(X0).hessian, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("f", [kernel_matrix, band, summed_vectors, time_and_space],
                         ids=lambda f: f.__name__)
def test_numba_plan_of_an_element_loop_allocates_nothing(f):
    plan = ha.compile(f, X0, backend="numba")
    res = ha.GradientResult(X0)
    plan.gradient(X0, out=res)
    with count_allocations() as counts:
        for _ in range(5):
            plan.gradient(X0, out=res)
    assert counts.allocations == 0, counts


def test_a_time_loop_written_element_by_element_rolls_around_one_batched_step():
    """The time loop rolls with the state as its one carry (started where the
    step's state is one array, not its elements read one by one), its step
    -- a map over the elements -- batched inside the loop's body, and the
    per-step constant ``t + 1`` one input however many elements read it."""
    x = np.random.default_rng(2).uniform(0.2, 1.0, 60)
    plan = ha.compile(time_and_space, x, backend="numpy")
    loops = [n.attrs["body"] for n in plan.graph.nodes if n.op == "loop"]
    assert loops
    forward = loops[0]
    assert forward.n_carry == 1 and forward.graph.outputs[0].shape == (60,)
    assert forward.n_xs <= 1 and len(forward.graph.nodes) < 40, len(forward.graph.nodes)
    np.testing.assert_allclose(plan.gradient(x).gradient,
                               numerical_gradient(time_and_space, x), rtol=1e-6, atol=1e-8)


def test_where_a_run_starts_is_its_definition():
    """``_rotation`` (difference arrays over the reads) answers what its
    definition answers read by read: started at ``r``, a read from iteration
    ``k`` at offset ``c`` by iteration ``k + lag`` at offset ``o`` is
    ``lag - [o < r] + [c < r]`` iterations back -- 0 within one, 1 a carry,
    2 no start -- and the start carrying the fewest bytes wins."""
    from hybridad.transforms.rolling_maps import _rotation

    def definition(reads, p, nbytes):
        def carried(r):
            out = set()
            for o, c, lag in reads:
                back = lag - (o < r) + (c < r)
                if back == 2:
                    return None
                if back == 1:
                    out.add(c)
            return sum(nbytes[c] for c in out)
        costs = [carried(r) for r in range(p)]
        best = min(range(p), key=lambda r: (costs[r] is None, costs[r] or 0, r))
        return best if costs[best] is not None and costs[best] < costs[0] else 0

    rng = np.random.default_rng(11)
    for _ in range(3000):
        p = int(rng.integers(1, 10))
        nbytes = [int(b) for b in rng.choice([8, 16, 80, 800], p)]
        reads = []
        for o in range(p):
            for _ in range(int(rng.integers(0, 3))):
                if o and rng.random() < 0.5:
                    reads.append((o, int(rng.integers(o)), 0))
                else:
                    reads.append((o, int(rng.integers(p)), 1))
        assert _rotation(reads, p, nbytes) == definition(reads, p, nbytes), (reads, p, nbytes)


@pytest.mark.parametrize("f", [summed, summed_vectors], ids=lambda f: f.__name__)
def test_running_sums_add_in_the_loops_order(f, monkeypatch):
    """A running sum batched is the cumulative sum of its start and addends:
    the loop's own additions, in its order -- the value bit for bit numpy's
    and the loop-as-traced plan's on the numpy backend (numba's fused
    kernels may contract a multiply and an add after it)."""
    x = np.random.default_rng(8).uniform(0.2, 1.0, 40)
    plan, traced = _plans(f, x, "numpy", monkeypatch)
    got = plan.gradient(x)
    assert float(got.value) == float(f(x.copy())) == float(traced.gradient(x).value)
    compiled = ha.compile(f, x, backend="numba").gradient(x)
    assert float(compiled.value) == pytest.approx(float(got.value), rel=1e-15)
    np.testing.assert_allclose(compiled.gradient, got.gradient, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("f", [kernel_matrix, elementwise, band, summed, summed_vectors,
                               time_and_space], ids=lambda f: f.__name__)
def test_element_loops_in_float32(f, backend, monkeypatch):
    """float32 arguments: the batched and summed steps keep the dtypes the
    loops as traced have (numpy's promotions), to float32 rounding."""
    x = X0.astype(np.float32)
    plan, traced = _plans(f, x, backend, monkeypatch)
    got, want = plan.gradient(x), traced.gradient(x)
    assert got.gradient.dtype == want.gradient.dtype == np.float32
    assert np.asarray(got.value).dtype == np.asarray(want.value).dtype
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=2e-5,
                               atol=2e-5 * np.abs(want.gradient).max())
