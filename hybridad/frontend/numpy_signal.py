"""numpy's scatter, signal and interpolation functions built from the primitives
while tracing: the ``at`` method of add, subtract, multiply, maximum and
minimum, ``a[idx] op= v`` with constant fancy indices, np.bincount with
weights, np.convolve / np.correlate, np.trapezoid (and scipy.integrate's
``trapezoid`` and ``cumulative_trapezoid``) and np.interp.

No rules of their own: every one is a composition of ``gather`` (reads at
flat positions), ``scatter_flat`` (zeros with values added at flat
positions, repeats adding up), ``concatenate``, reductions, ``cumsum`` and
elementwise ops, whose rules give the derivatives.  Positions are computed by
numpy at trace time from the constant indices (so the semantics and the
errors are numpy's); np.interp's are computed while the plan runs, by
``np.searchsorted`` on the constant sample points.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConversionError, TracingError, user_location, user_namespaces
from ..ops.batch_helpers import contiguous
from ..core.decisions import concrete_index
from .numpy_api import (
    UFUNC_METHODS,
    _norm_axis,
    _reduce,
    _tracer,
    broadcast_to,
    concatenate,
    gather_positions,
    getitem,
    implements,
    ravel,
    reshape,
    where,
)
from .numpy_math import diff
from .objects import assign
from .numpy_masked import masked_written, selection_written, traced_put
from .numpy_selected import positions_mask
from .numpy_scatter import traced_bins, traced_positions
from .numpy_selection import set_items
from .replay import written_back
from .scipy_special import intercepts
from ..core.trace import bind
from ..core.tracer import SURFACE, Tracer

__all__ = ["bincount", "convolve", "correlate", "cumulative_trapezoid", "interp",
           "trapezoid", "ufunc_at", "write_back"]


def _constant(name, value, what="indices"):
    """``value`` (an index, possibly a tuple of them) holding no tracer; a
    constant's tracer (``np.array([2, 0, 0])`` made in ``f``, traced where
    ``f``'s made arrays are) is its value."""
    parts = tuple(map(_known, value if isinstance(value, tuple) else (value,)))
    if any(isinstance(p, Tracer) for p in parts):
        raise TracingError(f"{name} with traced {what} at {user_location()}: {what} must be "
                           "known at trace time (constant arrays, slices or ints)")
    return parts if isinstance(value, tuple) else parts[0]


def _known(part):
    """An index part, a constant's tracer replaced by the constant's value."""
    if isinstance(part, Tracer) and part.node.is_const and part.dtype.kind in "biu":
        return np.array(part.node.attrs["value"])
    return part


def _const_tracer(like, value):
    """A literal constant node of the trace ``like`` belongs to."""
    return Tracer(like._trace.const(np.ascontiguousarray(value), True), like._trace)


def _scatter(g, flat, shape):
    """Zeros of ``shape`` with ``g`` added at the flat positions ``flat`` --
    constant, or traced (:mod:`.numpy_scatter`: read by the plan at every
    call) -- (``g.shape == flat.shape``; repeats add up)."""
    at = flat if isinstance(flat, Tracer) else _const_tracer(g, flat.astype(np.intp))
    return bind("scatter_flat", g, at, shape=tuple(shape))


def _positions(shape):
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.intp).reshape(shape)


# ----------------------------------------------------------------------------
# ufunc.at: unbuffered in-place updates, repeated indices applied in turn
# ----------------------------------------------------------------------------

#: ufunc -> (reduction, identity as a function of the dtype) for the grouped updates
_GROUPED = {np.multiply: ("prod", lambda dt: 1),
            np.maximum: ("max", lambda dt: -np.inf if dt.kind == "f" else np.iinfo(dt).min),
            np.minimum: ("min", lambda dt: np.inf if dt.kind == "f" else np.iinfo(dt).max)}


