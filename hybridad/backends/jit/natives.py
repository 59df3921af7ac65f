"""What numba's intrinsics do, done here: the numba backend's runtime
primitives (:mod:`hybridad.backends.numba.rt`: arrays at an address, loads,
the BLAS product) and its SIMD mark, with the same semantics.

BLAS is the one scipy ships (``scipy.linalg.cython_blas``, what numba's own
binding calls), reached through symbols the engine resolves when machine
code is loaded (:data:`.engine.SYMBOLS`).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from . import engine
from .values import (F32, F64, ArrayV, Const, CtypesOf, Scalar, TupleV, Unsupported, declare,
                     lltype, memtype)

__all__ = ["table"]

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_VOIDP = _I8.as_pointer()


def table():
    """id(object) -> implementation(frame, args, kwargs), for the objects
    generated code and library functions call that numba implements in LLVM."""
    import numba

    from ..numba import kparts, rt, simd
    from .parallel import thread_id

    t = {id(rt.view_at): view_at, id(rt._load): load, id(rt.gemm): gemm,
         id(rt.gemm_panel): gemm_panel, id(kparts.gemm_kpanel): gemm_kpanel,
         id(simd.prefer_wide): prefer_wide, id(simd.serial_loop): serial_loop,
         id(numba.get_thread_id): thread_id}
    nothing = getattr(simd, "_nothing", None)
    if nothing is not None:
        t[id(nothing)] = lambda frame, args, kwargs: Const(None)
    import sys

    profiling = sys.modules.get("hybridad.backends.numba.profiling")
    if profiling is not None:  # (imported by a profiled program: its timers' clock reads)
        for fn in (profiling.clock_ns, profiling.cpu_clock_ns):
            clock_id = getattr(fn, "clock_id", None)
            if clock_id is not None:
                t[id(fn)] = _clock(clock_id)
    special = sys.modules.get("hybridad.backends.numba.special")
    if special is not None:  # (imported by generated code that calls one)
        from ..numba import special_names as names

        for table_, nargs in ((names._CYTHON, 1), (names._CYTHON2, 2), (names._CYTHON3, 3)):
            for op, cname in table_.items():
                t[id(getattr(special, op))] = _special(cname, nargs)
        for op, cname in names._ORDER.items():
            t[id(getattr(special, f"_{op}_long"))] = _special(cname, 2, order=True)
    return t


def _clock(clock_id):
    """A clock read of :mod:`hybridad.backends.numba.profiling` (``clock_ns()``):
    ``clock_gettime(clock_id)`` in nanoseconds, as its numba intrinsic
    computes it -- so a profiled program compiles as the plan's own does."""
    def impl(frame, args, kwargs):
        if args or kwargs:
            raise Unsupported("a clock read takes no arguments")
        b = frame.b
        spec = frame.state.slot(ir.ArrayType(_I64, 2))  # struct timespec
        fn = declare(b.module, "clock_gettime", _I32, [_I32, spec.type])
        b.call(fn, [ir.Constant(_I32, clock_id), spec])
        zero = ir.Constant(_I32, 0)
        sec = b.load(b.gep(spec, [zero, zero]))
        nsec = b.load(b.gep(spec, [zero, ir.Constant(_I32, 1)]))
        return Scalar(b.add(b.mul(sec, ir.Constant(_I64, 1_000_000_000)), nsec),
                      np.dtype(np.int64))

    return impl


def _special(cname, nargs, order=False):
    """A scipy.special function of ``cython_special`` (``double f(double...,
    int skip_dispatch)``; with ``order``, ``double f(long n, double x, int)``),
    its arguments converted as the numba intrinsic converts them."""
    sym = f"hybridad_cython_special_{cname}"

    def impl(frame, args, kwargs):
        d = ir.DoubleType()
        kinds = [_I64, d] if order else [d] * nargs
        fn = declare(frame.b.module, sym, d, kinds + [_I32])
        from .values import I64 as _i64

        vals = [frame.ops.scalar(a, _i64 if (order and k == 0) else F64).value
                for k, a in enumerate(args)]
        return Scalar(frame.b.call(fn, vals + [ir.Constant(_I32, 0)]), F64)
    return impl


