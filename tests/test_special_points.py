"""Values and derivatives at special points: where numpy's value is defined and
smooth, the derivative is the derivative of that value.

* ``x**0`` at 0 and polynomials through 0 (gradient and Hessian);
* ``np.std`` of one element (identically 0);
* ``np.fmax``/``np.fmin`` against NaN (the derivative goes to the number returned);
* ``np.where``'s untaken branch never poisons the result: for every elementwise
  op of the registry, inf and NaN (singular points, overflow, NaN inputs) in
  the branch ``np.where`` does not take give derivative 0 there, through fused
  regions, through reverse nodes and in Hessians, on both CPU backends;
* a zero (co)tangent carries nothing (the chain rule's product: 0 * inf = 0).
"""

import numpy as np
import pytest

import hybridad as ha
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import derived

from conftest import BACKENDS


def _differentiable(op, nin):
    return (op.kind == "elementwise" and isinstance(op.ufunc, np.ufunc) and op.ufunc.nin == nin
            and op.dual is None and any(callable(p) for p in op.partials)
            and len(derived(op)) == nin)  # (zeta's order has no rule)


UNARY = sorted(n for n, op in REGISTRY.items() if _differentiable(op, 1))
BINARY = sorted(n for n, op in REGISTRY.items() if _differentiable(op, 2))
#: values where some op is singular, overflows or is undefined
POISON = np.array([0.0, -1.0, 1.0, -3.0, 1e3, -1e3, np.inf, -np.inf, np.nan])


def _taken(name, n):
    lo, hi = REGISTRY[name].domain
    return np.linspace(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo), n)


# --------------------------------------------------------------------------
# powers at 0
# --------------------------------------------------------------------------
C = np.array([1.0, 2.0, 3.0, 4.0])


