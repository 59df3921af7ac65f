"""Select and casts: ``where``, ``cast`` and ``copy`` (elementwise ops that are
not ufuncs)."""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind
from .common import same_as_first as _same_as_first


def _where_abstract(c, a, b):
    return np.broadcast_shapes(c.shape, a.shape, b.shape), np.result_type(a.dtype, b.dtype)


def _where_run(out, c, a, b):
    np.copyto(out, b)
    np.copyto(out, a, where=c)


def _where_vjp(g, node, active, c, a, b, ans):
    zero = g.dtype.type(0)
    return (None,
            np.where(c, g, zero) if active[1] else None,
            np.where(c, zero, g) if active[2] else None)


def _where_jvp(tangents, node, c, a, b, ans):
    _, ta, tb = tangents
    zero = node.dtype.type(0)
    return np.where(c, zero if ta is None else ta, zero if tb is None else tb)


register(Op("where", "elementwise", _where_abstract, run=_where_run, vjp=_where_vjp,
            jvp=_where_jvp,
            partials=(None, lambda c, a, b, ans: c, lambda c, a, b, ans: ~c),
            doc="select: a where c else b"))


def _cast_run(out, x, dtype):
    np.copyto(out, x, casting="unsafe")


def _cast_vjp(g, node, active, x, ans, dtype):
    return (g.astype(x.dtype) if x.dtype.kind in "fc" else None,)


register(Op("cast", "elementwise", lambda x, dtype: (x.shape, np.dtype(dtype)),
            run=_cast_run, vjp=_cast_vjp, jvp=lambda ts, node, x, ans, dtype: ts[0],
            partials=(1,), doc="convert to dtype"))


def _copy_run(out, x):
    np.copyto(out, x)


register(Op("copy", "compute", _same_as_first, run=_copy_run,
            vjp=lambda g, node, active, x, ans: (g,), jvp=lambda ts, node, x, ans: ts[0],
            batch=lambda node, batched, x: _bind("copy", x), doc="materialize a copy"))
