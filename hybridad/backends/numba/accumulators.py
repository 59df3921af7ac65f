"""One running reduction as generated source (pure text, numba dialect): the
identity it starts from, the type it accumulates in (float64 for float32
sums and products), and how an element is added -- plainly, or compensated
by Knuth's TwoSum for float64 sums (:mod:`.reduce` explains why and where
each is used)."""

from __future__ import annotations

import numpy as np

__all__ = ["INIT", "Accumulator", "acc_dtype", "accumulate", "compensated", "init_text",
           "two_sum", "two_sum_result"]

INIT = {"sum": "0", "max": "-np.inf", "min": "np.inf", "prod": "1"}


def init_text(kind, dtype):
    """The identity a reduction of ``kind`` starts from, as source of ``dtype``:
    integers and booleans have no infinities (their extreme values instead)."""
    dt = np.dtype(dtype)
    if kind in ("max", "min") and dt.kind in "biu":
        value = (kind == "min") if dt.kind == "b" else \
            (np.iinfo(dt).min if kind == "max" else np.iinfo(dt).max)
        return f"np.{'bool_' if dt.kind == 'b' else dt.name}({value})"
    return f"np.{dt.name}({INIT[kind]})"

#: the wider type a float32 (complex64) sum or product accumulates in
_WIDE = {np.dtype(np.float32): np.dtype(np.float64),
         np.dtype(np.complex64): np.dtype(np.complex128)}
#: types summed compensated (no wider hardware type)
_COMPENSATED = (np.dtype(np.float64), np.dtype(np.complex128))


def acc_dtype(kind, dtype):
    """The dtype a ``kind`` reduction of ``dtype`` accumulates in."""
    dtype = np.dtype(dtype)
    return _WIDE.get(dtype, dtype) if kind in ("sum", "prod") else dtype


def compensated(kind, dtype):
    """Whether a ``kind`` reduction of ``dtype`` carries a compensation term."""
    return kind == "sum" and np.dtype(dtype) in _COMPENSATED


def accumulate(kind, target, value):
    """Lines folding ``value`` into ``target`` in ``target``'s own type, no
    compensation (max/min propagate NaN like numpy)."""
    if kind == "sum":
        return [f"{target} += {value}"]
    if kind == "prod":
        return [f"{target} *= {value}"]
    cmp = ">" if kind == "max" else "<"
    return [f"if {value} {cmp} {target} or {value} != {value}:", f"    {target} = {value}"]


def two_sum(s, c, value):
    """Lines adding ``value`` to the compensated pair ``(s, c)`` (variables or
    array elements): ``s`` the running sum, ``c`` the sum of its rounding
    errors."""
    return [f"_v = {value}", f"_s = {s}", "_t = _s + _v", "_z = _t - _s",
            f"{c} += (_s - (_t - _z)) + (_v - _z)", f"{s} = _t"]


def two_sum_result(s, c):
    """Expression of a compensated pair's value: ``s + c``, or ``s`` once
    ``s`` is not finite (an infinity or NaN absorbs everything after it and
    leaves ``c`` NaN; the plain sum is then numpy's)."""
    return f"({s} + {c} if {s} - {s} == 0 else {s})"


class Accumulator:
    """One running reduction in scalar locals ``name`` (and ``name + 'c'``,
    its compensation): :meth:`init`, :meth:`add` per element, :meth:`result`."""

    def __init__(self, kind, dtype, name="_a", compensate=True):
        self.kind = kind
        self.acc = acc_dtype(kind, dtype)
        self.comp = compensate and compensated(kind, dtype)
        self.s, self.c = name, name + "c"

    def init(self):
        lines = [f"{self.s} = {init_text(self.kind, self.acc)}"]
        return lines + ([f"{self.c} = np.{self.acc.name}(0)"] if self.comp else [])

    def add(self, value):
        if self.comp:
            return two_sum(self.s, self.c, value)
        return accumulate(self.kind, self.s, value)

    def result(self):
        return two_sum_result(self.s, self.c) if self.comp else self.s
