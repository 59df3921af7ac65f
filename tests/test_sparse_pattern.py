"""Sparsity detection (hybridad/sparse/pattern.py, rules.py, probe.py): the
detected pattern against the nonzeros of dense AD Jacobians and Hessians
(the numpy reference backend: no compilation), on every named op family and
on random compositions of them -- never a missing nonzero, and for these ops
no spurious one."""

import numpy as np
import pytest
import scipy.sparse as sp

import hybridad as ha
from hybridad.ir.registry import REGISTRY
from hybridad.sparse import rules
from hybridad.sparse.probe import elementwise_pairs

RNG = np.random.default_rng(20240517)


def _point(n, seed):
    return np.random.default_rng(seed).uniform(0.5, 1.5, n)


def _dense_jacobian_nonzeros(f, x, *args, points=3):
    """Nonzeros of the dense Jacobian at a few random points (their union)."""
    nz = None
    for k in range(points):
        xk = _point(x.size, 100 + k).reshape(x.shape)
        jac = ha.jacobian(f, xk, *args, backend="numpy").jacobian != 0
        nz = jac if nz is None else nz | jac
    return nz


def _dense_hessian_nonzeros(f, x, *args, points=3):
    nz = None
    for k in range(points):
        xk = _point(x.size, 200 + k).reshape(x.shape)
        h = ha.hessian(f, xk, *args, backend="numpy").hessian != 0
        nz = h if nz is None else nz | h
    return nz


def _check(pattern, dense, exact):
    p = pattern.toarray()
    assert pattern.dtype == bool and pattern.has_sorted_indices
    missing = dense & ~p
    assert not missing.any(), f"missing nonzeros at {np.argwhere(missing)[:5].tolist()}"
    if exact:
        spurious = p & ~dense
        assert not spurious.any(), f"spurious nonzeros at {np.argwhere(spurious)[:5].tolist()}"


IDX = np.array([3, 0, 7, 7, 2, 9, 1])
A_SPARSE = np.zeros((5, 12))
A_SPARSE[0, [1, 4]] = 1.5
A_SPARSE[1, 11] = -2.0
A_SPARSE[2, [0, 5, 6]] = 0.5
A_SPARSE[3, 3] = 1.0
A_SPARSE[4, [2, 10]] = 3.0


def _scatter_add(x):
    z = np.sin(x[:10]) * 1.0
    np.add.at(z, IDX, x[5:12] ** 2)
    return z


def _index_add(x):
    y = x * 2.0
    y[IDX] += np.exp(x[:7])
    return y


def _gradient_of_gathers_and_cumprods(x):
    """A gradient traced inside f: its reverse pass scatters (flat positions of
    a 2-D row gather, strided views) and runs cumprod's adjoint."""
    def inner(z):
        m = z.reshape(3, 4)
        return (np.sum(z[IDX] ** 3) + np.sum(z[IDX[::-1]] * z[:7]) +
                np.sum(np.cumprod(z[:6] + 2.0)) + np.sum(np.cumprod(m, axis=1) ** 2) +
                np.sum(m[np.array([0, 2, 2])] ** 2) + np.sum(m[1:, ::2] * m[:2, 1::2]))

    return ha.gradient(inner, x).gradient