def ufunc_at(ufunc, a, indices, b=None):
    """``ufunc.at(a, indices, b)`` for add, subtract, multiply, maximum and
    minimum on a traced ``a``: the tracer ``a`` takes the updated value (every
    name bound to it sees it), as numpy updates the array in place.

    Parameters
    ----------
    ufunc : numpy.ufunc
        ``np.add``, ``np.subtract``, ``np.multiply``, ``np.maximum`` or
        ``np.minimum``.
    a : Tracer
        The array updated.  A numpy array with a traced ``b`` is refused
        (TracingError): numpy would write traced values into it.
    indices : array_like, slice or tuple
        Constant indices, as for ``a[indices]``; repeated indices apply the
        update once per occurrence, in numpy's order.
    b : array_like or Tracer
        Broadcast to ``a[indices].shape`` and cast to ``a.dtype`` (unsafe
        casting, as numpy's ``at``).

    Returns
    -------
    None

    Notes
    -----
    ``add``/``subtract``: ``a +/- scatter(b)`` (the derivative in ``b`` is a
    gather of the cotangent).  ``multiply``, ``maximum``, ``minimum``: for
    each updated position, the reduction (``prod``, ``max``, ``min``) of
    ``a``'s element followed by its updates in numpy's order (products exact
    with zeros; ties of maximum/minimum split the derivative equally, as
    ``np.max`` and ``np.maximum`` do).  The rows (one per updated position)
    are one matrix padded with the reduction's identity -- or, where the
    numbers of updates are so uneven that the padding would dominate, one
    matrix per number of updates rounded up to a power of two (at most half
    of each row is padding)."""
    name = f"numpy.{ufunc.__name__}.at"
    if b is None:
        raise TypeError(f"{name} needs a second operand b")
    if not isinstance(a, Tracer):  # (f is traced again with the arrays it makes
        # traced, numpy_made: `y = np.zeros(n); np.add.at(y, idx, b)` then is one)
        raise ConversionError(
            f"{name}(a, indices, b) at {user_location()} with `a` a numpy array and `b` "
            "traced: numpy would write traced values into `a`, which tracing cannot follow. "
            "Make `a` inside f (`np.zeros(n)`), or build the sums as a new array, "
            "`np.bincount(indices, weights=b, minlength=n)`.", user_namespaces())
    flat = traced_positions(ufunc, a, indices)  # (integer indices the plan reads each call)
    if flat is None:
        indices = _constant(name, concrete_index(indices))  # (computed from values: guarded)
        flat = np.asarray(_positions(a.shape)[indices])  # numpy's indexing, checks and errors
    b = broadcast_to(_tracer(b).astype(a.dtype), flat.shape)
    if flat.size == 0:
        new = a
    elif ufunc in (np.add, np.subtract):
        s = _scatter(b, flat, a.shape)
        new = a + s if ufunc is np.add else a - s
    else:
        new = _grouped(*_GROUPED[ufunc], a, flat, b)
    assign(a, new, name, casting="unsafe")


def _grouped(opname, identity, a, flat, b):
    """``a`` with the element at each flat position ``p`` replaced by
    ``reduce([a.flat[p], b_1, b_2, ...])``, ``b_k`` the elements of ``b`` at
    the occurrences of ``p`` in ``flat``, in order."""
    occ = flat.reshape(-1)
    order = np.argsort(occ, kind="stable")  # occurrences by target, in numpy's order
    targets, start, counts = np.unique(occ[order], return_index=True, return_counts=True)
    group = np.repeat(np.arange(targets.size), counts)
    rank = np.arange(occ.size) - start[group]
    width = np.full(counts.size, counts.max())  # one matrix, rows padded to the longest
    if counts.size * (counts.max() + 1) > 4 * (counts.size + occ.size) + 4096:
        width = 1 << np.ceil(np.log2(counts)).astype(np.int64)  # skewed: a power of two each
    pad = a.size + b.size  # the identity's position in `source`
    source = concatenate([ravel(a), ravel(b), np.full(1, identity(a.dtype), a.dtype)])
    parts, final = [ravel(a)], _positions((a.size,)).copy()
    offset = a.size
    for w in np.unique(width):
        rows = np.flatnonzero(width == w)
        row_of = np.full(targets.size, -1)
        row_of[rows] = np.arange(rows.size)
        pos = np.full((rows.size, w + 1), pad, dtype=np.intp)
        pos[:, 0] = targets[rows]
        mine = row_of[group] >= 0
        pos[row_of[group[mine]], 1 + rank[mine]] = a.size + order[mine]
        m = gather_positions(source, lambda p, pos=pos: p[pos])
        parts.append(_reduce(opname, m, 1, False))
        final[targets[rows]] = offset + np.arange(rows.size)
        offset += rows.size
    return reshape(gather_positions(concatenate(parts), lambda p: p[final]), a.shape)


