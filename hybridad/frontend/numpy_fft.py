"""np.fft on tracers: the FFT ops of :mod:`hybridad.ops.fft`.

A complex transform packs the real and imaginary parts (:mod:`.numpy_complex`)
side by side, the transform axis moved last, into one real array -- the
memory layout of numpy's complex arrays -- and applies the op ``fft``
(``rfft`` for a real input, ``irfft`` for a real output); the result's parts
are read back as views.  The ops run pocketfft, numpy's own FFT, in every
CPU backend (cuFFT on the GPU), ``O(n log n)`` per transform, and their
derivative rules are transforms again.  A real input to ``fft``/``ifft`` takes
``rfft`` (half the work) and the rest of the spectrum by its symmetry: equal
to numpy's to rounding, where the other transforms give numpy's bits.
``n`` (crop or zero-pad), ``axis``/``axes``, ``s`` and ``norm`` ("backward",
"ortho", "forward") follow numpy; ``fft2``/``fftn`` apply 1-D transforms
axis by axis, ``rfftn`` the real one on the last axis,
``irfftn`` it last.  :func:`check_table` bounds the dense transforms of
:mod:`.scipy_fft` (the cosine and sine transforms, products with their
matrices).
"""

from __future__ import annotations

import numpy as np

from ..core.trace import bind
from ..core.tracer import Tracer
from ..ir.registry import REGISTRY
from ..ops.fft import SWAP
from .numpy_api import implements
from .numpy_complex import ComplexTracer, as_complex

__all__ = []


#: the largest table (bytes) a dense transform of :mod:`.scipy_fft` builds: one
#: past it (n above about 8000) is refused, not left to exhaust memory
TABLE_BYTES = 1 << 30


def check_table(name, nbytes, n):
    """Refuse a transform of length ``n`` whose tables take ``nbytes``."""
    if nbytes > TABLE_BYTES:
        raise NotImplementedError(
            f"hybridad: {name} of length {n} on traced values is not supported: hybridad "
            f"writes a transform as a product with its {nbytes / 2**30:.1f} GiB table "
            f"(O(n^2); at most {TABLE_BYTES >> 30} GiB), long signals are not served yet")


def _real_dtype(a):
    """The real dtype numpy's FFT of ``a`` computes in: float32 for float32 and
    complex64 input (numpy 2 keeps single precision), else float64."""
    dt = np.dtype(getattr(a, "dtype", np.float64))
    return np.dtype(np.float32) if dt in (np.float32, np.complex64) else np.dtype(np.float64)


def _norm(norm):
    """numpy's ``norm`` (None: "backward"); numpy's error for another value."""
    if norm not in (None, "backward", "ortho", "forward"):
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                         '"forward".')
    return "backward" if norm is None else norm


def _fit(z, n, axis):
    """``z`` (a ComplexTracer) cropped or zero-padded to ``n`` along ``axis``, moved last."""
    z = ComplexTracer(*(np.moveaxis(p, axis, -1) for p in as_complex(z).full()))
    m = z.shape[-1]
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    if n < m:
        return z[..., :n]
    if n > m:
        pad = [(0, 0)] * (z.ndim - 1) + [(0, n - m)]
        re, im = z.full()
        return ComplexTracer(np.pad(re, pad), np.pad(im, pad))
    return z


def _typed(p, dt):
    return p if np.result_type(p) == dt else p.astype(dt)


def _packed(parts, dt):
    """The real and imaginary parts (transform axis last) as one real array
    ``(..., n, 2)``: the layout of the FFT ops (:mod:`hybridad.ops.fft`)."""
    return np.stack([_typed(p, dt) for p in parts], axis=-1)


def _op(kind, x, axis, **attrs):
    """The FFT op ``kind`` of ``x`` (packed, or real for rfft), its result's
    transform axis moved back to ``axis``: complex, or real for irfft."""
    if isinstance(x, Tracer):
        y = bind(kind, x, **attrs)
    else:  # (constant parts: numpy's transform of them, as the op runs it)
        y = np.empty(REGISTRY[kind].abstract(x, **attrs)[0], x.dtype)
        REGISTRY[kind].run(y, x, **attrs)
    if kind == "irfft":
        return np.moveaxis(y, -1, axis)
    return ComplexTracer(*(np.moveaxis(y[..., k], -1, axis) for k in (0, 1)))


def _dft(a, n, axis, norm, inverse):
    z = as_complex(a)
    axis = axis % z.ndim
    n = z.shape[axis] if n is None else int(n)
    if not isinstance(a, ComplexTracer):
        return _hermitian_full(a, n, axis, _norm(norm), inverse)
    z = _fit(z, n, axis)
    return _op("fft", _packed(z.full(), _real_dtype(a)), axis, norm=_norm(norm),
               inverse=bool(inverse))


def _hermitian_full(x, n, axis, norm, inverse):
    """``fft``/``ifft`` of a real ``x``: its half spectrum (``rfft``, half the
    work) and the rest by symmetry, ``X_{n-k} = conj(X_k)``; the inverse is the
    conjugate of the forward transform scaled as the inverse."""
    half = _rdft(x, n, axis, SWAP[norm] if inverse else norm)
    re, im = (np.moveaxis(p, axis, -1) for p in half.full())
    tail = (Ellipsis, slice(n - re.shape[-1], 0, -1))
    re = np.concatenate([re, re[tail]], axis=-1)
    im = np.concatenate([-im, im[tail]] if inverse else [im, -im[tail]], axis=-1)
    return ComplexTracer(np.moveaxis(re, -1, axis), np.moveaxis(im, -1, axis))


