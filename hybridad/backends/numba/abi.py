"""Where numpy's array struct keeps the fields the compiled plan reads
(:data:`ABI`), found on live arrays without importing numba: the memory plan
asks whether arrays can be passed by object before any numba code exists.
:mod:`.rt` holds the kernels that read them."""

from __future__ import annotations

__all__ = ["ABI", "ABI_FIELDS", "ALIGNED", "BAD_ARRAY", "BAD_SHAPE", "C_CONTIGUOUS", "DIMS",
           "F_CONTIGUOUS", "FLAGS", "NBYTES", "NDIM", "OBJ", "OVERLAP", "RECORD", "TYPE1",
           "TYPE2", "WRITEABLE", "WRITTEN"]


# ----------------------------------------------------------------------------
# arrays passed as objects: the compiled plan reads numpy's array struct
# ----------------------------------------------------------------------------
#
# Even an int-typed argument is cheap to pass, so the compiled plan takes every
# array it reads or writes as ``id(array)`` and reads the PyArrayObject fields
# itself -- type, data pointer, ndim, dimensions, flags, the dtype's type number
# and byte order -- exactly as numpy's C macros (PyArray_DATA, PyArray_DIMS,
# PyArray_FLAGS, PyArray_DESCR) do.  These fields are part of numpy's stable
# C ABI; :func:`_probe_abi` still finds their offsets on live arrays at import
# and verifies them, and the numba backend falls back to passing arrays
# (one NRT allocation each) if anything does not match (``ABI is None``).


def _probe_abi():
    """Offsets (bytes) of the fields the compiled plan reads, found on live
    objects and cross-checked; None when they cannot be established."""
    import ctypes
    import sys

    import numpy as np

    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        a = np.arange(6.0).reshape(2, 3)
        words = list((ctypes.c_int64 * 12).from_address(id(a)))  # well inside the struct
        data = words.index(a.ctypes.data) * 8
        type_off = words.index(id(np.ndarray)) * 8
        offs = {"type": type_off, "data": data, "ndim": data + 8, "dims": data + 16,
                "descr": data + 40, "flags": data + 48}
        descr_words = list((ctypes.c_int32 * 8).from_address(id(np.dtype(np.float64))))
        type_num = descr_words.index(np.dtype(np.float64).num) * 4
        offs["type_num"] = type_num
        offs["byteorder"] = type_num - 2  # kind, type, byteorder, flags, type_num

        def i64(addr):
            return ctypes.c_int64.from_address(addr).value

        def i32(addr):
            return ctypes.c_int32.from_address(addr).value

        def u8(addr):
            return ctypes.c_uint8.from_address(addr).value

        for arr in (a, np.zeros((4, 5, 1), np.float32).T, np.ones(3, ">f8"),
                    np.zeros((), np.int64), np.zeros(7, np.uint8)[1:]):
            p = id(arr)
            ok = (i64(p + offs["type"]) == id(np.ndarray)
                  and i64(p + offs["data"]) == arr.ctypes.data
                  and i32(p + offs["ndim"]) == arr.ndim
                  and all(i64(i64(p + offs["dims"]) + 8 * d) == s
                          for d, s in enumerate(arr.shape))
                  and i64(p + offs["descr"]) == id(arr.dtype)
                  and i32(p + offs["flags"]) == arr.flags.num
                  and i32(id(arr.dtype) + offs["type_num"]) == arr.dtype.num
                  and chr(u8(id(arr.dtype) + offs["byteorder"])) == arr.dtype.byteorder)
            if not ok:
                return None
        return offs
    except Exception:  # noqa: BLE001 -- any surprise: pass arrays instead
        return None


ABI = _probe_abi()
#: the order of :data:`ABI`'s offsets in the tuple generated code embeds, then
#: the byte-order character of non-native arrays
ABI_FIELDS = ("type", "data", "ndim", "dims", "descr", "flags", "type_num", "byteorder")
if ABI is not None:
    import sys as _sys

    ABI["foreign"] = ord(">" if _sys.byteorder == "little" else "<")
    ABI_FIELDS += ("foreign",)


#: numpy's flag bits (ndarraytypes.h)
C_CONTIGUOUS, F_CONTIGUOUS, ALIGNED, WRITEABLE = 0x1, 0x2, 0x100, 0x400

# the check table of :func:`.rt.check_arrays` (one record of RECORD int64 per
# array, then the expected dimensions)
RECORD = 8
#: record fields: the object (or data address), ndim, required flags, two
#: accepted type numbers, bytes, whether it is written, offset of its dims
OBJ, NDIM, FLAGS, TYPE1, TYPE2, NBYTES, WRITTEN, DIMS = range(RECORD)
#: check_arrays' verdicts (with the failing array's index j: 4 j + verdict)
BAD_ARRAY, BAD_SHAPE, OVERLAP = 0, 1, 2