#: name -> (function of x (12 elements), exact)
JACOBIAN_CASES = {
    "elementwise": (lambda x: np.sin(x) * np.exp(x[::-1]) + x ** 3 / (1 + x * x), True),
    "broadcast": (lambda x: (x.reshape(3, 4) * x[:4] + x.reshape(3, 4)[:, :1]).ravel(), True),
    "sum_axis": (lambda x: np.sum(x.reshape(3, 4) ** 2, axis=0), True),
    "sum_keepdims": (lambda x: (x.reshape(3, 4) / np.sum(x.reshape(3, 4), axis=1,
                                                          keepdims=True)).ravel(), True),
    "prod": (lambda x: np.prod(x.reshape(4, 3), axis=1), True),
    "mean_all": (lambda x: np.mean(np.tanh(x)) * x, True),
    "matmul_const_sparse": (lambda x: A_SPARSE @ np.sin(x), True),
    "matmul_const_left_2d": (lambda x: (x.reshape(3, 4) @ A_SPARSE[:4, :3]).ravel(), True),
    "matmul_both": (lambda x: (x.reshape(3, 4) @ x.reshape(4, 3)).ravel(), True),
    "slicing": (lambda x: np.concatenate([x[1:] - x[:-1], x[::3], x[::-1][2:5]]), True),
    "slicing_2d": (lambda x: x.reshape(3, 4)[1:, ::2].ravel() * x.reshape(3, 4)[:2, 1::2].ravel(),
                   True),
    "roll": (lambda x: np.roll(x, 2) * x + np.roll(x.reshape(3, 4), -1, axis=1).ravel(), True),
    "roll_2d_laplacian": (lambda x: (np.roll(x.reshape(3, 4), 1, 0) +
                                     np.roll(x.reshape(3, 4), -1, 1) -
                                     2 * x.reshape(3, 4) ** 2).ravel(), True),
    "gather": (lambda x: x[IDX] * x[IDX[::-1]], True),
    "take": (lambda x: np.take(x, IDX) + np.repeat(x[:3], 2).sum(), True),
    "scatter_add_at": (_scatter_add, True),
    "index_add": (_index_add, True),
    # the reverse pass's own ops (scatter_flat of a 2-D index raised a ValueError)
    "gradient_inside": (_gradient_of_gathers_and_cumprods, True),
    "bincount": (lambda x: np.bincount(IDX, weights=x[:7] ** 2, minlength=12) + x, True),
    "concatenate": (lambda x: np.concatenate([x[:3] ** 2, np.ones(2), x[5:] * x[0]]), True),
    "transpose": (lambda x: (x.reshape(3, 4).T * np.arange(1.0, 4.0)).ravel(), True),
    "tril_mask": (lambda x: np.tril(x.reshape(3, 4)).ravel() * 2.0, True),
    "where_const": (lambda x: np.where(np.arange(12) % 3 == 0, x ** 2, np.cos(x[::-1])), True),
    "const_factor_zeros": (lambda x: np.array([0.0, 1.0] * 6) * np.sin(x), True),
    "cumsum": (lambda x: np.cumsum(x.reshape(3, 4), axis=1).ravel(), True),
    "diff_pad": (lambda x: np.diff(np.pad(x, 1)) ** 2, True),
    # conservative (structurally right, denser than one point's Jacobian): a superset
    "max_axis": (lambda x: np.max(x.reshape(3, 4), axis=1), False),
    "sort": (lambda x: np.sort(x) * x, False),
    "solve": (lambda x: np.linalg.solve(np.eye(3) + 0.1 * x[:9].reshape(3, 3), x[9:]), False),
    "where_traced": (lambda x: np.where(x > 1.0, x ** 2, -x), False),
}


@pytest.mark.parametrize("name", sorted(JACOBIAN_CASES))
def test_jacobian_pattern(name):
    f, exact = JACOBIAN_CASES[name]
    x = _point(12, 1)
    pattern = ha.jacobian_sparsity(f, x)
    y = f(x)
    assert pattern.shape == (np.size(y), x.size)
    _check(pattern, _dense_jacobian_nonzeros(f, x), exact)


#: name -> scalar function of x (12 elements)
HESSIAN_CASES = {
    "chain": lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2) + np.sum(np.exp(x[::3])),
    "products": lambda x: np.sum(x[IDX] * x[IDX[::-1]]) + np.sum(x[:6] * x[6:]),
    "linear_parts": lambda x: np.sum(3.0 * x) + np.sum(np.maximum(x, 1.0)) + np.sum(x[:4] ** 2),
    "matmul_const": lambda x: np.sum(np.sin(A_SPARSE @ x)),
    "matmul_both": lambda x: np.sum(x.reshape(3, 4) @ x.reshape(4, 3)),
    "prod": lambda x: np.sum(np.prod(x.reshape(4, 3), axis=1)),
    "roll_energy": lambda x: np.sum((np.roll(x.reshape(3, 4), 1, 1) - x.reshape(3, 4)) ** 2),
    "division": lambda x: np.sum(x[:6] / (1.0 + x[6:] ** 2)),
    "reach": lambda x: (x ** 3)[2] + np.exp(x)[::4][1] + x[5] * x[7],
    "scatter": lambda x: np.sum(np.bincount(IDX, weights=x[:7], minlength=10) ** 2),
    "norm": lambda x: np.sqrt(np.sum(x[:5] ** 2)) + np.sum(np.abs(x)),
}


@pytest.mark.parametrize("name", sorted(HESSIAN_CASES))
def test_hessian_pattern(name):
    f = HESSIAN_CASES[name]
    x = _point(12, 2)
    pattern = ha.hessian_sparsity(f, x)
    assert pattern.shape == (12, 12)
    assert (pattern != pattern.T).nnz == 0  # symmetric, both triangles
    _check(pattern, _dense_hessian_nonzeros(f, x), exact=True)


