"""Sparsity detection: the structural nonzeros of a Jacobian or Hessian, read off
the traced graph by propagating index sets through it.

``f`` is traced once, as every plan traces it (the same graph).  Each node
that depends on the differentiated argument ``x`` gets a boolean pattern
``P`` of shape ``(node.size, x.size)`` -- row ``e``: the elements of ``x``
that element ``e`` depends on -- computed from its operands' patterns by the
op's local maps (:mod:`.rules`): ``P = sum_k M_k @ P_k`` over the boolean
semiring, as sparse matrix products.  The output's ``P`` is the Jacobian's
pattern.  Everything is conservative: a rule that cannot see structure says
"everything", so no structural nonzero is ever missed.

The Hessian of a scalar ``f`` is the sum, over the nodes, of each node's own
second-order terms carried to ``x`` by the first-order patterns (Hessian
"global" mode of sparsity tracers): an op that is nonlinear in operands
``i`` and ``j`` (:attr:`.rules.Rule.second`) adds ``A_i^T A_j`` with ``A_i``
the pattern of operand ``i`` as the result's elements read it, restricted to
the result elements that reach ``f`` (a backward sweep of the same maps
first): ``x[0] * x[1]`` gives the pair ``(0, 1)``, ``exp(x)`` the diagonal.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from .. import _tree
from ..core.trace import Trace
from ..frontend.numpy_made import traced_again
from ..core.tracer import Tracer
from ..frontend.guards import note_values_read
from ..ir.registry import REGISTRY
from ..plans.arguments import arg_names, normalize_argnums, prepare_args
from .rules import IDENTITY, check_nnz, rule_for

__all__ = ["hessian_sparsity", "jacobian_sparsity", "trace_for_sparsity"]


# ----------------------------------------------------------------------------
# tracing
# ----------------------------------------------------------------------------
def trace_for_sparsity(f, args, argnums=0):
    """Trace ``f(*args)`` once.

    Returns
    -------
    nodes : list of Node
        The forward graph, in order.
    x : Node
        The differentiated argument's input node.
    y : Node or ndarray
        The output's node, or the output itself when it does not depend on
        anything traced (a constant).
    """
    if not callable(f):
        raise TypeError(f"f must be callable; got {type(f).__name__}")
    nums, diff = normalize_argnums(argnums, len(args))
    if isinstance(nums, tuple):
        raise TypeError(f"sparsity detection differentiates one array argument (argnums an "
                        f"int); got argnums={argnums!r}")
    leaves, treedefs = prepare_args(args, diff, lambda: arg_names(f, len(args)))
    if treedefs[nums] != _tree.LEAF:
        raise TypeError("the differentiated argument must be one array (not a tuple, list or "
                        "dict of arrays)")
    trace = Trace()
    with trace:
        tracers = [trace.input(i, a.shape, a.dtype) for i, a in enumerate(leaves)]
        it = iter(tracers)
        targs, x = [], None
        for k, td in enumerate(treedefs):
            mine = [next(it) for _ in range(_tree.count_leaves(td))]
            targs.append(_tree.unflatten(td, mine))
            if k == nums:
                x = mine[0]
        # (arrays f makes and fills with traced values: traced on a second try, as a
        # plan's trace does -- np.full(n, t), xx = np.zeros(n); xx[1:] = x)
        y = traced_again(lambda: f(*targs), trace)
    if isinstance(y, Tracer):
        if y.dtype.kind != "f":
            raise TypeError(f"f must return floating-point values; it returned dtype {y.dtype}")
        return list(trace.nodes), x.node, y.node
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"f must return a numeric array; it returned {type(y).__name__}")
    return list(trace.nodes), x.node, y


class _Context:
    """What a rule may ask about a node: its value, where it is known at
    detection -- a constant, or computed from constants only.  ``literal``:
    only from literal constants (values fixed in the trace, never a captured
    array, which the caller may change in place)."""

    LIMIT = 1 << 24  # elements: larger constant expressions are not evaluated

    def __init__(self):
        self._values = {}

    def value(self, node, literal=False):
        value, is_literal = self._known(node)
        return None if literal and not is_literal else value

    def _known(self, node):
        if node.op == "const":
            literal = bool(node.attrs.get("literal", False))
            if not literal:  # a captured array's values: the plan guards them
                note_values_read(node.attrs["value"])
            return node.attrs["value"], literal
        if node.op == "input":
            return None, False
        if node.id in self._values:
            return self._values[node.id]
        op = REGISTRY.get(node.op)
        value, is_literal = None, False
        if op is not None and op.workspace is None and node.size <= self.LIMIT and \
                (op.view is not None or op.run is not None):
            known = [self._known(a) for a in node.args]
            if all(v is not None for v, _ in known):
                is_literal = all(lit for _, lit in known)
                try:
                    with np.errstate(all="ignore"):
                        args = [v for v, _ in known]
                        if op.kind == "view":
                            value = np.asarray(op.view(*args, **node.attrs))
                        else:
                            value = np.zeros(node.shape, node.dtype)
                            op.run(value, *args, **node.attrs)
                except Exception:  # noqa: BLE001 - not evaluable here: unknown value
                    value = None
        self._values[node.id] = (value, is_literal)
        return value, is_literal


# ----------------------------------------------------------------------------
# propagation
# ----------------------------------------------------------------------------
def _apply(m, p):
    if m is IDENTITY:
        return p
    row_counts = np.diff(p.indptr).astype(np.float64)
    check_nnz(int((m @ row_counts).sum()), "an intermediate")
    return m @ p


def _union(parts):
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def _local_maps(nodes, x, want_all):
    """Forward sweep: the local maps of every node that depends on ``x``
    (``{id: (maps, active)}``), in order."""
    ctx = _Context()
    active_ids = {x.id}
    out = {}
    for node in nodes:
        if node.op in ("input", "const") or node.dtype.kind != "f":
            continue
        active = [a.id in active_ids for a in node.args]
        if not any(active):
            continue
        maps = rule_for(node.op).maps(node, active, ctx)
        if any(m is not None and act for m, act in zip(maps, active, strict=True)):
            active_ids.add(node.id)
            out[node.id] = (maps, active)
            if not want_all:
                yield node, maps, active
    if want_all:
        yield out


def _expiry(nodes):
    """position -> ids of the nodes last read by the node at that position."""
    out = {}
    for key, at in _last_uses(nodes).items():
        out.setdefault(at, []).append(key)
    return out


def _last_uses(nodes):
    last = {}
    for i, node in enumerate(nodes):
        for a in node.args:
            last[a.id] = i
    return last


def _eye(n):
    return sp.eye_array(n, format="csr", dtype=bool)


def jacobian_pattern(nodes, x, y):
    """The boolean csr ``(y.size, x.size)`` pattern of ``dy/dx`` (``y`` a node
    of ``nodes``, or a constant array)."""
    n = x.size
    if not hasattr(y, "id"):
        return sp.csr_array((np.asarray(y).size, n), dtype=bool)
    pats = {x.id: _eye(n)}
    last = _last_uses(nodes)
    position = {node.id: i for i, node in enumerate(nodes)}
    for node, maps, active in _local_maps(nodes, x, False):
        parts = [_apply(m, pats[a.id]) for m, a, act in zip(maps, node.args, active, strict=True)
                 if m is not None and act]
        pats[node.id] = _union(parts)
        check_nnz(pats[node.id].nnz, f"%{node.id} = {node.op}(...)")
        for a in node.args:  # free what nothing reads any more
            if a.id != y.id and last.get(a.id) == position[node.id]:
                pats.pop(a.id, None)
    return pats.get(y.id, sp.csr_array((y.size, n), dtype=bool))


def _reach(nodes, maps_of, y):
    """Backward sweep: for each node, which of its elements reach ``y`` through
    differentiable dependence (boolean vectors)."""
    reach = {y.id: np.ones(y.size, bool)}
    for node in reversed(nodes):
        r = reach.get(node.id)
        entry = maps_of.get(node.id)
        if r is None or entry is None:
            continue
        maps, active = entry
        for m, a, act in zip(maps, node.args, active, strict=True):
            if m is None or not act:
                continue
            got = r if m is IDENTITY else (m.T @ r.astype(np.float32)) > 0
            old = reach.get(a.id)
            reach[a.id] = got.copy() if old is None else old | got
    return reach


def _rows(p, keep):
    """``p`` restricted to the rows ``keep`` (a boolean vector; all: ``p`` itself)."""
    return p if keep is None else p[keep]


def _distinct_pairs(m, p, keep):
    """``sum over result rows o (kept) of sum over distinct operand elements e != e'
    of row o: G_e^T G_e'`` -- counted in floating point (exact small integers):
    ``U^T U - sum_e G_e^T G_e`` with ``U = M P``."""
    if m is IDENTITY:  # one element per result element: no distinct pairs
        return sp.csr_array(p.shape[1:] * 2, dtype=bool)
    mf = sp.csr_array(m if keep is None else m[keep], dtype=np.float64)
    pf = sp.csr_array(p, dtype=np.float64)
    u = mf @ pf
    used = np.flatnonzero(np.asarray(mf.sum(axis=0)).reshape(-1) > 0)
    ps = pf[used]
    check_nnz(int((np.diff(u.indptr).astype(np.float64) ** 2).sum()), "the Hessian")
    h = sp.csr_array(u.T @ u - ps.T @ ps)
    h.data = h.data > 0.5
    h.eliminate_zeros()
    return sp.csr_array(h, dtype=bool)


def hessian_pattern(nodes, x, y):
    """The boolean csr ``(x.size, x.size)`` pattern of the Hessian of the scalar
    ``y``, symmetric (both triangles)."""
    n = x.size
    if not hasattr(y, "id"):
        return sp.csr_array((n, n), dtype=bool)
    (maps_of,) = _local_maps(nodes, x, True)
    reach = _reach(nodes, maps_of, y)
    pats = {x.id: _eye(n)}
    terms, held = [], 0
    expire = _expiry(nodes)
    for position, node in enumerate(nodes):
        for gone in expire.get(position - 1, ()):  # nothing reads them any more
            pats.pop(gone, None)
        entry = maps_of.pop(node.id, None)
        if entry is None:
            continue
        maps, active = entry
        local = [None if m is None or not act else _apply(m, pats[a.id])
                 for m, a, act in zip(maps, node.args, active, strict=True)]
        pats[node.id] = _union([p for p in local if p is not None])
        check_nnz(pats[node.id].nnz, f"%{node.id} = {node.op}(...)")
        second = rule_for(node.op).second
        pairs = second(node, active) if second is not None else None
        if callable(pairs):
            pairs = pairs()
        if not pairs:
            continue
        r = reach.get(node.id)
        keep = None if r is None or r.all() else np.flatnonzero(r)
        if r is not None and not r.any():
            continue
        done = set()
        for pair in pairs:
            if pair[0] == "distinct":  # pairs of distinct elements meeting in a result element
                terms.append(_distinct_pairs(maps[pair[1]], pats[node.args[pair[1]].id], keep))
                held += terms[-1].nnz
                continue
            if len(pair) == 4:  # factor form: groups of the operands' own elements
                i, si, j, sj = pair
                a_i, a_j = si @ pats[node.args[i].id], sj @ pats[node.args[j].id]
            else:
                i, j = min(pair), max(pair)
                if (i, j) in done or local[i] is None or local[j] is None:
                    continue
                done.add((i, j))
                a_i, a_j = _rows(local[i], keep), _rows(local[j], keep)
            work = int((np.diff(a_i.indptr).astype(np.float64) *
                        np.diff(a_j.indptr)).sum())
            check_nnz(work, f"the Hessian (at %{node.id} = {node.op}(...))")
            terms.append(a_i.T @ a_j)
            held += terms[-1].nnz
            if held > 4 * max(n, 1 << 20) and len(terms) > 1:  # merge, keeping memory bounded
                terms = [_union(terms)]
                held = terms[0].nnz
    h = _union(terms) if terms else sp.csr_array((n, n), dtype=bool)
    h = sp.csr_array(h + h.T)
    check_nnz(h.nnz, "the Hessian")
    return h


def _canonical(p):
    p = sp.csr_array(p, dtype=bool)
    p.sum_duplicates()
    p.sort_indices()
    p.eliminate_zeros()
    return p


# ----------------------------------------------------------------------------
# public
# ----------------------------------------------------------------------------
def jacobian_sparsity(f: Callable[..., Any], x: Any, *args: Any,
                      argnums: int = 0) -> sp.csr_array:
    """The structural nonzeros of the Jacobian of ``f``, found from its traced graph.

    Parameters
    ----------
    f : callable
        Plain numpy code returning an array, called as ``f(x, *args)``.
    x : ndarray
        The first argument (only its shape and dtype are used).
    *args
        Further arguments: arrays are data (their values are not read), other
        values are static.
    argnums : int, default 0
        The one array argument (a position in ``(x, *args)``) differentiated.

    Returns
    -------
    scipy.sparse.csr_array
        Boolean, shape ``(y.size, x.size)`` over ``y = f(x, *args)`` and the
        differentiated argument flattened in C order; sorted indices.  Entry
        ``(i, j)`` is stored when ``y_i`` may depend on ``x_j``.

    Notes
    -----
    Conservative: a structural nonzero is never missing; the pattern is exact
    for elementwise ops, reductions, slicing, ``np.roll``, gathers and
    scatters, concatenation and reshapes, and for ``matmul`` with a constant
    matrix (its zeros, as they are when the pattern is detected, are
    structural; a matrix passed as an argument counts as dense).  Linear
    algebra and functions hybridad has no rules for count as dense in their
    operands.  See :mod:`hybridad.sparse.pattern`.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> p = ha.jacobian_sparsity(lambda x: x[1:] * x[:-1], np.ones(4))
    >>> p.toarray().astype(int)
    array([[1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    nodes, xnode, y = trace_for_sparsity(f, (x, *args), argnums)
    return _canonical(jacobian_pattern(nodes, xnode, y))


def hessian_sparsity(f: Callable[..., Any], x: Any, *args: Any,
                     argnums: int = 0) -> sp.csr_array:
    """The structural nonzeros of the Hessian of a scalar ``f``, from its traced graph.

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar, called as ``f(x, *args)``.
    x : ndarray
        The first argument (only its shape and dtype are used).
    *args
        Further arguments (data and static values, as for :func:`jacobian_sparsity`).
    argnums : int, default 0
        The one array argument differentiated.

    Returns
    -------
    scipy.sparse.csr_array
        Boolean, symmetric (both triangles stored), shape ``(x.size, x.size)``.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> p = ha.hessian_sparsity(lambda x: np.sum(x[1:] * x[:-1]) + np.sum(np.exp(x)), np.ones(3))
    >>> p.toarray().astype(int)
    array([[1, 1, 0],
           [1, 1, 1],
           [0, 1, 1]])
    """
    nodes, xnode, y = trace_for_sparsity(f, (x, *args), argnums)
    size = y.size
    if size != 1:
        raise ValueError(f"hessian_sparsity needs a scalar function; f returned shape "
                         f"{tuple(y.shape)}")
    return _canonical(hessian_pattern(nodes, xnode, y))
