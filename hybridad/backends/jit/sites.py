"""numba's object mode: ``with objmode():`` around calls of Python functions
on arrays (a host call, a ufunc without rules, a loop's runner; see
``backends/numba/emit.py`` and ``backends/loops.py``).

Each call is a *site*.  The machine code writes the call's arguments as
int64 words into a block on its stack -- an array as its data address, its
dimensions and its strides (bytes); a number as its bits; None as nothing --
takes the GIL
(``PyGILState_Ensure``: the function may run without it) and calls the
site's :class:`Site` object with the block's address.  The site makes numpy
views of those addresses (kept by address, shape and strides: a plan passes
the same arena views call after call, so the same view objects are reused)
and calls the function, as numba's object mode boxes its arrays into views.
No array data is allocated.  An exception the function raises stays set and
the compiled function returns status -1, which its entry point passes on
(:func:`.wrapper.python_entry`).

The site objects are reached through a C variable per site (a
``PyObject *``, as an exception class is, :func:`.engine.exception_symbol`)
registered under a name unique to the object file; :func:`bind_sites` fills
them when the code is loaded, from the generated module's names -- which the
object file's metadata lists, so a program loaded from the disk cache finds
its functions without being translated again.
"""

from __future__ import annotations

import ast
import ctypes

import numpy as np
from llvmlite import ir

from .nests import emit_nest, nestable, spec_matches
from .values import BOOL, ArrayV, Const, Scalar, Unsupported, declare, declare_global

__all__ = ["Site", "StaleNest", "bind_sites", "is_objmode", "object_mode"]

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
#: status of a compiled function whose Python call raised (the exception is set)
PYTHON_ERROR = -1


def is_objmode(obj):
    """Whether ``obj`` is numba's ``objmode`` context (not imported for it)."""
    return type(obj).__name__ == "_ObjModeContextType" and \
        type(obj).__module__.startswith("numba")


def object_mode(frame, s):
    """Translate ``with objmode(): ...`` (statement ``s``) in ``frame``: each
    statement of its body one call of a function of the generated module on
    arrays and numbers, made a site."""
    if frame.fkey[0] != "gen":
        raise Unsupported("object mode in a library function")
    if frame.state.status_ptr is not None:
        raise Unsupported("object mode in a parallel loop")
    if len(s.items) != 1 or s.items[0].optional_vars is not None:
        raise Unsupported("with of another kind")
    ctx = s.items[0].context_expr
    if not isinstance(ctx, ast.Call) or ctx.args or ctx.keywords:
        raise Unsupported("object mode with typed results")
    head = frame.expr(ctx.func)
    if not (isinstance(head, Const) and is_objmode(head.value)):
        raise Unsupported("with (not object mode)")
    for stmt in s.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        # arguments named or literal: numba evaluates what is inside the block
        # in Python, and boxes a name's value (here: the same, natively)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or \
                any(k.arg is None for k in call.keywords) or \
                not all(isinstance(a, (ast.Name, ast.Constant))
                        for a in call.args + [k.value for k in call.keywords]):
            raise Unsupported("object mode: a statement other than a call on names")
        name = call.func.id
        if name in frame.env or name not in frame.globals or not callable(frame.globals[name]):
            raise Unsupported(f"object mode: {name} is not a function of the module")
        values = [frame.expr(a) for a in call.args] + [frame.expr(k.value) for k in call.keywords]
        nest = getattr(frame.globals[name], "nest", None)  # (a loop's runner: .nests)
        nest = nest() if callable(nest) and not call.keywords else None
        if nest is not None and nestable(nest[0], values):
            _emit_nested(frame, name, nest[0], values)
        else:
            _emit_call(frame, name, values, [k.arg for k in call.keywords])
    return True


def _emit_nested(frame, name, spec, values):
    """The inner loop run natively (:func:`.nests.emit_nest`), its site's
    cell holding the runner's context; the Python call if its body fails."""
    t = frame.t
    symbol = f"hybridad_site.{t.tag}.{len(t.sites)}"
    t.sites.append({"symbol": symbol, "name": name, "nest": spec})
    emit_nest(frame, symbol, spec, values, lambda: _emit_call(frame, name, values, []))


