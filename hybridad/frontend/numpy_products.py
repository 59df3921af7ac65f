"""numpy's products built from the primitives while tracing: np.cross,
np.tensordot, np.kron, np.einsum and ``np.linalg.norm``.
"""

from __future__ import annotations

import math
import numbers
import operator
import string

import numpy as np

from .numpy_api import (
    GUFUNCS,
    _no_kwargs,
    _reduce,
    _tracer,
    broadcast_to,
    implements,
    matmul,
    moveaxis,
    reshape,
    squeeze,
    stack,
    transpose,
)
from .numpy_math import _float
from .numpy_shapes import diagonal, pad
from ..core.tracer import Tracer

__all__ = []


# ----------------------------------------------------------------------------
# cross products
# ----------------------------------------------------------------------------

@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``np.cross`` of 3-vectors (2-vectors taken with a zero third component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(_tracer(a), axisa, -1), moveaxis(_tracer(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a, b = (pad(v, [(0, 0)] * (v.ndim - 1) + [(0, 1)]) if v.shape[-1] == 2 else v
            for v in (a, b))
    c = [a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
         a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
         a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]]
    return moveaxis(stack(c, axis=-1), -1, axisc)


# ----------------------------------------------------------------------------
# products
# ----------------------------------------------------------------------------

@implements(np.tensordot)
def tensordot(a, b, axes=2):
    a, b = _tracer(a), _tracer(b)
    if isinstance(axes, numbers.Integral):
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([operator.index(x)] if isinstance(x, numbers.Integral) else list(x)
                      for x in axes)
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    if [a.shape[i] for i in ax_a] != [b.shape[i] for i in ax_b]:
        raise ValueError("shape-mismatch for sum")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a], dtype=np.int64))
    a2 = reshape(transpose(a, free_a + ax_a), (-1, k))
    b2 = reshape(transpose(b, ax_b + free_b), (k, -1))
    return reshape(matmul(a2, b2), tuple(a.shape[i] for i in free_a) +
                   tuple(b.shape[i] for i in free_b))


