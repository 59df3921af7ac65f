"""pocketfft's loops, numpy's FFT, called from compiled code.

numpy computes its FFTs in the generalized ufuncs of
``numpy.fft._pocketfft_umath`` (``fft``, ``ifft``, ``rfft_n_even``,
``rfft_n_odd``, ``irfft``).  Each ufunc keeps its inner loops as C function
pointers, ``loop(args, dimensions, steps, data)`` -- numpy's public calling
convention for ufunc loops (``PyUFuncGenericFunction``), in the ufunc
object's public struct (``PyUFuncObject``: ``functions``, ``data``).  This
module makes the float64 and float32 loops symbols compiled code can call
(``hybridad_pocketfft_<ufunc>_<d|f>``, as :mod:`.lapack` does scipy's
LAPACK), so a compiled plan runs numpy's own transform, into its buffer,
without object mode and without the GIL: the same bits as the reference
backend, which calls the ufuncs.

A loop's ``data`` is the address of a constant of numpy's module (the
transform's direction); compiled code that is cached on disk must not hold
an address, so the kernel passes the address of a copy of that constant's
bytes in its workspace instead.  On import, each loop is called through
ctypes in exactly that way and compared, bit for bit, with the ufunc called
by numpy; only if every loop agrees (and the struct reads as the ufunc
describes itself) is :data:`AVAILABLE` true.  Otherwise the numba backend
calls the op's reference run in object mode.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import binding as _llvm
from numba import njit, types

from .._libcache import install
from .fft import WORK_BYTES, loop

__all__ = ["AVAILABLE", "FLAGS", "UFUNCS", "WORK_BYTES", "pocketfft_lines", "ufunc_code"]

#: the ufuncs, in the order of their codes in :func:`pocketfft_lines`
UFUNCS = ("fft", "ifft", "rfft_n_even", "rfft_n_odd", "irfft")
_TYPES = {"d": (0, {"fft": "Dd->D", "ifft": "Dd->D", "irfft": "Dd->d"}, "dd->D"),
          "f": (1, {"fft": "Ff->F", "ifft": "Ff->F", "irfft": "Ff->f"}, "ff->F")}
#: (ufunc, type letter) -> the 8 bytes at the loop's ``data`` (an int64; 0 where
#: it is NULL)
FLAGS = {}


def _loops(uf):
    """``[(function address, data address or 0)]`` of ufunc ``uf``, read from its
    PyUFuncObject (public struct: after PyObject_HEAD, ``int nin, nout, nargs,
    identity``, then ``functions``, ``data``, ``int ntypes``, ``reserved1``,
    ``const char *name``); None where it does not read as ``uf`` describes itself."""
    head = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    base = id(uf)
    nin, nout, nargs = (ctypes.c_int.from_address(base + head + 4 * k).value for k in range(3))
    ptr = ctypes.sizeof(ctypes.c_void_p)
    at = base + head + 16
    functions = ctypes.c_void_p.from_address(at).value
    data = ctypes.c_void_p.from_address(at + ptr).value
    ntypes = ctypes.c_int.from_address(at + 2 * ptr).value
    name = ctypes.c_char_p.from_address(at + 2 * ptr + 8).value
    if (nin, nout, nargs, ntypes) != (uf.nin, uf.nout, uf.nargs, uf.ntypes) or \
            name != uf.__name__.encode() or not functions:
        return None
    return [(ctypes.c_void_p.from_address(functions + ptr * k).value,
             (ctypes.c_void_p.from_address(data + ptr * k).value or 0) if data else 0)
            for k in range(ntypes)]


_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)


def _through_loop(fn, flag, x, fct, out):
    """``out`` of the loop at ``fn`` on 2-D ``x`` (lines, core), as compiled code calls it."""
    args = (ctypes.c_void_p * 3)(x.ctypes.data, fct.ctypes.data, out.ctypes.data)
    dims = (ctypes.c_ssize_t * 3)(x.shape[0], x.shape[1], out.shape[1])
    steps = (ctypes.c_ssize_t * 5)(x.strides[0], 0, out.strides[0], x.strides[1],
                                   out.strides[1])
    data = ctypes.c_int64(flag)
    _CALL(fn)(ctypes.addressof(args), ctypes.addressof(dims), ctypes.addressof(steps),
              ctypes.addressof(data))


def _agrees(pfu, name, letter, fn, flag):
    """Whether the loop at ``fn`` computes what numpy's ufunc does, bit for bit,
    on a small sample (two lines, strided, of an even and an odd length)."""
    real = np.dtype(np.float64 if letter == "d" else np.float32)
    cplx = np.dtype(np.complex128 if letter == "d" else np.complex64)
    rng = np.random.default_rng(7)
    for n in ((6, 5) if name not in ("rfft_n_even", "rfft_n_odd") else
              ((6,) if name == "rfft_n_even" else (5,))):
        m = n // 2 + 1
        if name in ("fft", "ifft"):
            src = (rng.standard_normal((2, 2 * n)) + 1j * rng.standard_normal((2, 2 * n)))
            x, shape, dt = src.astype(cplx)[:, ::2], (2, n), cplx
        elif name == "irfft":
            src = rng.standard_normal((2, m)) + 1j * rng.standard_normal((2, m))
            x, shape, dt = src.astype(cplx), (2, n), real
        else:
            x, shape, dt = rng.standard_normal((2, n)).astype(real), (2, m), cplx
        fct = np.asarray(0.75, real)
        want, got = np.zeros(shape, dt), np.zeros(shape, dt)
        getattr(pfu, name)(x, fct, out=want)
        _through_loop(fn, flag, x, fct, got)
        if not np.array_equal(want.view(real), got.view(real)):
            return False
    return True


def _register():
    """Bind the loops' symbols and fill :data:`FLAGS`; whether every loop agrees."""
    try:
        from numpy.fft import _pocketfft_umath as pfu
    except ImportError:
        return False
    found = {}
    for name in UFUNCS:
        uf = getattr(pfu, name, None)
        loops = None if uf is None else _loops(uf)
        if loops is None:
            return False
        for letter, (index, signatures, real_in) in _TYPES.items():
            if index >= len(loops) or uf.types[index] != signatures.get(name, real_in):
                return False
            fn, data = loops[index]
            flag = ctypes.c_int64.from_address(data).value if data else 0
            if not fn or not _agrees(pfu, name, letter, fn, flag):
                return False
            found[(name, letter)] = (fn, flag)
    for (name, letter), (fn, flag) in found.items():
        _llvm.add_symbol(f"hybridad_pocketfft_{name}_{letter}", fn)
        FLAGS[(name, letter)] = flag
    return True


