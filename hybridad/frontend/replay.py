"""The frontend's answers replayed: a ufunc call that meets the same kind of
operands again in one trace adds the nodes it added the first time.

Tracing a Python loop calls the numpy surface with operands of the same
shapes and dtypes over and over: ``x + dt * np.tanh(W @ x)`` a thousand
times.  Each call runs the whole frontend (the ufunc's loop dtypes, operand
conversion, the shape rules, algebraic identities, the matrix-vector
reshapes) to add the same few nodes to the trace.  This module records, per
trace, what one call added -- the nodes, their ops, attributes, shapes and
dtypes, and which operand or earlier node each reads -- under a key of what
the frontend's answer depends on: the ufunc and method, and per operand its
shape, dtype, tracer flags and kind (an array the trace computed, a captured
array, or a Python or numpy scalar *by value*), and which operands are one
object.  The next call with the same key adds the same nodes on its own
operands through :meth:`~hybridad.core.trace.Trace.add` (which still merges
common subexpressions), without running the frontend.

A call is only recorded when its answer is a function of that key alone:

* forward tracing of a plain :class:`~hybridad.core.trace.Trace` (not a loop
  body's, which lifts outer values, nor the reverse pass);
* no keyword arguments (``out=``, ``where=``, ``dtype=``, ...);
* operands that are tracers of this trace whose node is not a literal
  constant (literals fold, and ``x * 1`` simplifies), captured arrays of a
  supported dtype, and Python or numpy scalars other than NaN;
* the nodes it added read only its operands, each other and constants --
  never another node of the trace (a common subexpression found there) --,
  none is an in-place update, it took no Python decision on a value
  (:mod:`hybridad.core.decisions`), and its result is a new tracer (or a
  tuple of them) with no view or fancy-index links.

Otherwise the call runs the frontend as always.  A replayed call adds the
same nodes as the frontend would, so a plan traced with or without replay is
the same graph; ``HYBRIDAD_REPLAY=0`` (read when a trace begins) turns it off.

An index by a Python int (``x[i]``: a loop over an array's rows) takes a
short path of its own too (:func:`_row`), the node and object links the
numpy surface would make; so does an index of ints and slices (``u[1:-1]``:
:func:`_basic`, what the surface answered the first time for the array's
shape and dtype).  An element write ``u[1:-1] = v`` replays the new value
of the whole array through :func:`replayed`, keyed by the index
(:func:`hybridad.frontend.numpy_selection.set_items`), and so does a write
that reaches an array through its views (``u[1:-1] += v``), keyed by the
views' path: a time-stepping loop that updates its grid in place traces in
time linear in its steps.
"""

from __future__ import annotations

import itertools
import os

import numpy as np

from ..core.supported import SUPPORTED_DTYPES
from ..core.trace import ON_ENTER, Trace, current_trace, static_attrs
from ..core.tracer import SCALAR, SURFACE, Tracer
from ..ir.registry import REGISTRY
from .objects import link_view

__all__ = ["basic_key", "enabled", "replayed", "written_back"]

#: operand types keyed by value (scalars)
_SCALARS = frozenset({float, int, bool, np.float64, np.float32, np.float16, np.int64,
                      np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32, np.uint64,
                      np.bool_})
#: the most recipes one trace keeps (a trace with more kinds of calls than this
#: records no more)
MAX_RECIPES = 4096
#: how many calls of one key are tried for a recipe (a call whose nodes the
#: trace had already made, merged as common subexpressions, cannot be one)
TRIES = 3
_on = [True]


def enabled():
    """Whether ufunc calls are replayed (the ``HYBRIDAD_REPLAY`` environment
    variable, on unless ``0``)."""
    return os.environ.get("HYBRIDAD_REPLAY", "1").strip() not in ("0", "false", "no", "off")


def _refresh():
    _on[0] = enabled()


#: a number for every step of every recipe (the trace's ``steps``: which nodes are
#: copies of one another, for :mod:`hybridad.transforms.rolling`)
_STEP_IDS = itertools.count()
#: the step number of the rows of arrays of each shape and dtype (:func:`_row`)
_ROW_IDS = {}


