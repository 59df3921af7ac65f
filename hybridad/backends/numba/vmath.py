"""Vectorizable float64 exp, expm1, log, log1p, logaddexp and tanh for the numba backend.

numba lowers ``np.exp`` and friends on scalars to libm calls (~4.5 ns per
element here), which LLVM cannot vectorize; numpy's own loops are SIMD
(~1 ns).  A fused kernel beats numpy at large n only with implementations
LLVM can vectorize: straight-line arithmetic, selects instead of branches,
exponent bits set by integer arithmetic.  These are such implementations,
in the classic Cody-Waite form (fdlibm's constants for ln 2, Taylor
polynomials of high enough degree that truncation is below rounding):

* ``exp(x) = 2**k * exp(r)``, ``x = k ln2 + r``, ``|r| <= ln2 / 2``; the scale
  ``2**k`` is applied as two normal powers of two so gradual underflow to
  subnormals and overflow to inf round like libm's;
* ``expm1`` from the same reduction, ``2**k (expm1(r) + 1) - 1`` arranged
  so ``k = 0`` returns the polynomial itself (no cancellation near 0);
* ``log(x) = e ln2 + log(m)``, ``m`` in ``[sqrt(1/2), sqrt(2))``, ``log(m)``
  from the odd series of ``atanh((m - 1) / (m + 1))``;
* ``tanh(x) = sign(x) em / (em + 2)``, ``em = expm1(2 |x|)``;
* ``log1p(x) = log(u) + (x - (u - 1)) / u``, ``u = 1 + x`` rounded (the
  correction restores what the rounding of ``u`` lost);
* ``logaddexp(x, y) = max + log1p(exp(-|x - y|))``, numpy's arrangement.

Accuracy, tested against numpy over the whole double range (tests/test_vmath.py):
exp, expm1, log, log1p and logaddexp within 2 ulp, tanh within 3 ulp; inf, nan, 0 and
subnormal inputs give numpy's results.  float32 kernels call the ``*32``
twins of expm1 and log (float64 arithmetic, shorter polynomials, one
rounding to float32: within 1 ulp), log1p and logaddexp in float64 (one
rounding) and :func:`vexpf` and :func:`vtanhf`
(float32 arithmetic, within 1.5 ulp); all other ufuncs keep numba's libm
calls.

The four public functions are ordinary numba functions, compiled once (and
cached on disk), not inlined into the numba IR of each kernel: LLVM inlines
them into the calling loop when it links the kernel (the loop still
vectorizes: same speed), while numba-level inlining made every call site
re-type and re-lower the whole body (~0.1 s of compile time per call site).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from ..._libcache import install
from .vmath_names import FLOAT32_NATIVE, FLOAT32_UFUNCS, HELPERS, VECTOR_UFUNCS  # noqa: F401

__all__ = ["FLOAT32_NATIVE", "FLOAT32_UFUNCS", "HELPERS", "VECTOR_UFUNCS", "floor_divide",
           "floor_divide32", "smul", "smul32", "vexp", "vexpm1", "vexpm1_32", "vlog", "vlog1p",
           "vlog32", "vlogaddexp", "vtanh", "vexpf", "vtanhf"]

_LN2_HI = 6.93147180369123816490e-01  # fdlibm: trailing zero bits, so k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_LN2 = 0.6931471805599453

# 1/j! for j = 2..13: exp(r) - 1 - r on |r| <= 0.3466 to below 2**-60 relative
_C2, _C3, _C4, _C5 = 1 / 2, 1 / 6, 1 / 24, 1 / 120
_C6, _C7, _C8, _C9 = 1 / 720, 1 / 5040, 1 / 40320, 1 / 362880
_C10, _C11, _C12, _C13 = 1 / 3628800, 1 / 39916800, 1 / 479001600, 1 / 6227020800


_MAGIC = 4503599627370496.0  # 2**52: adding it puts a small integer in the low mantissa bits


install()  # numba's cache of the functions below: stamped with their imports' source


@njit(inline="always", cache=True)
def _pow2(k):
    """2**k for integer-valued float64 k in the normal range [-1022, 1023].

    No float -> int conversion (AVX2 has no vector one; LLVM would scalarize
    it): ``k + 1023 + 2**52`` holds ``k + 1023`` in its low mantissa bits, and
    a left shift by 52 moves them into the exponent field."""
    return np.int64(np.float64(k + (1023.0 + _MAGIC)).view(np.int64) << 52).view(np.float64)


@njit(inline="always", cache=True)
def _reduce(x):
    """k, r with x = k ln2 + r (|r| <= ln2/2), for x clamped to [-746, 710]."""
    k = np.rint(x * _INV_LN2)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    return k, r


@njit(inline="always", cache=True)
def _expm1_poly(r):
    """exp(r) - 1 on |r| <= ln2/2 (r + r**2 p(r)).

    ``p`` by Estrin's scheme: a tree of depth 4 instead of Horner's chain of
    11 dependent multiply-adds, which made the loop latency-bound (measured
    here: 3.0 -> 2.0 ns per element, same accuracy)."""
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    q0 = (_C2 + r * _C3) + r2 * (_C4 + r * _C5)
    q1 = (_C6 + r * _C7) + r2 * (_C8 + r * _C9)
    q2 = (_C10 + r * _C11) + r2 * (_C12 + r * _C13)
    return r + r2 * ((q0 + r4 * q1) + r8 * q2)


@njit(inline="always", cache=True)
def _exp(x):
    """:func:`vexp`'s body (inlined where other functions of this module use it)."""
    xc = min(max(x, -746.0), 710.0)
    k, r = _reduce(xc)
    e = 1.0 + _expm1_poly(r)
    k1 = np.floor(k * 0.5)
    y = (e * _pow2(k1)) * _pow2(k - k1)
    return x if x != x else y


