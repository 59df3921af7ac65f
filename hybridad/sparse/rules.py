"""The sparsity rules: for every op, which elements of its operands each element
of its result depends on (first order), and which pairs of operand elements
interact nonlinearly (second order) -- the table :data:`RULES`, keyed by op name.

A rule answers for one node:

* ``maps(node, active)`` -- one *local map* per operand: ``None`` (the result
  does not depend on it differentiably: a mask, an index, an integer), the
  sentinel :data:`IDENTITY` (element ``e`` depends on element ``e``), or a
  boolean ``scipy.sparse.csr_array`` of shape ``(node.size, operand.size)``:
  row ``e`` holds the operand elements that result element ``e`` reads.
  ``active[k]`` says whether operand ``k`` depends on the differentiated
  argument at all (maps of inactive operands are never used).
* ``second`` -- how the op is nonlinear: ``None`` (linear, or piecewise
  linear: no second-order term), a list of operand pairs ``(i, j)`` whose
  elements meet in the same result element (``x * y``: ``[(0, 1)]``;
  ``exp(x)``: ``[(0, 0)]``; a ``prod`` reduction: ``[(0, 0)]`` over each
  group), or a callable giving the pairs' factor matrices itself (``matmul``
  of two active operands).

Families:

* elementwise ops (every op of kind ``"elementwise"``, user
  :func:`hybridad.elementwise` functions included) -- broadcast maps for the
  operands whose partial is not ``None`` or ``0``; second order from the
  partials themselves, evaluated once on dependency probes
  (:func:`elementwise_pairs`);
* data movement (views, ``concatenate``, ``scatter``, ``copy``, ``gather``) --
  exact: the op is run once on numbered operands (element ``k`` of the
  ``i``-th operand holds a distinct number), and each result element names
  its source;
* reductions and scans -- their groups and prefixes along the axes;
* ``matmul`` -- ``kron`` of the other operand's pattern with an identity;
  ``where`` with a constant condition and products with a constant factor --
  the constant's zeros remove the dependence.  The zeros of constants
  (literals, and arrays ``f`` captures, as they are at detection) are
  structural; an operand computed from the arguments counts as nonzero
  everywhere;
* linear algebra, host functions, the fused kinds -- :data:`CONSERVATIVE`:
  every result element depends on every element of every active operand,
  nonlinearly.  Never missing a nonzero; an op without an entry is treated
  the same way.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import scipy.sparse as sp

from ..ir.registry import REGISTRY
from .probe import carries as _carries
from .probe import elementwise_pairs

__all__ = ["CONSERVATIVE", "IDENTITY", "MAX_NNZ", "RULES", "Rule", "TooDense",
           "elementwise_pairs", "rule_for"]

#: the local map "element e depends on element e"
IDENTITY = "identity"
#: the most structural nonzeros any one pattern (of a node, a map, the Hessian) may hold
MAX_NNZ = 200_000_000


class TooDense(ValueError):
    """A pattern would hold more than :data:`MAX_NNZ` nonzeros: the derivative is
    (nearly) dense, sparse methods do not apply."""


#: a lower bound than MAX_NNZ for the detection running in this context
#: (:func:`limited`: a dense plan asking whether coloring would pay)
_LIMIT = contextvars.ContextVar("hybridad_sparsity_limit", default=None)


@contextlib.contextmanager
def limited(nnz):
    """Detection in the ``with`` block gives up (:class:`TooDense`) past
    ``nnz`` structural nonzeros in any one pattern."""
    token = _LIMIT.set(int(nnz))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def check_nnz(count, what):
    limit = _LIMIT.get()
    limit = MAX_NNZ if limit is None else min(limit, MAX_NNZ)
    if count > limit:
        raise TooDense(f"the sparsity pattern of {what} would hold {count} structural "
                       f"nonzeros (more than {limit}): this derivative is too dense for "
                       "sparse methods; use the dense hybridad.jacobian / hessian")


class Rule:
    """One op's sparsity rule: ``maps(node, active)`` and ``second`` (see the
    module docstring)."""

    __slots__ = ("maps", "second")

    def __init__(self, maps, second=None):
        self.maps = maps
        self.second = second


# ----------------------------------------------------------------------------
# building maps
# ----------------------------------------------------------------------------
def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def select(src, ncols):
    """csr ``(len(src), ncols)``: row ``e`` has one entry at ``src[e]`` (none where
    ``src[e] < 0``)."""
    src = np.asarray(src, dtype=np.int64).reshape(-1)
    keep = src >= 0
    indptr = np.zeros(src.size + 1, np.int64)
    np.cumsum(keep, out=indptr[1:])
    cols = src[keep]
    return sp.csr_array((np.ones(cols.size, bool), cols, indptr), shape=(src.size, ncols))


def group(rows, nrows):
    """csr ``(nrows, len(rows))``: column ``a`` has one entry, in row ``rows[a]``
    (many operand elements to one result element)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    return sp.csr_array((np.ones(rows.size, bool), (rows, np.arange(rows.size))),
                        shape=(nrows, rows.size))


