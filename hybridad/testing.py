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
    x : ndarray
        Point (float64 recommended for tight tolerances).
    rtol, atol : float
        Tolerances of the comparison, relative to the gradient's scale
        (``max |g|``), so tiny components are not held to a relative bound
        finite differences cannot meet.

    Returns
    -------
    GradientResult
        The checked result.

    Raises
    ------
    AssertionError
        With the largest discrepancy, when the gradients differ.
    """
    from .api import gradient

    res = gradient(f, x, *args, out=out)
    num = numerical_gradient(f, x, *args)
    val = float(f(x, *args))
    got = np.asarray(res.gradient, dtype=np.float64)
    if not np.allclose(float(res.value), val, rtol=1e-12, atol=0, equal_nan=True):
        raise AssertionError(f"value {float(res.value)!r} != f(x) = {val!r}")
    scale = max(1.0, float(np.max(np.abs(num), initial=0.0)))
    err = np.abs(got - num)
    if not np.all(err <= atol + rtol * scale) or not np.all(np.isfinite(got) == np.isfinite(num)):
        i = int(np.argmax(err)) if err.size else 0
        raise AssertionError(f"gradient mismatch: max |hybridad - finite differences| = "
                             f"{float(err.reshape(-1)[i]) if err.size else 0:.3e} at flat index "
                             f"{i} (scale {scale:.3e}, rtol {rtol}, atol {atol})\n"
                             f"hybridad: {got.reshape(-1)[:8]}\nnumeric:  "
                             f"{num.reshape(-1)[:8]}")
    return res
