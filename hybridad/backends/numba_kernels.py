"""Region kernels for numba: one loop nest per region, value and dual partials
computed per element in scalar locals, a fused reduction accumulated in place.

:func:`region_kernel_source` renders the Python source of one kernel::

    def kernel(in0, in1, out, p0):
        acc = 0.0
        for i0 in range(100):
            v2 = (in0[i0] + _k0)
            ...
            acc += v5
            p0[i0] = d5_0
        out[()] = acc

``out`` receives the region's output (the reduction's, if fused); ``p<k>``
receive the local partials d(elementwise output)/d(input k) for each seeded
input, shaped like the loop.  Inputs broadcast: a size-1 or missing axis of an
input is read at index 0.  Max/min reductions propagate NaN like numpy.
"""

from __future__ import annotations

import numpy as np

from .scalar import Constants, render_region

__all__ = ["region_kernel_source", "compile_region_kernel"]

_INIT = {"sum": "0", "max": "-np.inf", "min": "np.inf"}


def _read(node, loop_ndim):
    off = loop_ndim - len(node.shape)
    if not node.shape:
        return "[()]"
    idx = ["0" if s == 1 else f"i{off + d}" for d, s in enumerate(node.shape)]
    return "[" + ", ".join(idx) + "]"


def _accumulate(kind, target, value):
    if kind == "sum":
        return [f"{target} += {value}"]
    cmp = ">" if kind == "max" else "<"
    # NaN wins, like numpy: once the target is NaN no comparison replaces it
    return [f"if {value} {cmp} {target} or {value} != {value}:", f"    {target} = {value}"]


def region_kernel_source(region, seeds=(), name="kernel"):
    """Source and constants of the numba kernel for ``region``.

    Returns
    -------
    source : str
    namespace : dict
        The kernel's typed scalar constants (bind as globals before compiling).
    """
    shape = region.shape
    nd = len(shape)
    consts = Constants()
    names, params = [], []
    for k, node in enumerate(region.inputs):
        if node.is_literal and node.size == 1:
            names.append(consts.add(node.dtype.type(node.attrs["value"].reshape(-1)[0])))
            params.append(f"in{k}")  # still passed, for a uniform signature
        else:
            names.append(f"in{k}{_read(node, nd)}")
            params.append(f"in{k}")
    body = render_region(region, names, seeds, consts)
    params += ["out"] + [f"p{k}" for k in seeds]
    lines = [f"def {name}({', '.join(params)}):"]
    red = region.reduction
    full = red is not None and len(red.attrs["axis"]) == nd
    if red is not None:
        kind = red.op
        init = f"{red.dtype.name}({_INIT[kind]})"
        if full:
            lines.append(f"    acc = np.{init}")
        else:
            lines.append(f"    out.fill(np.{init})")
    inner = []
    for d, s in enumerate(shape):
        inner.append("    " * (d + 1) + f"for i{d} in range({s}):")
    pad = "    " * (nd + 1)
    inner += [pad + line for line in body.lines]
    here = "[" + ", ".join(f"i{d}" for d in range(nd)) + "]" if nd else "[()]"
    if red is None:
        inner.append(pad + f"out{here} = {body.value}")
    else:
        axis, keep = red.attrs["axis"], red.attrs["keepdims"]
        if full:
            target = "acc"
        else:
            idx = [("0" if keep else None) if d in axis else f"i{d}" for d in range(nd)]
            target = "out[" + ", ".join(i for i in idx if i is not None) + "]"
        inner += [pad + line for line in _accumulate(red.op, target, body.value)]
    for k in seeds:
        inner.append(pad + f"p{k}{here} = {body.partials[k]}")
    lines += inner
    if full:
        lines.append("    out[()] = acc")
    return "\n".join(lines) + "\n", consts.namespace()


def compile_region_kernel(region, seeds=(), name="kernel"):
    """Compile the kernel of ``region`` with numba (``njit``); returns the dispatcher."""
    from numba import njit

    source, ns = region_kernel_source(region, seeds, name)
    ns = {"np": np, **ns}
    exec(compile(source, f"<hybridad kernel {name}>", "exec"), ns)  # noqa: S102
    fn = njit(ns[name], nogil=True)
    fn.hybridad_source = source
    return fn
