"""The fused-region primitives made by :mod:`hybridad.transforms.partition`.

* ``region`` -- a group of elementwise ops (plus an optional fused reduction)
  evaluated in one kernel.  ``attrs['body']`` is the :class:`Region`;
  ``attrs['mode']`` is ``"value"`` (compute the output, and any partials that
  ``region_partial`` nodes ask for -- the *store* strategy) or ``"vjp"``
  (compute ``g * d(output)/d(input k)`` in the backward sweep from the inputs
  and the cotangent ``g``, its last operand -- the *recompute* strategy), or
  ``"vjp_sums"`` (the full sums of those products for each ``k`` of the tuple
  ``attrs['wrt']``, in one loop: made by
  :func:`hybridad.transforms.region_sums.sum_vjp_regions`).  A ``vjp`` region
  with ``attrs['axis']`` (and ``keepdims``) is that product summed over
  those axes as it is made (:func:`hybridad.transforms.region_sums.sum_into_vjp_regions`,
  the GPU program's).
* ``region_partial`` -- d(elementwise output)/d(input ``k``) of a ``value``
  region, per element: written by that region's kernel in the same pass as
  the value (forward-mode dual numbers), read by the backward sweep; with
  ``summed=True`` (0-d), its sum over the loop of a region that ends in a full
  sum (:func:`hybridad.transforms.region_sums.sum_stored_partials`; the region
  lists those inputs in ``attrs['sums']``).
* ``region_acc`` -- an elementwise region (either mode) whose result is
  *added into* an adjoint instead of stored: ``acc[index] += region(...)``,
  in place (operands: ``acc``, the region's operands).  Made by
  :func:`hybridad.transforms.partition.fold_accumulations` from a region whose only
  user was ``iadd`` / ``scatter_add`` / ``scatter``; the last starts from
  ``zeros``.  No temporary, no second pass over it.

A partial that is a function of the region's output (and its one-element
inputs, or inputs no larger than the loop through arithmetic) -- ``tanh``'s
``1 - out**2``, ``exp``'s ``out``, ``x (1 - out**2)`` for ``w`` in ``tanh(x w +
b)`` -- is computed from the output in the backward sweep
(:func:`_partial_of_output`): nothing stored, nothing evaluated again.  For
the others the VJP of a region chooses between the two strategies
(:func:`strategy`): storing costs one array per distinct partial from the
forward to the backward sweep (a write and a read of each); recomputing
costs a second evaluation of the body.  The machine's measured costs decide
(:mod:`hybridad.transforms.costs`): a body with a transcendental function is
usually stored, cheap arithmetic recomputed (no stored array).  Partials
that are a number times another's (the weights of a sum of the inputs before
a nonlinearity: a stencil's, a convolution's taps) share its stored array,
the number multiplying the cotangent (:func:`_scaled_partials`).

These ops run only on compiled backends (the numpy reference executor runs
the unpartitioned graph).
"""

from __future__ import annotations

import numpy as np

from .._settings import enabled, switch
from ..ir.registry import Op, register
from .common import install_operators
from .elementwise import chain_product

#: the cost model's choice of a region's partials, ``partials_strategy(body, k,
#: evaluations, in_result=...)``: the cost model
#: (:mod:`hybridad.transforms.costs`) hands it in when it is imported, so the
#: op rule reads the machine's costs without importing a later stage
COST_MODEL = {}


def recompute_partials(on=True):
    """While active (in this thread), every region's VJP recomputes its body in
    the backward sweep instead of storing partials: the checkpointing a
    ``memory_budget`` asks for (no array per differentiated input kept from
    the forward to the backward sweep)."""
    return switch("recompute_partials", on)


def summed_partials_in_loop(on=True):
    """While active (in this thread), the regions' VJPs know that the backend
    sums in the region's own loop the stored partials w.r.t. a scalar input
    of a region ending in a full sum (the numba backend's lowering,
    :func:`hybridad.transforms.region_sums.sum_stored_partials`): such a
    partial costs no array, so storing it is free."""
    return switch("summed_partials_in_loop", on)


