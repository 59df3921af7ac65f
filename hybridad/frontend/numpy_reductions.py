"""numpy's reductions and searches while tracing, with numpy's whole signatures.

``sum``, ``prod``, ``max``, ``min``, ``all``, ``any``, ``mean``, ``var``,
``std``, ``ptp``, ``argmax``, ``argmin``, ``argpartition`` and ``searchsorted``
take every argument numpy's do: ``dtype`` (the accumulator; numpy's default
int64/uint64 for booleans and small integers), ``keepdims``, ``initial`` and
``where`` (elements outside the mask are replaced by the reduction's
identity, so they get a zero derivative).  ``out=`` never reaches these: a
traced array made inside ``f`` takes the result, and a numpy array is refused
(or, made inside ``f``, traced: :mod:`hybridad.frontend.numpy_out`).  The
ndarray methods of the same names call these
(:mod:`hybridad.frontend.numpy_methods`).

Index results (``argmax``, ``argsort``, ``searchsorted``) are traced integer
arrays: they can be computed with, but an index computed from traced values
cannot select elements (TracingError), since the graph is static.
``nonzero`` / ``argwhere`` / ``flatnonzero`` return arrays whose shape depends
on the values, and are refused.
"""

from __future__ import annotations

import numpy as np

from ..errors import TracingError, user_location
from .numpy_api import HANDLED, _norm_axis, _reduce, _tracer, implements, ravel, reshape, where
from ..core.supported import check_dtype
from ..core.tracer import Tracer

__all__ = ["mean", "var", "std"]

_NoValue = np._NoValue


def _no_out(name, out):
    if out is not None:
        raise TracingError(f"np.{name}(..., out=...) at {user_location()}: a traced value "
                           "cannot be written into an array; use the returned value")


def _accumulate_in(a, dtype):
    """``a`` in the reduction's accumulator dtype: ``dtype``, or numpy's
    default (int64 / uint64 for booleans and integers narrower than 64 bits)."""
    if dtype is not None:
        check_dtype(dtype, "the reduction's dtype=", where=user_location)
        return a.astype(dtype)
    if a.dtype == np.bool_ or (a.dtype.kind == "i" and a.dtype.itemsize < 8):
        return a.astype(np.int64)
    if a.dtype.kind == "u" and a.dtype.itemsize < 8:
        return a.astype(np.uint64)
    return a


def _mask(a, mask, identity, name):
    """``a`` with its elements outside ``mask`` (numpy's ``where=``) replaced
    by ``identity``."""
    if mask is True:
        return a
    if identity is None:
        raise ValueError(f"reduction operation '{name}' does not have an identity, so to use "
                         "a where mask one has to specify 'initial'")
    m = mask if isinstance(mask, Tracer) else np.asarray(mask, dtype=bool)
    if np.broadcast_shapes(np.shape(m), a.shape) != a.shape:
        raise ValueError(f"operands could not be broadcast together: where= of shape "
                         f"{np.shape(m)} for an array of shape {a.shape}")
    return where(m, a, a.dtype.type(identity))


def _count(a, axis, mask=True, keepdims=False):
    """How many elements each reduction over ``axis`` sees (an int, or an
    array of counts for a ``where=`` mask; traced if the mask is)."""
    if mask is True:
        return int(np.prod([a.shape[i] for i in _norm_axis(axis, a.ndim)], dtype=np.int64))
    m = mask if isinstance(mask, Tracer) else np.asarray(mask, dtype=bool)
    return np.sum(np.broadcast_to(m, a.shape), axis=axis, keepdims=keepdims)


def _with_initial(r, initial, ufunc):
    if initial is _NoValue:
        return r
    return ufunc(r, np.asarray(initial).astype(r.dtype)[()])


@implements(np.sum)
def sum_(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NoValue, where=True):
    _no_out("sum", out)
    a = _mask(_accumulate_in(_tracer(a), dtype), where, 0, "add")
    # (in bool, numpy's add is logical or: a sum with dtype=bool is any)
    return _with_initial(_reduce("max" if a.dtype == np.bool_ else "sum", a, axis, keepdims),
                         initial, np.add)


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    """``np.count_nonzero``: a traced integer (``intp``) sum of ``a != 0``,
    in the plan's loops (it ran on the host before: a value computed in numpy
    and an allocation on every call)."""
    a = _tracer(a)
    return sum_(a if a.dtype == np.bool_ else np.not_equal(a, 0), axis=axis, dtype=np.intp,
                keepdims=keepdims)


