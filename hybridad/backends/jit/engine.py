"""LLVM through llvmlite: one target machine for this CPU, the optimization
pipeline, machine code emitted as object files, loaded into one MCJIT engine,
and kept in the disk cache.

An object file names every function it calls that is not its own by a
symbol (libm's ``exp``, the Python C API, BLAS through :data:`SYMBOLS`); the
engine resolves them when the object is loaded, in this process, so a cached
object file is valid in any process of the same library versions on the
same CPU (both are in its key, :func:`object_key`).

Thread safety: LLVM's contexts are not; every translation and compile holds
:data:`LOCK` and uses this module's own context (numba uses the global one,
so the two never meet).  Loading an object into the engine holds it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import stat
import sys
import threading
import uuid

import numpy as np

__all__ = ["LOCK", "SYMBOLS", "compile_ir", "load_object", "object_key", "optimized_ir", "target"]

#: held by every translation, optimization and load (LLVM's objects are not thread-safe)
LOCK = threading.RLock()

#: bumped when anything changes what the compiler emits for the same source
FORMAT = "hybridad-jit-5"

_STATE = {}


def _llvm():
    """llvmlite's binding layer, initialized once (native target and asm printer)."""
    llvm = _STATE.get("llvm")
    if llvm is None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _STATE["llvm"] = llvm
    return llvm


def target():
    """``(target machine, data layout string, triple)`` for this CPU, made once."""
    tm = _STATE.get("tm")
    if tm is None:
        llvm = _llvm()
        triple = llvm.get_process_triple()
        t = llvm.Target.from_triple(triple)
        tm = t.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                     features=llvm.get_host_cpu_features().flatten(),
                                     opt=3, reloc="static", codemodel="jitdefault")
        _STATE["tm"] = tm
        _STATE["layout"] = str(tm.target_data)
        _STATE["triple"] = triple
        _STATE["context"] = llvm.create_context()
    return tm, _STATE["layout"], _STATE["triple"]


@functools.lru_cache(maxsize=1)
def machine_key():
    """What machine code depends on besides the source: CPU, features, LLVM
    (made once: 0.2 ms, asked at every library function's call site)."""
    llvm = _llvm()
    return "|".join([FORMAT, llvm.get_process_triple(), llvm.get_host_cpu_name(),
                     llvm.get_host_cpu_features().flatten(),
                     ".".join(map(str, llvm.llvm_version_info)), sys.version, np.__version__])


def object_key(*parts):
    """A content hash of ``parts`` (strings) and :func:`machine_key`."""
    h = hashlib.sha256()
    for p in (*parts, machine_key()):
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


#: modules of more lines of IR than this are optimized at LLVM's speed level 2,
#: not 3: a Hessian's loop bodies through 100 RK4 steps (3-4k lines each)
#: compiled in 1.4 s instead of 2.8 s, and ran 3 % slower per call (within
#: this machine's noise); the plans' modules of elementwise and BLAS work are
#: far smaller
LARGE_MODULE_LINES = 2000


def compile_ir(text, glue=False, large=None):
    """Object code (bytes) of LLVM IR ``text``: verified, optimized as numba
    optimizes its functions (speed level 3, loop and SLP vectorization) but
    without loop interleaving (see below), and at level 2 without SLP or loop
    unrolling when the module is large (:data:`LARGE_MODULE_LINES`), emitted
    for this CPU.

    ``glue``: code that only calls other machine code (a rolled loop's
    driver, :func:`hybridad.backends.jit.loop_driver`): level 2 without loop
    unrolling or vectorization.  Unrolled, a driver's two copy loops of
    ``memcpy`` calls grew from 216 lines of IR to 784 and took 100 ms of
    LLVM -- in every fresh process, once per loop arity -- against 37 ms.
    ``large``: whether to compile as a large module (None: by its lines; a
    library function's own object is, :mod:`.shared`, and keeps loop
    unrolling)."""
    tm, _, _ = target()
    with LOCK:
        if os.environ.get("HYBRIDAD_JIT_DEBUG") == "ir":
            with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "hybridad_jit.ll"),
                      "w") as fh:
                fh.write(text)
        return tm.emit_object(_optimize(text, tm, glue, large))


def optimized_ir(text):
    """The LLVM IR :func:`compile_ir` makes of ``text`` before it emits
    machine code (what a test inspects: did a loop vectorize)."""
    tm, _, _ = target()
    with LOCK:
        return str(_optimize(text, tm))


