"""numpy's object semantics for traced values: scalars, copies, views and
in-place updates.

:func:`settle` gives a traced result what numpy would return (a new array, a
numpy scalar, or a view sharing its input's memory); :func:`link_view`
records which tracers share memory (each view with the tracer it views and
the view ops from it); :func:`assign` is numpy's in-place write of a whole
array (``y += 1``, ``y.sort()``, ``y[index] = v`` through
:func:`hybridad.frontend.numpy_selection.set_items`): it reaches every live
view as numpy's write would, and is refused where numpy would write into
memory the trace does not follow (an argument of ``f`` or a view of one, a
read-only view).  Installs :func:`assign` in
:data:`hybridad.core.tracer.SURFACE` for the in-place operators of
:class:`~hybridad.core.tracer.Tracer`.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..errors import TracingError, user_location
from ..ir.registry import REGISTRY
from ..core.trace import as_node, bind
from ..core.tracer import ARG, READONLY, SCALAR, SURFACE, Tracer

__all__ = ["assign", "link_view", "numpy_copies", "settle", "tracers_in", "unlink"]


def _in_place_refused(t, what, instead):
    chain = _chain(t)
    root = chain[-1]
    if any(m._flags & READONLY for m in chain):
        raise ValueError("assignment destination is read-only")
    why = ("it is an argument of the traced function: numpy would write into the caller's "
           "array, and hybridad never modifies its arguments" if t._flags & ARG else
           "it is a view of an argument of the traced function: numpy would write into the "
           "caller's array, and hybridad never modifies its arguments" if root._flags & ARG
           else "it shares memory with another array in a way tracing does not follow")
    raise TracingError(f"{what} on a traced array at {user_location()}: {why}. Instead, "
                       f"{instead}.")


def _others_sharing(t):
    """The live tracers other than ``t`` that share its memory (the family's
    list loses the weak references of members gone meanwhile: a loop that
    writes into a slice of its state, ``u[1:-1] = ...``, makes views of ``u``
    at every step, and a list of all of them made each write walk the
    whole history -- quadratic in the steps)."""
    group = t._shares
    if group is None:
        return []
    refs, others = [], []
    for r in group:
        o = r()
        if o is not None:
            refs.append(r)
            if o is not t:
                others.append(o)
    if len(refs) != len(group):
        group[:] = refs
    return others


def _prune(group):
    """``group`` (a family's weak references) without those of members gone."""
    group[:] = [r for r in group if r() is not None]


def _is_view_node(node):
    op = REGISTRY.get(node.op)
    return op is not None and op.kind == "view"


def link_view(view, base, path=()):
    """Record that tracer ``view`` shares memory with tracer ``base`` (numpy
    returned a view), so an in-place write to either is refused while the
    other is alive."""
    group = base._shares
    if group is None:
        group = base._shares = [weakref.ref(base)]
    if view._shares is not None and view._shares is not group:  # merge two families
        for r in view._shares:
            o = r()
            if o is not None and o is not base:
                o._shares = group
                group.append(r)
    view._shares = group
    group.append(weakref.ref(view))
    if len(group) >= 64 and not len(group) & (len(group) - 1):  # (at 64, 128, ...: the
        _prune(group)  # dead views of a loop's rows or slices, in amortized O(1) a view)
    view._base = (base, tuple(path))  # numpy's view.base: keeps the viewed tracer alive


def assign(target, value, what, casting="same_kind", ufunc=None):
    """numpy's in-place write of the whole of ``target`` (``target += ...``,
    ``target.sort()``, ``target.fill(v)``, ``target[index] = v``): the tracer
    object takes ``value`` (cast under ``casting``; its shape must be
    ``target``'s).  Where ``target`` shares memory with other live arrays (it
    is a view, or has views), the write reaches them as in numpy
    (:func:`_write_through`).  Refused where numpy's write would reach memory
    the trace does not follow: an argument of ``f``, a read-only view."""
    sharing = _others_sharing(target)
    root = _family_root(target) if sharing else None
    if target._flags & (ARG | READONLY) or sharing and root is None:
        _in_place_refused(target, what, "write `y = y + ...` (a new array), or take a "
                          "copy first (`y = y.copy()`)")
    if not isinstance(value, Tracer):
        value = Tracer(as_node(value, target._trace), target._trace)
    if value.shape != target.shape:
        raise ValueError(f"non-broadcastable output operand with shape {target.shape} doesn't "
                         f"match the broadcast shape {value.shape}")
    if value.dtype != target.dtype:
        if not np.can_cast(value.dtype, target.dtype, casting):
            src = f"ufunc '{ufunc.__name__}' output" if ufunc is not None else "array"
            raise TypeError(f"Cannot cast {src} from {value.dtype!r} to {target.dtype!r} "
                            f"with casting rule '{casting}'")
        value = bind("cast", value, dtype=target.dtype)
    if sharing:
        _write_through(target, value, root)
    else:
        target.node = value.node
    return target


# ----------------------------------------------------------------------------
# writes that reach views: one family of tracers sharing memory
# ----------------------------------------------------------------------------

def _view_path(base_node, node):
    """The view ops ``(op, attrs)`` that make ``node`` from ``base_node``."""
    path = []
    while node is not base_node:
        path.append((node.op, dict(node.attrs)))
        node = node.args[0]
    return path[::-1]


def _replay(array, path):
    """``path``'s views of the numpy ``array`` (None where numpy would copy:
    a reshape of a non-contiguous view)."""
    for op, attrs in path:
        out = REGISTRY[op].view(array, **attrs)
        if out.size and not np.shares_memory(out, array):  # (an empty view shares none)
            return None
        array = out
    return array


def _chain(t):
    """``t``, the tracer it views, that one's, ... up to the root of its family."""
    chain = [t]
    while chain[-1]._base is not None:
        chain.append(chain[-1]._base[0])
    return chain


def _family_root(t):
    """The tracer at the root of ``t``'s memory family, where a write can
    reach every live member as numpy's would: each member a view (by the ops
    recorded in ``_base``) of the root, which is neither an argument of ``f``
    nor read-only, through views numpy makes (no reshape that copies).
    None otherwise (the write is refused)."""
    members = [t, *_others_sharing(t)]
    roots = set()
    for m in members:
        chain = _chain(m)
        if any(c._flags & READONLY for c in chain):
            return None
        root = chain[-1]
        roots.add(id(root))
    if len(roots) != 1 or root._flags & (ARG | READONLY):
        return None
    if any(_copied(m, root) for m in members):
        return None
    return root


def _copied(t, root):
    """Whether numpy would make ``t`` as a copy of ``root`` (a reshape on the
    way that cannot be a view: numpy's other views never copy), asked of an
    array of ``root``'s shape and C strides over one byte of memory -- the
    strides decide, and nothing of the size of ``root`` is made (a rolled
    loop's views of its packed output: 10^8 elements and more)."""
    chain = []
    while t is not root:
        t, path = t._base
        chain.append(path)
    if not any(op == "reshape" for path in chain for op, _ in path):
        return False
    shape = root.shape
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    a = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape, strides, writeable=False)
    for path in reversed(chain):
        for op, attrs in path:
            if op != "reshape":
                a = REGISTRY[op].view(a, **attrs)
                continue
            try:
                a = np.reshape(a, attrs["shape"], copy=False)
            except ValueError:  # (numpy would copy)
                return True
            except TypeError:  # (numpy before 2.1: no copy=False; a view takes the
                a = a.view()  # shape in place only where no copy is needed)
                try:
                    a.shape = attrs["shape"]
                except AttributeError:
                    return True
    return False


