"""A ufunc's ``dtype=`` while tracing: ``np.exp(x32, dtype=np.float64)`` is
computed as numpy computes it, in the loop of that dtype -- the inputs cast
to it under ``casting`` -- by :func:`in_loop_dtype`, which
:mod:`hybridad.frontend.numpy_api` calls before it looks at the ufunc."""

from __future__ import annotations

import numpy as np

from ..core.tracer import Tracer
from ..errors import user_location

__all__ = ["in_loop_dtype"]


def in_loop_dtype(ufunc, inputs, kwargs):
    """``(inputs, kwargs)`` of ``ufunc(*inputs, dtype=d)`` without ``dtype=``:
    each input cast to ``d``, a floating-point dtype (under ``casting``,
    numpy's ``"same_kind"`` by default; numpy's TypeError where it refuses)."""
    kwargs = dict(kwargs)
    dtype = np.dtype(kwargs.pop("dtype"))
    casting = kwargs.pop("casting", "same_kind")
    if dtype.kind not in "fc":
        raise NotImplementedError(
            f"hybridad does not support numpy.{ufunc.__name__} with dtype={dtype} (a "
            f"floating-point dtype is) yet (at {user_location()}); see docs/limitations.md "
            "for what tracing supports")
    cast = []
    for v in inputs:
        src = v.dtype if isinstance(v, Tracer) else np.result_type(v)
        if not np.can_cast(src, dtype, casting):
            raise TypeError(f"Cannot cast ufunc {ufunc.__name__!r} input from {src!r} to "
                            f"{dtype!r} with casting rule {casting!r}")
        cast.append(v.astype(dtype) if isinstance(v, Tracer) else np.asarray(v, dtype)[()])
    return tuple(cast), kwargs
