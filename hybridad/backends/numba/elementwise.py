"""``@hybridad.elementwise`` functions compiled by numba.

The front end (:mod:`hybridad.frontend.scalar_functions`) registers a user
scalar function's primitives and their rules; this module compiles them, and
hands itself to the front end (:data:`~hybridad.frontend.scalar_functions.COMPILER`)
when imported:

* :func:`check` -- that numba compiles the function, its hand-written
  derivative and the primitive's dual evaluation for the operand dtypes of a
  trace (an :class:`~hybridad.frontend.scalar_functions.ElementwiseError`
  naming the line where it does not);
* :func:`ufunc` -- the primitive as a numpy ufunc (``numba.vectorize``,
  float32 and float64 loops), what the function is outside tracing and what
  the numpy reference backend runs;
* :func:`driver` -- ``drv(*x) -> (value, partial, ...)``, one evaluation on
  nested dual numbers (:mod:`.dual`), what fused regions call;
* :func:`kernel` -- the driver of primitive ``name``, for generated plan
  source (each primitive's ``header_line`` binds it by name).
"""

from __future__ import annotations

import os
import re

import numpy as np

from ...frontend import scalar_functions as front
from ...frontend.scalar_functions import ElementwiseError

__all__ = ["check", "driver", "kernel", "parts", "ufunc"]

#: numba's options for user functions and their drivers
_JIT = {"error_model": "numpy"}  # (no contraction: the same bits wherever inlined)


def _jit(family):
    """The function, compiled (once)."""
    import numba

    if family._jit is None:
        family._jit = numba.njit(**_JIT)(family.ef.py_func)
    return family._jit


def _deriv_jit(family):
    """The hand-written derivative as a compiled function returning a tuple."""
    import numba

    if family._deriv_jit is None:
        d = numba.njit(**_JIT)(family.ef._deriv)
        if family.ef.nargs == 1:
            @numba.njit(**_JIT)
            def as_tuple(x):
                return (d(x),)
            family._deriv_jit = as_tuple
        else:
            family._deriv_jit = d
    return family._deriv_jit


def check(family, prim, dtypes):
    """Compile ``family``'s function, its hand-written derivative and
    ``prim``'s dual evaluation for these operand dtypes (once), turning
    numba's errors into :class:`ElementwiseError`."""
    import numba

    sig = tuple(numba.from_dtype(np.dtype(d)) for d in dtypes)
    if (prim.index, sig) in family._checked:
        return
    ef, what = family.ef, "the function"
    try:
        _jit(family).compile(sig)
        ret = _jit(family).overloads[sig].signature.return_type
        if not isinstance(ret, (numba.types.Number, numba.types.Boolean)):
            raise ElementwiseError(
                f"@hybridad.elementwise {ef.py_func.__qualname__} "
                f"({_where(ef.py_func)}) must return one scalar, but returns {ret}")
        if ef._deriv is not None:
            what = "its defderiv"
            _deriv_jit(family).compile(sig)
        what = "its derivative (the function evaluated on dual numbers)"
        prim.driver().compile(sig)
    except numba.core.errors.NumbaError as err:
        raise ElementwiseError(_compile_message(ef, what, err)) from None
    family._checked.add((prim.index, sig))


def _where(fn):
    code = fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _compile_message(ef, what, err):
    """One line saying where and why numba failed, then numba's own message."""
    text = _ANSI.sub("", str(err))
    reason = next((x.strip() for x in text.splitlines() if x.strip() and not x.startswith(
        ("Failed in ", "File ", "During:", " ", "\t")) and "<source" not in x), text.strip())
    at = _where(ef.py_func)
    for path, line in re.findall(r'File "([^"]+)", line (\d+)', text):
        mine = ef.py_func.__code__.co_filename
        at = f"{mine if os.path.basename(path) == os.path.basename(mine) else path}:{line}"
        break
    return (f"@hybridad.elementwise {ef.py_func.__qualname__} ({at}): numba cannot compile "
            f"{what}: {reason}\n(the function must be numba-compilable scalar code; numba's "
            f"message follows)\n{text}")


