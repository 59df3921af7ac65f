"""Scalar code for a region: its value and its local partials by dual numbers.

The same rule table that drives the reverse pass (each elementwise op's
``partials``) is evaluated here on :class:`Sym` -- symbolic scalars whose
operators and ufuncs return source text -- so a kernel's derivative code is
rendered from the one declaration of each op, never written twice.

:func:`render_region` returns straight-line statements for one element::

    v3 = np.exp(v2)              # value locals
    d3_0 = (v3) * (d2_0)         # tangent locals: d(v3)/d(input 0)

Forward-mode dual numbers, scalarized: every input ``k`` in ``seeds`` is
seeded with tangent 1, tangents flow through each op as
``sum_j partial_j * tangent(arg_j)``, and symbolic zeros are skipped.  The
tangents of the last value are the region's local partials.
"""

from __future__ import annotations

import re

import numpy as np

from ..ops import REGISTRY
from ..ops.common import install_operators
from .numba.special_names import SPECIAL
from .numba.vmath_names import FLOAT32_NATIVE, FLOAT32_UFUNCS, HELPERS, VECTOR_UFUNCS

#: generated code calls ``vmath``'s functions under these names (``_vm_exp``)
VECTOR_PREFIX = "_vm_"
#: and their numba-inlined twins, in ``prange`` bodies, under these (``_vmi_exp``)
INLINE_PREFIX = "_vmi_"
#: and ``special``'s (scipy.special) under these (``_sp_erf``)
SPECIAL_PREFIX = "_sp_"

__all__ = ["Sym", "render_region", "ScalarBody", "VECTOR_PREFIX", "uses_special",
           "vector_imports"]


class Sym:
    """A symbolic scalar: source text and dtype."""

    __slots__ = ("code", "dtype", "consts")
    __array_priority__ = 1000

    def __init__(self, code, dtype, consts):
        self.code = code
        self.dtype = np.dtype(dtype)
        self.consts = consts

    def _wrap(self, other):
        if isinstance(other, Sym):
            return other
        value = np.asarray(other)
        dtype = self.dtype if type(other) in (int, float, bool) else value.dtype
        return Sym(self.consts.add(dtype.type(value)), dtype, self.consts)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            return NotImplemented
        args = [i if isinstance(i, Sym) else self._wrap(i) for i in inputs]
        return ufunc_code(ufunc, args)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where:
            c, a, b = (x if isinstance(x, Sym) else self._wrap(x) for x in args)
            dtype = np.result_type(a.dtype, b.dtype)
            return Sym(_where(c.code, a.code, b.code, self.consts), dtype, self.consts)
        return NotImplemented

    def __invert__(self):
        return ufunc_code(np.logical_not, [self])


def _binop(ufunc, reflected=False):
    def op(self, other):
        a, b = (self._wrap(other), self) if reflected else (self, self._wrap(other))
        return ufunc_code(ufunc, [a, b])

    return op


install_operators(Sym, _binop, lambda self: ufunc_code(np.negative, [self]))

_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "power": "**",
          "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">=",
          "equal": "==", "not_equal": "!=", "logical_and": "and", "logical_or": "or"}
_PREFIX = {"negative": "-", "positive": "+", "logical_not": "not "}


