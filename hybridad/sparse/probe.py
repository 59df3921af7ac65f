"""Second-order structure of elementwise ops, read off their partials.

Each elementwise op declares its partial derivatives as expressions in its
operands (:mod:`hybridad.ops.elementwise`).  Evaluated once on
:class:`_Probe` stand-ins -- objects that record which operands a value
depends on *differentiably* -- they say which second derivatives can be
nonzero: partial ``i`` of ``x * y`` is ``y``, so ``d^2/dx dy`` is and
``d^2/dx^2`` is not; a partial built from comparisons, ``sign`` or ``floor``
(``maximum``, ``abs``) depends on nothing: no second-order term.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ir.registry import REGISTRY
from ..ops.common import install_operators

__all__ = ["carries", "elementwise_pairs"]


def carries(p):
    """Whether a partial is a nonzero derivative (not ``None`` and not the number 0)."""
    return p is not None and (callable(p) or p != 0)


class _Probe:
    """A stand-in operand of a partial derivative: which operands (by position)
    the value it computes depends on *differentiably* (a comparison, ``sign``
    or ``floor`` of anything depends on nothing).  Evaluated with numpy calls
    the way the partials are written, it answers: is this partial constant, and
    if not, in which operands -- the second-order structure of the op."""

    __array_priority__ = 1000
    dtype = np.dtype(np.float64)

    def __init__(self, deps):
        self.deps = frozenset(deps)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = REGISTRY.get(ufunc.__name__)
        if method != "__call__" or op is None or op.partials is None or \
                len(op.partials) != len(inputs):
            return _Probe(_deps(*inputs))
        return _Probe(_deps(*(x for x, p in zip(inputs, op.partials, strict=True)
                              if carries(p))))

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and len(args) == 3:
            return _Probe(_deps(args[1], args[2]))
        return _Probe(_deps(*args, *kwargs.values()))

    def astype(self, *args, **kwargs):
        return self

    def __invert__(self):
        return _Probe(())

    def __neg__(self):
        return self

    def __pos__(self):
        return self


def _binop(ufunc, reflected=False):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


install_operators(_Probe, _binop, _Probe.__neg__)  # (the operators every symbolic scalar has)


def _deps(*values):
    out = set()
    for v in values:
        if isinstance(v, _Probe):
            out |= v.deps
        elif isinstance(v, (tuple, list)):
            out |= _deps(*v)
    return out


@functools.cache
def elementwise_pairs(name):
    """The operand pairs ``(i, j)`` of elementwise op ``name`` with a nonzero
    second derivative ``d^2 f / dx_i dx_j`` (both orders listed): partial ``i``
    evaluated on probes depends on operand ``j``.  A partial that cannot be
    probed (an underived or compiled one) counts as depending on every operand."""
    op = REGISTRY[name]
    nargs = len(op.partials) if op.partials is not None else None
    if nargs is None:
        return None  # no partials: conservative (see _elementwise_second)
    carrying = [i for i, p in enumerate(op.partials) if carries(p)]
    pairs = set()
    for i in carrying:
        p = op.partials[i]
        if not callable(p):
            continue  # a constant partial: linear in operand i
        try:
            probes = [_Probe((k,)) for k in range(nargs)]
            value = p(*probes, _Probe(carrying))
            deps = _deps(value)
        except Exception:  # noqa: BLE001 - a partial we cannot probe: assume the worst
            deps = set(carrying)
        for j in deps:
            if j in carrying:
                pairs.update({(i, j), (j, i)})
    return tuple(sorted(pairs))
