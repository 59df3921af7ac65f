"""Non-ufunc primitives: select, casts, reductions, matmul, shape and index ops,
and the accumulation ops the reverse pass emits.

Conventions: ``axis`` attributes are normalized tuples of non-negative ints;
reductions keep ``keepdims`` explicit; ``matmul`` operands are at least 2-D
(1-D cases are reshaped at trace time); ``getitem`` takes a *basic* index
(slices, ints, ``None``, ``Ellipsis``) normalized to a tuple.
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import REGISTRY, Op, register

# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def _proxy(node):
    """A zero-strided stand-in of ``node``'s shape (no data is allocated)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, node.dtype), node.shape,
                                           (0,) * len(node.shape))


def _reduced_shape(shape, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axis)


def _grad_to_input_shape(g, node):
    """Reshape a reduction's cotangent to keepdims form, ready to broadcast."""
    x = node.args[0]
    kshape = _reduced_shape(x.shape, node.attrs["axis"], True)
    return g if g.shape == kshape else np.reshape(g, kshape)


def _bind(*args, **attrs):
    from ..frontend.trace import bind

    return bind(*args, **attrs)


def _lift(t, rank):
    from .batch_helpers import lift

    return lift(t, rank)


def _expand(x, k):
    from .batch_helpers import expand

    return expand(x, k)


def _same_as_first(*args, **attrs):
    return args[0].shape, args[0].dtype


# ----------------------------------------------------------------------------
# select and casts (elementwise, no ufunc)
# ----------------------------------------------------------------------------


def _where_abstract(c, a, b):
    return np.broadcast_shapes(c.shape, a.shape, b.shape), np.result_type(a.dtype, b.dtype)


def _where_run(out, c, a, b):
    np.copyto(out, b)
    np.copyto(out, a, where=c)


def _where_vjp(g, node, active, c, a, b, ans):
    zero = g.dtype.type(0)
    return (None,
            np.where(c, g, zero) if active[1] else None,
            np.where(c, zero, g) if active[2] else None)


def _where_jvp(tangents, node, c, a, b, ans):
    _, ta, tb = tangents
    zero = node.dtype.type(0)
    return np.where(c, zero if ta is None else ta, zero if tb is None else tb)


register(Op("where", "elementwise", _where_abstract, run=_where_run, vjp=_where_vjp,
            jvp=_where_jvp,
            partials=(None, lambda c, a, b, ans: c, lambda c, a, b, ans: ~c),
            doc="select: a where c else b"))


def _cast_run(out, x, dtype):
    np.copyto(out, x, casting="unsafe")


def _cast_vjp(g, node, active, x, ans, dtype):
    return (g.astype(x.dtype) if x.dtype.kind in "fc" else None,)


register(Op("cast", "elementwise", lambda x, dtype: (x.shape, np.dtype(dtype)),
            run=_cast_run, vjp=_cast_vjp, jvp=lambda ts, node, x, ans, dtype: ts[0],
            partials=(1,), doc="convert to dtype"))


def _copy_run(out, x):
    np.copyto(out, x)


register(Op("copy", "compute", _same_as_first, run=_copy_run,
            vjp=lambda g, node, active, x, ans: (g,), jvp=lambda ts, node, x, ans: ts[0],
            batch=lambda node, batched, x: _bind("copy", x), doc="materialize a copy"))

# ----------------------------------------------------------------------------
# reductions
# ----------------------------------------------------------------------------


def _reduce_abstract(x, axis, keepdims):
    return _reduced_shape(x.shape, axis, keepdims), x.dtype


def _reducer(ufunc):
    def run(out, x, axis, keepdims):
        ufunc.reduce(x, axis=axis, keepdims=keepdims, out=out)

    return run


def _sum_vjp(g, node, active, x, ans, axis, keepdims):
    return (np.broadcast_to(_grad_to_input_shape(g, node), x.shape),)


