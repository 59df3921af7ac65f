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

import operator

import numpy as np
from llvmlite import ir

from .ufuncs import _INTRINSIC, _LIBM, Ufuncs
from .values import BOOL, F32, F64, I64, Const, Scalar, Unsupported, declare, lltype, promote

__all__ = ["ScalarOps", "is_number"]

_I1 = ir.IntType(1)


def is_number(v):
    return isinstance(v, Scalar) or (isinstance(v, Const) and v.dtype is not None)


#: a negative whole exponent down to minus this is computed by squarings
#: (x ** -3 as 1 / (x x x)); beyond, and fractional ones, by ``llvm.pow``.
#: Each squaring doubles the relative error: x ** -16 is within 16 units in
#: the last place of libm's (x ** -3 within 3), as jax's integer_pow
STATIC_POWER = 16

_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
         "%": operator.mod, "<<": operator.lshift, ">>": operator.rshift,
         "&": operator.and_, "|": operator.or_, "^": operator.xor, "/": operator.truediv}
_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}

#: the largest exclusive upper bound :meth:`ScalarOps.bound` records: the sum
#: or product of two bounded values is then still exact in int64
_BOUND_LIMIT = 1 << 62


#: integer ops with an identity element: ``a op e == a`` (and ``e op a == a``
#: for the commutative ones)
_IDENTITY = {"+": 0, "-": 0, "*": 1, "|": 0, "^": 0, "<<": 0, ">>": 0}


