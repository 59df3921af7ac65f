"""Reductions of lazy selections (:mod:`.numpy_selected`): ``np.sum``,
``mean``, ``average``, ``var``, ``std``, ``prod``, ``max``, ``min``,
``any``, ``all``, ``count_nonzero``, ``nansum``, ``linalg.norm`` of ``x[m]``
over all of it or its first axis are the whole array's, ``np.where(m, .,
identity)`` (the count, where one is needed, ``np.count_nonzero(m)`` of the
plan); ``median``, ``quantile`` and ``percentile`` the NaN-ignoring ones of
the whole array with NaN where the mask is False; over the selected
element's axes alone, selections of the whole array's reduction; dot
products of two 1-D selections, and selected rows times a matrix or vector
(``X[m] @ w``, a selection of ``X @ w``).  Each rule returns None where its
call is not one of these (the selection is then materialized: numpy's, the
mask decided)."""

from __future__ import annotations

import math

import numpy as np

from ..core.decisions import decide
from ..core.tracer import Tracer
from .numpy_api import reshape, where
from .numpy_selected import FUNCTIONS, Selection, expanded, lift, pending, rule

__all__ = ["PER_ELEMENT"]


# ----------------------------------------------------------------------------
# reductions: the whole array's, masked
# ----------------------------------------------------------------------------

def _axes(s, axis):
    """The whole array's axes that reduce ``s``'s ``axis`` (None or 0); None
    for another axis (materialized: the general path)."""
    if axis is None:
        return tuple(range(s._full.ndim))
    if isinstance(axis, tuple) and len(axis) == 1:
        axis = axis[0]
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and \
            axis in (0, -s.ndim):
        return tuple(range(s._mask.ndim))
    return None


def _per_element(func, whole, args, kwargs):
    """``func`` (a reduction) over axes of the selected element only
    (``np.sum(X[m] ** 2, axis=1)``): the selection of ``func`` of the whole
    array over those axes -- each selected element's result is its whole
    array's; None for any other ``axis``."""
    bound = whole.__signature__.bind(*args, **kwargs)
    params = bound.arguments
    first = next(iter(params))
    s, axis = params[first], params.get("axis")
    if not pending(s) or axis is None or params.get("out") is not None:
        return None
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
        return None
    axes = [int(a) + s.ndim if a < 0 else int(a) for a in axes]
    if not all(1 <= a < s.ndim for a in axes) or len(set(axes)) != len(axes):
        return None
    shift = s._mask.ndim - 1
    named = {**params, first: s._full, "axis": tuple(a + shift for a in axes)}
    r = func(**named)
    if not isinstance(r, Tracer) or r.shape[:s._mask.ndim] != s._mask.shape:
        return None
    return Selection(r, s._mask, r, r.node, s._trace)


def _shaped(s, r, axis, keepdims):
    if not keepdims:
        return r
    return reshape(r, (1,) * s.ndim if axis is None else (1,) + s._item())


def _filled(s, fill):
    return where(expanded(s._mask, s._full.ndim), s._full, np.asarray(fill, s.dtype))


def _count(s, axis, dtype):
    """How many elements each result reduces (a value of the plan)."""
    c = np.count_nonzero(s._mask).astype(dtype)
    return c * math.prod(s._item()) if axis is None else c


def _sum(a, axis=None, dtype=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.sum(_filled(a, 0), axis=axes, dtype=dtype), axis, keepdims)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.prod(_filled(a, 1), axis=axes, dtype=dtype), axis, keepdims)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    kind = a.dtype.kind
    if dtype is None:
        dtype = np.float64 if kind in "biu" else a.dtype
    total = np.sum(_filled(a, 0), axis=axes, dtype=dtype)
    return _shaped(a, total / _count(a, axis, total.dtype), axis, keepdims)


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, std=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None or \
            a.dtype.kind == "c":
        return None
    mu = _mean(a, axis, dtype, keepdims=True)
    d = lift(np.subtract, (a, mu), {})
    if d is None:
        return None
    total = np.sum(_filled(d, 0) ** 2, axis=axes)
    v = total / (_count(a, axis, total.dtype) - ddof)
    return _shaped(a, np.sqrt(v) if std else v, axis, keepdims)


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    return _var(a, axis, dtype, out, ddof, keepdims, std=True)


def _extreme(a, axis, out, keepdims, take):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None or \
            a.dtype.kind not in "biuf":
        return None
    if decide(np.any(a._mask), "bool") is not True:
        return None  # (an empty selection: numpy's error, on the general path)
    kind = a.dtype.kind
    if kind == "f":
        fill = -np.inf if take is np.max else np.inf
    elif kind == "b":
        fill = take is not np.max
    else:
        info = np.iinfo(a.dtype)
        fill = info.min if take is np.max else info.max
    return _shaped(a, take(_filled(a, fill), axis=axes), axis, keepdims)


def _max(a, axis=None, out=None, keepdims=False):
    return _extreme(a, axis, out, keepdims, np.max)


def _min(a, axis=None, out=None, keepdims=False):
    return _extreme(a, axis, out, keepdims, np.min)


def _any(a, axis=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.any(_filled(a, 0), axis=axes), axis, keepdims)


def _all(a, axis=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.all(_filled(a, 1), axis=axes), axis, keepdims)


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False):
    if not pending(a) or out is not None or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.nansum(_filled(a, 0), axis=axes, dtype=dtype), axis, keepdims)


