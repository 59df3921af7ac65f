"""A call that fails writes nothing: every result buffer (and an optimizer
step's parameters) is bit-identical afterwards, on every plan kind and
backend.

The failures are LAPACK's at run time -- a singular matrix (solve, inv, det's
backward pass), a matrix that is not positive definite (cholesky), no
convergence (eigh of NaN) -- after other parts of the plan could already have
written: fused regions write gradients straight into the caller's buffer in
the forward sweep, a step updates parameters in the backward sweep, and
Hessian / Jacobian plans run a primal program before their chunk programs.
Where no LAPACK case fails in a chunk program only (its matrices are the
primal's), an op registered by this test does (numpy backend, and the GPU
backend's program on the host).
"""

import numpy as np
import pytest
from conftest import BACKENDS

import hybridad as ha
from hybridad import optim
from hybridad.ops import REGISTRY, Op
from hybridad.backends.cuda.program import DEVICE_OPS
from hybridad.testing import assert_no_alloc
from hybridad.core.trace import bind
from hybridad.core.tracer import Tracer

SENTINEL = 7.25
LinAlgError = np.linalg.LinAlgError


def _mat(x):
    return np.reshape(x, (2, 2))


#: scalar functions of x (4,), the first part a fused region whose partials go
#: straight into the gradient buffer, then an op that fails at BAD
SCALAR = {
    "inv": (lambda x: np.sum(np.exp(x) ** 2) + np.sum(np.linalg.inv(_mat(x)))),
    "solve": (lambda x: np.sum(np.exp(x) ** 2) + np.sum(np.linalg.solve(_mat(x), x[:2]))),
    # the forward pass succeeds (det = 0); the backward pass's inv fails
    "det_backward": (lambda x: np.sum(np.exp(x) ** 2) + np.linalg.det(_mat(x)) ** 2),
    "cholesky": (lambda x: np.sum(np.exp(x) ** 2) + np.sum(np.linalg.cholesky(_mat(x)))),
    "eigh": (lambda x: np.sum(np.exp(x) ** 2) +
             np.sum(np.linalg.eigh(np.outer(x[:3], x[1:]))[1] ** 3)),
}
GOOD = np.array([2.0, 0.3, 0.4, 1.5])
BAD = {"inv": np.array([1.0, 2.0, 2.0, 4.0]), "solve": np.array([1.0, 2.0, 2.0, 4.0]),
       "det_backward": np.array([1.0, 2.0, 2.0, 4.0]), "cholesky": np.array([1.0, 2.0, 2.0, 1.0]),
       "eigh": np.full(4, np.nan)}  # (a 3 x 3 NaN matrix: syevd does not converge)


def _full(*shapes):
    return [np.full(s, SENTINEL) for s in shapes]


def _assert_fails_untouched(call, buffers, error=LinAlgError):
    before = [b.copy() for b in buffers]
    with pytest.raises(error):
        call()
    for b, old in zip(buffers, before, strict=True):
        np.testing.assert_array_equal(b, old)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SCALAR))
def test_gradient_hvp_and_hessian(name, backend):
    f, bad = SCALAR[name], BAD[name]
    plan = ha.compile(f, GOOD, backend=backend)
    plan.gradient(GOOD)  # built and run once
    v, g = _full((), 4)
    _assert_fails_untouched(lambda: plan.gradient(bad, out=ha.DiffResult(v, g)), [v, g])
    # the general path: a non-contiguous gradient buffer (staged by the numba program)
    v, g2 = _full((), (4, 2))
    _assert_fails_untouched(lambda: plan.gradient(bad, out=ha.DiffResult(v, g2[:, 0])),
                            [v, g2])
    # a Hessian-vector-product plan
    hplan = ha.compile(f, GOOD, backend=backend, hvp=True)
    v, g, hv = _full((), 4, 4)
    _assert_fails_untouched(lambda: hplan.hvp(bad, v=GOOD, out=ha.DiffResult(v, g, hv)),
                            [v, g, hv])
    # Hessian plans: the Hessian, H v for one and for several directions
    v, g, h = _full((), 4, (4, 4))
    _assert_fails_untouched(lambda: ha.hessian(f, bad, out=ha.DiffResult(v, g, h),
                                               backend=backend), [v, g, h])
    splan = ha.compile(f, GOOD, backend=backend, hessian=True)
    v, g, hv = _full((), 4, (3, 4))
    _assert_fails_untouched(lambda: splan.hvp(bad, v=np.ones((3, 4)),
                                              out=ha.DiffResult(v, g, hv)), [v, g, hv])
    _assert_fails_untouched(lambda: splan.linearize(bad, out=ha.DiffResult(v, g)), [v, g])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_batch(backend):
    f = SCALAR["det_backward"]
    plan = ha.compile(f, GOOD, backend=backend)
    X = np.stack([GOOD, BAD["det_backward"], GOOD * 2])
    vals, grads = _full(3, (3, 4))
    _assert_fails_untouched(lambda: plan.gradient_batch(X, out=ha.DiffResult(vals, grads)),
                            [vals, grads])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", [optim.SGD(0.1), optim.Adam(0.1)], ids=["sgd", "adam"])
