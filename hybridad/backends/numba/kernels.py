"""A single region as a standalone numba kernel (for tests and inspection).

:func:`region_kernel_source` renders ``kernel(in0, in1, ..., out, p<k>...)``:
``out`` receives the region's output (the fused reduction's, if any) and
``p<k>`` the local partials d(elementwise output)/d(input k) for every seeded
input -- value and partials in one pass.  The whole-plan backend
(:mod:`hybridad.backends.numba.program`) inlines the same loop text.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ..scalar import vector_namespace
from .loops import Constants, LoopWriter, region_lines

__all__ = ["region_kernel_source", "compile_region_kernel"]


def region_kernel_source(region, seeds=(), name="kernel"):
    """Source and typed constants of the kernel for a fused region
    (:class:`~hybridad.transforms.partition.Region`)."""
    out = region.output
    node = Node(out.id, "region", region.inputs, {"body": region, "mode": "value"},
                out.shape, out.dtype)
    names = {a.id: f"in{k}" for k, a in enumerate(region.inputs)}
    names[node.id] = "out"
    consts = Constants()
    w = LoopWriter()
    region_lines(w, node, names, {k: f"p{k}" for k in seeds}, consts)
    params = [f"in{k}" for k in range(len(region.inputs))] + ["out"] + [f"p{k}" for k in seeds]
    source = f"def {name}({', '.join(params)}):\n" + "\n".join(w.lines) + "\n"
    return source, {**consts.namespace(), **consts.kernel_namespace()}


def compile_region_kernel(region, seeds=(), name="kernel"):
    """Compile the kernel of ``region`` with numba (``njit``); returns the dispatcher."""
    from numba import njit

    source, ns = region_kernel_source(region, seeds, name)
    ns = {"np": np, **vector_namespace(), **ns}
    exec(compile(source, f"<hybridad kernel {name}>", "exec"), ns)  # noqa: S102
    fn = njit(ns[name], nogil=True, error_model="numpy")
    fn.hybridad_source = source
    return fn
