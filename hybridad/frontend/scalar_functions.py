"""``@hybridad.elementwise``: user scalar functions, differentiated by dual numbers.

A Python function of scalars -- arithmetic, ``math`` and numpy scalar
functions, ``if``/``else`` on values, ``for``/``while`` loops, locals -- becomes
an elementwise primitive:

* outside tracing it is a numpy ufunc compiled by numba (broadcasting,
  ``out=``, float64 and float32 loops);
* inside traced code it is one IR node, fused into the surrounding region
  like any built-in elementwise op.  Its partial derivatives come from
  evaluating the same code on dual numbers (:mod:`hybridad.backends.numba.dual`):
  the region's kernel calls one compiled function that returns the value and
  every partial of the element, so branches are taken on the value and the
  derivative follows the branch that ran.

Each function gives a family of primitives, one per derivative multi-index
``I`` (a sorted tuple of argument positions; ``()`` is the function itself):
the partial of primitive ``I`` with respect to argument ``j`` is primitive
``I + (j,)``, evaluated on duals nested ``len(I) + 1`` deep.  So the reverse
pass, forward mode over it (Hessians) and the numpy reference backend handle
these ops exactly like the ufuncs of :mod:`hybridad.ops.elementwise`.  With a
hand-written derivative (:meth:`ElementwiseFunction.defderiv`) the first
partials come from it and the dual evaluation of the function is skipped
(higher derivatives then differentiate the supplied derivative by duals).

This module registers the primitives and their rules; the numba backend
compiles them (:mod:`hybridad.backends.numba.elementwise`: the ufunc, the
dual-number driver, the check that numba can compile the code), handing
itself in through :data:`COMPILER` when it is imported, so imports run one
way.  Compiled code reaches generated plan source through that module's
``kernel``: the plan module looks its kernels up by primitive name, and the
name carries a hash of the function's code, constants, globals and closure,
so numba's disk cache never serves machine code of an older version of a
function.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import types as pytypes
from typing import Any, Callable, overload

import numpy as np

from .._forksafe import RLock
from ..errors import TracingError

__all__ = ["COMPILER", "ElementwiseError", "ElementwiseFunction", "elementwise", "primitive"]


class ElementwiseError(TypeError):
    """An ``@elementwise`` function numba cannot compile, or that does not
    return a scalar."""


#: primitive name -> _Primitive, for generated source (:func:`primitive`)
_PRIMITIVES: dict[str, Any] = {}
_LOCK = RLock()

#: the backend that compiles user functions: ``check(family, prim, dtypes)``,
#: ``ufunc(prim)`` and ``driver(prim)`` (each sets the primitive's
#: ``_ufunc`` / ``_driver`` once); the numba backend fills it when imported
#: (:mod:`hybridad.backends.numba.elementwise`; ``import hybridad`` does)
COMPILER = pytypes.SimpleNamespace(check=None, ufunc=None, driver=None)


def primitive(name):
    """The primitive (:class:`_Primitive`) registered as op ``name``."""
    try:
        return _PRIMITIVES[name]
    except KeyError:
        raise TracingError(f"no @elementwise primitive {name!r} in this process") from None


@overload
def elementwise(fn: Callable[..., Any], *, name: str | None = None) -> ElementwiseFunction: ...


@overload
def elementwise(fn: None = None, *, name: str | None = None
                ) -> Callable[[Callable[..., Any]], ElementwiseFunction]: ...


def elementwise(fn: Callable[..., Any] | None = None, *, name: str | None = None
                ) -> ElementwiseFunction | Callable[[Callable[..., Any]], ElementwiseFunction]:
    """Make a scalar Python function an elementwise, differentiable primitive.

    Parameters
    ----------
    fn : callable
        A function of scalars returning one scalar, in the subset of Python
        numba compiles: arithmetic, comparisons, ``abs``/``min``/``max``,
        ``math`` and numpy scalar functions, ``if``/``else``, ``for``/``while``
        loops, local variables, calls of other ``numba.njit`` functions.  Its
        parameters are positional; every one is broadcast.
    name : str, optional
        The primitive's name in graphs and ``explain()`` (default: the
        function's ``__name__``).

    Returns
    -------
    ElementwiseFunction
        Callable on arrays and scalars with numpy broadcasting (a numba ufunc)
        and inside functions hybridad traces, where it is differentiated by
        evaluating it on dual numbers in the fused kernels.

    Examples
    --------
    >>> import math, numpy as np, hybridad as ha
    >>> @ha.elementwise
    ... def huber(r, d):
    ...     if abs(r) < d:
    ...         return 0.5 * r * r
    ...     return d * (abs(r) - 0.5 * d)
    >>> res = ha.gradient(lambda r: np.sum(huber(r, 1.0)), np.array([0.5, -3.0]))
    >>> res.gradient
    array([ 0.5, -1. ])
    """
    if fn is None:
        return lambda f: ElementwiseFunction(f, name=name)
    return ElementwiseFunction(fn, name=name)


class ElementwiseFunction:
    """A scalar function made elementwise by :func:`elementwise`.

    Attributes
    ----------
    py_func : function
        The decorated Python function (unchanged).
    nargs : int
        Its number of (broadcast) arguments.
    """

    def __init__(self, fn, name=None):
        if not isinstance(fn, pytypes.FunctionType):
            raise ElementwiseError(
                f"@hybridad.elementwise needs a Python function, got {type(fn).__name__}")
        params = inspect.signature(fn).parameters.values()
        bad = [p.name for p in params if p.kind not in (p.POSITIONAL_ONLY,
                                                        p.POSITIONAL_OR_KEYWORD)]
        if bad or not params:
            raise ElementwiseError(
                f"@hybridad.elementwise {fn.__qualname__}: every parameter must be a plain "
                f"positional scalar (found {', '.join(bad) or 'no parameters'})")
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.nargs = len(params)
        self.name = name or fn.__name__
        self._deriv = None
        self._family = None

    def __repr__(self):
        return f"<hybridad.elementwise {self.py_func.__qualname__}>"

    def defderiv(self, deriv: Callable[..., Any]) -> Callable[..., Any]:
        """Supply the partial derivatives by hand (used as a decorator).

        ``deriv`` takes the same arguments and returns the partial with
        respect to each of them: a tuple of ``nargs`` scalars (a scalar when
        there is one argument).  The first derivatives then come from it
        instead of a dual-number evaluation of the function; second
        derivatives (Hessians) differentiate ``deriv`` by dual numbers.

        Returns ``deriv`` unchanged.
        """
        if not isinstance(deriv, pytypes.FunctionType):
            raise ElementwiseError(f"defderiv of {self.name} needs a Python function, got "
                                   f"{type(deriv).__name__}")
        if len(inspect.signature(deriv).parameters) != self.nargs:
            raise ElementwiseError(f"defderiv of {self.name}: {deriv.__name__} must take the "
                                   f"same {self.nargs} argument(s)")
        with _LOCK:
            self._deriv = deriv
            self._family = None
        return deriv

    @property
    def family(self):
        """The :class:`_Family` of primitives (built on first use)."""
        with _LOCK:
            if self._family is None:
                self._family = _Family(self)
            return self._family

    @property
    def ufunc(self):
        """The numpy ufunc of the function's value (float64 and float32 loops)."""
        return self.family.primitive(()).ufunc

    def __call__(self, *args, **kwargs):
        from ..core.trace import bind
        from ..core.tracer import Tracer

        if kwargs or len(args) != self.nargs:  # keywords and defaults, as Python binds them
            try:
                bound = inspect.signature(self.py_func).bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.name}() takes {self.nargs} argument(s): {exc}") \
                    from None
            bound.apply_defaults()
            args = bound.args
        if any(isinstance(a, Tracer) for a in args):
            with _LOCK:  # what the code reads may have changed since the family was made
                if self._family is not None and self._family.key != self._key():
                    self._family = None
            prim = self.family.primitive(())
            from .numpy_selected import elementwise_of_selections

            r = elementwise_of_selections(lambda *a: bind(prim.name, *a), args)  # (x[m])
            return r if r is not None else bind(prim.name, *args)
        return self.ufunc(*args)

    def _key(self):
        """The fingerprint of the code (and the derivative supplied): what the
        compiled kernels froze, the globals and closure values included."""
        key = fingerprint(self.py_func)
        return key if self._deriv is None else key + "defderiv" + fingerprint(self._deriv)


