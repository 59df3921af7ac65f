"""The CUDA dialect of the scalar printer, and CUDA kernels for fused regions.

:mod:`hybridad.backends.scalar` renders a region's value and dual-number
partials as statements over symbolic scalars; with a :class:`CudaConstants`
context the same rendering speaks CUDA C++ instead of Python: each ufunc gets
its CUDA spelling (:data:`CUDA_FUNCS`: the CUDA math API, overloaded for
``float`` and ``double``, or a helper of :data:`PREAMBLE` where numpy's
semantics differ from C's -- ``sign``, NaN-propagating ``maximum``, Python's
``%``), ``where`` is ``c ? a : b`` and typed constants are ``constexpr``
globals.  So a kernel's derivative code still comes from the one rule table.

:func:`region_kernel` turns one ``region`` node into a CUDA kernel
(``extern "C" __global__ void hybridad_<hash>(...)``, compiled by cupy's
``RawKernel``; the name shows in profilers): one thread per element of the
region's loop shape, every operand read with its broadcast strides folded to
constants (shapes are static in a plan), the value and each requested
partial written to its output.  The same source is what ``nvcc -ptx``
compile-checks in the tests on machines without a GPU.
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np

from ...transforms.partition import PRE_REDUCTION
from ..scalar import Constants, safe_product
from .special import SPECIAL_FUNCS, SPECIAL_PREAMBLE

__all__ = ["CUDA_FUNCS", "CudaConstants", "PREAMBLE", "cuda_apply", "ctype", "region_kernel"]

_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float",
           np.dtype(np.bool_): "bool", np.dtype(np.int64): "long long",
           np.dtype(np.int32): "int", np.dtype(np.uint8): "unsigned char"}


def ctype(dtype):
    """The C type of a numpy dtype (the dtypes plans use)."""
    try:
        return _CTYPES[np.dtype(dtype)]
    except KeyError:
        raise NotImplementedError(f"the cupy backend does not support dtype {dtype}") from None


#: ufunc name -> CUDA function (the math API's overloads, or a PREAMBLE helper)
CUDA_FUNCS = {
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "cbrt": "cbrt", "sin": "sin",
    "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh",
    "arctanh": "atanh", "absolute": "fabs", "fabs": "fabs", "floor": "floor", "ceil": "ceil",
    "rint": "rint", "trunc": "trunc", "arctan2": "atan2", "hypot": "hypot", "fmod": "fmod",
    "copysign": "copysign", "nextafter": "nextafter", "fmax": "fmax", "fmin": "fmin",
    "isnan": "isnan",
    "isinf": "isinf", "isfinite": "isfinite", "signbit": "signbit",
    "square": "hd_square", "reciprocal": "hd_reciprocal", "sign": "hd_sign",
    "deg2rad": "hd_deg2rad", "rad2deg": "hd_rad2deg", "heaviside": "hd_heaviside",
    "maximum": "hd_maximum", "minimum": "hd_minimum", "logaddexp": "hd_logaddexp",
    "logaddexp2": "hd_logaddexp2", "remainder": "hd_remainder",
    "floor_divide": "hd_floor_divide", "logical_xor": "hd_logical_xor",
    "positive": "",
    **SPECIAL_FUNCS,
}
_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "less": "<",
          "less_equal": "<=", "greater": ">", "greater_equal": ">=", "equal": "==",
          "not_equal": "!=", "logical_and": "&&", "logical_or": "||"}
_PREFIX = {"negative": "-", "logical_not": "!"}

#: helpers where numpy's semantics are not C's (templates: float and double);
#: ``__host__ __device__`` so the tests can run generated code on the CPU
PREAMBLE = r"""
#ifndef __CUDACC_RTC__
#include <cmath>
using std::isnan; using std::isinf; using std::isfinite; using std::signbit;
#else
// NVRTC has no host headers and no __builtin_nan: C's NAN and INFINITY (float
// constants, as <cmath> has them) by their bits
#define NAN __builtin_bit_cast(float, 0x7fc00000U)
#define INFINITY __builtin_bit_cast(float, 0x7f800000U)
#endif
#define HD __host__ __device__ __forceinline__
template <typename T> HD T hd_square(T x) { return x * x; }
template <typename T> HD T hd_reciprocal(T x) { return T(1) / x; }
template <typename T> HD T hd_sign(T x) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x)); }
template <typename T> HD T hd_deg2rad(T x) {
  return x * T(0.017453292519943295); }