class ScalarOps(Ufuncs):
    """Scalar operations emitted by ``builder`` with fast-math ``flags`` (a
    tuple such as ``("contract",)``) on floating-point instructions.

    ``bounds`` (shared by the translator's frames): the int64 registers known
    to lie in ``[0, hi)`` while translating -- a ``range`` loop's counter and
    the sums, products, quotients and remainders made of them -- by
    ``id(register) -> (register, hi)``.  An index known so needs no
    wraparound (:meth:`.arrays.Arrays.wrap`) and a floor division or modulo
    of it by a positive constant is the machine's (:meth:`_int_binop`): the
    same values, a sixth of the instructions (numba's code has the checks,
    and LLVM proves them away, at a cost in compile time per line)."""

    def __init__(self, builder, flags=(), bounds=None):
        self.b = builder
        self.flags = tuple(flags)
        self.bounds = {} if bounds is None else bounds

    # -- what is known of integer registers ------------------------------------------
    def bound(self, v):
        """``hi`` when ``v`` (an int, an LLVM integer constant or register) is
        known to lie in ``[0, hi)``, else None."""
        if isinstance(v, int):
            return v + 1 if v >= 0 else None
        if isinstance(v, ir.Constant):
            c = v.constant
            return c + 1 if isinstance(c, int) and c >= 0 else None
        got = self.bounds.get(id(v))
        return got[1] if got is not None and got[0] is v else None

    def note(self, v, hi):
        """Record that register ``v`` lies in ``[0, hi)`` (``hi`` None: nothing known)."""
        if hi is not None and hi <= _BOUND_LIMIT and isinstance(v, ir.Instruction):
            self.bounds[id(v)] = (v, hi)
        return v

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
            return Scalar(self.note(b.sext(v, t) if src.kind == "i" else b.zext(v, t),
                                    self.bound(v)), dtype)
        if dtype.itemsize < src.itemsize:
            hi = self.bound(v)
            return Scalar(self.note(b.trunc(v, t), hi if hi is not None and
                                    hi <= 1 << (8 * dtype.itemsize - 2) else None), dtype)
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
        # identities with a literal operand (`p + 0`, `i * 1`: the generated
        # source's views at offset 0 are ~8 % of its IR's integer arithmetic)
        if isinstance(c, ir.Constant) and op in _IDENTITY and c.constant == _IDENTITY[op]:
            return Scalar(a, dt)
        if isinstance(a, ir.Constant) and op in ("+", "*", "|", "^") and \
                a.constant == _IDENTITY[op]:
            return Scalar(c, dt)
        if dt == I64:
            got = self._bounded_binop(op, a, c)
            if got is not None:
                return Scalar(got, dt)
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

    def _bounded_binop(self, op, a, c):
        """An int64 ``a op c`` where what is known of the operands (:meth:`bound`)
        makes it simpler or bounds it (the same value as :meth:`_int_binop`'s
        general code), else None."""
        b = self.b
        ha, hc = self.bound(a), self.bound(c)
        if op in ("//", "%") and isinstance(c, ir.Constant) and c.constant > 0:
            # a positive divisor: no zero or overflow case; a known nonnegative
            # dividend needs no flooring either
            if ha is not None:
                return self.note(b.sdiv(a, c), (ha - 1) // c.constant + 1) if op == "//" \
                    else self.note(b.srem(a, c), min(ha, c.constant))
            r = b.srem(a, c)
            fix = b.icmp_signed("<", r, ir.Constant(a.type, 0))
            if op == "//":
                q = b.sdiv(a, c)
                return b.select(fix, b.sub(q, ir.Constant(a.type, 1)), q)
            return self.note(b.select(fix, b.add(r, c), r), c.constant)
        if ha is None or hc is None:
            return None
        if op == "+":
            return self.note(b.add(a, c), ha + hc - 1)
        if op == "*":
            return self.note(b.mul(a, c), (ha - 1) * (hc - 1) + 1)
        if op == "&":
            return self.note(b.and_(a, c), min(ha, hc))
        if op == ">>":
            return self.note(b.ashr(a, c), ha)
        return None

    def power(self, x, y):
        """``x ** y``: floats by ``pow``; an integer exponent by repeated
        squaring, as numba's ``int_power_impl`` (a negative exponent of a
        float inverts)."""
        dx, dy = x.dtype, y.dtype
        if dx is None or dy is None:
            raise Unsupported("** of non-numbers")
        if dy.kind in "iub" and dx.kind in "iub":
            raise Unsupported("integer ** integer")
        if dy.kind == "f" and dx.kind == "f" and isinstance(y, Const) and \
                -STATIC_POWER <= y.value < 0 and float(y.value).is_integer():
            # a negative whole exponent (x ** -3, and the derivative of any
            # power, x ** -4): 1 / (x ** 3) by squarings, as jax's integer_pow
            # -- libm's pow costs 10 ns an element; positive ones LLVM expands
            return self._static_power(self.scalar(x, promote(dx, dy)), int(y.value),
                                      overflow=True)
        if dy.kind == "f" or dx.kind != "f":
            dt = promote(dx, dy)
            a, c = self.scalar(x, dt), self.scalar(y, dt)
            return Scalar(self._intrinsic("llvm.pow", [a.value, c.value], lltype(dt)), dt)
        # float ** integer: numba's int_power (exact squarings)
        if isinstance(y, Const):
            return self._static_power(self.scalar(x), int(y.value))
        return self._int_power(self.scalar(x), self.scalar(y, np.dtype(np.int64)))

    def _int_power(self, a, e):
        """``a ** e`` for a runtime integer ``e``: numba's ``int_power_impl``
        (repeated squaring, a negative exponent inverting the result, pow
        beyond 2**16)."""
        b = self.b
        t, i64 = a.value.type, ir.IntType(64)
        zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
        neg = b.icmp_signed("<", e.value, zero)
        n = b.select(neg, b.neg(e.value), e.value)
        big = b.icmp_signed(">", n, ir.Constant(i64, 0x10000))
        pre = b.block
        head, body, done = (b.append_basic_block(x) for x in ("pow.head", "pow.body",
                                                               "pow.done"))
        b.branch(head)
        b.position_at_end(head)
        r, base, k = b.phi(t), b.phi(t), b.phi(i64)
        r.add_incoming(ir.Constant(t, 1.0), pre)
        base.add_incoming(a.value, pre)
        k.add_incoming(n, pre)
        b.cbranch(b.icmp_signed("!=", k, zero), body, done)
        b.position_at_end(body)
        odd = b.icmp_signed("!=", b.and_(k, one), zero)
        r.add_incoming(b.select(odd, b.fmul(r, base, flags=self.flags), r), body)
        base.add_incoming(b.fmul(base, base, flags=self.flags), body)
        k.add_incoming(b.ashr(k, one), body)
        b.branch(head)
        b.position_at_end(done)
        res = b.select(neg, b.fdiv(ir.Constant(t, 1.0), r), r)
        exact = b.sitofp(e.value, t)
        res = b.select(big, self._intrinsic("llvm.pow", [a.value, exact], t), res)
        return Scalar(res, a.dtype)

    def _static_power(self, a, e, overflow=False):
        """``a ** e`` by squarings (a negative ``e``: one over the positive
        power).  ``overflow``: where that positive power overflows (``x ** -3``
        of 1e103, whose value 1e-309 is a subnormal), the power of ``1 / a``
        instead, as libm's ``pow`` gives it (numba's integer powers give 0)."""
        b = self.b
        t = a.value.type
        inv, n = e < 0, abs(e)
        r = self._squarings(a.value, n)
        if inv:
            one = ir.Constant(t, 1.0)
            small = b.fdiv(one, r, flags=self.flags)
            if overflow:
                huge = b.fcmp_ordered("==", self._intrinsic("llvm.fabs", [r], t),
                                      ir.Constant(t, float("inf")))
                r = b.select(huge, self._squarings(b.fdiv(one, a.value, flags=self.flags), n),
                             small)
            else:
                r = small
        return Scalar(r, a.dtype)

    def _squarings(self, base, e):
        b = self.b
        r = ir.Constant(base.type, 1.0)
        while e:
            if e & 1:
                r = b.fmul(r, base, flags=self.flags)
            e >>= 1
            if e:
                base = b.fmul(base, base, flags=self.flags)
        return r

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
        return declare(self.b.module, name, ret, argtypes)

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

def numba_dtype(value):
    """The dtype of a Python or numpy scalar as numba types it, or None."""
    return Const(value).dtype


__all__ += ["numba_dtype", "F64", "I64"]