def _cython_special(cname):
    return _capsule_address(extension("scipy.special.cython_special"), cname)


engine.RESOLVERS.append(("hybridad_cython_special_", _cython_special))


def _dims(frame, shape):
    if isinstance(shape, TupleV):
        return [frame.arr.dim(d) for d in shape.items]
    if isinstance(shape, Const) and isinstance(shape.value, tuple):
        return [int(d) for d in shape.value]
    return [frame.arr.dim(shape)]


def view_at(frame, args, kwargs):
    """``rt.view_at(address, shape, dtype)``: the C array at an address."""
    address, shape, dtype = args
    if not isinstance(dtype, Const):
        raise Unsupported("view_at dtype")
    return frame.arr.from_address(frame.arr.dim(address), _dims(frame, shape),
                                  np.dtype(dtype.value))


def load(frame, args, kwargs):
    """``rt._load(address, ty)``: the value of type ``ty`` stored at an address."""
    address, ty = args
    dtype = np.dtype(ty.value)
    ptr = frame.b.inttoptr(frame.arr.i64(frame.arr.dim(address)), memtype(dtype).as_pointer())
    return Scalar(frame.b.load(ptr), dtype)


def prefer_wide(frame, args, kwargs):
    """``simd.prefer_wide()``: the function being built may use 512-bit vectors."""
    from ..numba.simd import ATTRIBUTE

    attrs = frame.state.fn.attributes
    set.add(attrs, ATTRIBUTE)
    return Const(None)


def serial_loop(frame, args, kwargs):
    """``simd.serial_loop()``: the innermost loop around the call is not to be
    vectorized (see :mod:`hybridad.backends.numba.simd`)."""
    frame.arr.serial()
    return Const(None)


# -- BLAS ---------------------------------------------------------------------------
def _capsule_address(module, name):
    capsule = module.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_ptr(capsule, get_name(capsule))


def extension(qualname):
    """The compiled extension module ``qualname`` (``scipy.linalg.cython_blas``)
    -- imported as usual when its package is, else loaded straight from its
    file (its package's ``__init__``, all of scipy.linalg, costs ~0.2 s at a
    plan's load for four function pointers; a later ``import scipy.linalg``
    finds the module loaded)."""
    import importlib
    import importlib.machinery
    import importlib.util
    import os
    import sys

    module = sys.modules.get(qualname)
    if module is not None:
        return module
    package, _, leaf = qualname.rpartition(".")
    if package in sys.modules:
        return importlib.import_module(qualname)
    try:
        top = importlib.util.find_spec(package.partition(".")[0])
        base = os.path.join(top.submodule_search_locations[0], *package.split(".")[1:])
        files = [f for f in os.listdir(base) if f.startswith(leaf + ".") and
                 any(f.endswith(x) for x in importlib.machinery.EXTENSION_SUFFIXES)]
        spec = importlib.util.spec_from_file_location(qualname, os.path.join(base, files[0]))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 -- any surprise: the usual import
        return importlib.import_module(qualname)
    return sys.modules.setdefault(qualname, module)


def _blas(name):
    def address():
        return _capsule_address(extension("scipy.linalg.cython_blas"), name)
    return address


for _n in ("dgemm", "sgemm", "dgemv", "sgemv"):
    engine.SYMBOLS[f"hybridad_{_n}"] = _blas(_n)


def _declare(frame, name, nargs):
    return declare(frame.b.module, name, ir.VoidType(), [_VOIDP] * nargs)


def _slot(frame, llty, value):
    """A stack slot (in the entry block) holding ``value``, as ``i8*``."""
    p = frame.state.slot(llty)
    frame.b.store(value, p)
    return frame.b.bitcast(p, _VOIDP)