for _uf in (np.add, np.subtract, np.multiply, np.maximum, np.minimum):
    UFUNC_METHODS["at", _uf] = ufunc_at


# ----------------------------------------------------------------------------
# a[idx] op= v with constant fancy indices: numpy's buffered write-back
# ----------------------------------------------------------------------------

def write_back(target, index, value):
    """``target[index] = value`` where ``value`` is the array ``target[index]``
    read with a fancy (advanced) index and updated in place since -- the
    statement ``target[index] op= v``.  Numpy's semantics: the update is
    buffered, so a position repeated in ``index`` is written once, by its
    last occurrence.  Returns False (not handled) for any other write.

    Parameters
    ----------
    target : Tracer
        The array written; refused like an in-place operator where numpy would
        write into memory the trace does not follow (an argument of ``f`` or a
        view of one); a write that reaches views of ``target`` reaches them.
    index : object
        The index of the statement, the very object ``target`` was read with.
    value : object
        What Python writes back: the tracer the read returned, updated.

    Returns
    -------
    bool
        Whether the write was this statement and was traced.
    """
    origin = getattr(value, "_origin", None) if isinstance(value, Tracer) else None
    if origin is None or origin[0]() is not target or origin[1] is not target.node or \
            origin[2] is not index:
        return False
    last = np.full(target.shape, -1, dtype=np.intp)
    last[index] = np.arange(value.size, dtype=np.intp).reshape(value.shape)  # numpy's winner
    written = last.reshape(-1) >= 0
    src = np.where(written, target.size + last.reshape(-1), np.arange(target.size))
    both = concatenate([ravel(target), ravel(value)])
    new = reshape(gather_positions(both, lambda p: p[src]), target.shape)
    assign(target, new, "`a[index] op= value` (an update through a fancy index)")
    return True


def _setitem(target, index, value):
    """``target[index] = value``: the write-back of ``target[index] op= v``
    through a fancy index (:func:`write_back`), else a plain element write
    (:func:`hybridad.frontend.numpy_selection.set_items`)."""
    if written_back(target, index, value):  # (`u[1:-1] += v`: the view wrote it)
        return True
    at = positions_mask(index)
    if at is not None:  # (`y[np.nonzero(m)] = v`: y[m] = v)
        index = at
    if selection_written(target, index, value):  # (`y[m] = g(x[m])`, `y[y < 0] *= 0.1`)
        return True
    if masked_written(target, index, value):  # (`y[y < 0] = 0`: np.where, no decision)
        return True
    if traced_put(target, index, value):  # (`y[np.argmax(y)] = 0`: np.where, guarded in range)
        return True
    index = concrete_index(index)  # (computed from values: this call's, guarded)
    return write_back(target, index, value) or set_items(target, index, value)


SURFACE.setitem = _setitem


# ----------------------------------------------------------------------------
# bincount
# ----------------------------------------------------------------------------

@implements(np.bincount)
def bincount(x, weights=None, minlength=0):
    """``np.bincount``: the weights summed per bin.

    Parameters
    ----------
    x : array_like or Tracer
        Non-negative integers, 1-D (numpy's checks): constants, or traced
        (an argument of ``f``, or computed from one: the number of bins is
        then a decision on their values, :mod:`.numpy_scatter`).
    weights : Tracer or array_like, optional
        Traced weights, ``x``'s shape; without them the counts are numpy's
        (a constant).
    minlength : int
        The least number of bins.

    Returns
    -------
    Tracer
        float64 (as numpy), ``max(max(x) + 1, minlength)`` bins.  The
        derivative in ``weights`` gathers the cotangent of each weight's bin.
    """
    if isinstance(x, Tracer):  # (bins the plan reads at each call)
        flat, n = traced_bins(x, minlength)
    else:
        x = np.asarray(x)
        n = np.bincount(x, minlength=minlength).shape[0]  # numpy's checks (and length)
        if weights is None:
            return np.bincount(x, minlength=minlength)
        flat = x.astype(np.intp)
    w = np.ones_like(flat, dtype=np.float64) if weights is None else _tracer(weights)
    if w.shape != x.shape:
        raise ValueError("The weights and list don't have the same length.")
    if isinstance(x, Tracer) and x.size == 0:  # (no traced bin to add at)
        return np.zeros(n, np.float64 if weights is not None else np.intp)
    sums = _scatter(w.astype(np.float64), flat, (n,))
    return sums if weights is not None else sums.astype(np.intp)  # (counts: no derivative)