def _fingerprint(fn, digest, depth=0):
    """Feed ``fn``'s code, constants, referenced global values and closure to
    ``digest`` (what numba freezes into compiled code)."""
    def code(c):
        digest.update(c.co_code)
        digest.update(repr((c.co_names, c.co_varnames, c.co_freevars)).encode())
        for k in c.co_consts:
            code(k) if isinstance(k, pytypes.CodeType) else digest.update(repr(k).encode())

    def value(v, nest=0):
        if isinstance(v, (bool, int, float, complex, str, np.generic)) or v is None:
            digest.update(repr(v).encode())
        elif isinstance(v, pytypes.ModuleType):
            digest.update(v.__name__.encode())
        elif depth < 4 and isinstance(getattr(v, "py_func", v), pytypes.FunctionType):
            _fingerprint(getattr(v, "py_func", v), digest, depth + 1)
        elif type(v) is np.ndarray:  # its values: what the function computes with
            digest.update(f"ndarray {v.dtype.str} {v.shape}".encode())
            digest.update(np.ascontiguousarray(v).view(np.uint8).reshape(-1).data)
        elif type(v) in (tuple, list) and nest < 4:
            digest.update(f"{type(v).__name__} {len(v)}".encode())
            for item in v:
                value(item, nest + 1)
        elif type(v) is dict and nest < 4:
            digest.update(f"dict {len(v)}".encode())
            for key, item in v.items():
                value(key, nest + 1)
                value(item, nest + 1)
        elif isinstance(v, (type, np.ufunc, pytypes.BuiltinFunctionType)):  # by name
            digest.update(f"{getattr(v, '__module__', '')}.{v.__name__}".encode())
        else:  # an object whose content is not read here: this object only
            digest.update(f"{type(v).__qualname__} at {id(v)}".encode())

    code(fn.__code__)
    for name in fn.__code__.co_names:
        if name in fn.__globals__:
            digest.update(name.encode())
            value(fn.__globals__[name])
    for cell in fn.__closure__ or ():
        try:
            value(cell.cell_contents)
        except ValueError:  # an empty cell
            digest.update(b"<empty>")
    digest.update(repr(fn.__defaults__).encode())


