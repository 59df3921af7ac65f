"""Batched gradients over the chunks of a dask array: ``gradient_map``.

Each block of rows of ``X`` is one :meth:`Plan.gradient_batch` call on a
worker.  The plan travels as a recipe (:meth:`Plan.__reduce__`: the function,
the example arguments' structure, shapes and dtypes, the options) and is
rebuilt once per worker process, its compiled code loaded from hybridad's
disk cache (``HYBRIDAD_CACHE_DIR``, shared by workers on one machine).
dask is an optional dependency (``pip install "hybridad[dask]"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._types import Backend

import numpy as np

__all__ = ["gradient_map"]


def gradient_map(plan_or_f: Any, X: Any, *args: Any, argnums: int = 0,
                 backend: Backend = None, parallel: bool = False) -> tuple[Any, Any]:
    """Values and gradients of ``f`` at every row of a dask array.

    Parameters
    ----------
    plan_or_f : Plan or callable
        A gradient plan (one array argument differentiated), or the function
        (a plan is compiled for it from ``X``'s row shape and dtype).
    X : dask.array.Array, shape (B, *x.shape)
        The points, stacked along axis 0; any chunking of axis 0 (the other
        axes are made whole).
    *args
        The other arguments of ``f`` (shared by all rows; shipped with the
        task graph).
    argnums : int, default 0
        Position of the differentiated argument (when ``plan_or_f`` is a
        function).
    backend : str, optional
        As for :func:`hybridad.compile` (when ``plan_or_f`` is a function).
    parallel : bool, default False
        As for :func:`hybridad.compile`: dask already runs a block per
        worker thread, so the plan's own loops run serially by default.

    Returns
    -------
    values : dask.array.Array, shape (B,)
    gradients : dask.array.Array, shaped like ``X``
        Lazy; ``dask.compute(values, gradients)`` runs them.
    """
    import dask.array as da

    from ..api import compile as compile_plan
    from ..plans.plan import Plan

    if not isinstance(X, da.Array):
        raise TypeError(f"X must be a dask array; got {type(X).__name__}")
    if X.ndim < 1 or X.dtype.kind != "f":
        raise ValueError(f"X must be a floating-point stack of points (B, ...); got shape "
                         f"{X.shape} and dtype {X.dtype}")
    if isinstance(plan_or_f, Plan):
        plan = plan_or_f
    else:
        example = list(args)
        example.insert(argnums, np.zeros(X.shape[1:], X.dtype))
        plan = compile_plan(plan_or_f, *example, argnums=argnums, backend=backend,
                            parallel=parallel)
    shape, dtype = plan._specs[plan._diff_leaves[0]] if len(plan._diff_leaves) == 1 else \
        (None, None)
    if shape is None or isinstance(plan.argnums, tuple):
        raise TypeError("gradient_map differentiates one array argument (argnums an int)")
    if X.shape[1:] != shape or X.dtype != dtype:
        raise ValueError(f"X must stack points of shape {shape} and dtype {dtype}; got "
                         f"shape {X.shape} and dtype {X.dtype}")
    n = int(np.prod(shape, dtype=np.int64))
    flat = X.reshape(X.shape[0], n).rechunk({1: -1})

    def block(xb, plan=plan, args=args):
        xb = np.ascontiguousarray(xb).reshape(len(xb), *shape)
        res = plan.gradient_batch(xb, *args)
        out = np.empty((len(xb), n + 1), np.result_type(res.value.dtype, dtype))
        out[:, 0] = res.value
        out[:, 1:] = res.derivs[0].reshape(len(xb), n)
        return out

    both = flat.map_blocks(block, chunks=(flat.chunks[0], (n + 1,)),
                           dtype=np.result_type(plan._value_dtype, dtype))
    return both[:, 0], both[:, 1:].reshape(X.shape)
