"""The compiled plan reads the caller's arrays by object (hybridad.backends.numba.rt):
every argument it does not take as it is -- another layout, dtype, byte order,
alignment, a subclass, a read-only or reshaped result buffer, overlaps -- is
rejected before any write and then staged or reported by the general path."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba import abi, rt


def f(x, A):
    return np.sum(np.tanh(A @ x)) + np.sum(np.exp(-x * x))


X = np.linspace(-1.0, 1.0, 8)
A = np.random.default_rng(3).random((5, 8))


@pytest.fixture(scope="module")
def plan():
    return ha.compile(f, X, A)


@pytest.fixture(scope="module")
def expected():
    return ha.gradient(f, X, A, backend="numpy")


def check(res, expected):
    np.testing.assert_allclose(float(res.value), float(expected.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient, expected.gradient, rtol=1e-12, atol=1e-15)


def test_abi_probe_found_numpy_struct():
    assert rt.ABI is not None
    assert {"type", "data", "ndim", "dims", "descr", "flags", "type_num"} <= set(rt.ABI)


class Sub(np.ndarray):
    pass


def unaligned(a):
    raw = np.zeros(a.nbytes + 1, np.uint8)
    out = raw[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


@pytest.mark.parametrize("kind", ["fortran", "strided", "readonly", "subclass",
                                  "unaligned"])
def test_odd_arguments_are_staged(plan, expected, kind):
    make = {
        "fortran": lambda a: np.asfortranarray(a),
        "strided": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
        "readonly": lambda a: np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape),
        "subclass": lambda a: a.copy().view(Sub),
        "unaligned": unaligned,
    }[kind]
    res = plan.new_result()
    out = plan.gradient(make(X), make(A), out=res)
    assert out is res
    check(res, expected)


@pytest.mark.parametrize("dtype", [">f8", np.float32])
def test_other_dtype_is_named(plan, dtype):
    res = plan.new_result()
    with pytest.raises(ValueError, match="argument 'A' has shape"):
        plan.gradient(X, A.astype(dtype), out=res)
    assert float(res.value) == 0 and not res.gradient.any()


@pytest.mark.parametrize("kind", ["readonly", "strided", "float32_value", "subclass",
                                  "unaligned"])
def test_odd_result_buffers(plan, expected, kind):
    res = plan.new_result()
    if kind == "readonly":
        res.gradient.flags.writeable = False
        before = res.gradient.copy()
        with pytest.raises(ValueError, match="writeable"):
            plan.gradient(X, A, out=res)
        np.testing.assert_array_equal(res.gradient, before)
        return
    if kind == "float32_value":
        res = ha.DiffResult(np.zeros((), np.float32), np.zeros(8))
    elif kind == "subclass":
        res = ha.DiffResult(np.zeros((), np.float64), np.zeros(8).view(Sub))
    elif kind == "unaligned":
        res = ha.DiffResult(np.zeros((), np.float64), unaligned(np.zeros(8)))
    else:  # a strided gradient view
        res = ha.DiffResult(np.zeros(()), np.zeros(16)[::2])
    plan.gradient(X, A, out=res)
    np.testing.assert_allclose(float(res.value), float(expected.value), rtol=1e-6)
    np.testing.assert_allclose(res.derivs[0], expected.gradient, rtol=1e-12, atol=1e-15)


def test_result_changed_in_place_between_calls(plan):
    res = plan.new_result()
    plan.gradient(X, A, out=res)
    res.gradient.shape = (2, 4)  # same object, another shape: checked on every call
    before = res.gradient.copy()
    with pytest.raises(ValueError, match="shape"):
        plan.gradient(X, A, out=res)
    np.testing.assert_array_equal(res.gradient, before)


def test_overlaps_rejected_untouched(plan):
    buf = np.zeros(9)
    res = ha.DiffResult(buf[:1].reshape(()), buf[1:])
    x = buf[1:].copy()
    plan.gradient(x, A, out=res)  # disjoint views of one buffer: fine
    res2 = ha.DiffResult(np.zeros(()), x)  # the gradient buffer is the argument
    with pytest.raises(ValueError, match="share memory"):
        plan.gradient(x, A, out=res2)
    res3 = ha.DiffResult(buf[1:2].reshape(()), buf[1:])  # value inside the gradient
    with pytest.raises(ValueError, match="share memory"):
        plan.gradient(X, A, out=res3)


def test_fallback_passing_arrays_agrees(monkeypatch, expected):
    """Where numpy's struct cannot be read (abi.ABI is None) the plan takes arrays."""
    monkeypatch.setattr(abi, "ABI", None)
    plan = ha.compile(f, X, A)
    assert not plan._program.objects
    assert "_type_num" not in plan._program.source.split("def plan_fn")[1]
    res = plan.new_result()
    plan.gradient(X, A, out=res)
    check(res, expected)
    plan.gradient(np.asfortranarray(X), np.asfortranarray(A), out=res)
    check(res, expected)
    with pytest.raises(ValueError, match="share memory"):
        plan.gradient(X, A, out=ha.DiffResult(np.zeros(()), X))


