"""scipy.signal's convolutions on tracers: ``convolve``, ``correlate``,
``fftconvolve``, ``convolve2d`` and ``correlate2d``, built from the primitives
while tracing (no rules of their own), and the sliding-window product
:func:`slide` that :mod:`.scipy_ndimage`'s filters share.

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.signal"``
(wrapped when hybridad or scipy.signal is imported, whichever is second).

Every one is a direct correlation of the (padded) first operand with the
(flipped) second.  A kernel of up to :data:`SHIFTED_TAPS` elements is a sum
of shifted slices of the operand padded once (np.pad's modes), each times
its tap: the plan fuses them into one loop over the output, and the taps'
partials, a number times one shared partial, are one array
(:mod:`hybridad.ops.region`) -- a Gaussian filter of a 512 x 512 image, 17
taps along each axis, 94 -> 8 ms for its gradient, 57 -> 8.5 MB held.  A
larger kernel: one ``gather`` reads each output's window of the padded
array -- positions numpy's ``np.pad`` and ``sliding_window_view`` give at
trace time, the boundary rule included, so a padding never materializes --
and a matrix-vector product with the kernel sums each window.  Either operand
may be traced (the kernel's derivative is the windows' transposed product).
Values are scipy's direct method's to rounding (the sums run in BLAS's
order).  ``method='fft'``, and 'auto' and ``fftconvolve`` with a kernel of more
than :data:`SHIFTED_TAPS` elements, convolve by real FFTs instead (the FFT ops
of :mod:`hybridad.ops.fft`): scipy's FFT results to rounding.  Real arrays
only.
"""

from __future__ import annotations

import numpy as np

from .numpy_api import _tracer, concatenate, gather_positions, getitem, ravel, reshape
from .scipy_special import intercepts
from ..core.tracer import Tracer

__all__ = ["by_fft", "operand", "slide"]

_M = "scipy.signal"
_swv = np.lib.stride_tricks.sliding_window_view
#: scipy.signal's boundary names -> np.pad's modes
_BOUNDARIES = {"fill": "constant", "pad": "constant", "wrap": "wrap", "circular": "wrap",
               "symm": "symmetric", "symmetric": "symmetric"}
_MODES = ("full", "valid", "same")


def operand(a, name="scipy.signal"):
    """A real operand: a tracer as it is, anything else a numpy array."""
    a = a if isinstance(a, Tracer) else np.asarray(a)
    if a.dtype.kind == "c":
        raise NotImplementedError(f"hybridad: {name} of complex arrays is not supported "
                                  "while tracing (real arrays only)")
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name}: unsupported dtype {a.dtype}")
    return a


def _windows(x, kshape, pads, mode, cval, axes):
    """The windows of ``kshape`` over ``axes`` of ``x`` padded by ``pads``
    (np.pad's ``mode``; ``cval`` outside for 'constant'): ``x``'s shape, each
    of ``axes`` its number of windows, then ``kshape``."""
    full = [(0, 0)] * x.ndim
    for ax, width in zip(axes, pads, strict=True):
        full[ax] = tuple(int(v) for v in width)
    if not isinstance(x, Tracer):
        kw = {"constant_values": cval} if mode == "constant" else {}
        return np.ascontiguousarray(_swv(np.pad(x, full, mode=mode, **kw), kshape, axes))
    if mode != "constant":
        return gather_positions(x, lambda pos: _swv(np.pad(pos, full, mode=mode), kshape, axes))
    # the elements, then the fill value: the padding reads that one position
    fill = reshape(_tracer(cval), (1,)).astype(x.dtype) if isinstance(cval, Tracer) else \
        np.full(1, cval, x.dtype)
    base = concatenate([ravel(x), fill])
    pos = np.pad(np.arange(x.size, dtype=np.intp).reshape(x.shape), full,
                 constant_values=x.size)
    return getitem(base, np.ascontiguousarray(_swv(pos, kshape, axes)))


