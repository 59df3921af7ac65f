"""Calling compiled code from Python: each exported function gets an entry
point written in LLVM IR with the C calling convention of CPython's
``METH_FASTCALL`` functions, and a builtin function object made from it.

The entry point converts its integer arguments (``PyLong_AsLongLong``),
calls the function -- with the GIL released when the function is heavy
(``nogil``) -- and turns a nonzero status into the exception the generated
code raised (its type and message, numbered by the translator).  A call costs
about as much as any builtin function call (tens of nanoseconds), less than
numba's dispatch.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

from .engine import NONE, exception_symbol
from .sites import PYTHON_ERROR
from .values import declare as _fn, declare_global

__all__ = ["python_entry", "make_callable"]

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_OBJ = _I8.as_pointer()


def _cstring(module, text, name):
    data = bytearray(text.encode("utf-8")) + b"\0"
    t = ir.ArrayType(_I8, len(data))
    g = ir.GlobalVariable(module, t, name=name)
    g.initializer = ir.Constant(t, data)
    g.global_constant = True
    g.linkage = "internal"
    return g


def python_entry(translator, fn, nargs, nogil, unknown=RuntimeError):
    """Emit the ``METH_FASTCALL`` entry point of ``fn`` (``nargs`` int64
    arguments); returns its symbol name.  A status that is none of the
    translator's raises is exception class ``unknown``."""
    module = translator.module
    name = fn.name + ".py"
    entry = ir.Function(module, ir.FunctionType(_OBJ, [_OBJ, _OBJ.as_pointer(), _I64]),
                        name=name)
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    as_ll = _fn(module, "PyLong_AsLongLong", _I64, [_OBJ])
    occurred = _fn(module, "PyErr_Occurred", _OBJ, [])
    set_string = _fn(module, "PyErr_SetString", ir.VoidType(), [_OBJ, _OBJ])

    def exc(kind):
        return b.load(declare_global(module, kind, _OBJ))

    def fail(kind, text, label):
        msg = _cstring(module, text, f"{name}.{label}")
        b.call(set_string, [exc(kind), b.bitcast(msg, _OBJ)])
        b.ret(ir.Constant(_OBJ, None))

    arr = b.alloca(ir.ArrayType(_I64, max(nargs, 1)))  # (in the entry block: a static slot)
    bad_n = b.icmp_signed("!=", entry.args[2], ir.Constant(_I64, nargs))
    with b.if_then(bad_n, likely=False):
        fail(exception_symbol(TypeError), f"{fn.name}() takes {nargs} integer arguments", "nargs")
    # the arguments converted in a loop into an array, then read from it: one
    # conversion's code, not nargs copies of it (a plan's entry takes 30-80
    # arguments: unrolled, its entry was 12 % of the IR LLVM optimized for the
    # test suite's larger programs, for no call measurably faster)
    zero = ir.Constant(_I64, 0)
    head = entry.append_basic_block("args.head")
    body = entry.append_basic_block("args.body")
    done = entry.append_basic_block("args.done")
    start = b.block
    b.branch(head)
    b.position_at_end(head)
    k = b.phi(_I64)
    k.add_incoming(zero, start)
    b.cbranch(b.icmp_signed("<", k, ir.Constant(_I64, nargs)), body, done)
    b.position_at_end(body)
    v = b.call(as_ll, [b.load(b.gep(entry.args[1], [k]))])
    with b.if_then(b.icmp_signed("==", v, ir.Constant(_I64, -1)), likely=False):
        err = b.call(occurred, [])
        with b.if_then(b.icmp_unsigned("!=", err, ir.Constant(_OBJ, None)), likely=False):
            b.ret(ir.Constant(_OBJ, None))
    b.store(v, b.gep(arr, [zero, k]))
    k.add_incoming(b.add(k, ir.Constant(_I64, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)
    vals = [b.load(b.gep(arr, [zero, ir.Constant(_I64, j)])) for j in range(nargs)]
    if nogil:
        save = _fn(module, "PyEval_SaveThread", _OBJ, [])
        restore = _fn(module, "PyEval_RestoreThread", ir.VoidType(), [_OBJ])
        ts = b.call(save, [])
        status = b.call(fn, vals)
        b.call(restore, [ts])
    else:
        status = b.call(fn, vals)
    # a Python function called from object mode raised (.sites): its exception is set
    raised = b.icmp_signed("==", status, ir.Constant(_I32, PYTHON_ERROR))
    with b.if_then(raised, likely=False):
        b.ret(ir.Constant(_OBJ, None))
    for code, (symbol, message) in enumerate(translator.raises, start=1):
        with b.if_then(b.icmp_signed("==", status, ir.Constant(_I32, code)), likely=False):
            fail(symbol, message, f"e{code}")
    other = b.icmp_signed("!=", status, ir.Constant(_I32, 0))
    with b.if_then(other, likely=False):
        fail(exception_symbol(unknown), f"{fn.name}: failed (status unknown)", "other")
    none = declare_global(module, NONE, _I8)
    incref = _fn(module, "Py_IncRef", ir.VoidType(), [_OBJ])
    p = b.bitcast(none, _OBJ)
    b.call(incref, [p])
    b.ret(p)
    return name


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x80


def make_callable(address, name):
    """A builtin function object calling the entry point at ``address``.

    Its method definition (the C struct the object points to) is the
    object's ``__self__`` (which the entry point ignores), so it lives exactly
    as long as the object: kept in a list of this module's instead, it was
    freed first when the interpreter cleared its modules at exit, and a
    callable still held elsewhere (a plan's) then read its flags from freed
    memory while it was deallocated -- a segfault at exit."""
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    md = _MethodDef(name.encode(), address, _METH_FASTCALL, None)
    return new(ctypes.addressof(md), md, None)