# ----------------------------------------------------------------------------
# random compositions
# ----------------------------------------------------------------------------
def _random_function(seed):
    """A random composition of the exactly-handled op families on vectors
    (built so that no result element is a structural zero another op
    multiplies: then the pattern is exact)."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(rng.integers(4, 9)):
        kind = rng.choice(["unary", "binary", "matmul", "slice", "roll", "gather", "scatter",
                           "concat", "reduce"])
        steps.append((kind, int(rng.integers(0, 1 << 30))))

    def f(x):
        pool = [x]
        for kind, s in steps:
            r = np.random.default_rng(s)
            a = pool[r.integers(len(pool))]
            n = a.shape[0]
            if kind == "unary":
                op = [np.sin, np.exp, np.tanh, np.square, np.arctan][r.integers(5)]
                out = op(a)
            elif kind == "binary":
                b = pool[r.integers(len(pool))]
                b = b[np.arange(n) % b.shape[0]]
                out = [a * b, a + b, a / (1.0 + b * b)][r.integers(3)]
            elif kind == "matmul":
                m = int(r.integers(2, 8))
                mat = np.where(r.random((m, n)) < 0.3, r.normal(size=(m, n)), 0.0)
                mat[np.arange(m), r.integers(0, n, m)] = 1.0  # no empty row
                out = mat @ a
            elif kind == "slice":
                out = a[int(r.integers(0, max(n - 1, 1))):][::int(r.integers(1, 3))]
            elif kind == "roll":
                out = np.roll(a, int(r.integers(-3, 4))) * a
            elif kind == "gather":
                out = a[r.integers(0, n, int(r.integers(2, 10)))]
            elif kind == "scatter":
                b = pool[r.integers(len(pool))]
                z = np.cos(a) * 1.0
                np.add.at(z, r.integers(0, n, b.shape[0]), b)
                out = z
            elif kind == "concat":
                out = np.concatenate([a, pool[r.integers(len(pool))]])
            else:
                k = int(r.integers(1, 4))
                out = np.sum(a[:(n // k) * k].reshape(-1, k), axis=1) if n >= k else a
            pool.append(out)
        picks = [pool[-1], pool[np.random.default_rng(len(steps)).integers(len(pool))]]
        return np.concatenate(picks)

    return f


@pytest.mark.parametrize("seed", range(24))
def test_random_composition_jacobian(seed):
    f = _random_function(seed)
    x = _point(9, seed)
    pattern = ha.jacobian_sparsity(f, x)
    _check(pattern, _dense_jacobian_nonzeros(f, x), exact=True)


@pytest.mark.parametrize("seed", range(12))
def test_random_composition_hessian(seed):
    g = _random_function(1000 + seed)

    def f(x):
        y = g(x)
        return np.sum(y * np.sin(y[::-1]))

    x = _point(8, seed)
    _check(ha.hessian_sparsity(f, x), _dense_hessian_nonzeros(f, x), exact=False)


# ----------------------------------------------------------------------------
# the rule table
# ----------------------------------------------------------------------------
def test_every_registered_op_has_a_rule_or_an_explicit_fallback():
    missing = [name for name, op in REGISTRY.items()
               if name not in rules.RULES and op.kind not in ("elementwise", "composite")
               and name not in rules.CONSERVATIVE]  # (a composite: lowered when traced)
    assert not missing, f"ops without a sparsity rule (add one to hybridad/sparse/rules.py " \
                        f"or list them in CONSERVATIVE): {missing}"
    assert rules.rule_for("no such op") is rules.CONSERVATIVE_RULE


def test_elementwise_second_order_from_the_partials():
    assert elementwise_pairs("multiply") == ((0, 1), (1, 0))
    assert elementwise_pairs("exp") == ((0, 0),)
    assert elementwise_pairs("add") == ()
    assert elementwise_pairs("negative") == ()
    assert elementwise_pairs("maximum") == ()  # piecewise linear
    assert elementwise_pairs("absolute") == ()
    assert elementwise_pairs("divide") == ((0, 1), (1, 0), (1, 1))
    assert elementwise_pairs("where") == ()
    for name, op in list(REGISTRY.items()):  # every elementwise op can be probed (probing
        # a user kernel's op may register its derivative's: the registry grows)
        if op.kind == "elementwise" and op.partials is not None:
            assert all(0 <= i < len(op.partials) for pair in elementwise_pairs(name)
                       for i in pair)


def test_constant_output_and_arguments_are_data():
    x = _point(4, 3)
    p = ha.jacobian_sparsity(lambda x, c: c * 2.0, x, np.ones(3))
    assert p.shape == (3, 4) and p.nnz == 0
    p = ha.jacobian_sparsity(lambda x, c: c @ x, x, np.zeros((2, 4)))  # an argument: any value
    assert p.nnz == 8
    p = ha.jacobian_sparsity(lambda c, x: x[1:] * c[:3], np.ones(5), x, argnums=1)
    assert p.toarray().tolist() == [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def test_too_dense_is_refused_clearly():
    old = rules.MAX_NNZ
    rules.MAX_NNZ = 50
    try:
        with pytest.raises(rules.TooDense, match="too dense"):
            ha.jacobian_sparsity(lambda x: np.outer(x, x).ravel(), np.ones(10))
    finally:
        rules.MAX_NNZ = old


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        ha.jacobian_sparsity(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="one array"):
        ha.jacobian_sparsity(lambda x, y: x * y, np.ones(2), np.ones(2), argnums=(0, 1))
    with pytest.raises(ValueError, match="scalar"):
        ha.hessian_sparsity(lambda x: x * 2, np.ones(3))


def test_pattern_is_canonical_csr():
    p = ha.jacobian_sparsity(lambda x: x[::-1] * x, np.ones(5))
    assert isinstance(p, sp.csr_array)
    assert p.has_canonical_format