def dense(nrows, ncols):
    """Every result element reads every operand element."""
    check_nnz(nrows * ncols, "a conservative (dense) rule")
    return sp.csr_array(np.ones((nrows, ncols), bool))


def broadcast(arg_shape, out_shape):
    """The map of an operand broadcast to the result's shape."""
    if tuple(arg_shape) == tuple(out_shape):
        return IDENTITY
    n = _size(arg_shape)
    src = np.broadcast_to(np.arange(n, dtype=np.int64).reshape(arg_shape), out_shape)
    return select(src.reshape(-1), n)


def _lines(shape, axis, block):
    """``kron(I_pre, block, I_post)`` for ``block`` acting along ``axis`` of ``shape``."""
    pre = _size(shape[:axis])
    post = _size(shape[axis + 1:])
    check_nnz(pre * post * int(block.nnz), "a scan")
    m = sp.kron(sp.eye_array(pre, dtype=bool), block, format="csr")
    return sp.kron(m, sp.eye_array(post, dtype=bool), format="csr").astype(bool)


def _triangle(length, lower, strict):
    # (checked before the block is made: a scan of 10^5 is 5e9 nonzeros)
    check_nnz(length * (length + (-1 if strict else 1)) // 2, "a scan")
    ones = np.ones((length, length), bool)
    tri = np.tril(ones, -1 if strict else 0) if lower else np.triu(ones, 1 if strict else 0)
    return sp.csr_array(tri)


# ----------------------------------------------------------------------------
# elementwise: maps from the partials; second order by dependency probes
# ----------------------------------------------------------------------------
def _elementwise_maps(node, active, ctx):
    op = REGISTRY[node.op]
    partials = op.partials if op.partials is not None else (1,) * len(node.args)
    return [broadcast(a.shape, node.shape) if act and _carries(p) else None
            for a, act, p in zip(node.args, active, partials, strict=True)]


def _elementwise_second(node, active):
    pairs = elementwise_pairs(node.op)
    if pairs is None:
        n = len(node.args)
        pairs = tuple((i, j) for i in range(n) for j in range(n))
    return [(i, j) for i, j in pairs if active[i] and active[j]]


ELEMENTWISE = Rule(_elementwise_maps, _elementwise_second)


def _masked(arg_shape, out_shape, keep):
    """The broadcast map of an operand, without the result elements where
    ``keep`` (a boolean array broadcasting to the result) is False."""
    n = _size(arg_shape)
    src = np.array(np.broadcast_to(np.arange(n, dtype=np.int64).reshape(arg_shape),
                                   out_shape))
    src[~np.broadcast_to(keep, out_shape)] = -1
    return select(src.reshape(-1), n)


def _where_maps(node, active, ctx):
    """``where(c, a, b)``: a constant condition (a mask, as ``np.tril`` makes)
    selects exactly; otherwise both branches count everywhere."""
    maps = _elementwise_maps(node, active, ctx)
    cond = ctx.value(node.args[0])
    if cond is not None:
        cond = np.asarray(cond, dtype=bool)
        for k, keep in ((1, cond), (2, ~cond)):
            if maps[k] is not None:
                maps[k] = _masked(node.args[k].shape, node.shape, keep)
    return maps


def _multiply_maps(node, active, ctx):
    """``a * b``: where the other factor is a constant, its zeros carry no
    derivative (a mask)."""
    maps = _elementwise_maps(node, active, ctx)
    for k, other in ((0, 1), (1, 0)):
        if maps[k] is None or active[other]:
            continue
        value = ctx.value(node.args[other])
        if value is not None and not np.all(value):
            maps[k] = _masked(node.args[k].shape, node.shape, np.asarray(value) != 0)
    return maps


# ----------------------------------------------------------------------------
# data movement: run the op on numbered operands
# ----------------------------------------------------------------------------
class _NotConstant(Exception):
    """An index operand is computed at run time: the rule falls back to dense."""


def _numbered(node, active, data, ctx):
    """The op run on operands numbered 1, 2, ... (the ``data`` positions that are
    active; inactive data operands hold 0, index operands their constant
    value): a map per operand from where each result element came from."""
    arrays, ranges, start = [], {}, 1
    for k, a in enumerate(node.args):
        if k in data:
            if active[k]:
                arrays.append(np.arange(start, start + a.size, dtype=np.float64)
                              .reshape(a.shape))
                ranges[k] = start
                start += a.size
            else:
                arrays.append(np.zeros(a.shape, np.float64))
        else:
            value = ctx.value(a)
            if value is None:
                raise _NotConstant
            arrays.append(value)
    op = REGISTRY[node.op]
    if op.kind == "view":
        got = np.asarray(op.view(*arrays, **node.attrs))
    else:
        got = np.zeros(node.shape, np.float64)
        op.run(got, *arrays, **node.attrs)
    source = got.reshape(-1).astype(np.int64)
    maps = []
    for k, a in enumerate(node.args):
        if k not in ranges:
            maps.append(None)
            continue
        local = source - ranges[k]
        local[(local < 0) | (local >= a.size)] = -1
        maps.append(select(local, a.size))
    return maps


def _movement(data=(0,)):
    def maps(node, active, ctx):
        try:
            return _numbered(node, active, set(range(len(node.args))) if data is None
                             else set(data), ctx)
        except _NotConstant:
            return _conservative_maps(node, active, ctx)

    return Rule(maps)


def _reshape_maps(node, active, ctx):
    return [IDENTITY if active[0] else None]


def _copy_maps(node, active, ctx):
    return [IDENTITY if active[0] else None]


def _const_index(node, k, ctx, flat=True):
    """The constant index operand ``k`` of ``node`` as int64 (raveled unless
    ``flat=False``), or None when it is computed."""
    value = ctx.value(node.args[k])
    if value is None:
        return None
    value = np.asarray(value, dtype=np.int64)
    return value.reshape(-1) if flat else value


def _scattered(node, g, k, ctx):
    """The map of a flat-position scatter of ``g`` into ``node`` (index operand
    ``k``): each element of ``g`` to the position its index names -- the index
    in its own shape, broadcast against ``g`` as ``np.add.at`` does (a
    raveled index of a 2-D ``g`` broadcast against it raised); every position
    for every element when the index is computed, or when ``g`` itself is the
    operand that broadcasts."""
    index = _const_index(node, k, ctx, flat=False)
    if index is not None:
        try:
            return group(np.broadcast_to(index % max(node.size, 1), g.shape), node.size)
        except ValueError:  # (the index has more elements than g)
            pass
    return dense(node.size, g.size)


def _gather_maps(node, active, ctx):
    flat = _const_index(node, 1, ctx)
    x = node.args[0]
    if not active[0]:
        return [None, None]
    if flat is None:
        return [dense(node.size, x.size), None]
    return [select(flat % max(x.size, 1), x.size), None]


def _scatter_flat_maps(node, active, ctx):
    return [_scattered(node, node.args[0], 1, ctx) if active[0] else None, None]


def _scatter_add_flat_maps(node, active, ctx):
    return [IDENTITY if active[0] else None,
            _scattered(node, node.args[1], 2, ctx) if active[1] else None, None]


def _scatter_add_maps(node, active, ctx):
    g = node.args[1]
    gmap = None
    if active[1]:
        out = np.zeros(node.shape, np.float64)
        view = out[node.attrs["index"] + (...,)]
        view[...] = np.arange(1, g.size + 1, dtype=np.float64).reshape(g.shape)
        local = out.reshape(-1).astype(np.int64) - 1
        gmap = select(local, g.size)
    return [IDENTITY if active[0] else None, gmap]


def _iadd_maps(node, active, ctx):
    return [IDENTITY if active[0] else None,
            broadcast(node.args[1].shape, node.shape) if active[1] else None]


# ----------------------------------------------------------------------------
# reductions, scans, sorting
# ----------------------------------------------------------------------------
def _reduce_maps(node, active, ctx):
    x = node.args[0]
    if not active[0]:
        return [None]
    axis = node.attrs["axis"]
    kshape = tuple(1 if i in axis else s for i, s in enumerate(x.shape))
    rows = np.broadcast_to(np.arange(_size(kshape), dtype=np.int64).reshape(kshape), x.shape)
    return [group(rows.reshape(-1), node.size)]


def _axis(node, x):
    ax = node.attrs["axis"]
    ax = ax[0] if isinstance(ax, tuple) else ax
    return int(ax) % max(len(x.shape), 1)


def _scan(lower, strict):
    def maps(node, active, ctx):
        x = node.args[0]
        if not active[0]:
            return [None] + [None] * (len(node.args) - 1)
        ax = _axis(node, x)
        low = lower != bool(node.attrs.get("reverse", False))
        return [_lines(x.shape, ax, _triangle(x.shape[ax], low, strict))]

    return maps


def _cumprod_adjoint_maps(node, active, ctx):
    g, x = node.args
    ax = _axis(node, x)
    n = x.shape[ax]
    return [_lines(g.shape, ax, _triangle(n, False, False)) if active[0] else None,
            _lines(x.shape, ax, _triangle(n, False, True)) if active[1] else None]


def _sort_values_maps(node, active, ctx):
    x = node.args[0]
    if not active[0]:
        return [None, None]
    ax = _axis(node, x)
    check_nnz(x.shape[ax] ** 2, "a sort")  # (before the block is made)
    block = sp.csr_array(np.ones((x.shape[ax], x.shape[ax]), bool))
    return [_lines(x.shape, ax, block), None]


def _fourier_maps(node, active, ctx):
    """``fft``/``rfft``/``irfft``: each element of a transformed line (both parts
    of its complex entries) reads the whole line of the operand; the leading
    axes are a batch."""
    x = node.args[0]
    if not active[0]:
        return [None]
    lead = len(node.shape) - (1 if node.op == "irfft" else 2)
    pre = _size(node.shape[:lead])
    out_line, in_line = _size(node.shape[lead:]), _size(x.shape[lead:])
    check_nnz(pre * out_line * in_line, "a Fourier transform")
    block = sp.csr_array(np.ones((out_line, in_line), bool))
    return [sp.kron(sp.eye_array(pre, dtype=bool), block, format="csr").astype(bool)]


# ----------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------
def _matrices(node, ctx):
    """A matmul operand's nonzero pattern as ``(batch, rows, cols)`` booleans when
    its value is known at detection (a constant, or computed from constants
    only: its zeros are structural), else None (any value: all ones)."""
    value = ctx.value(node)
    if value is None:
        return None
    value = np.broadcast_to(np.asarray(value) != 0, node.shape)
    return value.reshape(-1, *node.shape[-2:])


def _batch_pairs(node):
    """For each result batch entry: the flat batch index of each operand."""
    a, b = node.args
    out_batch = node.shape[:-2]
    nb = _size(out_batch)
    ia = np.broadcast_to(np.arange(_size(a.shape[:-2])).reshape(a.shape[:-2]), out_batch)
    ib = np.broadcast_to(np.arange(_size(b.shape[:-2])).reshape(b.shape[:-2]), out_batch)
    return nb, ia.reshape(-1), ib.reshape(-1)


def _stack(blocks, nrows, ncols):
    """csr from ``(row offset, col offset, csr block)`` triples."""
    rows, cols = [], []
    for r0, c0, blk in blocks:
        coo = blk.tocoo()
        rows.append(coo.row.astype(np.int64) + r0)
        cols.append(coo.col.astype(np.int64) + c0)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    check_nnz(r.size, "a matmul")
    return sp.csr_array((np.ones(r.size, bool), (r, c)), shape=(nrows, ncols))


def _matmul_maps(node, active, ctx):
    a, b = node.args
    m, k = a.shape[-2:]
    n = b.shape[-1]
    nb, ia, ib = _batch_pairs(node)
    maps = [None, None]
    if active[0]:  # out[t, i, j] <- a[t, i, l] where b[t, l, j] != 0
        bpat = _matrices(b, ctx)
        check_nnz(nb * m * k * n if bpat is None else m * int(bpat.sum()) * nb, "a matmul")
        blocks = [(t * m * n, ia[t] * m * k, sp.kron(
            sp.eye_array(m, dtype=bool),
            sp.csr_array(np.ones((n, k), bool) if bpat is None else bpat[ib[t]].T), format="csr"))
            for t in range(nb)]
        maps[0] = _stack(blocks, node.size, a.size)
    if active[1]:  # out[t, i, j] <- b[t, l, j] where a[t, i, l] != 0
        apat = _matrices(a, ctx)
        check_nnz(nb * m * k * n if apat is None else n * int(apat.sum()) * nb, "a matmul")
        blocks = [(t * m * n, ib[t] * k * n, sp.kron(
            sp.csr_array(np.ones((m, k), bool) if apat is None else apat[ia[t]]),
            sp.eye_array(n, dtype=bool), format="csr")) for t in range(nb)]
        maps[1] = _stack(blocks, node.size, b.size)
    return maps


def _matmul_second(node, active):
    """Both operands active: ``a[t, i, l]`` meets ``b[t, l, j]`` for every
    ``i, j``: the operand elements grouped by ``(t, l)``, the pairs are the
    products of the groups' unions (factor matrices, see :mod:`.pattern`)."""
    if not (active[0] and active[1]):
        return None
    a, b = node.args
    m, k = a.shape[-2:]
    n = b.shape[-1]
    nb, ia, ib = _batch_pairs(node)
    ra, ca, rb, cb = [], [], [], []
    for t in range(nb):
        ra.append(t * k + np.broadcast_to(np.arange(k), (m, k)).reshape(-1))
        ca.append(ia[t] * m * k + np.arange(m * k))
        rb.append(t * k + np.broadcast_to(np.arange(k)[:, None], (k, n)).reshape(-1))
        cb.append(ib[t] * k * n + np.arange(k * n))
    sa = group_rows(np.concatenate(ra), np.concatenate(ca), nb * k, a.size)
    sb = group_rows(np.concatenate(rb), np.concatenate(cb), nb * k, b.size)
    return [(0, sa, 1, sb)]


def group_rows(rows, cols, nrows, ncols):
    """csr ``(nrows, ncols)`` with entries at ``(rows[i], cols[i])``."""
    return sp.csr_array((np.ones(len(rows), bool), (rows, cols)), shape=(nrows, ncols))


# ----------------------------------------------------------------------------
# conservative
# ----------------------------------------------------------------------------
def _conservative_maps(node, active, ctx):
    return [dense(node.size, a.size) if act and a.dtype.kind == "f" else None
            for a, act in zip(node.args, active, strict=True)]


def _all_pairs(node, active):
    idx = [i for i, act in enumerate(active) if act]
    return [(i, j) for i in idx for j in idx]


CONSERVATIVE_RULE = Rule(_conservative_maps, _all_pairs)

#: ops with no structure hybridad exploits: every result element depends on
#: every element of every active operand, nonlinearly
CONSERVATIVE = frozenset({
    "solve", "inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "svd", "pinv", "eig",
    "eigh_evr", "solve_triangular", "qr", "lu_factor", "expm", "refuse_if", "cholesky_adjoint",
    "host_ufunc", "host_call", "ode", "ode_adjoint", "quad", "root", "region", "region_acc",
    "region_partial",
    # (made by the lowering, after any pattern is traced)
    "matvec_pair", "matvec_two", "solve_lu", "lu_factors", "lu_solve", "symmetric",
    "cho_solve",
    "loop",  # (the body's pattern iterated is not derived yet)
})


def _no_operands(node, active, ctx):
    return [None] * len(node.args)


def _distinct0(node, active):
    """Products (``prod``, ``cumprod``): distinct elements of operand 0 read by one
    result element meet (``d^2 (x y) / dx^2 = 0``)."""
    return [("distinct", 0)] if active[0] else None


#: op name -> Rule (elementwise ops not listed use :data:`ELEMENTWISE`)
RULES = {
    # views and data movement: exact, by running the op on numbered operands
    "getitem": _movement(), "transpose": _movement(), "broadcast_to": _movement(),
    "reshape": Rule(_reshape_maps), "copy": Rule(_copy_maps),
    "concatenate": _movement(data=None), "scatter": _movement(),
    "gather": Rule(_gather_maps), "scatter_flat": Rule(_scatter_flat_maps),
    "scatter_add": Rule(_scatter_add_maps), "scatter_add_flat": Rule(_scatter_add_flat_maps),
    "iadd": Rule(_iadd_maps), "zeros": Rule(_no_operands),
    # reductions: sum and the extrema are linear (piecewise), prod is not
    "sum": Rule(_reduce_maps), "max": Rule(_reduce_maps), "min": Rule(_reduce_maps),
    "prod": Rule(_reduce_maps, _distinct0),
    # scans
    "cumsum": Rule(_scan(lower=True, strict=False)),
    "cumprod": Rule(_scan(lower=True, strict=False), _distinct0),
    "cumprod_exclusive": Rule(_scan(lower=True, strict=True), _distinct0),
    "cumprod_adjoint": Rule(_cumprod_adjoint_maps, _all_pairs),
    # sorting: a permutation within each line (values, not positions, decide it)
    "sort_values": Rule(_sort_values_maps), "sort_pack": Rule(_no_operands),
    "sort_index": Rule(_no_operands),
    "matmul": Rule(_matmul_maps, _matmul_second),
    # Fourier transforms: linear, each line dense
    **dict.fromkeys(("fft", "rfft", "irfft"), Rule(_fourier_maps)),
    # elementwise, refined where a constant operand is a mask
    "where": Rule(_where_maps, _elementwise_second),
    "multiply": Rule(_multiply_maps, _elementwise_second),
    "safe_multiply": Rule(_multiply_maps, _elementwise_second),
}


def rule_for(name):
    """The rule of op ``name``: its entry in :data:`RULES`, the elementwise rule
    for elementwise ops, else the conservative one."""
    rule = RULES.get(name)
    if rule is not None:
        return rule
    op = REGISTRY.get(name)
    if op is not None and op.kind == "elementwise" and name not in CONSERVATIVE:
        return ELEMENTWISE
    return CONSERVATIVE_RULE
