"""One factorization for the solves with one matrix
(hybridad/transforms/factors.py): the forward solve, the reverse sweep's
solve with the transpose and a Hessian's tangent solves share the factors
``solve_lu`` keeps -- or, for a matrix the function also Cholesky-factors,
that factor (``cho_solve``, where the matrix is exactly symmetric; numpy's
gesv where it is not); every derivative is the same as with a
factorization per solve (to rounding) and matches finite differences."""

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.testing import assert_no_alloc, numerical_gradient
from hybridad.transforms import pipeline


def gp(theta, X, y):
    """A Gaussian process's negative log-likelihood: cholesky and a solve of one matrix."""
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = np.exp(theta[0]) * np.exp(-0.5 * np.exp(-2 * theta[1]) * d2) + \
        np.exp(theta[2]) * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    return 0.5 * (y @ np.linalg.solve(K, y)) + np.sum(np.log(np.diag(L)))


def two_solves(a, b):
    """Two right-hand sides solved with one matrix (and with its transpose)."""
    A = a.reshape(4, 4) + 4 * np.eye(4)
    return np.sum(np.linalg.solve(A, b) ** 2) + np.sum(np.sin(np.linalg.solve(A.T, b ** 2)))


def stacked(a, b):
    A = a.reshape(2, 3, 3) + 3 * np.eye(3)
    return np.sum(np.linalg.solve(A, b.reshape(2, 3, 1)) ** 3)


def _ops(plan, *names):
    return [n.op for n in plan.graph.nodes if n.op in names]


def _without_the_pass(monkeypatch):
    for table in (pipeline.LOWERING, pipeline.STAGED_LOWERING):
        for backend, passes in table.items():
            monkeypatch.setitem(table, backend,
                                tuple(p for p in passes if p != "share_factorizations"))


CASES = {
    "gp": (gp, lambda: (np.array([0.1, -0.2, np.log(0.5)]), rand((7, 3), seed=1),
                        rand((7,), seed=2)), (0, 1, 2)),
    "two_solves": (two_solves, lambda: (rand((16,), seed=3) / 4, rand((4,), seed=4)), (0, 1)),
    "stacked": (stacked, lambda: (rand((18,), seed=5) / 3, rand((6,), seed=6)), (0, 1)),
}


#: the factorization each case's solves share: an LU (solve_lu), or the matrix's
#: Cholesky factor (the GP's: every solve a cho_solve, no LU at all)
SHARED = {"gp": ("cho_solve", "cho_solve"), "two_solves": ("solve_lu",),
          "stacked": ("solve_lu",)}


