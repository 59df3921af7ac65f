"""np.fft on tracers: discrete Fourier transforms as products with constant
cosine and sine matrices.

Each 1-D transform along an axis is the DFT written out -- ``X_k = sum_j
x_j e^{-2 pi i jk/n}`` -- as a matmul of the real and imaginary parts
(:mod:`.numpy_complex`) with ``cos`` and ``sin`` tables computed once at trace
time (angles reduced exactly: ``2 pi ((jk) mod n) / n``).  So a transform runs
on BLAS in every backend, with exact derivatives from matmul's rules, no op of
its own, and values equal to numpy's FFT to rounding (``O(n)`` ulps rather than
``O(log n)``; the cost is ``O(n^2)`` per transform, fine for the few thousand
points of a typical model, not for long signals).  ``n`` (crop or zero-pad),
``axis``/``axes``, ``s`` and ``norm`` ("backward", "ortho", "forward") follow
numpy; ``fft2``/``fftn`` apply 1-D transforms axis by axis, ``rfftn`` the real
one on the last axis, ``irfftn`` it last.
"""

from __future__ import annotations

import functools

import numpy as np

from .numpy_api import implements
from .numpy_complex import ComplexTracer, as_complex

__all__ = []


#: the largest table (bytes, all of a transform's tables together) a trace builds:
#: a transform past it (n above about 8000) is refused, not left to exhaust memory
TABLE_BYTES = 1 << 30


def check_table(name, nbytes, n):
    """Refuse a transform of length ``n`` whose tables take ``nbytes``."""
    if nbytes > TABLE_BYTES:
        raise NotImplementedError(
            f"hybridad: {name} of length {n} on traced values is not supported: hybridad "
            f"writes a transform as a product with its {nbytes / 2**30:.1f} GiB table "
            f"(O(n^2); at most {TABLE_BYTES >> 30} GiB), long signals are not served yet")


@functools.lru_cache(maxsize=64)
def _tables(n_in, n_out, big):
    """cos and sin of ``2 pi (j k mod N) / N`` for j < n_in, k < n_out, N = ``big``
    (the transform length)."""
    check_table("a discrete Fourier transform", 16 * n_in * n_out, big)
    j = np.arange(n_in)[:, None]
    k = np.arange(n_out)[None, :]
    theta = 2 * np.pi * ((j * k) % big) / big
    c, s = np.cos(theta), np.sin(theta)
    c.flags.writeable = s.flags.writeable = False
    return c, s


def _real_dtype(a):
    """The real dtype numpy's FFT of ``a`` computes in: float32 for float32 and
    complex64 input (numpy 2 keeps single precision), else float64."""
    dt = np.dtype(getattr(a, "dtype", np.float64))
    return np.dtype(np.float32) if dt in (np.float32, np.complex64) else np.dtype(np.float64)


def _scale(norm, n, inverse):
    if norm in (None, "backward"):
        return 1.0 / n if inverse else 1.0
    if norm == "ortho":
        return 1.0 / np.sqrt(n)
    if norm == "forward":
        return 1.0 if inverse else 1.0 / n
    raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')


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


def _dft(a, n, axis, norm, inverse):
    z = as_complex(a)
    axis = axis % z.ndim
    n = z.shape[axis] if n is None else int(n)
    z = _fit(z, n, axis)
    c, s = _tables(n, n, n)
    sign = 1.0 if inverse else -1.0  # e^{sign i theta} = cos + sign i sin
    f = _scale(norm, n, inverse)
    dt = _real_dtype(a)
    w = ComplexTracer((c * f).astype(dt), (s * (sign * f)).astype(dt))
    out = np.matmul(z, w)
    return ComplexTracer(*(np.moveaxis(p, -1, axis) for p in out.full()))


def _rdft(a, n, axis, norm):
    x = a
    if isinstance(x, ComplexTracer):
        x = x.real  # numpy discards the imaginary part (with a warning)
    axis = axis % np.ndim(x)
    n = np.shape(x)[axis] if n is None else int(n)
    z = _fit(x, n, axis)
    c, s = _tables(n, n // 2 + 1, n)
    f = _scale(norm, n, False)
    dt = _real_dtype(x)
    out = np.matmul(z, ComplexTracer((c * f).astype(dt), (s * -f).astype(dt)))
    return ComplexTracer(*(np.moveaxis(p, -1, axis) for p in out.full()))


def _irdft(a, n, axis, norm):
    z = as_complex(a)
    axis = axis % z.ndim
    m_in = z.shape[axis]
    n = 2 * (m_in - 1) if n is None else int(n)
    m = n // 2 + 1
    z = _fit(z, m, axis)
    c, s = _tables(m, n, n)  # theta for k < m (rows), j < n (columns)
    wts = np.full(m, 2.0)
    wts[0] = 1.0
    if n % 2 == 0:
        wts[-1] = 1.0  # the Nyquist term counts once
    f = _scale(norm, n, True)
    cw, sw = c * (wts[:, None] * f), s * (wts[:, None] * f)
    cw[0] = c[0] * f  # numpy ignores the imaginary part of X_0 (and of X_{n/2}, below)
    sw[0] = 0.0
    if n % 2 == 0:
        sw[-1] = 0.0
    dt = _real_dtype(a)
    re, im = (p if p.dtype == dt else p.astype(dt) for p in z.full())
    out = np.matmul(re, cw.astype(dt)) - np.matmul(im, sw.astype(dt))
    return np.moveaxis(out, -1, axis)


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


_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


@implements(np.fft.hfft)
def hfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.hfft``: ``irfft(conj(a), n)`` with the normalization swapped."""
    _no_out(out)
    if norm not in _SWAP:
        _scale(norm, 1, False)
    return _irdft(as_complex(a).conj(), n, axis, _SWAP[norm])


@implements(np.fft.ihfft)
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """``np.fft.ihfft``: ``conj(rfft(a, n))`` with the normalization swapped."""
    _no_out(out)
    if norm not in _SWAP:
        _scale(norm, 1, False)
    return _rdft(a, n, axis, _SWAP[norm]).conj()


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
