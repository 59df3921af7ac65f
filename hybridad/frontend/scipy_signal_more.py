"""scipy.signal's second-order sections, detrending and spectral estimates on
tracers: ``sosfilt`` (with ``zi``), ``sosfilt_zi``, ``sosfiltfilt``
(``padtype`` odd, even, constant or None), ``decimate`` (IIR), ``detrend``
('constant' or 'linear', with breakpoints), ``welch`` and ``periodogram``
(one-sided, 'density' or 'spectrum', 'mean' or 'median' averaging, every
window scipy's ``get_window`` makes), ``stft`` (complex, every boundary,
padding, scaling and detrend scipy takes but a callable), ``spectrogram``
(every mode), ``istft`` (one-sided), ``csd`` (one-sided) and ``coherence``,
``resample`` (Fourier, real signals) and ``hilbert`` (the analytic signal,
complex).

scipy's own compositions, each step on tracers: a cascade of sections is one
:func:`.scipy_filters.lfilter` per section (a compiled loop each, differentiable
in the signal, the delays and the coefficients); ``sosfiltfilt`` extends the
edges, filters forward from ``sosfilt_zi`` times the first sample and
backward from it times the last, as scipy's; a linear detrend subtracts the
least-squares line of each segment (its fit a constant matrix applied to the
segment); the spectral estimates take scipy's segments, detrend and window
them, and sum the squares of their real FFT's parts.  Values are scipy's to
rounding.  Registered in :data:`.scipy_special.INTERCEPTED` under
``"scipy.signal"``.
"""

from __future__ import annotations

import numpy as np

from .numpy_api import _tracer, getitem
from .numpy_complex import ComplexTracer, as_complex
from .scipy_filters import (_axis, _axis_slice, _dtype, _extended, forward_and_back, lfilter,
                            lfilter_zi)
from .scipy_special import intercepts, is_traced

__all__ = []

_M = "scipy.signal"


def _sections(sos):
    sos = sos if is_traced((sos,)) else np.asarray(sos, dtype=np.float64)
    if len(np.shape(sos)) != 2 or np.shape(sos)[1] != 6:
        raise ValueError("sos array must be shape (n_sections, 6)")
    return sos, np.shape(sos)[0]


@intercepts(_M, "sosfilt")
def sosfilt(sos, x, axis=-1, zi=None):
    """The cascade of second-order sections: ``lfilter`` of each section's
    ``b = sos[s, :3]``, ``a = sos[s, 3:]`` in turn (``zi`` of shape
    ``(n_sections, ..., 2, ...)``: each section's delays; the final delays
    returned with the output then)."""
    sos, n = _sections(sos)
    x = _tracer(x)
    dtype = _dtype(sos, x) if zi is None else _dtype(sos, x, zi)
    y = x.astype(dtype)
    axis = _axis(axis, y.ndim)
    finals = []
    for s in range(n):
        b, a = sos[s, :3], sos[s, 3:]
        if zi is None:
            y = lfilter(b, a, y, axis=axis)
        else:
            y, zf = lfilter(b, a, y, axis=axis, zi=zi[s])
            finals.append(zf)
    return y if zi is None else (y, np.stack(finals))


@intercepts(_M, "sosfilt_zi")
def sosfilt_zi(sos):
    """Each section's steady-state delays for a unit step, scaled by the gain of
    the sections before it, as scipy's."""
    sos, n = _sections(sos)
    rows, scale = [], 1.0
    for s in range(n):
        b, a = sos[s, :3], sos[s, 3:]
        rows.append(scale * lfilter_zi(b, a))
        scale = scale * np.sum(b) / np.sum(a)
    return np.stack(rows)


@intercepts(_M, "sosfiltfilt")
def sosfiltfilt(sos, x, axis=-1, padtype="odd", padlen=None):
    """The cascade forward and backward (scipy's ``sosfiltfilt``: ``padtype``,
    ``padlen`` defaulting to ``3 * (2 n_sections + 1 - trailing zeros)``;
    :func:`.scipy_filters.forward_and_back`)."""
    sos, n = _sections(sos)
    x = _tracer(x)
    x = x.astype(_dtype(sos, x))
    axis = _axis(axis, x.ndim)
    ntaps = 2 * n + 1
    if not is_traced((sos,)):
        ntaps -= min(int((sos[:, 2] == 0).sum()), int((sos[:, 5] == 0).sum()))
    shape = [1] * x.ndim
    shape[axis] = 2
    zi = np.reshape(sosfilt_zi(sos), (n,) + tuple(shape))
    return forward_and_back(x, axis, padtype, padlen, ntaps, zi,
                            lambda v, z: sosfilt(sos, v, axis=axis, zi=z))