@implements(np.kron)
def kron(a, b):
    a, b = _tracer(a), _tracer(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    x = reshape(a, tuple(v for s in sa for v in (s, 1)))
    y = reshape(b, tuple(v for s in sb for v in (1, s)))
    return reshape(x * y, tuple(p * q for p, q in zip(sa, sb, strict=True)))


@implements(np.einsum)
def einsum(*operands, out=None, optimize=False, **kw):
    """``np.einsum`` with explicit or implicit output subscripts (letters, and
    ``...`` spelled as unused letters, broadcast like numpy: see
    :func:`_einsum_ellipsis`), or in the interleaved form of operands and
    sublists (:func:`_einsum_sublists`): a contraction of two operands without
    shared output letters is one matmul (:func:`tensordot`), one with them a
    batched matmul where both operands have output letters of their own
    (:func:`_batched_product`); anything else is
    a broadcast multiply summed over the contracted letters, which the
    partitioner fuses into one region (no product temporary on the numba
    backend)."""
    _no_kwargs("einsum", {"out": out, **kw})
    if not operands:
        raise ValueError("must specify the einstein sum subscripts string and at least one "
                         "operand")
    if not isinstance(operands[0], str):
        operands = _einsum_sublists(operands)
    subscripts, *arrays = operands
    subscripts = subscripts.replace(" ", "")
    if "." in subscripts:
        subscripts = _einsum_ellipsis(subscripts, [np.ndim(x) if not isinstance(x, Tracer)
                                                   else x.ndim for x in arrays])
    lhs, arrow, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(arrays):
        raise ValueError("more operands provided to einstein sum function than specified "
                         "in the subscripts string" if len(arrays) > len(ins) else
                         "fewer operands provided to einstein sum function than specified "
                         "in the subscripts string")
    if not arrow:
        letters = "".join(ins)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    from .windows import einsum_of_windows  # (sliding windows times a kernel)

    hit = einsum_of_windows(ins, rhs, arrays)
    if hit is not None:
        return hit
    xs = [_tracer(x) for x in arrays]
    if all(x.dtype == np.bool_ for x in xs):  # (numpy's sum of products in bool: an or
        # of ands, True or False -- the 0/1 count's, nonzero)
        return np.not_equal(einsum(f"{lhs}->{rhs}", *[x.astype(np.int64) for x in xs]), 0)
    sizes = {}
    for spec, x in zip(ins, xs, strict=True):
        if len(spec) != x.ndim:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts "
                             f"for operand: {spec!r} for shape {x.shape}")
        for c, s in zip(spec, x.shape, strict=True):
            if c not in string.ascii_letters:
                raise ValueError(f"invalid subscript {c!r} in einstein sum subscripts string")
            if sizes.setdefault(c, s) != s and 1 not in (s, sizes[c]):
                raise ValueError(f"operands could not be broadcast together: subscript {c!r} "
                                 f"has sizes {sizes[c]} and {s}")
            sizes[c] = max(sizes[c], s)
    # repeated letters within an operand take its diagonal first
    for j, (spec, x) in enumerate(zip(ins, xs, strict=True)):
        while len(set(spec)) != len(spec):
            c = next(c for c in spec if spec.count(c) > 1)
            p, q = spec.index(c), spec.index(c, spec.index(c) + 1)
            x = diagonal(x, 0, p, q)  # the repeated axis goes last
            spec = "".join(ch for i, ch in enumerate(spec) if i not in (p, q)) + c
        ins[j], xs[j] = spec, x
    if len(xs) > 2:
        steps = _contraction_path(ins, xs, rhs, sizes)
        if steps is not None:  # pairwise, in the order of fewest operations
            ops = list(zip(ins, xs, strict=True))
            for step, subscripts, out in steps:
                picked = [x for i, (_, x) in enumerate(ops) if i in step]
                ops = [o for i, o in enumerate(ops) if i not in step]
                ops.append((out, einsum(subscripts, *picked)))
            (spec, x), = ops
            return x if spec == rhs else einsum(f"{spec}->{rhs}", x)
    if len(xs) == 2 and not set(ins[0]) & set(ins[1]) & set(rhs):
        shared = [c for c in ins[0] if c in ins[1]]
        if shared and all(sizes[c] == xs[0].shape[ins[0].index(c)] ==
                          xs[1].shape[ins[1].index(c)] for c in shared):
            # one matmul over the shared letters; letters only one operand has
            # and the output does not are summed first
            a = _sum_out(xs[0], ins[0], rhs + ins[1])
            b = _sum_out(xs[1], ins[1], rhs + ins[0])
            sa, sb = _kept(ins[0], rhs + ins[1]), _kept(ins[1], rhs + ins[0])
            r = tensordot(a, b, ([sa.index(c) for c in shared], [sb.index(c) for c in shared]))
            got = [c for c in sa if c not in shared] + [c for c in sb if c not in shared]
            return transpose(r, [got.index(c) for c in rhs]) if got else r
    if len(xs) == 2:
        r = _batched_product(ins, xs, rhs, sizes)
        if r is not None:
            return r
    order = list(rhs) + sorted({c for s in ins for c in s} - set(rhs))
    prod = None
    for spec, x in zip(ins, xs, strict=True):
        perm = sorted(range(len(spec)), key=lambda i: order.index(spec[i]))
        x = transpose(x, perm)
        present = {spec[i] for i in perm}
        shape, it = [], iter(x.shape)
        for c in order:
            shape.append(next(it) if c in present else 1)
        x = reshape(x, tuple(shape))
        prod = x if prod is None else prod * x
    prod = broadcast_to(prod, tuple(sizes[c] for c in order)) if prod.shape != tuple(
        sizes[c] for c in order) else prod
    if len(order) > len(rhs):
        prod = _reduce("sum", prod, tuple(range(len(rhs), len(order))), False)
    return prod


def _batched_product(ins, xs, rhs, sizes):
    """A contraction of two operands with batch letters (in both and in the
    output) as one batched ``matmul`` (``'kij,knj->kni'``, attention's
    ``'bqd,bkd->bqk'``), where each operand also has letters of its own in the
    output -- the broadcast product summed over the contracted letters made
    every element of the four-letter product (a Gaussian mixture's gradient
    4.6x slower), or a batched matrix-vector product whose matrix is
    contracted along other than its innermost axes (``'bi,bij->bj'``); None
    for anything else (a batched dot, or ``'nij,nj->ni'``: the fused product
    reads the matrix's rows in order, 2.4-3x faster there)."""
    (s0, s1), (a, b) = ins, xs
    batch = [c for c in s0 if c in s1 and c in rhs]
    shared = [c for c in s0 if c in s1 and c not in rhs]
    if not batch or not shared or any(
            a.shape[s0.index(c)] != b.shape[s1.index(c)] for c in shared):
        return None
    a, b = _sum_out(a, s0, rhs + s1), _sum_out(b, s1, rhs + s0)
    s0, s1 = _kept(s0, rhs + s1), _kept(s1, rhs + s0)
    f0, f1 = [c for c in s0 if c not in s1], [c for c in s1 if c not in s0]
    if not f0 and not f1:
        return None
    if not f0 or not f1:  # a batched matrix-vector product: fused where the
        # contracted letters are the matrix's innermost (its rows read in order)
        mat = s1 if not f0 else s0
        if set(mat[len(mat) - len(shared):]) == set(shared):
            return None
    if f0 and f1 and min(rhs.index(c) for c in f1) < min(rhs.index(c) for c in f0):
        (s0, f0, a), (s1, f1, b) = (s1, f1, b), (s0, f0, a)  # (the output's order: no transpose)
    a = transpose(a, [s0.index(c) for c in batch + f0 + shared])
    b = transpose(b, [s1.index(c) for c in batch + shared + f1])
    nb = len(batch)
    m, k, n = (math.prod(sizes[c] for c in group) for group in (f0, shared, f1))
    r = matmul(reshape(a, a.shape[:nb] + (m, k)), reshape(b, b.shape[:nb] + (k, n)))
    r = reshape(r, r.shape[:nb] + tuple(sizes[c] for c in f0 + f1))
    got = batch + f0 + f1
    return transpose(r, [got.index(c) for c in rhs])


