"""Expressions and calls of the translator (a mixin of :class:`.translate.Frame`)."""

from __future__ import annotations

import ast
import builtins
import math

import numpy as np
from llvmlite import ir

from .values import BOOL, I64, UNDEF, ArrayV, Const, CtypesOf, Scalar, TupleV, Unsupported

__all__ = ["Expressions"]

_BINOP = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
          ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>",
          ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_CMPOP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
          ast.NotEq: "!="}
_UNOP = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}

#: numpy scalar types a call converts to
_NP_TYPES = {np.float64, np.float32, np.int64, np.int32, np.int16, np.int8, np.uint64,
             np.uint32, np.uint16, np.uint8, np.bool_, np.intp}


class Expressions:
    """Translating expressions to values (see :mod:`.values`)."""

    def expr(self, node):
        m = getattr(self, "_e_" + type(node).__name__, None)
        if m is None:
            raise Unsupported(f"expression {type(node).__name__}")
        return m(node)

    def _e_Constant(self, node):
        return Const(node.value)

    def _e_Name(self, node):
        return self.load_name(node.id)

    def load_name(self, name):
        v = self.env.get(name)
        if v is not None:
            if v is UNDEF:
                raise Unsupported(f"{name} may be unbound")
            return v
        if name in self.globals:
            return Const(self.globals[name])
        if hasattr(builtins, name):
            return Const(getattr(builtins, name))
        raise Unsupported(f"unknown name {name}")

    def _e_Tuple(self, node):
        items = [self.expr(e) for e in node.elts]
        if all(isinstance(i, Const) for i in items):
            return Const(tuple(i.value for i in items))
        return TupleV(items)

    _e_List = _e_Tuple  # only where numba would make a tuple of it (literal unrolls)

    def _e_BinOp(self, node):
        op = _BINOP.get(type(node.op))
        if op is None:
            raise Unsupported(f"operator {type(node.op).__name__}")
        return self.binop(op, self.expr(node.left), self.expr(node.right))

    def binop(self, op, x, y):
        if isinstance(x, Const) and isinstance(y, Const) and op == "+" and \
                isinstance(x.value, tuple) and isinstance(y.value, tuple):
            return Const(x.value + y.value)
        return self.ops.binop(op, x, y)

    def _e_UnaryOp(self, node):
        return self.ops.unary(_UNOP[type(node.op)], self.expr(node.operand))

    def truth_of(self, v):
        if isinstance(v, Const):
            if v.dtype is None and v.value is not None and not isinstance(v.value, tuple):
                raise Unsupported(f"truth of {v.value!r}")
            return Const(bool(v.value))
        if isinstance(v, Scalar):
            return self.ops.truth(v)
        raise Unsupported(f"truth of {v!r}")

    def _e_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.expr(comp)
            if isinstance(op, (ast.Is, ast.IsNot)):
                if not (isinstance(left, Const) and isinstance(right, Const)):
                    raise Unsupported("is on runtime values")
                same = left.value is right.value
                r = Const(same if isinstance(op, ast.Is) else not same)
            else:
                r = self.ops.compare(_CMPOP[type(op)], left, right)
            result = r if result is None else self._and(result, r)
            left = right
        return result

    def _and(self, a, c):
        if isinstance(a, Const):
            return c if a.value else a
        if isinstance(c, Const):
            return a if c.value else c
        return Scalar(self.b.and_(self.ops.truth(a).value, self.ops.truth(c).value), BOOL)

    def _e_BoolOp(self, node):
        """``and`` / ``or`` as branches (the right operand runs only when
        needed); the value is the deciding operand, as in Python."""
        is_and = isinstance(node.op, ast.And)
        value = self.expr(node.values[0])
        for rest in node.values[1:]:
            t = self.truth_of(value)
            if isinstance(t, Const):
                if t.value == is_and:
                    value = self.expr(rest)
                continue
            value = self.branch_value(t, (lambda r=rest: self.expr(r)), value, is_and)
        return value

    def branch_value(self, cond, make, other, when_true):
        """``make()`` where ``cond`` is ``when_true``, else ``other`` (already
        evaluated), joined by a phi."""
        cur = self.b.block
        then = self.b.append_basic_block("bool.rhs")
        done_edges = []
        if when_true:
            self.b.cbranch(cond.value, then, self._edge_to(done_edges, other, cur))
        else:
            self.b.cbranch(cond.value, self._edge_to(done_edges, other, cur), then)
        self.b.position_at_end(then)
        v = make()
        return self._join_values(done_edges + [(self.b.block, v)])

    def _edge_to(self, edges, value, _):
        blk = self.b.append_basic_block("bool.skip")
        edges.append((blk, value))
        return blk

    def _join_values(self, edges):
        """One value from ``(open block, value)`` edges (a phi where they differ)."""
        vals = [v for _, v in edges]
        shape = self.join_type(vals)
        cont = self.b.append_basic_block("join")
        flats = []
        for block, v in edges:
            self.b.position_at_end(block)
            flats.append((self.flatten(v, shape), self.b.block))
            self.b.branch(cont)
        self.b.position_at_end(cont)
        phis = self.make_phis(shape)
        for flat, block in flats:
            for phi, x in zip(phis, flat, strict=True):
                phi.add_incoming(x, block)
        return self.rebuild(shape, phis)

    def _e_IfExp(self, node):
        cond = self.truth_of(self.expr(node.test))
        if isinstance(cond, Const):
            return self.expr(node.body if cond.value else node.orelse)
        then = self.b.append_basic_block("ifexp.then")
        other = self.b.append_basic_block("ifexp.else")
        self.b.cbranch(cond.value, then, other)
        self.b.position_at_end(then)
        a = self.expr(node.body)
        a_end = self.b.block
        self.b.position_at_end(other)
        c = self.expr(node.orelse)
        c_end = self.b.block
        return self._join_values([(a_end, a), (c_end, c)])

    # -- subscripts -----------------------------------------------------------------
    def subscript_key(self, node):
        if isinstance(node, ast.Slice):
            return self._slice(node)
        if isinstance(node, ast.Tuple):
            items = [self._slice(e) if isinstance(e, ast.Slice) else self.expr(e)
                     for e in node.elts]
            if all(isinstance(i, Const) for i in items):
                return Const(tuple(i.value for i in items))
            return TupleV(items)
        return self.expr(node)

    def _slice(self, node):
        parts = []
        for e in (node.lower, node.upper):
            if e is None:
                parts.append(None)
            else:
                parts.append(self.arr.dim(self.expr(e)))
        step = None
        if node.step is not None:
            sv = self.expr(node.step)
            if not isinstance(sv, Const):
                raise Unsupported("runtime slice step")
            step = int(sv.value)
        return Const(slice(parts[0], parts[1], step))

    def _e_Subscript(self, node):
        base = self.expr(node.value)
        key = self.subscript_key(node.slice)
        if isinstance(base, ArrayV):
            return self.arr.getitem(base, key)
        if isinstance(base, (TupleV, Const)) and isinstance(key, Const) and \
                isinstance(key.value, (int, np.integer, slice)):
            items = base.items if isinstance(base, TupleV) else None
            if items is None:
                try:
                    return Const(base.value[key.value])
                except (TypeError, IndexError, KeyError):
                    raise Unsupported("subscript of a constant") from None
            got = items[key.value]
            return TupleV(got) if isinstance(key.value, slice) else got
        if isinstance(base, Const) and isinstance(base.value, tuple) and base.value and \
                isinstance(key, Scalar) and key.dtype.kind in "iu":
            return self.table_item(base.value, key)
        raise Unsupported(f"subscript of {base!r}")

    def table_item(self, values, index):
        """``values[index]`` of a tuple of numbers known while translating, at a
        runtime index (numba's homogeneous tuples): a constant table in the
        module, the index wrapped like an array's."""
        dts = [Const(v).dtype for v in values]
        if any(d is None for d in dts):
            raise Unsupported("a runtime index into a tuple of non-numbers")
        from .values import lltype, promote

        dt = promote(*dts)
        t = lltype(dt)
        arr_t = ir.ArrayType(t, len(values))
        module = self.b.module
        g = ir.GlobalVariable(module, arr_t, name=f"table.{len(module.globals)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(arr_t, [self.ops.const(v, dt).value.constant
                                            for v in values])
        i = self.arr.wrap(self.arr.dim(index), len(values))
        return Scalar(self.b.load(self.b.gep(g, [ir.Constant(ir.IntType(64), 0),
                                                 self.arr.i64(i)])), dt)

    # -- attributes -----------------------------------------------------------------
    def _e_Attribute(self, node):
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, ArrayV):
            return self.array_attr(base, attr)
        if isinstance(base, Const):
            if isinstance(base.value, CtypesOf):
                if attr == "data":
                    return Scalar(self.b.ptrtoint(base.value.array.data, ir.IntType(64)), I64)
                raise Unsupported(f"ctypes.{attr}")
            try:
                return Const(getattr(base.value, attr))
            except AttributeError:
                raise Unsupported(f"attribute {attr}") from None
        if isinstance(base, Scalar):
            if attr in ("real",):
                return base
            if attr == "imag":
                return self.ops.const(0, base.dtype)
            if attr == "dtype":
                return Const(base.dtype)
        if isinstance(base, TupleV):
            raise Unsupported(f"tuple.{attr}")
        raise Unsupported(f"attribute {attr} of {base!r}")

    def array_attr(self, a, attr):
        if attr == "T":
            return self.arr.transpose(a)
        if attr == "shape":
            return _dims_tuple(self.arr, a.shape)
        if attr == "strides":
            return _dims_tuple(self.arr, a.strides)
        if attr == "size":
            return self.arr.value(self.arr.size(a))
        if attr == "ndim":
            return Const(a.ndim)
        if attr == "dtype":
            return Const(a.dtype)
        if attr == "ctypes":
            return Const(CtypesOf(a))
        if attr == "real" and a.dtype.kind != "c":
            return a
        raise Unsupported(f"array.{attr}")

    # -- calls ----------------------------------------------------------------------
    def _e_Call(self, node):
        func = node.func
        if isinstance(func, ast.Attribute):
            obj = self.expr(func.value)
            if isinstance(obj, Const) and obj.dtype is not None and \
                    isinstance(obj.value, np.generic) and func.attr in ("view", "item"):
                obj = self.ops.scalar(obj)
            if isinstance(obj, (ArrayV, Scalar)):
                args = [self.expr(a) for a in node.args]
                kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
                return self.method(obj, func.attr, args, kwargs)
            fn = self._e_Attribute(func) if not isinstance(obj, Const) else \
                Const(_getattr(obj.value, func.attr))
        else:
            fn = self.expr(func)
        if not isinstance(fn, Const):
            raise Unsupported("call of a runtime value")
        args = [self.expr(a) for a in node.args]
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise Unsupported("*args in a call")
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
        return self.call(fn.value, args, kwargs)

    def method(self, obj, name, args, kwargs):
        if isinstance(obj, Scalar):
            if name == "view" and len(args) == 1 and isinstance(args[0], Const):
                return self.ops.bitcast(obj, np.dtype(args[0].value))
            if name == "item" and not args:
                return obj
            raise Unsupported(f"scalar.{name}")
        if name == "reshape":
            dims = args[0] if len(args) == 1 else Const(tuple(a.value for a in args)) \
                if all(isinstance(a, Const) for a in args) else TupleV(args)
            if isinstance(dims, Const) and isinstance(dims.value, (int, np.integer)):
                dims = Const((int(dims.value),))
            items = [Const(v) for v in dims.value] if isinstance(dims, Const) else \
                dims.items if isinstance(dims, TupleV) else [dims]
            return self.arr.reshape(obj, [self.arr.dim(d) for d in items])
        if name == "transpose":
            axes = None if not args else args[0].value if len(args) == 1 else \
                tuple(a.value for a in args)
            return self.arr.transpose(obj, axes)
        if name == "fill" and len(args) == 1:
            self.arr.fill(obj, args[0])
            return Const(None)
        if name == "view" and len(args) == 1 and isinstance(args[0], Const):
            return self.arr.view_as(obj, np.dtype(args[0].value))
        raise Unsupported(f"array.{name}")

    def call(self, fn, args, kwargs):
        t = self.t
        native = t.native(fn)
        if native is not None:
            return native(self, args, kwargs)
        if fn in (range,):
            raise Unsupported("range outside a for loop")
        if fn in _PURE_BUILTINS and all(isinstance(a, Const) for a in args) and not kwargs:
            return Const(fn(*(a.value for a in args)))  # decided while translating
        if fn is min or fn is max:
            vals = args[0].items if len(args) == 1 and isinstance(args[0], TupleV) else args
            return self.ops.minmax(fn.__name__, vals)
        if fn is abs:
            return self.ops.ufunc(np.absolute, args)
        if fn is len:
            a = args[0]
            if isinstance(a, ArrayV):
                return self.arr.value(a.shape[0])
            if isinstance(a, TupleV):
                return Const(len(a.items))
            if isinstance(a, Const):
                return Const(len(a.value))
            raise Unsupported("len")
        if fn in (float, int, bool) or fn in _NP_TYPES or isinstance(fn, np.dtype):
            dt = np.dtype(fn) if fn not in (float, int, bool) else \
                {float: np.dtype(np.float64), int: I64, bool: BOOL}[fn]
            if len(args) != 1 or kwargs:
                raise Unsupported("type call")
            v = args[0]
            if isinstance(v, Const) and v.dtype is not None:
                return Const(dt.type(v.value)) if fn not in (float, int, bool) else \
                    Const(fn(v.value))
            if isinstance(v, Const) and isinstance(v.value, str):
                return Const(fn(v.value))
            return self.ops.cast(self.ops.scalar(v), dt)
        if isinstance(fn, np.ufunc):
            if kwargs or any(isinstance(a, ArrayV) for a in args):
                raise Unsupported(f"np.{fn.__name__} on arrays")
            return self.ops.ufunc(fn, args)
        if fn is np.broadcast_to:
            a, shape = args
            dims = [Const(v) for v in shape.value] if isinstance(shape, Const) and \
                isinstance(shape.value, tuple) else shape.items if isinstance(shape, TupleV) \
                else [shape]
            return self.arr.broadcast_to(a, [self.arr.dim(d) for d in dims])
        if fn is np.transpose:
            axes = args[1].value if len(args) > 1 else kwargs.get("axes", Const(None)).value
            return self.arr.transpose(args[0], axes)
        if getattr(fn, "__module__", None) == "math" or fn in _MATH_SCALARS:
            return self.math_call(fn, args)
        if fn is float.fromhex and isinstance(args[0], Const):
            return Const(float.fromhex(args[0].value))
        if type(fn).__name__ == "ExternalFunction" and hasattr(fn, "symbol"):
            from .natives import external_call
            return external_call(self, fn, args)
        # a Python function: the generated module's own (an LLVM function of
        # its own) or a library one (numba dispatcher: translated inline)
        return t.call_function(self, fn, args, kwargs)

    def math_call(self, fn, args):
        name = fn.__name__
        if name in ("isnan", "isinf", "isfinite"):
            return self.ops.ufunc(getattr(np, name), args)
        if name == "copysign":
            return self.ops.ufunc(np.copysign, args)
        if name in ("floor", "ceil", "trunc"):  # an int, as in Python (and numba)
            s = self.ops.scalar(args[0])
            if s.dtype.kind != "f":
                return s
            f = Scalar(self.ops.math(name, [s.value], s.dtype), s.dtype)
            return self.ops.cast(f, I64)
        if name == "fabs":
            return self.ops.ufunc(np.fabs, args)
        if name == "pow":
            return self.ops.power(*args)
        vals = [self.ops.scalar(a) for a in args]
        dt = np.result_type(*[v.dtype for v in vals], np.float64) if any(
            v.dtype != np.float32 for v in vals) else np.dtype(np.float32)
        vals = [self.ops.cast(v, dt) for v in vals]
        return Scalar(self.ops.math(name, [v.value for v in vals], dt), dt)


_MATH_SCALARS = {math.exp, math.log, math.sqrt}
#: builtins of known arguments, evaluated while translating
_PURE_BUILTINS = {ord, chr, len, abs, min, max, round, divmod, pow, int, float, bool}


def _getattr(obj, attr):
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise Unsupported(f"attribute {attr}") from None


def _dims_tuple(arr, dims):
    return TupleV([arr.value(d) for d in dims]) if not all(isinstance(d, int) for d in dims) \
        else Const(tuple(dims))