@pytest.fixture(scope="module")
def gemm_beta():
    from numba import njit

    @njit
    def call(a, b, out, beta):
        rt.gemm(a, b, out, beta)

    return call


@pytest.mark.parametrize("m, k, n", [(5, 4, 3), (5, 4, 1), (1, 4, 3), (1, 4, 1), (1, 1, 1),
                                     (6, 1, 2), (16, 5000, 16), (3, 70001, 2), (64, 5000, 64)])
@pytest.mark.parametrize("a_order, b_order", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F")])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rt_gemm_matches_numpy(gemm_beta, m, k, n, a_order, b_order, dtype):
    # rt.gemm goes to gemv for one column or one row, and splits a long k
    # into chunks for a small result (16 x 5000 x 16: a last chunk shorter
    # than the others; 64 x 5000 x 64: not split): every layout of both
    # operands, beta 0 (out not read) and 1 (accumulate)
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = np.asarray(rng.standard_normal((m, k)), dtype=dtype, order=a_order)
    b = np.asarray(rng.standard_normal((k, n)), dtype=dtype, order=b_order)
    start = rng.standard_normal((m, n)).astype(dtype)
    rtol = (1e-5 if dtype == np.float32 else 1e-13) * max(1.0, np.sqrt(k) / 10)
    out = np.full((m, n), np.nan, dtype=dtype)
    gemm_beta(a, b, out, 0.0)
    np.testing.assert_allclose(out, a @ b, rtol=rtol, atol=rtol)
    out = start.copy()
    gemm_beta(a, b, out, 1.0)
    np.testing.assert_allclose(out, start + a @ b, rtol=rtol, atol=rtol)


def test_pytree_arguments_take_the_generated_path():
    # dicts, tuples and a static value are unpacked by the plan's generated
    # gradient (no pytree flattening): same result as the numpy backend, no
    # allocation per call; a different static or a missing key reaches the
    # general path, which names the argument and leaves the result untouched
    from hybridad.testing import count_allocations

    def loss(p, x, n):
        return np.sum(np.tanh(p["w"] * x)) ** n + np.sum(p["b"][0] * p["b"][1])

    rng = np.random.default_rng(7)
    p = {"w": rng.random(6), "b": (rng.random(3), rng.random(3))}
    x = rng.random(6)
    plan = ha.compile(loss, p, x, 2)
    assert "_sV0" in plan.gradient.source  # the static is checked by the fast path
    res = plan.new_result()
    plan.gradient(p, x, 2, out=res)
    ref = ha.gradient(loss, p, x, 2, backend="numpy")
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-13)
    np.testing.assert_allclose(res.gradient["w"], ref.gradient["w"], rtol=1e-12)
    for got, want in zip(res.gradient["b"], ref.gradient["b"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with count_allocations() as counts:
        for _ in range(20):
            plan.gradient(p, x, 2, out=res)
    assert counts.allocations == 0, counts
    before = res.gradient["w"].copy()
    with pytest.raises(ValueError, match="argument 'n'"):
        plan.gradient(p, x, 3, out=res)
    with pytest.raises(ValueError, match="argument 'p'"):
        plan.gradient({"w": p["w"], "c": p["b"]}, x, 2, out=res)
    np.testing.assert_array_equal(res.gradient["w"], before)