def _gemm_operands(frame, a, b_, out, what):
    """``(dtype, BLAS kind letter, LLVM float type, m, k, n)`` of a gemm's
    2-D operands (``out`` C-contiguous, ``a`` and ``b_`` C or F, one float
    dtype); Unsupported naming ``what`` otherwise."""
    if not all(isinstance(x, ArrayV) and x.ndim == 2 for x in (a, b_, out)) or \
            out.layout != "C" or a.layout not in "CF" or b_.layout not in "CF" or \
            not (a.dtype == b_.dtype == out.dtype) or out.dtype not in (F64, F32):
        raise Unsupported(f"{what} operands")
    arr, dt = frame.arr, out.dtype
    m, k = (arr.i64(d) for d in a.shape)
    return dt, "d" if dt == F64 else "s", lltype(dt), m, k, arr.i64(b_.shape[1])


def gemm(frame, args, kwargs):
    """``rt.gemm(a, b, out, beta)``: ``out = a @ b + beta * out`` by BLAS, as the
    numba intrinsic does it (gemv for one column or one row; a small result
    over a long inner dimension in chunks of it, each chunk after the first
    accumulating)."""
    from ..numba import rt
    from ..numba.threshold import GEMM_SMALL_RESULT

    a, b_, out, beta = args
    dt, kind, fty, m, k, n = _gemm_operands(frame, a, b_, out, "gemm")
    bld = frame.b
    i32 = lambda v: bld.trunc(v, _I32) if v.type == _I64 else v  # noqa: E731
    ch = lambda c: _slot(frame, _I8, ir.Constant(_I8, ord(c)))  # noqa: E731
    ival = lambda v: _slot(frame, _I32, i32(v))  # noqa: E731
    alpha = _slot(frame, fty, ir.Constant(fty, 1.0))
    beta_v = frame.ops.scalar(beta, dt).value
    beta_p = _slot(frame, fty, beta_v)
    one_p = _slot(frame, fty, ir.Constant(fty, 1.0))
    one = ival(ir.Constant(_I64, 1))
    pa, pb, pout = (bld.bitcast(x.data, _VOIDP) for x in (a, b_, out))
    gemv = _declare(frame, f"hybridad_{kind}gemv", 11)
    gemm_fn = _declare(frame, f"hybridad_{kind}gemm", 13)
    zero64 = ir.Constant(_I64, 0)
    one64 = ir.Constant(_I64, 1)
    empty = bld.or_(bld.icmp_signed("==", m, zero64), bld.icmp_signed("==", n, zero64))
    with bld.if_then(bld.not_(empty), likely=True):
        with bld.if_else(bld.icmp_signed("==", n, one64)) as (col, not_col):
            with col:  # out[:, 0] = a @ b[:, 0]
                trans, rows, cols = ("t", k, m) if a.layout == "C" else ("n", m, k)
                bld.call(gemv, [ch(trans), ival(rows), ival(cols), alpha, pa, ival(rows), pb,
                                one, beta_p, pout, one])
            with not_col:
                with bld.if_else(bld.icmp_signed("==", m, one64)) as (row, general):
                    with row:  # out[0, :] = b^T @ a[0, :]
                        trans, rows, cols = ("n", n, k) if b_.layout == "C" else ("t", k, n)
                        bld.call(gemv, [ch(trans), ival(rows), ival(cols), alpha, pb,
                                        ival(rows), pa, one, beta_p, pout, one])
                    with general:
                        _gemm_general(frame, gemm_fn, a, b_, (m, k, n), (pa, pb, pout),
                                      alpha, beta_p, one_p, ch, ival, dt, rt, GEMM_SMALL_RESULT)
    return Const(None)


