"""'Allocates nothing': after warm-up, repeated calls make zero numpy data
allocations, counted exactly (temporaries included) -- one test per op family,
through both public paths (``gradient(..., out=res)`` and ``plan.gradient``)."""

import gc
import tracemalloc

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.testing import count_allocations

N_CALLS = 1000

A5 = rand((5, 5), seed=1)
As = [rand((4, 4), seed=s) for s in range(3)]
MASK = rand((4, 5), seed=16) > 0

FAMILIES = {
    "elementwise": (lambda x: np.sum(np.exp(-3 * (x + 1))) ** 2 + np.sum(np.tanh(x) * np.sin(x)),
                    (rand((100,), seed=2),)),
    "operators_scalars": (lambda x: np.sum(2.0 * x - x / 3 + 1.5 ** x + x ** 3 + (-x) ** 2),
                          (rand((50,), seed=3),)),
    "broadcasting": (lambda x, y: np.sum(x * y + np.maximum(x, y) - np.minimum(x, 0.5)),
                     (rand((3, 1, 4), seed=4), rand((5, 1), seed=5))),
    "where_masks": (lambda x: np.sum(np.where((x > 0) & (x < 1), x * x, -x) * (x != 0.3)),
                    (rand((30,), seed=6),)),
    "reductions": (lambda x: np.sum(np.mean(x, axis=0) * np.max(x, axis=1, keepdims=True)) +
                   np.sum(np.prod(x, axis=(0, 2))) + np.min(x) + np.sum(x, axis=-1).sum(),
                   (rand((3, 4, 5), 0.5, 1.5, seed=7),)),
    "ufunc_outer": (lambda x: np.sum(np.exp(-np.subtract.outer(x, x) ** 2)) +
                    np.sum(np.multiply.outer(x, A5[0]) ** 2), (rand((5,), seed=21),)),
    "matmul": (lambda x, A: x @ (A @ x) + np.sum(np.outer(x, x) @ A) + np.dot(x, x) +
               np.inner(x, x) + np.vdot(A, A) + np.sum(np.stack([A, A]) @ A),
               (rand((5,), seed=8), A5)),
    "quadratic_list": (lambda x, As: sum(x @ (Ak @ x) for Ak in As), (rand((4,), seed=9), As)),
    "shape_ops": (lambda x: np.sum(np.reshape(x, (4, 3)) ** 2 + np.transpose(x).reshape(4, 3) +
                                   np.broadcast_to(x[:, :1], (3, 4)).T.reshape(4, 3)) +
                  np.sum(np.expand_dims(x, 0) * np.squeeze(x[None])) +
                  np.sum(np.concatenate([x, x[::-1]], axis=1)) + np.sum(np.stack([x, x])),
                  (rand((3, 4), seed=10),)),
    "indexing": (lambda x: np.sum(x[1:] - x[:-1]) ** 2 + np.sum(x[::2] ** 2) + x[3] * x[0] +
                 np.sum(x[..., None] * x[None, ...]), (rand((10,), seed=11),)),
    "statistics_shapes": (lambda x: np.sum(np.var(x, axis=0, ddof=1)) + np.std(x) +
                          np.ptp(x) + np.sum(np.cumsum(x, axis=1) ** 2) +
                          np.sum(np.logaddexp.reduce(x, axis=1)) + np.sum(np.clip(x, -1, 1)) +
                          np.sum(np.roll(x, 2) * np.flip(x)) + np.sum(np.tile(x, 2) ** 2) +
                          np.sum(np.pad(x, 1) ** 2) + np.sum(np.repeat(x, 2, axis=1) ** 3) +
                          np.sum(np.tril(x) * np.triu(x)) + np.trace(x),
                          (rand((4, 5), seed=12),)),
    "products_norms": (lambda x: np.sum(np.einsum("ij,kj->ik", x, x) ** 2) +
                       np.einsum("ij,ij->", x, x) + np.sum(np.tensordot(x, x, ([0], [0]))) +
                       np.sum(np.kron(x[:2], x[:, :2]) ** 2) + np.linalg.norm(x) +
                       np.linalg.norm(x, 1) + np.sum(np.linalg.norm(x, 3, axis=1)),
                       (rand((4, 5), seed=13),)),
    "more_composites": (lambda x: np.sum(np.round(x, 1) * x) + np.average(x, weights=x * x + 1) +
                        np.sum(np.atleast_3d(x[0]) ** 2) + np.sum(np.hstack([x, x]) ** 2) +
                        sum(np.sum(p ** 2) for p in np.array_split(x, 3, axis=1)) +
                        np.sum(np.rot90(x) ** 2) + np.sum(np.diff(x, 2) ** 2) +
                        np.sum(np.cross(x[:, :3], x[:, 2:]) ** 2) +
                        np.sum(np.nan_to_num(np.log(x)) + np.sinc(x)) +
                        np.sum(np.diag(x[0]) ** 2) + np.sum(np.heaviside(x, 0.5) * x) +
                        np.sum(np.float_power(np.abs(x) + 1, 1.5)),
                        (rand((4, 5), seed=14),)),
    "gather_scans": (lambda x: np.sum(x[[0, 2, 2]] ** 2) +
                     np.sum(x[:, [4, 0]] * x[[1, 3, 0, 0], :2]) +
                     np.sum(x.T[MASK.T] ** 3) + np.sum(np.take(x, [3, 3, 7]) ** 2) +
                     np.sum(np.repeat(x, [1, 0, 2, 1], axis=0) ** 2) + np.trace(x) +
                     np.sum(np.take_along_axis(x, np.zeros((4, 1), int), 1) ** 2) +
                     np.sum(np.cumprod(x, axis=1) ** 2) + np.sum(np.cumprod(x[::-1, 1])),
                     (rand((4, 5), seed=15),)),
    "einsum_gradient": (lambda x: np.sum(np.einsum("...ij,...jk->...ik", x.reshape(2, 2, 5),
                                                   x.reshape(2, 5, 2)) ** 2) +
                        np.sum(np.einsum("...i,...i", x, x[0])) +
                        np.sum(np.einsum("...ij,jk", x.reshape(2, 2, 5), x.T) ** 2) +
                        sum(np.sum(g ** 2) for g in np.gradient(x, 0.5, edge_order=2)) +
                        np.sum(np.gradient(x[0]) ** 3) +
                        np.sum(np.gradient(x, [0.0, 1.0, 3.0, 3.5], axis=0) ** 2) +
                        np.sum(np.imag(x) + np.angle(x) * x) +
                        np.sum(np.linspace(x[0], x[1], 3) ** 2) +
                        np.sum(np.full((2, 5), x[0], like=x) * x[:2]),
                        (rand((4, 5), seed=19),)),
    # selections of one element from size-1 axes: numpy keeps the view's stride
    # on a 1-element index array, and its take then copied it on every call
    "unit_axes": (lambda x: np.sum(np.diagonal(x[:1, :1]) ** 2) + np.trace(x[1:2, 2:3]) ** 2 +
                  np.sum(np.einsum("daa->da", x[:2, :1, None][:, :, :1]) ** 2) +
                  np.sum(x[:1, [0]] ** 3) + np.sum(np.take(x[:1, :1], [0]) ** 2),
                  (rand((4, 5), seed=22),)),
    # rows of 20 (heapsort in numba) along axis 1, of 3 (insertion sort) along axis 0
    "sorting": (lambda x: np.sum(np.sort(x) * x[::-1]) + np.sum(np.sort(x, axis=0) ** 2) +
                np.sum(np.sort(x.T, axis=None)[::3] ** 3) + np.sum(np.partition(x, 2)[:, 2]) +
                np.sum(np.argsort(x, axis=0) * x) + np.median(x) +
                np.sum(np.median(x, axis=1) ** 2) + np.sum(np.compress([1, 0, 1], x, axis=0)) +
                np.sum(np.extract(np.arange(60).reshape(3, 20) % 3 == 0, x) ** 2) +
                np.sum(np.delete(x, 3, axis=1) ** 2),
                (rand((3, 20), seed=18),)),
    "linalg": (lambda x: np.sum(np.linalg.solve(x[:, :4] + 3 * np.eye(4), x[:, 4]) ** 2) +
               np.sum(np.linalg.inv(x[:, 1:] + 3 * np.eye(4)) ** 2) +
               np.linalg.det(x[:, :4] + np.eye(4)) + np.linalg.slogdet(x[:, 1:] + np.eye(4))[1] +
               np.sum(np.linalg.cholesky(x[:, :4] @ x[:, :4].T + np.eye(4)) ** 2) +
               np.sum(np.linalg.eigh(x[:, :4] @ x[:, :4].T)[1][:, 3] ** 2 * x[:, 4]) +
               np.sum(np.linalg.eigvalsh(x[:, 1:] + x[:, 1:].T) ** 3),
               (rand((4, 5), seed=17),)),
}