def _extremum_vjp(g, node, active, x, ans, axis, keepdims):
    # Ties split the cotangent equally among the maximizing elements.
    a = _grad_to_input_shape(ans, node)
    mask = (x == a).astype(x.dtype)
    count = np.sum(mask, axis=axis, keepdims=True)
    return (_grad_to_input_shape(g, node) * (mask / count),)


def _extremum_weights(x, ans, node):
    a = _grad_to_input_shape(ans, node)
    mask = (x == a).astype(x.dtype)
    return mask / np.sum(mask, axis=node.attrs["axis"], keepdims=True)


def _sum_jvp(ts, node, x, ans, axis, keepdims):
    return _bind("sum", ts[0], axis=axis, keepdims=keepdims)


def _extremum_jvp(ts, node, x, ans, axis, keepdims):
    # the tangent of the maximizing elements, averaged over ties (as the vjp)
    return _bind("sum", ts[0] * _extremum_weights(x, ans, node), axis=axis, keepdims=keepdims)


def _axis_batch(node, batched, x, **attrs):
    """A batched operand of an op with ``axis`` attributes: the axes move by one."""
    axis = attrs.pop("axis")
    axis = tuple(a + 1 for a in axis) if isinstance(axis, tuple) else axis + 1
    return _bind(node.op, x, axis=axis, **attrs)


register(Op("sum", "reduce", _reduce_abstract, run=_reducer(np.add), vjp=_sum_vjp,
            jvp=_sum_jvp, batch=_axis_batch))
register(Op("max", "reduce", _reduce_abstract, run=_reducer(np.maximum), vjp=_extremum_vjp,
            jvp=_extremum_jvp, batch=_axis_batch))
register(Op("min", "reduce", _reduce_abstract, run=_reducer(np.minimum), vjp=_extremum_vjp,
            jvp=_extremum_jvp, batch=_axis_batch))


def _prod_vjp(g, node, active, x, ans, axis, keepdims):
    # Exact with zeros: d prod / d x_i = prod_{j<i} x_j * prod_{j>i} x_j.
    from ..frontend.trace import bind

    (ax,) = axis
    left = bind("cumprod_exclusive", x, axis=ax, reverse=False)
    right = bind("cumprod_exclusive", x, axis=ax, reverse=True)
    return (_grad_to_input_shape(g, node) * (left * right),)


def _prod_abstract(x, axis, keepdims):
    assert len(axis) == 1, "prod reduces one axis at a time"
    return _reduce_abstract(x, axis, keepdims)


def _prod_jvp(ts, node, x, ans, axis, keepdims):
    (ax,) = axis
    left = _bind("cumprod_exclusive", x, axis=ax, reverse=False)
    right = _bind("cumprod_exclusive", x, axis=ax, reverse=True)
    return _bind("sum", ts[0] * (left * right), axis=axis, keepdims=keepdims)


register(Op("prod", "reduce", _prod_abstract, run=_reducer(np.multiply), vjp=_prod_vjp,
            jvp=_prod_jvp, batch=_axis_batch))


def _cumprod_exclusive_run(out, x, axis, reverse):
    if reverse:
        x, out = np.flip(x, axis), np.flip(out, axis)
    n = x.shape[axis]
    head = [slice(None)] * x.ndim
    head[axis] = slice(0, 1)
    out[tuple(head)].fill(1)  # (assigning a Python 1 would allocate a 0-d array)
    if n > 1:
        src, dst = list(head), list(head)
        src[axis], dst[axis] = slice(0, n - 1), slice(1, n)
        np.multiply.accumulate(x[tuple(src)], axis=axis, out=out[tuple(dst)])


def _shift(t, axis, k):
    """t moved k places along axis (k > 0: towards the end), zeros coming in."""
    n = t.shape[axis]
    k = max(-n, min(n, k))
    zeros = np.zeros(t.shape[:axis] + (abs(k),) + t.shape[axis + 1:], t.dtype)
    keep = [slice(None)] * t.ndim
    keep[axis] = slice(0, n - k) if k >= 0 else slice(-k, n)
    parts = [zeros, t[tuple(keep)]] if k >= 0 else [t[tuple(keep)], zeros]
    return np.concatenate(parts, axis=axis)


