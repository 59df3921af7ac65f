"""Every op: value against numpy, gradient against central finite differences,
at several shapes (broadcasting, size-1 axes).  Elementwise cases are generated
from the op registry, so a new op is tested by declaring it."""

import numpy as np
import pytest
from conftest import assert_grad, assert_same_as_reference, rand

import hybridad as ha
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import derived

UNARY = sorted(n for n, op in REGISTRY.items() if op.ufunc is not None and op.ufunc.nin == 1
               and op.partials[0] is not None)
BINARY = sorted(n for n, op in REGISTRY.items() if op.ufunc is not None and op.ufunc.nin == 2
                and any(p is not None for p in op.partials))
SHAPES = [(), (5,), (3, 4)]
BROADCAST_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (5,)),
                   ((2, 1, 3), (4, 1))]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, shape):
    """The op's value and gradient on the numpy reference backend, against
    numpy and central differences (the compiled backend: below, all ops of a
    shape in one plan)."""
    op = REGISTRY[name]
    lo, hi = op.domain
    w = rand(shape, seed=1)

    def f(x):
        return np.sum(op.ufunc(x) * w)

    assert_grad(f, (rand(shape, lo, hi),), backends=("numpy",))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("name", BINARY)
def test_binary(name, shapes):
    op = REGISTRY[name]
    lo, hi = op.domain
    x, y = rand(shapes[0], lo, hi, seed=2), rand(shapes[1], lo, hi, seed=3)
    w = rand(np.broadcast_shapes(*shapes), seed=4)

    def f(x, y):
        return np.sum(op.ufunc(x, y) * w)

    # zeta: its order has no rule
    assert_grad(f, (x, y), argnums=derived(op), backends=("numpy",))


def _same_on_numba(names, operands, argnums):
    """Every op of ``names`` in ONE plan per backend (one numba compile for the
    family): ``f = sum_k sum(op_k(*operands[k][:-1]) * operands[k][-1])``, so
    ``df/dw_k`` is op ``k``'s value at each element and ``df/dx_k`` its
    derivative there; the numba plan's value and every gradient equal the numpy
    reference's (the one :func:`test_unary` / :func:`test_binary` check
    against numpy and finite differences) to rounding, each named by its op."""
    ops = [REGISTRY[n].ufunc for n in names]
    sizes = [len(o) for o in operands]
    flat = [a for o in operands for a in o]

    def f(*args):
        total, at = 0.0, 0
        for op, k in zip(ops, sizes, strict=True):
            *xs, w = args[at:at + k]
            total = total + np.sum(op(*xs) * w)
            at += k
        return total

    starts = np.cumsum([0] + sizes[:-1])
    nums = tuple(int(s) + j for s, a in zip(starts, argnums, strict=True) for j in a)
    ref, got = (ha.gradient(f, *flat, argnums=nums, backend=b) for b in ("numpy", "numba"))
    assert_same_as_reference(got, ref, "numba",
                             [n for n, a in zip(names, argnums, strict=True) for _ in a])


#: ops per numba plan: a plan per op pays numba's fixed cost of a compile
#: (~0.3 s each, 600 of them), one plan of all 68 unary ops a function so
#: long that it compiles slower per op (0.37 s; the binary ops' 1.4 s);
#: a dozen is near the least per op (0.23 s)
CHUNK = 12