template <typename T> HD T hd_rad2deg(T x) {
  return x * T(57.29577951308232); }
template <typename T> HD T hd_heaviside(T x, T h0) {
  return isnan(x) ? x : (x < T(0) ? T(0) : (x == T(0) ? h0 : T(1))); }
template <typename T> HD T hd_maximum(T a, T b) {
  return (isnan(a) || a >= b) ? a : b; }
template <typename T> HD T hd_minimum(T a, T b) {
  return (isnan(a) || a <= b) ? a : b; }
template <typename T> HD T hd_logaddexp(T a, T b) {
  if (a == b) return a + T(0.6931471805599453);
  T m = a > b ? a : b, d = a > b ? b - a : a - b;
  return isnan(d) ? a + b : m + log1p(exp(d)); }
template <typename T> HD T hd_logaddexp2(T a, T b) {
  if (a == b) return a + T(1);
  T m = a > b ? a : b, d = a > b ? b - a : a - b;
  return isnan(d) ? a + b : m + log1p(exp2(d)) * T(1.4426950408889634); }
template <typename T> HD T hd_remainder(T a, T b) {
  T r = fmod(a, b);
  if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
  return r == T(0) ? copysign(T(0), b) : r; }
template <typename T> HD T hd_floor_divide(T a, T b) {  // numpy's: Python's divmod quotient
  if (b == T(0)) return a / b;
  T mod = fmod(a, b), div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  if (div == T(0)) return copysign(T(0), a / b);
  T q = floor(div);
  return div - q > T(0.5) ? q + T(1) : q; }
HD bool hd_logical_xor(bool a, bool b) { return a != b; }
template <typename A, typename B> HD auto hd_smul(A a, B b) -> decltype(a * b) {
  return (a == A(0) || b == B(0)) ? decltype(a * b)(0) : a * b; }
