"""Scalar arithmetic with numba's semantics, as LLVM instructions.

Each operation is what numba emits for the same Python expression on the
same types (``numba/cpython/numbers.py``, ``numba/np/npyfuncs.py``): Python's
floor division and modulo, numpy's error model (a zero divisor gives inf,
nan or 0, never an exception), numpy's ufuncs on scalars with numpy's loop
dtypes (``np.maximum`` propagates NaN, ``np.fmax`` ignores it, ``np.sign`` of
NaN is NaN), libm for the transcendentals.  Integers that both operands
know while translating are folded (shapes, indices, flags).
"""

from __future__ import annotations

import math
import operator

import numpy as np
from llvmlite import ir

from .values import BOOL, F32, F64, I64, Const, Scalar, Unsupported, lltype, promote

__all__ = ["ScalarOps", "is_number"]

_I1 = ir.IntType(1)


def is_number(v):
    return isinstance(v, Scalar) or (isinstance(v, Const) and v.dtype is not None)


_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
         "%": operator.mod, "<<": operator.lshift, ">>": operator.rshift,
         "&": operator.and_, "|": operator.or_, "^": operator.xor, "/": operator.truediv}
_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}

#: libm names of numpy ufuncs numba lowers to a libm call (float64; float32 adds "f")
_LIBM = {"sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
         "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
         "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "exp": "exp",
         "expm1": "expm1", "log": "log", "log1p": "log1p", "log10": "log10", "log2": "log2",
         "exp2": "exp2", "cbrt": "cbrt", "arctan2": "atan2", "hypot": "hypot",
         "fmod": "fmod", "erf": "erf", "erfc": "erfc", "lgamma": "lgamma",
         "gamma": "tgamma"}
#: those LLVM has instructions or intrinsics for
_INTRINSIC = {"sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
              "ceil": "llvm.ceil", "trunc": "llvm.trunc", "rint": "llvm.rint",
              "copysign": "llvm.copysign", "pow": "llvm.pow"}


