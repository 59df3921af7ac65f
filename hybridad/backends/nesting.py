"""A loop inside a compiled loop body, run natively: what hybridad's compiler
needs to call the inner loop's body from the outer body's machine code
(:mod:`hybridad.backends.jit.nests`), with no switch to Python per inner loop.

The numba source of a body calls an inner loop's runner in object mode
(:func:`hybridad.backends.loops.emit_numba`).  Where hybridad's compiler
translates that source and the inner runner's body is its machine code run
by the compiled driver (:meth:`~hybridad.backends.loops.LoopRunner.prepare`),
the translation runs the inner loop in place instead: the initial carries
copied into the inner loop's workspace (a slot of the outer body's arena,
:func:`hybridad.backends.numba.layouts.loop_workspace`), the body called
``length`` times on its arguments -- the arena addresses, the carries of the
two sets in turn, each iteration's rows -- and the final carries copied out.
The body reads an array argument as numpy's array struct, only its data
pointer (:data:`.numba.abi.ABI`), so the outer code passes, for each array, the
address of an int64 on its stack holding the data pointer, less the field's
offset: no Python object, no allocation, reentrant.

:func:`describe` gives the structure the translation bakes into the machine
code (``spec``: offsets and counts, checked again when the code is loaded
from the disk cache) and the values only this process knows (``context``:
the body's address, its bound arguments), read by the machine code at run
time through a cell the load fills (:func:`hybridad.backends.jit.sites.bind_sites`).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from .numba.abi import ABI

__all__ = ["describe", "watched", "workspace_layout"]

#: the version of the spec's fields (a change makes cached outer bodies stale)
FORMAT = 1


def describe(runner):
    """``(spec, cell, context)`` of ``runner``'s loop for a native call from an
    outer body, or None where its body is not hybridad's machine code run by
    the compiled driver on a workspace.

    ``spec`` (JSON): ``format``, ``data`` (the data pointer's offset in numpy's
    array struct), ``nargs`` (the body's arguments), ``work`` (bytes of the
    workspace), ``arenas`` (offset in the workspace of each leading arena
    argument), ``n_fixed`` (leading arguments: the arenas, then values),
    ``n_bound`` (values after the constants), ``index``, ``start``,
    ``length``, ``reverse``, ``nc``, ``nx``, ``nconst``, ``carries`` (the
    two sets' offsets in the workspace), ``carry_bytes``, ``dtypes`` (of
    the operands: the initial carries, the xs, the constants), ``finals``
    (byte offset of each final carry in the loop's value), ``rows`` (byte
    offset and row bytes of each per-iteration output).  ``context``: int64
    ``[body address, the non-arena leading values..., the bound values...]``,
    kept by the runner; ``cell``: the word holding its address (:data:`_CELLS`)."""
    drive, layout, parts = runner._drive, runner._layout, runner._parts_of_body
    if drive is None or layout is None or parts is None or ABI is None or \
            not getattr(drive, "copies", False):
        return None
    _, fixed, bound = parts
    address = getattr(drive, "address", None)  # (the body's machine code: hybridad's compiler)
    if address is None or not all(isinstance(v, int) for v in (*fixed, *bound)):
        return None
    body = runner.body
    outs, ins = body.graph.outputs, body.graph.inputs
    nc = body.n_carry
    nbytes, carries, arenas = layout
    dtypes = runner._prog.arena_dtypes
    itemsize = runner._dtype.itemsize
    if any(n.dtype != runner._dtype for n in outs):
        return None  # (the loop's value is one dtype: its parts by element offsets)
    finals, rows = [], []
    for k in range(len(outs)):
        off, shape = runner._parts[k]
        if k < nc:
            finals.append(off * itemsize)
        else:
            rows.append([off * itemsize, math.prod(shape[1:]) * itemsize])
    first = body.index
    spec = {"format": FORMAT, "data": ABI["data"], "nargs": len(fixed) + len(bound) +
            len(ins) + len(outs), "work": nbytes, "arenas": [arenas[dt] for dt in dtypes],
            "n_fixed": len(fixed), "n_bound": len(bound), "index": bool(body.index),
            "start": runner.start, "length": runner.length, "reverse": bool(runner.reverse),
            "nc": nc, "nx": body.n_xs, "nconst": body.n_const, "carries": carries,
            "carry_bytes": [n.nbytes for n in outs[:nc]],
            "dtypes": [n.dtype.str for n in ins[first:]], "finals": finals, "rows": rows}
    context = np.array([address, *fixed[len(dtypes):], *bound], np.int64)
    cell = _CELLS.setdefault(runner.key, ctypes.c_void_p())
    cell.value = context.ctypes.data  # (the runner keeps its context: see watched)
    return spec, cell, context


#: runner key -> the word the machine code of its callers loads its context
#: from: one per key for the process, pointed at the context of the key's
#: runner now -- a runner made again after the last was dropped (its plans
#: gone) has other bound values, and compiled outer bodies are kept
_CELLS = {}


def watched(key):
    """Whether compiled code reads the context of runner ``key`` (a new runner
    under that key must point the cell at its own at once)."""
    return key in _CELLS


#: the alignment of each part of a loop's workspace (:func:`workspace_layout`)
_ALIGN = 64


def workspace_layout(body, arena_bytes):
    """``(nbytes, carries, arenas)``: where the parts of a loop's workspace lie
    in it -- the runner's two sets of carries (``carries[s][k]``: the offset of
    carry ``k`` in set ``s``) and the body program's arena of each dtype
    (``arenas``: dtype -> offset; ``arena_bytes``: its memory plan's) -- for a
    body that runs on a workspace its plan gives it
    (:func:`.numba.layouts.loop_workspace`: a slot of the plan's arena, live
    while the loop runs, so loops that run one after the other share it)."""
    end = 0

    def take(nbytes):
        nonlocal end
        at, end = end, end + -(-max(int(nbytes), 1) // _ALIGN) * _ALIGN
        return at

    outs = body.graph.outputs[:body.n_carry]
    carries = [[take(n.nbytes) for n in outs] for _ in range(2)]
    arenas = {dt: take(arena_bytes[dt]) for dt in sorted(arena_bytes, key=lambda d: d.str)}
    return end, carries, arenas