def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    if not pending(a) or returned or (axes := _axes(a, axis)) is None:
        return None
    if weights is None:
        return _mean(a, axis, keepdims=keepdims)
    if not pending(weights) or weights._mask.node is not a._mask.node or \
            weights._full.shape != a._full.shape:
        return None  # (weights of the element's shape, and numpy's other forms: general)
    p = lift(np.multiply, (a, weights), {})
    if p is None:
        return None
    return _shaped(a, np.sum(_filled(p, 0), axis=axes) / np.sum(_filled(weights, 0), axis=axes),
                   axis, keepdims)


def _count_nonzero(a, axis=None, *, keepdims=False):
    if not pending(a) or (axes := _axes(a, axis)) is None:
        return None
    return _shaped(a, np.count_nonzero(_filled(a, 0), axis=axes), axis, keepdims)


def _order(a, axis, keepdims, stat, scalar=True):
    """An order statistic of a float selection over all of it or its first
    axis: ``stat`` (a NaN-ignoring one) of the whole array with NaN where
    the mask is False -- NaN where the selection holds one, as numpy's; one
    decision, that the mask selects something (numpy's own path otherwise).
    ``scalar``: whether the statistic adds no axes of its own (one ``q``)."""
    if not pending(a) or a.dtype.kind != "f" or (axes := _axes(a, axis)) is None or \
            keepdims and not scalar:
        return None
    if decide(np.any(a._mask), "bool") is not True:
        return None
    r = stat(_filled(a, np.nan), axes)
    has_nan = np.any(where(expanded(a._mask, a._full.ndim), np.isnan(a._full), False), axis=axes)
    return _shaped(a, where(has_nan, np.asarray(np.nan, r.dtype), r), axis, keepdims)


def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    if out is not None:
        return None
    return _order(a, axis, keepdims, lambda v, axes: np.nanquantile(v, 0.5, axis=axes))


def _levels(nan_function):
    """The rule of ``np.quantile`` (``nan_function`` ``np.nanquantile``) or
    ``np.percentile`` (``np.nanpercentile``, whose own checks of ``q`` stay
    percentile's) of a selection, at constant levels ``q``."""
    def levels(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None):
        if out is not None or weights is not None or isinstance(q, Tracer):
            return None
        return _order(a, axis, keepdims,
                      lambda v, axes: nan_function(v, q, axis=axes, method=method),
                      np.ndim(q) == 0)

    return levels


def _dot(a, b, out=None):
    """``a @ b`` / ``np.dot``: of two 1-D selections by one mask, the sum of
    their product; of selected rows and a vector or matrix that does not
    depend on the count (``X[m] @ w``), the selection of ``X @ w`` -- each
    selected row's product is its whole array's row's."""
    if out is not None:
        return None
    if pending(a) and pending(b):
        if a.ndim != 1 or b.ndim != 1:
            return None
        p = lift(np.multiply, (a, b), {})
        return None if p is None else np.sum(_filled(p, 0))
    if not pending(a) or a.ndim < 2 or type(b) is Selection or \
            not isinstance(b, (Tracer, np.ndarray)) or b.ndim not in (1, 2):
        return None
    r = np.matmul(a._full, b)
    return Selection(r, a._mask, r, r.node, a._trace)


def _inner(a, b):
    return _dot(a, b) if pending(a) and pending(b) else None


def _vdot(a, b):
    if not (pending(a) and pending(b)) or a.ndim != 1 or b.ndim != 1:
        return None
    p = lift(lambda u, v: np.conj(u) * v, (a, b), {})
    return None if p is None else np.sum(_filled(p, 0))


def _norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 - numpy's name
    if not pending(x) or ord is not None or axis is not None or keepdims or \
            x.dtype.kind not in "f":
        return None
    return np.sqrt(np.sum(_filled(x, 0) ** 2))


FUNCTIONS.update({func: rule(fn) for func, fn in [
    (np.sum, _sum), (np.prod, _prod), (np.mean, _mean), (np.var, _var), (np.std, _std),
    (np.max, _max), (np.amax, _max), (np.min, _min), (np.amin, _min), (np.any, _any),
    (np.all, _all), (np.nansum, _nansum), (np.dot, _dot), (np.inner, _inner),
    (np.vdot, _vdot), (np.linalg.norm, _norm), (np.average, _average),
    (np.count_nonzero, _count_nonzero), (np.matmul, _dot), (np.median, _median),
    (np.quantile, _levels(np.nanquantile)), (np.percentile, _levels(np.nanpercentile))]})
#: reductions that may reduce axes of the selected element alone (:func:`_per_element`)
PER_ELEMENT = frozenset({np.sum, np.prod, np.mean, np.var, np.std, np.max, np.amax, np.min,
                         np.amin, np.any, np.all, np.nansum, np.linalg.norm, np.average,
                         np.count_nonzero, np.median, np.quantile, np.percentile})


def _per_element_first(func, whole):
    def first(*args, **kwargs):
        r = _per_element(func, whole, args, kwargs)
        return r if r is not None else whole(*args, **kwargs)

    first.__signature__ = whole.__signature__
    return first


for _func in PER_ELEMENT:
    FUNCTIONS[_func] = _per_element_first(_func, FUNCTIONS[_func])