def partials_by_traffic(on=True):
    """While active (in this thread), the regions' VJPs choose between storing
    and recomputing partials by memory traffic alone (a GPU plan's: its
    elementwise work is bound by memory, see
    :func:`hybridad.transforms.costs.partials_by_traffic`)."""
    return switch("partials_by_traffic", on)


def strategy(body, k=1, summed=0, evaluations=1, in_result=False):
    """``(strategy, reason)`` for the ``k`` distinct partials of region
    ``body`` that need an array each, and ``summed`` more that its loop sums
    (no array): ``"store"`` or ``"recompute"`` (the body evaluated again in
    ``evaluations`` loops, one per input differentiated), from the machine's
    measured costs (:func:`hybridad.transforms.costs.partials_strategy`;
    ``in_result``: each of the ``k`` would be written into an argument's
    gradient buffer, :func:`_in_result_buffers`); every partial summed:
    ``"store"`` (nothing is kept, the backward sweep does not evaluate the
    body again)."""
    if enabled("recompute_partials"):
        return "recompute", "every region recomputes (a memory budget, or calibration)"
    if summed and not k:
        return "store", (f"each of the {summed} partials is summed in the loop (scalar inputs "
                         f"of a full sum): no array, no second evaluation")
    rule = "partials_by_traffic" if enabled("partials_by_traffic") else "partials_strategy"
    return COST_MODEL[rule](body, k, evaluations, in_result=in_result)


def _in_result_buffers(node, body, firsts, ans):
    """Whether every partial of ``firsts`` (input positions of region ``node``)
    would be computed straight into the gradient buffer of the argument it
    differentiates, an array the plan writes anyway: the input is a
    differentiated argument (an ``input`` node) of the loop's shape and the
    partial's dtype, read once by the whole forward graph (here, at one
    position), so its gradient is this one product ``g * partial``, which the
    memory plan computes in place over the partial -- unless a node that can
    fail at run time leaves the caller's buffers for the end
    (:mod:`hybridad.transforms.memory`).  A prediction for the cost model:
    where it misses, the partial takes an arena slot of its own."""
    from ..ir.graph import users_of
    from ..ir.registry import may_raise

    dtype = body.nodes[-1].dtype
    args = [node.args[k] for k in firsts]
    if not args or any(a.op != "input" or a.shape != tuple(body.shape) or a.dtype != dtype
                       for a in args):
        return False
    forward = [n for n in ans._trace.nodes if n.phase == "forward"]
    if any(may_raise(n) for n in forward):
        return False
    users = users_of(forward)  # (once per operand)
    return all(len(users[a.id]) == 1 for a in args)


def _no_numpy(*args, **kwargs):
    raise NotImplementedError("fused regions run on compiled backends only")


def _region_abstract(*args, body, mode, wrt=None, sums=(), axis=None, keepdims=False):
    if mode == "value":
        return body.output.shape, body.output.dtype
    if mode == "vjp_sums":  # one sum per input of wrt (region_sums.sum_vjp_regions)
        return (len(wrt),), body.nodes[-1].dtype
    if axis is not None:  # the vjp summed over axis (region_sums.sum_into_vjp_regions)
        shape = tuple(1 if d in axis else s for d, s in enumerate(body.shape)
                      if keepdims or d not in axis)
        return shape, body.nodes[-1].dtype
    return body.shape, body.nodes[-1].dtype


def _cotangent_on_loop(g, body):
    """The output cotangent, shaped to broadcast over the region's loop shape."""
    red = body.reduction
    if red is None:
        return g
    kshape = tuple(1 if i in red.attrs["axis"] else s for i, s in enumerate(body.shape))
    return g if g.shape == kshape else np.reshape(g, kshape)


