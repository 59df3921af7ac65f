"""Derivatives taken inside a function that is itself being differentiated.

``ha.gradient(g, y)`` called while hybridad traces an outer ``f`` -- ``y`` a
tracer, as in autograd's and JAX's ``grad`` of ``grad`` -- does not build a
plan: it traces ``g`` into the outer trace and appends ``g``'s reverse pass
there as ordinary IR (:func:`hybridad.transforms.autodiff.backward`, the
functional form, which itself has derivative rules).  The result's
``gradient`` is a tracer of the outer trace, so the outer differentiation goes
through it: any depth composes.

Each differentiated argument enters ``g`` through a fresh alias node (a copy
that common-subexpression elimination does not merge), so ``g``'s derivative
is taken with respect to that argument only: a value the outer function
computed from the same input and ``g`` closes over stays a constant of ``g``
(no perturbation confusion).  Hessians and Jacobians take one forward
(tangent) pass over the gradient per input element.

``g`` may also take plain arguments and close over the outer function's
tracers instead (``ha.gradient(u, x)`` of a network ``u`` over the outer
function's weights, at fixed points ``x``: a physics-informed loss, a
gradient penalty).  Tracing ``g`` for a plan of its own then meets a value of
the enclosing trace (:class:`~hybridad.errors.OuterTracerError`), and
:func:`plan_or_nested` differentiates ``g`` inside the enclosing trace
instead.  A differentiated argument may be a tuple, list, dict or namedtuple
of tracers and arrays; its gradient has its structure.
"""

from __future__ import annotations

import numpy as np

from .._tree import flatten, is_namedtuple, number_array
from ..core.escapes import outer_uses
from ..core.trace import bind, current_trace, tracing
from ..core.tracer import Tracer
from ..errors import OuterTracerError, raised_in_chain
from ..transforms.autodiff import backward, jvp

__all__ = ["NestedResult", "gradient", "hessian", "hvp", "jacobian", "plan_or_nested",
           "traced"]


class NestedResult:
    """What :func:`hybridad.gradient` / ``hessian`` / ``jacobian`` return on
    tracers: ``value`` and the derivatives as tracers of the outer trace."""

    __slots__ = ("value", "gradient", "hessian", "jacobian", "hvp")

    def __init__(self, value, gradient=None, hessian=None, jacobian=None, hvp=None):
        self.value, self.gradient = value, gradient
        self.hessian, self.jacobian, self.hvp = hessian, jacobian, hvp

    def __repr__(self):
        return f"NestedResult(value={self.value!r})"


def plan_or_nested(args, plan_call, nested_call):
    """``plan_call()`` -- a derivative by a plan of its own -- or
    ``nested_call()``, the derivative taken inside the enclosing trace: where
    ``args`` hold tracers (the function is differentiated inside one being
    differentiated), or where the function uses a value of the enclosing trace
    (a closure over the outer function's tracers; raised, or met and
    swallowed on the way)."""
    if traced(args) is not None:
        return nested_call()
    if not tracing():
        return plan_call()
    seen = outer_uses()
    try:
        out = plan_call()
    except Exception as exc:  # noqa: BLE001 - re-raised unless an outer value caused it
        if outer_uses() == seen and raised_in_chain(exc, OuterTracerError) is None:
            raise
        return nested_call()
    return nested_call() if outer_uses() != seen else out


def _trace_of(args):
    """The trace of ``args``'s tracers, or else the one tracing the caller."""
    trace = traced(args)
    return trace if trace is not None else current_trace()


def traced(args):
    """The trace of the first tracer among ``args`` (nested containers too), or None."""
    stack = list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, Tracer):
            return a._trace
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        elif isinstance(a, dict):
            stack.extend(a.values())
    return None


class _Phase:
    """Emit nodes under ``phase`` (no common-subexpression merging outside
    "forward"), then tag every node made meanwhile with the phase the trace
    had before: to the outer passes they are part of its forward graph."""

    def __init__(self, trace, phase):
        self.trace, self.phase = trace, phase

    def __enter__(self):
        self.saved, self.start = self.trace.phase, len(self.trace.nodes)
        self.trace.phase = self.phase
        return self

    def __exit__(self, *exc):
        for node in self.trace.nodes[self.start:]:
            node.phase = self.saved
        self.trace.phase = self.saved


