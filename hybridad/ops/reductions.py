"""Reductions: ``sum``, ``max``, ``min`` and ``prod`` over normalized ``axis``
tuples, ``keepdims`` explicit (ties of ``max``/``min`` share the cotangent;
``prod``'s derivatives, exact with zeros, come from ``cumprod_exclusive`` of
:mod:`.scans`)."""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind


def _reduced_shape(shape, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axis)


def _grad_to_input_shape(g, node):
    """Reshape a reduction's cotangent to keepdims form, ready to broadcast."""
    x = node.args[0]
    kshape = _reduced_shape(x.shape, node.attrs["axis"], True)
    return g if g.shape == kshape else np.reshape(g, kshape)


def _reduce_abstract(x, axis, keepdims):
    return _reduced_shape(x.shape, axis, keepdims), x.dtype


def _reducer(reduce):
    # numpy's reduction functions, not their ufuncs' .reduce: cupy implements
    # the functions for every reduction (its maximum.reduce raises), and numpy
    # hands them device arrays (__array_function__)
    def run(out, x, axis, keepdims):
        reduce(x, axis=axis, keepdims=keepdims, out=out)

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


register(Op("sum", "reduce", _reduce_abstract, run=_reducer(np.sum), vjp=_sum_vjp,
            jvp=_sum_jvp, batch=_axis_batch))
register(Op("max", "reduce", _reduce_abstract, run=_reducer(np.max), vjp=_extremum_vjp,
            jvp=_extremum_jvp, batch=_axis_batch))
register(Op("min", "reduce", _reduce_abstract, run=_reducer(np.min), vjp=_extremum_vjp,
            jvp=_extremum_jvp, batch=_axis_batch))


def _prod_vjp(g, node, active, x, ans, axis, keepdims):
    # Exact with zeros: d prod / d x_i = prod_{j<i} x_j * prod_{j>i} x_j.
    from ..core.trace import bind

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


register(Op("prod", "reduce", _prod_abstract, run=_reducer(np.prod), vjp=_prod_vjp,
            jvp=_prod_jvp, batch=_axis_batch))
