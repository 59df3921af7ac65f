"""Loop-nest source generation shared by compiled backends.

Everything a kernel needs to turn array ops into scalar loops: loop nests over
a shape, broadcast reads (a size-1 or missing axis reads index 0), the index
map of a basic-indexing view, and the body of a fused region (value, dual
partials, fused reduction).  Pure text: no compiler is imported here.
"""

from __future__ import annotations

import os

import numpy as np

from .scalar import Constants, render_region

__all__ = ["LoopWriter", "broadcast_index", "region_lines", "INIT"]

INIT = {"sum": "0", "max": "-np.inf", "min": "np.inf", "prod": "1"}

#: fewest loop iterations for which a region runs as a parallel ``prange``
#: (below it, thread start-up costs more than it saves; see benchmarks/);
#: ``HYBRIDAD_PARALLEL_MIN`` overrides
PARALLEL_MIN = int(os.environ.get("HYBRIDAD_PARALLEL_MIN", "") or 1 << 15)


def broadcast_index(shape, loop_ndim, prefix="i"):
    """Index text reading an array of ``shape`` inside a loop nest of ``loop_ndim``."""
    off = loop_ndim - len(shape)
    if not shape:
        return "[()]"
    return "[" + ", ".join("0" if s == 1 else f"{prefix}{off + d}"
                           for d, s in enumerate(shape)) + "]"


def here(ndim, prefix="i"):
    return "[" + ", ".join(f"{prefix}{d}" for d in range(ndim)) + "]" if ndim else "[()]"


class LoopWriter:
    """Accumulates indented source lines."""

    def __init__(self, indent=1):
        self.lines = []
        self.indent = indent
        self.parallel = False  # whether any loop was emitted as a prange

    def emit(self, *lines):
        pad = "    " * self.indent
        self.lines.extend(pad + line for line in lines)

    def nest(self, shape, body, prefix="i", parallel=False):
        """A loop nest over ``shape`` around ``body`` (list of lines).

        ``parallel``: the outermost loop is a ``prange`` when the nest has at
        least :data:`PARALLEL_MIN` iterations (the body must be race-free:
        elementwise stores and ``+=`` into a scalar).
        """
        pad = self.indent
        par = parallel and shape and int(np.prod(shape)) >= PARALLEL_MIN
        self.parallel = self.parallel or bool(par)
        for d, s in enumerate(shape):
            loop = "prange" if par and d == 0 else "range"
            self.lines.append("    " * (pad + d) + f"for {prefix}{d} in {loop}({s}):")
        inner = "    " * (pad + len(shape))
        self.lines.extend(inner + line for line in body)


def fill(w, name, value):
    """Set every element of ``name`` to ``value`` (numba's ``ndarray.fill``
    rejects 0-d arrays; ``[...]`` assignment takes every rank and layout)."""
    w.emit(f"{name}[...] = {value}")


def accumulate(kind, target, value):
    """Lines folding ``value`` into ``target`` (max/min propagate NaN like numpy)."""
    if kind == "sum":
        return [f"{target} += {value}"]
    if kind == "prod":
        return [f"{target} *= {value}"]
    cmp = ">" if kind == "max" else "<"
    return [f"if {value} {cmp} {target} or {value} != {value}:", f"    {target} = {value}"]


def reduce_target(axis, keepdims, ndim, full):
    if full:
        return "acc"
    idx = [("0" if keepdims else None) if d in axis else f"i{d}" for d in range(ndim)]
    kept = [i for i in idx if i is not None]
    return "out[" + ", ".join(kept) + "]" if kept else "out[()]"


def reduction_lines(w, kind, dtype, axis, keepdims, loop_shape, value_lines, value, out):
    """Emit a reduction of ``value`` over ``axis`` of ``loop_shape`` into ``out``."""
    nd = len(loop_shape)
    full = len(axis) == nd
    init = f"np.{np.dtype(dtype).name}({INIT[kind]})"
    if full:
        w.emit(f"acc = {init}")
    else:
        fill(w, out, init)
    target = reduce_target(axis, keepdims, nd, full).replace("out", out, 1)
    w.nest(loop_shape, value_lines + accumulate(kind, target, value))
    if full:
        w.emit(f"{out}[()] = acc")


def region_lines(w, node, names, partial_outs, consts):
    """Emit one fused region (``node.op == 'region'``).

    Parameters
    ----------
    w : LoopWriter
    node : Node
        The region node; ``attrs['mode']`` is ``value`` or ``vjp``.
    names : dict
        node id -> variable name, for the node's operands and itself.
    partial_outs : dict
        input position -> variable name, for partials stored by a value region.
    consts : Constants
    """
    body, mode = node.attrs["body"], node.attrs["mode"]
    shape = body.shape
    nd = len(shape)

    def read(operand):
        if operand.is_literal and operand.size == 1:  # inlined as a typed constant
            return consts.add(operand.dtype.type(operand.attrs["value"].reshape(-1)[0]))
        return names[operand.id] + broadcast_index(operand.shape, nd)

    reads = [read(a) for a in node.args[:len(body.inputs)]]
    out = names[node.id]
    if mode == "vjp":
        k = node.attrs["wrt"]
        sb = render_region(body, reads, (k,), consts)
        line = f"{out}{here(nd)} = {read(node.args[-1])} * {sb.partials[k]}"
        w.nest(shape, sb.lines + [line], parallel=True)
        return
    seeds = tuple(sorted(partial_outs))
    sb = render_region(body, reads, seeds, consts)
    stores = [f"{partial_outs[k]}{here(nd)} = {sb.partials[k]}" for k in seeds]
    red = body.reduction
    if red is None:
        w.nest(shape, sb.lines + [f"{out}{here(nd)} = {sb.value}"] + stores, parallel=True)
        return
    axis, keep = red.attrs["axis"], red.attrs["keepdims"]
    full = len(axis) == nd
    init = f"np.{red.dtype.name}({INIT[red.op]})"
    if full:
        w.emit(f"acc = {init}")
    else:
        fill(w, out, init)
    target = reduce_target(axis, keep, nd, full).replace("out", out, 1)
    # a full sum is a scalar reduction numba parallelizes; other reductions race
    w.nest(shape, sb.lines + accumulate(red.op, target, sb.value) + stores,
           parallel=full and red.op == "sum")
    if full:
        w.emit(f"{out}[()] = acc")


__all__ += ["accumulate", "fill", "reduction_lines", "here", "Constants"]