def _flip(t, axis):
    return t[(slice(None),) * axis + (slice(None, None, -1),)]


def _cumprod_exclusive_vjp(g, node, active, x, ans, axis, reverse):
    # E_j = prod_{i<j} x_i: dE_j/dx_i = E_i prod_{i<k<j} x_k for i < j, so the
    # cotangent of x_i is E_i R_i with R_i = g_{i+1} + x_{i+1} R_{i+1} -- the
    # reverse scan of cumprod_adjoint on g moved one place back.  Exact with
    # zeros.  reverse=True is the same along the flipped axis.
    from ..frontend.trace import bind

    if reverse:
        (back,) = _cumprod_exclusive_vjp(_flip(g, axis), None, active, _flip(x, axis),
                                         _flip(ans, axis), axis, False)
        return (_flip(back, axis),)
    return (ans * bind("cumprod_adjoint", _shift(g, axis, -1), x, axis=axis),)


def _forward_scan(u, x, axis):
    """S_i = u_i + x_i S_{i-1} along axis (S_{-1} = 0): cumprod_adjoint's
    backward recurrence run along the flipped axis, x moved one place."""
    return _flip(_bind("cumprod_adjoint", _flip(u, axis), _shift(_flip(x, axis), axis, 1),
                       axis=axis), axis)


def _cumprod_exclusive_jvp(ts, node, x, ans, axis, reverse):
    # E_j = E_{j-1} x_{j-1}: dE_j = x_{j-1} dE_{j-1} + E_{j-1} dx_{j-1}
    if reverse:
        flipped = _cumprod_exclusive_jvp((_flip(ts[0], axis),), node, _flip(x, axis),
                                         _flip(ans, axis), axis, False)
        return _flip(flipped, axis)
    return _forward_scan(_shift(ans * ts[0], axis, 1), _shift(x, axis, 1), axis)


def _scan_batch(node, batched, *args, **attrs):
    """Scans along ``axis``: every operand batched (a broadcast view where it was
    not), the axis moved by one."""
    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    args = [a if b else _expand(a, k) for a, b in zip(args, batched, strict=True)]
    attrs["axis"] += 1
    return _bind(node.op, *args, **attrs)


register(Op("cumprod_exclusive", "compute", lambda x, axis, reverse: (x.shape, x.dtype),
            run=_cumprod_exclusive_run, vjp=_cumprod_exclusive_vjp,
            jvp=_cumprod_exclusive_jvp, batch=_scan_batch,
            doc="product of the elements strictly before (reverse: after) each position"))


def _cumsum_run(out, x, axis, reverse):
    if reverse:  # flipped views: accumulate writes through them in place
        x, out = np.flip(x, axis), np.flip(out, axis)
    np.add.accumulate(x, axis=axis, out=out)


def _cumsum_vjp(g, node, active, x, ans, axis, reverse):
    from ..frontend.trace import bind

    return (bind("cumsum", g, axis=axis, reverse=not reverse),)


register(Op("cumsum", "compute", lambda x, axis, reverse: (x.shape, x.dtype),
            run=_cumsum_run, vjp=_cumsum_vjp, batch=_scan_batch,
            jvp=lambda ts, node, x, ans, axis, reverse: _bind("cumsum", ts[0], axis=axis,
                                                              reverse=reverse),
            doc="inclusive running sum along one axis (reverse: from the end)"))

def _cumprod_run(out, x, axis):
    np.multiply.accumulate(x, axis=axis, out=out)


def _cumprod_vjp(g, node, active, x, ans, axis):
    # d y_i / d x_j = prod_{k <= i, k != j} x_k (j <= i), so the cotangent of
    # x_j is prod_{k < j} x_k * S_j with S_j = g_j + x_{j+1} S_{j+1}: exact
    # with zeros, no division.
    from ..frontend.trace import bind

    left = bind("cumprod_exclusive", x, axis=axis, reverse=False)
    return (left * bind("cumprod_adjoint", g, x, axis=axis),)