def ufunc(prim):
    """Compile ``prim`` as a numba-vectorized numpy ufunc (float32 and float64
    loops) into ``prim._ufunc``, once."""
    import numba

    from .locks import compiler_lock

    with compiler_lock(), front._LOCK:  # numba's lock first (it compiles here)
        if prim._ufunc is None:
            family = prim.family
            n = family.ef.nargs
            # float32 first: numpy takes the first loop its operands cast to
            sigs = [f"{t}({', '.join([t] * n)})" for t in ("float32", "float64")]
            if not prim.index:
                fn = family.ef.py_func
            else:
                params = ", ".join(f"x{i}" for i in range(n))
                ns = {"_drv": prim.driver(), "__name__": __name__}
                exec(f"def {family.base}_d({params}):\n"  # noqa: S102
                     f"    return _drv({params})[0]\n", ns)
                fn = ns[f"{family.base}_d"]
            try:
                vec = numba.vectorize(sigs)(fn)
                prim._ufunc = getattr(vec, "ufunc", vec)  # numpy's ufunc, loops fixed
            except numba.core.errors.NumbaError as err:
                raise ElementwiseError(_compile_message(family.ef, "the ufunc", err)) from None


def driver(prim):
    """Compile ``prim``'s value-and-partials function into ``prim._driver``,
    once: ``drv(*x) -> (d^I f, d^(I+0) f, ..., d^(I+n-1) f)`` (float64), I
    the primitive's multi-index, one evaluation on nested dual numbers."""
    from .cache import load_function
    from .locks import compiler_lock

    with compiler_lock(), front._LOCK:  # numba's lock first (a plan's build calls this)
        if prim._driver is None:
            fam, n = prim.family, prim.family.ef.nargs
            params = [f"x{i}" for i in range(n)]
            index = prim.index
            if fam.ef._deriv is not None and not index:
                bound = "_f, _df = _hd_parts({!r}, 'f', 'df')"
                body = [f"d = _df({', '.join(params)})",
                        f"return (float(_f({', '.join(params)})), "
                        + " ".join(f"float(d[{j}])," for j in range(n)) + ")"]
            else:
                if fam.ef._deriv is not None:  # differentiate the given derivative
                    bound = "_g = _hd_parts({!r}, 'df')"
                    call, index = "_g({})[%d]" % index[0], index[1:]
                else:
                    bound = "_f = _hd_parts({!r}, 'f')"
                    call = "_f({})"
                depth = len(index) + 1
                body = [f"s{i} = {_seed(f'x{i}', i, n, depth)}" for i in range(n)]
                body.append(f"r = _promote({call.format(', '.join(f's{i}' for i in range(n)))}"
                            ", s0)")
                outs = [_path(index, depth)] + [_path(index + (j,), depth) for j in range(n)]
                body.append("return (" + " ".join(f"r{o}," for o in outs) + ")")
            src = f"def {prim.ident}({', '.join(params)}):\n" + \
                "\n".join("    " + b for b in body) + "\n"
            # a module of the disk cache (its name hashes this source, and the
            # primitive's name hashes the user's code): a later process loads
            # the machine code instead of compiling the dual evaluation again
            # (seconds per function; the function itself is compiled anew by
            # check, milliseconds).  Cached only where a plan calling it may be
            jit = ", ".join(f"{k}={v!r}" for k, v in {**_JIT, "cache": prim.cacheable}.items())
            module = "\n".join([
                "from numba import njit",
                "from hybridad.backends.numba.dual import make_dual as _mk, promote as _promote",
                "from hybridad.backends.numba.elementwise import parts as _hd_parts",
                bound.format(prim.name), "", "", f"@njit({jit})", src])
            compiled = load_function(module, prim.ident)
            compiled.hybridad_source = src
            prim._driver = compiled  # published whole (read without the lock)


def _seed(x, i, n, depth):
    """Source of ``x`` as a dual ``depth`` deep with unit partial ``i`` at every level."""
    def const(c, level):
        if level == 0:
            return c
        zero = const("0.0", level - 1)
        return f"_mk({const(c, level - 1)}, ({', '.join([zero] * n)},))"

    if depth == 0:
        return x
    inner = _seed(x, i, n, depth - 1)
    parts = [const("1.0" if j == i else "0.0", depth - 1) for j in range(n)]
    return f"_mk({inner}, ({', '.join(parts)},))"


def _path(index, depth):
    """Attribute path to the derivative ``index`` of a result ``depth`` duals deep."""
    return "".join(f".d[{j}]" for j in index) + ".v" * (depth - len(index))


def parts(name, *which):
    """The compiled function (``"f"``) and hand-written derivative (``"df"``)
    of primitive ``name``'s user function, in that order: what a driver's
    generated module binds (:func:`driver`)."""
    fam = front.primitive(name).family
    got = [_jit(fam) if w == "f" else _deriv_jit(fam) for w in which]
    return got[0] if len(got) == 1 else tuple(got)


def kernel(name):
    """The compiled value-and-partials function of primitive ``name`` (what
    generated plan source binds at import)."""
    return front.primitive(name).driver()


front.COMPILER.check, front.COMPILER.ufunc, front.COMPILER.driver = check, ufunc, driver