def _region_vjp(g, node, active, *operands, body, mode, wrt=None):
    from ..core.trace import bind
    from ..core.tracer import Tracer

    assert mode == "value", "vjp-mode regions are not differentiated again"
    *inputs, ans = operands
    red = body.reduction
    if red is not None and red.op != "sum":
        raise NotImplementedError(f"fused {red.op} reductions are differentiated unfused")
    g_loop = _cotangent_on_loop(g, body)
    same = _equal_partials(body, active)
    # a partial w.r.t. one scalar input of a full sum is summed in the loop
    # (no array) where the backend does that
    full_sum = red is not None and bool(body.shape) and \
        len(red.attrs["axis"]) == len(body.shape) and enabled("summed_partials_in_loop")
    shared = {}  # first input position of a distinct partial -> how many inputs share it
    for first in same.values():
        shared[first] = shared.get(first, 0) + 1
    summed = {first for first, count in shared.items()
              if full_sum and count == 1 and inputs[first].size == 1}
    # a partial that is a function of the region's output (and of inputs
    # :func:`_partial_of_output` allows) is computed from it in the backward sweep
    trees = {} if red is not None or enabled("recompute_partials") else \
        {first: t for first in shared
         if (t := _partial_of_output(body, first, inputs)) is not None}
    rest = [first for first in shared if first not in trees]
    scaled = {}
    if rest:  # (summed partials come with a full sum: then trees is empty)
        # recomputed, each active input not read from the output gets its own loop
        evaluations = sum(1 for k, act in enumerate(active) if act and k in same and
                          same[k] in rest)
        arrays = [first for first in rest if first not in summed]
        scaled = _scaled_partials(body, arrays, _numbers(inputs))
        kept = [first for first in arrays if first not in scaled]
        how, body.partials_reason = strategy(
            body, len(kept), len(summed), evaluations,
            not scaled and all(shared[first] == 1 for first in arrays) and
            _in_result_buffers(node, body, arrays, ans))
        if scaled and how == "store":
            body.partials_reason += (f"; {len(scaled)} more partial{'s' * (len(scaled) != 1)} "
                                     "a number times a stored one")
        if trees:
            body.partials_reason += f"; {len(trees)} more {FROM_OUTPUT}"
    else:
        how, body.partials_reason = "output", (
            f"{FROM_OUTPUT}: no array, the body is not evaluated again")
    stored = {}  # input position -> its stored partial (equal ones stored once)
    out = []
    for k, act in enumerate(active):
        first = same.get(k, k)
        if not act or k not in same:  # (an input whose every path is piecewise
            # constant -- floor, sign, a comparison --: its derivative is 0)
            out.append(None)
        elif first in trees:  # (built per input: each fuses into its consumer's region)
            out.append(chain_product(g_loop, _build_partial(trees[first], inputs, ans,
                                                            body.nodes[-1].dtype)))
        elif how == "store":
            ratio = None
            if first in scaled:  # (a number times another input's partial)
                first, ratio = scaled[first]
            if first not in stored:
                stored[first] = bind("region_partial", Tracer(node, ans._trace), wrt=first)
            g_k = g_loop if ratio is None else g_loop * np.asarray(ratio, g_loop.dtype)
            out.append(chain_product(g_k, stored[first]))
        else:
            out.append(bind("region", *inputs, g_loop, body=body, mode="vjp", wrt=k))
    return tuple(out)


#: how a region's reason for its partials starts when they are computed from its output
FROM_OUTPUT = "from the output"

#: bodies longer than this are not searched for partials of their output
OUTPUT_PARTIAL_NODES = 16


#: the ufuncs a partial read from the output may apply to the region's array
#: inputs: arithmetic, cheaper than storing an array and reading it back
CHEAP_UFUNCS = frozenset({"add", "subtract", "multiply", "negative", "square"})