@njit(cache=True, error_model="numpy")
def vexp(x):
    """exp(x) for float64 x, vectorizable (within 2 ulp of numpy)."""
    return _exp(x)


@njit(cache=True, error_model="numpy")
def vexpm1(x):
    """exp(x) - 1 for float64 x, vectorizable (within 2 ulp of numpy)."""
    xc = min(max(x, -60.0), 710.0)
    k, r = _reduce(xc)
    em = _expm1_poly(r)
    k1 = np.floor(k * 0.5)
    s1 = _pow2(k1)
    s2 = _pow2(k - k1)
    y = (em * s1) * s2 + (s1 * s2 - 1.0)  # exact 2**k - 1 for moderate k
    y = ((em + 1.0) * s1) * s2 - 1.0 if k > 60.0 else y  # near overflow: no 2**k alone
    y = em if k == 0.0 else y
    return x if (x != x or x == 0.0) else y  # nan, and the sign of zero


# 1/(2j+1) for the series 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716
_L = [1.0 / (2 * j + 1) for j in range(13)]
_L1, _L2, _L3, _L4, _L5, _L6 = _L[1:7]
_L7, _L8, _L9, _L10, _L11, _L12 = _L[7:13]
_SQRT_HALF = 0.7071067811865476
_TWO54 = 18014398509481984.0


