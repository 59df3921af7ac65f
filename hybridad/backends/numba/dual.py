"""Dual numbers for numba: a value and a fixed number of partials, by value.

``Dual[T, n]`` is a numba type whose data model is a struct ``{v: T,
d: UniTuple(T, n)}`` -- no heap object, no reference count, so LLVM keeps it
in registers and the partials' arithmetic vectorizes like any scalar code.
``T`` is ``float64`` or another ``Dual`` (nested duals give second and higher
derivatives).  It is what :func:`hybridad.elementwise` evaluates a user's
scalar function on: numba types the user's own code -- ``if`` on values,
loops, locals -- with ``Dual`` operands, so branches are taken on the value
and the partials follow the branch that ran.

Every operation on duals is generated from the one rule table of
:mod:`hybridad.ops.elementwise`: for each ufunc primitive there is a generic
scalar function ``g_<name>`` whose numba overload on plain numbers is the
op's scalar code (``vmath``'s vectorizable ``exp``/``log``/``tanh`` in
float64, as fused kernels use) and whose overload on duals applies the chain
rule with the op's ``partials``, rendered to source from the same lambdas the
reverse pass evaluates on tracers.  Python's operators, comparisons,
``abs``/``min``/``max``, the ``math`` module's functions and numpy's scalar
ufuncs are overloaded for ``Dual`` operands by mapping them onto those
generic functions.  A ``Dual`` unifies with plain numbers (a branch that
returns a constant, an accumulator that starts at ``0.0``): the number
becomes a dual with zero partials.

Importing this module registers the overloads with numba; it is imported
when the first :func:`hybridad.elementwise` function is compiled, not by
``import hybridad``.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import numba  # noqa: F401 -- first: waits for another thread's import of numba (locks.numba_imported)
from numba.core import cgutils, types
from numba.extending import (
    intrinsic,
    lower_cast,
    make_attribute_wrapper,
    models,
    overload,
    register_model,
)
from numba.np.numpy_support import as_dtype

from ...ops import REGISTRY
from ...ops.common import install_operators
from ..scalar import Sym, ufunc_code, vector_namespace

__all__ = ["DualType", "make_dual", "promote", "GENERIC"]


class DualType(types.Type):
    """``Dual[value, n]``: a value of numba type ``value`` and ``n`` partials of
    the same type."""

    def __init__(self, value, n):
        self.value = value
        self.n = n
        super().__init__(name=f"Dual[{value}, {n}]")

    def unify(self, typingctx, other):
        if isinstance(other, (types.Number, types.Boolean)):
            return self  # the number becomes a dual with zero partials
        if isinstance(other, DualType) and other.n == self.n:
            value = typingctx.unify_pairs(self.value, other.value)
            if value is not None:
                return DualType(value, self.n)
        return None

    @property
    def depth(self):
        return 1 + (self.value.depth if isinstance(self.value, DualType) else 0)


@register_model(DualType)
class _DualModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("v", fe_type.value), ("d", types.UniTuple(fe_type.value, fe_type.n))]
        super().__init__(dmm, fe_type, members)


make_attribute_wrapper(DualType, "v", "v")
make_attribute_wrapper(DualType, "d", "d")


def _build(context, builder, ty, value, parts):
    dual = cgutils.create_struct_proxy(ty)(context, builder)
    dual.v = value
    dual.d = context.make_tuple(builder, types.UniTuple(ty.value, ty.n), parts)
    return dual._getvalue()


@lower_cast(types.Number, DualType)
@lower_cast(types.Boolean, DualType)
def _number_to_dual(context, builder, fromty, toty, val):
    value = context.cast(builder, val, fromty, toty.value)
    zero = context.cast(builder, context.get_constant(types.float64, 0.0), types.float64,
                        toty.value)
    return _build(context, builder, toty, value, [zero] * toty.n)


@lower_cast(DualType, DualType)
def _dual_to_dual(context, builder, fromty, toty, val):
    src = cgutils.create_struct_proxy(fromty)(context, builder, value=val)
    value = context.cast(builder, src.v, fromty.value, toty.value)
    parts = [context.cast(builder, builder.extract_value(src.d, i), fromty.value, toty.value)
             for i in range(toty.n)]
    return _build(context, builder, toty, value, parts)


@intrinsic
def make_dual(typingctx, value, parts):
    """``make_dual(v, (d0, d1, ...))``: a dual number; the value and partials
    are cast to one type (their unification)."""
    if not isinstance(parts, types.BaseTuple) or len(parts) == 0:
        return None
    elem = typingctx.unify_types(value, *parts.types)
    if elem is None:
        return None
    ret = DualType(elem, len(parts))

    def codegen(context, builder, sig, args):
        v, d = args
        value_ty, parts_ty = sig.args
        cast_parts = [context.cast(builder, builder.extract_value(d, i), t, elem)
                      for i, t in enumerate(parts_ty.types)]
        return _build(context, builder, ret, context.cast(builder, v, value_ty, elem),
                      cast_parts)

    return ret(value, parts), codegen


@intrinsic
def promote(typingctx, value, like):
    """``value`` cast to ``like``'s type (a number becomes a dual with zero
    partials: the result of a function that did not depend on its input)."""
    if not isinstance(like, DualType):
        return None

    def codegen(context, builder, sig, args):
        return context.cast(builder, args[0], sig.args[0], like)

    return like(value, like), codegen


# --------------------------------------------------------------------------
# generic scalar functions, one per ufunc primitive, from the rule table
# --------------------------------------------------------------------------
class _Src:
    """A symbolic scalar rendering the rule table's partials as source text
    over the generic functions (``g_cos(x0)``), dtype-agnostic."""

    __array_priority__ = 1000
    dtype = np.dtype(np.float64)  # the table's typed literals (_lit) are float64 here

    def __init__(self, code):
        self.code = code

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            return NotImplemented
        return _Src(f"g_{ufunc.__name__}({', '.join(_code(i) for i in inputs)})")

    def __array_function__(self, func, types_, args, kwargs):
        if func is np.where and not kwargs:
            c, a, b = (_code(x) for x in args)
            return _Src(f"({a} if {c} else {b})")
        return NotImplemented


def _code(x):
    if isinstance(x, _Src):
        return x.code
    if isinstance(x, (bool, np.bool_)):
        return repr(bool(x))
    if isinstance(x, (int, np.integer)):
        return repr(int(x))  # x ** (y - 1) keeps an integer exponent integer
    value = float(x)
    return repr(value) if math.isfinite(value) else f"float({str(value)!r})"


def _src_binop(ufunc, reflected=False):
    def op(self, other):
        a, b = (other, self) if reflected else (self, other)
        return _Src(f"g_{ufunc.__name__}({_code(a)}, {_code(b)})")

    return op


install_operators(_Src, _src_binop, lambda self: _Src(f"g_negative({self.code})"))

#: ufunc primitive name -> its generic numba function ``g_<name>``
GENERIC = {}
# __name__: numba's disk cache of a plan rebuilds each callee's environment
# from its module, so generated functions must name an importable one
_NS = {"np": np, "math": math, "make_dual": make_dual, "__name__": __name__,
       **vector_namespace()}


def _numpy_dtype(ty):
    if isinstance(ty, types.Literal):
        ty = ty.literal_type
    return as_dtype(ty)


def _number_impl(op, args):
    """The op on plain numbers: the fused kernels' scalar code (vmath in float64)."""
    params = [f"a{i}" for i in range(len(args))]
    try:
        syms = [Sym(p, _numpy_dtype(t), None) for p, t in zip(params, args, strict=True)]
        code = ufunc_code(op.ufunc, syms).code
    except (TypeError, NotImplementedError):
        return None
    ns = dict(_NS)
    exec(f"def impl({', '.join(params)}):\n    return {code}\n", ns)  # noqa: S102
    return ns["impl"]