class _Recipe:
    """What one call added: ``steps`` ``(op, refs, attrs, shape, dtype,
    static, number)``, where a ref is an operand (an int >= 0), an earlier
    step (``~j``) or a constant node, ``static`` the op and attributes' part
    of the common-subexpression key (the trace's
    :meth:`~hybridad.core.trace.Trace.static_id`) and
    ``number`` the step's own (:data:`_STEP_IDS`); ``result`` the refs of the
    returned tracers (a tuple when the call returned a tuple) and ``flags``
    their tracer flags."""

    __slots__ = ("flags", "result", "steps", "tuple")

    def __init__(self, steps, result, flags, is_tuple):
        self.steps, self.result, self.flags, self.tuple = steps, result, flags, is_tuple


def _traced_part(x):
    """A tracer's part of a recipe key (not a constant's)."""
    n = x.node
    return n.shape, n.dtype, x._flags


def _number_part(x):
    """A number's part of a recipe key: its type and value (-0.0 is not 0.0)."""
    return (type(x), x) if x else (type(x), repr(x))


def _key(ufunc, method, inputs, trace):
    """The recipe key of a call and its operands' nodes, or (None, None)."""
    parts = [ufunc, method]
    nodes = []
    for x in inputs:
        t = type(x)
        if t is Tracer:
            if x._trace is not trace:
                return None, None
            n = x.node
            if n.op == "const":
                if n.attrs.get("literal", False):
                    return None, None
                parts.append((n.shape, n.dtype, x._flags, "const"))
            else:
                parts.append(_traced_part(x))
            nodes.append(n)
        elif t in _SCALARS:
            if x != x:  # NaN: never equal to itself, so never found again
                return None, None
            parts.append(_number_part(x))
        elif t is np.ndarray:
            if x.dtype not in SUPPORTED_DTYPES:
                return None, None
            n = trace.const(x, literal=False)  # (what the frontend would capture)
            parts.append((n.shape, n.dtype, 0, "const"))
            nodes.append(n)
        else:
            return None, None
    if len(nodes) == 2:  # which operands are one node (x * x is not x * y)
        parts.append(nodes[0] is nodes[1])
    elif len(nodes) > 2:
        parts.append(tuple(map(nodes.index, nodes)))
    return tuple(parts), nodes


def _ref(node, operands, made):
    """A recorded node as a ref: an operand, a step or a constant; None: a node
    of the trace the call did not make (the recipe would not be a function of
    its key)."""
    k = operands.get(id(node))
    if k is not None:
        return k
    j = made.get(id(node))
    if j is not None:
        return ~j
    return node if node.op == "const" else None


def _record(trace, start, decisions, nodes, result):
    if len(trace.decisions) != decisions:
        return None
    is_tuple = type(result) is tuple
    results = result if is_tuple else (result,)
    if not results or any(type(r) is not Tracer or r._trace is not trace or r._shares is not None
                           or r._origin is not None or r._base is not None for r in results):
        return None
    operands = {}
    for k, n in enumerate(nodes):
        operands.setdefault(id(n), k)
    made, steps = {}, []
    for node in trace.nodes[start:]:
        if node.phase != "forward":
            return None
        if node.op == "const":  # made from the key alone: a constant for every replay
            continue
        if REGISTRY[node.op].kind == "inplace":
            return None
        refs = tuple(_ref(a, operands, made) for a in node.args)
        if any(r is None for r in refs):
            return None
        made[id(node)] = len(steps)
        steps.append((node.op, refs, node.attrs, node.shape, node.dtype,
                      trace.static_id(node.op, static_attrs(node.op, node.attrs)),
                      next(_STEP_IDS)))
    out = tuple(_ref(r.node, operands, made) for r in results)
    if any(r is None for r in out):
        return None
    return _Recipe(tuple(steps), out, tuple(r._flags for r in results), is_tuple)