#: whether compiled code calls pocketfft's loops (:func:`pocketfft_lines`)
AVAILABLE = _register()


def ufunc_code(kind, inverse, n, dtype):
    """``(code, flag)`` of the loop an op runs (:func:`.fft.loop`): its ufunc's
    index in :data:`UFUNCS` (plus 8 for float32) and its direction's bytes."""
    name = loop(kind, inverse, n)
    letter = "f" if np.dtype(dtype) == np.float32 else "d"
    return UFUNCS.index(name) + (8 if letter == "f" else 0), FLAGS[(name, letter)]


_SIG = types.void(types.voidptr, types.voidptr, types.voidptr, types.voidptr)
_fft_d = types.ExternalFunction("hybridad_pocketfft_fft_d", _SIG)
_ifft_d = types.ExternalFunction("hybridad_pocketfft_ifft_d", _SIG)
_rfft_even_d = types.ExternalFunction("hybridad_pocketfft_rfft_n_even_d", _SIG)
_rfft_odd_d = types.ExternalFunction("hybridad_pocketfft_rfft_n_odd_d", _SIG)
_irfft_d = types.ExternalFunction("hybridad_pocketfft_irfft_d", _SIG)
_fft_f = types.ExternalFunction("hybridad_pocketfft_fft_f", _SIG)
_ifft_f = types.ExternalFunction("hybridad_pocketfft_ifft_f", _SIG)
_rfft_even_f = types.ExternalFunction("hybridad_pocketfft_rfft_n_even_f", _SIG)
_rfft_odd_f = types.ExternalFunction("hybridad_pocketfft_rfft_n_odd_f", _SIG)
_irfft_f = types.ExternalFunction("hybridad_pocketfft_irfft_f", _SIG)


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True, nogil=True)
def pocketfft_lines(code, flag, x, out, work, scale_at, fct, lines, n_in, n_out, x_line,
                    x_step, out_line, out_step):
    """``lines`` transforms by the loop ``code`` (:func:`ufunc_code`): line ``l``
    reads ``n_in`` entries of ``x`` from byte ``l * x_line`` in steps of
    ``x_step`` bytes and writes ``n_out`` of ``out`` likewise, scaled by
    ``fct``.  ``work`` (1-D, contiguous, at least :data:`WORK_BYTES`) holds the
    loop's arguments; ``scale_at`` is the element of ``work`` where the scale
    goes (byte 96)."""
    ints = work.view(np.int64)
    work[scale_at] = fct
    ints[0] = x.ctypes.data
    ints[1] = work[scale_at:].ctypes.data
    ints[2] = out.ctypes.data
    ints[3], ints[4], ints[5] = lines, n_in, n_out
    ints[6], ints[7], ints[8], ints[9], ints[10] = x_line, 0, out_line, x_step, out_step
    ints[11] = flag
    a, d, s, f = ints.ctypes, ints[3:].ctypes, ints[6:].ctypes, ints[11:].ctypes
    if code == 0:
        _fft_d(a, d, s, f)
    elif code == 1:
        _ifft_d(a, d, s, f)
    elif code == 2:
        _rfft_even_d(a, d, s, f)
    elif code == 3:
        _rfft_odd_d(a, d, s, f)
    elif code == 4:
        _irfft_d(a, d, s, f)
    elif code == 8:
        _fft_f(a, d, s, f)
    elif code == 9:
        _ifft_f(a, d, s, f)
    elif code == 10:
        _rfft_even_f(a, d, s, f)
    elif code == 11:
        _rfft_odd_f(a, d, s, f)
    else:
        _irfft_f(a, d, s, f)