def _dual_impl(op, args):
    """The op on operands of which some are duals: the chain rule with the
    op's partials from the rule table."""
    duals = [a for a in args if isinstance(a, DualType)]
    n = duals[0].n
    if any(d.n != n for d in duals):
        return None
    params = [f"a{i}" for i in range(len(args))]
    xs = [f"{p}.v" if isinstance(a, DualType) else p for p, a in zip(params, args, strict=True)]
    lines = [f"x{i} = {x}" for i, x in enumerate(xs)]
    lines.append(f"ans = g_{op.name}({', '.join(f'x{i}' for i in range(len(xs)))})")
    terms = [[] for _ in range(n)]
    srcs = [_Src(f"x{i}") for i in range(len(xs))]
    for i, (a, p) in enumerate(zip(args, op.partials, strict=True)):
        if not isinstance(a, DualType) or p is None or (not callable(p) and p == 0):
            continue
        if callable(p):
            lines.append(f"p{i} = {_code(p(*srcs, _Src('ans')))}")
            factor = f"p{i} * "
        else:
            factor = "" if p == 1 else "-" if p == -1 else f"{_code(p)} * "
        for k in range(n):
            terms[k].append(f"{factor}{params[i]}.d[{k}]")
    if all(p is None for p in op.partials):
        lines.append("return ans")  # a comparison or mask: no derivative
    else:
        parts = [" + ".join(t) if t else "0.0" for t in terms]
        lines.append(f"return make_dual(ans, ({', '.join(parts)},))")
    ns = dict(_NS, **GENERIC)
    body = "\n".join("    " + line for line in lines)
    exec(f"def impl({', '.join(params)}):\n{body}\n", ns)  # noqa: S102
    return ns["impl"]