def _replay(recipe, trace, nodes):
    made = trace.add_steps(recipe.steps, nodes)
    if not recipe.tuple:
        r = recipe.result[0]
        return Tracer(r if type(r) is not int else nodes[r] if r >= 0 else made[~r], trace,
                      recipe.flags[0])
    out = []
    for r, f in zip(recipe.result, recipe.flags, strict=True):
        out.append(Tracer(r if type(r) is not int else nodes[r] if r >= 0 else made[~r],
                          trace, f))
    return tuple(out)


def replayed(what, operands, build, method="call"):
    """``build()`` -- a function of ``operands`` (tracers of this trace, or
    scalars) and of the hashable ``what`` and ``method`` alone that adds
    forward nodes and returns a new tracer (or a tuple of them) -- through
    this trace's recipes: recorded the first times, then replayed (a ufunc
    call; an element write in a loop, ``u[1:-1] = ...``)."""
    trace = current_trace()
    if not _on[0] or type(trace) is not Trace or trace.phase != "forward":
        return build()
    key, nodes = _key(what, method, operands, trace)
    if key is None:
        return build()
    memo = trace.recipes
    recipe = memo.get(key, 0)
    if type(recipe) is _Recipe:
        return _replay(recipe, trace, nodes)
    start, decisions = len(trace.nodes), len(trace.decisions)
    result = build()
    if recipe < TRIES and len(memo) < MAX_RECIPES:  # (recipe: the failed tries)
        memo[key] = _record(trace, start, decisions, nodes, result) or recipe + 1
    return result


def _install():
    inner = SURFACE.apply_ufunc

    def apply_ufunc(ufunc, method, inputs, kwargs):
        if kwargs:
            return inner(ufunc, method, inputs, kwargs)
        return replayed(ufunc, inputs, lambda: inner(ufunc, method, inputs, kwargs), method)

    SURFACE.apply_ufunc = apply_ufunc
    inner_getitem = SURFACE.getitem

    def getitem(x, index):
        if type(x) is Tracer and _on[0]:
            if type(index) is int:
                r = _row(x, index)
                if r is not None:
                    return r
            elif type(index) in _BASIC_INDEX:
                return _basic(x, index, inner_getitem)
        return inner_getitem(x, index)

    SURFACE.getitem = getitem
    SURFACE.replayed_binary = _binary_call
    SURFACE.replayed_unary = _unary_call


def written_back(x, index, value):
    """Whether ``x[index] = value`` writes ``x``'s own view at ``index`` back
    onto itself -- Python's second half of ``x[index] op= v``, after the view
    took the update and wrote it through to ``x`` -- which numpy runs as a
    copy of memory onto itself: nothing to trace (a loop's ``u[1:-1] += ...``
    was a second element write a step).  Known from the index's recipe (how
    :func:`_basic` made the view)."""
    if type(value) is not Tracer or value._base is None or value._base[0] is not x or \
            not _on[0]:
        return False
    node = x.node
    key = basic_key(index)
    trace = x._trace
    if key is None or type(trace) is not Trace or trace.phase != "forward":
        return False
    answer = trace.recipes.get(("getitem", node.shape, node.dtype, key))
    return type(answer) is tuple and not answer[4] and \
        value._base[1] == (("getitem", answer[0]),)


def _direct(trace):
    """Whether a call in ``trace`` may take its recipe directly: replay on, and
    ``trace`` the forward trace being recorded."""
    return _on[0] and type(trace) is Trace and trace.phase == "forward" and \
        current_trace() is trace


def _recipe_of(trace, key, nodes):
    """The tracers ``trace``'s recipe of ``key`` makes from ``nodes``, or None
    (no recipe: the surface answers)."""
    recipe = trace.recipes.get(key)
    return _replay(recipe, trace, nodes) if type(recipe) is _Recipe else None


