"""Helpers the op families' rules share: :func:`bind` (emit IR through the
tracer, imported when a rule runs), the batch helpers of :mod:`.batch_helpers`
(likewise), the shape rule "as the first operand", and the Python operators of
symbolic scalars (:func:`install_operators`: the region rules' expression trees
and the backends' kernel printers).

The tracer and the batch helpers are imported inside the functions: the numpy
surface imports the op families at import time, so the families may not import
the tracer's package at theirs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bind", "expand", "install_operators", "lift", "same_as_first"]


def bind(*args, **attrs):
    from ..core.trace import bind

    return bind(*args, **attrs)


def lift(t, rank):
    from .batch_helpers import lift

    return lift(t, rank)


def expand(x, k):
    from .batch_helpers import expand

    return expand(x, k)


def same_as_first(*args, **attrs):
    return args[0].shape, args[0].dtype


def install_operators(cls, binop, negate):
    """Python's arithmetic and comparison operators on a symbolic scalar
    class: each is ``binop(ufunc, reflected=False)``, ``-x`` is ``negate``."""
    for name, uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                     ("truediv", np.true_divide), ("pow", np.power)]:
        setattr(cls, f"__{name}__", binop(uf))
        setattr(cls, f"__r{name}__", binop(uf, reflected=True))
    for name, uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                     ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
        setattr(cls, f"__{name}__", binop(uf))
    cls.__neg__ = negate
    cls.__hash__ = object.__hash__