def slide(x, k, pads, axes=None, mode="constant", cval=0.0):
    """``out[i] = sum_j k[j] x_padded[i + j]``: the correlation of ``x``, padded
    by ``pads`` (one ``(before, after)`` per axis of ``axes``, np.pad's
    ``mode``), with ``k`` over ``axes`` (default: every axis).

    ``k`` has ``x``'s number of dimensions; along the other axes its sizes
    broadcast against ``x``'s (``fftconvolve``'s ``axes``).  With ``k`` of
    size 1 there, a matrix-vector product of the windows with ``k``, else
    their elementwise product summed over the window's axes.
    """
    axes = tuple(range(x.ndim)) if axes is None else tuple(axes)
    if not isinstance(k, Tracer):  # (a constant in C order: a flipped view has no address
        k = np.ascontiguousarray(k)  # the compiled program can read it at)
    if not isinstance(x, Tracer) and x.dtype != np.result_type(x.dtype, k.dtype):
        x = x.astype(np.result_type(x.dtype, k.dtype))  # (a fill value not rounded to ints)
    kshape = tuple(k.shape[a] for a in axes)
    plain = all(k.shape[a] == 1 for a in range(x.ndim) if a not in axes)
    if plain and int(np.prod(kshape, dtype=np.int64)) <= SHIFTED_TAPS and \
            not isinstance(cval, Tracer):
        return _shifted(x, k, pads, axes, mode, cval)
    if isinstance(cval, Tracer) and not isinstance(x, Tracer):
        x = _tracer(x)
    win = _windows(x, kshape, pads, mode, cval, axes)
    nwin = len(axes)
    lead = win.shape[:-nwin]
    if all(k.shape[a] == 1 for a in range(x.ndim) if a not in axes):
        size = int(np.prod(kshape, dtype=np.int64))
        flat = np.reshape(win, (-1, size)) @ np.reshape(k, (size,))
        return np.reshape(flat, lead)
    # (the other axes broadcast: k's window axes moved last, size 1 in their place)
    others = [a for a in range(x.ndim) if a not in axes]
    kk = np.transpose(k, others + list(axes))
    shape = [1] * x.ndim
    for a in others:
        shape[a] = k.shape[a]
    kk = np.reshape(kk, tuple(shape) + kshape)
    return np.sum(win * kk, axis=tuple(range(-nwin, 0)))


#: the most taps a kernel is summed over as shifted slices of the padded
#: operand (one fused loop, nothing of the windows' size written); larger
#: kernels gather the windows and take one matrix-vector product
SHIFTED_TAPS = 32


def _shifted(x, k, pads, axes, mode, cval):
    """:func:`slide` for a small kernel: ``x`` padded once (np.pad's
    ``mode``), then ``sum_j k[j] x_padded[j:j + n]`` over the taps ``j`` in
    C order -- slices of one array and a product and a sum per tap, fused by
    the plan into one loop over the output."""
    full = [(0, 0)] * x.ndim
    for ax, width in zip(axes, pads, strict=True):
        full[ax] = tuple(int(v) for v in width)
    kw = {"constant_values": cval} if mode == "constant" else {}
    xp = np.pad(x, full, mode=mode, **kw)
    kshape = tuple(k.shape[a] for a in axes)
    n = [xp.shape[a] - kshape[i] + 1 for i, a in enumerate(axes)]
    kk = np.reshape(k, kshape)
    out = None
    for j in np.ndindex(*kshape):
        index = [slice(None)] * x.ndim
        for i, a in enumerate(axes):
            index[a] = slice(j[i], j[i] + n[i])
        term = (getitem(xp, tuple(index)) if isinstance(xp, Tracer) else xp[tuple(index)]) * \
            (getitem(kk, j) if isinstance(kk, Tracer) else kk[j])
        out = term if out is None else out + term
    return out


def _flip(a, axes=None):
    axes = range(a.ndim) if axes is None else axes
    index = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(a.ndim))
    return getitem(a, index) if isinstance(a, Tracer) else a[index]


def _mode(mode):
    if mode not in _MODES:
        raise ValueError("Acceptable mode flags are 'valid', 'same', or 'full'.")
    return mode


def _swap_needed(mode, s1, s2, axes):
    """scipy's ``_inputs_swap_needed``: 'valid' with the second operand the
    larger in every axis of ``axes`` (ValueError when neither is)."""
    if mode != "valid" or not s1:
        return False
    ok1 = all(s1[i] >= s2[i] for i in axes)
    ok2 = all(s2[i] >= s1[i] for i in axes)
    if not (ok1 or ok2):
        raise ValueError("For 'valid' mode, one must be at least as large as the other in "
                         "every dimension")
    return not ok1


