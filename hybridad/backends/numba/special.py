"""scipy.special in numba kernels: scipy's own compiled functions, called from
generated code.

``scipy.special.cython_special`` exports the C function behind every
special-function ufunc.  Each is bound here as an external symbol
(``llvmlite.binding.add_symbol``) and called by name from an ``@intrinsic``,
so a kernel's value is scipy's to the bit and numba's disk cache stays valid
across processes (the machine code names the symbol; importing this module,
which generated source does, binds it again).  Float32 kernels compute in
float64 and round, as scipy's float32 loops do.

The integer-order functions ``expn(n, x)`` and ``yn(n, x)`` are bound in
their ``long n`` form, with a float ``n`` truncated as scipy's ufunc does (the
``double n`` form warns through Python, which a kernel must not do).  scipy's
ufunc converts the order to a C ``int``; one beyond its range (``+-inf``,
``1e10``) becomes ``INT_MIN`` there (x86's conversion: ``expn`` is NaN, ``yn``
the function of order ``-2**31``, -inf at small ``x``), and here too (the
``long`` form would wrap it to another order).

The Hurwitz zeta ``zeta(s, q)`` (the polygamma functions: ``psi'(x) =
zeta(2, x)``) is the one function ``cython_special`` does not export; it is
written here (the Euler-Maclaurin summation of Cephes' ``zeta.c``, which
scipy's ufunc also uses).

:data:`SPECIAL` maps each op of :mod:`hybridad.ops.special` to the function
of this module that generated source calls (as ``_sp_<op>``).
"""

from __future__ import annotations

import math

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import get_cython_function_address, intrinsic
from ..._libcache import install
from .special_names import _CYTHON, _CYTHON2, _CYTHON3, _ORDER, SPECIAL  # noqa: F401

__all__ = ["SPECIAL", "expn", "yn", "zeta"]

_MODULE = "scipy.special.cython_special"


def _symbol(cname):
    sym = f"hybridad_cython_special_{cname}"
    ll.add_symbol(sym, get_cython_function_address(_MODULE, cname))
    return sym


def _codegen(sym, nargs):
    def codegen(context, builder, signature, args):
        d = ir.DoubleType()
        fnty = ir.FunctionType(d, [d] * nargs + [ir.IntType(32)])  # + __pyx_skip_dispatch
        fn = cgutils.get_or_insert_function(builder.module, fnty, sym)
        doubles = [context.cast(builder, v, t, types.float64)
                   for v, t in zip(args, signature.args, strict=True)]
        return builder.call(fn, doubles + [ir.Constant(ir.IntType(32), 0)])
    return codegen


def _real(*tys):
    return all(isinstance(t, (types.Float, types.Integer, types.Boolean)) for t in tys)


def _make(sym, nargs, cname):
    if nargs == 1:
        def impl(typingctx, x):
            return (types.float64(x), _codegen(sym, 1)) if _real(x) else None
    elif nargs == 2:
        def impl(typingctx, x, y):
            return (types.float64(x, y), _codegen(sym, 2)) if _real(x, y) else None
    else:
        def impl(typingctx, x, y, z):
            return (types.float64(x, y, z), _codegen(sym, 3)) if _real(x, y, z) else None

    impl.__name__ = impl.__qualname__ = f"special_{cname}"
    return intrinsic(impl)


def _make_order(sym, cname):
    """An intrinsic calling ``double f(long n, double x)`` (``n`` an int64)."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.DoubleType(), [ir.IntType(64), ir.DoubleType(),
                                                 ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, sym)
        n = context.cast(builder, args[0], signature.args[0], types.int64)
        x = context.cast(builder, args[1], signature.args[1], types.float64)
        return builder.call(fn, [n, x, ir.Constant(ir.IntType(32), 0)])

    def impl(typingctx, n, x):
        ok = isinstance(n, types.Integer) and _real(x)
        return (types.float64(n, x), codegen) if ok else None

    impl.__name__ = impl.__qualname__ = f"special_{cname}"
    return intrinsic(impl)


for _op, _cname in _CYTHON.items():
    globals()[_op] = _make(_symbol(_cname), 1, _cname)
for _op, _cname in _CYTHON2.items():
    globals()[_op] = _make(_symbol(_cname), 2, _cname)
for _op, _cname in _CYTHON3.items():
    globals()[_op] = _make(_symbol(_cname), 3, _cname)
_expn_long = _make_order(_symbol(_ORDER["expn"]), _ORDER["expn"])
_yn_long = _make_order(_symbol(_ORDER["yn"]), _ORDER["yn"])

#: the floats a C int's truncation takes, and scipy's order beyond them (x86's INT_MIN)
_INT_LO, _INT_HI, _INT_MIN = -2147483649.0, 2147483648.0, -2147483648


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(cache=True)
def expn(n, x):
    """scipy's ``expn(n, x)``: a float ``n`` truncated to an integer as scipy
    does (without its warning), ``INT_MIN`` beyond a C int, NaN where it is NaN."""
    if n != n:
        return np.nan
    return _expn_long(np.int64(n) if _INT_LO < n < _INT_HI else _INT_MIN, x)


@njit(cache=True)
def yn(n, x):
    """scipy's ``yn(n, x)``: a float ``n`` truncated to an integer as scipy does,
    ``INT_MIN`` beyond a C int."""
    if n != n:
        return np.nan
    return _yn_long(np.int64(n) if _INT_LO < n < _INT_HI else _INT_MIN, x)


# Cephes zeta.c: (2k)! / B_2k
_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
      7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
      -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042e-16


@njit(cache=True, error_model="numpy")
def zeta(s, q):
    """Hurwitz zeta ``sum_k (k + q) ** -s`` for ``s > 1`` (scipy's ``zeta(s, q)``):
    Cephes' ``zeta.c`` as scipy has it (``xsf/cephes/zeta.h``), its tests in its
    order (a NaN ``s`` with ``q`` a non-positive integer is inf, as there) and its
    asymptotic expansion for ``q > 1e8`` (DLMF 25.11.43: 0 at ``q = inf``, where the
    summation would give ``0 * inf``)."""
    s, q = np.float64(s), np.float64(q)
    if s == 1.0:
        return np.inf
    if s < 1.0:
        return np.nan
    if q <= 0.0:
        if q == math.floor(q):
            return np.inf
        if s != math.floor(s):
            return np.nan  # q**-s is not real
    if q > 1e8:
        return (1.0 / (s - 1.0) + 1.0 / (2.0 * q)) * q ** (1.0 - s)
    total = q ** -s
    a, b, i = q, 0.0, 0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = a ** -s
        total += b
        if abs(b / total) < _MACHEP:
            return total
    w = a
    total += b * w / (s - 1.0)
    total -= 0.5 * b
    fact, k = 1.0, 0.0
    for j in range(12):
        fact *= s + k
        b /= w
        t = fact * b / _A[j]
        total += t
        if abs(t / total) < _MACHEP:
            return total
        k += 1.0
        fact *= s + k
        b /= w
        k += 1.0
    return total
