"""``x[mask]`` at a traced boolean mask, read lazily: no decision on the mask
while the code only computes with the selection elementwise and reduces it.

numpy's ``x[mask]`` holds as many elements as the mask's count, which is a
value: a plan that took it (a decision on the mask) retraced and compiled at
every call whose mask differed -- ``np.sum(r[r > 0] ** 2)``, ``loss[valid]
.mean()``, ``y[m] = np.sqrt(x[m])``: 10^3 times the cost of the call.  Yet
what such code computes does not depend on the count: an elementwise
function of the selected elements, summed, averaged or written back, is the
same function of the whole arrays, masked.  :class:`Selection` is that
tracer.  It holds the array of ``x``'s own shape and the mask, and

- a ufunc of selections by the one mask, and of numbers or rows that
  broadcast to one selected element, is a selection of the ufunc of their
  whole arrays; ``np.where``, ``np.clip``, ... likewise (:data:`ELEMENTWISE`),
  and an ``@hybridad.elementwise`` function's call; so are selected rows
  times a matrix or vector, ``X[m] @ w``;
- ``np.sum``, ``mean``, ``average``, ``prod``, ``max``, ``min``, ``any``,
  ``all``, ``count_nonzero``, ``var``, ``std``, ``nansum``, ``linalg.norm``
  and the dot product of two 1-D selections reduce the whole array with
  ``np.where(mask, ., identity)`` (``median``, ``quantile``, ``percentile``:
  NaN-ignoring ones of it with NaN where the mask is False) (the methods too; ``axis`` None or 0, or
  axes of the selected element alone: :mod:`.numpy_selected_reduce`);
- ``np.nonzero(mask)``, ``np.where(mask)``, ``np.flatnonzero``,
  ``np.argwhere`` are selections of every element's position, and an index
  by them untouched is the selection by the mask;
- ``y[mask] = selection`` is ``np.where(mask, ., y)``
  (:func:`hybridad.frontend.numpy_masked.selection_written`), so ``y[y < 0]
  *= 0.1`` is one graph for every mask.

Anything else -- its shape, ``len()``, an index, a sort, another matmul, any
function not listed -- *materializes* it first: the mask's values are
decided then (a guard, as numpy's selection always was) and it is numpy's
selection from there on.  The count reaches Python only through those, so a
plan that holds no decision is right for every mask.

Where the mask is False, the whole array holds values numpy's selection
does not; every result takes them out with ``np.where``, whose derivative
selects too (the plan's derivatives of an elementwise chain are carried
through it, not multiplied by 0): ``np.sum(np.log(x[x > 0]))`` has neither a
nan value nor a nan derivative where ``x <= 0``.  ``max`` and ``min`` take
one decision of their own, that the mask selects anything (numpy's error
otherwise), and so do the order statistics.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..core.decisions import can_decide, concrete_index
from ..core.observe import paused
from ..core.trace import as_node
from ..core.tracer import Tracer
from ..ops import REGISTRY
from .numpy_api import HANDLED, getitem, implements, reshape

__all__ = ["ELEMENTWISE", "FUNCTIONS", "Selection", "elementwise_of_selections", "expanded",
           "lift", "pending", "positions_mask", "rule", "selected"]

_NODE = Tracer.__dict__["node"]  # (the slot a materialized selection's node lives in)


def selected(x, mask):
    """``x[mask]`` for a traced boolean ``mask`` over ``x``'s leading axes, as a
    :class:`Selection` (no decision yet); None where the trace has no values to
    decide with once it is materialized (the general path refuses as before)."""
    trace = mask._trace
    if not can_decide(trace):
        return None
    return Selection(Tracer(x.node, trace), mask, x, x.node, trace)  # (x as read)


def pending(v):
    """Whether ``v`` is a selection not materialized yet."""
    return type(v) is Selection and v._full is not None


def expanded(mask, ndim):
    return reshape(mask, mask.shape + (1,) * (ndim - mask.ndim))


class Selection(Tracer):
    """``x[mask]`` for a traced boolean mask, not materialized (see the
    module's note): ``_full`` the array of ``x``'s shape it computes with
    (None once materialized), ``_mask`` the mask, ``_read`` ``(x, its node
    when read)`` for the materialization, numpy's own ``x[mask]``; ``_at``
    the axis of the mask whose positions it holds (``np.nonzero(mask)[k]``:
    an index by them is the selection by the mask, :func:`positions_mask`)."""

    __slots__ = ("_at", "_full", "_mask", "_read")

    def __init__(self, full, mask, x, x_node, trace):  # (Tracer's: not called)
        self._trace = trace
        self._flags = 0
        self._shares = self._origin = self._base = None
        self._full, self._mask = full, mask
        self._read = (weakref.ref(x) if type(x) is Tracer else None, x_node)
        self._at = None  # (np.nonzero's part for axis k of the mask: k)

    # -- the node: numpy's selection, made on first use ----------------------
    @property
    def node(self):
        if self._full is not None:
            self._materialize()
        return _NODE.__get__(self, Selection)

    @node.setter
    def node(self, value):
        _NODE.__set__(self, value)

    def _materialize(self):
        """numpy's ``x[mask]``, the mask's values decided (a guard)."""
        ref, x_node = self._read
        x = ref() if ref is not None else None
        if x is None or x.node is not x_node:  # (x written since: the values read)
            x = Tracer(x_node, self._trace)
        self._full = None
        with paused():
            r = getitem(x, concrete_index(self._mask))
        _NODE.__set__(self, r.node)
        self._flags, self._origin, self._shares, self._base = \
            r._flags, r._origin, r._shares, r._base

    @property
    def _lazy(self):
        return self._full is not None

    def __repr__(self):
        if self._full is None:
            return Tracer.__repr__(self)
        item = ", ".join(["?", *map(str, self._item())])  # (the count: not taken)
        return f"Tracer(%{self._full.node.id}[%{self._mask.node.id}]: {self.dtype.name}[{item}])"

    # -- what needs no count --------------------------------------------------
    @property
    def __class__(self):
        return np.ndarray

    @property
    def dtype(self):
        return self._full.dtype if self._full is not None else self.node.dtype

    @property
    def ndim(self):
        full = self._full
        return full.ndim - self._mask.ndim + 1 if full is not None else len(self.node.shape)

    def _item(self):
        return self._full.shape[self._mask.ndim:]

    def _like(self, full):
        return Selection(full, self._mask, full, full.node, self._trace)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if self._full is None or order not in "KAC":
            return _method(self, "astype")(dtype, order, casting, subok, copy)
        dtype = np.dtype(dtype)
        if not np.can_cast(self.dtype, dtype, casting):
            raise TypeError(f"Cannot cast array data from {self.dtype!r} to {dtype!r} "
                            f"according to the rule {casting!r}")
        with paused():
            return self._like(self._full.astype(dtype))

    def copy(self, order="C"):
        if self._full is None:
            return _method(self, "copy")(order)
        return self._like(self._full)

    __copy__ = copy

    def __getitem__(self, index):
        if self._full is not None and pending(index) and index._mask.node is self._mask.node \
                and index.dtype == np.bool_ and index._full.ndim == self._mask.ndim:
            with paused():  # (x[m][c]: the selection by `m & c`, in numpy's order)
                both = self._mask & index._full
                return Selection(self._full, both, self._full, self._full.node, self._trace)
        return Tracer.__getitem__(self, index)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and self._full is not None:
            with paused():
                if ufunc is np.matmul and not kwargs:
                    r = FUNCTIONS[np.matmul](*inputs) if len(inputs) == 2 else None
                else:
                    r = lift(ufunc, inputs, kwargs) \
                        if ufunc.signature is None and set(kwargs) <= {"dtype"} else None
            if r is not None:
                return r
        _materialize_all(inputs, kwargs)
        return Tracer.__array_ufunc__(self, ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if self._full is not None:
            rule = FUNCTIONS.get(func)
            if rule is not None:
                with paused():
                    r = rule(*args, **kwargs) if _takes(rule, args, kwargs) else None
                if r is not None:
                    return r
        _materialize_all(args, kwargs)
        return Tracer.__array_function__(self, func, types, args, kwargs)


def _in_place(name, ufunc):
    """``s op= v`` on a pending selection: the selection of ``op`` of the
    whole array, cast back to its dtype (numpy's same-kind rule), the object
    itself updated (another name of it sees the write, as numpy's)."""
    general = getattr(Tracer, f"__i{name}__")

    def op(self, other):
        if self._full is not None:
            with paused():
                r = lift(ufunc, (self, other), {})
                if r is not None and r._full.shape == self._full.shape:
                    full = r._full
                    if full.dtype != self.dtype:
                        if not np.can_cast(full.dtype, self.dtype, "same_kind"):
                            raise TypeError(
                                f"Cannot cast ufunc '{ufunc.__name__}' output from "
                                f"{full.dtype!r} to {self.dtype!r} with casting rule "
                                "'same_kind'")
                        full = full.astype(self.dtype)
                    self._full, self._read, self._at = full, (None, full.node), None
                    return self
        return general(self, other)

    op.__name__ = f"__i{name}__"
    return op


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("pow", np.power),
                   ("floordiv", np.floor_divide), ("mod", np.remainder),
                   ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
    setattr(Selection, f"__i{_name}__", _in_place(_name, _uf))


def _method(x, name):
    return getattr(super(Selection, x), name)


def _takes(rule, args, kwargs):
    """Whether numpy's call fits ``rule``'s signature (a misfit: numpy's own
    TypeError, on the general path)."""
    try:
        rule.__signature__.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _materialize_all(args, kwargs):
    for v in (*args, *kwargs.values()):
        if pending(v):
            v.node  # noqa: B018 - (materialized: the mask decided)
        elif type(v) in (tuple, list):
            _materialize_all(v, {})


# ----------------------------------------------------------------------------
# np.nonzero, np.where(cond), np.flatnonzero, np.argwhere: positions, lazily
# ----------------------------------------------------------------------------

def _mask_of(a):
    """The traced boolean mask of ``a``'s nonzero elements; None where the
    positions cannot be lazy (0-d, no values to decide with)."""
    if not isinstance(a, Tracer) or a.ndim == 0:
        return None
    mask = a if a.dtype == np.bool_ else np.not_equal(a, 0)
    return mask if can_decide(mask._trace) else None


def _of_constant(values, mask, at=None):
    v = Tracer(as_node(values, mask._trace), mask._trace)
    s = Selection(v, mask, v, v.node, mask._trace)
    s._at = at
    return s


def nonzero(a):
    """``np.nonzero(a)`` (and ``np.where(a)``): per axis of ``a``, the
    selection by ``a != 0`` of that axis's index at every element -- no
    decision until the count is used; indexing by all of them is the
    selection by the mask (:func:`positions_mask`)."""
    mask = _mask_of(a)
    if mask is None:
        return _REFUSED[np.nonzero](a)
    grids = np.indices(mask.shape, dtype=np.intp)
    return tuple(_of_constant(grids[k], mask, k) for k in range(mask.ndim))


def flatnonzero(a):
    """``np.flatnonzero(a)``: :func:`nonzero` of ``a`` raveled."""
    mask = _mask_of(a)
    if mask is None:
        return _REFUSED[np.flatnonzero](a)
    mask = reshape(mask, (-1,))
    return _of_constant(np.arange(mask.size, dtype=np.intp), mask, 0)


def argwhere(a):
    """``np.argwhere(a)``: the selected rows of every element's index."""
    mask = _mask_of(a)
    if mask is None:
        return _REFUSED[np.argwhere](a)
    grids = np.indices(mask.shape, dtype=np.intp)
    return _of_constant(np.ascontiguousarray(np.moveaxis(grids, 0, -1)), mask)


_REFUSED = {f: HANDLED[f] for f in (np.nonzero, np.flatnonzero, np.argwhere)}
implements(np.nonzero)(nonzero)
implements(np.flatnonzero)(flatnonzero)
implements(np.argwhere)(argwhere)


def positions_mask(index):
    """The mask ``m`` when ``index`` is ``np.nonzero(m)`` untouched (every
    part, in order; for a 1-D ``m`` its one part alone): ``x[index]`` is then
    ``x[m]``, and ``y[index] = v`` ``y[m] = v``; None otherwise."""
    parts = index if type(index) is tuple else (index,)
    first = parts[0] if parts else None
    if not pending(first) or first._at != 0 or len(parts) != first._mask.ndim:
        return None
    mask = first._mask
    for k, p in enumerate(parts):
        if not pending(p) or p._at != k or p._mask.node is not mask.node:
            return None
    return mask


# ----------------------------------------------------------------------------
# elementwise: a selection of the function of the whole arrays
# ----------------------------------------------------------------------------

def _operands(args, kwargs):
    """``(mask, item ndim)`` of the pending selections among the operands
    when every one is by one mask with one item ndim and every other operand
    broadcasts along the selected element's axes only (at most one more axis,
    of length 1); None otherwise (numpy's broadcast would meet the count)."""
    mask, ndim = None, None
    for v in (*args, *kwargs.values()):
        if pending(v):
            if mask is None:
                mask, ndim = v._mask, v._full.ndim - v._mask.ndim
            elif v._mask.node is not mask.node or v._full.ndim - v._mask.ndim != ndim:
                return None
    if mask is None:
        return None
    for v in (*args, *kwargs.values()):
        if pending(v) or v is None or isinstance(v, (bool, int, float, complex, str,
                                                     np.dtype, type)):
            continue
        if isinstance(v, (list, tuple)) or type(v) is Selection:
            return None
        shape = v.shape if isinstance(v, (Tracer, np.ndarray, np.generic)) else None
        if shape is None or len(shape) > ndim + 1 or len(shape) == ndim + 1 and shape[0] != 1:
            return None
    return mask, ndim


def elementwise_of_selections(fn, args):
    """``fn(*args)`` -- ``fn`` elementwise, some of ``args`` pending
    selections (an ``@hybridad.elementwise`` function's call) -- as a selection
    of ``fn`` of the whole arrays; None where it is not one."""
    return lift(fn, args, {}) if any(map(pending, args)) else None


def lift(fn, args, kwargs):
    """``fn`` (an elementwise function) of the operands, as a selection of
    ``fn`` of the whole arrays; None where it is not one (see
    :func:`_operands`; the graph ``fn`` made is checked elementwise too)."""
    found = _operands(args, kwargs)
    if found is None:
        return None
    mask, ndim = found
    trace = mask._trace
    fulls = [v._full for v in (*args, *kwargs.values()) if pending(v)]
    full = [v._full if pending(v) else v for v in args]
    named = {k: v._full if pending(v) else v for k, v in kwargs.items()}
    start = trace.mark()
    try:
        r = fn(*full, **named)
    except Exception:  # (numpy's error, raised again on the general path)
        trace.rollback(start)
        return None
    if not isinstance(r, Tracer) or type(r) is Selection or \
            not _madelift(r.node, fulls, [v for v in (*args, *kwargs.values())
                                                  if isinstance(v, Tracer) and not pending(v)],
                                  mask.shape, ndim) or \
            len(trace.decisions) != start[1]:
        trace.rollback(start)
        return None
    return Selection(r, mask, r, r.node, trace)


def _madelift(node, fulls, others, lead, ndim):
    """Whether ``node`` is made from the arrays ``fulls`` by elementwise ops of
    the whole shape only, everything else it reads of one element's shape
    (no count: a constant of the whole shape is one of its length); the
    operands ``others`` are values of their own (``s - np.mean(s)``)."""
    whole = {v.node.id for v in fulls}
    first = min(whole)
    memo = {v.node.id: False for v in others}

    def walk(n):
        if n.id in whole:
            return True
        if n.id in memo:
            return memo[n.id]
        memo[n.id] = None  # (no cycles: a guard)
        if n.id < first:
            out = False if len(n.shape) <= ndim else None
        else:
            deps = [walk(a) for a in n.args]
            if None in deps:
                out = None
            elif any(deps):
                op = REGISTRY.get(n.op)
                out = True if op is not None and op.kind == "elementwise" and \
                    n.shape[:len(lead)] == lead and len(n.shape) == len(lead) + ndim else None
            else:
                out = False if len(n.shape) <= ndim else None
        memo[n.id] = out
        return out

    return walk(node) is True and node.shape[:len(lead)] == lead


#: numpy functions elementwise in their array arguments (ufuncs are, by definition)
ELEMENTWISE = (np.where, np.clip, np.nan_to_num, np.real, np.imag, np.conj, np.conjugate,
               np.around, np.round, np.fix, np.sinc, np.angle, np.isclose, np.i0, np.copy)


def rule(fn):
    import inspect

    fn.__signature__ = inspect.signature(fn)
    return fn


def _elementwise_rule(func):
    def rule(*args, **kwargs):
        return lift(func, args, kwargs)

    import inspect

    rule.__signature__ = inspect.Signature([
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    return rule


#: numpy function (or np.matmul) -> its rule on a pending selection (None: not
#: this call): the elementwise ones here, the reductions
#: :mod:`.numpy_selected_reduce`'s
FUNCTIONS = {func: _elementwise_rule(func) for func in ELEMENTWISE}