def _shared(plan):
    return tuple(_ops(plan, "solve_lu", "cho_solve"))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_one_factorization_per_matrix(name, backend, monkeypatch):
    f, make, argnums = CASES[name]
    args = make()
    plan = ha.compile(f, *args, argnums=argnums, backend=backend)
    assert _ops(plan, "solve") == [] and _shared(plan) == SHARED[name]
    got = plan.gradient(*args)
    for k, g in zip(argnums, got.gradient, strict=True):
        def fk(v, k=k):
            return f(*args[:k], v, *args[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, args[k]), rtol=1e-6, atol=1e-8)
    _without_the_pass(monkeypatch)
    apart = ha.compile(f, *args, argnums=argnums, backend=backend)
    assert _shared(apart) == () and len(_ops(apart, "solve")) >= 2
    want = apart.gradient(*args)
    if name != "stacked":  # (a solve with A^T from A's factors, potrs: rounding apart)
        np.testing.assert_allclose(got.value, want.value, rtol=1e-14)
    else:  # (the forward solve: gesv's getrf and getrs, bit for bit)
        assert got.value == want.value
    for g, w in zip(got.gradient, want.gradient, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_hessians_share_the_factorization_too(backend):
    args = CASES["two_solves"][1]()
    res = ha.hessian(two_solves, *args, backend=backend)
    plan = ha.compile(two_solves, *args, hessian=True, backend=backend)
    assert _ops(plan, "solve") == [] and len(_ops(plan, "solve_lu", "lu_factors")) == 1
    np.testing.assert_allclose(res.hessian, _hessian_by_differences(two_solves, args),
                               rtol=1e-5, atol=1e-7)


def _hessian_by_differences(f, args, step=1e-6):
    """The Hessian of ``f`` in its first argument: central differences of the
    numpy backend's gradient."""
    cols = []
    for k in range(args[0].size):
        e = np.zeros_like(args[0])
        e[k] = step
        up = ha.gradient(f, args[0] + e, *args[1:], backend="numpy").gradient
        down = ha.gradient(f, args[0] - e, *args[1:], backend="numpy").gradient
        cols.append((up - down) / (2 * step))
    return np.array(cols).T


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_singular_matrix_raises_as_solve_does(backend):
    def f(a, b):
        A = a.reshape(2, 2)
        return np.sum(np.linalg.solve(A, b) ** 2)

    plan = ha.compile(f, np.array([2.0, 1.0, 1.0, 3.0]), np.ones(2), argnums=(0, 1),
                      backend=backend)
    assert _ops(plan, "solve_lu") == ["solve_lu"]
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        plan.gradient(np.array([1.0, 2.0, 2.0, 4.0]), np.ones(2))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_allocation_per_call_in_either_precision(name, backend, dtype):
    # (float32: the LAPACK primitives compute in float64, as numpy's linalg does)
    f, make, argnums = CASES[name]
    args = tuple(a.astype(dtype) for a in make())
    plan = ha.compile(f, *args, argnums=argnums, backend=backend)
    assert _ops(plan, "solve") == [] and _shared(plan) == SHARED[name]
    res = plan.new_result()
    assert_no_alloc(plan.gradient, *args, out=res)
    want = ha.gradient(f, *[a.astype(np.float64) for a in args], argnums=argnums,
                       backend="numpy")
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for g, w in zip(res.gradient, want.gradient, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())


def test_tangent_solves_factor_the_matrix_alone():
    # a Hessian of a function whose matrix depends on x: the tangent sweeps' solves
    # (one per seed) use factors that depend on no seed
    def f(x):
        A = np.outer(x, x) + 3 * np.eye(x.size)
        return np.sum(np.linalg.solve(A, np.ones(x.size)) ** 2)

    x = rand((4,), seed=11)
    plan = ha.compile(f, x, hessian=True, backend="numpy")
    assert _ops(plan, "solve") == []
    got = plan.hessian(x).hessian
    step = 1e-6
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = step
        cols.append((ha.gradient(f, x + e, backend="numpy").gradient -
                     ha.gradient(f, x - e, backend="numpy").gradient) / (2 * step))
    np.testing.assert_allclose(got, np.array(cols).T, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_first_solve_without_right_hand_sides_still_factors(backend):
    # gesv returns before factoring when it has no right-hand side: the factors the
    # later solves read are made anyway
    def f(a, b):
        A = a.reshape(3, 3) + 3 * np.eye(3)
        return np.sum(np.linalg.solve(A, np.zeros((3, 0)))) + np.sum(np.linalg.solve(A, b) ** 2)

    args = (rand((9,), seed=12) / 3, rand((3,), seed=13))
    plan = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    got = plan.gradient(*args)
    for k, g in enumerate(got.gradient):
        def fk(v, k=k):
            return f(*args[:k], v, *args[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, args[k]), rtol=1e-6, atol=1e-8)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        plan.gradient(np.array([-3.0, 0, 0, 0, 1, 0, 0, 0, 1]), args[1])


def gp_parts(theta, X, y, upper=False, tilt=0.0):
    """The GP's kernel matrix (``tilt``: that much of a strictly upper part
    added -- not symmetric -- which cholesky ignores and solve reads), its
    Cholesky factor after the solve or before it."""
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = np.exp(theta[0]) * np.exp(-0.5 * d2) + np.exp(theta[1]) * np.eye(X.shape[0])
    K = K + tilt * np.triu(d2, 1)
    F = np.linalg.cholesky(K, upper=upper)
    return 0.5 * (y @ np.linalg.solve(K, y)) + np.sum(np.log(np.diag(F)))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("upper, tilt", [(False, 0.0), (True, 0.0), (False, 0.05)],
                         ids=["lower", "upper", "not symmetric"])
def test_solves_with_a_cholesky_factored_matrix(backend, upper, tilt, monkeypatch):
    # the forward and the reverse sweep's solves by the factor where the matrix
    # is exactly symmetric; where it is not (cholesky reads one triangle, the
    # factor is another matrix's), numpy's solve itself: the value bit for bit
    def f(theta, X, y):
        return gp_parts(theta, X, y, upper, tilt)

    args = (np.array([0.1, np.log(0.5)]), rand((6, 2), seed=21), rand((6,), seed=22))
    plan = ha.compile(f, *args, argnums=(0, 1, 2), backend=backend)
    assert _ops(plan, "solve", "solve_lu", "lu_solve") == []
    assert _ops(plan, "cho_solve", "symmetric") == ["symmetric", "cho_solve", "cho_solve"]
    got = plan.gradient(*args)
    for k, g in enumerate(got.gradient):
        def fk(v, k=k):
            return f(*args[:k], v, *args[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, args[k]), rtol=1e-6, atol=1e-8)
    assert_no_alloc(plan.gradient, *args, out=plan.new_result())
    _without_the_pass(monkeypatch)
    want = ha.compile(f, *args, argnums=(0, 1, 2), backend=backend).gradient(*args)
    if tilt:
        assert got.value == want.value
    else:
        np.testing.assert_allclose(got.value, want.value, rtol=1e-14)
    for g, w in zip(got.gradient, want.gradient, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_stack_decides_per_matrix(backend):
    # two kernel matrices, the second not symmetric: the first solved by its
    # factor, the second by gesv, in one call
    def f(s, X, y):
        d2 = np.sum((X[:, :, None, :] - X[:, None, :, :]) ** 2, axis=-1)
        K = np.exp(-0.5 * d2) + np.exp(s)[:, None, None] * np.eye(5)
        K = K + np.array([0.0, 0.03])[:, None, None] * np.triu(d2[1], 1)
        L = np.linalg.cholesky(K)
        return np.sum(np.linalg.solve(K, y[:, :, None]) ** 2) + np.sum(L ** 3)

    args = (np.array([0.2, -0.1]), rand((2, 5, 2), seed=23), rand((2, 5), seed=24))
    plan = ha.compile(f, *args, argnums=(0, 1, 2), backend=backend)
    assert "cho_solve" in _ops(plan, "cho_solve")
    got = plan.gradient(*args)
    ref = ha.gradient(f, *args, argnums=(0, 1, 2), backend="numpy")  # (the same pass: FD too)
    for k, g in enumerate(got.gradient):
        def fk(v, k=k):
            return f(*args[:k], v, *args[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, args[k]), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(g, ref.gradient[k], rtol=1e-12, atol=1e-13)


def test_a_solve_before_the_factorization_keeps_gesv():
    # the factor is made after the forward solve: that one stays numpy's gesv;
    # the reverse sweep's solve, after it, uses the factor
    def f(theta, X, y):
        d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        K = np.exp(-0.5 * d2) + np.exp(theta[0]) * np.eye(X.shape[0])
        x = np.linalg.solve(K, y)
        return np.sum(x ** 2) + np.sum(np.log(np.diag(np.linalg.cholesky(K))))

    args = (np.array([0.3]), rand((5, 2), seed=25), rand((5,), seed=26))
    plan = ha.compile(f, *args, argnums=(0, 1, 2), backend="numba")
    assert _ops(plan, "solve", "solve_lu", "cho_solve") == ["solve", "cho_solve"]
    ref = ha.gradient(f, *args, argnums=(0, 1, 2), backend="numpy")
    for g, r in zip(plan.gradient(*args).gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_the_hessian_of_a_gp_solves_by_its_factor(backend):
    args = CASES["gp"][1]()

    def f(theta):
        return gp(theta, *args[1:])

    plan = ha.compile(f, args[0], hessian=True, backend=backend)
    assert _ops(plan, "solve", "solve_lu", "lu_solve", "lu_factors") == []
    assert len(_ops(plan, "cho_solve")) >= 2
    got = plan.hessian(args[0]).hessian
    step = 1e-6
    cols = []
    for k in range(3):
        e = np.zeros(3)
        e[k] = step
        cols.append((ha.gradient(f, args[0] + e, backend="numpy").gradient -
                     ha.gradient(f, args[0] - e, backend="numpy").gradient) / (2 * step))
    np.testing.assert_allclose(got, np.array(cols).T, rtol=1e-5, atol=1e-7)


# -- a loop's solves with one of its constants: factored once, before it ------------------
def implicit_euler(k, u):
    n = u.size
    M = np.eye(n) + 0.05 * (np.diag(2 * k) - np.diag(k[1:], 1) - np.diag(k[1:], -1))
    for _ in range(30):  # (rolled: the body solves with the loop's constant M)
        u = np.linalg.solve(M, u)
    return np.sum(u ** 2) + np.sum(k * u)


def explicit_loop(k, u):
    M = np.eye(u.size) + 0.1 * np.outer(k, k)
    return np.sum(ha.fori_loop(0, 12, lambda i, v: np.linalg.solve(M.T, np.sin(v)), u) ** 2)


def moving_matrix(k, u):
    """The matrix a carry (each iteration's own): solved by gesv each time."""
    def step(i, s):
        A, v = s
        return A + 0.1 * np.outer(v, v), np.linalg.solve(A, v)
    A, v = ha.fori_loop(0, 6, step, (np.eye(u.size) * 3 + np.diag(k), u))
    return np.sum(v ** 2)


def _loop_solves(plan):
    return [m.op for n in plan.graph.nodes if n.op == "loop"
            for m in n.attrs["body"].graph.nodes if m.op in ("solve", "lu_solve")]


def _loop_args():
    return 1.0 + 0.5 * np.sin(np.linspace(0.0, 3.0, 8)), np.sin(np.linspace(0.1, 3.0, 8))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("f", [implicit_euler, explicit_loop], ids=["rolled", "fori_loop"])
def test_a_loop_factors_its_constant_matrix_once(f, backend, monkeypatch):
    args = _loop_args()
    plan = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    assert set(_loop_solves(plan)) == {"lu_solve"} and len(_ops(plan, "lu_factors")) == 1
    got = plan.gradient(*args)
    for k, g in enumerate(got.gradient):
        def fk(v, k=k):
            return f(*args[:k], v, *args[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, args[k]), rtol=1e-6, atol=1e-8)
    _without_the_pass(monkeypatch)
    apart = ha.compile(f, *args, argnums=(0, 1), backend=backend)
    assert "solve" in _loop_solves(apart) and "lu_solve" not in _loop_solves(apart)
    want = apart.gradient(*args)
    if f is implicit_euler:  # (getrf then getrs: gesv's own steps, bit for bit)
        assert got.value == want.value
    else:  # (a solve with M.T from M's factors: rounding apart from gesv on M.T)
        np.testing.assert_allclose(got.value, want.value, rtol=1e-14)
    for g, w in zip(got.gradient, want.gradient, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_a_matrix_that_changes_in_the_loop_keeps_its_solves():
    args = _loop_args()
    plan = ha.compile(moving_matrix, *args)
    assert "lu_solve" not in _loop_solves(plan) and "solve" in _loop_solves(plan)
    np.testing.assert_allclose(plan.gradient(*args).gradient,
                               numerical_gradient(lambda k: moving_matrix(k, args[1]), args[0]),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_the_hessian_through_a_factored_loop(backend):
    args = _loop_args()
    res = ha.hessian(implicit_euler, *args, backend=backend)
    plan = ha.compile(implicit_euler, *args, hessian=True, backend=backend)
    assert "solve" not in _loop_solves(plan)
    np.testing.assert_allclose(res.hessian, _hessian_by_differences(implicit_euler, args),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_singular_loop_matrix_raises_as_solve_does(backend):
    k, u = _loop_args()
    plan = ha.compile(implicit_euler, k, u, backend=backend)
    singular = np.zeros_like(k)
    singular[0] = -10.0  # (M's row 0: 1 + 0.05 * 2 * (-10) on the diagonal, k[1] = 0 beside)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        implicit_euler(singular, u)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        plan.gradient(singular, u)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_factored_loop_allocates_nothing(backend, dtype):
    args = tuple(a.astype(dtype) for a in _loop_args())
    plan = ha.compile(implicit_euler, *args, argnums=(0, 1), backend=backend)
    assert set(_loop_solves(plan)) == {"lu_solve"}
    assert_no_alloc(plan.gradient, *args, out=plan.new_result())


def solve_in_a_loop(x, A):
    """A loop's body solving with an argument of ``f``: its factors become a
    new input of the body, numbered as the body's nodes are (it had taken the
    plan graph's next id, which a node of the body already had: the body's
    replay read its factors where it meant a subtraction and failed to trace)."""
    return np.sum(ha.fori_loop(0, 3, lambda j, y: 0.5 * y + 0.1 * np.tanh(np.linalg.solve(A, y)),
                               x) ** 2)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_loop_solving_with_an_argument_keeps_its_bodys_numbering(backend):
    rng = np.random.default_rng(3)
    x, A = rng.standard_normal(4), rng.standard_normal((4, 4)) + 4 * np.eye(4)
    plan = ha.compile(solve_in_a_loop, x, A, argnums=(0, 1), backend=backend)
    assert set(_loop_solves(plan)) == {"lu_solve"}
    for n in plan.graph.nodes:
        if n.op == "loop":
            g = n.attrs["body"].graph
            ids = [m.id for m in g.nodes]
            assert len(ids) == len(set(ids)), "a loop body's node ids must be unique"
    got = plan.gradient(x, A)
    for k, g in enumerate(got.gradient):
        def fk(v, k=k):
            return solve_in_a_loop(*(x, A)[:k], v, *(x, A)[k + 1:])
        np.testing.assert_allclose(g, numerical_gradient(fk, (x, A)[k]), rtol=1e-6, atol=1e-9)


def scaled_solves(x, A, nested):
    """A body solving with a matrix it makes (singular where ``x[0]`` is 0),
    in one loop or in a loop inside another's body."""
    def inner(y):
        return ha.fori_loop(0, 3, lambda j, y: 0.5 * y +
                            0.1 * np.tanh(np.linalg.solve(A * y[0], y)), y)
    if not nested:
        return np.sum(inner(x) ** 2)
    return np.sum(ha.fori_loop(0, 2, lambda i, y: inner(y) * 0.9, x) ** 2)


@pytest.mark.parametrize("nested", [False, True], ids=["loop", "nested"])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_body_failing_in_a_loop_raises_its_own_error(backend, nested):
    """A body that fails where the compiled driver (or the outer body's code)
    calls it raises its own exception with its message, as numpy would, not
    a RuntimeError of unknown status; the plan runs on afterwards."""
    rng = np.random.default_rng(4)
    x, A = rng.standard_normal(4), rng.standard_normal((4, 4)) + 4 * np.eye(4)
    plan = ha.compile(lambda x, A: scaled_solves(x, A, nested), x, A, backend=backend)
    want = plan.gradient(x, A).gradient.copy()
    bad = x.copy()
    bad[0] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        scaled_solves(bad, A, nested)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        plan.gradient(bad, A)
    np.testing.assert_array_equal(plan.gradient(x, A).gradient, want)
