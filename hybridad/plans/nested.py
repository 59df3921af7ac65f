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
"""

from __future__ import annotations

import numpy as np

from .._tree import flatten
from ..core.trace import bind
from ..core.tracer import Tracer
from ..transforms.autodiff import backward, jvp

__all__ = ["NestedResult", "gradient", "hessian", "jacobian", "traced"]


class NestedResult:
    """What :func:`hybridad.gradient` / ``hessian`` / ``jacobian`` return on
    tracers: ``value`` and the derivatives as tracers of the outer trace."""

    __slots__ = ("value", "gradient", "hessian", "jacobian")

    def __init__(self, value, gradient=None, hessian=None, jacobian=None):
        self.value, self.gradient = value, gradient
        self.hessian, self.jacobian = hessian, jacobian

    def __repr__(self):
        return f"NestedResult(value={self.value!r})"


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
                            "(containers of tracers are not supported there yet)")
        x = Tracer(trace.const(np.asarray(x), True), trace)
    if x.dtype.kind != "f":
        raise TypeError(f"hybridad.{name}: differentiated argument {k} has dtype {x.dtype}")
    with _Phase(trace, "nested"):
        return bind("copy", x)


def _scalar(out, name):
    if not isinstance(out, Tracer) or out.dtype.kind != "f" or out.size != 1:
        raise ValueError(f"hybridad.{name}: the function must return a scalar float value "
                         f"(got {getattr(out, 'shape', type(out).__name__)})")
    return out.reshape(()) if out.shape != () else out


def _grads(trace, f, args, nums, name):
    args = list(args)
    for k in nums:
        args[k] = _alias(trace, args[k], name, k)
    value = _scalar(f(*args), name)
    wrt = [args[k] for k in nums]
    with _Phase(trace, "nested"):
        gs = backward(trace, value, wrt, inplace=False)
    gs = [g if g is not None else np.zeros_like(w) for g, w in zip(gs, wrt, strict=True)]
    return value, wrt, gs


def gradient(f, args, argnums, out=None):
    """:func:`hybridad.gradient` on tracers: value and gradient as tracers."""
    _refuse_out("gradient", out)
    trace = _primitives(traced(args))
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    value, _, gs = _grads(trace, f, args, nums, "gradient")
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
    trace = _primitives(traced(args))
    start = len(trace.nodes)
    value, (w,), (g,) = _grads(trace, f, args, (argnums,), "hessian")
    h = _tangent_columns(trace, start, w.node, g, w.shape).reshape(w.size, w.size)
    return NestedResult(value, g, hessian=h)


def jacobian(f, args, argnums, out=None):
    """:func:`hybridad.jacobian` on tracers: value and Jacobian (``(value.size,
    x.size)``, as a Jacobian plan writes it) as tracers, one tangent pass per
    element of ``x``."""
    _refuse_out("jacobian", out)
    if not isinstance(argnums, int):
        raise NotImplementedError("hybridad.jacobian inside a traced function takes one argnum")
    trace = _primitives(traced(args))
    args = list(args)
    start = len(trace.nodes)
    args[argnums] = x = _alias(trace, args[argnums], "jacobian", argnums)
    value = f(*args)
    if not isinstance(value, Tracer):
        value = Tracer(trace.const(np.asarray(value, np.float64), True), trace)
    jac = _tangent_columns(trace, start, x.node, value, x.shape)
    return NestedResult(value, jacobian=jac.reshape(value.size, x.size))