def ufunc_code(ufunc, args):
    """Source text of ``ufunc(*args)`` on symbolic scalars (the kernel printer; not the
    tracer surface's :func:`hybridad.frontend.numpy_api.apply_ufunc`)."""
    name = op_name(ufunc)
    out_dtype = ufunc.resolve_dtypes(tuple(a.dtype for a in args) + (None,) * ufunc.nout)[-1]
    consts = args[0].consts
    if _cuda(consts):  # the dialect's own spelling (hybridad.backends.cuda.source)
        return Sym(consts.apply_code(name, [a.code for a in args], out_dtype), out_dtype, consts)
    folded = _fold(ufunc, name, args, out_dtype, consts)
    if folded is not None:
        return folded
    if name == "power" and out_dtype.kind == "f":
        k = _integral(args[1], consts)
        if k is not None and 1 <= k <= 4:  # a product, not libm's pow (LLVM keeps pow)
            x = args[0].code
            code = {1: x, 2: f"({x} * {x})", 3: f"(({x} * {x}) * {x})",
                    4: f"(({x} * {x}) * ({x} * {x}))"}[k]
            if args[0].dtype != out_dtype:
                code = f"np.{out_dtype.name}({code})"
            return Sym(code, out_dtype, consts)
    if name in ("add", "multiply") and out_dtype == np.bool_:
        # numpy's add and multiply of booleans are logical or and and (True +
        # True is True); Python's and numba's + and * on bools count
        code = f"({args[0].code} {'|' if name == 'add' else '&'} {args[1].code})"
    elif name == "fmod" and out_dtype.kind in "iu":
        # C's fmod (the dividend's sign: fmod(-1, 2) == -1); numba's np.fmod of
        # integers is Python's % (the divisor's sign); 0 where b is 0, as numpy
        a, b = args[0].code, args[1].code
        code = (f"np.{out_dtype.name}(({a}) % ({b}) - ({b}) * ((({a}) % ({b}) != 0) & "
                f"((({a}) < 0) != (({b}) < 0))))")
    elif name in _INFIX:
        code = f"({args[0].code} {_INFIX[name]} {args[1].code})"
    elif name in _PREFIX:
        code = f"({_PREFIX[name]}{args[0].code})"
    elif name in VECTOR_UFUNCS and out_dtype == np.float64 and \
            all(a.dtype == np.float64 for a in args):
        code = f"{VECTOR_PREFIX}{name}({', '.join(a.code for a in args)})"  # vectorizable
    elif name in FLOAT32_NATIVE and out_dtype == np.float32 and \
            all(a.dtype == np.float32 for a in args):
        code = f"{VECTOR_PREFIX}{name}f({args[0].code})"  # float32 arithmetic (vmath)
    elif name in FLOAT32_UFUNCS and out_dtype == np.float32 and \
            all(a.dtype == np.float32 for a in args):
        # vmath's float32 twin in float64, rounded once: vectorizes, where
        # libm's float32 function (tanhf, expf) is a scalar call per element
        # (4-10x slower)
        wide = ", ".join(f"np.float64({a.code})" for a in args)
        code = f"np.float32({VECTOR_PREFIX}{name}32({wide}))"
    elif name == "floor_divide" and out_dtype in (np.float64, np.float32) and \
            all(a.dtype == out_dtype for a in args):
        # numpy's quotient (vmath): numba's np.floor_divide is floor(a / b)
        suffix = "32" if out_dtype == np.float32 else ""
        code = f"{VECTOR_PREFIX}floor_divide{suffix}({args[0].code}, {args[1].code})"
    elif name in SPECIAL:  # scipy.special: scipy's compiled function, in float64
        code = f"{SPECIAL_PREFIX}{name}({', '.join(a.code for a in args)})"
        if out_dtype != np.float64:
            code = f"np.{out_dtype.name}({code})"
    elif REGISTRY.get(name) is not None and REGISTRY[name].scalar is not None:
        code = REGISTRY[name].scalar.format(*(a.code for a in args))
    else:
        code = f"np.{name}({', '.join(a.code for a in args)})"
    return Sym(code, out_dtype, consts)


#: ops whose value on constants is folded while rendering (exact IEEE
#: arithmetic and comparisons: the value the compiled code would compute)
_FOLDED = ("add", "subtract", "multiply", "divide", "negative", "positive", "less",
           "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and",
           "logical_or", "logical_not")


def _constant(sym, consts):
    """The value of ``sym`` when it names a constant of ``consts``, else None."""
    got = getattr(consts, "values", {}).get(sym.code)
    return None if got is None else got[1]


