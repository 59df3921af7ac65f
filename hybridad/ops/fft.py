"""Fast Fourier transforms along the last axis: ``fft`` (complex to complex),
``rfft`` (real to half spectrum) and ``irfft`` (half spectrum to real).

The IR is real, so a complex array of shape ``S`` is a real one of shape
``S + (2,)`` holding each element's real and imaginary parts side by side --
the memory layout of numpy's complex dtypes: a run views its buffers as
complex and calls pocketfft, numpy's FFT, into the result's buffer.  The
transform runs along the last complex axis (the frontend moves the axis
there, :mod:`hybridad.frontend.numpy_fft`); any leading axes are a batch.

Attributes are numpy's: ``norm`` ("backward", "ortho", "forward"), ``inverse``
(``fft`` only: the sign of the exponent), ``n`` (``irfft`` only: the length
of the real result, whose half spectrum has ``n // 2 + 1`` entries).

Every rule is a transform again, the transforms being linear:

* the tangent of each is the same transform of the operand's tangent;
* the transpose of ``fft`` is ``fft`` with the exponent's sign flipped and the
  normalization swapped (``F^H`` of the scaled DFT matrix ``F``);
* the transpose of ``rfft`` is ``irfft`` (normalization swapped) of the
  cotangent with its entries ``0 < k < n/2`` halved (``irfft`` counts them
  twice); the imaginary parts of entries 0 and ``n/2``, which ``irfft``
  ignores, multiply real exponentials there, so they contribute nothing;
* the transpose of ``irfft`` is ``rfft`` (normalization swapped) with those
  entries doubled; its entries 0 and ``n/2`` are real, as their cotangent
  must be (``irfft`` reads only their real parts).

So the derivatives cost an FFT each, ``O(n log n)``, and run on the same
library as the values.  The runs allocate nothing: pocketfft's ufuncs are
called with the result's buffer and a preallocated scale (compiled code calls
their loops directly, :mod:`.fft_kernels`, its arguments in the op's small
workspace).
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .common import bind as _bind

__all__ = ["NORMS", "SWAP", "WORK_BYTES", "complex_view", "factor", "length_of", "loop", "scale",
           "transform"]

NORMS = ("backward", "ortho", "forward")
#: the normalization of a transform's transpose (and of the inverse direction)
SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}

#: bytes of workspace the compiled kernel (:func:`.fft_kernels.pocketfft_lines`)
#: uses: the loop's three argument pointers, three dimensions, five steps, the
#: direction's bytes, the scale
WORK_BYTES = 104

_SCALES = {}  # (dtype, norm, n) -> the 0-d scale pocketfft multiplies by


def scale(dtype, norm, n):
    """The factor of a forward transform of length ``n`` under ``norm``, a 0-d
    array of ``dtype`` made once (computed as numpy computes it, so the
    values are numpy's to the bit)."""
    key = (np.dtype(dtype).str, norm, n)
    s = _SCALES.get(key)
    if s is None:
        dt = np.dtype(dtype)
        if norm == "backward":
            s = np.ones((), dt)
        elif norm == "ortho":
            s = np.reciprocal(np.sqrt(n, dtype=dt))
        else:
            s = np.reciprocal(n, dtype=dt)
        s = _SCALES.setdefault(key, np.asarray(s, dt))
    return s


def complex_view(a):
    """``a`` (real, last axis of length 2) as the complex array it holds:
    a view where the last axis is contiguous, else None."""
    if a.shape[-1] != 2 or a.strides[-1] != a.itemsize:
        return None
    return a.view(np.complex64 if a.dtype == np.float32 else np.complex128)[..., 0]


def _as_complex(a):
    z = complex_view(a)
    return z if z is not None else complex_view(np.ascontiguousarray(a))


def _ufuncs():
    from numpy.fft import _pocketfft_umath as pfu  # numpy's FFT, with out= and no wrapper

    return pfu


def loop(kind, inverse, length):
    """The pocketfft ufunc (its name in ``numpy.fft._pocketfft_umath``) that runs
    ``kind`` of ``length`` points -- every backend asks here."""
    if kind == "fft":
        return "ifft" if inverse else "fft"
    if kind == "rfft":
        return "rfft_n_even" if length % 2 == 0 else "rfft_n_odd"
    return "irfft"


def length_of(kind, shape, n=None):
    """The transform length of ``kind`` on an operand of ``shape`` (irfft: ``n``)."""
    return n if kind == "irfft" else shape[-2 if kind == "fft" else -1]


def factor(kind, dtype, norm, length, inverse=False):
    """The 0-d scale the ufunc multiplies by: numpy's, the normalization swapped
    for the inverse direction (ifft, irfft), as numpy swaps it."""
    return scale(dtype, SWAP[norm] if inverse or kind == "irfft" else norm, length)


def transform(kind, out, x, *, norm, inverse=False, n=None):
    """Write ``kind`` ("fft", "rfft" or "irfft") of ``x`` into ``out``, host
    arrays in the layout of the module docstring."""
    length = length_of(kind, x.shape, n)
    fn = getattr(_ufuncs(), loop(kind, inverse, length))
    fct = factor(kind, x.dtype, norm, length, inverse)
    if kind == "rfft":
        fn(x, fct, out=complex_view(out))
    else:
        fn(_as_complex(x), fct, out=complex_view(out) if kind == "fft" else out)


def _run(kind):
    def run(out, x, work=None, **attrs):
        transform(kind, out, x, **attrs)
    run.__name__ = f"_{kind}_run"
    return run


def _half_weights(n, m, dtype, factor):
    """``(m, 1)``: 1 at entries 0 and (n even) ``n/2`` of a half spectrum,
    ``factor`` between -- what irfft counts twice."""
    w = np.full((m, 1), factor, dtype)
    w[0] = 1
    if n % 2 == 0:
        w[-1] = 1
    w.flags.writeable = False
    return w


def _workspace(x, **attrs):
    """Elements of the result's dtype the compiled kernel's arguments take
    (:data:`WORK_BYTES`)."""
    return WORK_BYTES // np.dtype(x.dtype).itemsize


def _same(node, batched, x, **attrs):
    """Any leading axes are a batch: the op itself, on the batched operand."""
    return _bind(node.op, x, **attrs)


def _tangent(ts, node, x, ans, **attrs):
    return None if ts[0] is None else _bind(node.op, ts[0], **attrs)


def _fft_vjp(g, node, active, x, ans, norm, inverse):
    return (_bind("fft", g, norm=SWAP[norm], inverse=not inverse),)


def _rfft_vjp(g, node, active, x, ans, norm):
    n = x.shape[-1]
    halved = g * _half_weights(n, n // 2 + 1, g.dtype, 0.5)
    return (_bind("irfft", halved, norm=SWAP[norm], n=n),)


def _irfft_vjp(g, node, active, x, ans, norm, n):
    return (_bind("rfft", g, norm=SWAP[norm]) * _half_weights(n, n // 2 + 1, g.dtype, 2.0),)


def _fft_abstract(x, norm, inverse):
    _check(x, "fft", norm)
    return x.shape, x.dtype


def _rfft_abstract(x, norm):
    _check(x, "rfft", norm)
    return x.shape[:-1] + (x.shape[-1] // 2 + 1, 2), x.dtype


def _irfft_abstract(x, norm, n):
    _check(x, "irfft", norm)
    if x.shape[-2] != n // 2 + 1:
        raise ValueError(f"irfft of length {n} needs {n // 2 + 1} entries, got {x.shape[-2]}")
    return x.shape[:-2] + (n,), x.dtype


def _check(x, kind, norm):
    if norm not in NORMS:
        raise ValueError(f"{kind}: norm {norm!r} is not one of {NORMS}")
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise TypeError(f"{kind}: operand of dtype {x.dtype}, a real float dtype is needed")
    complex_in = kind != "rfft"
    if len(x.shape) < 1 + complex_in or (complex_in and x.shape[-1] != 2) or \
            x.shape[-1 - complex_in] < 1:
        raise ValueError(f"{kind}: operand of shape {tuple(x.shape)} holds no transform")


_RULES = {"fft": (_fft_abstract, _fft_vjp, "complex discrete Fourier transform along the "
                  "last complex axis"),
          "rfft": (_rfft_abstract, _rfft_vjp, "half spectrum of a real signal along the last axis"),
          "irfft": (_irfft_abstract, _irfft_vjp, "real signal of length n from its half spectrum "
                    "along the last complex axis")}
for _kind, (_abstract, _vjp, _doc) in _RULES.items():
    register(Op(_kind, "compute", _abstract, run=_run(_kind), vjp=_vjp, jvp=_tangent,
                batch=_same, workspace=_workspace, doc=_doc))
