"""More of numpy's functions on traced arrays, composed of the primitives while
tracing (no rules of their own): ``np.fix``, ``np.astype``, ``np.choose``,
``np.insert``, ``np.resize``, ``np.put`` and ``np.putmask`` (element writes into a traced array),
``np.logspace`` and ``np.geomspace`` of traced ends, ``np.linalg.tensorsolve``
and ``np.linalg.tensorinv``, ``np.apply_over_axes``, and ``np.histogram2d`` /
``np.histogramdd`` of constant samples with traced ``weights``.  numpy's
values, to rounding where numpy computes them otherwise (each docstring says).
"""

from __future__ import annotations

import numbers

import numpy as np

from .numpy_api import _tracer, implements
from .numpy_misc import _value
from .numpy_stats import binned_sum
from ..core.tracer import Tracer

__all__ = []


@implements(np.fix)
def fix(x, out=None):
    """``np.fix``: rounding toward zero, :func:`np.trunc` (numpy's values;
    its derivative is zero)."""
    if out is not None:
        return np.trunc(x, out=out)
    return np.trunc(x)


@implements(np.astype)
def astype(x, dtype, /, *, copy=True, device=None):
    """``np.astype`` (numpy 2's function): ``x.astype(dtype)``."""
    if device not in (None, "cpu"):
        raise ValueError(f"Device not understood. Only 'cpu' is allowed, but received: {device}")
    return _tracer(x).astype(dtype, copy=copy)


@implements(np.choose)
def choose(a, choices, out=None, mode="raise"):
    """``choices[a[i]][i]`` for constant indices ``a`` (``mode`` 'raise', 'wrap', 'clip')."""
    if out is not None:
        raise NotImplementedError("hybridad: numpy.choose(out=) of traced values is not supported")
    a = np.asarray(_value("numpy.choose", "a", a))
    stacked = np.stack(np.broadcast_arrays(*[_tracer(c) for c in choices]))
    n = stacked.shape[0]
    if mode == "wrap":
        a = a % n
    elif mode == "clip":
        a = np.clip(a, 0, n - 1)
    elif np.any((a < 0) | (a >= n)):
        raise ValueError("invalid entry in choice array")
    shape = np.broadcast_shapes(a.shape, stacked.shape[1:])
    lead = (1,) * (len(shape) - (stacked.ndim - 1))
    stacked = np.broadcast_to(np.reshape(stacked, (n,) + lead + stacked.shape[1:]), (n,) + shape)
    a = np.broadcast_to(a, shape)
    return stacked[(a,) + tuple(np.indices(shape, sparse=True))]


@implements(np.insert)
def insert(arr, obj, values, axis=None):
    """``values`` inserted before the constant positions ``obj`` along ``axis``
    (the flattened array for None): numpy's placement, one gather from the
    concatenation of ``arr`` and the values."""
    obj = _value("numpy.insert", "obj", obj)
    arr = _tracer(arr)
    if axis is None:
        arr, axis = np.ravel(arr), 0
    axis = axis % arr.ndim
    n = arr.shape[axis]
    index = np.asarray(obj)
    scalar = index.ndim == 0
    if index.dtype == bool:
        raise NotImplementedError("hybridad: numpy.insert with a boolean obj is not supported")
    index = np.where(index < 0, index + n, index).ravel().astype(np.intp)
    if np.any((index < 0) | (index > n)):
        raise IndexError(f"index {obj} is out of bounds for axis {axis} with size {n}")
    values = np.asarray(values) if isinstance(values, (list, tuple)) else _tracer(values)
    vshape = list(arr.shape)
    if scalar:  # numpy: values as an array of arr.ndim dimensions, its first moved to axis
        values = np.reshape(values, (1,) * (arr.ndim - values.ndim) + values.shape)
        values = np.moveaxis(values, 0, axis)
        vshape[axis] = values.shape[axis]
        index = np.repeat(index, vshape[axis])
    else:  # numpy: values broadcast to the selection new[..., index, ...]
        vshape[axis] = index.size
    values = np.broadcast_to(values, tuple(vshape))
    values = values.astype(arr.dtype)
    k = index.size
    order = np.argsort(index, kind="stable")
    new_pos = np.empty(k, dtype=np.intp)
    new_pos[order] = index[order] + np.arange(k)  # numpy's: each value's final position
    old_mask = np.ones(n + k, dtype=bool)
    old_mask[new_pos] = False
    source = np.empty(n + k, dtype=np.intp)
    source[old_mask] = np.arange(n)
    source[new_pos] = n + np.arange(k)
    both = np.concatenate([arr, values], axis=axis)
    return np.take(both, source, axis=axis)


@implements(np.resize)
def resize(a, new_shape):
    """The flattened ``a`` repeated to fill ``new_shape``."""
    a = _tracer(a)
    new_shape = (new_shape,) if isinstance(new_shape, numbers.Integral) else tuple(new_shape)
    size = int(np.prod(new_shape, dtype=np.int64))
    flat = np.ravel(a)
    if size == 0 or flat.size == 0:
        return np.zeros(new_shape, a.dtype)
    return np.reshape(np.take(flat, np.arange(size) % flat.size), new_shape)


