"""Matrix products as generated CUDA kernels: a product is a sum.

``a @ b`` (``a`` of shape ``(..., m, k)``, ``b`` of ``(..., k, n)``, numpy's
batch broadcasting) is, element ``(..., r, c)``, the sum over ``k`` of the
virtual array ``p[..., r, c, j] = a[..., r, j] * b[..., j, c]``.  The GPU
program sums it with the kernels of :mod:`.reduce`, ``p`` read through a
value function in place of an operand (as a fused region's reduction reads
its values): the products are made as they are added, never stored; each
output's terms are split over partial sums when ``k`` is long (a weight's
gradient over a batch), added in double (float32 too: each product exact),
float64 compensated.  Operands are read in place through their strides
(a transposed view, as the backward sweep's ``a^T g``, is not copied).

Where they are used: cupy refuses cuBLAS while a stream is captured, and a
CUDA graph's capture enqueues cuBLAS's GEMMs itself where it can
(:mod:`.cublas_capture`), so by default a plan's products are cuBLAS's, in
graphs too.  These kernels serve a graph where cuBLAS cannot be captured
(no cuBLAS found), or everywhere when ``HYBRIDAD_CUDA_PRODUCTS=kernels``
asks for them (:func:`own_products`).  They make no use of shared-memory
tiling, so they suit the small and skinny products of such plans (hidden
layers of tens to hundreds).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from . import cublas_capture
from .cublas_capture import cublas_tf32
from .source import RegionKernel, _broadcast_offset, c_strides, coordinate_lines, ctype

__all__ = ["captured_products", "cublas_tf32", "own_products", "product_loop",
           "product_value", "products_mode", "products_precision"]


def products_mode():
    """``HYBRIDAD_CUDA_PRODUCTS``: ``auto`` (the default), ``kernels``,
    ``cublas`` or ``segments`` (:func:`own_products`)."""
    how = os.environ.get("HYBRIDAD_CUDA_PRODUCTS", "auto").strip().lower()
    return how if how in ("kernels", "cublas", "segments") else "auto"


def own_products(graph_mode):
    """Whether a GPU program computes its float matrix products with these
    kernels.  By default (``HYBRIDAD_CUDA_PRODUCTS=auto``) products are
    cuBLAS's, also under ``cuda_graph=True`` (``graph_mode``), where the
    graph captures them (:mod:`.cublas_capture`); these kernels serve a graph
    where that cannot be done (no cuBLAS found).  ``kernels`` asks for them
    everywhere; ``cublas`` for cuBLAS everywhere; ``segments`` for cupy's
    cuBLAS calls between the captured segments of a graph (no GEMM captured)."""
    how = products_mode()
    if how == "kernels":
        return True
    if how in ("cublas", "segments"):
        return False
    return bool(graph_mode) and not cublas_capture.available()


def captured_products():
    """Whether a CUDA graph's capture enqueues the program's cuBLAS products
    (:class:`.cublas_capture.GraphGemm`) rather than cutting the graph there."""
    return products_mode() != "segments" and cublas_capture.available()


def products_precision(own, dtypes):
    """What a GPU program's float matrix products run in, one phrase per dtype
    of ``dtypes`` (``own``: :func:`own_products`): hybridad's kernels (float32
    products exact in float64 and summed there, rounded once; float64 sums
    compensated) or cuBLAS in the compute type cupy gives it -- full precision
    unless ``CUPY_TF32=1`` asked cupy for TF32 (float32 operands rounded to
    10-bit mantissas)."""
    said = []
    for dt in sorted({np.dtype(d) for d in dtypes}, key=lambda d: d.itemsize):
        if own:
            said.append(f"{dt.name} by hybridad's kernels (" + (
                "each product exact in float64, summed in float64, rounded once; no TF32)"
                if dt == np.float32 else "float64 products, compensated sums)"))
        elif dt == np.float32:
            said.append("float32 by cuBLAS in TF32 (CUPY_TF32=1: operands rounded to 10-bit "
                        "mantissas)" if cublas_tf32(dt) else
                        "float32 by cuBLAS in full float32 (TF32 off: cupy's default)")
        else:
            said.append(f"{dt.name} by cuBLAS in {dt.name}")
    return "; ".join(said)


def product_loop(node):
    """The virtual array's shape ``(*batch, m, n, k)`` of matmul ``node`` (its
    sum runs over the last axis), or None when these kernels do not compute
    it (not float32/float64 operands and result of one dtype)."""
    a, b = node.args
    if node.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or \
            a.dtype != node.dtype or b.dtype != node.dtype:
        return None
    return (*node.shape, a.shape[-1])


def product_value(node, strides):
    """The value function of the virtual array of matmul ``node`` (an object
    with :func:`.source.region_kernel`'s ``fused=True`` attributes: ``name``,
    ``code``, ``params``, ``decls``), ``strides`` the operands' element
    strides (None: C-contiguous)."""
    a, b = node.args
    loop = product_loop(node)
    nd = len(loop)
    t = ctype(node.dtype)
    coords = [f"c{d}" for d in range(nd)]

    def virtual(x, st, rows):
        """``x`` as an operand of the loop: ``a`` (..., m, 1, k), ``b`` (..., 1, n, k)."""
        shape = list(x.shape)
        st = c_strides(shape) if st is None else list(st)
        if rows:  # a[..., r, j]
            return shape[:-1] + [1, shape[-1]], st[:-1] + [0, st[-1]]
        return shape[:-2] + [1, shape[-1], shape[-2]], st[:-2] + [0, st[-1], st[-2]]

    sa, ta = virtual(a, strides[0], True)
    sb, tb = virtual(b, strides[1], False)
    body = "\n".join(coordinate_lines(loop, coords) + [
        f"    return (double)a[{_broadcast_offset(sa, ta, loop, coords)}] * "
        f"(double)b[{_broadcast_offset(sb, tb, loop, coords)}];"])
    decls = [f"const {t}* __restrict__ a", f"const {t}* __restrict__ b"]
    name = "hybridad_mm_" + hashlib.sha256((body + ",".join(decls)).encode()).hexdigest()[:16]
    code = "\n".join([
        f"namespace {name}_ {{  // element i of the products a[.., r, j] b[.., j, c] "
        "(host and device)",
        f"HD double value(long long i, {', '.join(decls)}) {{", body, "}", "}", ""])
    fn = RegionKernel(name, code, ["a", "b"], None)
    fn.decls = decls
    return fn