def _contraction_path(ins, xs, rhs, sizes):
    """The steps of contracting three or more operands two at a time
    (numpy's ``einsum_path``, greedy: each step the pair that makes the
    smallest intermediate), each ``(positions, subscripts, its result's
    letters)``, where they take fewer multiplications than one broadcast
    product of them all (``'ij,jk,ki->'``: two matrix products, not a cube);
    else None (``'i,i,i->'``: the product, fused)."""
    def cost(letters):
        return math.prod(sizes[c] for c in set(letters))

    try:
        path = np.einsum_path(",".join(ins) + "->" + rhs,
                              *[np.broadcast_to(np.empty((), x.dtype), x.shape) for x in xs],
                              optimize="greedy")[0][1:]
    except ValueError:  # (what numpy's path finder does not take: the product)
        return None
    if any(len(step) > 2 for step in path):
        return None
    specs, total, steps = list(ins), 0, []
    for step in path:
        picked = [sp for i, sp in enumerate(specs) if i in step]
        specs = [sp for i, sp in enumerate(specs) if i not in step]
        rest = set(rhs).union(*specs)
        total += cost("".join(picked))
        out = "".join(c for c in dict.fromkeys("".join(picked)) if c in rest)
        steps.append((step, ",".join(picked) + "->" + out, out))
        specs.append(out)
    return steps if total < cost("".join(ins)) * (len(ins) - 1) else None


def _einsum_sublists(operands):
    """The interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as
    ``("AB,BC->AC", a, b)``: numpy's labels 0-25 are ``A``-``Z``, 26-51
    ``a``-``z``, ``Ellipsis`` is ``...``; without a last output sublist the
    output is implicit."""
    arrays, sublists = list(operands[0::2]), list(operands[1::2])
    output = arrays.pop() if len(operands) % 2 and len(operands) > 1 else None
    if len(sublists) != len(arrays):
        raise ValueError("einsum in the interleaved form takes an operand and a sublist of "
                         "its subscripts, for each operand")

    def letters(sublist):
        out = []
        for label in sublist:
            if label is Ellipsis:
                out.append("...")
                continue
            try:
                k = operator.index(label)
            except TypeError:
                raise TypeError("each subscript must be either an integer or an "
                                "ellipsis") from None
            if not 0 <= k < 52:
                raise ValueError("subscript is not within the valid range [0, 52)")
            out.append(string.ascii_uppercase[k] if k < 26 else string.ascii_lowercase[k - 26])
        return "".join(out)

    subscripts = ",".join(letters(s) for s in sublists)
    if output is not None:
        subscripts += "->" + letters(output)
    return (subscripts, *arrays)


def _einsum_ellipsis(subscripts, ndims):
    """``subscripts`` with each ``...`` spelled as unused letters, one per
    broadcast dimension, right-aligned across the operands as numpy broadcasts
    them (an operand whose ``...`` covers fewer dimensions gets the last
    ones), and with an explicit output (the implicit one puts them first)."""
    lhs, arrow, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    for spec in ins + ([rhs] if arrow else []):
        if spec.count(".") != (3 if "..." in spec else 0):
            raise ValueError("einstein sum subscripts string contains a '.' that is not part "
                             "of an ellipsis ('...')")
    if len(ins) != len(ndims):
        return subscripts  # the caller raises numpy's error
    counts = []
    for spec, nd in zip(ins, ndims, strict=True):
        k = nd - (len(spec) - 3) if "..." in spec else 0
        if k < 0:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts "
                             f"for operand: {spec!r} for {nd} dimensions")
        counts.append(k)
    n = max(counts, default=0)
    fresh = "".join(c for c in string.ascii_letters if c not in subscripts)[:n]
    if len(fresh) < n:
        raise ValueError("too many subscripts in einsum: the broadcast dimensions of '...' "
                         "need more unused letters than remain")
    ins = [spec.replace("...", fresh[n - k:]) for spec, k in zip(ins, counts, strict=True)]
    if arrow:
        if n and "..." not in rhs:
            raise ValueError("output has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.")
        rhs = rhs.replace("...", fresh)
    else:
        letters = lhs.replace(".", "").replace(",", "")
        rhs = fresh + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ",".join(ins) + "->" + rhs


