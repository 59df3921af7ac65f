"""hybridad's own compiler for the numba backend's generated source.

The numba backend writes each plan as Python source in numba's dialect
(:mod:`hybridad.backends.numba.program`).  numba compiles it in 0.5-3 s,
most of it numba's own Python (type inference, lowering) and a fixed cost
per process (its registries, ~0.4 s).  The source is narrow: arrays cut at
known addresses with known shapes, loops, scalar arithmetic, calls to a few
library functions.  This package translates that subset straight to LLVM IR
(:mod:`.translate`, :mod:`.exprs`, :mod:`.scalars`, :mod:`.arrays`,
:mod:`.natives`), optimizes it with the same LLVM pipeline numba uses and
loads the machine code (:mod:`.engine`): a plan compiles in tenths of a
second, loads from the disk cache in milliseconds, and is called through an
entry point of its own (:mod:`.wrapper`) for less than numba's dispatch.

Semantics are numba's, construct by construct (the modules say where each
comes from): ``prange`` loops on numba's threads (:mod:`.parallel`), BLAS,
LAPACK and scipy.special kernels (:mod:`.natives`), object mode's calls back
into Python -- a loop's runner, a host call -- (:mod:`.sites`).  Source using
anything else (complex numbers, arrays allocated in the function, object mode
with typed results) raises :class:`~.values.Unsupported` and the numba
backend compiles it with numba as before.  Which compiler serves a program
is decided by its source alone, never by timing or cache state, so a plan's
results are the same bits cold or warm.  ``HYBRIDAD_JIT=0`` sends every program to numba.
"""

from __future__ import annotations

import json
import os
import re
import threading

from .values import Unsupported

__all__ = ["BodyFailed", "Unsupported", "compile_function", "compiler_of", "enabled",
           "loop_driver", "native", "refused"]

_IMPORTS = re.compile(r"^from (hybridad(?:\.\w+)*) import", re.MULTILINE)
_COMPILED = {}  # key -> callable, for the life of the process
_LOCK = threading.Lock()


def enabled():
    """Whether programs are offered to this compiler (``HYBRIDAD_JIT``, default on:
    :func:`..switches.jit_enabled`)."""
    from ..switches import jit_enabled

    return jit_enabled()


_REFUSED = {}  # source -> why numba compiles it (the last 64)


def refused(fn_name, why, source=None):
    """Note that numba compiles ``fn_name`` (``why``: an :class:`Unsupported`):
    kept for :func:`compiler_of`, printed on stderr under
    ``HYBRIDAD_JIT_DEBUG=1``, appended to the file ``HYBRIDAD_JIT_LOG``."""
    if source is not None:
        if len(_REFUSED) >= 64:
            _REFUSED.pop(next(iter(_REFUSED)))
        _REFUSED[source] = str(why)
    log = os.environ.get("HYBRIDAD_JIT_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{fn_name}\t{why}\n")
    if os.environ.get("HYBRIDAD_JIT_DEBUG"):
        import sys

        print(f"hybridad jit: {fn_name} compiled by numba: {why}", file=sys.stderr)
        if os.environ.get("HYBRIDAD_JIT_DEBUG") == "2":
            import traceback

            traceback.print_exception(why, file=sys.stderr)


def _key(source, fn_name, nargs):
    from ..._sources import library_digest
    from . import engine

    modules = tuple(sorted(set(_IMPORTS.findall(source)) | {__name__ + ".module"}))
    return engine.object_key(source, fn_name, str(nargs), library_digest(modules))


