"""numpy's ufuncs on scalars, as numba computes them (a mixin of
:class:`.scalars.ScalarOps`): numpy's loop dtypes, then what
``numba/np/npyfuncs.py`` emits for each -- NaN rules of ``maximum`` and
``fmax``, ``sign`` of NaN, ``logaddexp``'s npymath formula, Python's modulo
for ``remainder``, libm or LLVM's intrinsics for the rest."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from .values import BOOL, Scalar, Unsupported, lltype

__all__ = ["Ufuncs"]

_I1 = ir.IntType(1)

#: libm names of numpy ufuncs numba lowers to a libm call (float64; float32 adds "f")
_LIBM = {"sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
         "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
         "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "exp": "exp",
         "expm1": "expm1", "log": "log", "log1p": "log1p", "log10": "log10", "log2": "log2",
         "exp2": "exp2", "cbrt": "cbrt", "arctan2": "atan2", "hypot": "hypot",
         "fmod": "fmod", "erf": "erf", "erfc": "erfc", "lgamma": "lgamma",
         "gamma": "tgamma", "nextafter": "nextafter"}
#: those LLVM has instructions or intrinsics for
_INTRINSIC = {"sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
              "ceil": "llvm.ceil", "trunc": "llvm.trunc", "rint": "llvm.rint",
              "copysign": "llvm.copysign", "pow": "llvm.pow"}



class Ufuncs:
    """The ufunc half of the scalar operations (see the module docstring)."""

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