def _check_no_alloc(call, n=N_CALLS):
    for _ in range(3):
        call()
    with count_allocations() as counts:
        for _ in range(n):
            call()
    assert counts.allocations == 0, \
        f"{counts.allocations} numpy allocations ({counts.bytes} bytes) in {n} calls"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_zero_allocations(family):
    f, args = FAMILIES[family]
    res = ha.GradientResult(args[0])
    _check_no_alloc(lambda: ha.gradient(f, *args, out=res))
    plan = ha.compile(f, *args)
    res2 = ha.GradientResult(args[0])
    _check_no_alloc(lambda: plan.gradient(*args, out=res2))
    np.testing.assert_array_equal(res.gradient, res2.gradient)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_zero_allocations_numpy_backend(family):
    f, args = FAMILIES[family]
    plan = ha.compile(f, *args, backend="numpy")
    res = ha.GradientResult(args[0])
    _check_no_alloc(lambda: plan.gradient(*args, out=res), n=200)


def test_zero_allocations_multi_argnums_pytree_float32_noncontiguous():
    def f(p, x, c):
        return np.sum(np.tanh(x @ p["W"] + p["b"]) ** 2) * c

    p = {"W": rand((3, 2), seed=12).astype(np.float32), "b": np.zeros(2, np.float32)}
    x = rand((6, 3), seed=13).astype(np.float32)
    res = ha.GradientResult((p, x))
    _check_no_alloc(lambda: ha.gradient(f, p, x, 2.0, argnums=(0, 1), out=res))
    xs = rand((12, 3), seed=14)[::2]  # non-contiguous: staged into a buffer made once
    res64 = ha.GradientResult(xs)

    def g(x):
        return np.sum(np.exp(x) * x.T[0][:, None])

    _check_no_alloc(lambda: ha.gradient(g, xs, out=res64))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("number", [0.3, np.float64(0.3), np.float32(0.3), 2, True],
                         ids=["float", "float64", "float32", "int", "bool"])