@implements(np.prod)
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NoValue, where=True):
    _no_out("prod", out)
    a = _mask(_accumulate_in(_tracer(a), dtype), where, 1, "multiply")
    # (in bool, numpy's multiply is logical and: a product with dtype=bool is all)
    return _with_initial(_reduce("min" if a.dtype == np.bool_ else "prod", a, axis, keepdims),
                         initial, np.multiply)


def _extremum(opname, ufunc):
    def impl(a, axis=None, out=None, keepdims=False, initial=_NoValue, where=True):
        _no_out(opname, out)
        a = _tracer(a)
        a = _mask(a, where, None if initial is _NoValue else initial, ufunc.__name__)
        if a.size == 0 and initial is not _NoValue:
            shape = np.sum(np.empty(a.shape, bool), axis=axis, keepdims=keepdims).shape
            return np.full(shape, initial, a.dtype)
        if a.size == 0 and any(a.shape[i] == 0 for i in _norm_axis(axis, a.ndim)):
            raise ValueError(f"zero-size array to reduction operation {ufunc.__name__} which "
                             "has no identity")  # (numpy's; it traced -inf before)
        return _with_initial(_reduce(opname, a, axis, keepdims), initial, ufunc)

    return impl


implements(np.max, np.amax)(_extremum("max", np.maximum))
implements(np.min, np.amin)(_extremum("min", np.minimum))


def _logical(opname, identity):
    def impl(a, axis=None, out=None, keepdims=False, *, where=True):
        _no_out("all" if opname == "min" else "any", out)
        a = _tracer(a)
        a = a if a.dtype == np.bool_ else np.not_equal(a, 0)
        return _reduce(opname, _mask(a, where, identity, opname), axis, keepdims)

    return impl


implements(np.all)(_logical("min", True))
implements(np.any)(_logical("max", False))


def _float(a, dtype):
    if dtype is not None:
        check_dtype(dtype, "the reduction's dtype=", where=user_location)
        return a.astype(dtype)
    return a if a.dtype.kind in "fc" else a.astype(np.float64)


@implements(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """``np.mean``; with ``where=``, the sum over the mask divided by its count."""
    _no_out("mean", out)
    a = _float(_tracer(a), dtype)
    if where is True:
        count = _count(a, axis)
        return _reduce("sum", a, axis, keepdims) * a.dtype.type(1.0 / count if count else
                                                                np.nan)
    s = _reduce("sum", _mask(a, where, 0, "add"), axis, keepdims)
    return s / _count(a, axis, where, keepdims).astype(a.dtype)


@implements(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=_NoValue, correction=_NoValue):
    """``np.var`` (two passes: the mean, then squared deviations), with
    ``ddof`` / ``correction``, ``where=`` and a given ``mean=``."""
    _no_out("var", out)
    if correction is not _NoValue:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    a = _float(_tracer(a), dtype)
    m = globals()["mean"](a, axis=axis, keepdims=True, where=where) if mean is _NoValue \
        else mean
    d = a - m
    s = _reduce("sum", _mask(d * d, where, 0, "add"), axis, keepdims)
    if where is True:
        n = _count(a, axis) - ddof
        return s * a.dtype.type(1.0 / n if n > 0 else np.inf)
    n = _count(a, axis, where, keepdims) - ddof
    return s / np.maximum(n, 0).astype(a.dtype)


@implements(np.std)
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=_NoValue, correction=_NoValue):
    """``np.std``: the square root of :func:`var` (its derivative is infinite
    where the deviation is 0, as numpy's formula implies)."""
    return np.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                       correction=correction))


@implements(np.ptp)
def ptp(a, axis=None, out=None, keepdims=False):
    _no_out("ptp", out)
    a = _tracer(a)
    return _reduce("max", a, axis, keepdims) - _reduce("min", a, axis, keepdims)


# ----------------------------------------------------------------------------
# index results
# ----------------------------------------------------------------------------


