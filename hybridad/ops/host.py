"""Functions hybridad has no rules for, applied to values that need no derivative.

A ufunc hybridad does not know (``scipy.special.spence``, ``np.gcd`` on data,
a third-party ufunc) called on traced values becomes one ``host_ufunc`` node:
its value is the ufunc itself, run into the node's preallocated buffer
(``out=``) on every call -- numpy's own result, whatever the function.  Its
derivative rules raise, naming the function and the user's line, so a plan
is refused exactly when a derivative must flow through it (a differentiated
argument reaches it); applied to data arguments or constants it is just a
value.  The ufunc is named by its import path (``attrs["ufunc"]``), which
keeps plans picklable and generated source cacheable.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np

from ..ir.registry import Op, register

__all__ = ["resolve"]


@functools.cache
def resolve(path):
    """The ufunc at import path ``path`` (``"scipy.special.spence"``)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _abstract(*args, ufunc, where):
    from ..frontend.trace import loop_dtypes

    fn = resolve(ufunc)
    shape = np.broadcast_shapes(*(a.shape for a in args))
    return shape, loop_dtypes(fn, args)[-1]


def _run(out, *arrays, ufunc, where):
    resolve(ufunc)(*arrays, out=out)


def _no_derivative(node):
    return NotImplementedError(
        f"hybridad has no derivative rule for {node.attrs['ufunc']} (at {node.attrs['where']}), "
        "and a differentiated argument reaches it; applied only to values that are not "
        "differentiated (data, constants) it runs as numpy runs it")


def _vjp(g, node, active, *operands, **attrs):
    raise _no_derivative(node)


def _jvp(tangents, node, *operands, **attrs):
    if any(t is not None for t in tangents):
        raise _no_derivative(node)
    return None


register(Op("host_ufunc", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp,
            doc="a ufunc without derivative rules, on values that need none"))