def compile_function(source, fn_name, nargs, namespace):
    """A callable running function ``fn_name`` of generated ``source``,
    taking ``nargs`` integers; ``namespace()`` gives the executed module's
    names (called only when the code is not in the disk cache).

    Raises
    ------
    Unsupported
        The source uses what this compiler does not translate (numba
        compiles it instead).
    """
    # (natives and parallel: the symbols they resolve, registered at import)
    from . import engine, natives, parallel, shared, sites, wrapper  # noqa: F401
    from .module import Translator

    key = _key(source, fn_name, nargs)
    fn = _COMPILED.get(key)
    if fn is not None:
        return fn
    with engine.LOCK:
        fn = _COMPILED.get(key)
        if fn is not None:
            return fn
        blob = engine.cached_object(key)
        meta = obj = None
        if blob is not None:
            head, _, obj = blob.partition(b"\n")
            try:
                meta = json.loads(head)
            except ValueError:
                meta = obj = None
            # (the library functions it calls, objects of their own: gone from
            # the cache, the program is compiled again, which makes them)
            if meta is not None and not shared.load_symbols(meta.get("symbols", ())):
                meta = obj = None
        if obj is not None:
            try:
                cells, keep = sites.bind_sites(meta.get("sites"), namespace)
            except sites.StaleNest:  # (an inner loop's runner is not the one it was made for)
                meta = obj = None
        if obj is None:
            translator = Translator(source, namespace())
            text, entry, symbols = translator.translate(fn_name, nargs, key[:16])
            obj = engine.compile_ir(text)
            meta = {"entry": entry, "native": entry[:-3], "symbols": symbols,
                    "sites": translator.sites}
            engine.store_object(key, json.dumps(meta).encode() + b"\n" + obj)
            cells, keep = sites.bind_sites(meta.get("sites"), namespace)
        addresses = engine.load_object(obj, meta["symbols"], [meta["entry"], meta["native"]],
                                       cells)
        fn = wrapper.make_callable(addresses[meta["entry"]], fn_name)
        _NATIVE[id(fn)] = (addresses[meta["native"]], nargs, fn)
        _SITES[id(fn)] = keep
        _COMPILED[key] = fn
        return fn


_NATIVE = {}  # id(callable) -> (address of the function itself, its arity, the callable)
_SITES = {}  # id(callable) -> the objects its object-mode sites reach (kept with the code)

#: seconds this compiler takes per line of generated code (translation and
#: LLVM, measured on the reference machine: the benchmarks' plans, 1-2 ms a
#: line), for the compile budget (:func:`hybridad.backends.numba.split.check_budget`)
COMPILE_S_PER_LINE = 0.002


def cached(source, fn_name, nargs):
    """Whether the machine code of ``fn_name`` of ``source`` is in this
    process or the disk cache (a load takes milliseconds)."""
    from . import engine

    key = _key(source, fn_name, nargs)
    return key in _COMPILED or engine.has_object(key)


def compiler_of(fn, source):
    """Which compiler made ``fn`` (a program's compiled function) from
    ``source``, in words (``explain()``)."""
    if native(fn) is not None:
        return "hybridad's own compiler (LLVM)"
    why = _REFUSED.get(source)
    if why is None and not enabled():
        why = "HYBRIDAD_JIT=0"
    return "numba" + (f" (hybridad's compiler refused it: {why})" if why else "")


def native(fn):
    """The machine-code address of a function :func:`compile_function` made
    (``int32 f(int64 * nargs)``: 0, or the number of the exception raised),
    or None for anything else (a numba dispatcher)."""
    got = _NATIVE.get(id(fn))
    return got[0] if got is not None and got[2] is fn else None