def _optimize(text, tm, glue=False, large=None):
    """``text`` parsed, verified and run through the module pipeline of
    :func:`compile_ir` (under :data:`LOCK`)."""
    llvm = _llvm()
    mod = llvm.parse_assembly(text, context=_STATE["context"])
    mod.verify()
    # no loop unrolling in a module large by its lines (nor in glue: only
    # calls, nothing to gain): most of their loops are short ones of constant
    # trip count (a Hessian's loop bodies, a plan of many small arrays),
    # unrolled in full into straight-line code that code generation then
    # pays for -- 31 % of LLVM's time over the test suite's programs -- with
    # no call measurably faster (the benchmarks' MLPs, GP, RK4 Hessian).  A
    # library function's own module (``large=True``) keeps it: its loops
    # are the hot inner loops of matrix products
    if large is None:
        large = glue or text.count("\n") > LARGE_MODULE_LINES
        unroll = not large
    else:
        unroll = not glue
    pto = llvm.create_pipeline_tuning_options(speed_level=2 if large else 3)
    pto.loop_vectorization = not glue
    pto.loop_unrolling = unroll
    # no SLP vectorization of large modules: on AVX2 CPUs (znver3, haswell)
    # LLVM 20's SLP vectorizer hit an assertion on an Adam training step's
    # module at level 2 (llvm-project#176658, #218850) -- and llvmlite's LLVM
    # is built with assertions, so that aborts the process.  Large modules
    # are straight-line code the loop vectorizer does not see anyway
    pto.slp_vectorization = not large
    # no interleaving: on the plans' loops (maps over memory, and FP
    # reductions it may not reorder) it changed no call time measurably,
    # and on loop bodies of many short loops (a Hessian through an RK4
    # loop, trip counts of 6) each vectorized loop was copied four times
    # over and then unrolled: 49k lines of IR from 3k, 5.8 s of LLVM (1.4 s
    # without it)
    pto.loop_interleaving = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


# -- symbols the machine code names ------------------------------------------------------
def external_symbols(module):
    """The names an llvmlite ``module`` declares but does not define (its
    functions and globals from elsewhere, LLVM's intrinsics aside): what an
    object file records, so that a load from the disk cache registers each
    (:func:`load_object`) exactly as the compile that made it did."""
    from llvmlite import ir

    names = set()
    for g in module.globals.values():
        if isinstance(g, ir.Function):
            if g.is_declaration and not g.name.startswith("llvm."):
                names.add(g.name)
        elif isinstance(g, ir.GlobalVariable) and g.initializer is None:
            names.add(g.name)
    return names


#: symbol name -> () -> address, registered with LLVM before any object is loaded
SYMBOLS = {}


def _pyapi(name):
    return lambda: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


for _name in ("PyLong_AsLongLong", "PyErr_Occurred", "PyErr_SetString", "PyEval_SaveThread",
              "PyEval_RestoreThread", "Py_IncRef", "Py_DecRef", "PyGILState_Ensure",
              "PyGILState_Release", "PyLong_FromVoidPtr", "PyObject_CallFunctionObjArgs"):
    SYMBOLS[_name] = _pyapi(_name)
#: None by a name of this compiler's own.  The symbol table is the process's,
#: shared with numba's compiler, which registers ``PyExc_ValueError`` and the
#: other builtin exceptions as the class objects themselves where the C API
#: names the variables holding them: an object file that named them resolved
#: to whichever registration came last (the exception class read one word
#: off: a segfault when the code raised).  Exceptions are cells of our own
#: (:func:`exception_symbol`), None is this symbol.
NONE = "hybridad_none"
SYMBOLS[NONE] = lambda: id(None)


#: (prefix, name -> address) for families of symbols (scipy.special's functions)
RESOLVERS = []

_EXC = "hybridad_exc."
_CELLS = []  # the C variables holding exception classes (kept for the process)


def exception_symbol(cls):
    """The symbol of a variable holding exception class ``cls`` (a
    ``PyObject *``, as ``PyExc_ValueError`` is): resolved at load by
    importing ``cls``'s module."""
    return f"{_EXC}{cls.__module__}:{cls.__qualname__}"


def _exception_cell(rest):
    import importlib

    module, _, qualname = rest.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    cell = ctypes.c_void_p(id(obj))
    _CELLS.append((cell, obj))
    return ctypes.addressof(cell)


def _numba_helper(rest):
    """numba's C helpers (``numba_xgesv``: LAPACK through scipy), which numba
    registers only when its compiler starts."""
    from numba import _helperlib

    return _helperlib.c_helpers[rest]


