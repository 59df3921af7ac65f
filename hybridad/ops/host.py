"""Functions hybridad has no rules for, applied to values that need no derivative.

Two ops, one idea: numpy's or scipy's own function computes the value, and a
derivative through it is refused by name.

A ufunc hybridad does not know (``scipy.special.spence``, ``np.gcd`` on data,
a third-party ufunc) called on traced values becomes one ``host_ufunc`` node:
its value is the ufunc itself, run into the node's preallocated buffer
(``out=``) on every call -- numpy's own result, whatever the function.  Its
derivative rules raise, naming the function and the user's line, so a plan
is refused exactly when a derivative must flow through it (a differentiated
argument reaches it); applied to data arguments or constants it is just a
value.  The ufunc is named by its import path (``attrs["ufunc"]``), which
keeps plans picklable and generated source cacheable.

Any other function -- a numpy function without a traced implementation
(``np.histogram``, ``np.unique`` of a fixed size), a Python function of scipy
(``scipy.special.comb``, ``scipy.stats.rankdata``, ``scipy.signal.lfilter``)
-- called on traced values that it converts with ``np.asarray`` becomes one
``host_call`` node (see :mod:`hybridad.frontend.host_calls`): its arrays are
the node's operands, everything else is a literal *template* of the call
(``attrs["template"]``), and the function runs on every call with the
operands' values, its result copied into the node's buffer.  Its shape and
dtype are found while tracing by running it on placeholder arrays
(:func:`probe`); a call whose result has another shape raises.
"""

from __future__ import annotations

import contextlib
import functools
import importlib

import numpy as np

from ..ir.registry import Op, register

__all__ = ["HOST_OPS", "call", "driver", "invoke", "op_driver", "on_placeholders",
           "placeholders", "probe", "resolve"]


@functools.cache
def resolve(path):
    """The function at import path ``path`` (``"scipy.special.spence"``); the
    original where hybridad wraps the attribute while tracing."""
    module, _, name = path.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    return getattr(fn, "__hybridad_original__", fn)


def _abstract(*args, ufunc, where):
    from ..core.trace import loop_dtypes

    fn = resolve(ufunc)
    shape = np.broadcast_shapes(*(a.shape for a in args))
    return shape, loop_dtypes(fn, args)[-1]


def _run(out, *arrays, ufunc, where):
    resolve(ufunc)(*arrays, out=out)


def _no_derivative(node):
    name = node.attrs.get("ufunc") or node.attrs["func"]
    return NotImplementedError(
        f"hybridad has no derivative rule for {name} (at {node.attrs['where']}), "
        "and a differentiated argument reaches it; applied only to values that are not "
        "differentiated (data, constants) it runs as numpy runs it")


def _vjp(g, node, active, *operands, **attrs):
    raise _no_derivative(node)


def _jvp(tangents, node, *operands, **attrs):
    if any(t is not None for t in tangents):
        raise _no_derivative(node)
    return None


register(Op("host_ufunc", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp,
            doc="a ufunc without derivative rules, on values that need none"))


# ----------------------------------------------------------------------------
# host_call: any function, its arrays as operands, the rest a literal template
# ----------------------------------------------------------------------------
def _build(spec, arrays):
    """The Python value a template item stands for, with operand ``k`` taken
    from ``arrays``: ``("a", k)`` an operand, ``("v", value)`` a literal,
    ``("l", items)`` / ``("t", items)`` a list / tuple, ``("d", name)`` a dtype,
    ``("c", (dtype, shape, bytes))`` a small constant array (a fresh copy)."""
    kind, body = spec
    if kind == "a":
        return arrays[body]
    if kind == "c":
        dtype, shape, data = body
        return np.frombuffer(data, np.dtype(dtype)).reshape(shape).copy()
    if kind == "v":
        return body
    if kind == "d":
        return np.dtype(body)
    items = [_build(s, arrays) for s in body]
    return items if kind == "l" else tuple(items)


def invoke(func, template, arrays):
    """``func`` (an import path) called as ``template`` says, on ``arrays``."""
    args, kwargs = template
    return resolve(func)(*(_build(s, arrays) for s in args),
                         **{k: _build(s, arrays) for k, s in kwargs})


