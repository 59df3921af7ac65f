"""Fourier transforms on the GPU program: the FFT ops' device runs.

The CPU backends call pocketfft into the result's buffer
(:mod:`hybridad.ops.fft`).  On the GPU program each op runs cupy's FFT
(cuFFT) of the operand viewed as complex and copies the transform into the
result's buffer, viewed as complex as well.  The run goes through
:class:`.linalg.Preallocated`, as the linear algebra's do: from its second
call on, cupy's result and cuFFT's work area come from the program's
workspace, so a call allocates no device memory; a CUDA graph records it
between its segments, as a library call.  On host arrays (the host
emulation) it is the CPU run.
"""

from __future__ import annotations

import numpy as np

from ..._xp import array_module
from ...ops.fft import complex_view, transform

__all__ = ["DEVICE_FFT"]


def _complex(xp, a):
    a = xp.ascontiguousarray(a)
    return a.view(np.complex64 if a.dtype == np.float32 else np.complex128)[..., 0]


def _device(kind):
    def run(out, x, *, norm, inverse=False, n=None):
        xp = array_module(out)
        if xp is np:
            transform(kind, out, x, norm=norm, inverse=inverse, n=n)
            return
        if kind == "irfft":
            out[...] = xp.fft.irfft(_complex(xp, x), n=n, axis=-1, norm=norm)
            return
        z = _complex(xp, x) if kind == "fft" else x
        fn = {"rfft": xp.fft.rfft, "fft": xp.fft.ifft if inverse else xp.fft.fft}[kind]
        target = complex_view(out)
        target[...] = fn(z, axis=-1, norm=norm)
    run.__name__ = f"{kind}_device"
    return run


#: op -> its device run (``run(out, x, **attrs)``)
DEVICE_FFT = {kind: _device(kind) for kind in ("fft", "rfft", "irfft")}