def _hybridad_symbol(rest):
    """A ``hybridad_<name>`` symbol the LAPACK kernel modules register when
    imported (scipy's cython LAPACK and BLAS routines)."""
    import importlib

    from ...ops.lapack_names import KERNEL_MODULES

    for mod in sorted(set(KERNEL_MODULES.values())):
        importlib.import_module(mod)
    address = _llvm().address_of_symbol("hybridad_" + rest)
    if not address:
        raise RuntimeError(f"hybridad jit: no symbol hybridad_{rest}")
    return address


RESOLVERS += [(_EXC, _exception_cell), ("numba_", _numba_helper),
              ("hybridad_", _hybridad_symbol)]


def _register(names):
    llvm = _llvm()
    done = _STATE.setdefault("registered", set())
    for name in names:
        if name in done:
            continue
        if name in SYMBOLS:
            llvm.add_symbol(name, SYMBOLS[name]())
        else:
            found = [(p, r) for p, r in RESOLVERS if name.startswith(p)]
            if not found:
                continue
            prefix, resolve = max(found, key=lambda pr: len(pr[0]))  # the most specific
            llvm.add_symbol(name, resolve(name[len(prefix):]))
        done.add(name)


def define_symbol(name, address):
    """Register ``name`` (a library function's own object: :mod:`.shared`) at
    ``address`` for the objects loaded after it."""
    with LOCK:
        _llvm().add_symbol(name, address)
        _STATE.setdefault("registered", set()).add(name)


def load_object(obj, symbols, names, cells=None):
    """Load object code ``obj`` into this process's engine; the addresses of
    its functions ``names`` (a dict name -> address).  ``symbols``: the names
    it declares (:func:`external_symbols`), those of :data:`SYMBOLS` and the
    resolvers registered first; ``cells``: symbols of its own, name ->
    address (object mode's sites, :mod:`.sites`)."""
    llvm = _llvm()
    tm, layout, triple = target()
    cells = cells or {}
    with LOCK:
        _register([name for name in symbols if name not in cells])
        for name, address in cells.items():
            llvm.add_symbol(name, address)
        engine = _STATE.get("engine")
        if engine is None:
            empty = llvm.parse_assembly("", context=_STATE["context"])
            empty.triple, empty.data_layout = triple, layout
            engine = _STATE["engine"] = llvm.create_mcjit_compiler(empty, tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        out = {}
        for name in names:
            addr = engine.get_function_address(name)
            if not addr:
                raise RuntimeError(f"hybridad jit: {name} not found in its object code")
            out[name] = addr
        return out


# -- the disk cache of object files ------------------------------------------------------
_MAGIC = b"hybridad-jit-object-1\n"


def _trusted(st):
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    return stat.S_ISREG(st.st_mode) and (uid is None or st.st_uid == uid) and \
        not st.st_mode & 0o022


#: the disk cache's subdirectory of object files, each ``<key>.o`` (written
#: through ``<key>.o.tmp.<random>``)
OBJECTS = "jit"


def _object_path(directory, key):
    return os.path.join(directory, OBJECTS, key + ".o")


def has_object(key):
    """Whether the disk cache holds object code under ``key`` (not verified)."""
    from ..._cachedir import cache_dir

    directory = cache_dir()
    return directory is not None and os.path.exists(_object_path(directory, key))


def cached_object(key):
    """The verified object bytes stored under ``key``, or None (absent, or
    damaged: then removed, and the caller compiles and stores it again)."""
    from ..._cachedir import READ_FLAGS, cache_dir

    directory = cache_dir()
    if directory is None:
        return None
    path = _object_path(directory, key)
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        ok = _trusted(os.fstat(f.fileno()))
        data = f.read() if ok else b""
    head = len(_MAGIC) + 32
    if not ok or len(data) < head or not data.startswith(_MAGIC) or \
            hashlib.sha256(data[head:]).digest() != data[len(_MAGIC):head]:
        from ..._cachedir import _warn

        _warn(f"discarded damaged compiled code {path}; recompiling")
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return data[head:]


def store_object(key, obj):
    """Store object bytes under ``key`` (atomically: a reader sees all or nothing)."""
    from ..._cachedir import cache_dir

    directory = cache_dir()
    if directory is None:
        return
    path = _object_path(directory, key)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp.{uuid.uuid4().hex[:16]}"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(_MAGIC + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
