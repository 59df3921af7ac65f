"""The module-level half of the translator: one generated module in, one
LLVM module out -- its functions specialized per argument types, the
exceptions they raise numbered, library functions found and read."""

from __future__ import annotations

import ast
import inspect

import numpy as np
from llvmlite import ir

from . import engine, shared
from .natives import table
from .translate import FnState, Frame, Retype, function_tree
from .wrapper import python_entry
from .values import ArrayV, Const, Scalar, TupleV, Unsupported, lltype, memtype

__all__ = ["Translator"]

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_I8P = ir.IntType(8).as_pointer()
_TREES = {}  # library function -> (syntax tree, globals, flags)


def _walked(memo, tree):
    """``(tree, returns a value, has a loop)`` of a syntax tree, walked once
    per translator (``memo``: its cache by the tree's id; a translation asks
    again per argument types and per call site)."""
    got = memo.get(id(tree))
    if got is None or got[0] is not tree:
        nodes = list(ast.walk(tree))
        got = memo[id(tree)] = (
            tree, any(isinstance(n, ast.Return) and n.value is not None for n in nodes),
            any(isinstance(n, (ast.For, ast.While)) for n in nodes))
    return got


class Translator:
    """Translate ``fn_name`` of generated ``source`` (executed into
    ``namespace``, whose names resolve its globals) to LLVM IR."""

    def __init__(self, source, namespace):
        self.source = source
        self.ns = namespace
        tree = ast.parse(source)
        self.defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.hints = {}
        self._natives = None
        self._walked = {}

    def reset(self):
        _, layout, triple = engine.target()
        self.module = ir.Module(name="hybridad_jit")
        self.module.triple, self.module.data_layout = triple, layout
        self.raises = []  # (exception name, message): status k + 1
        self.functions = {}  # (name, schemas) -> (ir.Function, [result shape])
        self.parallel = False  # whether a prange loop runs on threads (see .parallel)
        self.sites = []  # object mode's calls (see .sites): the object file's metadata
        self.bounds = {}  # what is known of integer registers (see .scalars.ScalarOps)

    def translate(self, fn_name, nargs, tag):
        """``(LLVM IR text, exported wrapper name, symbols)`` of ``fn_name``
        taking ``nargs`` int64 arguments, callable from Python (see
        :mod:`.wrapper`); ``tag`` makes its exported names unique in the
        process (object files share one engine)."""
        self.tag = tag

        def build():
            fn, _ = self.function(fn_name, tuple(("s", np.dtype(np.int64))
                                                 for _ in range(nargs)), export=tag)
            nogil = bool(decorator_options(self.defs[fn_name]).get("nogil")) or \
                self.parallel  # (numba's threading layer waits without the GIL)
            return python_entry(self, fn, nargs, nogil)
        entry = self.settled(build)
        return str(self.module), entry, sorted(engine.external_symbols(self.module))

    def settled(self, build):
        """``build()`` in a fresh module, again with the wider types a loop
        asked for (:class:`Retype`) until they settle."""
        for _ in range(16):
            self.reset()
            try:
                return build()
            except Retype as r:
                if r.key in self.hints and self.hints[r.key] == r.kind:
                    raise Unsupported(f"type of {r.key} does not settle") from None
                self.hints[r.key] = r.kind
        raise Unsupported("types did not settle")

    # -- numbered exceptions ------------------------------------------------------
    def raise_code(self, cls, message):
        """The status number of raising exception class ``cls`` with ``message``
        (``ValueError``, numpy's ``LinAlgError``): the class by a symbol the
        engine resolves when the code is loaded (:func:`.engine.exception_symbol`)."""
        self.raises.append((engine.exception_symbol(cls), message))
        return len(self.raises)

    # -- functions of their own: one LLVM function per argument types ---------------
    def function(self, name, schemas, export=None, source=None, symbol=None):
        """``(LLVM function, result shape)`` of ``name`` (a function of the
        generated module, or ``source``: ``(key, syntax tree, globals, flags,
        parallel)`` of a library function) for arguments of ``schemas``,
        translated once: ``i32 f(i8* result, args...)`` (the result pointer
        only where the function returns a value; shape None when none).
        ``symbol``: the exported name of a library function's own object
        (:mod:`.shared`)."""
        key = (name if source is None else source[0], schemas)
        got = self.functions.get(key)
        if got is not None:
            return got
        if source is None:
            fdef = self.defs.get(name)
            if fdef is None:
                raise Unsupported(f"no function {name}")
            opts = decorator_options(fdef)
            source = (("gen", name), fdef, self.ns, _flags(opts.get("fastmath")),
                      bool(opts.get("parallel")))
        fkey, fdef, globals_, flags, parallel = source
        returns = _walked(self._walked, fdef)[1]
        ll_name = symbol or (f"{name}_{export}" if export else f"{name}.{len(self.functions)}")
        fn = ir.Function(self.module, self.signature(fdef, schemas), name=ll_name)
        if not (export or symbol):
            fn.linkage = "internal"
        if name.startswith("_part") or fkey[0] == "lib":
            # a long body's parts stay apart (backends/numba/split.py); a
            # library function is optimized on its own, as numba compiles it
            fn.attributes.add("noinline")
        shape = [None]
        self.functions[key] = (fn, shape)
        state = FnState(self, fn)
        frame = Frame(state, (*fkey, schemas), fdef, globals_, flags, serial_prange=not parallel)
        args = list(fn.args)
        if returns:
            frame.result, args = (args[0], shape), args[1:]
        names = [a.arg for a in fdef.args.args]
        if len(names) != len(schemas):
            raise Unsupported(f"{fdef.name}: argument count")
        for pname, s in zip(names, schemas, strict=True):
            frame.env[pname], args = _param_value(s, args)
        if frame.stmts(fdef.body):
            if returns:
                raise Unsupported(f"{fdef.name} may end without returning its value")
            state.b.ret(ir.Constant(_I32, 0))
        state.finish()
        return fn, shape

    def signature(self, fdef, schemas):
        """The LLVM type of function ``fdef`` for arguments of ``schemas``."""
        params = [_I8P] if _walked(self._walked, fdef)[1] else []
        for s in schemas:
            params += _param_types(s)
        return ir.FunctionType(_I32, params)

    def declare(self, source, schemas, symbol, shape):
        """A library function's own object (:mod:`.shared`) as a declaration
        in this module: ``(LLVM function, [result shape])``, as :meth:`function`."""
        key = (source[0], schemas)
        got = self.functions.get(key)
        if got is None:
            fn = ir.Function(self.module, self.signature(source[1], schemas), name=symbol)
            got = self.functions[key] = (fn, [shape])
        return got

    def call_function(self, frame, fn, args, kwargs):
        """A call of Python function (or numba dispatcher) ``fn`` from ``frame``:
        a function of the generated module is an LLVM function of its own; a
        library function (a numba dispatcher of hybridad) with a loop is one
        too, optimized apart from its caller as numba compiles it (its loops
        vectorized for its own sake: so the serial and the parallel variant of
        a kernel, and a plan and its parts, give the same bits); a library
        function without one is translated inline (LLVM would inline it)."""
        py = getattr(fn, "py_func", None)
        name = getattr(py, "__name__", None)
        source = None
        if py is not None and name in self.defs and self.ns.get(name) is fn:
            pass
        elif py is not None and hasattr(fn, "targetoptions"):
            tree, globals_, flags, parallel = self.library(fn)
            if not _walked(self._walked, tree)[2]:
                return frame.inline(tree, globals_, ("lib", id(fn)), args, kwargs, flags,
                                    parallel)
            source = (("lib", id(fn)), tree, globals_, flags, parallel)
        else:
            raise Unsupported(f"call of {fn!r}")
        if kwargs:
            raise Unsupported("keywords in a call of a function of its own")
        callee = None
        if source is not None:
            # a library function: its own object where it can, specialized on
            # the numbers its call passes as constants (as LLVM would have
            # specialized the copy in this module: a fold over a known length)
            schemas, flat = self._schemas(frame, args, shared.constant)
            callee, shape = shared.declaration(self, fn, name, schemas, source)
        if callee is None:
            schemas, flat = self._schemas(frame, args)
            callee, shape = self.function(name, schemas, source=source)
        result = None
        if shape[0] is not None:
            regs_t = frame.register_types(shape[0])
            result = frame.state.slot(ir.LiteralStructType(regs_t))
            flat = [frame.b.bitcast(result, _I8P)] + flat
        status = frame.b.call(callee, flat)
        fail = frame.b.icmp_signed("!=", status, ir.Constant(_I32, 0))
        with frame.b.if_then(fail, likely=False):
            frame.state.fail(status)
        if result is None:
            return Const(None)
        regs = [frame.b.load(frame.b.gep(result, [ir.Constant(_I32, 0), ir.Constant(_I32, k)]))
                for k in range(len(regs_t))]
        return frame.rebuild(shape[0], regs)

    @staticmethod
    def _schemas(frame, args, constant=None):
        """``(schemas, LLVM values)`` of a call's arguments (:func:`_schema_of`);
        a constant ``constant(value)`` accepts is known in the callee."""
        schemas, flat = [], []
        for a in args:
            if constant is not None and isinstance(a, Const) and a.dtype is not None and \
                    constant(a.value):
                schemas.append(("c", a.value))
                continue
            s, regs = _schema_of(frame, a)
            schemas.append(s)
            flat += regs
        return tuple(schemas), flat

    def library(self, fn):
        """(syntax tree, globals, fast-math flags, parallel) of a numba dispatcher."""
        got = _TREES.get(fn)
        if got is None:
            py = fn.py_func
            try:
                tree = function_tree(py)
            except (OSError, TypeError):
                raise Unsupported(f"no source of {py.__qualname__}") from None
            closure = inspect.getclosurevars(py)
            globals_ = {**py.__globals__, **closure.nonlocals}
            opts = fn.targetoptions
            got = _TREES[fn] = (tree, globals_, _flags(opts.get("fastmath")),
                                bool(opts.get("parallel")))
        return got

    # -- natives: numba intrinsics and builtins, implemented here -------------------
    def native(self, fn):
        if self._natives is None:
            self._natives = table()
        try:
            return self._natives.get(id(fn))
        except TypeError:
            return None

    def range_kind(self, fn):
        if fn is range:
            return "range"
        if getattr(fn, "__name__", None) == "prange" and \
                getattr(fn, "__module__", "").startswith("numba"):
            return "prange"
        return None