def _scalar_operand(t):
    return isinstance(t, (types.Number, types.Boolean, DualType))


def _make_generic(op):
    nin = op.ufunc.nin
    params = ", ".join(f"a{i}" for i in range(nin))
    ns = {}
    exec(f"def g_{op.name}({params}):\n    pass\n", ns)  # noqa: S102
    stub = ns[f"g_{op.name}"]

    def select(args):
        if not all(_scalar_operand(a) for a in args):
            return None
        if any(isinstance(a, DualType) for a in args):
            return _dual_impl(op, args)
        return _number_impl(op, args)

    if nin == 1:
        def typer(a0):
            return select((a0,))
    else:
        def typer(a0, a1):
            return select((a0, a1))

    overload(stub)(typer)  # (no contraction: see backends/numba/program.py)
    return stub


for _op in REGISTRY.values():
    if _op.kind == "elementwise" and isinstance(_op.ufunc, np.ufunc) and _op.dual is None:
        GENERIC[f"g_{_op.name}"] = _make_generic(_op)


def generic(name):
    """The generic numba function of ufunc primitive ``name``."""
    return GENERIC[f"g_{name}"]


# --------------------------------------------------------------------------
# Python's and numpy's spellings, overloaded for duals
# --------------------------------------------------------------------------
def _any_dual(*args):
    return any(isinstance(a, DualType) for a in args) and all(_scalar_operand(a) for a in args)


def _route(fn, prim):
    """Overload ``fn`` (an operator, builtin or math/numpy function) for dual
    operands as the generic function of primitive ``prim``."""
    g = generic(prim)
    nin = REGISTRY[prim].ufunc.nin

    if nin == 1:
        @overload(fn)
        def _one(a):
            if _any_dual(a):
                return lambda a: g(a)
    else:
        @overload(fn)
        def _two(a, b):
            if _any_dual(a, b):
                return lambda a, b: g(a, b)


_OPERATORS = {
    "add": (operator.add, operator.iadd), "subtract": (operator.sub, operator.isub),
    "multiply": (operator.mul, operator.imul), "divide": (operator.truediv, operator.itruediv),
    "power": (operator.pow, operator.ipow), "floor_divide": (operator.floordiv, operator.ifloordiv),
    "remainder": (operator.mod, operator.imod), "less": (operator.lt,),
    "less_equal": (operator.le,), "greater": (operator.gt,), "greater_equal": (operator.ge,),
    "equal": (operator.eq,), "not_equal": (operator.ne,), "negative": (operator.neg,),
    "positive": (operator.pos,), "absolute": (abs,),
}
_MATH = {  # math function -> primitive
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "cbrt": "cbrt", "sin": "sin",
    "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh", "acosh": "arccosh",
    "atanh": "arctanh", "fabs": "fabs", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
    "atan2": "arctan2", "hypot": "hypot", "copysign": "copysign", "pow": "power",
    "fmod": "fmod", "degrees": "rad2deg", "radians": "deg2rad", "isnan": "isnan",
    "isinf": "isinf", "isfinite": "isfinite",
}

for _prim, _fns in _OPERATORS.items():
    for _fn in _fns:
        _route(_fn, _prim)
for _fname, _prim in _MATH.items():
    if hasattr(math, _fname):
        _route(getattr(math, _fname), _prim)
for _name in GENERIC:
    _prim = _name[2:]
    _uf = getattr(np, _prim, None)
    if isinstance(_uf, np.ufunc) and _uf.nin in (1, 2):
        _route(_uf, _prim)


# Python's min/max of two operands: the winner of the comparison on values,
# derivative and all (the first one on ties, as Python does)
def _min_impl(a, b):
    if b < a:
        return b
    return a


def _max_impl(a, b):
    if b > a:
        return b
    return a


@overload(min)
def _min(a, b):
    if _any_dual(a, b):
        return _min_impl


@overload(max)
def _max(a, b):
    if _any_dual(a, b):
        return _max_impl


@overload(float)
def _float(a):
    if isinstance(a, DualType):
        raise TypeError("float() of a dual number would drop its derivative; keep the "
                        "value as it is (hybridad.elementwise differentiates through it)")