def _kept(spec, others):
    return "".join(c for c in spec if c in others)


def _sum_out(x, spec, others):
    axes = tuple(i for i, c in enumerate(spec) if c not in others)
    return _reduce("sum", x, axes, False) if axes else x


# ----------------------------------------------------------------------------
# np.linalg.norm
# ----------------------------------------------------------------------------

@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """Vector norms (``ord`` None/2, 1, inf, -inf, 0, any p) and matrix norms
    ('fro', 1, -1, inf, -inf); the 2-norm's derivative is NaN at 0 (0/0), as
    the formula sqrt(sum x**2) gives."""
    x = _float(x)
    if axis is None:
        if ord is not None and x.ndim == 2:
            axis = (0, 1)
        elif ord is not None and x.ndim != 1:
            raise ValueError("Improper number of dimensions to norm.")
        else:
            axis = tuple(range(x.ndim))
            if ord is None:
                return _reduce_norm2(x, axis, keepdims)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if len(axes) == 1:
        if ord is None or ord == 2:
            return _reduce_norm2(x, axes, keepdims)
        if ord == np.inf:
            return _reduce("max", np.absolute(x), axes, keepdims)
        if ord == -np.inf:
            return _reduce("min", np.absolute(x), axes, keepdims)
        if ord == 0:
            return _reduce("sum", (x != 0).astype(x.dtype), axes, keepdims)
        if ord == 1:
            return _reduce("sum", np.absolute(x), axes, keepdims)
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        p = x.dtype.type(ord)
        return _reduce("sum", np.absolute(x) ** p, axes, keepdims) ** (1 / p)
    if len(axes) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    r, c = axes
    if ord in (None, "fro", "f"):
        return _reduce_norm2(x, axes, keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        inner, outer = (r, c) if ord in (1, -1) else (c, r)
        s = _reduce("sum", np.absolute(x), (inner,), True)
        out = _reduce("max" if ord > 0 else "min", s, (outer,), True)
        return out if keepdims else squeeze(out, axes)
    raise NotImplementedError(f"hybridad: np.linalg.norm with ord={ord!r} for matrices (it "
                              "needs singular values) is not supported yet")


def _reduce_norm2(x, axes, keepdims):
    return np.sqrt(_reduce("sum", x * x, axes, keepdims))


# ----------------------------------------------------------------------------
# numpy 2's vector gufuncs (the array API's vecdot)
# ----------------------------------------------------------------------------

def _core(name, x1, a1, x2, a2):
    """The contracted (core) axis ``a1`` of ``x1`` and ``a2`` of ``x2``: of one
    length, as numpy's gufunc requires (it never broadcasts a core axis)."""
    s1, s2 = np.shape(x1), np.shape(x2)
    if not s1 or not s2 or not -len(s1) <= a1 < len(s1) or not -len(s2) <= a2 < len(s2):
        raise ValueError(f"{name}: operands of shapes {s1} and {s2} lack the contracted axis")
    if s1[a1] != s2[a2]:
        raise ValueError(f"{name}: the contracted axes have lengths {s1[a1]} and {s2[a2]} "
                         f"(shapes {s1} and {s2}); numpy does not broadcast them")


def vecdot(x1, x2, /, *, axis=-1):
    """``np.vecdot``: ``sum(conj(x1) * x2, axis)`` over broadcast operands."""
    _core("vecdot", x1, axis, x2, axis)
    return np.sum(np.conj(x1) * x2, axis=axis)  # (a real tracer's conj is itself)


def matvec(x1, x2, /):
    """``np.matvec``: ``x1[..., m, n] @ x2[..., n]`` over broadcast batches."""
    _core("matvec", x1, -1, x2, -1)
    return np.sum(x1 * np.expand_dims(x2, -2), axis=-1)


def vecmat(x1, x2, /):
    """``np.vecmat``: ``conj(x1)[..., n] @ x2[..., n, m]`` over broadcast batches."""
    _core("vecmat", x1, -1, x2, -2)
    return np.sum(np.expand_dims(np.conj(x1), -1) * x2, axis=-2)


GUFUNCS.update({getattr(np, name): fn for name, fn in (("vecdot", vecdot), ("matvec", matvec),
                                                        ("vecmat", vecmat))
                if hasattr(np, name)})