def _cumprod_jvp(ts, node, x, ans, axis):
    # y_i = y_{i-1} x_i: dy_i = x_i dy_{i-1} + y_{i-1} dx_i, exact with zeros
    left = _bind("cumprod_exclusive", x, axis=axis, reverse=False)
    return _forward_scan(left * ts[0], x, axis)


register(Op("cumprod", "compute", lambda x, axis: (x.shape, x.dtype), run=_cumprod_run,
            vjp=_cumprod_vjp, jvp=_cumprod_jvp, batch=_scan_batch,
            doc="inclusive running product along one axis"))


def _cumprod_adjoint_run(out, g, x, axis):
    g, x, out = (np.moveaxis(v, axis, 0) for v in (g, x, out))
    n = x.shape[0]
    np.copyto(out[n - 1:], g[n - 1:])
    for j in range(n - 2, -1, -1):  # one slice at a time (views, never scalars)
        np.multiply(x[j + 1:j + 2], out[j + 1:j + 2], out=out[j:j + 1])
        np.add(out[j:j + 1], g[j:j + 1], out=out[j:j + 1])


def _cumprod_adjoint_vjp(gs, node, active, g, x, ans, axis):
    # S_j = sum_{k>=j} g_k prod_{j<l<=k} x_l is linear in g; its transpose is
    # the forward scan T_k = gs_k + x_k T_{k-1} (written as cumprod_adjoint
    # along the flipped axis, x moved one place), and dS_j/dx_i =
    # (prod_{j<l<i} x_l) S_i for j < i gives x's cotangent S_i T_{i-1}.
    from ..frontend.trace import bind

    t = _flip(bind("cumprod_adjoint", _flip(gs, axis), _shift(_flip(x, axis), axis, 1),
                   axis=axis), axis)
    return (t if active[0] else None, ans * _shift(t, axis, 1) if active[1] else None)


def _cumprod_adjoint_jvp(ts, node, g, x, ans, axis):
    # S_j = g_j + x_{j+1} S_{j+1}: dS_j = (dg_j + dx_{j+1} S_{j+1}) + x_{j+1} dS_{j+1}
    tg, tx = ts
    u = tg
    if tx is not None:
        moved = _shift(tx * ans, axis, -1)
        u = moved if u is None else u + moved
    return _bind("cumprod_adjoint", u, x, axis=axis)


register(Op("cumprod_adjoint", "compute", lambda g, x, axis: (x.shape, x.dtype),
            run=_cumprod_adjoint_run, vjp=_cumprod_adjoint_vjp, jvp=_cumprod_adjoint_jvp,
            batch=_scan_batch,
            doc="S_j = g_j + x_{j+1} S_{j+1} along axis, from the end (cumprod's reverse scan)"))

# ----------------------------------------------------------------------------
# matmul (operands >= 2-D, numpy batch broadcasting)
# ----------------------------------------------------------------------------


def _matmul_abstract(a, b):
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} not aligned")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1]), np.result_type(a.dtype, b.dtype)


def _matmul_run(out, a, b):
    np.matmul(a, b, out=out)


def _product(x, y):
    """``x @ y``; a broadcast multiply when the contracted axis has length 1
    (an outer product, e.g. a scalar cotangent times a vector): it then fuses
    into elementwise regions instead of calling BLAS for a rank-1 update."""
    return x * y if x.shape[-1] == 1 else np.matmul(x, y)


def _matmul_vjp(g, node, active, a, b, ans):
    return (_product(g, np.swapaxes(b, -1, -2)) if active[0] else None,
            _product(np.swapaxes(a, -1, -2), g) if active[1] else None)


def _matmul_jvp(ts, node, a, b, ans):
    ta, tb = ts
    left = None if ta is None else _product(ta, b)
    right = None if tb is None else _product(a, tb)
    return right if left is None else left if right is None else left + right