def _partial_of_output(body, k, inputs):
    """d(region value)/d(input k) as a nested expression (:func:`_tangent_tree`,
    not interned) of the region's output value, its inputs and constants
    (``tanh(x + b)``: ``1 - out * out``; ``tanh(x * w + b)`` w.r.t. ``w``: ``x
    (1 - out * out)``), or None where it needs anything else (an intermediate
    value, a dual-number op, a ``where``), or does not read the output.

    An array input may be read when it is no larger than the loop and the
    expression is only arithmetic (:data:`CHEAP_UFUNCS`): reading it in the
    backward sweep costs at most what reading a stored partial would, and
    saves writing one; it stays alive until then, in no more memory than
    the stored partial would take."""
    if len(body.nodes) > OUTPUT_PARTIAL_NODES:
        return None
    tree = _tangent_tree(body, k, lambda t: t)
    if tree is None:
        return None
    last, loop = body.nodes[-1].id, int(np.prod(body.shape, dtype=np.int64))
    reads_output, arrays, costly = False, False, False
    stack = [tree]
    while stack:  # the leaves it may read: the output, inputs, constants
        t = stack.pop()
        tag = t[0]
        if tag == "v":
            if t[1] != last:
                return None
            reads_output = True
        elif tag == "in":
            if inputs[t[1]].size > loop:
                return None
            arrays = arrays or inputs[t[1]].size != 1
        elif tag in ("mul", "add"):
            stack.extend(t[1:])
        elif tag not in ("one", "num", "const"):  # ("dual", ...) and ("select", ...) too
            if not isinstance(getattr(np, tag, None), np.ufunc):
                return None
            costly = costly or tag not in CHEAP_UFUNCS
            stack.extend(t[1:])
    return tree if reads_output and not (arrays and costly) else None


def _build_partial(tree, inputs, out, dtype):
    """The tracer computing the expression ``tree`` of :func:`_partial_of_output`
    (constants as Python numbers, so that they take the output's dtype)."""
    def build(t):
        tag = t[0]
        if tag == "one":
            return 1
        if tag == "num":
            return t[1]
        if tag == "const":
            return np.frombuffer(t[2], dtype=np.dtype(t[1]))[0].item()
        if tag == "in":
            return inputs[t[1]]
        if tag == "v":
            return out
        parts = [build(c) for c in t[1:]]
        if tag == "mul":
            a, b = parts
            return b if isinstance(a, int) and a == 1 else a if isinstance(b, int) and b == 1 \
                else a * b
        if tag == "add":
            total = parts[0]
            for q in parts[1:]:
                total = total + q
            return total
        return getattr(np, tag)(*parts)

    partial = build(tree)
    return partial.astype(dtype, copy=False) if partial.dtype != dtype else partial


def _equal_partials(body, active):
    """input position -> the first position whose partial is the same
    expression (``x + b``: d/dx and d/db are both 1 * tanh'), so a value
    region stores it once -- one array per distinct partial, not per input.
    The partials are compared as expression trees (:class:`_Expr`), built from
    the same rule table the kernels are rendered from."""
    first, out, table = {}, {}, {}
    for k, act in enumerate(active):
        if act:
            expr = _partial_expr(body, k, table)
            if expr is not None:  # (None: no derivative flows from input k)
                out[k] = first.setdefault(expr, k)
    return out


class _Expr:
    """A symbolic scalar whose value is a hashable expression tree: what the
    elementwise rules compute, without printing any language."""

    __slots__ = ("key", "dtype")
    __array_priority__ = 1000

    def __init__(self, key, dtype):
        self.key = key
        self.dtype = np.dtype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            return NotImplemented
        return _Expr((ufunc.__name__, *(_key(i) for i in inputs)),
                     np.result_type(*(_dtype_of(i) for i in inputs)))

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and not kwargs:
            return _Expr(("where", *(_key(a) for a in args)),
                         np.result_type(*(_dtype_of(a) for a in args[1:])))
        return NotImplemented


def _key(v):
    return v.key if isinstance(v, _Expr) else ("const", np.asarray(v).dtype.str,
                                               np.asarray(v).tobytes())


def _dtype_of(v):
    return v.dtype if isinstance(v, _Expr) else np.asarray(v).dtype