def _chunks(names):
    return [tuple(names[i:i + CHUNK]) for i in range(0, len(names), CHUNK)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("names", _chunks(UNARY), ids=lambda c: f"{c[0]}..{c[-1]}")
def test_unary_ops_compile_on_numba_as_the_reference_runs_them(names, shape):
    operands = [(rand(shape, *REGISTRY[n].domain), rand(shape, seed=1)) for n in names]
    _same_on_numba(names, operands, [(0, 1)] * len(names))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("names", _chunks(BINARY), ids=lambda c: f"{c[0]}..{c[-1]}")
def test_binary_ops_compile_on_numba_as_the_reference_runs_them(names, shapes):
    operands, argnums = [], []
    for n in names:
        op = REGISTRY[n]
        lo, hi = op.domain
        operands.append((rand(shapes[0], lo, hi, seed=2), rand(shapes[1], lo, hi, seed=3),
                         rand(np.broadcast_shapes(*shapes), seed=4)))
        argnums.append(tuple(derived(op)) + (2,))
    _same_on_numba(names, operands, argnums)


# --------------------------------------------------------------------------
# operators with Python scalars and arrays, both ways
# --------------------------------------------------------------------------
OPERATOR_CASES = {
    "add": lambda x, y: x + y + 2.0 + (3 + x),
    "sub": lambda x, y: x - y - 1.5 - (2 - x),
    "mul": lambda x, y: x * y * 2 * (0.5 * x),
    "div": lambda x, y: x / y / 2.0 + 1.0 / y,
    "pow": lambda x, y: x ** y + x ** 2 + x ** 3 + x ** 0.5 + x ** -1 + 2.0 ** x,
    "neg_pos_abs": lambda x, y: -x + (+y) + abs(x - 0.1),
    "mixed_array_const": lambda x, y: x * np.arange(1.0, 4.0) + np.ones(3) / y,
}


@pytest.mark.parametrize("name", sorted(OPERATOR_CASES))
def test_operators(name):
    fn = OPERATOR_CASES[name]
    x, y = rand((3,), 0.5, 2.0, seed=5), rand((3,), 0.5, 2.0, seed=6)
    assert_grad(lambda x, y: np.sum(fn(x, y)), (x, y), argnums=(0, 1))


def test_where_and_comparisons():
    def f(x, y):
        mask = (x > y) & (x < 1.5)
        return np.sum(np.where(mask, x * x, y * 3.0) + np.where(x >= 0, x, 0.0) *
                      (x != y))

    assert_grad(f, (rand((4, 3), seed=7), rand((3,), seed=8)), argnums=(0, 1))


# --------------------------------------------------------------------------
# reductions with axis and keepdims
# --------------------------------------------------------------------------
AXES = [None, 0, 1, -1, (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("fn", [np.sum, np.mean, np.prod, np.max, np.min, np.amax])
def test_reductions(fn, axis, keepdims):
    x = rand((2, 3, 4), 0.5, 1.5, seed=9)
    w = rand(np.sum(x, axis=axis, keepdims=keepdims).shape, seed=10)
    assert_grad(lambda x: np.sum(fn(x, axis=axis, keepdims=keepdims) * w), (x,))


def test_prod_with_zeros_exact():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 4.0]])
    res = assert_grad(lambda x: np.sum(np.prod(x, axis=1)), (x,))
    np.testing.assert_array_equal(res.gradient, [[0, 6, 0], [0, 0, 0], [8, 4, 2]])


def test_max_ties_split_equally():
    import hybridad as ha

    res = ha.gradient(lambda x: np.max(x), np.array([1.0, 3.0, 3.0, 2.0]))
    np.testing.assert_array_equal(res.gradient, [0, 0.5, 0.5, 0])
    res = ha.gradient(lambda x: np.sum(np.maximum(x, 1.0)), np.array([1.0, 2.0, 0.0]))
    np.testing.assert_array_equal(res.gradient, [0.5, 1, 0])


def test_method_forms():
    def f(x):
        return np.sum(x.sum(axis=0) * x.mean(axis=1).sum() + x.max() - x.min(axis=0).prod() +
                x.T.dot(x[:, 0]).sum() + x.reshape(-1)[::2].sum() + x.ravel().sum())

    assert_grad(f, (rand((3, 4), 0.5, 1.5, seed=11),))


# --------------------------------------------------------------------------
# linear algebra
# --------------------------------------------------------------------------
MATMUL_SHAPES = [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((3, 4), (4, 2)),
                 ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 2)),
                 ((2, 3, 4), (4,))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES)
def test_matmul(shapes):
    a, b = rand(shapes[0], seed=12), rand(shapes[1], seed=13)
    w = rand(np.matmul(a, b).shape, seed=14)
    assert_grad(lambda a, b: np.sum((a @ b) * w) + np.sum(np.matmul(a, b)), (a, b),
                argnums=(0, 1))


@pytest.mark.parametrize("fn,shapes", [
    (np.dot, ((4,), (4,))), (np.dot, ((3, 4), (4, 2))), (np.dot, ((3, 4), (4,))),
    (np.dot, ((), (3,))), (np.dot, ((2, 3, 4), (5, 4, 2))),
    (np.outer, ((3,), (4,))), (np.outer, ((2, 2), (3,))),
    (np.inner, ((4,), (4,))), (np.inner, ((2, 4), (3, 4))),
    (np.vdot, ((2, 3), (2, 3))),
])
def test_products(fn, shapes):
    a, b = rand(shapes[0], seed=15), rand(shapes[1], seed=16)
    w = rand(np.shape(fn(a, b)), seed=17)
    assert_grad(lambda a, b: np.sum(fn(a, b) * w), (a, b), argnums=(0, 1))


def test_quadratic_forms_loop_over_list():
    A = [rand((5, 5), seed=s) for s in range(3)]

    def f(x, A):
        return sum(x @ (Ak @ x) for Ak in A)

    assert_grad(f, (rand((5,), seed=18), A))