@implements(np.put)
def put(a, ind, v, mode="raise"):
    """``a.flat[ind] = v`` (``v`` repeated as numpy repeats it) into a traced ``a``."""
    if not isinstance(a, Tracer):
        raise NotImplementedError("hybridad: numpy.put of a traced value into a numpy array "
                                  "is not supported: make the array a traced one "
                                  "(np.zeros_like(x), x.copy())")
    ind = np.asarray(_value("numpy.put", "ind", ind)).ravel()
    if mode == "wrap":
        ind = ind % a.size
    elif mode == "clip":
        ind = np.clip(ind, 0, a.size - 1)
    elif np.any((ind < -a.size) | (ind >= a.size)):
        raise IndexError(f"index out of range for array of size {a.size}")
    ind = np.where(ind < 0, ind + a.size, ind)
    v = np.ravel(_tracer(v))
    vals = np.take(v, np.arange(ind.size) % max(v.size, 1))
    a[np.unravel_index(ind, a.shape)] = vals


@implements(np.putmask)
def putmask(a, mask, values):
    """``a[mask] = values`` (``values`` repeated over the positions, as numpy's) into a
    traced ``a``; ``mask`` constant."""
    if not isinstance(a, Tracer):
        raise NotImplementedError("hybridad: numpy.putmask of a traced value into a numpy "
                                  "array is not supported: make the array a traced one")
    mask = np.broadcast_to(np.asarray(_value("numpy.putmask", "mask", mask), dtype=bool), a.shape)
    positions = np.flatnonzero(mask)
    v = np.ravel(_tracer(values))
    a[np.unravel_index(positions, a.shape)] = np.take(v, positions % max(v.size, 1))


@implements(np.logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop)`` of traced ends (or base)."""
    y = np.linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    base = _tracer(base) if isinstance(base, Tracer) else np.asarray(base)
    if np.ndim(base):
        base = np.expand_dims(base, axis)
    out = np.power(base, y)
    return out if dtype is None else out.astype(dtype)


@implements(np.geomspace)
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """The geometric sequence between traced positive ends (numpy's: the log-spaced
    values, its ends set to ``start`` and ``stop`` exactly)."""
    start, stop = _tracer(start).astype(np.float64), _tracer(stop).astype(np.float64)
    if num <= 0:
        return np.zeros((0,) + np.broadcast_shapes(start.shape, stop.shape))
    out = np.exp(np.linspace(np.log(start), np.log(stop), num=num, endpoint=endpoint, axis=0))
    parts = [np.reshape(start, (1,) + start.shape) * np.ones_like(out[:1]), out[1:]]
    if endpoint and num > 1:
        parts = [parts[0], out[1:-1], np.reshape(stop, (1,) + stop.shape) * np.ones_like(out[:1])]
    out = np.concatenate(parts, axis=0)
    if axis != 0:
        out = np.moveaxis(out, 0, axis)
    return out if dtype is None else out.astype(dtype)


@implements(np.linalg.tensorsolve)
def tensorsolve(a, b, axes=None):
    """numpy's reshaping of the tensor equation into ``solve`` of a square matrix."""
    a, b = _tracer(a), _tracer(b)
    an = a.ndim
    if axes is not None:
        allaxes = list(range(an))
        for k in axes:
            allaxes.remove(k)
            allaxes.insert(an, k)
        a = np.transpose(a, allaxes)
    oldshape = a.shape[-(an - b.ndim):]
    prod = int(np.prod(oldshape, dtype=np.int64))
    if a.size != prod ** 2:
        raise np.linalg.LinAlgError("Input arrays must satisfy the requirement "
                                    "prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim])")
    x = np.linalg.solve(np.reshape(a, (prod, prod)), np.ravel(b))
    return np.reshape(x, oldshape)


@implements(np.linalg.tensorinv)
def tensorinv(a, ind=2):
    """numpy's reshaping into ``inv`` of a square matrix."""
    a = _tracer(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    oldshape = a.shape
    prod = int(np.prod(oldshape[:ind], dtype=np.int64))
    invshape = oldshape[ind:] + oldshape[:ind]
    if int(np.prod(oldshape[ind:], dtype=np.int64)) != prod:
        raise ValueError("Invalid ind argument.")
    return np.reshape(np.linalg.inv(np.reshape(a, (prod, -1))), invshape)


@implements(np.apply_over_axes)
def apply_over_axes(func, a, axes):
    """``func(a, axis)`` over each axis in turn, the reduced axis kept (numpy's)."""
    val = _tracer(a)
    n = val.ndim
    for axis in (axes,) if np.ndim(axes) == 0 else axes:
        axis = axis + n if axis < 0 else axis
        res = func(val, axis)
        if np.ndim(res) == np.ndim(val):
            val = res
        else:
            res = np.expand_dims(res, axis)
            if np.ndim(res) != np.ndim(val):
                raise ValueError("function is not returning an array of the correct shape")
            val = res
    return val


@implements(np.histogramdd)
def histogramdd(sample, bins=10, range=None, density=None, weights=None):  # noqa: A002
    """numpy's histogram of constant samples with traced ``weights``: numpy's bin
    edges (of the samples), the weights summed per bin
    (:func:`.numpy_stats.binned_sum`, ``np.histogram``'s rule)."""
    if isinstance(sample, Tracer) or weights is None:
        raise NotImplementedError("hybridad: numpy.histogramdd of traced samples is not "
                                  "supported (constant samples with traced weights are)")
    sample = np.asarray(sample)
    pts = sample if sample.ndim == 2 else np.atleast_2d(sample).T
    _, edges = np.histogramdd(pts, bins=bins, range=range)
    return binned_sum(pts, edges, _tracer(weights), density), edges


@implements(np.histogram2d)
def histogram2d(x, y, bins=10, range=None, density=None, weights=None):  # noqa: A002
    """``histogramdd`` of the two constant coordinates with traced weights."""
    hist, edges = histogramdd(np.stack([np.asarray(x), np.asarray(y)], axis=1), bins, range,
                              density, weights)
    return hist, edges[0], edges[1]