def _expr_binop(ufunc, reflected=False):
    return (lambda a, b: ufunc(b, a)) if reflected else (lambda a, b: ufunc(a, b))


install_operators(_Expr, _expr_binop, lambda a: np.negative(a))
_Expr.__invert__ = lambda a: np.logical_not(a)


def _numbers(inputs):
    """input position -> value of the region's one-element constant inputs
    (a weight the trace made a constant operand, not a literal of the body)."""
    out = {}
    for j, t in enumerate(inputs):
        node = getattr(t, "node", None)
        if node is not None and node.op == "const" and node.size == 1:
            value = np.asarray(node.attrs["value"]).reshape(-1)[0]
            if np.isfinite(value) and np.isrealobj(value):
                out[j] = float(value)
    return out


def _scaled_partials(body, firsts, numbers=None):
    """input position -> ``(leader, ratio)`` for the inputs of ``firsts``
    whose partial is the number ``ratio`` times the partial of an earlier one
    (``leader``): the weights of a linear combination of the inputs before a
    nonlinearity -- a stencil's ``u[:-2] + u[2:] - 2 u[1:-1]``, a
    convolution's taps -- make partials that differ by their weight alone, so
    a region stores one array for them all, not one per weight."""
    table, groups, out = {}, {}, {}
    for k in firsts:
        found = _scaled_tree(body, k, lambda tree: table.setdefault(tree, len(table)),
                             numbers or {})
        if found is None or found[0] == 0.0:
            continue
        coef, tree = found
        leader = groups.setdefault(tree, (k, coef))
        if leader[0] != k:
            out[k] = (leader[0], coef / leader[1])
    return out


def _number(partial, numbers):
    """The value of a partial that is a number (a literal rule partial, a
    one-element constant, ``numbers``' inputs), else None."""
    if partial[0] == "in" and len(partial) == 2:
        return numbers.get(partial[1])
    if partial[0] == "num" and isinstance(partial[1], (int, float)):
        return float(partial[1])
    if partial[0] == "const" and len(partial) == 3:
        value = np.frombuffer(partial[2], np.dtype(partial[1]))
        if value.size == 1 and np.isfinite(value[0]):
            return float(value[0])
    return None


def _scaled_tree(body, k, intern, numbers):
    """d(region value)/d(input k) as ``(coefficient, tree)``: the numbers a
    path multiplies the tangent by while it is the only term (a literal
    weight, a subtraction's -1) gathered into the coefficient, the rest a
    tree as :func:`_tangent_tree` makes it (where terms meet, each carries its
    own coefficient in the tree); None where the value does not depend on
    input k.  ``numbers``: input position -> value, for constant inputs."""

    def fixed(c, t):
        return t if c == 1.0 else intern(("mul", ("num", c), t))

    tans = {node.id: (1.0, intern(("one",))) if j == k else None
            for j, node in enumerate(body.inputs)}
    for node, op, args, ans in _symbolic(body):
        if node.op == "where":
            ta, tb = (tans[a.id] for a in node.args[1:])
            if ta is None and tb is None:
                tans[node.id] = None
            elif ta is None or tb is None or ta[0] == tb[0]:  # (zero scales too)
                c = (ta or tb)[0]
                tans[node.id] = (c, intern(("select", args[0].key, ta and ta[1],
                                            tb and tb[1])))
            else:
                tans[node.id] = (1.0, intern(("select", args[0].key, fixed(*ta), fixed(*tb))))
            continue
        terms = [(pj, tans[a.id]) for a, pj in _local_partials(op, node, args, ans, tans)]
        if not terms:
            tans[node.id] = None
        elif len(terms) == 1:
            pj, (c, t) = terms[0]
            number = _number(pj, numbers)
            tans[node.id] = (c * number, t) if number is not None else \
                (c, intern(("mul", pj, t)))
        else:
            tans[node.id] = (1.0, intern(("add", *(intern(("mul", pj, fixed(c, t)))
                                                    for pj, (c, t) in terms))))
    return tans[body.nodes[-1].id]