""" + SPECIAL_PREAMBLE


class CudaConstants(Constants):
    """Typed constants of a CUDA kernel (``constexpr`` globals ``_k0, ...``)
    and the dialect marker the scalar printer reads."""

    dialect = "cuda"

    @staticmethod
    def apply_code(name, codes, out_dtype):
        """CUDA source of ufunc ``name`` on operand sources ``codes``."""
        return cuda_apply(name, codes, out_dtype)

    ctype = staticmethod(ctype)  # the C type of a dtype

    def kernel(self, dual):
        raise NotImplementedError(
            "@hybridad.elementwise functions run on the CPU backends (numba, numpy); the "
            "cupy backend has no CUDA spelling of their dual-number evaluation")

    def declarations(self):
        """``constexpr`` lines declaring every constant at its exact value."""
        return [f"constexpr {ctype(v.dtype)} {name} = {_literal(v)};"
                for name, (_, v) in self.values.items()]


def _literal(value):
    """Exact C source of a numpy scalar (17 / 9 significant digits round-trip)."""
    v = value.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}LL" if value.dtype.itemsize == 8 else str(v)
    single = value.dtype == np.float32
    if math.isnan(v) or math.isinf(v):
        # by their bits: constexpr under nvcc and NVRTC alike (NVRTC has neither
        # <cmath>'s macros nor __builtin_nan / __builtin_huge_val)
        bits = np.asarray(value).view(np.uint32 if single else np.uint64).item()
        return (f"__builtin_bit_cast(float, {bits:#010x}U)" if single
                else f"__builtin_bit_cast(double, {bits:#018x}ULL)")
    return f"{v!r}f" if single else repr(v)  # shortest text that reads back exactly


def cuda_apply(name, codes, out_dtype):
    """CUDA source of ufunc ``name`` applied to operand source ``codes``."""
    if name in ("add", "multiply") and out_dtype == np.bool_:  # (numpy's: or, and)
        return f"({codes[0]} {'||' if name == 'add' else '&&'} {codes[1]})"
    if name in _INFIX:
        return f"({codes[0]} {_INFIX[name]} {codes[1]})"
    if name in _PREFIX:
        return f"({_PREFIX[name]}{codes[0]})"
    if name == "power":
        return f"pow({codes[0]}, {codes[1]})"
    if name not in CUDA_FUNCS:
        raise NotImplementedError(f"no CUDA spelling of {name}")
    return f"{CUDA_FUNCS[name]}({', '.join(codes)})"


# --------------------------------------------------------------------------
# region kernels
# --------------------------------------------------------------------------
_STATEMENT = re.compile(r"^(\w+) = (.*)$")


def c_strides(shape):
    """The element strides of a C-contiguous array of ``shape`` (a list)."""
    strides, step = [], 1
    for s in reversed(shape):
        strides.insert(0, step)
        step *= s
    return strides


def coordinate_lines(loop, coords, var="i"):
    """Lines computing the loop coordinates ``coords`` (source names) of flat
    index ``var`` over ``loop`` (C order), the last axis fastest."""
    lines, rest = [], var
    for axis in range(len(loop) - 1, -1, -1):
        if axis == 0:
            lines.append(f"    const long long {coords[0]} = {rest};")
        else:
            lines += [f"    const long long {coords[axis]} = {rest} % {loop[axis]}LL;",
                      f"    const long long q{axis} = {rest} / {loop[axis]}LL;"]
            rest = f"q{axis}"
    return lines


def _broadcast_offset(shape, strides, loop_shape, coords):
    """Element offset of an operand of ``shape`` (element ``strides``; None:
    C-contiguous) broadcast to the loop, from the loop coordinates' source
    names (constants folded)."""
    nd = len(loop_shape)
    pad = nd - len(shape)
    if strides is None:
        strides = c_strides(shape)
    terms = []
    for axis, (s, st) in enumerate(zip(shape, strides, strict=True)):
        if s != 1 and st != 0:
            c = coords[pad + axis]
            terms.append(c if st == 1 else f"{c} * {st}LL")
    return " + ".join(terms) or "0"


class RegionKernel:
    """CUDA source of one region and how to call it.

    Attributes
    ----------
    name : str
        ``hybridad_<hash>``: the kernel's name (profilers show it).
    code : str
        The kernel (``extern "C" __global__``) and, in namespace
        ``<name>_``, its constants and the per-element function; it needs
        :data:`PREAMBLE` before it (:attr:`source`).
    params : list of str
        The kernel's pointer parameters in order: ``in<k>`` for each region
        input that is not an inlined scalar constant, then ``out``, then
        ``p<k>`` for each stored partial; the element count ``n`` last.
    size : int
        Threads to launch (the region's loop size).
    """

    def __init__(self, name, code, params, size):
        self.name, self.code, self.params, self.size = name, code, params, size

    @property
    def source(self):
        """A complete CUDA translation unit."""
        return PREAMBLE + "\n" + self.code


def region_kernel(region, mode, operands, seeds=(), wrt=None, cotangent=None, strides=None,
                  fused=False):
    """The CUDA kernel of one region.

    Parameters
    ----------
    region : Region
        The region's body (``node.attrs['body']``).
    mode : {"value", "vjp"}
        ``value``: write the elementwise value to ``out`` (the region's loop
        shape: a fused reduction runs afterwards over it) and the partials
        with respect to ``seeds`` to ``p<k>`` (a seed
        :data:`~hybridad.transforms.partition.PRE_REDUCTION`: the value itself,
        to ``pv``, in the same pass as a fused reduction of it).  ``vjp``: write
        ``g * d(value)/d(input wrt)``.
    operands : list of Node
        The region node's operands (the inputs; for ``vjp`` the cotangent
        last).
    seeds : tuple of int
    wrt : int, optional
    cotangent : tuple, optional
        Shape of the cotangent as read in the loop (``vjp`` mode).
    strides : list, optional
        Per operand, its strides in elements (views read in place), or None
        for C-contiguous (the default for all).
    fused : bool
        ``value`` mode, for a reduction that reads the values as it makes
        them (:func:`.reduce.sum_levels`' ``fused``): instead of a kernel,
        the namespace's ``value(i, ...)`` returns element ``i``'s value (and
        stores its partials); the result's ``params`` are its parameters,
        ``decls`` their declarations, ``size`` None.
    """
    from ..scalar import render_region

    loop = tuple(region.shape)
    nd = len(loop)
    consts = CudaConstants()
    coords = [f"c{a}" for a in range(nd)]
    params, reads, decls = [], [], []

    strides = strides or [None] * len(operands)

    def read(node, k, shape):
        if node.is_literal and node.size == 1:
            return consts.add(node.dtype.type(node.attrs["value"].reshape(-1)[0]))
        params.append(f"const {ctype(node.dtype)}* __restrict__ in{k}")
        return f"in{k}[{_broadcast_offset(shape, strides[k], loop, coords)}]"

    inputs = operands[:len(region.inputs)]
    for k, node in enumerate(inputs):
        reads.append(read(node, k, node.shape))
    if mode == "vjp":
        sb = render_region(region, reads, (wrt,), consts, need_value=False)
        g = read(operands[-1], len(inputs), cotangent)
        outs = [("out", region.nodes[-1].dtype,
                 safe_product(g, sb.partials[wrt], region.nodes[-1].dtype, consts))]
    else:
        sb = render_region(region, reads, tuple(k for k in seeds if k != PRE_REDUCTION),
                           consts)
        value_dtype = region.nodes[-1].dtype
        outs = [("out", value_dtype, sb.value)] + \
            [("pv", value_dtype, sb.value) if k == PRE_REDUCTION else
             (f"p{k}", value_dtype, sb.partials[k]) for k in seeds]
    if fused:  # element i's value returned, not stored
        value_dtype, value = outs[0][1], outs[0][2]
        outs = outs[1:]
    params += [f"{ctype(dt)}* __restrict__ {name}" for name, dt, _ in outs]
    params.append("long long n")
    for line in sb.lines:
        m = _STATEMENT.match(line)
        decls.append(f"    const auto {m.group(1)} = {m.group(2)};")
    index = ["    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
             "    if (i >= n) return;"] + coordinate_lines(loop, coords)
    stores = [f"    {name}[i] = ({ctype(dt)})({expr});" for name, dt, expr in outs]
    if fused:
        stores.append(f"    return ({ctype(value_dtype)})({value});")
    body = "\n".join(index[2:] + decls + stores)
    head = "\n".join(consts.declarations())
    digest = hashlib.sha256((head + body + ",".join(params)).encode()).hexdigest()[:16]
    name = f"hybridad_{digest}"
    names = [p.rsplit(" ", 1)[1] for p in params]
    if fused:
        code = "\n".join([
            f"namespace {name}_ {{  // constants and element i's value (host and device)",
            head, f"HD {ctype(value_dtype)} value(long long i, {', '.join(params[:-1])}) {{",
            body, "}", "}", ""])
        kernel = RegionKernel(name, code, names[:-1], None)
        kernel.decls = params[:-1]
        return kernel
    code = "\n".join([
        f"namespace {name}_ {{  // constants and element i (host and device: tests run it)",
        head, f"HD void element(long long i, {', '.join(params[:-1])}) {{", body, "}", "}", "",
        f"extern \"C\" __global__ void {name}({', '.join(params)}) {{", *index[:2],
        f"    {name}_::element(i, {', '.join(names[:-1])});", "}", ""])
    return RegionKernel(name, code, names, int(np.prod(loop, dtype=np.int64)))