# ----------------------------------------------------------------------------
# convolve, correlate
# ----------------------------------------------------------------------------

def _vector(name, a):
    a = _tracer(a) if isinstance(a, Tracer) else np.asarray(a)
    if a.ndim == 0:
        a = a.reshape(1) if not isinstance(a, Tracer) else reshape(a, (1,))
    if a.ndim != 1:
        raise ValueError(f"{name}: object too deep for desired array")
    return a


def _convolved(a, v, start, length):
    """Outputs ``start`` to ``start + length`` of the full convolution of 1-D
    ``a`` and ``v`` (``len(v) <= len(a)``, ``start < len(v)``): the correlation
    of ``a``, zero-padded where the windows pass its ends, with ``v``
    reversed -- scipy.signal's :func:`~.scipy_signal.slide` (a short kernel: a
    sum of shifted slices, one fused pass over the signal); a kernel of more
    than ``SHIFTED_TAPS`` taps by real FFTs (:func:`~.scipy_signal.by_fft`)."""
    from .scipy_signal import SHIFTED_TAPS, by_fft, slide

    n, m = a.shape[0], v.shape[0]
    if m > SHIFTED_TAPS:
        return by_fft(a, v, "full", None)[start:start + length]
    flipped = getitem(v, slice(None, None, -1)) if isinstance(v, Tracer) else v[::-1]
    return slide(a, flipped, [(m - 1 - start, start + length - n)], axes=(0,))


def _mode(mode):
    """numpy's reading of ``mode``: 'valid', 'same', 'full', or 0, 1, 2."""
    if isinstance(mode, str):
        if mode not in ("valid", "same", "full"):
            raise ValueError("Use one of 'valid', 'same', or 'full' for convolve/correlate "
                             "mode")
        return mode
    if mode not in (0, 1, 2):
        raise ValueError("integer convolve/correlate mode must be 0, 1, or 2")
    return ("valid", "same", "full")[mode]


def _operands(name, a, v):
    a, v = _vector(name, a), _vector(name, v)
    if a.shape[0] == 0:
        raise ValueError("a cannot be empty")
    if v.shape[0] == 0:
        raise ValueError("v cannot be empty")
    return a, v, a.shape[0], v.shape[0]