def _emit_call(frame, name, values, keywords):
    b, t = frame.b, frame.t
    specs, words = [], []
    for v in values:
        if isinstance(v, ArrayV):
            specs.append(["a", v.dtype.str, v.ndim])
            words.append(b.ptrtoint(v.data, _I64))
            words += [frame.arr.i64(d) for d in v.shape + v.strides]
        elif isinstance(v, (Scalar, Const)) and v.dtype is not None:
            s = frame.ops.scalar(v)
            if s.dtype == BOOL:
                word = b.zext(s.value, _I64)
            elif s.dtype.kind == "f":
                word = b.bitcast(b.fpext(s.value, ir.DoubleType()) if s.dtype.itemsize < 8
                                 else s.value, _I64)
            elif s.dtype.kind in "iu" and s.dtype.itemsize < 8:
                word = (b.zext if s.dtype.kind == "u" else b.sext)(s.value, _I64)
            else:
                word = s.value
            specs.append(["s", s.dtype.str, 0])
            words.append(word)
        elif isinstance(v, Const) and v.value is None:  # (a runner's workspace it has not)
            specs.append(["n", "|b1", 0])
        else:
            raise Unsupported(f"object mode: argument {v!r}")
    k = len(t.sites)
    symbol = f"hybridad_site.{t.tag}.{k}"
    t.sites.append({"symbol": symbol, "name": name, "args": specs, "keywords": keywords})
    block = frame.state.slot(ir.ArrayType(_I64, max(1, len(words))))
    for j, w in enumerate(words):
        b.store(w, b.gep(block, [ir.Constant(_I32, 0), ir.Constant(_I32, j)]))
    module = t.module
    cell = declare_global(module, symbol, _I8P)
    ensure = declare(module, "PyGILState_Ensure", _I32, [])
    release = declare(module, "PyGILState_Release", ir.VoidType(), [_I32])
    as_long = declare(module, "PyLong_FromVoidPtr", _I8P, [_I8P])
    call = declare(module, "PyObject_CallFunctionObjArgs", _I8P, [_I8P], var_arg=True)
    decref = declare(module, "Py_DecRef", ir.VoidType(), [_I8P])
    gil = b.call(ensure, [])
    address = b.call(as_long, [b.bitcast(block, _I8P)])
    failed = b.icmp_unsigned("==", address, ir.Constant(_I8P, None))
    with b.if_else(failed, likely=False) as (no_int, have_int):
        with no_int:
            got_a = ir.Constant(_I8P, None)
            at_a = b.block
        with have_int:
            got_b = b.call(call, [b.load(cell), address, ir.Constant(_I8P, None)])
            b.call(decref, [address])
            at_b = b.block
    got = b.phi(_I8P)
    got.add_incoming(got_a, at_a)
    got.add_incoming(got_b, at_b)
    ok = b.icmp_unsigned("!=", got, ir.Constant(_I8P, None))
    with b.if_then(ok, likely=True):
        b.call(decref, [got])
    b.call(release, [gil])
    with b.if_then(b.icmp_unsigned("==", got, ir.Constant(_I8P, None)), likely=False):
        frame.state.fail(ir.Constant(_I32, PYTHON_ERROR))


class Site:
    """The Python half of a site: ``site(address)`` reads the argument block
    at ``address`` (see the module docstring), makes the views and calls
    ``fn``.  ``spec``: the site's entry of the object file's metadata."""

    #: views kept per site (by address, shape, strides; all dropped when full)
    KEEP = 32

    def __init__(self, fn, spec):
        self.fn = fn
        self.kinds = [(kind, np.dtype(dt), ndim) for kind, dt, ndim in spec["args"]]
        self.keywords = tuple(spec["keywords"])
        self.nwords = sum(1 + 2 * ndim if kind == "a" else kind == "s"
                          for kind, _, ndim in self.kinds)
        self.block = ctypes.c_int64 * max(1, self.nwords)
        self.views = {}

    def __call__(self, address):
        words = self.block.from_address(address)[:self.nwords]
        # (a site called again on the same arrays -- a loop of a plan, each call
        # -- takes the values it made last time)
        last = self._last
        if last is not None and last[0] == words:
            values = last[1]
        else:
            values = self._values(words)
            self._last = (words, values)
        if not self.keywords:
            self.fn(*values)
            return
        n = len(values) - len(self.keywords)
        self.fn(*values[:n], **dict(zip(self.keywords, values[n:], strict=True)))

    _last = None  # (the argument words, their values) of the last call

    def _values(self, words):
        values, at = [], 0
        for kind, dtype, ndim in self.kinds:
            if kind == "n":
                values.append(None)
                continue
            if kind == "s":
                values.append(_number(words[at], dtype))
                at += 1
                continue
            key = (dtype.num, *words[at:at + 1 + 2 * ndim])
            at += 1 + 2 * ndim
            view = self.views.get(key)
            if view is None:
                if len(self.views) >= self.KEEP:
                    self.views.clear()  # (one step, safe beside another thread's call)
                view = self.views[key] = _view(dtype, key[1], key[2:2 + ndim], key[2 + ndim:])
            values.append(view)
        return values


def _number(word, dtype):
    """A number as numba's object mode boxes it: a Python float, int or bool."""
    if dtype.kind == "f":
        return ctypes.c_double.from_buffer(ctypes.c_int64(word)).value
    if dtype.kind == "b":
        return bool(word)
    return word & ((1 << 64) - 1) if dtype.kind == "u" else word


_EMPTY = bytearray()


def _view(dtype, data, shape, strides):
    """The numpy array of ``shape`` and ``strides`` (bytes) at address ``data``
    (no copy: a view of memory the compiled code owns or was given)."""
    if 0 in shape:
        return np.ndarray(shape, dtype, buffer=_EMPTY, strides=strides)
    low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0) + \
        dtype.itemsize
    memory = (ctypes.c_char * (high - low)).from_address(data + low)
    return np.ndarray(shape, dtype, buffer=memory, offset=-low, strides=strides)


class StaleNest(Exception):
    """A cached object's inner loop (:mod:`.nests`) was translated for a
    runner that is not the one of this process: the object is translated
    again."""


def bind_sites(specs, namespace):
    """``{symbol: address}`` of the C variables of a loaded object's sites,
    each holding its :class:`Site` (made from ``namespace()``, the generated
    module's names), and the objects to keep alive with the code."""
    if not specs:
        return {}, []
    ns = namespace()
    cells, keep = {}, []
    for spec in specs:
        if "nest" in spec:  # (an inner loop run natively: its runner's context)
            nest = ns[spec["name"]].nest()
            if not spec_matches(spec["nest"], nest):
                raise StaleNest(spec["name"])
            keep.append(nest[1])  # (the word the code loads the context's address from)
            cells[spec["symbol"]] = ctypes.addressof(nest[1])
            continue
        site = Site(ns[spec["name"]], spec)
        cell = ctypes.c_void_p(id(site))
        keep += [site, cell]
        cells[spec["symbol"]] = ctypes.addressof(cell)
    return cells, keep