def call(func, template, item, arrays):
    """``func``'s result on ``arrays`` (item ``item`` of a tuple result), as an array."""
    result = invoke(func, template, arrays)
    if item is not None:
        result = result[item]
    return np.asarray(result)


def placeholders(shapes, kind):
    """Arrays of the operands' shapes and dtypes: all ones, or counting 0, 1, 2, 3, 4."""
    out = []
    for shape, dtype in shapes:
        dtype = np.dtype(dtype)
        if kind == "ones":
            out.append(np.ones(shape, dtype))
        else:
            n = int(np.prod(shape))
            vals = np.arange(n) % (2 if dtype == np.bool_ else 5)
            out.append(vals.astype(dtype).reshape(shape))
    return out


@contextlib.contextmanager
def on_placeholders():
    """A run of a library function on placeholder arrays while tracing:
    floating-point errors and warnings silenced, and numpy's global generator
    left where it stood -- a function that draws from it (scipy.linalg.logm's
    norm estimate) is run without drawing from the user's stream, nor reading
    as ``f`` drawing random numbers (:func:`hybridad.core.observe.observe`)."""
    import warnings

    rng = np.random.get_state()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        np.random.set_state(rng)


@functools.lru_cache(maxsize=512)
def probe(func, template, item, shapes):
    """(shape, dtype) of ``func``'s result for operands of ``shapes`` ((shape,
    dtype) pairs), found by running it on placeholder arrays
    (:func:`on_placeholders`); ``None`` for the shape when the result's shape
    changes with the values (``np.unique``).  Exceptions of the first run
    propagate."""
    with on_placeholders():
        first = call(func, template, item, placeholders(shapes, "ones"))
        try:
            second = call(func, template, item, placeholders(shapes, "count"))
        except Exception:  # noqa: BLE001 -- zeros out of its domain: the first run decides
            second = first
    if first.dtype.kind not in "biuf":
        raise TypeError(f"{func} returns {first.dtype} values; hybridad holds bool, integer and "
                        "floating-point arrays")
    shape = first.shape if second.shape == first.shape else None
    return shape, first.dtype


def _abstract_call(*args, func, template, item, where):
    shape, dtype = probe(func, template, item, tuple((a.shape, a.dtype) for a in args))
    if shape is None:
        raise ValueError(f"{func}'s result has a shape that depends on the values")
    return shape, dtype


def _run_call(out, *arrays, func, template, item, where):
    with np.errstate(all="ignore"):
        result = call(func, template, item, arrays)
    if result.shape != out.shape:
        raise ValueError(
            f"{func} (at {where}) returned an array of shape {result.shape} at this call and "
            f"{out.shape} when it was traced: its result's shape depends on the values, "
            "which a plan cannot follow")
    out[...] = result


def driver(blob):
    """``run(out, *arrays)`` of the host call pickled in ``blob`` ((func,
    template, item, where)), for generated code."""
    import pickle

    func, template, item, where = pickle.loads(blob)  # noqa: S301 -- our own generated source
    return functools.partial(_run_call, func=func, template=template, item=item, where=where)


register(Op("host_call", "compute", _abstract_call, run=_run_call, vjp=_vjp, jvp=_jvp,
            doc="a numpy or scipy function without derivative rules, on values that need none"))


#: ops whose ``run`` is Python on host arrays (numba runs them in object mode,
#: the GPU program refuses them): library functions without rules, and ODEs
#: and integrals computed by scipy (:mod:`hybridad.ops.ode`, :mod:`hybridad.ops.quad`)
HOST_OPS = ("host_ufunc", "host_call", "ode", "ode_adjoint", "quad", "root")


def op_driver(blob):
    """``run(out, *arrays)`` of the node pickled in ``blob`` (``(op, attrs,
    extra)``): its op's ``run`` with those attributes and the backend's
    ``extra`` keywords, for generated code."""
    import pickle

    from ..ir.registry import REGISTRY

    op, attrs, extra = pickle.loads(blob)  # noqa: S301 -- our own generated source
    return functools.partial(REGISTRY[op].run, **attrs, **extra)