def _arg_extremum(opname):
    name = "argmax" if opname == "max" else "argmin"

    def impl(a, axis=None, out=None, *, keepdims=False):
        """The first position of the extremum (of the first NaN, if any), as numpy:
        the smallest index where the element equals the reduction or is NaN."""
        _no_out(name, out)
        a = _tracer(a)
        shape = a.shape
        if axis is None:
            a, ax = ravel(a), 0
        else:
            ax = _norm_axis(axis, a.ndim)[0]
        if a.size == 0:
            raise ValueError(f"attempt to get {name} of an empty sequence")
        hit = a == _reduce(opname, a, ax, True)
        if a.dtype.kind == "f":
            hit = hit | np.isnan(a)
        n = a.shape[ax]
        pos = np.arange(n, dtype=np.intp).reshape((-1,) + (1,) * (a.ndim - ax - 1))
        r = _reduce("min", where(hit, pos, np.intp(n)), ax, keepdims)
        if keepdims and axis is None:
            r = reshape(r, (1,) * len(shape))
        r._trace.bounded[r.node.id] = n  # (a position hit holds: in [0, n), NaN or not)
        return r

    return impl


implements(np.argmax)(_arg_extremum("max"))
implements(np.argmin)(_arg_extremum("min"))


@implements(np.argpartition)
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """``np.argpartition`` as the stable argsort: it meets the contract (each
    ``kth`` element in its sorted place); numpy leaves the order inside the
    partitions undefined."""
    HANDLED[np.partition](a, kth, axis, kind, order)  # numpy's checks of kth (numpy_selection)
    return HANDLED[np.argsort](a, axis, order=order)


@implements(np.searchsorted)
def searchsorted(a, v, side="left", sorter=None):
    """``np.searchsorted`` of a sorted 1-d ``a`` (NaNs last, as numpy sorts
    them): the count of elements before each ``v``."""
    if sorter is not None:
        raise NotImplementedError("hybridad: np.searchsorted with sorter= is not supported "
                                  "while tracing; sort a first")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    a = _tracer(a)
    if a.ndim != 1:
        raise ValueError("object too deep for desired array" if a.ndim else
                         "object of too small depth for desired array")
    if a.shape[0] > SEARCH_LINEAR_MAX:
        return _binary_search(a, _tracer(v), side)
    return _reduce("sum", _before(a, np.expand_dims(_tracer(v), -1), side).astype(np.intp),
                   -1, False)


#: the longest sorted array that ``np.searchsorted`` compares every value with
#: (one fused pass: m comparisons an element); longer ones are searched in
#: halves (log2 m gathers and comparisons an element: ``np.interp`` on 101
#: samples of a grid, n = 10^4, compared 10^6 pairs)
SEARCH_LINEAR_MAX = 32


def _before(a, v, side):
    """Whether each ``a`` sorts before ``v`` (``side="left"``: ``a < v``) or not
    after it (``"right"``: ``a <= v``), NaNs last as numpy sorts them."""
    floats = a.dtype.kind == "f" or v.dtype.kind == "f"
    if side == "left":
        hit = a < v
        return hit | (np.isnan(v) & ~np.isnan(a)) if floats else hit
    hit = a <= v
    return hit | np.isnan(v) if floats else hit


def _binary_search(a, v, side):
    """``np.searchsorted(a, v, side)`` of a sorted 1-d ``a`` of m elements as a
    branchless binary search: from the largest power of two up to m down to
    1, take ``step`` more elements where the last of them sorts before ``v``
    (:func:`_before`, monotone along a sorted ``a``) -- log2 m gathers of
    ``a`` at positions the plan computes, no decision."""
    from ..core.trace import bind
    from ..ops.batch_helpers import contiguous

    m = a.shape[0]
    flat = contiguous(a)
    pos = np.zeros(v.shape, np.intp)
    step = 1 << (m.bit_length() - 1)
    while step:
        cand = pos + step
        at = _tracer(np.minimum(cand, m) - 1)
        ok = _before(bind("gather", flat, at), v, side)
        pos = where((cand <= m) & ok, cand, pos)
        step >>= 1
    return _tracer(pos)


def _value_dependent_shape(name):
    def impl(*args, **kwargs):
        raise TracingError(
            f"np.{name} of a traced array at {user_location()}: its result's shape depends on "
            "the values, which are not known while tracing (hybridad records one static "
            "graph). Use a mask with np.where instead.")

    impl.__name__ = name
    impl.refused = True  # (not listed in docs/coverage.md)
    return impl


for _f in (np.nonzero, np.argwhere, np.flatnonzero):
    implements(_f)(_value_dependent_shape(_f.__name__))