def test_a_differentiated_number_allocates_nothing(number, backend):
    # a number is a 0-d array of the plan's own (one per thread): converting it
    # allocated an array each call; its gradient is the closed form at each value
    def f(a, x):
        return np.sum(np.sin(a * x))

    x = rand((50,), seed=15)
    plan = ha.compile(f, number, x, argnums=(0, 1), backend=backend, tiered=False)
    res = plan.new_result()
    _check_no_alloc(lambda: plan.gradient(number, x, out=res))
    if backend == "numba":  # (staged by the generated fast path itself)
        assert "_stg(0, a0" in plan.gradient.source
    for a in (number, type(number)(0.7) if type(number) is not bool else False):
        got = plan.gradient(a, x).gradient
        want = float(np.sum(x * np.cos(float(a) * x)))
        np.testing.assert_allclose(float(got[0]), want,
                                   rtol=1e-12 if got[0].dtype == np.float64 else 1e-5)


def test_ha_gradient_with_a_number_reuses_its_plan_and_allocates_nothing():
    # the cache key takes a number's shape and dtype without converting it, and
    # the function's recent plan matches a number where it took one
    def f(a, x):
        return np.sum(np.sin(a * x))

    x = rand((50,), seed=18)
    res = ha.gradient(f, 0.3, x, argnums=0)
    _check_no_alloc(lambda: ha.gradient(f, 0.3, x, argnums=0, out=res))
    np.testing.assert_allclose(float(res.gradient), float(np.sum(x * np.cos(0.3 * x))),
                               rtol=1e-12)
    assert float(ha.gradient(f, 0.6, x, argnums=0).gradient) == pytest.approx(
        float(np.sum(x * np.cos(0.6 * x))), rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_number_beyond_float64_is_refused_by_name(backend):
    def f(a, x):
        return np.sum(np.sin(a * x))

    x = rand((5,), seed=19)
    plan = ha.compile(f, 0.3, x, argnums=0, backend=backend, tiered=False)
    res = plan.new_result()
    for call in (lambda: plan.gradient(10 ** 400, x, out=res), lambda: plan.gradient(10 ** 400, x)):
        with pytest.raises(TypeError, match="argument 'a' must have a floating-point dtype"):
            call()


def test_differentiated_numbers_on_threads_do_not_mix():
    # each thread's number in a buffer of its own: concurrent calls at different
    # values each get their own gradient
    import threading

    def f(a, x):
        return np.sum(np.sin(a * x))

    x = rand((2000,), seed=16)
    plan = ha.compile(f, 0.1, x, argnums=0)
    errors = []

    def work(a):
        for _ in range(50):
            g = plan.gradient(a, x).gradient
            if abs(float(g) - float(np.sum(x * np.cos(a * x)))) > 1e-9:
                errors.append(a)

    threads = [threading.Thread(target=work, args=(a,)) for a in (0.2, 0.5, 0.9, 1.3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_number_is_not_a_parameter_to_update():
    # the update would be written into a converted copy the caller never sees
    def f(a, x):
        return np.sum((a * x - 1) ** 2)

    x = rand((10,), seed=17)
    plan = ha.compile(f, 0.3, x, argnums=0, update=ha.optim.SGD(0.1))
    with pytest.raises(ValueError, match="parameter 'a' is updated in place.*a number"):
        plan.step(0.3, x)
    a = np.array(0.3)
    plan.step(a, x)
    assert float(a) != 0.3


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zero_allocations_parallel_plan_with_blas(monkeypatch, dtype):
    """A multithreaded plan that calls BLAS (run single-threaded beside its
    loops) through its generated fast path: no allocation per call, and the
    closed-form gradient."""
    from hybridad.backends.numba import threshold

    monkeypatch.setattr(threshold, "PARALLEL_MIN", 64)

    def f(W, X):
        return np.sum(np.tanh(X @ W) ** 2)

    W, X = rand((8, 8), seed=10).astype(dtype), rand((200, 8), seed=11).astype(dtype)
    plan = ha.compile(f, W, X, argnums=(0, 1))  # (12800 multiply-adds: BLAS on one thread)
    assert plan._program.blas_limited and "gradient" in vars(plan)
    res = plan.new_result()
    _check_no_alloc(lambda: plan.gradient(W, X, out=res), n=200)
    t = np.tanh(X.astype(np.float64) @ W)
    g = 2 * t * (1 - t * t)
    tol = 1e-12 if dtype == np.float64 else 2e-5  # (float32: relative to the largest entry)
    for got, want in ((res.gradient[0], X.T.astype(np.float64) @ g),
                      (res.gradient[1], g @ W.T.astype(np.float64))):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_value_path_allocates_nothing():
    f, args = FAMILIES["elementwise"]
    plan = ha.compile(f, *args)
    _check_no_alloc(lambda: plan.value(*args))


def test_counter_catches_an_allocation():
    # the instrument itself: a plan call plus one temporary counts exactly one
    f, args = FAMILIES["elementwise"]
    plan = ha.compile(f, *args)
    res = ha.GradientResult(args[0])
    plan.gradient(*args, out=res)
    with count_allocations() as counts:
        plan.gradient(*args, out=res)
        _ = res.gradient + res.gradient
    assert counts.allocations == 1


def test_python_object_churn_is_bounded():
    f, args = FAMILIES["matmul"]
    plan = ha.compile(f, *args)
    res = ha.GradientResult(args[0])
    for _ in range(200):
        plan.gradient(*args, out=res)
        ha.gradient(f, *args, out=res)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(100):
            plan.gradient(*args, out=res)
            ha.gradient(f, *args, out=res)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        for _ in range(3000):
            plan.gradient(*args, out=res)
            ha.gradient(f, *args, out=res)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert second - first < 4096, f"Python memory grew by {second - first} bytes"


def test_a_value_buffer_of_another_dtype_takes_the_fast_path():
    """float32 arguments of a function whose value numpy 2 promotes to
    float64 (``x / np.sqrt(2)``): ``GradientResult(x)`` holds a float32
    value, which the plan's fast path casts into (it went to the general path,
    9x slower), allocating nothing; a read-only value buffer still raises
    before anything is written."""
    from hybridad.plans.plan import Plan

    def f(x, p):
        return np.sum(np.tanh(x) * p["w"] / np.sqrt(2 / np.pi))

    x = np.linspace(-1.0, 1.0, 16).astype(np.float32)
    p = {"w": np.arange(16, dtype=np.float32)}
    plan = ha.compile(f, x, p)
    res = ha.GradientResult(x)
    assert res.value.dtype == np.float32 and np.asarray(f(x, p)).dtype == np.float64
    checks = Plan._check_out  # (what the general path runs, never the fast one)
    calls = []
    Plan._check_out = lambda *a, **k: calls.append(1) or checks(*a, **k)
    try:
        for _ in range(3):
            plan.gradient(x, p, out=res)
        with count_allocations() as counts:
            plan.gradient(x, p, out=res)
    finally:
        Plan._check_out = checks
    assert counts.allocations == 0 and not calls
    assert res.value == np.float32(f(x, p))
    want = (1 - np.tanh(x.astype(np.float64)) ** 2) * p["w"] / np.sqrt(2 / np.pi)
    np.testing.assert_allclose(res.gradient, want, rtol=1e-6)
    frozen = ha.GradientResult(x)
    frozen.value.flags.writeable = False
    with pytest.raises(ValueError):
        plan.gradient(x, p, out=frozen)
    assert not frozen.gradient.any()