def _fold(ufunc, name, args, out_dtype, consts):
    """``ufunc`` on constants as one constant (a partial's ``y - 1`` of a
    constant exponent, the ``y == 0`` it is tested by), or None."""
    if name not in _FOLDED:
        return None
    values = [_constant(a, consts) for a in args]
    if any(v is None for v in values):
        return None
    with np.errstate(all="ignore"):
        value = np.asarray(ufunc(*values)).astype(out_dtype)[()]
    return Sym(consts.add(out_dtype.type(value)), out_dtype, consts)


def _integral(sym, consts):
    """The int a constant ``sym`` equals, or None."""
    v = _constant(sym, consts)
    if v is None or np.asarray(v).dtype.kind not in "iuf" or not np.isfinite(v) or v != int(v):
        return None
    return int(v)


def op_name(ufunc):
    """The registry's name of ``ufunc`` (scipy's Hurwitz ``_zeta`` is op ``zeta``).

    Ufuncs of libraries not imported yet (scipy.special's) are not looked
    at: importing scipy.special to name numpy's ``tanh`` cost half a second
    of a plan's first build."""
    known = _OPS_BY_UFUNC.get(ufunc)
    if known is not None:
        return known
    for name, op in REGISTRY.items():
        if op.loaded_ufunc() is ufunc:
            _OPS_BY_UFUNC[ufunc] = name
            return name
    return ufunc.__name__


#: ufunc -> op name, filled as :func:`op_name` finds them
_OPS_BY_UFUNC = {}


def _cuda(consts):
    """Whether code is rendered in the CUDA dialect (see :mod:`.cuda`)."""
    return getattr(consts, "dialect", "python") == "cuda"


def _where(c, a, b, consts):
    got = getattr(consts, "values", {}).get(c)
    if got is not None and got[1].dtype == np.bool_:  # (a folded condition)
        return a if got[1] else b
    return f"({c} ? {a} : {b})" if _cuda(consts) else f"({a} if {c} else {b})"


def safe_product(a, b, dtype, consts):
    """Source of the chain rule's product of scalar sources ``a`` and ``b``:
    ``a * b``, but 0 where either is 0, also against inf and nan (op
    ``safe_multiply``; see :mod:`hybridad.ops.elementwise`)."""
    if b == "1" or a == "1":
        return a if b == "1" else b
    if _cuda(consts):
        return f"hd_smul({a}, {b})"
    return f"{VECTOR_PREFIX}{'smul32' if np.dtype(dtype) == np.float32 else 'smul'}({a}, {b})"


def _vmath_names():
    return {**VECTOR_UFUNCS, **{f"{uf}32": fn for uf, fn in FLOAT32_UFUNCS.items()},
            **{f"{uf}f": fn for uf, fn in FLOAT32_NATIVE.items()}, **HELPERS}


_VECTOR_CALL = re.compile(r"\b" + VECTOR_PREFIX + r"(\w+)\(")


def inline_vector_calls(lines):
    """``lines`` (a ``prange`` body) calling vmath's inlined twins
    (``_vmi_tanh``): numba outlines the body into a function where LLVM does
    not inline the called ones, and the loop would not vectorize
    (``hybridad.backends.numba.vmath``'s ``<name>_inline`` functions)."""
    return [_VECTOR_CALL.sub(INLINE_PREFIX + r"\1(", line) for line in lines]


def vector_imports(special=False):
    """The import lines giving generated source the vectorizable functions (and
    their inlined twins, :func:`inline_vector_calls`), and scipy.special's
    (:mod:`.numba.special`, as ``_sp_<op>``) where ``special``."""
    names = ", ".join(f"{fn} as {VECTOR_PREFIX}{uf}" for uf, fn in _vmath_names().items())
    inlined = ", ".join(f"{fn}_inline as {INLINE_PREFIX}{uf}"
                        for uf, fn in _vmath_names().items())
    line = (f"from hybridad.backends.numba.vmath import {names}\n"
            f"from hybridad.backends.numba.vmath import {inlined}")
    if special:
        names = ", ".join(f"{fn} as {SPECIAL_PREFIX}{op}" for op, fn in SPECIAL.items())
        line += f"\nfrom hybridad.backends.numba.special import {names}"
    return line