class ScalarOps:
    """Scalar operations emitted by ``builder`` with fast-math ``flags`` (a
    tuple such as ``("contract",)``) on floating-point instructions."""

    def __init__(self, builder, flags=()):
        self.b = builder
        self.flags = tuple(flags)

    # -- values ------------------------------------------------------------------
    def const(self, value, dtype):
        dtype = np.dtype(dtype)
        t = lltype(dtype)
        if dtype.kind == "f":
            return Scalar(ir.Constant(t, float(value)), dtype)
        if dtype == BOOL:
            return Scalar(ir.Constant(t, int(bool(value))), dtype)
        v = int(value)
        if dtype.kind == "u":
            v &= (1 << (8 * dtype.itemsize)) - 1
        return Scalar(ir.Constant(t, v), dtype)

    def scalar(self, v, dtype=None):
        """``v`` (a number, known or not) as a register, cast to ``dtype`` if given."""
        if isinstance(v, Const):
            if v.dtype is None:
                raise Unsupported(f"not a number: {v.value!r}")
            return self.const(v.value, dtype or v.dtype)
        if not isinstance(v, Scalar):
            raise Unsupported(f"not a scalar: {v!r}")
        return v if dtype is None else self.cast(v, dtype)

    def cast(self, s, dtype):
        """``s`` converted to ``dtype`` as numba converts (``context.cast``)."""
        dtype = np.dtype(dtype)
        src = s.dtype
        if src == dtype:
            return s
        b, v, t = self.b, s.value, lltype(dtype)
        if dtype == BOOL:
            if src.kind == "f":
                return Scalar(b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)), BOOL)
            return Scalar(b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)), BOOL)
        if src == BOOL:
            return Scalar(b.uitofp(v, t) if dtype.kind == "f" else b.zext(v, t), dtype)
        if src.kind == "f" and dtype.kind == "f":
            return Scalar(b.fpext(v, t) if dtype.itemsize > src.itemsize else b.fptrunc(v, t),
                          dtype)
        if src.kind == "f":
            return Scalar(b.fptosi(v, t) if dtype.kind == "i" else b.fptoui(v, t), dtype)
        if dtype.kind == "f":
            return Scalar(b.sitofp(v, t) if src.kind == "i" else b.uitofp(v, t), dtype)
        if dtype.itemsize > src.itemsize:
            return Scalar(b.sext(v, t) if src.kind == "i" else b.zext(v, t), dtype)
        if dtype.itemsize < src.itemsize:
            return Scalar(b.trunc(v, t), dtype)
        return Scalar(v, dtype)  # same width, other signedness

    def truth(self, v):
        """Python truth of a number, as an i1 (or a Const bool)."""
        if isinstance(v, Const):
            return Const(bool(v.value))
        return self.cast(self.scalar(v), BOOL)

    def bitcast(self, s, dtype):
        """``s.view(dtype)`` of a scalar: the same bits as another type."""
        dtype = np.dtype(dtype)
        s = self.scalar(s)
        if s.dtype.itemsize != dtype.itemsize:
            raise Unsupported("view between sizes")
        return Scalar(self.b.bitcast(s.value, lltype(dtype)), dtype)

    # -- arithmetic --------------------------------------------------------------
    def binop(self, op, x, y):
        if isinstance(x, Const) and isinstance(y, Const) and \
                type(x.value) in (int, bool) and type(y.value) in (int, bool):
            if not (op in ("//", "%") and y.value == 0) and op != "**":
                r = _FOLD[op](x.value, y.value)
                if op == "/" or -2**63 <= r < 2**63:
                    return Const(r)
        if op == "**":
            return self.power(x, y)
        dx, dy = x.dtype, y.dtype
        if dx is None or dy is None:
            raise Unsupported(f"{op} of {x!r} and {y!r}")
        if op == "/":
            dt = promote(dx, dy)
            dt = F64 if dt.kind in "iu" else dt
            a, c = self.scalar(x, dt), self.scalar(y, dt)
            return Scalar(self.b.fdiv(a.value, c.value, flags=self.flags), dt)
        if op in ("&", "|", "^") and dx == BOOL and dy == BOOL:
            a, c = self.scalar(x), self.scalar(y)
            fn = {"&": self.b.and_, "|": self.b.or_, "^": self.b.xor}[op]
            return Scalar(fn(a.value, c.value), BOOL)
        dt = promote(dx, dy)
        a, c = self.scalar(x, dt), self.scalar(y, dt)
        if dt.kind == "f":
            return self._float_binop(op, a.value, c.value, dt)
        return self._int_binop(op, a.value, c.value, dt)

    def _float_binop(self, op, a, c, dt):
        b, fl = self.b, self.flags
        if op == "+":
            return Scalar(b.fadd(a, c, flags=fl), dt)
        if op == "-":
            return Scalar(b.fsub(a, c, flags=fl), dt)
        if op == "*":
            return Scalar(b.fmul(a, c, flags=fl), dt)
        if op in ("//", "%"):
            q, r = self._float_divmod(a, c, dt)
            return Scalar(q if op == "//" else r, dt)
        raise Unsupported(f"float {op}")

    def _float_divmod(self, vx, wx, dt):
        """Python's float divmod (CPython float_divmod, as numba's
        real_divmod_func_body); a zero divisor gives numpy's nan/inf."""
        b, t = self.b, lltype(dt)
        zero, one, half = (ir.Constant(t, v) for v in (0.0, 1.0, 0.5))
        mod = b.frem(vx, wx)
        div = b.fdiv(b.fsub(vx, mod), wx)
        mod_nz = b.fcmp_unordered("!=", mod, zero)
        signs_differ = b.icmp_unsigned("!=", b.fcmp_ordered("<", wx, zero),
                                       b.fcmp_ordered("<", mod, zero))
        fix = b.and_(mod_nz, signs_differ)
        mod = b.select(fix, b.fadd(mod, wx), mod)
        div = b.select(fix, b.fsub(div, one), div)
        # a zero remainder takes the divisor's sign
        mod = b.select(mod_nz, mod, self._intrinsic("llvm.copysign", [zero, wx], t))
        floordiv = self._intrinsic("llvm.floor", [div], t)
        floordiv = b.select(b.fcmp_ordered(">", b.fsub(div, floordiv), half),
                            b.fadd(floordiv, one), floordiv)
        div_nz = b.fcmp_unordered("!=", div, zero)
        floordiv = b.select(div_nz, floordiv,
                            self._intrinsic("llvm.copysign", [zero, b.fdiv(vx, wx)], t))
        # numpy's error model: x // 0 is x / 0 (inf or nan), x % 0 is nan
        wz = b.fcmp_ordered("==", wx, zero)
        nan = ir.Constant(t, float("nan"))
        return b.select(wz, b.fdiv(vx, wx), floordiv), b.select(wz, nan, mod)

    def _int_binop(self, op, a, c, dt):
        b = self.b
        simple = {"+": b.add, "-": b.sub, "*": b.mul, "&": b.and_, "|": b.or_, "^": b.xor,
                  "<<": b.shl}
        if op in simple:
            return Scalar(simple[op](a, c), dt)
        if op == ">>":
            return Scalar(b.ashr(a, c) if dt.kind == "i" else b.lshr(a, c), dt)
        if op in ("//", "%"):
            t = a.type
            zero = ir.Constant(t, 0)
            is_zero = b.icmp_unsigned("==", c, zero)
            safe_c = b.select(is_zero, ir.Constant(t, 1), c)
            if dt.kind == "u":
                q, r = b.udiv(a, safe_c), b.urem(a, safe_c)
            else:
                # x86 traps on MIN // -1: numba returns 0, 0
                bits = 8 * dt.itemsize
                ovf = b.and_(b.icmp_signed("==", a, ir.Constant(t, -(1 << (bits - 1)))),
                             b.icmp_signed("==", safe_c, ir.Constant(t, -1)))
                safe_c = b.select(ovf, ir.Constant(t, 1), safe_c)
                q, r = b.sdiv(a, safe_c), b.srem(a, safe_c)
                fix = b.and_(b.icmp_signed("!=", r, zero),
                             b.icmp_signed("<", b.xor(safe_c, r), zero))
                q = b.select(fix, b.sub(q, ir.Constant(t, 1)), q)
                r = b.select(fix, b.add(r, safe_c), r)
                q = b.select(ovf, zero, q)
                r = b.select(ovf, zero, r)
            res = q if op == "//" else r
            return Scalar(b.select(is_zero, zero, res), dt)  # numpy's error model: 0
        raise Unsupported(f"integer {op}")

    def power(self, x, y):
        """``x ** y``: floats by ``pow``; an integer exponent by repeated
        squaring, as numba's ``int_power_impl`` (a negative exponent of a
        float inverts)."""
        dx, dy = x.dtype, y.dtype
        if dx is None or dy is None:
            raise Unsupported("** of non-numbers")
        if dy.kind in "iub" and dx.kind in "iub":
            raise Unsupported("integer ** integer")
        if dy.kind == "f" or dx.kind != "f":
            dt = promote(dx, dy)
            a, c = self.scalar(x, dt), self.scalar(y, dt)
            return Scalar(self._intrinsic("llvm.pow", [a.value, c.value], lltype(dt)), dt)
        # float ** integer: numba's int_power (exact squarings)
        if isinstance(y, Const):
            return self._static_power(self.scalar(x), int(y.value))
        raise Unsupported("float ** runtime integer")

    def _static_power(self, a, e):
        b = self.b
        t = a.value.type
        inv, e = e < 0, abs(e)
        r = ir.Constant(t, 1.0)
        base = a.value
        while e:
            if e & 1:
                r = b.fmul(r, base, flags=self.flags)
            e >>= 1
            if e:
                base = b.fmul(base, base, flags=self.flags)
        if inv:
            r = b.fdiv(ir.Constant(t, 1.0), r, flags=self.flags)
        return Scalar(r, a.dtype)

    def unary(self, op, x):
        if isinstance(x, Const) and type(x.value) in (int, bool, float):
            v = x.value
            return Const({"-": lambda: -v, "+": lambda: +v, "not": lambda: not v,
                          "~": lambda: ~v}[op]())
        if op == "not":
            t = self.truth(x)
            return Scalar(self.b.not_(t.value), BOOL)
        s = self.scalar(x)
        if s.dtype == BOOL:
            s = self.cast(s, I64)
        if op == "+":
            return s
        if op == "-":
            if s.dtype.kind == "f":
                return Scalar(self.b.fneg(s.value, flags=self.flags), s.dtype)
            return Scalar(self.b.neg(s.value), s.dtype)
        if op == "~":
            return Scalar(self.b.not_(s.value), s.dtype)
        raise Unsupported(f"unary {op}")

    def compare(self, op, x, y):
        if isinstance(x, Const) and isinstance(y, Const):
            try:
                return Const(bool(_CMP[op](x.value, y.value)))
            except TypeError:
                raise Unsupported(f"compare {x!r} {op} {y!r}") from None
        if not (is_number(x) and is_number(y)):
            raise Unsupported(f"compare {x!r} {op} {y!r}")
        dt = promote(x.dtype, y.dtype) if not (x.dtype == BOOL and y.dtype == BOOL) else BOOL
        a, c = self.scalar(x, dt), self.scalar(y, dt)
        if dt.kind == "f":
            fn = self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered
            return Scalar(fn(op, a.value, c.value), BOOL)
        if dt.kind == "i":
            return Scalar(self.b.icmp_signed(op, a.value, c.value), BOOL)
        return Scalar(self.b.icmp_unsigned(op, a.value, c.value), BOOL)

    def select(self, cond, x, y):
        """``x if cond else y`` of two numbers (both already evaluated)."""
        dt = promote(x.dtype, y.dtype) if not (x.dtype == BOOL and y.dtype == BOOL) else BOOL
        a, c = self.scalar(x, dt), self.scalar(y, dt)
        return Scalar(self.b.select(self.truth(cond).value, a.value, c.value), dt)

    def minmax(self, kind, args):
        """Python's builtin ``min`` / ``max`` of numbers (numba's do_minmax:
        the next value replaces the running one when it compares greater
        (max) or less (min), so a NaN operand is kept only in first place)."""
        acc = args[0]
        for v in args[1:]:
            if isinstance(acc, Const) and isinstance(v, Const):
                acc = Const(max(acc.value, v.value) if kind == "max" else
                            min(acc.value, v.value))
                continue
            dt = promote(acc.dtype, v.dtype)
            a, c = self.scalar(acc, dt), self.scalar(v, dt)
            pred = self.compare(">" if kind == "max" else "<", c, a)
            acc = Scalar(self.b.select(pred.value, c.value, a.value), dt)
        return acc

    # -- functions ---------------------------------------------------------------
    def _declare(self, name, argtypes, ret):
        module = self.b.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ret, argtypes), name=name)
        return fn

    def _intrinsic(self, base, args, t):
        suffix = "f64" if isinstance(t, ir.DoubleType) else "f32"
        fn = self._declare(f"{base}.{suffix}", [t] * len(args), t)
        return self.b.call(fn, args, fastmath=self.flags) if self.flags else \
            self.b.call(fn, args)

    def libm(self, name, args, dtype):
        """libm's ``name`` (``sin``; ``sinf`` in float32) on registers of ``dtype``."""
        t = lltype(dtype)
        cname = name + ("f" if dtype == F32 else "")
        fn = self._declare(cname, [t] * len(args), t)
        return self.b.call(fn, args)

    def math(self, name, args, dtype):
        """Function ``name`` of :data:`_LIBM` / :data:`_INTRINSIC` on registers."""
        if name in _INTRINSIC:
            return self._intrinsic(_INTRINSIC[name], args, lltype(dtype))
        return self.libm(_LIBM.get(name, name), args, dtype)

    def ufunc(self, uf, args):
        """numpy ufunc ``uf`` on scalars, in the loop dtypes numpy picks."""
        name = uf.__name__
        dts = [a.dtype for a in args]
        if any(d is None for d in dts):
            raise Unsupported(f"np.{name} of non-numbers")
        try:
            loop = uf.resolve_dtypes(tuple(dts) + (None,) * uf.nout)
        except Exception:  # noqa: BLE001
            raise Unsupported(f"np.{name} on {dts}") from None
        ins, out = [np.dtype(d) for d in loop[:uf.nin]], np.dtype(loop[-1])
        if uf.nout != 1:
            raise Unsupported(f"np.{name}: two outputs")
        vals = [self.scalar(a, d) for a, d in zip(args, ins, strict=True)]
        impl = getattr(self, "_uf_" + name, None)
        if impl is not None:
            return impl(vals, out)
        if out.kind == "f" and all(d.kind == "f" for d in ins) and \
                (name in _LIBM or name in _INTRINSIC):
            return Scalar(self.math(name, [v.value for v in vals], out), out)
        raise Unsupported(f"np.{name} on {dts}")

    def _arith(self, op):
        return lambda vals, out: self.binop(op, *vals)

    def _uf_add(self, vals, out):
        if out == BOOL:
            return Scalar(self.b.or_(vals[0].value, vals[1].value), BOOL)
        return self.binop("+", *vals)

    def _uf_subtract(self, vals, out):
        return self.binop("-", *vals)

    def _uf_multiply(self, vals, out):
        if out == BOOL:
            return Scalar(self.b.and_(vals[0].value, vals[1].value), BOOL)
        return self.binop("*", *vals)

    def _uf_true_divide(self, vals, out):
        return self.scalar(self.binop("/", *vals), out)

    _uf_divide = _uf_true_divide

    def _uf_floor_divide(self, vals, out):
        if out.kind == "f":  # numpy's: floor(a / b), as numba's np_real_floor_div_impl
            q = self.b.fdiv(vals[0].value, vals[1].value, flags=self.flags)
            return Scalar(self._intrinsic("llvm.floor", [q], lltype(out)), out)
        return self.binop("//", *vals)

    def _uf_remainder(self, vals, out):
        if out.kind != "f":
            return self.binop("%", *vals)
        b, (x, y) = self.b, (v.value for v in vals)
        zero = ir.Constant(x.type, 0.0)
        res = b.frem(x, y)
        fix = b.and_(b.fcmp_ordered("!=", res, zero),
                     b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", res, zero)))
        return Scalar(b.fadd(res, b.select(fix, y, zero)), out)

    _uf_mod = _uf_remainder

    def _uf_fmod(self, vals, out):
        if out.kind != "f":
            raise Unsupported("integer fmod")
        return Scalar(self.b.frem(vals[0].value, vals[1].value), out)

    def _uf_power(self, vals, out):
        return self.power(*vals)

    def _uf_square(self, vals, out):
        return self.binop("*", vals[0], vals[0])

    def _uf_reciprocal(self, vals, out):
        if out.kind != "f":
            raise Unsupported("integer reciprocal")
        return Scalar(self.b.fdiv(ir.Constant(vals[0].value.type, 1.0), vals[0].value), out)

    def _uf_negative(self, vals, out):
        return self.unary("-", vals[0])

    def _uf_positive(self, vals, out):
        return vals[0]

    def _uf_absolute(self, vals, out):
        x = vals[0]
        if out.kind == "f":
            return Scalar(self._intrinsic("llvm.fabs", [x.value], lltype(out)), out)
        if out.kind == "u" or out == BOOL:
            return x
        neg = self.b.icmp_signed("<", x.value, ir.Constant(x.value.type, 0))
        return Scalar(self.b.select(neg, self.b.neg(x.value), x.value), out)

    _uf_fabs = _uf_absolute

    def _uf_sign(self, vals, out):
        x, b = vals[0].value, self.b
        t = x.type
        if out.kind == "f":  # NaN and zeros give themselves
            res = b.select(b.fcmp_ordered("<", x, ir.Constant(t, 0.0)), ir.Constant(t, -1.0), x)
            res = b.select(b.fcmp_ordered(">", x, ir.Constant(t, 0.0)), ir.Constant(t, 1.0),
                           res)
            return Scalar(res, out)
        zero = ir.Constant(t, 0)
        pos = b.zext(b.icmp_signed(">", x, zero), t)
        neg = b.zext(b.icmp_signed("<", x, zero), t)
        return Scalar(b.sub(pos, neg), out)

    def _minmax_uf(self, vals, out, greater, keep_nan):
        b, (x, y) = self.b, (v.value for v in vals)
        if out.kind != "f":
            if out == BOOL:
                return Scalar((b.or_ if greater else b.and_)(x, y), out)
            op = ">=" if greater else "<="
            cmp = b.icmp_signed(op, x, y) if out.kind == "i" else b.icmp_unsigned(op, x, y)
            return Scalar(b.select(cmp, x, y), out)
        first_nan = b.fcmp_unordered("uno", x if keep_nan else y, x if keep_nan else y)
        any_nan = b.fcmp_unordered("uno", x, y)
        nan_result = b.select(first_nan, x, y) if keep_nan else b.select(first_nan, x, y)
        better = b.fcmp_ordered(">=" if greater else "<=", x, y)
        return Scalar(b.select(any_nan, nan_result, b.select(better, x, y)), out)

    def _uf_maximum(self, vals, out):
        return self._minmax_uf(vals, out, True, True)

    def _uf_minimum(self, vals, out):
        return self._minmax_uf(vals, out, False, True)

    def _uf_fmax(self, vals, out):
        return self._minmax_uf(vals, out, True, False)

    def _uf_fmin(self, vals, out):
        return self._minmax_uf(vals, out, False, False)

    def _float_test(self, vals, out, test):
        x = vals[0]
        if x.dtype.kind != "f":
            return Scalar(ir.Constant(_I1, int(test == "isfinite")), BOOL)
        b, v = self.b, x.value
        if test == "isnan":
            return Scalar(b.fcmp_unordered("uno", v, v), BOOL)
        inf = ir.Constant(v.type, float("inf"))
        a = self._intrinsic("llvm.fabs", [v], v.type)
        if test == "isinf":
            return Scalar(b.fcmp_ordered("==", a, inf), BOOL)
        return Scalar(b.fcmp_ordered("<", a, inf), BOOL)  # isfinite: NaN is not

    def _uf_isnan(self, vals, out):
        return self._float_test(vals, out, "isnan")

    def _uf_isinf(self, vals, out):
        return self._float_test(vals, out, "isinf")

    def _uf_isfinite(self, vals, out):
        return self._float_test(vals, out, "isfinite")

    def _uf_signbit(self, vals, out):
        x = vals[0]
        it = ir.IntType(8 * x.dtype.itemsize)
        bits = self.b.bitcast(x.value, it)
        return Scalar(self.b.icmp_signed("<", bits, ir.Constant(it, 0)), BOOL)

    def _uf_copysign(self, vals, out):
        return Scalar(self._intrinsic("llvm.copysign", [v.value for v in vals], lltype(out)),
                      out)

    def _uf_rint(self, vals, out):
        return Scalar(self._intrinsic("llvm.rint", [vals[0].value], lltype(out)), out)

    def _uf_logical_not(self, vals, out):
        return Scalar(self.b.not_(self.truth(vals[0]).value), BOOL)

    def _logical(self, vals, fn):
        a, c = (self.truth(v).value for v in vals)
        return Scalar(fn(a, c), BOOL)

    def _uf_logical_and(self, vals, out):
        return self._logical(vals, self.b.and_)

    def _uf_logical_or(self, vals, out):
        return self._logical(vals, self.b.or_)

    def _uf_logical_xor(self, vals, out):
        return self._logical(vals, self.b.xor)

    def _cmp_uf(op):
        def impl(self, vals, out):
            return self.compare(op, *vals)
        return impl

    _uf_less, _uf_less_equal = _cmp_uf("<"), _cmp_uf("<=")
    _uf_greater, _uf_greater_equal = _cmp_uf(">"), _cmp_uf(">=")
    _uf_equal, _uf_not_equal = _cmp_uf("=="), _cmp_uf("!=")
    del _cmp_uf

    def _uf_deg2rad(self, vals, out):
        k = ir.Constant(lltype(out), math.pi / 180.0)
        return Scalar(self.b.fmul(vals[0].value, k), out)

    _uf_radians = _uf_deg2rad

    def _uf_rad2deg(self, vals, out):
        k = ir.Constant(lltype(out), 180.0 / math.pi)
        return Scalar(self.b.fmul(vals[0].value, k), out)

    _uf_degrees = _uf_rad2deg

    def _logaddexp(self, vals, out, shift, log1p, exp):
        """numpy's npy_logaddexp (numba's _generate_logaddexp): x == y gives
        x + shift; else the larger plus log1p(exp(-|x - y|)); NaN passes."""
        b, (x, y) = self.b, (v.value for v in vals)
        t = x.type
        tmp = b.fsub(x, y)
        zero = ir.Constant(t, 0.0)
        pos = b.fcmp_ordered(">", tmp, zero)
        neg_tmp = b.fneg(tmp)
        big = b.select(pos, x, y)
        arg = b.select(pos, neg_tmp, tmp)
        term = log1p(exp(arg))
        general = b.fadd(big, term)
        res = b.select(b.fcmp_unordered("uno", tmp, tmp), tmp, general)
        return Scalar(b.select(b.fcmp_ordered("==", x, y), b.fadd(x, ir.Constant(t, shift)),
                               res), out)

    def _uf_logaddexp(self, vals, out):
        return self._logaddexp(vals, out, math.log(2.0),
                               lambda v: self.libm("log1p", [v], out),
                               lambda v: self.libm("exp", [v], out))

    def _uf_logaddexp2(self, vals, out):
        log2e = ir.Constant(lltype(out), 1.0 / math.log(2.0))
        return self._logaddexp(
            vals, out, 1.0,
            lambda v: self.b.fmul(log2e, self.libm("log1p", [v], out)),
            lambda v: self.libm("exp2", [v], out))

    def _uf_cbrt(self, vals, out):
        return Scalar(self.libm("cbrt", [vals[0].value], out), out)

    def _uf_ldexp(self, vals, out):
        raise Unsupported("ldexp")


def numba_dtype(value):
    """The dtype of a Python or numpy scalar as numba types it, or None."""
    return Const(value).dtype


__all__ += ["numba_dtype", "F64", "I64"]
