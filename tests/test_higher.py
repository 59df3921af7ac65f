"""Jacobians and Hessians (hybridad.plans.hessian, hybridad.plans.jacobian):
every coverage case's Hessian against central differences of its gradient,
Jacobians in forward and reverse mode against central differences and each
other, analytic Hessians on both backends, many Hessian-vector products at
one point, zero allocations per repeated call, and the error guarantees of
the core."""

import numpy as np
import pytest
from conftest import rand
from scipy.optimize import rosen_hess
from test_coverage import CASES
from test_hvp import ANALYTIC, rosen_np

import hybridad as ha
from hybridad.testing import count_allocations

X20 = rand((4, 5), seed=3)
EPS = 1e-5


def fd_hessian(f, x, backend="numpy"):
    """Columns of central differences of the gradient."""
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = EPS
        e = e.reshape(x.shape)
        gp = ha.gradient(f, x + e, backend=backend).gradient
        gm = ha.gradient(f, x - e, backend=backend).gradient
        cols.append(((gp - gm) / (2 * EPS)).reshape(-1))
    return np.array(cols).T


def fd_jacobian(f, x):
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = EPS
        e = e.reshape(x.shape)
        cols.append(((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * EPS)).reshape(-1))
    return np.array(cols).T


def assert_fd(got, fd, rtol=2e-6):
    np.testing.assert_allclose(got, fd, rtol=rtol, atol=rtol * max(1.0, np.abs(fd).max()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_coverage_case_hessian_against_finite_differences(name):
    f = CASES[name]
    plan = ha.compile(f, X20, backend="numpy", hessian=True, chunk=7)  # chunks 7, 7, 6
    res = plan.hessian(X20)
    g = ha.gradient(f, X20, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(g.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, g.gradient, rtol=1e-12, atol=1e-13)
    assert_fd(res.hessian, fd_hessian(f, X20))


M = rand((6, 5), seed=5)
A0 = rand((4, 4), seed=30) + 4 * np.eye(4)
W50 = rand((30, 50), seed=31) / 7


def solve_fn(x):
    a = A0 + np.diag(x[:4])
    return np.linalg.solve(a, x[1:5] * x[0])


VECTOR = {  # name -> (f, x): functions from one array to an array
    "elementwise": (lambda x: np.exp(np.sin(x)) * x[::-1] + x ** 2, rand((6,), seed=20)),
    "tanh_mx": (lambda x: np.tanh(M @ x) * np.sum(x ** 2), rand((5,), seed=21)),
    "matrix_out": (lambda x: np.outer(x, np.cos(x)) @ M.T[:, :3], rand((5,), seed=22)),
    "cumsum_sort": (lambda x: np.concatenate([np.cumsum(x), np.sort(x) * x]),
                    rand((7,), seed=23)),
    "reductions": (lambda x: np.stack([np.max(x, axis=1), np.prod(x, axis=1),
                                       np.sum(x * x, axis=1)]), rand((3, 4), seed=24)),
    "solve": (solve_fn, rand((6,), seed=25)),
    "50_to_30": (lambda x: np.tanh(W50 @ x) + 0.1 * x[:30] * x[20:], rand((50,), seed=26)),
}


#: the numba backend compiles two programs per plan: a subset covers it (CI time)
NUMBA_VECTOR = ("cumsum_sort", "solve", "50_to_30", "tanh_mx")


@pytest.mark.parametrize("backend,name", [("numpy", n) for n in sorted(VECTOR)] +
                         [("numba", n) for n in NUMBA_VECTOR])
def test_jacobians_forward_and_reverse(name, backend):
    f, x = VECTOR[name]
    fd = fd_jacobian(f, x)
    y = np.asarray(f(x))
    results = {}
    for mode in ("forward", "reverse"):
        plan = ha.compile(f, x, jacobian=True, mode=mode, backend=backend, chunk=3)
        res = ha.JacobianResult(y, x)
        out = plan.jacobian(x, out=res)
        assert out is res and plan.mode == mode
        np.testing.assert_allclose(res.value, y, rtol=1e-13, atol=1e-14)
        assert_fd(res.jacobian, fd)
        results[mode] = res.jacobian.copy()
    np.testing.assert_allclose(results["forward"], results["reverse"], rtol=1e-12,
                               atol=1e-13 * max(1.0, np.abs(fd).max()))
    if backend == "numpy" or name == "50_to_30":
        auto = ha.jacobian(f, x, backend=backend)  # default chunk, mode chosen by shape
        np.testing.assert_allclose(auto.jacobian, results["forward"], rtol=1e-12,
                                   atol=1e-13 * max(1.0, np.abs(fd).max()))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", sorted(ANALYTIC))
def test_analytic_hessians(name, backend):
    f, x, hess = ANALYTIC[name]
    h = hess(x)
    chunks = (None, 2) if backend == "numpy" or name == "tanh_mx_norm" else (None,)
    for chunk in chunks:
        res = ha.hessian(f, x, backend=backend, chunk=chunk)
        np.testing.assert_allclose(res.hessian, h, rtol=1e-12, atol=1e-12 * np.abs(h).max())
        np.testing.assert_allclose(res.hessian, res.hessian.T, rtol=1e-13,
                                   atol=1e-13 * np.abs(h).max())


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_rosenbrock_100_against_scipy(backend):
    x = rand((100,), seed=40)
    res = ha.hessian(rosen_np, x, backend=backend)
    np.testing.assert_allclose(res.hessian, rosen_hess(x), rtol=1e-13, atol=1e-10)


def test_mlp_hessian_of_one_weight_matrix():
    from test_memory import _mlp_args, mlp

    args = _mlp_args()
    plan = ha.compile(mlp, *args, argnums=0, hessian=True, chunk=5)  # 48 columns in 10 chunks
    res = plan.hessian(*args)
    assert res.hessian.shape == (48, 48)
    np.testing.assert_allclose(res.gradient, ha.gradient(mlp, *args).gradient, rtol=1e-12)

    def of_w1(w):
        return mlp(w, *args[1:])

    assert_fd(res.hessian, fd_hessian(of_w1, args[0], backend="numba"), rtol=1e-5)
    np.testing.assert_allclose(res.hessian, res.hessian.T, atol=1e-13)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_many_v_at_one_point(backend):
    f, x, hess = ANALYTIC["tanh_mx_norm"]
    h = hess(x)
    plan = ha.compile(f, x, backend=backend, hessian=True, chunk=2)
    grad = ha.GradientResult(x)
    plan.linearize(x, out=grad)
    np.testing.assert_allclose(grad.gradient, ha.gradient(f, x).gradient, rtol=1e-13)
    x_before = x.copy()
    x[:] = 99.0  # the plan kept its own copy of the point
    res = ha.HvpResult(x)
    for k in range(3):
        v = rand(x.shape, seed=50 + k)
        plan.hvp(v=v, out=res)
        np.testing.assert_allclose(res.hvp, h @ v, rtol=1e-12, atol=1e-12 * np.abs(h).max())
    vs = rand((5, *x.shape), seed=60)  # a stack of directions: chunks of 2, 2, 1
    many = plan.hvp(v=vs)
    np.testing.assert_allclose(many.derivs[1], vs @ h.T, rtol=1e-12,
                               atol=1e-12 * np.abs(h).max())
    x[:] = x_before


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_zero_allocations(backend):
    x = rand((20,), seed=70)
    hplan = ha.compile(rosen_np, x, backend=backend, hessian=True, chunk=6)
    f, xj = VECTOR["tanh_mx"]
    fplan = ha.compile(f, xj, backend=backend, jacobian=True, mode="forward", chunk=2)
    rplan = ha.compile(f, xj, backend=backend, jacobian=True, mode="reverse", chunk=4)
    hres, hv = ha.HessianResult(x), ha.HvpResult(x)
    jres = ha.JacobianResult(np.asarray(f(xj)), xj)
    v, vs = rand((20,), seed=71), rand((9, 20), seed=72)
    many = ha.DiffResult(np.zeros(()), np.zeros(20), np.zeros((9, 20)))

    def calls():
        hplan.hessian(x, out=hres)
        hplan.hvp(x, v=v, out=hv)
        hplan.linearize(x, out=hv)
        hplan.hvp(v=v, out=hv)
        hplan.hvp(v=vs, out=many)
        fplan.jacobian(xj, out=jres)
        rplan.jacobian(xj, out=jres)

    for _ in range(3):
        calls()
    with count_allocations() as counts:
        for _ in range(50):
            calls()
    assert counts.allocations == 0, f"{counts.allocations} allocations in 50 rounds"
    np.testing.assert_allclose(hres.hessian, rosen_hess(x), rtol=1e-13, atol=1e-10)
    np.testing.assert_allclose(many.derivs[1], vs @ rosen_hess(x), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_bad_input_leaves_the_result_untouched(backend):
    x = rand((5,), seed=80)
    plan = ha.compile(rosen_np, x, backend=backend, hessian=True)
    res = ha.HessianResult(x)
    res.value[...], res.gradient[:], res.hessian[:] = 7.0, 8.0, 9.0
    with pytest.raises(ValueError, match="out.hessian must be a writeable array of shape"):
        plan.hessian(x, out=ha.DiffResult(res.value, res.gradient, np.zeros((5, 4))))
    with pytest.raises(ValueError, match="argument 'x' has shape"):
        plan.hessian(np.ones(4), out=res)
    with pytest.raises(ValueError, match="out.gradient must be"):
        plan.hessian(x, out=ha.DiffResult(res.value, np.zeros(4), res.hessian))
    with pytest.raises(ValueError, match="share memory with argument 'x'"):
        plan.hessian(res.gradient, out=res)
    with pytest.raises(ValueError, match="needs a point"):
        ha.compile(rosen_np, x, backend=backend, hessian=True).hvp(v=x)
    with pytest.raises(ValueError, match="v must have shape"):
        plan.hvp(x, v=np.ones(4))
    assert float(res.value) == 7.0 and np.all(res.gradient == 8.0) and np.all(res.hessian == 9.0)

    f, xj = VECTOR["tanh_mx"]
    jplan = ha.compile(f, xj, backend=backend, jacobian=True)
    jres = ha.JacobianResult(np.asarray(f(xj)), xj)
    jres.jacobian[:] = 3.0
    with pytest.raises(ValueError, match=r"out.jacobian must be a writeable array of shape"):
        jplan.jacobian(xj, out=ha.DiffResult(jres.value, np.zeros((5, 6))))
    with pytest.raises(ValueError, match="out.value must be"):
        jplan.jacobian(xj, out=ha.DiffResult(np.zeros(5), jres.jacobian))
    assert np.all(jres.jacobian == 3.0)


def test_compile_errors():
    x = rand((5,), seed=90)
    with pytest.raises(TypeError, match="one array argument"):
        ha.compile(lambda a, b: np.sum(a * b), x, x, argnums=(0, 1), hessian=True)
    with pytest.raises(TypeError, match="argument 'p', a dict of 2 array"):
        ha.hessian(lambda p: np.sum(p["a"] ** 2) + np.sum(p["b"] ** 3), {"a": x, "b": x})
    with pytest.raises(ValueError, match="mode must be"):
        ha.compile(np.sin, x, jacobian=True, mode="sideways")
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        ha.compile(rosen_np, x, hessian=True, chunk=0)
    with pytest.raises(ValueError, match="choose one"):
        ha.compile(rosen_np, x, hessian=True, jacobian=True)
    with pytest.raises(ValueError, match="must return a scalar"):
        ha.compile(np.sin, x, hessian=True)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_staged_plans_pack_safely_and_survive_poison(backend):
    # every slot NaN before it is written and after its last read; the pinned
    # primal values must survive repeated tangent runs; results equal those of
    # one slot per buffer, bit for bit
    from test_memory import _check_packing, stencil

    from hybridad.plans.hessian import HessianPlan
    from hybridad.plans.jacobian import JacobianPlan

    x = rand((12,), seed=100)
    vs = rand((5, 12), seed=101)
    hplain = HessianPlan(stencil, (x,), backend=backend, chunk=4, pack=False)
    hbad = HessianPlan(stencil, (x,), backend=backend, chunk=4, poison=True)
    _check_packing(hbad.memory)
    for a, b in ((hbad.hessian(x), hplain.hessian(x)),):
        np.testing.assert_array_equal(a.hessian, b.hessian)
        np.testing.assert_array_equal(a.gradient, b.gradient)
    hbad.linearize(x)
    hplain.linearize(x)
    for _ in range(2):  # the tangent runs again and again after one primal run
        np.testing.assert_array_equal(hbad.hvp(v=vs).derivs[1], hplain.hvp(v=vs).derivs[1])
        np.testing.assert_array_equal(hbad.hvp(v=vs[0]).hvp, hplain.hvp(v=vs[0]).hvp)
    f, xj = VECTOR["cumsum_sort"]
    for mode in ("forward", "reverse") if backend == "numpy" else ("reverse",):
        plain = JacobianPlan(f, (xj,), backend=backend, mode=mode, chunk=3, pack=False)
        bad = JacobianPlan(f, (xj,), backend=backend, mode=mode, chunk=3, poison=True)
        _check_packing(bad.memory)
        np.testing.assert_array_equal(bad.jacobian(xj).jacobian, plain.jacobian(xj).jacobian)


def test_explain_lists_the_programs():
    x = rand((6,), seed=110)
    plan = ha.compile(rosen_np, x, hessian=True, chunk=3)
    text = plan.explain()
    assert "primal:" in text and "chunk:" in text and "tangent:" in text
    assert "# --- chunk program ---" in text
    assert plan.chunk == 3 and plan.memory.total_bytes > 0
    assert plan.value(x) == pytest.approx(float(ha.gradient(rosen_np, x).value), rel=1e-14)


def test_multithreaded_plans_with_shared_slots():
    # loops of >= 32768 iterations run as prange loops; numba's own loop fusion
    # once merged two of them that used one arena slot in turn (a value still to
    # be read was overwritten): the three-layer MLP at a batch of 2500 showed it
    rng = np.random.default_rng(0)
    widths = (1, 16, 16, 1)
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in),
                   0.1 * rng.standard_normal(fan_out)]
    X = rng.uniform(-1.0, 1.0, (2500, 1))
    Y = np.sin(np.pi * X) + 0.1 * rng.standard_normal((2500, 1))

    def mlp3(W1, b1, W2, b2, W3, b3, X, Y):
        h = np.tanh(X @ W1 + b1)
        h = np.tanh(h @ W2 + b2)
        return np.mean((h @ W3 + b3 - Y) ** 2)

    args = (*params, X, Y)
    ref = ha.hessian(mlp3, *args, argnums=2, backend="numpy")
    plan = ha.compile(mlp3, *args, argnums=2, hessian=True, parallel=True)
    assert "prange(" in plan._program.source
    res = plan.hessian(*args)
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(res.hessian, ref.hessian, rtol=1e-11, atol=1e-14)
    v = rng.standard_normal(params[2].shape)
    hv = plan.hvp(*args, v=v)
    np.testing.assert_allclose(hv.hvp.reshape(-1), ref.hessian @ v.reshape(-1), rtol=1e-11,
                               atol=1e-14)


def test_default_chunk_rule(monkeypatch):
    from hybridad.plans import chunks
    from hybridad.plans.chunks import (CHUNK_BYTES, DEFAULT_CHUNK, ONE_CHUNK, ONE_CHUNK_BYTES,
                                       default_chunk)

    assert default_chunk(7, 800) == 7 and default_chunk(ONE_CHUNK, 800) == ONE_CHUNK
    def balanced(n, k):  # (chunks of at most k seeds, as even as whole seeds allow)
        return -(-n // -(-n // k))
    assert default_chunk(ONE_CHUNK + 1, 800) == balanced(ONE_CHUNK + 1, DEFAULT_CHUNK)
    assert default_chunk(99 * DEFAULT_CHUNK, 800) == DEFAULT_CHUNK
    assert default_chunk(1000, CHUNK_BYTES // 4) == 4  # large batched workspace per seed
    assert default_chunk(1000, 2 * CHUNK_BYTES) == 1
    # a few seeds with a large workspace each (a loop's stored tangents): one
    # chunk up to ONE_CHUNK_BYTES in all, each further chunk repeating the primal
    assert default_chunk(6, ONE_CHUNK_BYTES // 6) == 6
    assert default_chunk(6, ONE_CHUNK_BYTES // 3) == 3
    assert default_chunk(6, 2 * ONE_CHUNK_BYTES) == 1
    x = rand((200,), seed=120)
    lse = lambda x: np.log(np.sum(np.exp(x)))  # noqa: E731 -- (a dense Hessian: no coloring)
    assert ha.compile(lse, x, hessian=True).chunk == balanced(200, DEFAULT_CHUNK)
    assert ha.compile(rosen_np, x[:50], hessian=True).chunk == 50
    # a tridiagonal Hessian: one chunk of its 3 colors (hybridad.sparse.dense)
    assert ha.compile(rosen_np, x, hessian=True).chunk == 3
    # one seed's buffers, on a compiled backend: the elementwise values only
    # elementwise ops read stay in a fused loop's registers (plans.chunks.seed_bytes)
    monkeypatch.setattr(chunks, "ONE_CHUNK_BYTES", 1 << 20)  # (a small case's cap)
    X = rand((2000, 50), seed=121)

    def logreg(w, X):
        return np.mean(np.logaddexp(0.0, X @ w)) + 1e-3 * np.sum(w ** 2)

    w = rand((50,), seed=122)
    summed = ha.compile(logreg, w, X, hessian=True, backend="numpy").chunk
    assert summed < 50 and ha.compile(logreg, w, X, hessian=True).chunk > summed


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_hvp_without_arguments_stays_at_the_linearized_point(backend):
    """Calls at other points in between (hessian, gradient, hvp with
    arguments, value) overwrite the arena the tangent programs read: H v
    without arguments is still at the point of the last linearize."""
    f = lambda x: np.sum(x ** 3) + x[0] * x[1]  # noqa: E731
    x, y, v = np.array([1.0, 2.0]), np.array([3.0, 5.0]), np.array([1.0, -1.0])
    plan = ha.compile(f, x, hessian=True, backend=backend)
    expected = (np.diag(6 * x) + np.array([[0.0, 1.0], [1.0, 0.0]])) @ v
    plan.linearize(x)
    for other in (plan.hessian, plan.gradient, plan.value,
                  lambda y: plan.hvp(y, v=v)):
        other(y)
        np.testing.assert_allclose(plan.hvp(v=v).hvp, expected, rtol=1e-14)


def test_a_hessian_of_slices_adds_their_cotangents_in_place():
    """A Hessian plan's reverse pass is functional (its tangent sweeps read
    it): each slice's cotangent was a scatter, a zeroed copy of the whole
    gradient, summed with the others.  Lowered (``accumulate_scatters``) they
    are added in place, as a gradient's are (a 2000-point stencil energy's
    colored Hessian: 1646 -> 1207 us).  The Hessian and the gradient match the
    numpy backend's, and the Hessian the finite differences of the gradient."""
    def f(u):
        d = u[1:] - u[:-1]
        lap = u[2:] - 2 * u[1:-1] + u[:-2]
        return np.sum(d ** 2 * np.cosh(u[1:])) + np.sum(lap ** 2) + 0.1 * np.sum(u ** 4)

    u = rand((40,), seed=120) * 0.5
    plan = ha.compile(f, u, hessian=True)
    got = plan.hessian(u)
    want = ha.compile(f, u, hessian=True, backend="numpy").hessian(u)
    np.testing.assert_allclose(got.hessian, want.hessian, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-13, atol=1e-13)
    eps = 1e-6
    fd = np.array([(ha.gradient(f, u + eps * e).gradient - ha.gradient(f, u - eps * e).gradient)
                   / (2 * eps) for e in np.eye(u.size)])
    np.testing.assert_allclose(got.hessian, fd, rtol=1e-6, atol=1e-6)
    assert not [n for n in plan.graph.nodes if n.op == "scatter"]
    assert [n for n in plan.graph.nodes if n.op in ("scatter_add", "region_acc")]
    out = ha.HessianResult(u)
    with count_allocations() as counts:
        for _ in range(3):
            plan.hessian(u, out=out)
    assert counts.allocations == 0, counts