_GRIDS = {}  # shape -> its flat positions (read-only), the last few shapes asked for


def _grid(shape):
    """The flat positions of an array of ``shape`` (read-only, shared): a
    loop's views of its packed value ask for the same large grid many times."""
    grid = _GRIDS.get(shape)
    if grid is None:
        if len(_GRIDS) >= 4:
            del _GRIDS[next(iter(_GRIDS))]
        grid = _GRIDS[shape] = np.arange(math.prod(shape), dtype=np.intp).reshape(shape)
        grid.flags.writeable = False
    return grid


def numpy_copies(t):
    """Whether numpy would make ``t`` (just linked as a view) as a copy: only
    a reshape can be (numpy's other views never copy), so without one on the
    way from the root nothing is computed -- a loop over an array's rows
    would otherwise lay out the whole array at every row."""
    return _copied(t, _chain(t)[-1])


def unlink(t):
    """``t`` is a new array after all: out of its family."""
    t._shares[:] = [r for r in t._shares if (o := r()) is not None and o is not t]
    t._shares, t._base = None, None


def _positions(t, grid, root):
    """Where ``t``'s elements are in ``root``'s (an array of flat positions),
    None where a view on the way would be a copy in numpy."""
    chain = []
    while t is not root:
        t, path = t._base
        chain.append(path)
    for path in reversed(chain):
        grid = _replay(grid, path)
        if grid is None:
            return None
    return grid