def _poly(x):
    return np.sum(sum(C[k] * x ** k for k in range(4)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_powers_at_zero(backend):
    x = np.array([0.0, 0.0, 1.5])
    for f in (lambda x: np.sum(x ** 0), lambda x: np.sum(np.power(x, 0.0)),
              lambda x: np.sum(np.power(x, np.zeros(3)))):
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_array_equal(res.gradient, 0.0)
    res = ha.hessian(_poly, x, backend=backend)
    # d/dx = 2 + 6x + 12x^2, d2/dx2 = 6 + 24x
    np.testing.assert_allclose(res.gradient, 2 + 6 * x + 12 * x ** 2, rtol=1e-14)
    np.testing.assert_allclose(res.hessian, np.diag(6 + 24 * x), rtol=1e-14, atol=0)
    # the exponent's derivative at x = 0 stays 0 (0**y is 0 for y > 0)
    res = ha.gradient(lambda y: np.sum(np.power(np.zeros(2), y)), np.array([1.0, 2.5]),
                      backend=backend)
    np.testing.assert_array_equal(res.gradient, 0.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_hypot_at_the_origin_is_abs_at_zero(backend, dtype):
    """hypot(x, 0) is |x|: at the origin its derivative is abs's at 0 and
    np.linalg.norm's at a zero vector (0), not 0 / 0; a composite that is
    constant there (hypot(x - x, x - x), which a property test drew) has
    derivative 0 as finite differences say.  Elsewhere x / hypot, y / hypot."""
    x = np.array([0.0, 0.0, 3.0], dtype)
    for f in (lambda x: np.sum(np.hypot(x, 0 * x)), lambda x: np.sum(np.abs(x)),
              lambda x: np.linalg.norm(x[:2])):
        np.testing.assert_array_equal(ha.gradient(f, x, backend=backend).gradient[:2], 0.0)
    g = ha.gradient(lambda x: np.sum(np.hypot(x - x, x - x)), x, backend=backend).gradient
    np.testing.assert_array_equal(g, 0.0)
    y = np.array([4.0, -1.0, 0.0], dtype)
    res = ha.gradient(lambda x, y: np.sum(np.hypot(x, y)), x, y, argnums=(0, 1), backend=backend)
    h, tol = np.hypot(x, y), 1e-15 if dtype == np.float64 else 1e-6
    for g, v in zip(res.gradient, (x, y), strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, np.where(h == 0, 0, v / np.where(h == 0, 1, h)), rtol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, base", [(np.logaddexp, np.e), (np.logaddexp2, 2.0)])
def test_logaddexp_at_infinities_is_its_limit(backend, dtype, op, base):
    """d/dx logaddexp(x, y) = 1 / (1 + base**(y - x)): 1 at x = +inf with y
    finite (as jax gives), where exp(x - ans) was exp(inf - inf) = NaN; one
    half at x == y, equal infinities too; NaN in, NaN out.  Elsewhere the
    closed form, and the Hessian against differences of the gradient."""
    x = np.array([np.inf, np.inf, -np.inf, 3.0, 0.5, -2.0, np.nan], dtype)
    y = np.array([0.0, np.inf, -np.inf, -700.0, 0.5, 40.0, 1.0], dtype)
    res = ha.gradient(lambda x, y: np.sum(op(x, y)), x, y, argnums=(0, 1), backend=backend)
    with np.errstate(all="ignore"):
        want = 1 / (1 + base ** (y.astype(np.float64) - x))
    want[[1, 2, 4]] = 0.5
    tol = 1e-15 if dtype == np.float64 else 1e-6
    for g, w in ((res.gradient[0], want), (res.gradient[1], 1 - want)):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    # second order at finite points, equal ones too (s (1 - s) = 1/4 there: the
    # autograd suite's Hessians of logaddexp at x == y caught a rule that gave 0)
    c = np.array([0.4, 0.4, -1.0])
    hc = ha.hessian(lambda x: np.sum(op(x, c)), c.copy(), backend=backend).hessian
    s = 1 / (1 + base ** (c - c))
    np.testing.assert_allclose(np.diag(hc), s * (1 - s) * np.log(base), rtol=1e-14)
    from hybridad.testing import numerical_gradient

    z = np.array([0.3, -1.2, 2.0])
    f = lambda z: np.sum(op(z, 0.7 * z[::-1]) ** 2)  # noqa: E731
    h = ha.hessian(f, z, backend=backend).hessian
    grad = lambda z: ha.gradient(f, z, backend="numpy").gradient  # noqa: E731
    fd = np.array([numerical_gradient(lambda t, i=i: grad(t)[i], z.copy()) for i in range(3)])
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sinc_near_zero_is_accurate(backend, dtype):
    """d/dx sinc at 1e-8 was 55 % off and 0 at 1e-10 (``(t cos t - sin t) /
    t^2`` cancels); near 0 sinc is its Taylor series: value numpy's to
    rounding, derivative and second derivative the exact ones."""
    x = np.array([0.0, 1e-10, -1e-8, 2e-7, 1e-4, 3e-3, 0.06, -0.3, 0.7, 2.5], dtype)
    res = ha.gradient(lambda x: np.sum(np.sinc(x)), x, backend=backend)
    t = np.pi * x.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = np.where(np.abs(t) < 0.1, -t / 3 + t ** 3 / 30 - t ** 5 / 840 + t ** 7 / 45360,
                         (t * np.cos(t) - np.sin(t)) / np.where(t == 0, 1, t * t)) * np.pi
    tol = 1e-13 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(res.gradient, exact, rtol=tol, atol=1e-300 if
                               dtype == np.float64 else 1e-7)
    np.testing.assert_allclose(float(res.value), np.sum(np.sinc(x)), rtol=tol)
    h = ha.hessian(lambda x: np.sum(np.sinc(x)), x[:4].astype(np.float64), backend=backend)
    np.testing.assert_allclose(np.diag(h.hessian), -np.pi ** 2 / 3 * np.ones(4), rtol=1e-9)


# --------------------------------------------------------------------------
# std of one element, fmax / fmin against NaN
# --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_std_of_one_element_is_flat(backend):
    res = ha.hessian(lambda x: np.std(x) + x ** 2, np.array(2.0), backend=backend)
    assert float(res.gradient) == 4.0 and np.ravel(res.hessian).tolist() == [2.0]
    for x, f in [(np.ones((3, 1)), lambda x: np.sum(np.std(x, axis=1))),
                 (np.ones((1, 4)), lambda x: np.sum(np.std(x, axis=0) * x[0])),
                 (np.ones((2, 1)), lambda x: np.sum(np.std(x, axis=-1, ddof=0) ** 2))]:
        res = ha.hessian(f, x, backend=backend)
        expected = ha.hessian(lambda x: np.sum(x * 0.0), x, backend="numpy")
        assert np.all(np.isfinite(res.gradient)) and np.all(np.isfinite(res.hessian))
        np.testing.assert_array_equal(res.gradient, expected.gradient)
        np.testing.assert_array_equal(res.hessian, expected.hessian)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fmax_fmin_against_nan(backend):
    nan = np.nan
    x = np.array([2.0, nan, 1.0, 3.0, nan])
    y = np.array([nan, 2.0, 1.0, -1.0, nan])
    for fn in (np.fmax, np.fmin):
        res = ha.gradient(lambda x, y: np.sum(fn(x, y) * np.array([1, 2, 3, 4, 5.0])), x, y,
                          argnums=(0, 1), backend=backend)
        gx, gy = res.gradient
        # x wins against NaN, y against NaN, tie splits, both NaN: NaN result
        assert gx[0] == 1.0 and gy[0] == 0.0
        assert gx[1] == 0.0 and gy[1] == 2.0
        assert gx[2] == gy[2] == 1.5
        assert (gx[3], gy[3]) == ((4.0, 0.0) if fn is np.fmax else (0.0, 4.0))
        assert gx[4] == 0.0 and gy[4] == 0.0


# --------------------------------------------------------------------------
# np.where: the untaken branch never enters
# --------------------------------------------------------------------------
def _unary_where_case():
    """x (ops, points): row k goes through op k; the first columns are taken
    (inside the op's domain), the rest hold POISON and are not."""
    m = 3
    x = np.empty((len(UNARY), m + len(POISON)))
    for k, name in enumerate(UNARY):
        x[k, :m] = _taken(name, m)
        x[k, m:] = POISON
    mask = np.zeros(x.shape, bool)
    mask[:, :m] = True
    fns = [REGISTRY[n].ufunc for n in UNARY]

    def f(x):
        return sum(np.sum(np.where(mask[k], fn(2.0 * x[k] - x[k]), 0.0))
                   for k, fn in enumerate(fns))

    def f_flipped(x):  # the taken branch second
        return sum(np.sum(np.where(~mask[k], -1.0, fn(x[k]) * 3.0)) for k, fn in enumerate(fns))

    def plain(x):  # the same ops on the taken points only: the reference
        return sum(np.sum(fn(x[k, :m])) for k, fn in enumerate(fns))

    return x, mask, m, f, f_flipped, plain


@pytest.mark.parametrize("backend", [
    "numpy", pytest.param("numba", marks=pytest.mark.slow)])  # numba: 60 s of compiles
def test_where_untaken_branch_unary_ops(backend):
    x, mask, m, f, f_flipped, plain = _unary_where_case()
    ref = ha.gradient(plain, x, backend="numpy").gradient
    for fn, scale in ((f, 1.0), (f_flipped, 3.0)):
        res = ha.gradient(fn, x, backend=backend)
        assert np.isfinite(float(res.value)), fn
        np.testing.assert_array_equal(res.gradient[:, m:], 0.0)
        np.testing.assert_allclose(res.gradient[:, :m], scale * ref[:, :m], rtol=1e-13,
                                   err_msg=str(UNARY))


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_untaken_branch_hessian(backend):
    x, mask, m, f, _, plain = _unary_where_case()
    rows = slice(0, None, 3)  # a third of the ops (a Hessian of every op is slow to build)
    x = np.ascontiguousarray(x[rows])
    mask = mask[rows]
    fns = [REGISTRY[n].ufunc for n in UNARY[rows]]

    def g(x):
        return sum(np.sum(np.where(mask[k], fn(x[k]), 0.0)) for k, fn in enumerate(fns))

    def ref_f(x):
        return sum(np.sum(fn(x[k])) for k, fn in enumerate(fns))

    res = ha.hessian(g, x, backend=backend)
    ref = ha.hessian(ref_f, np.where(mask, x, 1.5), backend="numpy")  # 1.5: any finite point
    h = res.hessian.reshape(x.size, x.size)
    keep = mask.ravel()
    assert np.all(np.isfinite(h)) and np.all(np.isfinite(res.gradient))
    np.testing.assert_array_equal(h[~keep], 0.0)
    np.testing.assert_array_equal(h[:, ~keep], 0.0)
    np.testing.assert_allclose(h[np.ix_(keep, keep)],
                               ref.hessian.reshape(x.size, x.size)[np.ix_(keep, keep)],
                               rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_untaken_branch_binary_ops(backend):
    m = 2
    a = np.empty((len(BINARY), m + len(POISON)))
    b = np.empty_like(a)
    for k, name in enumerate(BINARY):
        a[k, :m] = b[k, :m] = _taken(name, m)
        b[k, :m] += 0.05  # off the ties of maximum, minimum, ...
        a[k, m:] = POISON
        b[k, m:] = POISON[::-1]
    mask = np.zeros(a.shape, bool)
    mask[:, :m] = True
    fns = [REGISTRY[n].ufunc for n in BINARY]

    def f(a, b):
        return sum(np.sum(np.where(mask[k], fn(a[k], b[k]), 0.0)) for k, fn in enumerate(fns))

    def plain(a, b):
        return sum(np.sum(fn(a[k, :m], b[k, :m])) for k, fn in enumerate(fns))

    res = ha.gradient(f, a, b, argnums=(0, 1), backend=backend)
    ref = ha.gradient(plain, a, b, argnums=(0, 1), backend="numpy")
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_array_equal(g[:, m:], 0.0)
        np.testing.assert_allclose(g[:, :m], r[:, :m], rtol=1e-13, err_msg=str(BINARY))


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_untaken_branch_through_reverse_nodes(backend):
    """The branch not taken is a reduction, a matmul or a cumsum of a singular
    function: its zero cotangent meets the infinite partials in the backward
    sweep, outside any fused region."""
    x = np.array([0.0, 4.0, 1.0])
    A = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    cases = [
        (lambda x: np.where(x[0] > 0, np.sum(np.sqrt(x)), 0.0), [0.0, 0.0, 0.0]),
        (lambda x: np.sum(np.where(A @ x > 0, np.sqrt(A @ x), 0.0)), [0.0, 0.25, 0.0]),
        (lambda x: np.sum(np.where(np.array([False, False, True]),
                                   np.log(np.cumsum(x) - 4.0), 0.0)), [1.0, 1.0, 1.0]),
        (lambda x: np.where(x[1] > 0, 1.0, np.max(np.log(x))) + np.sum(x), [1.0, 1.0, 1.0]),
    ]
    for f, expected in cases:
        res = ha.gradient(f, x, backend=backend)
        assert np.all(np.isfinite(res.gradient)), (f, res.gradient)
        if expected is not None:
            np.testing.assert_array_equal(res.gradient, expected)
        h = ha.hessian(f, x, backend=backend).hessian
        assert np.all(np.isfinite(h)), (f, h)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_cotangent_carries_nothing(backend):
    """A zero weight stops an infinite partial (``sqrt`` at 0), and a zero
    partial stops an infinite tangent (``sqrt(x**2)`` at 0)."""
    w = np.array([0.0, 1.0])
    res = ha.gradient(lambda x: np.sum(w * np.sqrt(x)), np.array([0.0, 4.0]), backend=backend)
    np.testing.assert_array_equal(res.gradient, [0.0, 0.25])
    res = ha.gradient(lambda x: np.sum(np.sqrt(x ** 2)), np.array([0.0, -2.0]), backend=backend)
    np.testing.assert_array_equal(res.gradient, [0.0, -1.0])
    # NaN and inf in the *taken* computation still propagate as IEEE says
    res = ha.gradient(lambda x: np.sum(np.sqrt(x)), np.array([0.0, np.nan]), backend=backend)
    assert res.gradient[0] == np.inf and np.isnan(res.gradient[1])


# --------------------------------------------------------------------------
# second order through broadcasting
# --------------------------------------------------------------------------
_BROADCAST_HESSIANS = {
    # (function of (p, a), p's shape, a's shape)
    "matmul_vec_stack": (lambda B, a: np.sum(np.matmul(a, B) ** 2), (2, 3, 4), (3,)),
    "matmul_stack_vec": (lambda B, a: np.sum(np.tanh(np.matmul(B, a))), (2, 4, 3), (3,)),
    "matmul_mat_stack": (lambda B, a: np.sum(np.matmul(a.reshape(1, 3), B) ** 3),
                         (2, 3, 2), (3,)),
    "matmul_stack_mat": (lambda B, a: np.sum(np.sin(B @ np.outer(a, a))), (2, 3, 3), (3,)),
    "matmul_bcast_batch": (lambda B, a: np.sum((B @ np.stack([np.outer(a, a)] * 2)) ** 2),
                           (2, 3, 3), (3,)),
    "dot_3d": (lambda B, a: np.sum(np.dot(a.reshape(1, 3), B) ** 2), (2, 3, 2), (3,)),
    "einsum": (lambda B, a: np.sum(np.einsum("kij,j->ki", B, a) ** 2), (2, 3, 3), (3,)),
    "elementwise_bcast": (lambda B, a: np.sum(np.exp(B * a) / (1 + a)), (2, 3), (3,)),
    "reduce_bcast": (lambda B, a: np.sum(np.prod(B + a, axis=0) ** 2), (2, 3), (3,)),
}


@pytest.mark.parametrize("name", sorted(_BROADCAST_HESSIANS))
def test_hessians_through_broadcasting(name):
    """Forward over reverse through broadcast operands (batch rules of the
    tangent chunks): against central differences of the gradient, for the
    differentiated argument of either shape."""
    f, sp, sa = _BROADCAST_HESSIANS[name]
    rng = np.random.default_rng(7)
    p, a = rng.uniform(0.2, 1.0, sp), rng.uniform(0.2, 1.0, sa)
    for argnum in (0, 1):
        args = [p, a]
        x = args[argnum]
        res = ha.hessian(f, *args, argnums=argnum, backend="numpy")
        h = res.hessian.reshape(x.size, x.size)
        num = np.empty_like(h)
        eps = 1e-6
        for i in range(x.size):
            d = np.zeros(x.size)
            d[i] = eps
            hi, lo = list(args), list(args)
            hi[argnum] = x + d.reshape(x.shape)
            lo[argnum] = x - d.reshape(x.shape)
            num[:, i] = (ha.gradient(f, *hi, argnums=argnum, backend="numpy").gradient -
                         ha.gradient(f, *lo, argnums=argnum, backend="numpy").gradient
                         ).ravel() / (2 * eps)
        np.testing.assert_allclose(h, num, rtol=1e-5, atol=1e-6, err_msg=f"{name}, {argnum}")
        np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