def _matmul_batch(node, batched, a, b):
    ba, bb = batched
    if ba and not bb and b.ndim == 2:  # a stack of rows times one matrix: one gemm
        rows = np.reshape(a, (-1, a.shape[-1]))
        return np.reshape(_product(rows, b), (a.shape[0], *node.shape))
    if bb and not ba and a.ndim == 2 and b.ndim == 3:  # a matrix times K matrices: one gemm
        k, n = b.shape[0], node.shape[-1]
        cols = np.reshape(np.transpose(b, (1, 0, 2)), (b.shape[1], k * n))
        return np.transpose(np.reshape(_product(a, cols), (a.shape[0], k, n)), (1, 0, 2))
    rank = len(node.shape)
    return _bind("matmul", _lift(a, rank) if ba else a, _lift(b, rank) if bb else b)


register(Op("matmul", "compute", _matmul_abstract, run=_matmul_run, vjp=_matmul_vjp,
            jvp=_matmul_jvp, batch=_matmul_batch))

# ----------------------------------------------------------------------------
# shape and index ops (views)
# ----------------------------------------------------------------------------


def _reshape_view(x, shape):
    return np.reshape(x, shape)


register(Op("reshape", "view", lambda x, shape: (shape, x.dtype), view=_reshape_view,
            vjp=lambda g, node, active, x, ans, shape: (np.reshape(g, x.shape),),
            jvp=lambda ts, node, x, ans, shape: np.reshape(ts[0], shape),
            batch=lambda node, batched, x, shape: np.reshape(x, (x.shape[0], *shape))))


def _transpose_vjp(g, node, active, x, ans, axes):
    return (np.transpose(g, tuple(np.argsort(axes))),)


register(Op("transpose", "view",
            lambda x, axes: (tuple(x.shape[a] for a in axes), x.dtype),
            view=lambda x, axes: np.transpose(x, axes), vjp=_transpose_vjp,
            jvp=lambda ts, node, x, ans, axes: np.transpose(ts[0], axes),
            batch=lambda node, batched, x, axes: np.transpose(
                x, (0, *(a + 1 for a in axes)))))

register(Op("broadcast_to", "view", lambda x, shape: (shape, x.dtype),
            view=lambda x, shape: np.broadcast_to(x, shape),
            # the autodiff pass sums a too-large cotangent back to x's shape
            vjp=lambda g, node, active, x, ans, shape: (g,),
            jvp=lambda ts, node, x, ans, shape: np.broadcast_to(ts[0], shape),
            batch=lambda node, batched, x, shape: np.broadcast_to(
                _lift(x, len(shape)), (x.shape[0], *shape))))


class Scatter:
    """A cotangent that is nonzero only on ``x[index]`` (a basic index) or, with
    ``flat``, on the flat positions ``flat`` of ``x`` (repeats add up); the
    autodiff pass adds it into the adjoint in place (no full-size temporary)."""

    __slots__ = ("flat", "index", "value")

    def __init__(self, index, value, flat=None):
        self.index = index
        self.value = value
        self.flat = flat


def _getitem_abstract(x, index):
    return _proxy(x)[index + (...,)].shape, x.dtype


register(Op("getitem", "view", _getitem_abstract, view=lambda x, index: x[index + (...,)],
            vjp=lambda g, node, active, x, ans, index: (Scatter(index, g),),
            jvp=lambda ts, node, x, ans, index: _bind("getitem", ts[0], index=index),
            batch=lambda node, batched, x, index: _bind("getitem", x,
                                                        index=(slice(None), *index))))


def _gather_run(out, x, flat):
    # x is C-contiguous (numpy_api.gather_positions sees to it); indices are
    # in range by construction, and mode="wrap" keeps np.take unbuffered
    np.take(x, flat, out=out, mode="wrap")


def _gather_vjp(g, node, active, x, flat, ans):
    return (Scatter(None, g, flat=flat), None)