@njit(inline="always", cache=True)
def _log_split(x):
    """``e, f, s, s2`` with ``x = 2**e (1 + f)``, ``1 + f`` in ``[sqrt(1/2), sqrt(2))``,
    ``s = f / (2 + f)``, for a positive normal float64 ``x`` (other inputs
    give values :func:`_log_special` replaces)."""
    bits = np.float64(x).view(np.int64)
    # the exponent field as a float without an int -> float conversion (see _pow2)
    ebits = ((bits >> 52) & 0x7FF) | 0x4330000000000000
    e = np.int64(ebits).view(np.float64) - (_MAGIC + 1023.0)
    m = np.int64((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = m > 1.4142135623730951
    m = m * 0.5 if big else m
    e = e + 1.0 if big else e
    f = m - 1.0
    s = f / (m + 1.0)
    return e, f, s, s * s


@njit(inline="always", cache=True)
def _log_m(f, s, s2, p):
    """log(1 + f) from the series' ``p`` (``2 atanh(s) = 2 s + 2 s^3 p``):
    ``f - f^2/2 + s (f^2/2 + R)``, the fdlibm arrangement that keeps f exact."""
    hf = 0.5 * f * f
    return f - (hf - s * (hf + 2.0 * s2 * p))


@njit(inline="always", cache=True)
def _log_special(x, y):
    """``y``, or numpy's log at 0, negative numbers, nan and inf."""
    y = -np.inf if x == 0.0 else y
    y = np.nan if x < 0.0 else y
    return x if (x != x or x == np.inf) else y


@njit(inline="always", cache=True)
def _log_poly(e, f, s, s2):
    """log(2**e (1 + f)) from :func:`_log_split`'s parts."""
    # p = L1 + L2 s2 + ... + L12 s2**11, by Estrin's scheme (see _expm1_poly)
    s4 = s2 * s2
    s8 = s4 * s4
    q0 = (_L1 + s2 * _L2) + s4 * (_L3 + s2 * _L4)
    q1 = (_L5 + s2 * _L6) + s4 * (_L7 + s2 * _L8)
    q2 = (_L9 + s2 * _L10) + s4 * (_L11 + s2 * _L12)
    p = (q0 + s8 * q1) + (s8 * s8) * q2
    return e * _LN2_HI + (_log_m(f, s, s2, p) + e * _LN2_LO)


@njit(cache=True, error_model="numpy")
def vlog(x):
    """Natural log for float64 x, vectorizable (within 2 ulp of numpy)."""
    tiny = x < 2.2250738585072014e-308
    e, f, s, s2 = _log_split(x * _TWO54 if tiny else x)  # subnormals: scaled to normal
    e = e - 54.0 if tiny else e
    return _log_special(x, _log_poly(e, f, s, s2))


@njit(inline="always", cache=True)
def _log1p_from(x, u):
    """log(1 + x) from ``u = 1 + x`` rounded, for ``u`` a positive normal
    number: ``log(u)`` plus the rounding of ``u``, ``(x - (u - 1)) / u``
    (Goldberg's correction: ``u - 1`` is exact near 1)."""
    e, f, s, s2 = _log_split(u)
    return _log_poly(e, f, s, s2) + (x - (u - 1.0)) / u


@njit(cache=True, error_model="numpy")
def vlog1p(x):
    """log(1 + x) for float64 x, vectorizable (within 2 ulp of numpy).

    ``1 + x`` is never subnormal (the smallest positive one is 2**-53), so
    its log needs no scaling; where it rounds to 1, ``x`` itself (the sign
    of zero kept); at -1, inf, nan and below -1, the log of ``1 + x``."""
    u = 1.0 + x
    y = _log1p_from(x, u)
    y = x if u == 1.0 else y
    return _log_special(u, y) if (u <= 0.0 or u == np.inf or u != u) else y


@njit(cache=True, error_model="numpy")
def vlogaddexp(x, y):
    """``log(exp(x) + exp(y))`` for float64 x, y, vectorizable (within 2 ulp
    of numpy): numpy's ``npy_logaddexp`` -- ``x + log 2`` where ``x == y``
    (infinities of one sign), else the larger plus ``log1p(exp(-|x - y|))``,
    nan where ``x - y`` is -- with this module's exp and log1p (the
    argument of log1p in [0, 1]: no special cases)."""
    d = x - y
    pos = d > 0.0
    big = x if pos else y
    t = _exp(-d if pos else d)  # (nan: d)
    r = big + _log1p_from(t, 1.0 + t)
    r = d if d != d else r
    return x + _LN2 if x == y else r


@njit(cache=True, error_model="numpy")
def vtanh(x):
    """tanh for float64 x, vectorizable (within 3 ulp of numpy).

    ``expm1(2 |x|)`` inlined for its narrow range: ``2 |x|`` is clamped to
    [0, 40], so ``2**k`` (k <= 58) is one normal power of two -- none of
    :func:`vexpm1`'s split scaling, overflow and ``k == 0`` selects (at
    ``k = 0`` the sum is ``em`` exactly).  ``s - 1`` rounds only for k > 52,
    where tanh is 1 to the last bit.  The sign by ``copysign`` (zero keeps
    its sign).  A 1-D tanh gradient: 3.6 -> 3.0 ns per element (jax.jit
    1.8).  Not contracted into FMAs: that took it to 2.2 ns, but where LLVM
    fuses depends on the code around the inlined body, and two programs of
    one plan (a loop Hessian with and without its in-place views) then
    differed in the last bit."""
    a = min(abs(x), 20.0)
    k, r = _reduce(2.0 * a)
    em = _expm1_poly(r)
    s = _pow2(k)
    e = em * s + (s - 1.0)
    y = np.copysign(e / (e + 2.0), x)
    return x if x != x else y  # nan




# --------------------------------------------------------------------------
# float32 kernels: the same in float64 arithmetic, to the precision a float32
# result needs
# --------------------------------------------------------------------------
# A float32 kernel widens its argument, calls one of these and rounds the
# result once.  Their relative error is below 2**-30 (truncation 2**-32 and
# float64 rounding), 1/64 of float32's half ulp: the rounded result is
# within 1 ulp of the exact value and nearly always the correctly rounded
# one.  Shorter polynomials than the float64 functions' (degree 8, not 13;
# log: 6 terms, not 12) and no subnormal or far-range cases (a float32 is
# a normal float64, and exp overflows float32 from 88.7): about half the
# arithmetic per element.

@njit(inline="always", cache=True)
def _expm1_poly32(r):
    """exp(r) - 1 on |r| <= ln2/2 to 2**-32 relative (Taylor to degree 8)."""
    r2 = r * r
    r4 = r2 * r2
    q0 = (_C2 + r * _C3) + r2 * (_C4 + r * _C5)
    q1 = (_C6 + r * _C7) + r2 * _C8
    return r + r2 * (q0 + r4 * q1)


@njit(cache=True, error_model="numpy")
def vexpm1_32(x):
    """exp(x) - 1 for a float32 x widened to float64, to 2**-30 relative."""
    xc = min(max(x, -30.0), 100.0)  # below -30: -1 in float32
    k, r = _reduce(xc)
    em = _expm1_poly32(r)
    s = _pow2(k)
    y = em * s + (s - 1.0)  # s - 1 exact for |k| <= 52
    y = em if k == 0.0 else y
    return x if (x != x or x == 0.0) else y  # nan, and the sign of zero


@njit(cache=True, error_model="numpy")
def vlog32(x):
    """log(x) for a float32 x widened to float64 (a normal float64), to 2**-30 relative."""
    e, f, s, s2 = _log_split(x)
    s4 = s2 * s2
    p = (_L1 + s2 * _L2) + s4 * ((_L3 + s2 * _L4) + s4 * (_L5 + s2 * _L6))
    return _log_special(x, e * _LN2 + _log_m(f, s, s2, p))




# --------------------------------------------------------------------------
# float32 exp and tanh in float32 arithmetic
# --------------------------------------------------------------------------
# Widened twins run as many lanes as the float32 loop around them (8 in
# 256-bit vectors, the float64 part in 512-bit registers).  Where generated
# functions ask for 512-bit vectors (.simd), a float32 loop runs 16 lanes
# and only float32 arithmetic gains from it: exp over 10^5 float32, 97 us
# widened, 56 us in float32 arithmetic (76 us at 256 bits).  tanh gains even
# at 256 bits, as the twin's float64 division was most of its time (1.18 ->
# 0.68 ns per element).  The price is accuracy: within 1.5 ulp of the exact
# value (the worst over every float32 of the finite range: exp 1.02, tanh
# 1.33; numpy's own float32 exp is 2.36 ulp off, its tanh 1.37), not the
# twins' 0.5 + 1/16.  expm1 and log keep their twins.

# exp(r) = 1 + r + r**2 q(r) on |r| <= ln2/2: a degree-4 q fitted here
# (Lawson's iteration on weighted least squares, float32 coefficients),
# 0.07 float32 ulp relative
_FQ0, _FQ1, _FQ2 = np.float32(0.4999999403953552), np.float32(0.1666652113199234), \
    np.float32(0.04166838899254799)
_FQ3, _FQ4 = np.float32(0.008368710055947304), np.float32(0.001381461275741458)
# ln 2 = _FLN2_HI + _FLN2_LO, _FLN2_HI = 355/512 (so k * _FLN2_HI is exact for |k| < 2**15)
_FLN2_HI, _FLN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)
_FLOG2E = np.float32(1.4426950408889634)
_FMAGIC = np.float32(127.0 + 8388608.0)  # 2**23 + the exponent bias
# tanh(x) / x - 1 = x**2 t(x**2) on |x| < 0.625: degree-4 t, fitted the same
# way, 0.15 ulp relative
_FT0, _FT1, _FT2 = np.float32(-0.3333328068256378), np.float32(0.13331441581249237), \
    np.float32(-0.05373971536755562)
_FT3, _FT4 = np.float32(0.02063908614218235), np.float32(-0.005704986397176981)


@njit(inline="always", cache=True)
def _pow2f(k):
    """2**k for integer-valued float32 k in [-126, 127] (as :func:`_pow2`)."""
    return np.int32(np.float32(k + _FMAGIC).view(np.int32) << 23).view(np.float32)


@njit(inline="always", cache=True)
def _expf_reduced(y):
    """``e, k`` with exp(y) = e 2**k, ``e`` in [0.7, 1.42], for float32 y in [-104, 89]."""
    k = np.rint(y * _FLOG2E)
    r = (y - k * _FLN2_HI) - k * _FLN2_LO
    q = (_FQ0 + r * _FQ1) + (r * r) * ((_FQ2 + r * _FQ3) + (r * r) * _FQ4)
    return (r + (r * r) * q) + np.float32(1.0), k


@njit(cache=True, error_model="numpy")
def vexpf(x):
    """exp for float32 x in float32 arithmetic, vectorizable (within 1.5 ulp).

    The scale ``2**k`` is applied as two normal powers of two (as :func:`vexp`),
    so results in the subnormal range are rounded once."""
    e, k = _expf_reduced(min(max(x, np.float32(-104.0)), np.float32(89.0)))  # beyond: 0, inf
    k1 = np.floor(k * np.float32(0.5))
    y = (e * _pow2f(k1)) * _pow2f(k - k1)
    return x if x != x else y


@njit(cache=True, error_model="numpy")
def vtanhf(x):
    """tanh for float32 x in float32 arithmetic, vectorizable (within 1.5 ulp).

    ``|x| < 0.625``: ``x + x**3 t(x**2)``; above, ``1 - 2 / (exp(2|x|) + 1)``,
    whose rounding errors the subtraction from 1 scales down (both computed,
    one selected, so the loop vectorizes).  From 9.1 on, 1 in float32."""
    a = abs(x)
    e, k = _expf_reduced(np.float32(2.0) * min(a, np.float32(9.1)))
    big = np.float32(1.0) - np.float32(2.0) / (e * _pow2f(k) + np.float32(1.0))
    x2 = x * x
    t = (_FT0 + x2 * _FT1) + (x2 * x2) * ((_FT2 + x2 * _FT3) + (x2 * x2) * _FT4)
    y = x + x * (x2 * t) if a < np.float32(0.625) else (-big if x < 0 else big)
    return x if (x != x or x == 0) else y  # nan, and the sign of zero




# --------------------------------------------------------------------------
# the chain rule's product: zero annihilates inf and nan
# --------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def smul(a, b):
    """``a * b``, but 0 where either factor is 0 (also against inf or nan).

    The product of a partial derivative and a tangent or cotangent in the
    chain rule (ForwardDiff.jl's NaN-safe mode): a zero (co)tangent -- the
    untaken branch of a ``np.where``, a zero weight -- contributes nothing
    even where the other factor is infinite; float64 kernels."""
    return a * b if (a != 0.0 and b != 0.0) else 0.0


@njit(cache=True, error_model="numpy")
def smul32(a, b):
    """:func:`smul` for float32 kernels."""
    return a * b if (a != 0 and b != 0) else np.float32(0.0)


# --------------------------------------------------------------------------
# numpy's floor_divide of floats
# --------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def floor_divide(a, b):
    """``np.floor_divide`` of two float64: numpy's ``npy_floor_divide``, Python's
    ``divmod`` quotient (``(a - fmod(a, b)) / b``, one less where the remainder's
    sign differs from ``b``'s, snapped to an integer), ``a / b`` where ``b`` is 0.
    numba's own is ``floor(a / b)``: NaN at ``1 // -inf`` (numpy: -1), inf at
    ``inf // 1`` (numpy: NaN), and a unit off where ``a / b`` rounds up to an
    integer (``1 // 0.1``: numpy 9, ``floor(1 / 0.1)`` 10)."""
    if b == 0.0:
        return a / b
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != 0.0 and (b < 0.0) != (mod < 0.0):  # (a NaN remainder is true in C too)
        div -= 1.0
    if div == 0.0:
        return np.copysign(0.0, a / b)
    floordiv = np.floor(div)
    return floordiv + 1.0 if div - floordiv > 0.5 else floordiv


@njit(cache=True, error_model="numpy")
def floor_divide32(a, b):
    """:func:`floor_divide` in float32 arithmetic (numpy's float32 loop)."""
    zero, one, half = np.float32(0.0), np.float32(1.0), np.float32(0.5)
    if b == zero:
        return a / b
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != zero and (b < zero) != (mod < zero):
        div -= one
    if div == zero:
        return np.copysign(zero, a / b)
    floordiv = np.floor(div)
    return floordiv + one if div - floordiv > half else floordiv




# --------------------------------------------------------------------------
# the same, inlined by numba: for the bodies of prange loops
# --------------------------------------------------------------------------
# numba outlines a ``prange`` body into a function of its own, where LLVM does
# not inline the functions above: the loop calls them one element at a time
# (a tanh region of 10^4 x 16 took 673 us on 2 threads, 132 us with them
# inlined; the same loop serial, 354 us).  numba-level inlining re-types the
# body at each call site (compile time), so only prange bodies use these
# (:func:`hybridad.backends.scalar.inline_vector_calls`), as ``<name>_inline``.
for _name in list(VECTOR_UFUNCS.values()) + list(FLOAT32_UFUNCS.values()) + \
        list(FLOAT32_NATIVE.values()) + list(HELPERS.values()):
    globals()[_name + "_inline"] = njit(inline="always",
                                        error_model="numpy")(globals()[_name].py_func)
del _name