@pytest.mark.parametrize("name", ["inv", "det_backward", "cholesky"])
def test_step_leaves_the_parameters_untouched(name, rule, backend):
    def loss(p, q):  # the backward sweep completes p's gradient first: p is updated early
        return SCALAR[name](q) + np.sum(np.exp(p) ** 2)

    good, bad = GOOD.copy(), BAD[name].copy()
    plan = ha.compile(loss, good, good.copy(), argnums=(0, 1), backend=backend, update=rule)
    p, q = np.full(4, 0.5), bad.copy()
    (v,) = _full(())
    _assert_fails_untouched(lambda: plan.step(p, q, out=ha.DiffResult(v)), [v, p, q])
    # the failed step changed no state either: the next step is a first step
    fresh = ha.compile(loss, good, good.copy(), argnums=(0, 1), backend=backend, update=rule)
    p1, q1, p2, q2 = p.copy(), good.copy(), p.copy(), good.copy()
    plan.step(p1, q1)
    fresh.step(p2, q2)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(q1, q2)


#: A is invertible to LAPACK, its transpose exactly singular (getrf's rounding):
#: gesv solves with A but finds an exact zero pivot in A^T (rounding): a plan's
#: reverse pass solves with A^T from A's factors (hybridad/transforms/factors.py),
#: so it fails only where the forward solve does
A_NOT_AT = np.array([[35.0, 3.0], [20.0 / 3.0, 0.5714285714285715]])