def _write_through(target, value, root):
    """``target`` takes ``value`` as numpy's write into shared memory would
    make it: the family's ``root`` (:func:`_family_root`) takes its new value
    (``value`` at the positions ``target`` views, its own elsewhere: one
    gather), then every other live member is its views of the new root again."""
    link = target._base
    new = None
    if link is not None and link[0] is root and len(link[1]) == 1 and \
            link[1][0][0] == "getitem":
        # (a write into a slab of the root, `row = U[k]; row[1:-1] = v`: as `U[k, 1:-1] = v`)
        new = SURFACE.slab_written(Tracer(root.node, root._trace), link[1][0][1]["index"],
                                   value)
        if new is None:  # (a block of slices of step 1, `u[1:-1] += v`: a concatenation)
            new = SURFACE.block_written(Tracer(root.node, root._trace),
                                        link[1][0][1]["index"], value)
    if new is None:
        new = SURFACE.write_positions(  # (the positions made only when not replayed)
            Tracer(root.node, root._trace), lambda: _positions(target, _grid(root.shape), root),
            value, key=_path_key(target, root))
    root.node = new.node
    live = {id(m): m for m in [target, *_others_sharing(target)] if m is not root}
    for m in sorted(live.values(), key=lambda m: len(_chain(m))):  # bases before their views
        if m is target:  # (it holds what was written: not a view of the new root made
            m.node = value.node  # now, which a loop's next step would read as a carry)
            continue
        base, path = m._base
        node = base.node
        for op, attrs in path:
            node = bind(op, Tracer(node, root._trace), **attrs).node
        m.node = node


def _path_key(t, root):
    """A hashable form of the views from ``root`` to ``t`` (what fixes the
    positions ``t`` views given ``root``'s shape), or None where an attribute
    is not made of ints, slices, tuples, None and Ellipsis."""
    paths = []
    while t is not root:
        t, path = t._base
        paths.append(path)
    try:
        return tuple((op, *sorted((k, _plain(v)) for k, v in attrs.items()))
                     for path in reversed(paths) for op, attrs in path)
    except TypeError:
        return None


def _plain(v):
    """``v`` (an attribute of a view op) hashable: slices as tuples; TypeError
    for anything but ints, slices, tuples, None, Ellipsis and strings."""
    t = type(v)
    if t is slice:
        return ("slice", _plain(v.start), _plain(v.stop), _plain(v.step))
    if t is tuple or t is list:
        return (t.__name__, *map(_plain, v))
    if t in (int, bool, str) or v is None or v is Ellipsis:
        return v
    raise TypeError(t)


def _link_folded(result, inputs):
    """Link ``result`` -- a constant that views of a literal constant folded
    into (``trace.folded_views``) -- to the input it views, as numpy's view of
    it: a write through either reaches the other (``A = np.zeros((3, 3)); row
    = A[0]; row[1] = x``)."""
    folded = result._trace.folded_views
    by_node = {id(t.node): t for t in inputs}
    path, node = [], result.node
    while node.id in folded:  # (back to the nearest input: a view of a view folded too)
        node, op, attrs = folded[node.id]
        path.append((op, dict(attrs)))
        base = by_node.get(id(node))
        if base is not None:
            link_view(result, base, path[::-1])
            if numpy_copies(result):
                unlink(result)
            return


def settle(result, inputs, kind):
    """Give a traced result numpy's object semantics.

    ``kind`` says what numpy returns: ``"new"`` (a new array; a 0-d one is a
    numpy scalar: ufuncs, reductions, most functions), ``"array"`` (a new
    array, 0-d included: np.copy, np.where, astype) or ``"view"`` (a view of
    its first input, or that input itself).  A result that is one of the
    ``inputs`` objects is replaced by a fresh tracer unless ``kind`` is
    ``"view"`` (a copy must not alias its source: ``y = x.copy(); y += 1``);
    a result that is a view of an input shares its memory family."""
    if isinstance(result, (tuple, list)):
        items = [settle(r, inputs, kind) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)
    if not isinstance(result, Tracer) or result._lazy:  # (a lazy selection: a new array)
        return result
    if any(result is t for t in inputs):
        if kind == "view":
            return result
        result = Tracer(result.node, result._trace)
    elif kind == "view" and _is_view_node(result.node):
        chain, node = set(), result.node
        while _is_view_node(node):
            chain.add(node.id)
            node = node.args[0]
        chain.add(node.id)
        bound = result._trace.bounded.get(node.id)
        if bound is not None:  # (a view of positions in [0, n): np.argsort(x)[:k])
            result._trace.bounded[result.node.id] = bound
        for t in inputs:  # (a tracer of another trace -- a loop body's closure over an
            # argument of f -- is numbered apart: its id may be one of this chain's)
            if t._trace is result._trace and t.node.id in chain and \
                    t.node.id != result.node.id:
                link_view(result, t, _view_path(t.node, result.node))
                if numpy_copies(result):  # a reshape numpy can only make as a copy
                    unlink(result)
        if result.node.op == "broadcast_to":
            result._flags |= READONLY
        return result
    elif kind == "view" and result.node.op == "const":  # a view of a literal, folded:
        _link_folded(result, inputs)  # numpy's view of it all the same
    if result.shape == () and kind == "new":
        result._flags |= SCALAR
    else:
        result._flags &= ~SCALAR
    return result


def tracers_in(args, kwargs=None):
    """The tracers among ``args`` (and ``kwargs`` values), looking into lists and tuples."""
    out = []
    stack = list(args) + (list(kwargs.values()) if kwargs else [])
    while stack:
        a = stack.pop()
        if isinstance(a, Tracer):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    return out


SURFACE.assign = assign