def _detrended(x, kind, bp=0):
    """``x`` (..., N) detrended along its last axis: less its mean, or less each
    segment's least-squares line (scipy's ``A = [t / n, 1]``, breakpoints ``bp``)."""
    n = x.shape[-1]
    if kind in ("constant", "c"):
        return x - np.mean(x, axis=-1, keepdims=True)
    if kind not in ("linear", "l"):
        raise ValueError("Trend type must be 'linear' or 'constant'.")
    bps = np.sort(np.unique(np.r_[0, np.asarray(bp, dtype=int).ravel(), n]))
    if np.any(bps > n):
        raise ValueError("Breakpoints must be less than length of data along given axis.")
    parts = []
    for lo, hi in zip(bps[:-1], bps[1:], strict=True):
        m = hi - lo
        a = np.ones((m, 2))
        a[:, 0] = np.arange(1, m + 1) * 1.0 / m
        fit = a @ np.linalg.pinv(a)  # (m, m): the projection on the segment's lines
        seg = x[..., lo:hi]
        parts.append(seg - seg @ fit.T)
    return np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]


@intercepts(_M, "detrend")
def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=False):  # noqa: A002
    """scipy's ``detrend`` (its fit the least-squares projection of each segment)."""
    x = _tracer(data)
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    axis = _axis(axis, x.ndim)
    out = _detrended(np.moveaxis(x, axis, -1), type, bp)
    return np.moveaxis(out, -1, axis)


