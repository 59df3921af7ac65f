"""Tools to check your own functions with hybridad's own test instruments.

* :func:`count_allocations` -- exact count of numpy data allocations,
  temporaries included (a NEP-49 counting memory handler).
* :func:`assert_no_alloc` -- warm up, then assert repeated calls allocate nothing.
* :func:`numerical_gradient` / :func:`check_grads` -- central finite differences
  against hybridad's gradient.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._alloc import AllocationCounts, assert_no_alloc, count_allocations

__all__ = [
    "AllocationCounts",
    "assert_no_alloc",
    "check_grads",
    "count_allocations",
    "numerical_gradient",
]


def numerical_gradient(f: Callable[..., Any], x: Any, *args: Any,
                       eps: float | None = None) -> np.ndarray:
    """Central finite-difference gradient of scalar ``f`` w.r.t. array ``x``.

    Parameters
    ----------
    f : callable
        ``f(x, *args)`` returning a scalar.
    x : ndarray
        Point (floating point); not modified.
    eps : float, optional
        Relative step; default ``cbrt(machine epsilon)`` of ``x``'s dtype,
        scaled by ``max(1, |x_i|)`` per element.

    Returns
    -------
    ndarray
        Same shape as ``x``, dtype float64.
    """
    x = np.array(x, dtype=np.float64)
    eps = float(np.cbrt(np.finfo(np.float64).eps)) if eps is None else eps
    g = np.zeros(x.shape)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        h = eps * max(1.0, abs(old))
        flat[i] = old + h
        fp = float(f(x, *args))
        flat[i] = old - h
        fm = float(f(x, *args))
        flat[i] = old
        gf[i] = (fp - fm) / (2 * h)
    return g


def check_grads(f: Callable[..., Any], x: Any, *args: Any, rtol: float = 1e-6,
                atol: float = 1e-8, out: Any = None) -> Any:
    """Assert hybridad's gradient of ``f`` at ``x`` matches finite differences.

    Parameters
    ----------
    f : callable
        ``f(x, *args)`` returning a scalar; differentiated w.r.t. ``x``.
    x : ndarray or tuple, list or dict of ndarrays
        Point (float64 recommended for tight tolerances).  For a pytree, each
        leaf's gradient is checked against finite differences in that leaf.
    rtol, atol : float
        Tolerances of the comparison, relative to the gradient's scale
        (``max |g|`` of each leaf), so tiny components are not held to a
        relative bound finite differences cannot meet.
    out : GradientResult, optional
        Receives the gradient (as for :func:`hybridad.gradient`).

    Returns
    -------
    GradientResult
        The checked result.

    Raises
    ------
    AssertionError
        With the largest discrepancy (and the leaf, for a pytree), when the
        gradients differ; or when the value differs from ``f(x)`` by more
        than the rounding of its dtype (a sum of ``n`` terms in another
        order: ``4 sqrt(n)`` units in the last place).
    """
    from . import _tree
    from .api import gradient

    res = gradient(f, x, *args, out=out)  # (refuses an f that is not callable)
    leaves, treedef = _tree.flatten(x)
    val = float(f(x, *args))
    dtype = np.result_type(*leaves) if leaves else np.float64
    eps = float(np.finfo(dtype if np.issubdtype(dtype, np.inexact) else np.float64).eps)
    vtol = max(1e-12, 4 * eps * np.sqrt(max((a.size for a in leaves), default=1)))
    if not np.allclose(float(res.value), val, rtol=vtol, atol=0, equal_nan=True):
        raise AssertionError(f"value {float(res.value)!r} != f(x) = {val!r} (rtol {vtol:.1e})")
    grads = _tree.flatten(res.gradient)[0]
    for k, (path, leaf, g) in enumerate(zip(_tree.leaf_paths(treedef), leaves, grads,
                                             strict=True)):
        def moved(a, *rest, k=k):
            return f(_tree.unflatten(treedef, [*leaves[:k], a, *leaves[k + 1:]]), *rest)
        _compare(np.asarray(g, dtype=np.float64), numerical_gradient(moved, leaf, *args),
                 rtol, atol, f"x{path}" if path else "")
    return res


def _compare(got, num, rtol, atol, leaf):
    """Raise AssertionError where ``got`` and the finite differences ``num`` differ."""
    scale = max(1.0, float(np.max(np.abs(num), initial=0.0)))
    err = np.abs(got - num)
    if not np.all(err <= atol + rtol * scale) or not np.all(np.isfinite(got) == np.isfinite(num)):
        i = int(np.argmax(err)) if err.size else 0
        where = f" of {leaf}" if leaf else ""
        raise AssertionError(f"gradient mismatch{where}: max |hybridad - finite differences| = "
                             f"{float(err.reshape(-1)[i]) if err.size else 0:.3e} at flat index "
                             f"{i} (scale {scale:.3e}, rtol {rtol}, atol {atol})\n"
                             f"hybridad: {got.reshape(-1)[:8]}\nnumeric:  "
                             f"{num.reshape(-1)[:8]}")