def loop_driver(nargs):
    """``drive(plan, count, address, copies, n_before, n_after, data)``: the
    function at ``address`` (:func:`native`, ``nargs`` int64 arguments)
    called ``count`` times, each iteration's arguments computed from the
    ``int64[nargs, 5]`` table at address ``plan`` -- the loop of a rolled
    loop's iterations in machine code, no dispatch per iteration, and a
    table whose size does not depend on the trip count.  Row ``j`` of the
    table, ``(obj, alt, base, step, moves)``, makes argument ``j`` of
    iteration ``t`` ``obj + (t & 1) * alt`` (a value, or the ``id()`` of an
    array: the carries alternate between two buffers); where ``moves`` is
    nonzero, the data address of that array (the int64 at offset ``data`` of
    the object: numpy's array struct) is first set to ``base + t * step`` --
    one view object of the runner's serves every row of an ``xs`` or a
    per-iteration output.  ``copies``: the address of an int64 table of
    ``(destination, source, bytes)`` rows, the first ``n_before`` copied
    before the first iteration (the initial carries), the next ``n_after``
    after the last (the final carries); 0, 0, 0 for none.  A nonzero status
    stops it with :class:`BodyFailed` (an exception the body raised into
    Python, status -1, passes as it is)."""
    from llvmlite import ir

    from . import engine, wrapper

    name = f"drive{nargs}"
    key = engine.object_key("loop driver", str(nargs), FORMAT_DRIVER)
    got = _COMPILED.get(key)
    if got is not None:
        return got
    with engine.LOCK:
        blob = engine.cached_object(key)
        if blob is None:
            _, layout, triple = engine.target()
            module = ir.Module(name="hybridad_driver")
            module.triple, module.data_layout = triple, layout
            i32, i64 = ir.IntType(32), ir.IntType(64)
            body_t = ir.FunctionType(i32, [i64] * nargs)
            fn = ir.Function(module, ir.FunctionType(i32, [i64] * 7), name=f"{name}_{key[:16]}")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            tab, count, address, copies, n_before, n_after, data = fn.args
            body = b.inttoptr(address, body_t.as_pointer())
            rows = b.inttoptr(tab, i64.as_pointer())
            cells = [[b.load(b.gep(rows, [ir.Constant(i64, 5 * j + c)])) for c in range(5)]
                     for j in range(nargs)]
            _copy_rows(b, copies, ir.Constant(i64, 0), n_before)
            head, loop, done = (fn.append_basic_block(n) for n in ("head", "loop", "done"))
            pre = b.block
            b.branch(head)
            b.position_at_end(head)
            t = b.phi(i64)
            t.add_incoming(ir.Constant(i64, 0), pre)
            b.cbranch(b.icmp_signed("<", t, count), loop, done)
            b.position_at_end(loop)
            odd = b.and_(t, ir.Constant(i64, 1))
            args = []
            for obj, alt, base, step, moves in cells:
                arg = b.add(obj, b.mul(odd, alt))
                with b.if_then(b.icmp_signed("!=", moves, ir.Constant(i64, 0))):
                    field = b.inttoptr(b.add(arg, data), i64.as_pointer())
                    b.store(b.add(base, b.mul(t, step)), field)
                args.append(arg)
            status = b.call(body, args)
            with b.if_then(b.icmp_signed("!=", status, ir.Constant(i32, 0)), likely=False):
                b.ret(status)
            t.add_incoming(b.add(t, ir.Constant(i64, 1)), b.block)
            b.branch(head)
            b.position_at_end(done)
            _copy_rows(b, copies, n_before, b.add(n_before, n_after))
            b.ret(ir.Constant(i32, 0))

            class _Module:  # what python_entry reads of a translator
                raises = []

            holder = _Module()
            holder.module = module
            entry = wrapper.python_entry(holder, fn, 7, True, BodyFailed)
            obj = engine.compile_ir(str(module), glue=True)
            meta = {"entry": entry, "symbols": sorted(engine.external_symbols(module))}
            engine.store_object(key, json.dumps(meta).encode() + b"\n" + obj)
        else:
            head_, _, obj = blob.partition(b"\n")
            meta = json.loads(head_)
        addresses = engine.load_object(obj, meta["symbols"], [meta["entry"]])
        drive = wrapper.make_callable(addresses[meta["entry"]], name)
        _COMPILED[key] = drive
        return drive


FORMAT_DRIVER = "6"


class BodyFailed(RuntimeError):
    """The body a loop driver (:func:`loop_driver`) called failed with a status
    of its own module's: the caller runs the iterations again through the
    body's own entry point, which raises the body's exception."""


def _copy_rows(b, copies, first, stop):
    """Emit ``memcpy`` of the rows ``first`` to ``stop`` of the
    ``(destination, source, bytes)`` int64 table at address ``copies``."""
    from llvmlite import ir

    from .parallel import _counted

    i1, i8p, i64 = ir.IntType(1), ir.IntType(8).as_pointer(), ir.IntType(64)
    memcpy = b.module.declare_intrinsic("llvm.memcpy", [i8p, i8p, i64])

    def copy(k):
        row = b.inttoptr(b.add(copies, b.mul(k, ir.Constant(i64, 24))), i64.as_pointer())
        dst, src, nbytes = (b.load(b.gep(row, [ir.Constant(i64, j)])) for j in range(3))
        b.call(memcpy, [b.inttoptr(dst, i8p), b.inttoptr(src, i8p), nbytes, ir.Constant(i1, 0)])
    _counted(b, first, stop, copy)