def fingerprint(fn):
    """A hash of what a function computes: its module, name, code, constants,
    the global values and closure it reads (see :func:`_fingerprint`): numbers,
    strings, functions and arrays by value (lists, tuples and dicts of them
    too), classes, ufuncs and builtins by name, any other object by identity
    -- two closures of one code over different arrays differ."""
    fn = getattr(fn, "py_func", fn)
    digest = hashlib.sha256(f"{getattr(fn, '__module__', '')}."
                            f"{getattr(fn, '__qualname__', repr(fn))}".encode())
    if isinstance(fn, pytypes.FunctionType):
        _fingerprint(fn, digest)
    else:
        digest.update(repr(fn).encode())
    return digest.hexdigest()


class _Family:
    """The primitives of one function, one per derivative multi-index."""

    def __init__(self, ef):
        self.ef = ef
        self.key = key = ef._key()
        self.tag = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.base = re.sub(r"\W", "_", ef.name)
        self._prims = {}
        # the compiler's (COMPILER): the compiled function and derivative, and
        # the (index, signature) pairs checked
        self._jit = None
        self._deriv_jit = None
        self._checked = set()

    def primitive(self, index):
        index = tuple(sorted(index))
        with _LOCK:
            prim = self._prims.get(index)
            if prim is None:  # the same code decorated twice shares its primitives
                prim = _PRIMITIVES.get(_Primitive.name_for(self, index)) or \
                    _Primitive(self, index)
                self._prims[index] = prim
            return prim

    def check(self, prim, dtypes):
        """Compile the function, its hand-written derivative and ``prim``'s dual
        evaluation for these operand dtypes (once, by the backend that
        compiles user functions: :data:`COMPILER`), raising
        :class:`ElementwiseError` where it cannot."""
        COMPILER.check(self, prim, dtypes)


def _suffix(index):
    return "_d" + "".join(map(str, index)) if index else ""