def uses_special(lines):
    """Whether generated ``lines`` call scipy.special's functions."""
    return any(SPECIAL_PREFIX in line for line in lines)


def vector_namespace():
    """name -> function, for source exec'd without imports."""
    from .numba import special, vmath

    return {**{f"{VECTOR_PREFIX}{uf}": getattr(vmath, fn) for uf, fn in _vmath_names().items()},
            **{f"{INLINE_PREFIX}{uf}": getattr(vmath, f"{fn}_inline")
               for uf, fn in _vmath_names().items()},
            **{f"{SPECIAL_PREFIX}{op}": getattr(special, fn) for op, fn in SPECIAL.items()}}


class Constants:
    """Typed scalar constants of a kernel, named ``_k0, _k1, ...`` (numba freezes
    global scalars, so they cost nothing per call and keep their dtype)."""

    def __init__(self):
        self.values = {}
        self.kernels = {}  # name -> compiled scalar function (user @elementwise ops)

    def add(self, value):
        key = (value.dtype.str, value.tobytes())
        for name, (k, _) in self.values.items():
            if k == key:
                return name
        name = f"_k{len(self.values)}"
        self.values[name] = (key, value)
        return name

    def kernel(self, dual):
        """Register the value-and-partials function of an op with ``dual``
        (see :class:`hybridad.ops.Op`); returns its name in the source."""
        self.kernels[dual.ident] = dual
        return dual.ident

    def namespace(self):
        """name -> value of every constant (not the kernels)."""
        return {name: v for name, (_, v) in self.values.items()}

    def kernel_header(self):
        """Module-level source lines binding the kernels generated code calls."""
        if not self.kernels:
            return []
        # (_hd_kernel: the compiled driver of an @elementwise primitive, by name)
        return ["from hybridad.backends.numba.elementwise import kernel as _hd_kernel"] + \
            [k.header_line() for k in self.kernels.values()]

    def kernel_namespace(self):
        """name -> compiled kernel, for source exec'd without imports."""
        return {name: k.driver() for name, k in self.kernels.items()}


class ScalarBody:
    """Rendered statements of one region element.

    Attributes
    ----------
    lines : list of str
        Statements computing ``value`` and the tangents.
    value : str
        Name of the local holding the region's elementwise result.
    partials : dict
        region input position -> expression of d(value)/d(input), or ``"0"``.
    consts : Constants
    """

    def __init__(self, lines, value, partials, consts):
        self.lines = lines
        self.value = value
        self.partials = partials
        self.consts = consts


def _op_code(node, args, consts):
    op = REGISTRY[node.op]
    if op.ufunc is not None:
        return ufunc_code(op.ufunc, args)
    if node.op == "where":
        c, a, b = args
        return Sym(_where(c.code, a.code, b.code, consts), node.dtype, consts)
    if node.op == "safe_multiply":
        a, b = args
        return Sym(safe_product(a.code, b.code, node.dtype, consts), node.dtype, consts)
    if node.op == "cast" and _cuda(consts):
        return Sym(f"(({consts.ctype(node.dtype)})({args[0].code}))", node.dtype, consts)
    if node.op == "cast":
        return Sym(f"np.{node.dtype.name}({args[0].code})", node.dtype, consts)
    raise NotImplementedError(f"no scalar rendering for {node.op}")


def _mul(p, t, consts, dtype):
    """Source of ``p * t`` for partial ``p`` (number, or Sym) and tangent text ``t``."""
    if isinstance(p, Sym):
        return safe_product(p.code, t, dtype, consts)
    if p == 1:
        return t
    if p == -1:
        return f"(-{t})"
    return f"({consts.add(np.asarray(p, dtype=dtype)[()])} * {t})"