@implements(np.convolve)
def convolve(a, v, mode="full"):
    """``np.convolve``: the discrete linear convolution of two 1-D arrays.

    Parameters
    ----------
    a, v : array_like or Tracer
        1-D (a 0-d operand is one element); either or both traced.  The
        operands swap when ``v`` is the longer, as numpy's.
    mode : {'full', 'same', 'valid'}
        numpy's windows: every overlap (``n + m - 1``), centred as numpy to
        the longer length, or the full overlaps only.

    Returns
    -------
    Tracer
        Direct summation (:func:`_convolved`): a kernel of up to
        ``scipy_signal.SHIFTED_TAPS`` taps as shifted slices of the signal
        in one fused pass (a 9-tap 'valid' filter of 10^5 samples: its
        gradient 16 ms -> 0.37 ms, the same run), longer ones by real FFTs;
        numpy's values to rounding.
    """
    a, v, n, m = _operands("convolve", a, v)
    if m > n:
        a, v, n, m = v, a, m, n
    mode = _mode(mode)
    start = {"same": (m - 1) // 2, "valid": m - 1, "full": 0}[mode]
    return _convolved(a, v, start, {"same": n, "valid": n - m + 1, "full": n + m - 1}[mode])


@implements(np.correlate)
def correlate(a, v, mode="valid"):
    """``np.correlate``: the cross-correlation ``c[k] = sum_n a[n + k] * v[n]``
    of two 1-D real arrays.

    Parameters
    ----------
    a, v : array_like or Tracer
        1-D real arrays, either or both traced (the conjugation of ``v`` is
        the identity on them).
    mode : {'valid', 'same', 'full'}
        numpy's windows, including numpy's shift of ``'same'`` when ``v`` is
        the longer operand.

    Returns
    -------
    Tracer
        The correlation, computed as :func:`convolve` with ``v`` reversed.
    """
    a, v, n, m = _operands("correlate", a, v)
    flipped = getitem(v, slice(None, None, -1)) if isinstance(v, Tracer) else v[::-1]
    short, long = min(n, m), max(n, m)
    mode = _mode(mode)
    same = (short - 1) // 2 if m <= n else n // 2
    start = {"same": same, "valid": short - 1, "full": 0}[mode]
    length = {"same": long, "valid": long - short + 1, "full": n + m - 1}[mode]
    return _convolved(a, flipped, start, length) if m <= n else \
        _convolved(flipped, a, start, length)


# ----------------------------------------------------------------------------
# trapezoid, cumulative_trapezoid
# ----------------------------------------------------------------------------

def _trapezoids(y, x, dx, axis, broadcast_x):
    """``(d, y[1:] + y[:-1], axis)`` along ``axis``: the spacings (``dx``, or
    the differences of ``x`` shaped to broadcast against ``y``) and the sums
    of neighbouring samples."""
    y = _tracer(y)
    axis = _norm_axis(axis, y.ndim)[0]
    if x is None:
        d = dx
    else:
        x = _tracer(x)
        if x.ndim == 1:
            shape = [1] * y.ndim
            shape[axis] = -1
            d = reshape(diff(x), tuple(shape))
        else:
            if broadcast_x:
                x = broadcast_to(x, y.shape)
            d = diff(x, axis=axis)
    hi, lo = [slice(None)] * y.ndim, [slice(None)] * y.ndim
    hi[axis], lo[axis] = slice(1, None), slice(None, -1)
    return d, getitem(y, tuple(hi)) + getitem(y, tuple(lo)), axis


@implements(np.trapezoid)
def trapezoid(y, x=None, dx=1.0, axis=-1):
    """``np.trapezoid``: the composite trapezoidal rule along ``axis``.

    Parameters
    ----------
    y : Tracer or array_like
        The samples.
    x : Tracer or array_like, optional
        The sample points: 1-D along ``axis``, or ``y``'s shape.
    dx : float or Tracer
        The spacing when ``x`` is None.
    axis : int

    Returns
    -------
    Tracer
        ``sum(d * (y[1:] + y[:-1]) / 2.0)`` along ``axis`` (numpy's formula);
        ``y``, ``x`` and ``dx`` may each be traced.
    """
    d, pairs, axis = _trapezoids(y, x, dx, axis, broadcast_x=False)
    return _reduce("sum", d * pairs / 2.0, axis, False)


if hasattr(np, "trapz"):  # numpy < 2.4
    implements(np.trapz)(trapezoid)


@intercepts("scipy.integrate", "trapezoid")
def scipy_trapezoid(y, x=None, dx=1.0, axis=-1):
    """``scipy.integrate.trapezoid``: as :func:`trapezoid`.

    Parameters
    ----------
    y, x, dx, axis
        As :func:`trapezoid`; an n-D ``x`` is broadcast against ``y``
        (scipy's rule).

    Returns
    -------
    Tracer
    """
    d, pairs, axis = _trapezoids(y, x, dx, axis, broadcast_x=True)
    return _reduce("sum", d * pairs / 2.0, axis, False)


@intercepts("scipy.integrate", "cumulative_trapezoid")
def cumulative_trapezoid(y, x=None, dx=1.0, axis=-1, initial=None):
    """``scipy.integrate.cumulative_trapezoid``: the running integral.

    Parameters
    ----------
    y, x, dx, axis
        As :func:`trapezoid` (an n-D ``x`` has ``y``'s shape).
    initial : None or 0
        A leading 0 along ``axis`` (scipy accepts only None or 0).

    Returns
    -------
    Tracer
        The running sums (``np.cumsum``) of the trapezoids along ``axis``;
        one element shorter than ``y`` there unless ``initial=0``.
    """
    if _tracer(y).shape[axis] == 0:
        raise ValueError("At least one point is required along `axis`.")
    if x is not None and np.ndim(x) not in (1, np.ndim(y)):
        raise ValueError("If given, shape of x must be 1-D or the same as y.")
    d, pairs, axis = _trapezoids(y, x, dx, axis, broadcast_x=False)
    if x is not None and np.shape(d)[axis] != pairs.shape[axis]:
        raise ValueError("If given, length of x along axis must be the same as y.")
    res = np.cumsum(d * pairs / 2.0, axis=axis)
    if initial is None:
        return res
    if isinstance(initial, Tracer) or initial != 0:
        raise ValueError("`initial` must be `None` or `0`.")
    if not np.isscalar(initial):
        raise ValueError("`initial` parameter should be a scalar.")
    shape = list(res.shape)
    shape[axis] = 1
    return concatenate([np.full(shape, initial, res.dtype), res], axis=axis)


# ----------------------------------------------------------------------------
# interp
# ----------------------------------------------------------------------------

def _gather_at(x, pos):
    """``x[pos]`` of a 1-D ``x`` at positions ``pos`` computed while the plan
    runs (a traced integer array, every position in range)."""
    x = contiguous(x) if isinstance(x, Tracer) else _const_tracer(pos, x)
    return bind("gather", x, pos)


@implements(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    """``np.interp``: piecewise linear interpolation.

    Parameters
    ----------
    x : Tracer or array_like
        Where to evaluate (any shape; computed in float64, as numpy).
    xp : Tracer or array_like
        Increasing sample points (constant ones are checked: decreasing
        ones raise ValueError; traced ones are not, as numpy checks none).
    fp : Tracer or array_like
        The values at ``xp``.
    left, right : float or Tracer, optional
        The values below ``xp[0]`` and above ``xp[-1]`` (default
        ``fp[0]``, ``fp[-1]``).
    period : float, optional
        numpy's periodic interpolation (``left`` and ``right`` ignored).

    Returns
    -------
    Tracer
        numpy's value (``slope * (x - xp[j]) + fp[j]``, the same
        operations).  Its derivative in ``x`` is the slope of the segment
        ``x`` is on -- at a sample point the segment to its right, at
        ``xp[-1]`` the last one -- and 0 outside ``[xp[0], xp[-1]]``.  The
        segment is found by ``np.searchsorted`` on ``xp`` while the plan runs.
    """
    traced = isinstance(xp, Tracer)
    xp = xp.astype(np.float64) if traced else np.asarray(xp, dtype=np.float64)
    fp = _tracer(fp).astype(np.float64)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError("object too deep for desired array")
    if xp.shape != fp.shape:
        raise ValueError("fp and xp are not of the same length.")
    if period is not None:  # numpy's reduction to one period, its ends wrapped around
        if period == 0:
            raise ValueError("period must be a non-zero value")
        period = abs(float(period))
        order = np.argsort(xp % period)
        xp, fp = (xp % period)[order], fp[order]
        xp = np.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = concatenate([fp[-1:], fp, fp[:1]])
        return interp(_tracer(x).astype(np.float64) % period, xp, fp)
    if xp.size == 0:
        raise ValueError("array of sample points is empty")
    if not traced and np.any(np.diff(xp) < 0):
        raise ValueError("hybridad: numpy.interp needs increasing sample points xp (numpy "
                         "does not check, and its result is meaningless otherwise)")
    x = _tracer(x).astype(np.float64)
    n = xp.size
    lo = getitem(fp, 0) if left is None else left
    hi = getitem(fp, n - 1) if right is None else right
    if n == 1:
        inner = where(np.isnan(x), x, getitem(fp, 0))
    else:
        j = np.searchsorted(xp, x, side="right") - 1  # xp[j] <= x < xp[j + 1]
        seg = np.clip(j, 0, n - 2)  # the segment's slope
        base = np.clip(j, 0, n - 1)  # and the end it starts from (xp[-1] at xp[-1])
        step = np.diff(xp)
        slopes = where(step > 0, diff(fp) / np.where(step > 0, step, 1.0), 0.0)
        inner = _gather_at(slopes, seg) * (x - _gather_at(xp, base)) + _gather_at(fp, base)
    return where(x < xp[0], lo, where(x > xp[-1], hi, inner))