# --------------------------------------------------------------------------
# shape ops and indexing
# --------------------------------------------------------------------------
SHAPE_CASES = {
    "reshape": lambda x: np.reshape(x, (4, 3)) * np.arange(12.0).reshape(4, 3),
    "reshape_neg1": lambda x: x.reshape(2, -1) ** 2,
    "transpose": lambda x: np.transpose(x) * np.arange(12.0).reshape(4, 3),
    "T": lambda x: x.T @ x,
    "transpose_reshape_copy": lambda x: np.reshape(x.T, (12,)) * np.arange(12.0),
    "broadcast_to": lambda x: np.broadcast_to(x[0], (5, 4)) * np.arange(20.0).reshape(5, 4),
    "expand_dims": lambda x: np.expand_dims(x, 1) * np.ones((3, 2, 4)),
    "squeeze": lambda x: np.squeeze(x[:, :1]) * np.array([1.0, 2.0, 3.0]),
    "slices": lambda x: x[1:] - x[:-1] + x[::2].sum() + x[:, ::-1][1:, 1:3].sum(),
    "int_index": lambda x: x[1] * x[0, 2] + x[-1, -1] + x[..., 1].sum() + x[None, 2].sum(),
    "concatenate": lambda x: np.concatenate([x, x ** 2, x[:1]], axis=0) * 1.5,
    "concatenate_axis1": lambda x: np.concatenate([x, np.sin(x)], axis=1),
    "stack": lambda x: np.stack([x, 2 * x, x[::-1]], axis=1),
    "iterate_rows": lambda x: np.stack([r * i for i, r in enumerate(x)]),
    "swapaxes_moveaxis": lambda x: (np.swapaxes(x[None], 0, 2) *
                                  np.moveaxis(x[None], 0, -1).transpose(1, 0, 2)),
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
def test_shape_ops(name):
    fn = SHAPE_CASES[name]
    x = rand((3, 4), seed=19)
    w = rand(np.shape(fn(x)), seed=20)
    assert_grad(lambda x: np.sum(fn(x) * w), (x,))


def test_noncontiguous_and_float32_inputs():
    import hybridad as ha

    base = rand((8, 6), 0.5, 1.5, seed=21)

    def f(x):
        return np.sum(np.exp(x) * x[..., :1])

    for x in (base[::2, ::3], base.T[::2], base[:, 1]):
        expected = ha.gradient(f, np.ascontiguousarray(x)).gradient
        np.testing.assert_allclose(ha.gradient(f, x).gradient, expected, rtol=1e-15)
    x32 = base.astype(np.float32)[::2]
    res = ha.gradient(f, x32)
    assert res.gradient.dtype == np.float32 and res.value.dtype == np.float32
    np.testing.assert_allclose(res.gradient, ha.gradient(f, x32.astype(np.float64)).gradient,
                               rtol=2e-5)


def test_nan_inf_propagate():
    import hybridad as ha

    x = np.array([np.nan, np.inf, 1.0, -np.inf, 0.0])
    res = ha.gradient(lambda x: np.sum(np.exp(x) + np.log(x) + x / x), x)
    assert np.isnan(float(res.value))
    assert np.isnan(res.gradient[0]) and np.isfinite(res.gradient[2])


# integer and boolean max/min (np.any, np.all, argmax) start from their dtype's
# extremes: the numba backend began them at +-inf cast to the dtype (np.any of
# all-False was True, an int64 min was 0) -- small arrays and blocked ones
_INT_REDUCTIONS = {
    "any_false": lambda x: np.any(x > 5),
    "any_true": lambda x: np.any(x > 0.9),
    "all_true": lambda x: np.all(x > -5),
    "all_false": lambda x: np.all(x > 0),
    "int_min": lambda x: np.min(np.where(x > 0, 2, 7)),
    "int_max": lambda x: np.max(np.where(x > 0, -2, -7)),
    "uint8_min": lambda x: np.min(np.where(x > 0, np.uint8(200), np.uint8(250))),
    "int_min_axis": lambda x: np.min(np.where(x > 0, 2, 7).reshape(-1, 1) +
                                     np.zeros((1, 3), np.int64), axis=0),
    "bool_max_axis": lambda x: np.any((x > 5).reshape(-1, 1) | np.zeros((1, 3), bool),
                                      axis=0),
}


@pytest.mark.parametrize("n", [5, 3000])
@pytest.mark.parametrize("name", sorted(_INT_REDUCTIONS))
def test_integer_and_boolean_extrema(name, n):
    red = _INT_REDUCTIONS[name]
    x = np.random.default_rng(n).uniform(-1, 1, n)

    def f(x):
        return np.sum(x) + 0.5 * np.sum(red(x))

    for backend in ("numpy", "numba"):
        res = ha.gradient(f, x, backend=backend)
        np.testing.assert_allclose(float(res.value), f(x), rtol=1e-12, err_msg=backend)
        np.testing.assert_allclose(res.gradient, np.ones(n), rtol=0, atol=0)