def _binary_call(ufunc, operands):
    """A ufunc of two tracers (``x @ y``, ``x + y``), or of a tracer and a
    Python float or int (``0.5 * x``), from its recipe, when the trace has one
    for them -- the key :func:`_key` makes, without the surface's layers on
    the way -- else None (the surface answers)."""
    a, b = operands
    tracer = a if type(a) is Tracer else b
    trace = tracer._trace
    if not _direct(trace):
        return None
    if type(a) is Tracer and type(b) is Tracer:
        na, nb = a.node, b.node
        if b._trace is not trace or na.op == "const" or nb.op == "const":
            return None
        return _recipe_of(trace, (ufunc, "__call__", _traced_part(a), _traced_part(b),
                                  na is nb), [na, nb])
    x = b if tracer is a else a  # (the number: a float or an int, as _key keys it)
    if tracer.node.op == "const" or x != x:
        return None
    part, number = _traced_part(tracer), _number_part(x)
    return _recipe_of(trace, (ufunc, "__call__", part, number) if tracer is a else
                      (ufunc, "__call__", number, part), [tracer.node])


def _unary_call(ufunc, x):
    """A ufunc of one tracer (``np.tanh(x)``) from its recipe, as
    :func:`_binary_call` takes two operands', else None."""
    if not _direct(x._trace) or x.node.op == "const":
        return None
    return _recipe_of(x._trace, (ufunc, "__call__", _traced_part(x)), [x.node])


#: the types of an index :func:`_basic` looks at (a slice, or a tuple of parts)
_BASIC_INDEX = frozenset({slice, tuple})


def basic_key(index):
    """A hashable form of an index of ints, slices of ints, None and Ellipsis
    (slices hash from Python 3.12 on), or None for any other index."""
    parts = index if type(index) is tuple else (index,)
    out = [type(index) is tuple]
    for k in parts:
        t = type(k)
        if t is slice:
            a, b, c = k.start, k.stop, k.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int) and
                    (c is None or type(c) is int)):
                return None
            out.append((a, b, c))
        elif t is int or k is None or k is Ellipsis:
            out.append(k)
        else:
            return None
    return tuple(out)


def _basic(x, index, general):
    """``x[index]`` for an index of ints and slices (``u[1:-1]``, ``u[:, 2:]``)
    on a traced array of this trace's forward pass: what the numpy surface's
    ``getitem`` answered the first time for ``x``'s shape and dtype and this
    index -- the node's attributes, its shape, whether it is ``x`` itself or a
    numpy scalar -- made again with the object links it makes (a loop's
    stencil indexes its state a few times a step)."""
    node = x.node
    trace = current_trace()
    if x._trace is not trace or type(trace) is not Trace or trace.phase != "forward" or \
            node.op == "const":
        return general(x, index)
    key = basic_key(index)
    if key is None:
        return general(x, index)
    if any(type(part) is int for part in key[1:]):  # (U[k, 1:-1], U[1:-1, k]: one answer
        return _with_ints(x, index, key, general)  # for every k)
    memo = trace.recipes
    k = ("getitem", node.shape, node.dtype, key)
    answer = memo.get(k)
    if answer is None:
        r = general(x, index)
        if r is x:
            memo[k] = "x"
        elif _plain_getitem(r, x):
            a = r.node.attrs
            memo[k] = (a, r.node.shape, r.node.dtype,
                       trace.static_id("getitem", static_attrs("getitem", a)),
                       r._flags & SCALAR)
        else:
            memo[k] = False
        return r
    if answer == "x":
        return x
    if answer is False:
        return general(x, index)
    return _getitem_again(x, *answer)


def _plain_getitem(r, x):
    """Whether ``r``, the surface's answer to an index of ``x``, is one getitem
    node of ``x`` and the links settle makes of it (a numpy scalar, or a view
    of ``x``): what :func:`_getitem_again` makes again."""
    return type(r) is Tracer and r.node.op == "getitem" and r.node.args == (x.node,) and \
        r._origin is None and (r._flags & SCALAR or r._base == (x, (("getitem", r.node.attrs),)))