def _primitives(trace):
    """``trace`` made of primitives from here on: the derivatives taken inside
    it differentiate what it recorded so far, and a composite op (a matrix-vector
    product recorded as one ``matvec`` node while a loop may roll) has no rules
    of its own -- its nodes are lowered now, and later ones recorded as their
    primitives (:meth:`hybridad.core.trace.Trace.lower_composites`)."""
    if trace.composites:
        trace.lower_composites()
    return trace


def _refuse_out(name, out):
    if out is not None:
        raise TypeError(f"hybridad.{name} inside a traced function returns tracers; "
                        "out= cannot be written there (drop it)")


def _alias(trace, x, name, k):
    """A fresh node holding argument ``k`` (a tracer or a float array)."""
    if not isinstance(x, Tracer):
        if isinstance(x, int | float | np.integer | np.floating | np.bool_):
            x = np.asarray(x, dtype=np.float64)  # a number, as hybridad.gradient takes it
        leaves, _ = flatten(x)
        if len(leaves) != 1 or leaves[0] is not x or np.asarray(x).dtype.kind != "f":
            raise TypeError(f"hybridad.{name} inside a traced function: differentiated "
                            f"argument {k} must be a float array, a number or a tracer "
                            "(or a tuple, list or dict of them)")
        x = Tracer(trace.const(np.asarray(x), True), trace)
    if x.dtype.kind != "f":
        raise TypeError(f"hybridad.{name}: differentiated argument {k} has dtype {x.dtype}")
    with _Phase(trace, "nested"):
        return bind("copy", x)


def _alias_tree(trace, x, name, k, wrt):
    """Argument ``k`` with each of its leaves -- a tracer, an array or
    numbers -- replaced by its alias (:func:`_alias`, appended to ``wrt``):
    a tuple, list, dict or namedtuple keeps its structure, as a plan's
    argument does (:func:`hybridad._tree.as_array_tree`)."""
    if type(x) in (tuple, list) and number_array(x) is None:
        return type(x)(_alias_tree(trace, o, name, f"{k}[{i}]", wrt) for i, o in enumerate(x))
    if is_namedtuple(x):
        return type(x)(*(_alias_tree(trace, o, name, f"{k}.{field}", wrt)
                         for field, o in zip(type(x)._fields, x, strict=True)))
    if type(x) is dict:
        return {key: _alias_tree(trace, o, name, f"{k}[{key!r}]", wrt) for key, o in x.items()}
    if type(x) in (tuple, list):
        x = np.asarray(x, dtype=np.float64)  # numbers only, as hybridad.gradient takes them
    wrt.append(_alias(trace, x, name, k))
    return wrt[-1]


def _like(tree, leaves):
    """``leaves`` (in order) put in the places of the tracers of ``tree`` (an
    argument :func:`_alias_tree` made)."""
    if isinstance(tree, Tracer):
        return next(leaves)
    if is_namedtuple(tree):
        return type(tree)(*(_like(o, leaves) for o in tree))
    if type(tree) is dict:
        return {key: _like(o, leaves) for key, o in tree.items()}
    return type(tree)(_like(o, leaves) for o in tree)


def _scalar(out, name):
    if not isinstance(out, Tracer) or out.dtype.kind != "f" or out.size != 1:
        raise ValueError(f"hybridad.{name}: the function must return a scalar float value "
                         f"(got {getattr(out, 'shape', type(out).__name__)})")
    return out.reshape(()) if out.shape != () else out


def _grads(trace, f, args, nums, name, trees=False):
    """``(value, the aliases, their gradients, structured)``: with ``trees``,
    argument ``k`` may be a container (:func:`_alias_tree`), and
    ``structured(leaves)`` puts one value per alias back into the arguments'
    structures, one per argument."""
    args, wrt = list(args), []
    for k in nums:
        args[k] = _alias_tree(trace, args[k], name, k, wrt) if trees else \
            _alias(trace, args[k], name, k)
        wrt += [] if trees else [args[k]]
    value = _scalar(f(*args), name)
    with _Phase(trace, "nested"):
        gs = backward(trace, value, wrt, inplace=False)
    gs = [g if g is not None else np.zeros_like(w) for g, w in zip(gs, wrt, strict=True)]

    def structured(leaves):
        leaves = iter(leaves)
        return [_like(args[k], leaves) for k in nums]
    return value, wrt, gs, structured