def _rdft(a, n, axis, norm):
    x = a
    if isinstance(x, ComplexTracer):
        x = x.real  # numpy discards the imaginary part (with a warning)
    axis = axis % np.ndim(x)
    n = np.shape(x)[axis] if n is None else int(n)
    z = _fit(x, n, axis)
    dt = _real_dtype(x)
    return _op("rfft", _typed(z.full()[0], dt), axis, norm=_norm(norm))


def _irdft(a, n, axis, norm):
    z = as_complex(a)
    axis = axis % z.ndim
    m_in = z.shape[axis]
    n = 2 * (m_in - 1) if n is None else int(n)
    m = n // 2 + 1
    z = _fit(z, m, axis)
    return _op("irfft", _packed(z.full(), _real_dtype(a)), axis, norm=_norm(norm), n=n)


@implements(np.fft.fft)
def fft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.fft``."""
    _no_out(out)
    return _dft(a, n, axis, norm, False)


@implements(np.fft.ifft)
def ifft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.ifft``."""
    _no_out(out)
    return _dft(a, n, axis, norm, True)


@implements(np.fft.rfft)
def rfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.rfft``."""
    _no_out(out)
    return _rdft(a, n, axis, norm)


@implements(np.fft.irfft)
def irfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.irfft``."""
    _no_out(out)
    return _irdft(a, n, axis, norm)


@implements(np.fft.hfft)
def hfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.hfft``: ``irfft(conj(a), n)`` with the normalization swapped."""
    _no_out(out)
    return _irdft(as_complex(a).conj(), n, axis, SWAP[_norm(norm)])


@implements(np.fft.ihfft)
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.ihfft``: ``conj(rfft(a, n))`` with the normalization swapped."""
    _no_out(out)
    return _rdft(a, n, axis, SWAP[_norm(norm)]).conj()


def _axes_and_sizes(a, s, axes, default_all=True):
    nd = np.ndim(a) if not isinstance(a, ComplexTracer) else a.ndim
    if axes is None:
        axes = list(range(-len(s), 0)) if s is not None else \
            (list(range(nd)) if default_all else [-2, -1])
    axes = [ax % nd for ax in axes]
    s = [None] * len(axes) if s is None else list(s)
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    return axes, s


def _nd(inverse):
    def transform(a, s=None, axes=None, norm=None, out=None):
        _no_out(out)
        axes, sizes = _axes_and_sizes(a, s, axes)
        z = a
        for ax, n in zip(axes[::-1], sizes[::-1], strict=True):
            z = _dft(z, n, ax, norm, inverse)
        return z
    return transform


def _rnd(a, s=None, axes=None, norm=None, out=None):
    _no_out(out)
    axes, sizes = _axes_and_sizes(a, s, axes)
    z = _rdft(a, sizes[-1], axes[-1], norm)
    for ax, n in zip(axes[-2::-1], sizes[-2::-1], strict=True):
        z = _dft(z, n, ax, norm, False)
    return z


def _irnd(a, s=None, axes=None, norm=None, out=None):
    _no_out(out)
    axes, sizes = _axes_and_sizes(a, s, axes)
    z = a
    for ax, n in zip(axes[:-1], sizes[:-1], strict=True):
        z = _dft(z, n, ax, norm, True)
    return _irdft(z, sizes[-1], axes[-1], norm)


def _two(fn):
    def transform(a, s=None, axes=(-2, -1), norm=None, out=None):
        return fn(a, s=s, axes=axes, norm=norm, out=out)
    return transform


implements(np.fft.fftn)(_nd(False))
implements(np.fft.ifftn)(_nd(True))
implements(np.fft.rfftn)(_rnd)
implements(np.fft.irfftn)(_irnd)
implements(np.fft.fft2)(_two(_nd(False)))
implements(np.fft.ifft2)(_two(_nd(True)))
implements(np.fft.rfft2)(_two(_rnd))
implements(np.fft.irfft2)(_two(_irnd))


@implements(np.fft.fftshift)
def fftshift(x, axes=None):
    """``np.fft.fftshift``: a roll by half of each axis."""
    nd = x.ndim if isinstance(x, ComplexTracer) else np.ndim(x)
    axes = list(range(nd)) if axes is None else [axes] if isinstance(axes, int) else list(axes)
    shape = x.shape
    return np.roll(x, [shape[ax] // 2 for ax in axes], axes)


@implements(np.fft.ifftshift)
def ifftshift(x, axes=None):
    """``np.fft.ifftshift``."""
    nd = x.ndim if isinstance(x, ComplexTracer) else np.ndim(x)
    axes = list(range(nd)) if axes is None else [axes] if isinstance(axes, int) else list(axes)
    shape = x.shape
    return np.roll(x, [-(shape[ax] // 2) for ax in axes], axes)


def _no_out(out):
    if out is not None:
        raise NotImplementedError("hybridad: np.fft with out= on traced values (use the result)")
