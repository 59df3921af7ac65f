"""Library functions compiled once, apart from the programs that call them.

A library function with a loop of its own (``rt.check_arrays``, the folds
of :mod:`hybridad.backends.numba.folds`, ``gemm``...) is an LLVM function
of its own that its callers do not inline (numba compiles it apart too:
:meth:`.module.Translator.call_function`).  Each program calling one used to
hold its own copy, translated and optimized again: a fifth of the IR of the
test suite's 269 programs of ``test_ops`` and ``test_quantile_misc``, and
12 % of their LLVM time.  Here each function, for each argument schemas, is
translated and compiled once: an object of its own, kept in the disk cache
under its symbol ``hyblib.<key>`` (the key: its module's source and what it
imports, the schemas, this machine -- :func:`.engine.object_key`) and loaded
once per process; a program declares the symbol and calls it.  The numbers
a call passes as constants (a fold's length, a check's count) are part of
the schemas: the object is specialized on them, as LLVM specialized the
copy in a caller's module.  One machine code for every caller with the same
schemas, compiled as a large module is (level 2, no SLP: where a large
plan's module held these functions), so its results are the same bits
whichever plan calls it -- a copy in each module was optimized at its
module's level.

A function stays in its callers' modules when it raises (the status numbers
it returns are its module's: :meth:`.module.Translator.raise_code`), calls
back into Python (:mod:`.sites`), runs a parallel loop, is not importable by
name or is called with constants that are not plain values.
"""

from __future__ import annotations

import json

import numpy as np

from . import engine

__all__ = ["PREFIX", "constant", "declaration", "load_symbols"]

#: the symbols of library functions' own objects
PREFIX = "hyblib."
#: symbol -> the function's result shape, or None: it stays in its callers'
#: modules (see the module docstring)
_SHAPES = {}
#: symbol -> its object as stored (its symbols' list, then the machine code), for
#: the symbols this process has loaded: written again into a cache directory
#: that lacks it (one set after it was loaded), so a plan cached there has all
#: it calls
_LOADED = {}


def _plain(value):
    """Whether a constant argument is a plain value (its repr names it in every process)."""
    if isinstance(value, tuple):
        return all(map(_plain, value))
    return value is None or type(value) is str or constant(value)


def constant(value):
    """Whether a number passed to a library function is known in its object
    (a Python or numpy number: the object is specialized on it)."""
    return type(value) in (bool, int, float) or (
        isinstance(value, np.generic) and value.dtype.kind in "biuf")


def _symbol(fn, schemas, flags):
    """The symbol of ``fn``'s object for arguments of ``schemas``, or None."""
    from ..._sources import library_digest

    py = fn.py_func
    module, qualname = getattr(py, "__module__", None), getattr(py, "__qualname__", "<")
    if module is None or "<" in qualname or not module.startswith("hybridad."):
        return None
    for s in schemas:
        if s[0] == "c" and not _plain(s[1]):
            return None
    key = engine.object_key("library function", module, qualname, repr(schemas), repr(flags),
                            library_digest((module, __name__.rsplit(".", 1)[0] + ".module")))
    return PREFIX + key[:24]


def declaration(translator, fn, name, schemas, source):
    """``(LLVM function, [result shape])``: library function ``fn`` (its
    ``source`` as :meth:`.module.Translator.function` takes it) declared in
    ``translator``'s module, its code an object of its own, compiled or
    loaded first; ``(None, None)`` where it stays in the caller's module."""
    if source[4]:  # (a parallel loop: the program's entry waits without the GIL)
        return None, None
    symbol = _symbol(fn, schemas, source[3])
    if symbol is None:
        return None, None
    with engine.LOCK:
        if symbol not in _SHAPES:
            _SHAPES[symbol] = _build(type(translator), symbol, name, schemas, source)
        shape = _SHAPES[symbol]
        if shape is not None:
            _keep(symbol)
    if shape is None:
        return None, None
    return translator.declare(source, schemas, symbol, shape[0])


def _build(cls, symbol, name, schemas, source):
    """``[result shape]`` of the function's own object, translated (for its
    shape, and to see that it may stand apart) and compiled unless the disk
    cache has it, then loaded; None where it may not stand apart."""
    t = cls("", {})
    t.tag = symbol  # (names of its own: an object-mode site's, before it is refused)
    shape = t.settled(lambda: t.function(name, schemas, source=source, symbol=symbol)[1])
    if t.raises or t.sites or t.parallel:
        return None
    if not load_symbols([symbol]):
        symbols = sorted(engine.external_symbols(t.module))
        # (at the speed level of a large module, without SLP: a matrix-vector
        # product of 100 x 100 ran 15 % slower at level 3 with SLP, and a
        # large plan's module, where these functions used to sit, had them so)
        obj = engine.compile_ir(str(t.module), large=True)
        blob = json.dumps({"symbols": symbols}).encode() + b"\n" + obj
        engine.store_object(symbol, blob)
        _load(symbol, blob, symbols)
    return shape


def _keep(symbol):
    """Write the object of loaded ``symbol``, and of those it calls, into the
    cache directory where it is missing."""
    if not engine.has_object(symbol):
        engine.store_object(symbol, _LOADED[symbol])
        for name in _needs(_LOADED[symbol]):
            if name in _LOADED:
                _keep(name)


def load_symbols(symbols):
    """Load the objects of the library functions among ``symbols`` (an object
    file's external names) that this process has not loaded, from the disk
    cache; False when one is not there (its caller is compiled again, which
    makes it)."""
    for symbol in symbols:
        if not symbol.startswith(PREFIX) or symbol in _LOADED:
            continue
        blob = engine.cached_object(symbol)
        needs = None if blob is None else _needs(blob)
        if needs is None or not load_symbols(needs):
            return False
        _load(symbol, blob, needs)
    return True


def _needs(blob):
    """The symbols a stored object names (None: unreadable)."""
    try:
        return json.loads(blob.partition(b"\n")[0])["symbols"]
    except (ValueError, KeyError, TypeError):
        return None


def _load(symbol, blob, needs):
    """Load ``symbol``'s stored object (``needs``: the symbols it names, loaded)."""
    address = engine.load_object(blob.partition(b"\n")[2], needs, [symbol])[symbol]
    engine.define_symbol(symbol, address)
    _LOADED[symbol] = blob