def _getitem_again(x, attrs, shape, dtype, static, scalar):
    """``x``'s getitem node of ``attrs`` (``static``: their :meth:`Trace.static_id`)
    as a tracer linked as the surface links it."""
    trace = x._trace
    made = trace.add("getitem", (x.node,), attrs, shape, dtype, static)
    if scalar:
        return Tracer(made, trace, SCALAR)
    r = Tracer(made, trace)
    link_view(r, x, (("getitem", dict(attrs)),))  # (a copy: as settle's own links;
    return r  # a view of x, which is numpy's view of its own base if it has one)


def _with_ints(x, index, key, general):
    """:func:`_basic` for an index with ints among its slices (``U[k, 1:-1]``):
    the surface's answer the first time for ``x``'s shape and dtype and the
    index with its ints left out -- where in the node's index the ints stand
    -- made again with each int in range as numpy takes it (a loop reads
    ``U[k, 2:]`` at a new ``k`` every step; asked for each ``k`` afresh it went
    through the whole surface)."""
    node, trace = x.node, x._trace
    memo = trace.recipes
    given = [part for part in key[1:] if type(part) is int]
    k = ("getitem~", node.shape, node.dtype, key[0],
         tuple("#int" if type(part) is int else part for part in key[1:]))
    answer = memo.get(k)
    if answer is None:
        r = general(x, index)
        memo[k] = False
        if _plain_getitem(r, x):
            at = r.node.attrs["index"]
            spots = [p for p, v in enumerate(at) if type(v) is int]
            if len(spots) == len(given) and None not in at and len(at) <= len(node.shape) and \
                    all(at[p] == v % node.shape[p] for p, v in zip(spots, given, strict=True)):
                number = trace.static_id("getitem~", k)
                memo[k] = (at, tuple(spots), r.node.shape, r.node.dtype, r._flags & SCALAR,
                           number)
                trace.known_as((number, *[at[p] for p in spots]), (node,), r.node)
        return r
    if answer is False:
        return general(x, index)
    at, spots, shape, dtype, scalar, number = answer
    at = list(at)
    for p, v in zip(spots, given, strict=True):
        n = node.shape[p]
        if not -n <= v < n:
            return general(x, index)  # (numpy's IndexError)
        at[p] = v % n
    # (its common-subexpression key: the pattern's number and the ints -- a tuple,
    # equal to no static_id's int: no table entry, no attributes' walk, a step)
    return _getitem_again(x, {"index": tuple(at)}, shape, dtype,
                          (number, *[at[p] for p in spots]), scalar)


def _row(x, i):
    """``x[i]`` for a Python int ``i`` and a traced array ``x`` of this trace's
    forward pass that is not a constant: the node, attributes and object
    links the numpy surface's ``getitem`` makes, without its general steps
    (a loop over an array's rows indexes once per step: 25 -> 7 us).  None
    where the surface must answer (``i`` out of range, a 0-d or constant
    ``x``, an outer trace's value)."""
    node = x.node
    shape = node.shape
    if not shape or node.op == "const" or not -shape[0] <= i < shape[0]:
        return None
    trace = current_trace()
    if x._trace is not trace or type(trace) is not Trace or trace.phase != "forward":
        return None
    i %= shape[0]
    made = trace.add("getitem", (node,), {"index": (i,)}, shape[1:], node.dtype, ~i)  # (a
    # row's number for its common-subexpression key: negative, no static_id's; a
    # loop over 10^4 rows keeps no table entry a row)
    if made.id not in trace.steps:  # (not found: made now -- numbered as a row)
        number = _ROW_IDS.get((shape, node.dtype))
        if number is None:
            number = _ROW_IDS.setdefault((shape, node.dtype), next(_STEP_IDS))
        trace.steps[made.id] = number
        trace.rows[made.id] = i
    if len(shape) == 1:  # (a row of a 1-d array is a numpy scalar, a copy)
        return Tracer(made, trace, SCALAR)
    r = Tracer(made, trace)  # of more, a view of x (settle's links, made directly:
    link_view(r, x, (("getitem", {"index": (i,)}),))  # basic indexing of x -- numpy's
    return r  # view of its base, if it has one -- never copies)


_install()
ON_ENTER.append(_refresh)