def _gather_batch(node, batched, x, flat):
    if batched[1]:
        raise NotImplementedError("gather at batched positions")
    from .batch_helpers import batched_positions, contiguous

    return _bind("gather", contiguous(x), batched_positions(flat, x.shape[0], x.size // x.shape[0]))


def _gather_jvp(ts, node, x, flat, ans):
    from .batch_helpers import contiguous

    return _bind("gather", contiguous(ts[0]), flat)


register(Op("gather", "compute", lambda x, flat: (flat.shape, x.dtype), run=_gather_run,
            vjp=_gather_vjp, jvp=_gather_jvp, batch=_gather_batch,
            doc="x.flat[flat] for a constant integer array flat (C-contiguous x): "
                "fancy and boolean indexing, take, compress, repeat, diagonal"))

# ----------------------------------------------------------------------------
# sorting: each row packed as complex (value, index along the axis) and sorted
# in place -- complex numbers sort lexicographically, NaN real parts last, so
# ties keep their order (a stable sort) whatever algorithm sorts, and no
# numpy call allocates.  The packed array is laid out with the sorted axis
# last, where ndarray.sort works without a row buffer.
# ----------------------------------------------------------------------------


def sort_pack_dtype(dtype, n):
    """complex64 holds a float32 (or narrower) value and an index below 2**24
    exactly; anything else packs into complex128."""
    small = np.dtype(dtype).itemsize <= 4 and n <= 1 << 24
    return np.dtype(np.complex64 if small else np.complex128)


def _sort_pack_abstract(x, axis):
    shape = x.shape[:axis] + x.shape[axis + 1:] + (x.shape[axis],)
    return shape, sort_pack_dtype(x.dtype, x.shape[axis])


def _sort_pack_run(out, x, axis):
    index = out.imag  # 0, 1, 2, ... along the last axis, by an in-place running sum
    index[..., :1].fill(0)
    index[..., 1:].fill(1)
    np.add.accumulate(index, axis=-1, out=index)
    np.copyto(out.real, np.moveaxis(x, axis, -1))
    out.sort(axis=-1)  # the keys are distinct: any algorithm gives the stable order


register(Op("sort_pack", "compute", _sort_pack_abstract, run=_sort_pack_run,
            vjp=lambda g, node, active, x, ans, axis: (None,),
            jvp=lambda ts, node, x, ans, axis: None,
            doc="rows of x along axis as (value, index) complex pairs, sorted, the axis "
                "moved last (not differentiable; see sort_values)"))


def _sort_unpacked_shape(p, axis):
    return p.shape[:axis] + p.shape[-1:] + p.shape[axis:-1]


register(Op("sort_index", "compute",
            lambda p, axis: (_sort_unpacked_shape(p, axis), np.dtype(np.intp)),
            run=lambda out, p, axis: np.copyto(out, np.moveaxis(p.imag, -1, axis),
                                               casting="unsafe"),
            vjp=lambda g, node, active, p, ans, axis: (None,),
            doc="where each sorted element came from along the axis (argsort, stable)"))


def _sort_positions(x, p, axis):
    """Flat position in x of each sorted element: (index along the axis) *
    stride + the row's start."""
    k = _bind("sort_index", p, axis=axis)
    stride = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    start = np.take(np.arange(x.size, dtype=np.intp).reshape(x.shape), [0], axis=axis)
    return k * stride + start


def _sort_values_jvp(ts, node, x, p, ans, axis):
    from .batch_helpers import contiguous

    if x.size == 0 or ts[0] is None:
        return None
    return _bind("gather", contiguous(ts[0]), _sort_positions(x, p, axis))


def _sort_values_vjp(g, node, active, x, p, ans, axis):
    # the cotangent of sorted[j] goes to the element it came from: its flat
    # position in x is (index along the axis) * stride + the row's start

    if x.size == 0:
        return (None, None)
    return (Scatter(None, g, flat=_sort_positions(x, p, axis)), None)


register(Op("sort_values", "compute", lambda x, p, axis: (x.shape, x.dtype),
            run=lambda out, x, p, axis: np.copyto(out, np.moveaxis(p.real, -1, axis)),
            vjp=_sort_values_vjp, jvp=_sort_values_jvp,
            doc="x sorted along axis, read from its sort_pack p (the cotangent goes back "
                "to where each element came from)"))


def _concat_abstract(*xs, axis):
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return tuple(shape), np.result_type(*(x.dtype for x in xs))


def _concat_run(out, *xs, axis):
    np.concatenate(xs, axis=axis, out=out)


def _concat_vjp(g, node, active, *operands, axis):
    *xs, ans = operands
    out, start = [], 0
    for x, act in zip(xs, active, strict=True):
        stop = start + x.shape[axis]
        index = (slice(None),) * axis + (slice(start, stop),)
        out.append(g[index] if act else None)
        start = stop
    return tuple(out)


def _concat_jvp(ts, node, *operands, axis):
    *xs, ans = operands
    parts = [np.zeros(x.shape, node.dtype) if t is None else t
             for x, t in zip(xs, ts, strict=True)]
    return _bind("concatenate", *parts, axis=axis)


def _concat_batch(node, batched, *xs, axis):
    k = next(x.shape[0] for x, b in zip(xs, batched, strict=True) if b)
    parts = [x if b else _expand(x, k) for x, b in zip(xs, batched, strict=True)]
    return _bind("concatenate", *parts, axis=axis + 1)


register(Op("concatenate", "compute", _concat_abstract, run=_concat_run, vjp=_concat_vjp,
            jvp=_concat_jvp, batch=_concat_batch))

# ----------------------------------------------------------------------------
# accumulation ops emitted by the reverse pass
# ----------------------------------------------------------------------------


def _scatter_run(out, g, index):
    out.fill(0)
    out[index + (...,)] = g


def _region_rank(shape, index):
    """The number of axes of ``zeros(shape)[index]``."""
    proxy = np.lib.stride_tricks.as_strided(np.zeros(1), shape, (0,) * len(shape))
    return proxy[index + (...,)].ndim


def _scatter_batch(node, batched, g, index, shape):
    return _bind("scatter", _lift(g, _region_rank(shape, index)), index=(slice(None), *index),
                 shape=(g.shape[0], *shape))


def _batched_acc(acc, batched, k):
    """An accumulator of a batched sum: itself when batched, else a batched copy."""
    return acc if batched else _bind("copy", _expand(acc, k))


def _scatter_add_batch(node, batched, acc, g, index):
    k = (acc if batched[0] else g).shape[0]
    acc = _batched_acc(acc, batched[0], k)
    if batched[1]:
        g = _lift(g, _region_rank(node.shape, index))
    return _bind("scatter_add", acc, g, index=(slice(None), *index))


def _iadd_batch(node, batched, acc, g):
    k = (acc if batched[0] else g).shape[0]
    acc = _batched_acc(acc, batched[0], k)
    return _bind("iadd", acc, _lift(g, len(node.shape)) if batched[1] else g)


def _flat_batch(node, batched, *args, shape=None):
    """scatter_flat / scatter_add_flat: positions offset per batch entry."""
    from .batch_helpers import batched_positions

    if node.op == "scatter_flat":
        g, flat = args
        k = g.shape[0]
        pos = batched_positions(flat, k, node.size)
        return _bind("scatter_flat", _lift(g, flat.ndim), pos, shape=(k, *shape))
    acc, g, flat = args
    k = (acc if batched[0] else g).shape[0]
    pos = batched_positions(flat, k, node.size)
    if batched[1]:
        g = _lift(g, flat.ndim)
    return _bind("scatter_add_flat", _batched_acc(acc, batched[0], k), g, pos)


def _in_place_jvp(ts, node, *operands, **attrs):
    raise NotImplementedError(
        f"forward mode through the in-place {node.op!r}: differentiate a functional "
        "backward pass (autodiff.backward(..., inplace=False))")


register(Op("scatter", "compute", lambda g, index, shape: (shape, g.dtype),
            run=lambda out, g, index, shape: _scatter_run(out, g, index),
            vjp=lambda gg, node, active, g, ans, index, shape: (gg[index],),
            jvp=lambda ts, node, g, ans, index, shape: _bind("scatter", ts[0], index=index,
                                                             shape=shape),
            batch=_scatter_batch, doc="zeros of shape with g written at index"))


def _scatter_add_run(acc, g, index):
    view = acc[index + (...,)]  # a view even when every index is an int
    np.add(view, g, out=view)


register(Op("scatter_add", "inplace", lambda acc, g, index: (acc.shape, acc.dtype),
            run=lambda out, acc, g, index: _scatter_add_run(acc, g, index),
            jvp=_in_place_jvp, batch=_scatter_add_batch, doc="acc[index] += g, in place"))

def _scatter_flat_vjp(gg, node, active, g, flat, ans, shape):
    from ..frontend.trace import bind

    if flat.node.is_const:  # positions known at trace time: through any view of gg
        return (gather_positions(gg, lambda pos: pos.reshape(-1)[flat.node.attrs["value"]]),
                None)
    # positions computed at run time (sort's): gather from C-contiguous storage
    storage = gg.node
    while storage.op in REGISTRY and REGISTRY[storage.op].kind == "inplace":
        storage = storage.args[0]
    if storage.op in REGISTRY and REGISTRY[storage.op].kind == "view" or \
            storage.is_const and not storage.attrs["value"].flags.c_contiguous:
        gg = bind("copy", gg)
    return (bind("gather", gg, flat), None)


def _scatter_flat_run(out, g, flat, shape):
    out.fill(0)
    np.add.at(out.reshape(-1), flat, g)  # out is a C-contiguous buffer: a view


register(Op("scatter_flat", "compute", lambda g, flat, shape: (shape, g.dtype),
            run=_scatter_flat_run, vjp=_scatter_flat_vjp, batch=_flat_batch,
            jvp=lambda ts, node, g, flat, ans, shape: _bind("scatter_flat", ts[0], flat,
                                                            shape=shape),
            doc="zeros of shape with g added at the flat positions flat (repeats add up)"))

register(Op("scatter_add_flat", "inplace", lambda acc, g, flat: (acc.shape, acc.dtype),
            run=lambda out, acc, g, flat: np.add.at(acc.reshape(-1), flat, g),
            jvp=_in_place_jvp, batch=_flat_batch,
            doc="acc.flat[flat] += g, in place, repeats adding up (acc C-contiguous)"))

register(Op("iadd", "inplace", _same_as_first,
            run=lambda out, acc, g: np.add(acc, g, out=acc), jvp=_in_place_jvp,
            batch=_iadd_batch,
            doc="acc += g, in place (g broadcasts)"))


def gather_positions(x, select):
    """The elements of ``x`` that ``select`` picks, for any selection that moves
    elements without looking at their values (fancy and boolean indexing,
    ``take``, ``compress``, ``repeat``, ``diagonal``, ...).

    ``select`` is applied, at trace time, to an integer array of ``x``'s shape
    holding each element's flat position in the storage ``x`` is a view of;
    numpy therefore checks the selection and gives its exact semantics (and its
    errors).  The result is one ``gather`` primitive reading that storage.
    """
    from ..frontend.trace import Tracer, bind

    chain, node = [], x.node
    while node.op in REGISTRY and REGISTRY[node.op].kind == "view":
        chain.append(node)
        node = node.args[0]
    pos = np.arange(node.size, dtype=np.intp).reshape(node.shape)
    for v in reversed(chain):
        pos = REGISTRY[v.op].view(pos, **v.attrs)
    flat = np.ascontiguousarray(select(pos), dtype=np.intp)
    if node.is_literal:  # a constant in, a constant out
        value = np.ascontiguousarray(node.attrs["value"]).reshape(-1)[flat]
        return Tracer(x._trace.const(value, True), x._trace)
    base = Tracer(node, x._trace)
    if node.is_const and not node.attrs["value"].flags.c_contiguous:
        base = bind("copy", base)  # gather reads C-contiguous storage
    return bind("gather", base, Tracer(x._trace.const(flat, True), x._trace))