def _symbolic(body):
    """``(node, its op, its operands, its value)`` for each node of ``body``,
    the operands and values as :class:`_Expr` symbols."""
    from ..ir.registry import REGISTRY

    vals = {node.id: _Expr(("in", j), node.dtype) for j, node in enumerate(body.inputs)}
    for node in body.nodes:
        args = [vals[a.id] for a in node.args]
        ans = vals[node.id] = _Expr(("v", node.id), node.dtype)
        yield node, REGISTRY[node.op], args, ans


def _local_partials(op, node, args, ans, tans):
    """``(operand, partial key)`` of each operand of ``node`` with a tangent in
    ``tans`` and a partial that is not zero: a dual-number partial ``("dual",
    node id, j)``, the rule's expression's key, or ``("num", p)``.  (Only
    those: a partial that has no rule raises where it is asked for.)"""
    for j, (a, p) in enumerate(zip(node.args, op.partials, strict=True)):
        if tans[a.id] is None or p is None or (not callable(p) and p == 0):
            continue
        yield a, ("dual", node.id, j) if op.dual is not None else \
            _key(p(*args, ans)) if callable(p) else ("num", p)


def _partial_expr(body, k, table):
    """d(region value)/d(input k) as an expression tree (:func:`_tangent_tree`)
    hash-consed in ``table`` (tree -> id, shared by the calls that compare):
    each tangent is a small tuple of its children's ids.  (As nested tuples,
    the tangents of a deep region repeat their shared subtrees, and hashing
    one walked them all: 30 of the 77 ms a 20-layer dense chain took to plan.)"""
    return _tangent_tree(body, k, lambda tree: table.setdefault(tree, len(table)))


def _tangent_tree(body, k, intern):
    """d(region value)/d(input k) by forward mode (seed 1 on input k), each
    tangent ``intern(tuple)``: ``("one",)``, ``("add", *terms)``, ``("mul",
    partial, tangent)``, ``("select", condition, a, b)``; a partial is an
    :class:`_Expr` key (the rule applied to opaque leaves ``("in", j)``, ``("v",
    node id)``, ``("const", dtype, bytes)``), ``("num", number)`` or ``("dual",
    node id, j)``; None where the value does not depend on input k."""

    tans = {node.id: intern(("one",)) if j == k else None for j, node in enumerate(body.inputs)}
    for node, op, args, ans in _symbolic(body):
        if node.op == "where":
            ta, tb = (tans[a.id] for a in node.args[1:])
            tans[node.id] = None if ta is None and tb is None else \
                intern(("select", args[0].key, ta, tb))
            continue
        terms = [intern(("mul", pj, tans[a.id]))
                 for a, pj in _local_partials(op, node, args, ans, tans)]
        tans[node.id] = intern(("add", *terms)) if terms else None
    return tans[body.nodes[-1].id]


register(Op("region", "region", _region_abstract, run=_no_numpy, vjp=_region_vjp,
            doc="fused elementwise group (value, or its VJP for one input)"))


def _acc_abstract(acc, *operands, body, mode, wrt=None, index=None):
    return acc.shape, acc.dtype


register(Op("region_acc", "inplace", _acc_abstract, run=_no_numpy,
            doc="acc[index] += a fused region's value or VJP, in place"))

register(Op("zeros", "compute", lambda shape, dtype: (shape, dtype),
            run=lambda out, shape, dtype: out.fill(0),
            doc="a buffer of zeros (where folded accumulations start)"))


def _partial_abstract(region, wrt, summed=False):
    body = region.attrs["body"]
    return () if summed else body.shape, body.nodes[-1].dtype


register(Op("region_partial", "compute", _partial_abstract, run=_no_numpy,
            doc="local partial of a region w.r.t. one input, stored by its kernel "
                "(summed=True: its sum over the region's loop)"))