def _gemm_general(frame, gemm_fn, a, b_, dims, ptrs, alpha, beta_p, one_p, ch, ival, dt, rt,
                  small_result):
    """Column-major ``out^T = b^T a^T``: one call, or chunks of k for a small
    result and a long k (rt's GEMM_CHUNK_BYTES, GEMM_CHUNK_MIN, GEMM_CHUNKS_MIN)."""
    bld = frame.b
    m, k, n = dims
    pa, pb, pout = ptrs
    ta, lda = ("n", n) if b_.layout == "C" else ("t", k)
    tb, ldb = ("n", k) if a.layout == "C" else ("t", m)
    c = lambda v: ir.Constant(_I64, v)  # noqa: E731
    itemsize = dt.itemsize

    def call(pa_, pb_, kk, beta):
        bld.call(gemm_fn, [ch(ta), ch(tb), ival(n), ival(m), ival(kk), alpha, pb_, ival(lda),
                           pa_, ival(ldb), beta, pout, ival(n)])
    chunk = bld.sdiv(c(rt.GEMM_CHUNK_BYTES), bld.mul(bld.add(m, n), c(itemsize)))
    chunk = bld.select(bld.icmp_signed("<", chunk, c(rt.GEMM_CHUNK_MIN)), c(rt.GEMM_CHUNK_MIN),
                       chunk)
    split = bld.and_(bld.icmp_signed("<=", bld.mul(m, n), c(small_result)),
                     bld.icmp_signed(">=", k, bld.mul(chunk, c(rt.GEMM_CHUNKS_MIN))))
    with bld.if_else(split) as (chunked, whole):
        with whole:
            call(pa, pb, k, beta_p)
        with chunked:
            pre = bld.block
            head = bld.append_basic_block("gemm.k")
            body = bld.append_basic_block("gemm.kbody")
            done = bld.append_basic_block("gemm.kdone")
            bld.branch(head)
            bld.position_at_end(head)
            s = bld.phi(_I64)
            s.add_incoming(c(0), pre)
            bld.cbranch(bld.icmp_signed("<", s, k), body, done)
            bld.position_at_end(body)
            kk = bld.sub(k, s)
            kk = bld.select(bld.icmp_signed("<", chunk, kk), chunk, kk)
            off_a = s if a.layout == "C" else bld.mul(s, m)
            off_b = bld.mul(s, n) if b_.layout == "C" else s
            size = c(itemsize)
            pa_s = bld.gep(pa, [bld.mul(off_a, size)])
            pb_s = bld.gep(pb, [bld.mul(off_b, size)])
            first = bld.icmp_signed("==", s, c(0))
            call(pa_s, pb_s, kk, bld.select(first, beta_p, one_p))
            s.add_incoming(bld.add(s, chunk), bld.block)
            bld.branch(head)
            bld.position_at_end(done)


def gemm_panel(frame, args, kwargs):
    """``rt.gemm_panel(a, b, out, beta, lo, hi, cols)``: rows (or, with
    ``cols``, columns) ``lo:hi`` of ``out = a @ b + beta * out`` by one BLAS
    gemm, the leading dimensions the whole arrays' (as the numba intrinsic)."""
    a, b_, out, beta, lo, hi, cols = args
    dt, kind, fty, m, k, n = _gemm_operands(frame, a, b_, out, "gemm_panel")
    bld, arr = frame.b, frame.arr
    p0 = arr.i64(arr.dim(lo))
    width = bld.sub(arr.i64(arr.dim(hi)), p0)
    by_cols = frame.ops.truth(cols)
    by_cols = by_cols.value if isinstance(by_cols, Scalar) else \
        ir.Constant(ir.IntType(1), int(by_cols.value))
    i32 = lambda v: bld.trunc(v, _I32)  # noqa: E731
    ch = lambda c: _slot(frame, _I8, ir.Constant(_I8, ord(c)))  # noqa: E731
    ival = lambda v: _slot(frame, _I32, i32(v))  # noqa: E731
    alpha = _slot(frame, fty, ir.Constant(fty, 1.0))
    beta_p = _slot(frame, fty, frame.ops.scalar(beta, dt).value)
    gemm_fn = _declare(frame, f"hybridad_{kind}gemm", 13)
    ta, lda = ("n", n) if b_.layout == "C" else ("t", k)
    tb, ldb = ("n", k) if a.layout == "C" else ("t", m)
    zero = ir.Constant(_I64, 0)
    off_a = p0 if a.layout == "F" else bld.mul(p0, k)
    off_b = p0 if b_.layout == "C" else bld.mul(p0, k)
    size = ir.Constant(_I64, dt.itemsize)

    def at(ptr, off):
        return bld.gep(bld.bitcast(ptr, _VOIDP), [bld.mul(off, size)])
    pa = at(a.data, bld.select(by_cols, zero, off_a))
    pb = at(b_.data, bld.select(by_cols, off_b, zero))
    pout = at(out.data, bld.select(by_cols, p0, bld.mul(p0, n)))
    bld.call(gemm_fn, [ch(ta), ch(tb), ival(bld.select(by_cols, width, n)),
                       ival(bld.select(by_cols, m, width)), ival(k), alpha, pb, ival(lda), pa,
                       ival(ldb), beta_p, pout, ival(n)])
    return Const(None)


