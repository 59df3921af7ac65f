"""``matmul``: operands at least 2-D (1-D cases are reshaped at trace time),
numpy's batch broadcasting.  Products over a contracted axis of length 1 are
never bound: the numpy surface (:func:`hybridad.frontend.numpy_api.matmul`)
makes them broadcast multiplies, in user code and in these rules alike.

One attribute, set by a plan, never traced: ``onehot_rows=True`` on a product
whose left operand is a chunk of a dense Hessian's or Jacobian's seeds (one
a row, mostly unit vectors: :func:`hybridad.transforms.products.mark_seed_products`).
The value is the product's all the same; the numba backend then tries
:func:`hybridad.backends.numba.onehot.onehot_rows` (a row of the right
operand per unit row) before the gemm."""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .common import lift as _lift


def _matmul_abstract(a, b, onehot_rows=False):
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} not aligned")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1]), np.result_type(a.dtype, b.dtype)


def _matmul_run(out, a, b, onehot_rows=False):
    np.matmul(a, b, out=out)


def _matmul_vjp(g, node, active, a, b, ans):
    return (np.matmul(g, np.swapaxes(b, -1, -2)) if active[0] else None,
            np.matmul(np.swapaxes(a, -1, -2), g) if active[1] else None)


def _matmul_jvp(ts, node, a, b, ans):
    ta, tb = ts
    left = None if ta is None else np.matmul(ta, b)
    right = None if tb is None else np.matmul(a, tb)
    return right if left is None else left if right is None else left + right


def _matmul_batch(node, batched, a, b):
    ba, bb = batched
    if ba and not bb and b.ndim == 2:  # a stack of rows times one matrix: one gemm
        rows = np.reshape(a, (-1, a.shape[-1]))
        return np.reshape(np.matmul(rows, b), (a.shape[0], *node.shape))
    if bb and not ba and a.ndim == 2 and b.ndim == 3:  # a matrix times K matrices: one gemm
        k, n = b.shape[0], node.shape[-1]
        if n == 1:  # K matrix-vector products: the vectors as rows times a^T (a view),
            # batch-first as the result is read (no transposed copies in or out)
            rows = np.reshape(b, (k, b.shape[1]))
            return np.reshape(np.matmul(rows, np.transpose(a)), (k, a.shape[0], 1))
        cols = np.reshape(np.transpose(b, (1, 0, 2)), (b.shape[1], k * n))
        return np.transpose(np.reshape(np.matmul(a, cols), (a.shape[0], k, n)), (1, 0, 2))
    rank = len(node.shape)
    return _bind("matmul", _lift(a, rank) if ba else a, _lift(b, rank) if bb else b)


register(Op("matmul", "compute", _matmul_abstract, run=_matmul_run, vjp=_matmul_vjp,
            jvp=_matmul_jvp, batch=_matmul_batch))


# ``matvec(x, y)``: ``x @ y`` of a 2-D matrix and a 1-D vector (either side),
# as the numpy surface traces it inside a plan's trace: one node a product, where
# the primitives are three (the vector reshaped to a column or a row, a 2-D
# ``matmul``, the result reshaped back).  A loop of matrix-vector products --
# an RNN, an ODE integrator -- traces a node or two fewer a step, for its
# rolling to compare.  A composite: lowered to those three before any pass.

def _mv_abstract(x, y):
    a, v, left = (x, y, False) if len(x.shape) == 2 else (y, x, True)
    if len(a.shape) != 2 or len(v.shape) != 1 or a.shape[0 if left else 1] != v.shape[0]:
        raise ValueError(f"matvec: shapes {x.shape} and {y.shape} are not a matrix and "
                         "a vector of its length")
    return (a.shape[1 if left else 0],), np.result_type(x.dtype, y.dtype)


def _mv_run(out, x, y):
    np.matmul(x, y, out=out)


def _mv_lower(node, make):
    x, y = node.args
    if len(x.shape) == 2:  # a @ v: v a column
        v = make("reshape", (y,), {"shape": (y.shape[0], 1)}, (y.shape[0], 1), y.dtype)
        product = make("matmul", (x, v), {}, (*node.shape, 1), node.dtype)
    else:  # v @ a: v a row
        v = make("reshape", (x,), {"shape": (1, x.shape[0])}, (1, x.shape[0]), x.dtype)
        product = make("matmul", (v, y), {}, (1, *node.shape), node.dtype)
    return "reshape", (product,), {"shape": node.shape}


register(Op("matvec", "composite", _mv_abstract, run=_mv_run, lower=_mv_lower, primitives=3))