def gradient(f, args, argnums, out=None):
    """:func:`hybridad.gradient` on tracers, or inside a traced function (the
    current trace): value and gradient as tracers."""
    _refuse_out("gradient", out)
    trace = _primitives(_trace_of(args))
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    value, _, gs, structured = _grads(trace, f, args, nums, "gradient", trees=True)
    gs = structured(gs)
    return NestedResult(value, gs[0] if isinstance(argnums, int) else tuple(gs))


def _tangent_columns(trace, start, seed_node, target, shape):
    """d target / d seed, one forward pass per element of the seed: an array of
    ``target.shape + shape``."""
    nodes = trace.nodes[start:]
    cols = []
    for i in range(int(np.prod(shape))):
        e = np.zeros(shape, seed_node.dtype)
        e.flat[i] = 1
        with _Phase(trace, "nested"):
            tangents = jvp(trace, nodes, {seed_node.id: Tracer(trace.const(e, True), trace)})
        t = tangents.get(target.node.id)
        cols.append(np.zeros(target.shape, target.dtype) if t is None else t)
    stacked = np.stack(cols, axis=-1) if cols else np.zeros(target.shape + (0,))
    return stacked.reshape(target.shape + tuple(shape))


def hessian(f, args, argnums, out=None):
    """:func:`hybridad.hessian` on tracers: value, gradient and Hessian as tracers."""
    _refuse_out("hessian", out)
    if not isinstance(argnums, int):
        raise NotImplementedError("hybridad.hessian inside a traced function takes one argnum")
    trace = _primitives(_trace_of(args))
    start = len(trace.nodes)
    value, (w,), (g,), _ = _grads(trace, f, args, (argnums,), "hessian")
    h = _tangent_columns(trace, start, w.node, g, w.shape).reshape(w.size, w.size)
    return NestedResult(value, g, hessian=h)


def hvp(f, args, v, argnums, out=None):
    """:func:`hybridad.hvp` on tracers, or inside a traced function: value,
    gradient and ``H v`` as tracers -- one tangent pass over the gradient
    along ``v`` (a tracer, an array, or a container of them shaped like the
    differentiated arguments)."""
    _refuse_out("hvp", out)
    trace = _primitives(_trace_of((*args, v)))
    start = len(trace.nodes)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    value, wrt, grads, structured = _grads(trace, f, args, nums, "hvp", trees=True)
    seeds = []
    for j, vk in enumerate((v,) if isinstance(argnums, int) else v):
        _alias_tree(trace, vk, "hvp", f"v[{j}]", seeds)
    if len(seeds) != len(wrt) or any(s.shape != w.shape for s, w in zip(seeds, wrt,
                                                                      strict=False)):
        raise ValueError("hybridad.hvp: v must be shaped like the differentiated "
                         f"argument(s): {[w.shape for w in wrt]}, got "
                         f"{[s.shape for s in seeds]}")
    with _Phase(trace, "nested"):
        tangents = jvp(trace, trace.nodes[start:],
                       {w.node.id: s.astype(w.dtype) for w, s in zip(wrt, seeds, strict=True)})
    gs, hv = structured(grads), structured(
        tangents.get(g.node.id) if isinstance(g, Tracer) and g.node.id in tangents
        else np.zeros(w.shape, w.dtype) for g, w in zip(grads, wrt, strict=True))
    if isinstance(argnums, int):
        return NestedResult(value, gs[0], hvp=hv[0])
    return NestedResult(value, tuple(gs), hvp=tuple(hv))


def jacobian(f, args, argnums, out=None):
    """:func:`hybridad.jacobian` on tracers: value and Jacobian (``(value.size,
    x.size)``, as a Jacobian plan writes it) as tracers, one tangent pass per
    element of ``x``."""
    _refuse_out("jacobian", out)
    if not isinstance(argnums, int):
        raise NotImplementedError("hybridad.jacobian inside a traced function takes one argnum")
    trace = _primitives(_trace_of(args))
    args = list(args)
    start = len(trace.nodes)
    args[argnums] = x = _alias(trace, args[argnums], "jacobian", argnums)
    value = f(*args)
    if not isinstance(value, Tracer):
        value = Tracer(trace.const(np.asarray(value, np.float64), True), trace)
    jac = _tangent_columns(trace, start, x.node, value, x.shape)
    return NestedResult(value, jacobian=jac.reshape(value.size, x.size))