def gemm_kpanel(frame, args, kwargs):
    """``kparts.gemm_kpanel(a, b, parts, lo, hi, row0)``: ``parts[row0:row0 + m] =
    a[:, lo:hi] @ b[lo:hi]`` by one BLAS gemm, the leading dimensions the whole
    arrays' (as the numba intrinsic)."""
    a, b_, parts, lo, hi, row0 = args
    dt, kind, fty, m, k, n = _gemm_operands(frame, a, b_, parts, "gemm_kpanel")
    bld, arr = frame.b, frame.arr
    p0 = arr.i64(arr.dim(lo))
    width = bld.sub(arr.i64(arr.dim(hi)), p0)
    r0 = arr.i64(arr.dim(row0))
    i32 = lambda v: bld.trunc(v, _I32)  # noqa: E731
    ch = lambda c: _slot(frame, _I8, ir.Constant(_I8, ord(c)))  # noqa: E731
    ival = lambda v: _slot(frame, _I32, i32(v))  # noqa: E731
    alpha = _slot(frame, fty, ir.Constant(fty, 1.0))
    beta_p = _slot(frame, fty, ir.Constant(fty, 0.0))
    gemm_fn = _declare(frame, f"hybridad_{kind}gemm", 13)
    ta, lda = ("n", n) if b_.layout == "C" else ("t", k)
    tb, ldb = ("n", k) if a.layout == "C" else ("t", m)
    off_a = p0 if a.layout == "C" else bld.mul(p0, m)
    off_b = bld.mul(p0, n) if b_.layout == "C" else p0
    size = ir.Constant(_I64, dt.itemsize)

    def at(ptr, off):
        return bld.gep(bld.bitcast(ptr, _VOIDP), [bld.mul(off, size)])
    pa, pb, pout = at(a.data, off_a), at(b_.data, off_b), at(parts.data, bld.mul(r0, n))
    bld.call(gemm_fn, [ch(ta), ch(tb), ival(n), ival(m), ival(width), alpha, pb, ival(lda), pa,
                       ival(ldb), beta_p, pout, ival(n)])
    return Const(None)


# -- numba's external functions (LAPACK helpers, scipy's routines) -------------------------
def _numba_lltype(t):
    """The LLVM type of a numba type in an external function's signature."""
    name = str(t)
    if name in ("void*", "voidptr"):
        return _VOIDP
    if name == "none":
        return ir.VoidType()
    try:
        return lltype(np.dtype(name))
    except (TypeError, Unsupported):
        raise Unsupported(f"external function argument of type {name}") from None


def external_call(frame, fn, args):
    """A call of a ``numba.types.ExternalFunction`` (a C symbol and its
    signature): numbers converted to the parameter types, an array's
    ``.ctypes`` (or data address) where a pointer is taken."""
    sig = fn.sig
    if len(args) != len(sig.args):
        raise Unsupported(f"{fn.symbol}: argument count")
    ptys = [_numba_lltype(t) for t in sig.args]
    rty = _numba_lltype(sig.return_type)
    decl = declare(frame.b.module, fn.symbol, rty, ptys)
    vals = []
    for a, t, pt in zip(args, sig.args, ptys, strict=True):
        if pt == _VOIDP:
            if isinstance(a, Const) and isinstance(a.value, CtypesOf):
                vals.append(frame.b.bitcast(a.value.array.data, _VOIDP))
            elif isinstance(a, ArrayV):
                vals.append(frame.b.bitcast(a.data, _VOIDP))
            else:
                vals.append(frame.b.inttoptr(frame.arr.i64(frame.arr.dim(a)), _VOIDP))
        else:
            vals.append(frame.ops.scalar(a, np.dtype(str(t))).value)
    r = frame.b.call(decl, vals)
    if isinstance(rty, ir.VoidType):
        return Const(None)
    return Scalar(r, np.dtype(str(sig.return_type)))