def y_det(x, a):
    """det(a + x x^T): its forward pass succeeds on a singular matrix (det 0),
    its reverse and tangent passes (inv) fail there."""
    return np.concatenate([np.exp(x) * 2, np.linalg.det(a + np.outer(x, x))[None]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_jacobian(backend):
    np.linalg.solve(A_NOT_AT, np.ones(2))
    with pytest.raises(LinAlgError):
        np.linalg.solve(A_NOT_AT.T, np.ones(2))

    def y(x, a):
        return np.concatenate([np.exp(x) * 2, np.linalg.solve(a, x)])

    x = np.array([0.5, -1.0])
    for mode in ("forward", "reverse"):
        plan = ha.compile(y, x, np.eye(2), backend=backend, jacobian=True, mode=mode)
        plan.jacobian(x, np.eye(2))
        v, j = _full(4, (4, 2))
        _assert_fails_untouched(lambda: plan.jacobian(x, np.ones((2, 2)),
                                                      out=ha.DiffResult(v, j)), [v, j])
        # (the transposed solve from A's factors: no failure where A^T's gesv had one)
        np.testing.assert_allclose(plan.jacobian(x, A_NOT_AT).jacobian[2:],
                                   np.linalg.inv(A_NOT_AT), rtol=1e-9)
    # the primal program succeeds (det 0), the chunk program (the reverse pass's inv) fails
    plan = ha.compile(y_det, x, np.eye(2), backend=backend, jacobian=True, mode="reverse")
    plan.jacobian(x, np.eye(2))
    v, j = _full(3, (3, 2))
    _assert_fails_untouched(lambda: plan.jacobian(x, np.zeros((2, 2)), out=ha.DiffResult(v, j)),
                            [v, j])


@pytest.mark.parametrize("backend", BACKENDS)
def test_staged_results_allocate_nothing_per_call(backend):
    """Plans whose chunk programs can fail fill buffers of their own, made at
    the first call: later calls allocate nothing."""
    import scipy.linalg as sl

    def y(x, a):  # (the reverse pass's triangular solve with the seeds can fail)
        return np.concatenate([np.exp(x), sl.solve_triangular(a, x, lower=True)])

    x, a = np.array([0.5, -1.0]), np.array([[2.0, 0.0], [0.3, 1.0]])
    jac = ha.compile(y, x, a, backend=backend, jacobian=True, mode="reverse")
    assert jac._raises["chunk"]
    res = jac.new_result()
    assert_no_alloc(jac.jacobian, x, a, out=res, n=5)
    np.testing.assert_allclose(res.jacobian[2:], np.linalg.inv(a), rtol=1e-12)
    hess = ha.compile(lambda x, a: np.sum(y(x, a) ** 2), x, a, backend=backend, hessian=True)
    res = hess.new_result()
    assert_no_alloc(hess.hessian, x, a, out=res, n=5)


def test_a_plan_without_failing_ops_keeps_its_direct_outputs():
    """The common case keeps its speed: gradients computed in the caller's
    buffer; with an op that can fail after them, in the arena."""
    plain = ha.compile(lambda x: np.sum(np.exp(x) ** 2) + np.sum(_mat(x) @ x[:2]), GOOD)
    assert plain.memory.direct
    assert not ha.compile(SCALAR["inv"], GOOD).memory.direct
    # an op that can fail, before every write into the caller's buffer: direct again
    def early(x):
        c = np.sum(np.linalg.inv(_mat(GOOD)))
        return c * np.sum(np.exp(x) ** 2)

    assert ha.compile(early, GOOD).memory.direct


# ----------------------------------------------------------------------------
# an op that fails in tangent and chunk programs only
# ----------------------------------------------------------------------------


def _fragile_run(out, x):
    if np.any(x == 13.0):
        raise LinAlgError("13")
    np.copyto(out, x)


@pytest.fixture(scope="module")
def fragile():
    """``fragile(x) = x``, raising where an element is 13; its derivative rules
    apply it to 13 * the (co)tangent: they fail on unit seeds."""
    op = Op("_test_fragile", "compute", lambda x: (x.shape, x.dtype), run=_fragile_run,
            vjp=lambda g, node, active, x, ans: (bind("_test_fragile", g * 13.0) / 13.0,),
            jvp=lambda ts, node, x, ans: bind("_test_fragile", ts[0] * 13.0) / 13.0,
            batch=lambda node, batched, x: bind("_test_fragile", x), raises=True)
    REGISTRY[op.name] = op
    DEVICE_OPS[op.name] = "cupy"  # the GPU backend runs its numpy ``run`` (the table says how)

    def fragile(x):
        if isinstance(x, Tracer):
            return bind("_test_fragile", x)
        out = np.empty_like(x)
        _fragile_run(out, x)
        return out

    yield fragile
    del REGISTRY[op.name], DEVICE_OPS[op.name]


def _staged_calls(fragile, backend):
    def f(x):
        return np.sum(fragile(x) ** 3)

    x = np.array([0.5, 2.0, -1.0])
    hplan = ha.compile(f, x, backend=backend, hessian=True)
    assert hplan.value(x) == f(x)  # the primal program runs
    v, g, h = _full((), 3, (3, 3))
    _assert_fails_untouched(lambda: hplan.hessian(x, out=ha.DiffResult(v, g, h)), [v, g, h])
    v, g, hv = _full((), 3, 3)
    direction = np.array([1.0, 0.0, 0.0])
    _assert_fails_untouched(lambda: hplan.hvp(x, v=direction, out=ha.DiffResult(v, g, hv)),
                            [v, g, hv])
    hplan.linearize(x)
    _assert_fails_untouched(lambda: hplan.hvp(v=direction, out=ha.DiffResult(v, g, hv)),
                            [v, g, hv])
    for mode in ("forward", "reverse"):
        jplan = ha.compile(lambda x: fragile(x), x, backend=backend, jacobian=True,
                           mode=mode)
        np.testing.assert_array_equal(jplan.value(x), x)
        v, j = _full(3, (3, 3))
        _assert_fails_untouched(lambda: jplan.jacobian(x, out=ha.DiffResult(v, j)), [v, j])


def test_chunk_program_failures_numpy(fragile):
    _staged_calls(fragile, "numpy")


def test_chunk_program_failures_cupy_program_on_the_host(fragile, monkeypatch):
    cuda_host = pytest.importorskip("cuda_host")
    import cupy_strict

    if cuda_host.NVCC is None:
        pytest.skip("nvcc is not installed")
    from hybridad.backends.cuda import program as cupy_backend

    monkeypatch.setattr(cupy_backend, "device",
                        lambda: (cupy_strict.STRICT or np, cuda_host.HostLauncher()))
    _staged_calls(fragile, "cupy")


# ----------------------------------------------------------------------------
# result buffers that overlap: refused before anything is written
# ----------------------------------------------------------------------------


def _f2(x, c):
    return np.sum(np.exp(x) ** 2) + np.sum(x * c)


def _y(x, c):
    return np.exp(x) * c


def _overlap_cases(backend):
    """(what, call, buffers it must leave untouched, the error's words)."""
    x, c = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    plan = ha.compile(_f2, x, c, backend=backend)
    two = ha.compile(_f2, x, c, argnums=(0, 1), backend=backend)
    hvp = ha.compile(_f2, x, c, backend=backend, hvp=True)
    hess = ha.compile(_f2, x, c, backend=backend, hessian=True)
    jac = ha.compile(_y, x, c, backend=backend, jacobian=True)
    step = ha.compile(lambda p, q, c: _f2(p, c) + _f2(q, c), x, x.copy(), c, argnums=(0, 1),
                      backend=backend, update=optim.SGD(0.1))
    buf = np.full(20, SENTINEL)
    cases = []

    def case(what, call, words, *extra):
        cases.append((what, call, [buf, *extra], words))

    value_in_grad = ha.DiffResult(buf[1:2].reshape(()), buf[:3])
    case("value a view of the gradient", lambda: plan.gradient(x, c, out=value_in_grad),
         r"out.value and out.gradient for argument 'x'")
    case("... convenience path", lambda: ha.gradient(_f2, x, c, out=value_in_grad,
                                                      backend=backend),
         r"out.value and out.gradient for argument 'x'")
    xs = np.full(6, SENTINEL)
    case("gradient a view of an argument",
         lambda: plan.gradient(xs[:3], c, out=ha.DiffResult(buf[10:11].reshape(()), xs[:3])),
         r"with argument 'x' \(out.gradient for argument 'x'", xs)
    case("gradient a view of a constant argument",
         lambda: plan.gradient(x, buf[:3], out=ha.DiffResult(np.zeros(()), buf[1:4])),
         r"with argument 'c'")
    case("two gradients overlap",
         lambda: two.gradient(x, c, out=ha.DiffResult(np.zeros(()), (buf[:3], buf[2:5]))),
         r"out.gradient for argument 'x' and out.gradient for argument 'c'")
    case("hvp overlaps the gradient",
         lambda: hvp.hvp(x, c, v=x, out=ha.DiffResult(np.zeros(()), buf[:3], buf[2:5])),
         r"out.gradient for argument 'x' and out.hvp for argument 'x'")
    case("hvp overlaps v",
         lambda: hvp.hvp(x, c, v=buf[:3], out=ha.DiffResult(np.zeros(()), buf[5:8], buf[2:5])),
         r"with v \(out.hvp")
    case("... convenience path",
         lambda: ha.hvp(_f2, x, buf[:3], c, out=ha.DiffResult(np.zeros(()), buf[5:8],
                                                                buf[2:5]), backend=backend),
         r"with v \(out.hvp")
    case("Hessian overlaps the gradient",
         lambda: hess.hessian(x, c, out=ha.DiffResult(np.zeros(()), buf[:3],
                                                       buf[2:11].reshape(3, 3))),
         r"out.gradient and out.hessian")
    case("... convenience path",
         lambda: ha.hessian(_f2, x, c, out=ha.DiffResult(buf[8:9].reshape(()), buf[:3],
                                                          buf[4:13].reshape(3, 3)),
                            backend=backend),
         r"out.value and out.hessian")
    case("Hessian plan: hvp overlaps v",
         lambda: hess.hvp(x, c, v=buf[:3], out=ha.DiffResult(np.zeros(()), buf[5:8], buf[2:5])),
         r"with v \(out.hvp")
    case("Hessian plan: gradient a view of an argument",
         lambda: hess.gradient(buf[:3], c, out=ha.DiffResult(np.zeros(()), buf[:3])),
         r"with argument 'x' \(out.gradient")
    case("value overlaps the Jacobian",
         lambda: jac.jacobian(x, c, out=ha.DiffResult(buf[:3], buf[2:11].reshape(3, 3))),
         r"out.value and out.jacobian")
    case("... convenience path",
         lambda: ha.jacobian(_y, x, buf[:3], out=ha.DiffResult(np.zeros(3),
                                                                buf[2:11].reshape(3, 3)),
                             backend=backend),
         r"with argument 'c' \(out.jacobian")
    stack = np.stack([x, x])
    case("batch values a view of the gradients",
         lambda: plan.gradient_batch(stack, c, out=ha.DiffResult(buf[4:6], buf[:6].reshape(2, 3))),
         r"out.value \(the values\) and out.gradient \(the gradients\)")
    case("batch gradients a view of X",
         lambda: plan.gradient_batch(buf[:6].reshape(2, 3), c,
                                     out=ha.DiffResult(np.zeros(2), buf[:6].reshape(2, 3))),
         r"with X \(out.gradient")
    p, q = np.full(3, SENTINEL), np.full(3, SENTINEL)
    case("step value a view of a parameter",
         lambda: step.step(p, q, c, out=ha.DiffResult(p[1:2].reshape(()))),
         r"out.value and parameter 'p'", p, q)
    case("step parameters overlap each other",
         lambda: step.step(buf[:3], buf[2:5], c), r"parameter 'p' and parameter 'q'")
    case("step parameter overlaps a constant argument",
         lambda: step.step(buf[:3], q, buf[1:4]), r"with argument 'c' \(parameter 'p'", q)
    return cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_buffers_are_refused_before_any_write(backend):
    for what, call, buffers, words in _overlap_cases(backend):
        before = [b.copy() for b in buffers]
        with pytest.raises(ValueError, match=words):
            call()
        for b, old in zip(buffers, before, strict=True):
            np.testing.assert_array_equal(b, old, err_msg=what)
