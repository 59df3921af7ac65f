"""Helpers the op families' rules share: :func:`bind` (emit IR through the
tracer, imported when a rule runs), the batch helpers of :mod:`.batch_helpers`
(likewise), and the shape rule "as the first operand".

The tracer and the batch helpers are imported inside the functions: the numpy
surface imports the op families at import time, so the families may not import
the tracer's package at theirs.
"""

from __future__ import annotations

__all__ = ["bind", "expand", "lift", "same_as_first"]


def bind(*args, **attrs):
    from ..frontend.trace import bind

    return bind(*args, **attrs)


def lift(t, rank):
    from .batch_helpers import lift

    return lift(t, rank)


def expand(x, k):
    from .batch_helpers import expand

    return expand(x, k)


def same_as_first(*args, **attrs):
    return args[0].shape, args[0].dtype