def decorator_options(fdef):
    """The keyword options of a function's ``@njit(...)`` (literal values)."""
    opts = {}
    for d in fdef.decorator_list:
        if isinstance(d, ast.Call):
            for k in d.keywords:
                try:
                    opts[k.arg] = ast.literal_eval(k.value)
                except ValueError:
                    raise Unsupported(f"decorator option {k.arg}") from None
    return opts


def _flags(fastmath):
    """LLVM fast-math flags of numba's ``fastmath`` option."""
    if not fastmath:
        return ()
    if fastmath is True:
        return ("fast",)
    flags = set(getattr(fastmath, "flags", fastmath))
    return tuple(sorted(flags))


def _param_types(s):
    kind = s[0]
    if kind == "s":
        return [lltype(s[1])]
    if kind == "a":
        _, dtype, dims, strides, _ = s
        return [memtype(dtype).as_pointer()] + [_I64] * sum(d is None for d in dims + strides)
    return []


def _param_value(s, args):
    """The value a parameter of schema ``s`` has in the callee, from its LLVM
    arguments (returns it and the arguments left)."""
    kind = s[0]
    if kind == "s":
        return Scalar(args[0], s[1]), args[1:]
    if kind == "a":
        _, dtype, dims, strides, layout = s
        data, rest = args[0], args[1:]
        fill = []
        for d in dims + strides:
            if d is None:
                fill.append(rest[0])
                rest = rest[1:]
            else:
                fill.append(d)
        n = len(dims)
        return ArrayV(dtype, data, fill[:n], fill[n:], layout), rest
    return Const(s[1]), args


def _schema_of(frame, v):
    """(schema, LLVM values) of an argument of a generated function: numbers
    travel as registers (so one function serves every call site), arrays as
    a pointer and their unknown sizes, anything else is known."""
    if isinstance(v, Const) and v.dtype is not None:
        s = frame.ops.scalar(v)
        return ("s", s.dtype), [s.value]
    if isinstance(v, Scalar):
        return ("s", v.dtype), [v.value]
    if isinstance(v, ArrayV):
        dims = tuple(d if isinstance(d, int) else None for d in v.shape)
        strides = tuple(d if isinstance(d, int) else None for d in v.strides)
        regs = [v.data] + [d for d in v.shape + v.strides if not isinstance(d, int)]
        return ("a", v.dtype, dims, strides, v.layout), regs
    if isinstance(v, Const):
        try:
            hash(v.value)
        except TypeError:
            raise Unsupported("an unhashable constant argument") from None
        return ("c", v.value), []
    if isinstance(v, TupleV):
        raise Unsupported("a tuple argument of a generated function")
    raise Unsupported(f"argument {v!r}")