class _Primitive:
    """One derivative of a user function as a registered elementwise op."""

    def __init__(self, family, index):
        from ..ops import Op, register
        from ..ops.elementwise import _jvp_from_partials, _vjp_from_partials

        self.family = family
        self.index = index
        self.name = self.name_for(family, index)
        self.ident = f"_ue_{family.tag}{_suffix(index)}"  # its kernel's name in generated source
        self._driver = None
        self._ufunc = None
        nargs = family.ef.nargs
        partials = [functools.partial(_bind_partial, family, index + (j,)) for j in range(nargs)]
        self.op = register(Op(
            self.name, "elementwise", self._abstract, run=self._run,
            vjp=_vjp_from_partials(partials), jvp=_jvp_from_partials(partials),
            ufunc=_LazyUfunc(self),
            partials=tuple(partials), domain=(-2.0, 2.0),
            doc=f"@elementwise {family.ef.py_func.__qualname__}"
                + (f", derivative {index}" if index else ""),
            dual=self))
        _PRIMITIVES[self.name] = self

    @staticmethod
    def name_for(family, index):
        """The op name of ``family``'s derivative ``index``: ``huber_d0@<hash>``."""
        return f"{family.base}{_suffix(index)}@{family.tag}"

    # -- the op's rules ------------------------------------------------------
    def _abstract(self, *args):
        from ..core.trace import loop_dtypes

        shape = np.broadcast_shapes(*(a.shape for a in args))
        dtypes = loop_dtypes(self.op.ufunc, args)
        self.family.check(self, dtypes[:-1])
        return shape, dtypes[-1]

    def _run(self, out, *arrays):
        self.ufunc(*arrays, out=out)

    @property
    def ufunc(self):
        """The numpy ufunc of this derivative (float64 and float32 loops),
        compiled once by :data:`COMPILER`."""
        if self._ufunc is None:
            COMPILER.ufunc(self)
        return self._ufunc

    def driver(self):
        """``drv(*x) -> (d^I f, d^(I+0) f, ..., d^(I+n-1) f)`` (float64), I this
        primitive's multi-index: one evaluation on nested dual numbers,
        compiled once by :data:`COMPILER`."""
        if self._driver is None:
            COMPILER.driver(self)
        return self._driver

    @property
    def cacheable(self):
        """Whether numba can cache code calling this function on disk: it
        rebuilds the function's environment from its module on loading, so
        the user's functions must come from an importable module."""
        ef = self.family.ef
        return all(inspect.getmodule(f) is not None for f in (ef.py_func, ef._deriv)
                   if f is not None)

    def header_line(self):
        """The generated-source line binding this primitive's kernel (by name:
        ``_hd_kernel``, the compiled driver, :data:`COMPILER`'s)."""
        return f"{self.ident} = _hd_kernel({self.name!r})"


class _LazyUfunc:
    """Stands in for a primitive's ufunc until it is needed: numpy's dtype
    resolution answers without compiling (loops are float64 and float32);
    calling it compiles the numba ufunc."""

    def __init__(self, prim):
        self._prim = prim
        self.nin = prim.family.ef.nargs
        self.nout = 1
        self.__name__ = prim.name

    def resolve_dtypes(self, dtypes):
        """The loop numpy picks for these operand dtypes (Python scalar types
        are weak, NEP 50): float32 when every array operand casts safely to
        it, else float64."""
        weak = (bool, int, float)
        arrays = [np.dtype(d) for d in dtypes[:self.nin] if d not in weak]
        if complex in dtypes[:self.nin] or any(d.kind not in "biuf" for d in arrays):
            raise TypeError(f"{self.__name__}: no loop for operand dtypes {dtypes[:self.nin]}")
        f4 = np.dtype(np.float32)
        loop = f4 if arrays and all(np.can_cast(d, f4) for d in arrays) else np.dtype(np.float64)
        return (loop,) * (self.nin + 1)

    def __call__(self, *args, **kwargs):
        return self._prim.ufunc(*args, **kwargs)


def _bind_partial(family, index, *operands):
    """The partial ``d^index f`` at the operands (tracers: emits its node)."""
    from ..core.trace import bind

    *xs, _ans = operands
    return bind(family.primitive(index).name, *xs)