def render_region(region, input_names, seeds=(), consts=None, need_value=True):
    """Statements computing one element of ``region`` and its dual partials.

    Parameters
    ----------
    region : Region
    input_names : list of str
        The scalar expression reading each region input at the current element.
    seeds : iterable of int
        Region input positions to differentiate with respect to.
    consts : Constants, optional
        Where typed scalar constants are registered (shared with the caller).
    need_value : bool, default True
        False when only the partials are used: statements they do not need
        are left out.
    """
    consts = Constants() if consts is None else consts
    seeds = tuple(seeds)
    syms, tangents = {}, {}
    for k, (node, code) in enumerate(zip(region.inputs, input_names, strict=True)):
        syms[node.id] = Sym(code, node.dtype, consts)
        tangents[node.id] = {k: "1"} if k in seeds else {}
    lines = []
    for node in region.nodes:
        args = [syms[a.id] for a in node.args]
        v = f"v{node.id}"
        op = REGISTRY[node.op]
        if op.dual is not None:  # one call gives the value and every partial
            t = f"t{node.id}"
            lines.append(f"{t} = {consts.kernel(op.dual)}({', '.join(a.code for a in args)})")
            lines.append(f"{v} = {t}[0]" if node.dtype == np.float64 else
                         f"{v} = np.{node.dtype.name}({t}[0])")
            duals = [Sym(f"{t}[{j + 1}]", np.float64, consts) for j in range(len(args))]
        else:
            lines.append(f"{v} = {_op_code(node, args, consts).code}")
        ans = Sym(v, node.dtype, consts)
        syms[node.id] = ans
        tans = {}
        if node.op == "where" and node.dtype.kind in "fc" and seeds:
            # select the taken branch's tangent: the other one never enters
            # (a nan or inf there must not turn into 0 * nan)
            _, a, b = node.args
            zero, one = (consts.add(node.dtype.type(v)) for v in (0, 1))
            for k in sorted(set(tangents[a.id]) | set(tangents[b.id])):
                ta, tb = (one if t == "1" else t for t in (tangents[a.id].get(k, zero),
                                                          tangents[b.id].get(k, zero)))
                name = f"d{node.id}_{k}"
                lines.append(f"{name} = " + _where(args[0].code, ta, tb, consts))
                tans[k] = name
            tangents[node.id] = tans
            continue
        if node.dtype.kind in "fc" and seeds:
            for j, (a, p) in enumerate(zip(node.args, op.partials, strict=True)):
                if p is None or (not callable(p) and p == 0) or not tangents[a.id]:
                    continue
                pj = duals[j] if op.dual is not None else p(*args, ans) if callable(p) else p
                for k, t in tangents[a.id].items():
                    tans.setdefault(k, []).append(_mul(pj, t, consts, node.dtype))
        tangents[node.id] = {}
        for k, terms in tans.items():
            if len(terms) == 1 and _LOCAL.fullmatch(terms[0]):
                tangents[node.id][k] = terms[0]  # a copy: no statement
                continue
            name = f"d{node.id}_{k}"
            lines.append(f"{name} = {' + '.join(terms)}")
            tangents[node.id][k] = name
    last = region.nodes[-1].id
    partials = {k: tangents[last].get(k, "0") for k in seeds}
    value = f"v{last}"
    used = ([value] if need_value else []) + list(partials.values())
    return ScalarBody(_live(lines, used), value, partials, consts)


#: a local or a literal one: what a tangent may be renamed to without a statement
_LOCAL = re.compile(r"[vd]\d+(?:_\d+)?|1")
_NAME = re.compile(r"\b[vdt]\d+(?:_\d+)?\b")


def _live(lines, used):
    """``lines`` (``name = expr``, in order) without the statements nothing in
    ``used`` depends on: a vjp region needs no value, an add chain's tangents
    are all 1 (numba spends milliseconds on every generated statement)."""
    live = set()
    for expr in used:
        live.update(_NAME.findall(expr))
    kept = []
    for line in reversed(lines):
        target, expr = line.split(" = ", 1)
        if target in live:
            kept.append(line)
            live.update(_NAME.findall(expr))
    return kept[::-1]