def _median_bias(n):
    ii = np.arange(1, (n - 1) // 2 + 1)
    return 1 + np.sum(1.0 / (ii * 2 + 1) - 1.0 / (ii * 2))


def _segmenting(window, nperseg, noverlap, nfft, n):
    """``(window, nperseg, nfft, step)`` of a spectral estimate of ``n``
    samples, as scipy's ``_triage_segments`` and ``_spectral_helper``: a named
    window of ``nperseg`` (default 256, at most ``n``) points from
    ``get_window``, or the array given."""
    from scipy.signal import get_window

    if nperseg is not None and int(nperseg) < 1:
        raise ValueError("nperseg must be a positive integer")
    if isinstance(window, (str, tuple)):
        nperseg = min(256 if nperseg is None else int(nperseg), n)
        win = get_window(window, nperseg)
    else:
        win = np.asarray(window, dtype=np.float64)
        if win.ndim != 1:
            raise ValueError("window must be 1-D")
        nperseg = win.shape[0] if nperseg is None else int(nperseg)
        if win.shape[0] != nperseg:
            raise ValueError("value specified for nperseg is different from length of window")
    nfft = nperseg if nfft is None else int(nfft)
    if nfft < nperseg:
        raise ValueError("nfft must be greater than or equal to nperseg.")
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    return win, nperseg, nfft, nperseg - noverlap


#: scipy's boundary extensions of ``stft``
_BOUNDARIES = ("zeros", "constant", "even", "odd")


def _short_time(x, fs, window, nperseg, noverlap, nfft, detrend, onesided, boundary, padded,
                axis, name, overlap_of=None):
    """``(frequencies, times, X, window, nfft)`` of scipy's ``_spectral_helper``:
    ``X`` the unscaled (real, for ``onesided``) FFTs of the signal's
    segments -- extended at both ends by ``boundary``, zero-padded to whole
    segments, each detrended and windowed -- frequencies at ``axis``, the
    segments last.  ``overlap_of``: the default overlap of ``nperseg``."""
    if boundary is not None and boundary not in _BOUNDARIES:
        raise ValueError(f"Unknown boundary option '{boundary}', must be one of: "
                         f"{[*_BOUNDARIES, None]}")
    if callable(detrend) or is_traced((fs,)) or isinstance(x, ComplexTracer):
        raise NotImplementedError(f"hybridad: scipy.signal.{name} with a callable detrend, a "
                                  "traced fs or a complex signal is not supported")
    x = _tracer(x)
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    axis = _axis(axis, x.ndim)
    xs = np.moveaxis(x, axis, -1)
    if noverlap is None and overlap_of is not None:
        noverlap = overlap_of(_segmenting(window, nperseg, None, nfft, xs.shape[-1])[1])
    win, nperseg, nfft, step = _segmenting(window, nperseg, noverlap, nfft, xs.shape[-1])
    lead = [(0, 0)] * (xs.ndim - 1)
    if boundary == "zeros":
        xs = np.pad(xs, lead + [(nperseg // 2, nperseg // 2)])
    elif boundary is not None:  # (scipy's even_ext, const_ext and odd_ext)
        xs = _extended(xs, boundary, nperseg // 2, xs.ndim - 1)
    if padded:
        xs = np.pad(xs, lead + [(0, (-(xs.shape[-1] - nperseg) % step) % nperseg)])
    n = xs.shape[-1]
    starts = np.arange(0, n - nperseg + 1, step)
    segs = xs[..., starts[:, None] + np.arange(nperseg)[None, :]]  # (..., nseg, nperseg)
    if detrend:
        segs = _detrended(segs, detrend)
    spec = (np.fft.rfft if onesided else np.fft.fft)(segs * win.astype(x.dtype), n=nfft, axis=-1)
    freqs = np.fft.rfftfreq(nfft, 1 / fs) if onesided else np.fft.fftfreq(nfft, 1 / fs)
    times = np.arange(nperseg / 2, n - nperseg / 2 + 1, step) / float(fs)
    if boundary is not None:
        times -= (nperseg / 2) / fs
    return freqs, times, np.moveaxis(spec, -1, axis), win, nfft


def _scale(win, fs, scaling):
    if scaling == "density":
        return 1.0 / (fs * np.sum(win * win))
    if scaling == "spectrum":
        return 1.0 / np.sum(win) ** 2
    raise ValueError(f"Unknown scaling: {scaling!r}")


@intercepts(_M, "stft")
def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False,
         return_onesided=True, boundary="zeros", padded=True, axis=-1, scaling="spectrum"):
    """scipy's short-time Fourier transform: ``(frequencies, times, Zxx)``,
    ``Zxx`` complex with the frequencies at ``axis`` and the segments last
    (:func:`_short_time`), scaled by the square root of scipy's ``scaling``."""
    scaling = {"psd": "density", "spectrum": "spectrum"}.get(scaling)
    if scaling is None:
        raise ValueError("Parameter scaling not in ['spectrum', 'psd']!")
    freqs, times, spec, win, _ = _short_time(x, fs, window, nperseg, noverlap, nfft, detrend,
                                             return_onesided, boundary, padded, axis, "stft")
    return freqs, times, spec * np.sqrt(_scale(win, fs, scaling))


@intercepts(_M, "istft")
def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,  # noqa: N803
          input_onesided=True, boundary=True, time_axis=-1, freq_axis=-2,
          scaling="spectrum"):
    """scipy's inverse STFT ``(times, x)`` of a one-sided ``Zxx``: each segment's
    inverse real FFT, windowed and added where scipy adds it (each output
    sample a sum of the frames' samples at it), divided by the windows' squares
    (where over 1e-10), the boundary extension removed."""
    from scipy.signal import get_window

    if not input_onesided:
        raise NotImplementedError("hybridad: scipy.signal.istft(input_onesided=False) of "
                                  "traced values is not supported")
    z = as_complex(Zxx)
    nd = z.ndim
    if nd < 2:
        raise ValueError("Input stft must be at least 2d!")
    freq_axis, time_axis = int(freq_axis) % nd, int(time_axis) % nd
    if freq_axis == time_axis:
        raise ValueError("Must specify differing time and frequency axes!")
    z = np.moveaxis(z, (freq_axis, time_axis), (-2, -1))
    nseg, n_default = z.shape[-1], 2 * (z.shape[-2] - 1)
    nperseg = n_default if nperseg is None else int(nperseg)
    if nperseg < 1:
        raise ValueError("nperseg must be a positive integer")
    if nfft is None:
        nfft = nperseg if nperseg == n_default + 1 else n_default
    elif nfft < nperseg:
        raise ValueError("nfft must be greater than or equal to nperseg.")
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    step = nperseg - noverlap
    if isinstance(window, str) or type(window) is tuple:
        win = get_window(window, nperseg)
    else:
        win = np.asarray(window, dtype=np.float64)
        if win.ndim != 1 or win.shape[0] != nperseg:
            raise ValueError(f"window must have length of {nperseg}")
    if scaling not in ("spectrum", "psd"):
        raise ValueError(f"Parameter scaling={scaling!r} not in ['spectrum', 'psd']!")
    gain = win.sum() if scaling == "spectrum" else np.sqrt(fs * sum(win ** 2))
    frames = np.fft.irfft(z, n=nfft, axis=-2)[..., :nperseg, :]  # (..., nperseg, nseg)
    frames = np.swapaxes(frames, -1, -2) * (win * gain)
    length = nperseg + (nseg - 1) * step
    at = (np.arange(nseg)[:, None] * step + np.arange(nperseg)[None, :]).ravel()
    norm = np.bincount(at, weights=np.tile(win ** 2, nseg), minlength=length)
    # each output sample sums the frames' samples at it: a gather of at most
    # ceil(nperseg / step) of them (the padding reads an appended zero)
    order = np.argsort(at, kind="stable")
    first = np.searchsorted(at[order], np.arange(length))
    rank = np.arange(at.size) - first[at[order]]
    reads = np.full((length, -(-nperseg // step)), at.size)
    reads[at[order], rank] = order
    flat = np.reshape(frames, frames.shape[:-2] + (at.size,))
    flat = np.pad(flat, [(0, 0)] * (flat.ndim - 1) + [(0, 1)])
    out = np.sum(flat[..., reads], axis=-1)
    if boundary:
        out, norm = out[..., nperseg // 2:-(nperseg // 2)], norm[nperseg // 2:-(nperseg // 2)]
    out = out / np.where(norm > 1e-10, norm, 1.0)
    if nd > 2 and time_axis != nd - 1:
        out = np.moveaxis(out, -1, time_axis - (freq_axis < time_axis))
    return np.arange(out.shape[0]) / float(fs), out


@intercepts(_M, "spectrogram")
def spectrogram(x, fs=1.0, window=("tukey", 0.25), nperseg=None, noverlap=None, nfft=None,
                detrend="constant", return_onesided=True, scaling="density", axis=-1,
                mode="psd"):
    """scipy's spectrogram: ``(frequencies, times, Sxx)`` of consecutive
    segments (default overlap ``nperseg // 8``, no extension, no padding) --
    mode 'psd': the scaled squared moduli, the one-sided terms but DC (and
    Nyquist) doubled; 'complex', 'magnitude', 'angle', 'phase' (unwrapped
    along the frequencies): of the FFTs scaled by the root of ``scaling``."""
    if mode not in ("psd", "complex", "magnitude", "angle", "phase"):
        raise ValueError(f"unknown value for mode {mode}, must be one of: "
                         "{'psd', 'complex', 'magnitude', 'angle', 'phase'}")
    freqs, times, spec, win, nfft = _short_time(x, fs, window, nperseg, noverlap, nfft,
                                                detrend, return_onesided, None, False, axis,
                                                "spectrogram", lambda n: n // 8)
    scale = _scale(win, fs, scaling)
    faxis = _axis(axis, np.ndim(x))
    if mode != "psd":
        spec = spec * np.sqrt(scale)
        if mode == "magnitude":
            return freqs, times, np.abs(spec)
        if mode in ("angle", "phase"):
            angle = np.angle(spec)
            return freqs, times, np.unwrap(angle, axis=faxis) if mode == "phase" else angle
        return freqs, times, spec
    power = (np.real(spec) ** 2 + np.imag(spec) ** 2) * scale
    return freqs, times, _one_sided(power, faxis, nfft) if return_onesided else power


@intercepts(_M, "welch")
def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          detrend="constant", return_onesided=True, scaling="density", axis=-1,
          average="mean"):
    """scipy's Welch estimate: ``(frequencies, Pxx)`` of the mean (or median, with
    scipy's bias correction) of the windowed, detrended segments' squared real
    FFTs, one-sided."""
    if not return_onesided:
        raise NotImplementedError("hybridad: scipy.signal.welch(return_onesided=False) of "
                                  "traced values is not supported")
    if average not in ("mean", "median"):
        raise ValueError(f"average must be 'median' or 'mean', got {average}")
    ax = _axis(axis, np.ndim(x))
    freqs, _, spec, win, nfft = _short_time(x, fs, window, nperseg, noverlap, nfft, detrend,
                                            True, None, False, ax, "welch")
    power = _one_sided((np.real(spec) ** 2 + np.imag(spec) ** 2) * _scale(win, fs, scaling),
                       ax, nfft)
    if average == "mean":
        return freqs, np.mean(power, axis=-1)
    return freqs, np.median(power, axis=-1) / _median_bias(power.shape[-1])


def _one_sided(spec, freqs_axis, nfft):
    """``spec`` with the one-sided terms but DC (and an even ``nfft``'s Nyquist)
    doubled along ``freqs_axis``, as scipy's densities."""
    factors = np.full(nfft // 2 + 1, 2.0)
    factors[0] = 1.0
    if nfft % 2 == 0:
        factors[-1] = 1.0
    shape = [1] * spec.ndim
    shape[freqs_axis] = factors.size
    return spec * factors.reshape(shape)


@intercepts(_M, "csd")
def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
        detrend="constant", return_onesided=True, scaling="density", axis=-1,
        average="mean"):
    """scipy's cross spectral density ``(frequencies, Pxy)``: the mean (or the
    median of the real and imaginary parts, with scipy's bias correction) over
    the segments of ``conj(X) Y``, the segments' real FFTs (:func:`_short_time`),
    one-sided; a shorter signal zero-padded to the other's length, as scipy's."""
    if not return_onesided:
        raise NotImplementedError("hybridad: scipy.signal.csd(return_onesided=False) of "
                                  "traced values is not supported")
    if average not in ("mean", "median"):
        raise ValueError(f"average must be 'median' or 'mean', got {average}")
    x, y = (_tracer(v) if is_traced((v,)) else np.asarray(v, dtype=np.float64) for v in (x, y))
    ax = _axis(axis, x.ndim)
    if np.shape(x) != np.shape(y):
        if x.ndim != 1 or y.ndim != 1:
            raise NotImplementedError("hybridad: scipy.signal.csd of traced signals of "
                                      "different shapes (beyond 1-D) is not supported")
        n = max(x.shape[0], y.shape[0])
        x, y = (np.pad(v, [(0, n - v.shape[0])]) for v in (x, y))
    parts = [_short_time(v, fs, window, nperseg, noverlap, nfft, detrend, True, None, False,
                         ax, "csd") for v in (x, y)]
    freqs, _, spec_x, win, nfft = parts[0]
    cross = np.conj(spec_x) * parts[1][2] * _scale(win, fs, scaling)
    cross = _one_sided(cross, ax, nfft)
    segments = cross.shape[-1]
    if average == "mean" or segments == 1:
        return freqs, np.mean(cross, axis=-1)
    bias = _median_bias(segments)
    return freqs, (np.median(np.real(cross), axis=-1) + 1j * np.median(np.imag(cross), axis=-1)) \
        / bias


@intercepts(_M, "coherence")
def coherence(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
              detrend="constant", axis=-1):
    """scipy's magnitude-squared coherence ``|Pxy|^2 / (Pxx Pyy)`` of Welch's
    estimates (:func:`welch`, :func:`csd`)."""
    freqs, pxx = welch(x, fs, window, nperseg, noverlap, nfft, detrend, axis=axis)
    _, pyy = welch(y, fs, window, nperseg, noverlap, nfft, detrend, axis=axis)
    _, pxy = csd(x, y, fs, window, nperseg, noverlap, nfft, detrend, axis=axis)
    return freqs, np.abs(pxy) ** 2 / pxx / pyy


@intercepts(_M, "periodogram")
def periodogram(x, fs=1.0, window="boxcar", nfft=None, detrend="constant",
                return_onesided=True, scaling="density", axis=-1):
    """``welch`` of one segment, the whole signal (as scipy's)."""
    n = np.shape(x)[axis]
    return welch(x, fs, window, n, 0, nfft, detrend, return_onesided, scaling, axis)


@intercepts(_M, "decimate")
def decimate(x, q, n=None, ftype="iir", axis=-1, zero_phase=True):
    """scipy's IIR decimation: its Chebyshev type I sections (order ``n``, 8 by
    default) run forward and backward (``zero_phase``) or forward, then every
    ``q``-th sample (``ftype='fir'`` and filter objects are refused)."""
    import operator

    from scipy.signal import cheby1

    if ftype != "iir":
        raise NotImplementedError("hybridad: scipy.signal.decimate of traced values with "
                                  f"ftype={ftype!r} is not supported (ftype='iir' is)")
    q = operator.index(q)
    n = 8 if n is None else operator.index(n)
    x = _tracer(x)
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    axis = _axis(axis, x.ndim)
    sos = cheby1(n, 0.05, 0.8 / q, output="sos").astype(x.dtype)
    y = sosfiltfilt(sos, x, axis=axis) if zero_phase else sosfilt(sos, x, axis=axis)
    return getitem(y, _axis_slice(axis, slice(None, None, q)))


@intercepts(_M, "resample")
def resample(x, num, t=None, axis=0, window=None, domain="time"):
    """scipy's Fourier resampling of a real signal: its real FFT's first
    ``min(num, n) // 2 + 1`` bins (the unpaired one doubled or halved, a window
    folded in as scipy's), back to ``num`` samples."""
    from scipy import fft as sp_fft
    from scipy.signal import get_window

    if domain != "time":
        raise NotImplementedError("hybridad: scipy.signal.resample(domain='freq') of traced "
                                  "values is not supported")
    x = _tracer(x)
    if x.dtype.kind == "c":
        raise NotImplementedError("hybridad: scipy.signal.resample of complex traced values is "
                                  "not supported")
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    axis = _axis(axis, x.ndim)
    xs = np.moveaxis(x, axis, -1)
    n_x, num = xs.shape[-1], int(num)
    s_fac = n_x / num
    m = min(num, n_x)
    m2 = m // 2 + 1
    spec = np.fft.rfft(xs, axis=-1)
    factors = np.ones(spec.shape[-1])
    if window is not None:
        if callable(window):
            w = np.asarray(window(sp_fft.fftfreq(n_x)), dtype=np.float64)
        elif hasattr(window, "shape"):
            if is_traced((window,)):
                raise NotImplementedError("hybridad: scipy.signal.resample with a traced "
                                          "window is not supported")
            w = np.array(window, dtype=np.float64)
        else:
            w = sp_fft.fftshift(get_window(window, n_x))
        n_spec = spec.shape[-1]
        w[1:n_spec] = (w[1:n_spec] + w[-n_spec + 1:][::-1]) / 2
        factors = factors * w[:n_spec]
    factors = factors[:m2]
    if m % 2 == 0 and num != n_x:
        factors[m // 2] *= 2 if num < n_x else 0.5
    out = np.fft.irfft(spec[..., :m2] * (factors / s_fac), n=num, axis=-1)
    out = np.moveaxis(out, -1, axis)
    if t is not None:
        return out, t[0] + (t[1] - t[0]) * s_fac * np.arange(num)
    return out


@intercepts(_M, "hilbert")
def hilbert(x, N=None, axis=-1):  # noqa: N803 - scipy's name
    """The analytic signal ``ifft(fft(x, N) h)``, ``h`` scipy's (1 at 0 and at
    N / 2, 2 between): a complex traced array (``np.abs`` its envelope)."""
    x = _tracer(x)
    if x.dtype.kind == "c":
        raise ValueError("x must be real.")
    axis = _axis(axis, x.ndim)
    n = x.shape[axis] if N is None else int(N)
    if n <= 0:
        raise ValueError("N must be positive.")
    h = np.zeros(n)
    if n % 2 == 0:
        h[0] = h[n // 2] = 1
        h[1:n // 2] = 2
    else:
        h[0] = 1
        h[1:(n + 1) // 2] = 2
    if x.ndim > 1:
        shape = [1] * x.ndim
        shape[axis] = n
        h = h.reshape(shape)
    return np.fft.ifft(np.fft.fft(x, n, axis=axis) * h, axis=axis)