# ``matvec_pair(a, u, v)``: ``a @ u`` and ``a^T @ v`` from one read of ``a``,
# one result ``[a u, a^T v]`` (m + k elements for ``a`` m x k).  Not traced from
# user code: the numba lowering pairs two matrix-vector products of one matrix
# into it (:func:`hybridad.transforms.products.pair_matvecs`), the two products
# then views of its halves.

def _pair_abstract(a, u, v):
    if len(a.shape) != 2 or tuple(u.shape) != (a.shape[1],) or \
            tuple(v.shape) != (a.shape[0],):
        raise ValueError(f"matvec_pair: a matrix {a.shape} with vectors {u.shape} (its "
                         f"columns) and {v.shape} (its rows)")
    return (a.shape[0] + a.shape[1],), np.result_type(a.dtype, u.dtype, v.dtype)


def _pair_run(out, a, u, v):
    m = a.shape[0]
    np.matmul(a, u, out=out[:m])
    np.matmul(v, a, out=out[m:])


def _pair_vjp(g, node, active, a, u, v, ans):
    m = a.shape[0]
    gy, gz = g[:m], g[m:]  # the cotangents of a u and of a^T v
    return (np.outer(gy, u) + np.outer(v, gz) if active[0] else None,
            np.matmul(gy, a) if active[1] else None,
            np.matmul(a, gz) if active[2] else None)


def _pair_jvp(ts, node, a, u, v, ans):
    ta, tu, tv = ts
    terms = [] if ta is None else [_bind("matvec_pair", ta, u, v)]
    if tu is not None or tv is not None:
        terms.append(_bind("matvec_pair", a, np.zeros(u.shape, node.dtype) if tu is None else tu,
                           np.zeros(v.shape, node.dtype) if tv is None else tv))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


register(Op("matvec_pair", "compute", _pair_abstract, run=_pair_run, vjp=_pair_vjp,
            jvp=_pair_jvp))


# ``matvec_two(a, x, y, form)``: two matrix-vector products of one 2-D matrix
# ``a`` of one form, the rows of one result -- ``form == "dot"``: ``[a x, a y]``
# (``x``, ``y`` of ``a``'s columns; result 2 x m); ``"axpy"``: ``[a^T x, a^T y]``
# (of its rows; result 2 x k).  Not traced from user code: the numba lowering
# groups two such products of one matrix into it (an HVP's forward ``A u`` and
# tangent ``A du``; its backward and tangent ``A^T w``:
# :func:`hybridad.transforms.products.pair_matvecs`), the products then views
# of its rows.

def _two_abstract(a, x, y, form):
    if len(a.shape) != 2 or form not in ("dot", "axpy"):
        raise ValueError(f"matvec_two: a 2-D matrix and form 'dot' or 'axpy', got "
                         f"{a.shape}, {form!r}")
    m, k = a.shape
    n = k if form == "dot" else m
    if tuple(x.shape) != (n,) or tuple(y.shape) != (n,):
        raise ValueError(f"matvec_two({form!r}): a matrix {a.shape} with vectors {x.shape} "
                         f"and {y.shape}, not of {n}")
    return (2, m if form == "dot" else k), np.result_type(a.dtype, x.dtype, y.dtype)


def _two_run(out, a, x, y, form):
    for row, v in ((out[0], x), (out[1], y)):
        if form == "dot":
            np.matmul(a, v, out=row)
        else:
            np.matmul(v, a, out=row)


def _two_vjp(g, node, active, a, x, y, ans, form):
    dot = form == "dot"
    ga = None
    if active[0]:  # d(a v)/da . g = outer(g, v); d(a^T v)/da . g = outer(v, g)
        ga = np.outer(g[0], x) + np.outer(g[1], y) if dot else \
            np.outer(x, g[0]) + np.outer(y, g[1])
    return (ga, *((np.matmul(g[j], a) if dot else np.matmul(a, g[j])) if active[1 + j]
                  else None for j in range(2)))


def _two_jvp(ts, node, a, x, y, ans, form):
    ta, tx, ty = ts
    terms = [] if ta is None else [_bind("matvec_two", ta, x, y, form=form)]
    if tx is not None or ty is not None:
        terms.append(_bind("matvec_two", a, np.zeros(x.shape, node.dtype) if tx is None else tx,
                           np.zeros(y.shape, node.dtype) if ty is None else ty, form=form))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


register(Op("matvec_two", "compute", _two_abstract, run=_two_run, vjp=_two_vjp,
            jvp=_two_jvp))