def _convolve(in1, in2, mode, axes, boundary="constant", fillvalue=0.0, centre=None):
    """The convolution of ``in1`` with ``in2`` over ``axes`` in scipy's
    ``mode``, ``in1`` extended by np.pad's ``boundary``: the correlation with
    ``in2`` flipped.  'same' keeps ``in1``'s shape, centred as scipy's
    ``_centered`` (``centre``: the pads of an axis' kernel size instead)."""
    if _swap_needed(mode, in1.shape, in2.shape, axes):
        in1, in2 = in2, in1
    sizes = [in2.shape[a] for a in axes]
    if mode == "full":
        pads = [(k - 1, k - 1) for k in sizes]
    elif mode == "same":
        pads = [centre(k) if centre else (k - 1 - (k - 1) // 2, (k - 1) // 2) for k in sizes]
    else:
        pads = [(0, 0)] * len(axes)
    return slide(in1, _flip(in2, axes), pads, axes, boundary, fillvalue)


def _by_method(in1, in2, mode, method):
    """``scipy.signal.convolve`` by ``method``: 'fft', or 'auto' with a kernel
    of more than :data:`SHIFTED_TAPS` elements (the smaller operand), by real
    FFTs as ``fftconvolve``; else the direct sums."""
    _swap_needed(_mode(mode), in1.shape, in2.shape, range(in1.ndim))  # (scipy's check, first)
    if method == "fft" or (method == "auto" and min(in1.size, in2.size) > SHIFTED_TAPS):
        return by_fft(in1, in2, mode, None)
    return _convolve(in1, in2, _mode(mode), tuple(range(in1.ndim)))


def by_fft(in1, in2, mode, axes):
    """``scipy.signal.fftconvolve`` as scipy computes it: over ``axes`` (default
    all) but those where an operand has length 1 (a broadcast), the operands
    swapped for 'valid' as scipy's, the product of real FFTs of a fast length
    at least the full output's, inverted and cropped to ``mode`` (centred as
    scipy's ``_centered``, 'same' to ``in1``'s shape in every axis):
    ``O(n log n)`` where the direct sums cost the output's size times the
    kernel's.  A kernel of at most :data:`SHIFTED_TAPS` elements, no axis
    broadcast: the direct sums, fused (the same values to rounding)."""
    import scipy.fft

    nd = in1.ndim
    if axes is None:
        axes = range(nd)
    else:
        axes = (axes,) if np.ndim(axes) == 0 else tuple(axes)
        if not axes:
            raise ValueError("when provided, axes cannot be empty")
        axes = [int(a) + nd if int(a) < 0 else int(a) for a in axes]
        if any(not 0 <= a < nd for a in axes) or len(set(axes)) != len(axes):
            raise ValueError("axes exceeds dimensionality of input")
    s1, s2 = in1.shape, in2.shape
    axes = [a for a in axes if s1[a] != 1 and s2[a] != 1]
    if not all(s1[a] == s2[a] or 1 in (s1[a], s2[a]) for a in range(nd) if a not in axes):
        raise ValueError(f"incompatible shapes for in1 and in2: {s1} and {s2}")
    if len(axes) == nd and min(in1.size, in2.size) <= SHIFTED_TAPS:
        return _convolve(in1, in2, mode, tuple(axes))  # (a small kernel: the fused sums)
    if _swap_needed(_mode(mode), s1, s2, axes):
        in1, in2, s1, s2 = in2, in1, s2, s1
    if axes:
        fast = [scipy.fft.next_fast_len(s1[a] + s2[a] - 1, True) for a in axes]
        spectrum = np.fft.rfftn(in1, fast, axes=axes) * np.fft.rfftn(in2, fast, axes=axes)
        out = np.fft.irfftn(spectrum, fast, axes=axes)
    else:
        out = in1 * in2
    full = [s1[a] + s2[a] - 1 if a in axes else max(s1[a], s2[a]) for a in range(nd)]
    keep = {"full": full, "same": s1,
            "valid": [s1[a] - s2[a] + 1 if a in axes else full[a] for a in range(nd)]}[mode]
    index = tuple(slice((n - k) // 2, (n - k) // 2 + k) for n, k in zip(full, keep, strict=True))
    return out[index]


def _nd(name, in1, in2):
    """The operands of ``name`` (same number of dimensions); ``None`` when
    scipy returns early (0-d operands: their product; an empty one)."""
    in1, in2 = operand(in1, f"{_M}.{name}"), operand(in2, f"{_M}.{name}")
    if in1.ndim == in2.ndim == 0:
        return None, in1 * in2
    if in1.ndim != in2.ndim:
        raise ValueError("in1 and in2 should have the same dimensionality")
    if in1.size == 0 or in2.size == 0:
        return None, np.array([])
    return (in1, in2), None


def _method(method):
    if method not in ("auto", "direct", "fft"):
        raise ValueError("Acceptable method flags are 'auto', 'direct', or 'fft'.")


@intercepts(_M, "convolve")
def convolve(in1, in2, mode="full", method="auto"):
    """``scipy.signal.convolve``: the N-D convolution of ``in1`` and ``in2``.

    Parameters
    ----------
    in1, in2 : Tracer or array_like
        Real arrays of the same number of dimensions; either or both traced.
    mode : {'full', 'valid', 'same'}
        scipy's output sizes ('same': ``in1``'s shape, centred as scipy;
        'valid': the operands swap when ``in2`` is the larger, as scipy's).
    method : {'auto', 'direct', 'fft'}
        'direct': the direct sums; 'fft': by real FFTs; 'auto': by FFTs for a
        kernel of more than :data:`SHIFTED_TAPS` elements.

    Returns
    -------
    Tracer
        ``in1``'s windows (zero-padded) times ``in2`` flipped (:func:`slide`),
        or the inverse FFT of the spectra's product; scipy's values to rounding.
    """
    _method(method)
    ops, early = _nd("convolve", in1, in2)
    if ops is None:
        return early
    return _by_method(*ops, mode, method)


@intercepts(_M, "correlate")
def correlate(in1, in2, mode="full", method="auto"):
    """``scipy.signal.correlate``: the N-D cross-correlation of ``in1`` and ``in2``.

    Parameters
    ----------
    in1, in2 : Tracer or array_like
        Real arrays of the same number of dimensions; either or both traced
        (the conjugation of ``in2`` is the identity on them).
    mode : {'full', 'valid', 'same'}
        As :func:`convolve` (scipy's 'same' centring included).
    method : {'auto', 'direct', 'fft'}
        As :func:`convolve`.

    Returns
    -------
    Tracer
        :func:`convolve` of ``in1`` with ``in2`` reversed along every axis,
        as scipy computes it (all its methods agree to rounding).
    """
    _method(method)
    ops, early = _nd("correlate", in1, in2)
    if ops is None:
        return early
    in1, in2 = ops
    return _by_method(in1, _flip(in2), mode, method)


@intercepts(_M, "fftconvolve")
def fftconvolve(in1, in2, mode="full", axes=None):
    """``scipy.signal.fftconvolve``: by real FFTs, as scipy computes it (a small
    kernel by the direct sums).

    Parameters
    ----------
    in1, in2 : Tracer or array_like
        Real arrays of the same number of dimensions; either or both traced.
    mode : {'full', 'valid', 'same'}
        As :func:`convolve`.
    axes : int or sequence of int, optional
        The axes convolved (default: all, but those where an operand has
        length 1); along the others the operands broadcast (sizes equal, or
        one of them 1), as scipy's.

    Returns
    -------
    Tracer
        scipy's values to rounding (:func:`by_fft`).
    """
    ops, early = _nd("fftconvolve", in1, in2)
    if ops is None:
        return early
    return by_fft(*ops, mode, axes)


def _operands_2d(name, in1, in2, boundary):
    in1, in2 = operand(in1, f"{_M}.{name}"), operand(in2, f"{_M}.{name}")
    if not in1.ndim == in2.ndim == 2:
        raise ValueError(f"{name} inputs must both be 2-D arrays")
    if boundary not in _BOUNDARIES:
        raise ValueError("Acceptable boundary flags are 'fill', 'circular' (or 'wrap'), and "
                         "'symmetric' (or 'symm').")
    return in1, in2, _BOUNDARIES[boundary]


@intercepts(_M, "convolve2d")
def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """``scipy.signal.convolve2d``: the 2-D convolution with scipy's boundaries.

    Parameters
    ----------
    in1, in2 : Tracer or array_like
        Real 2-D arrays; either or both traced.
    mode : {'full', 'valid', 'same'}
        As :func:`convolve`.
    boundary : {'fill', 'wrap', 'symm'}
        ``in1`` extended with ``fillvalue``, periodically, or mirrored
        (edge repeated: np.pad's 'symmetric'); scipy's aliases 'pad',
        'circular', 'symmetric' too.
    fillvalue : float or Tracer

    Returns
    -------
    Tracer
        ``in1``'s extended windows times ``in2`` flipped (:func:`slide`);
        scipy's values to rounding.
    """
    in1, in2, pad = _operands_2d("convolve2d", in1, in2, boundary)
    return _convolve(in1, in2, _mode(mode), (0, 1), pad, fillvalue)


@intercepts(_M, "correlate2d")
def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """``scipy.signal.correlate2d``: the 2-D cross-correlation with scipy's
    boundaries.

    Parameters
    ----------
    in1, in2, mode, boundary, fillvalue
        As :func:`convolve2d`.  'same' is centred as scipy's correlate2d
        centres it (for an even kernel size one element off
        :func:`correlate`'s); 'valid' with ``in2`` the larger correlates them
        swapped and reverses the result, as scipy.

    Returns
    -------
    Tracer
        :func:`convolve2d` of ``in1`` with ``in2`` reversed; scipy's values
        to rounding.
    """
    in1, in2, pad = _operands_2d("correlate2d", in1, in2, boundary)
    mode = _mode(mode)
    if _swap_needed(mode, in1.shape, in2.shape, (0, 1)):
        return _flip(_convolve(in2, _flip(in1), mode, (0, 1), pad, fillvalue))
    return _convolve(in1, _flip(in2), mode, (0, 1), pad, fillvalue,
                     centre=lambda k: ((k - 1) // 2, k - 1 - (k - 1) // 2))
