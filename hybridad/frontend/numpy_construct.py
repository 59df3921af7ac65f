"""Building arrays from traced values: ``np.array`` and its relatives, ``np.r_``
/ ``np.c_``, ``np.append``, ``np.select`` and ``np.piecewise``.

``np.array``, ``np.asarray``, ``np.asanyarray`` and ``np.ascontiguousarray``
are not dispatched through ``__array_function__`` (numpy converts their
argument itself, and a tracer refuses to become memory), and neither is
``np.r_[...]`` (an object's ``__getitem__``).  They are intercepted instead:
while a trace runs on any thread, the attributes ``numpy.array``,
``numpy.asarray``, ``numpy.asanyarray``, ``numpy.ascontiguousarray`` and
``AxisConcatenator.__getitem__`` (behind ``np.r_`` and ``np.c_``) are
wrappers that call numpy's own function unless an argument holds a tracer
(a tracer, or a list or tuple with one inside, at any depth).  The first
trace to begin (:data:`~hybridad.core.trace.ON_ENTER`) puts them in,
the last to end (:data:`~hybridad.core.trace.ON_EXIT`) takes them out:
a count under a lock, so threads tracing at once share one installation
and numpy's objects are back as soon as no trace runs.

Only callers outside numpy and scipy are served: numpy's and scipy's own
code calling ``np.asarray`` on a tracer (a function hybridad does not
implement) still reaches the tracer's ``__array__``, whose TracingError
names the function.  numpy's internal modules bind their own ``asarray``
and never see the wrappers.  A name bound before tracing (``from numpy
import array``) is numpy's function: handed a tracer, it makes the plan trace
``f`` again with such names served (:mod:`.numpy_made`, docs/limitations.md).

A list mixing tracers, arrays and numbers is stacked as numpy would lay it
out (its shape, its dtype: Python numbers count as their default dtypes, as
in numpy's conversion of lists); runs of plain numbers become one constant,
arrays read from globals are read by reference.
"""

from __future__ import annotations

import functools
import os
import sys
import threading

import numpy as np
from numpy.lib import _index_tricks_impl as _index_tricks

from .._forksafe import Lock
from ..errors import traced_as_users, user_location
from .after_import import loaded
from .numpy_api import (
    ARRAY_FUNCTIONS,
    _tracer,
    broadcast_to,
    concatenate,
    expand_dims,
    implements,
    ravel,
    reshape,
    transpose,
    where,
)
from .objects import settle, tracers_in
from ..core.trace import ON_ENTER, ON_EXIT, current_trace
from ..core.tracer import SCALAR, SURFACE, Tracer

__all__ = ["ALIASES", "ORIGINALS", "construct", "holds_tracer", "installed"]

#: numpy's functions, as they were when hybridad was imported
ORIGINALS = {name: getattr(np, name) for name in ("array", "asarray", "asanyarray",
                                                   "ascontiguousarray")}
_Concatenator = _index_tricks.AxisConcatenator
_GETITEM = _Concatenator.__dict__["__getitem__"]
_array = ORIGINALS["array"]


def holds_tracer(obj):
    """Whether ``obj`` is a tracer or a list or tuple holding one (at any depth)."""
    if type(obj) is Tracer:
        return True
    if isinstance(obj, (list, tuple)):
        return any(holds_tracer(item) for item in obj)
    return False


# ----------------------------------------------------------------------------
# np.array and its relatives on traced values
# ----------------------------------------------------------------------------

def _copy_error():
    return ValueError("Unable to avoid copy while creating an array as requested (a traced "
                      "value that needs a new array, with copy=False).\nIf using "
                      "`np.array(obj, copy=False)` replace it with `np.asarray(obj)` to "
                      "allow a copy when needed.")


def _copy_mode(copy):
    """numpy's ``copy=`` as True (always), None (if needed) or False (never)."""
    if copy is None:
        return None
    if isinstance(copy, np._CopyMode):
        return {np._CopyMode.ALWAYS: True, np._CopyMode.NEVER: False}.get(copy)
    return bool(copy)


def construct(obj, dtype=None, copy=True, ndmin=0):
    """``np.array(obj, dtype, copy=copy, ndmin=ndmin)`` for traced values.

    Parameters
    ----------
    obj : Tracer, array_like, or (nested) list or tuple of them
        Tracers, numpy arrays, numbers and lists of them, rectangular as
        numpy requires.
    dtype : data-type, optional
        The result's dtype (an unsafe cast, as numpy's); by default the
        result type of the parts (Python numbers as their default dtypes).
    copy : bool or None, default True
        True: a new array always; None: ``obj`` itself where numpy returns
        it (a traced array of the right dtype); False: like None, but a
        ValueError where a new array is needed, as numpy.
    ndmin : int, default 0
        Ones prepended to the shape up to this many dimensions (a view).

    Returns
    -------
    Tracer
        The traced array (0-d arrays stay arrays, not numpy scalars).
    """
    copy = _copy_mode(copy)
    inputs = tracers_in([obj])
    if type(obj) is Tracer:
        x = obj
        fresh = bool(x._flags & SCALAR)  # numpy's scalar becomes a new 0-d array
        if dtype is not None and np.dtype(dtype) != x.dtype:
            if copy is False:
                raise _copy_error()
            x, fresh = x.astype(dtype), True
    else:
        if copy is False:
            raise _copy_error()
        x, fresh = _from_parts(obj), True
        if dtype is not None and np.dtype(dtype) != x.dtype:
            x = x.astype(dtype)
    if copy is True and not fresh:
        x, fresh = Tracer(x.node, x._trace), True
    if x.ndim < ndmin:
        x = reshape(x, (1,) * (ndmin - x.ndim) + x.shape)
    if not fresh:
        return settle(x, inputs, "view")  # obj itself, or a view of it (ndmin)
    x = settle(x, inputs, "array")
    x._flags &= ~SCALAR
    return x


SURFACE.as_array = functools.partial(construct, copy=None)


def _literal(value):
    trace = current_trace()
    return Tracer(trace.const(_array(value), True), trace)


def _from_parts(obj, depth=0):
    """``obj`` as one traced array: tracers as they are, numpy arrays by
    reference, numbers and lists without tracers as literal constants, lists
    holding tracers stacked (consecutive constant items as one constant)."""
    if type(obj) is Tracer:
        return obj
    if isinstance(obj, np.ndarray):
        return _tracer(obj)
    if not holds_tracer(obj):
        return _literal(obj)
    pieces, run = [], []
    for item in obj:
        if holds_tracer(item) or isinstance(item, np.ndarray):
            if run:
                pieces.append(_literal(run))
                run = []
            pieces.append(expand_dims(_from_parts(item, depth + 1), 0))
        else:
            run.append(item)
    if run:
        pieces.append(_literal(run))
    shapes = sorted({p.shape[1:] for p in pieces})
    if len(shapes) > 1:
        raise ValueError(
            "setting an array element with a sequence. The requested array has an "
            f"inhomogeneous shape after {depth + 1} dimensions: its items have shapes "
            f"{shapes} (at {user_location()})")
    return concatenate(pieces, axis=0)


def _check_device(device):
    if device not in (None, "cpu"):
        raise ValueError(f"Device not understood. Only 'cpu' is allowed, but received: "
                         f"{device}")


def _np_array(object, dtype=None, *, copy=True, order="K", subok=False,  # noqa: A002
              ndmin=0, like=None):
    return construct(object, dtype, copy=copy, ndmin=ndmin)


def _np_asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    _check_device(device)
    return construct(a, dtype, copy=copy)


def _np_ascontiguousarray(a, dtype=None, *, like=None):
    return construct(a, dtype, copy=None, ndmin=1)


_IMPLS = {"array": _np_array, "asarray": _np_asarray, "asanyarray": _np_asarray,
          "ascontiguousarray": _np_ascontiguousarray}
_library_files = {}  # file name -> whether it is numpy's or scipy's


def _package_dir(module):
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


#: scipy's vendored array API layer: its ``asarray`` is the standard's, which
#: takes an array of the namespace as it is (array-API code calls it: a tracer
#: stays one there, :mod:`.array_api`)
_ARRAY_API_COMPAT = os.sep + os.path.join("_lib", "array_api_compat") + os.sep


def _library_file(name):
    """Whether code of file ``name`` is numpy's or scipy's own (not scipy's array
    API layer, nor numpy's polynomial package)."""
    kind = _library_files.get(name)
    if kind is None:  # (a scipy file runs only once scipy is imported)
        dirs = tuple(d for d in (_package_dir(np), _package_dir(sys.modules.get("scipy")))
                     if d)
        path = os.path.abspath(name)
        kind = _library_files[name] = path.startswith(dirs) and _ARRAY_API_COMPAT not in path \
            and not traced_as_users(path)
    return kind


def served(name, caller, args, kwargs):
    """numpy's constructor ``name`` (``array``, ``asarray``, ...) as its wrapper
    serves a call from the code of file ``caller``: a tracer (or a list of them)
    traced, unless numpy's or scipy's own code converts it; numpy's otherwise."""
    obj = args[0] if args else kwargs.get("object" if name == "array" else "a")
    if isinstance(obj, (list, tuple)) and not _library_file(caller):
        from .numpy_complex import ComplexTracer, is_complex_constant

        if _holds(obj, lambda v: isinstance(v, ComplexTracer)) or \
                holds_tracer(obj) and _holds(obj, is_complex_constant):
            # (complex traced values, or complex numbers with traced ones: by parts)
            dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
            if dtype is None or np.dtype(dtype).kind == "c":
                parts = _complex_parts(obj, ComplexTracer)
                real = np.dtype(np.complex128 if dtype is None else dtype).type(0).real.dtype
                return ComplexTracer(*(construct(p, _promoted(p, real)) for p in parts))
    if holds_tracer(obj) and not _library_file(caller):
        return _IMPLS[name](*args, **kwargs)
    return ORIGINALS[name](*args, **kwargs)


def _holds(obj, test):
    """Whether ``test(obj)``, or ``obj`` is a list or tuple holding such an item
    (any depth)."""
    if isinstance(obj, (list, tuple)):
        return any(_holds(item, test) for item in obj)
    return test(obj)


def _complex_parts(obj, kind):
    """``(real parts, imaginary parts)`` of a (nested) list holding complex
    traced values (``kind``), numbers, arrays and real traced values, each a
    list of the same layout (a real value's imaginary part: zeros)."""
    if isinstance(obj, kind):
        return obj.full()
    if isinstance(obj, (list, tuple)):
        pairs = [_complex_parts(item, kind) for item in obj]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if type(obj) is Tracer:
        return obj, np.zeros(obj.shape, obj.dtype)
    value = np.asarray(obj)
    return np.real(value), np.imag(value)


def _promoted(parts, real):
    """The real dtype of a complex array's parts: ``real`` (float64 for
    complex128), or float32 where every part is (a complex64 value's)."""
    dts = {getattr(p, "dtype", None) for p in _leaves_of(parts)}
    return np.dtype(np.float32) if dts == {np.dtype(np.float32)} else real


def _leaves_of(obj):
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _leaves_of(item)
    else:
        yield obj


def _wrapper(name):
    original = ORIGINALS[name]

    def dispatch(*args, **kwargs):
        return served(name, sys._getframe(1).f_code.co_filename, args, kwargs)

    functools.update_wrapper(dispatch, original)
    dispatch.__hybridad_original__ = original
    return dispatch


#: name -> the wrapper put in numpy's namespace while a trace runs
WRAPPERS = {name: _wrapper(name) for name in ORIGINALS}


# ----------------------------------------------------------------------------
# np.r_ and np.c_
# ----------------------------------------------------------------------------

def _traced_key(key):
    items = key if isinstance(key, tuple) else (key,)
    return any(holds_tracer(item) or (isinstance(item, slice) and any(
        type(v) is Tracer for v in (item.start, item.stop, item.step))) for item in items)


def _concatenator_getitem(self, key):
    if isinstance(key, str) or not _traced_key(key):
        return _GETITEM(self, key)
    return _traced_concatenation(self, key)


_concatenator_getitem.__doc__ = _GETITEM.__doc__
_concatenator_getitem.__hybridad_original__ = _GETITEM


def _traced_concatenation(self, key):
    """numpy's ``AxisConcatenator.__getitem__`` on traced items."""
    name = "np.c_" if isinstance(self, _index_tricks.CClass) else "np.r_"
    if type(self).concatenate is not _Concatenator.concatenate:
        raise NotImplementedError(f"hybridad: {type(self).__name__}[...] (not np.r_ or np.c_) "
                                  f"with traced values at {user_location()}")
    key = key if isinstance(key, tuple) else (key,)
    trans1d, ndmin, axis = self.trans1d, self.ndmin, self.axis
    objs, kinds = [], []
    for k, item in enumerate(key):
        scalar = False
        if isinstance(item, slice):
            start = 0 if item.start is None else item.start
            step = 1 if item.step is None else item.step
            if isinstance(step, (np.complexfloating, complex)):
                newobj = np.linspace(start, item.stop, num=int(abs(step)))
            else:
                newobj = np.arange(start, item.stop, step)
            if ndmin > 1:
                newobj = construct(newobj, copy=None, ndmin=ndmin)
                if trans1d != -1:
                    newobj = newobj.swapaxes(-1, trans1d)
        elif isinstance(item, str):
            if k != 0:
                raise ValueError("special directives must be the first entry.")
            axis, ndmin, trans1d = _directive(name, item, axis, ndmin, trans1d)
            continue
        elif type(item) in np.ScalarType:
            scalar, newobj = True, item
        else:
            x = construct(item, copy=None)
            newobj = construct(x, copy=None, ndmin=ndmin)
            if trans1d != -1 and x.ndim < ndmin:
                k2, k1 = ndmin - x.ndim, trans1d
                if k1 < 0:
                    k1 += k2 + 1
                axes = list(range(ndmin))
                newobj = transpose(newobj, axes[:k1] + axes[k2:] + axes[k1:k2])
        objs.append(newobj)
        kinds.append(item if scalar else newobj.dtype)  # Python scalars are weak
    dtype = np.result_type(*kinds)
    objs = [construct(o, dtype, copy=None, ndmin=ndmin) for o in objs]
    return settle(concatenate(objs, axis=axis), tracers_in(key), "array")


def _directive(name, item, axis, ndmin, trans1d):
    """numpy's string directives of ``np.r_``: ``'1'``, ``'0,2'``, ``'0,2,1'``
    (matrices, ``'r'`` and ``'c'``, are refused)."""
    if item in ("r", "c"):
        raise NotImplementedError(
            f"hybridad: {name}[{item!r}, ...] (a np.matrix result) with traced values at "
            f"{user_location()} is not supported; drop the {item!r} directive (and use "
            "reshape / .T)")
    try:
        if "," not in item:
            return int(item), ndmin, trans1d
        parts = [int(v) for v in item.split(",")[:3]]
    except ValueError:
        raise ValueError(f"unknown special directive {item!r}") from None
    return parts[0], parts[1], parts[2] if len(parts) == 3 else trans1d


# ----------------------------------------------------------------------------
# installing the wrappers while traces run
# ----------------------------------------------------------------------------

_lock = Lock()
_active = 0  # threads whose trace stack is not empty
_saved = {}  # what the wrappers replaced
_thread = threading.local()  # .counted: this thread is one of the _active


def installed():
    """Whether the wrappers are in numpy's namespace now (a trace runs on some thread)."""
    return _active > 0


#: numba's modules that register its implementations of numpy's constructors
NUMBA_MODULES = ("numba.np.arraymath", "numba.np.arrayobj")
#: more (numpy's function, its wrapper) pairs numba types alike (other modules'
#: wrappers in numpy's namespace: :mod:`.numpy_made`)
ALIASES = []


def numba_aliases(just_imported=None):
    """Let numba compile code that calls ``np.asarray`` while the wrappers are
    in (another thread's njit function; numba's own ``np.broadcast_to`` calls
    it), and after they are out.  numba registers its implementations of
    numpy's constructors under whatever ``np.asarray`` is when
    :data:`NUMBA_MODULES` load -- the function or, while a trace runs on some
    thread, its wrapper -- so each of the pair is typed as the other.  Run
    when hybridad is imported (numba's modules already loaded) and right
    after each of them loads (:mod:`.after_import`): never imports numba
    itself, which costs a first call half a second.  numba's internals may
    change, so a failure leaves numba as it is."""
    if not any(loaded(m, just_imported) is not None for m in NUMBA_MODULES):
        return
    try:
        from numba.core.typing.templates import builtin_registry
    except Exception:  # noqa: BLE001 - another numba: nothing to alias
        return
    other = {}
    for original, wrapper in [(ORIGINALS[name], WRAPPERS[name]) for name in ORIGINALS] + \
            ALIASES:
        other[id(original)] = (original, wrapper)
        other[id(wrapper)] = (wrapper, original)
    with _lock:
        typed = {id(value) for value, _ in builtin_registry.globals}
        for value, typ in list(builtin_registry.globals):
            pair = other.get(id(value))
            if pair is not None and value is pair[0] and id(pair[1]) not in typed:
                builtin_registry.register_global(pair[1], typ)
                typed.add(id(pair[1]))


def _begin():
    """A thread's outermost trace begins: count it, and put the wrappers in if
    they are not (a thread counts once, however its traces nest)."""
    global _active
    if getattr(_thread, "counted", False):
        return
    with _lock:
        _thread.counted = True
        _active += 1
        if _active == 1:
            for name, wrapper in WRAPPERS.items():
                _saved[name] = getattr(np, name)
                setattr(np, name, wrapper)
            _saved["__getitem__"] = _Concatenator.__dict__["__getitem__"]
            _Concatenator.__getitem__ = _concatenator_getitem


def _end():
    """A thread's outermost trace ends: the last thread takes the wrappers out
    (leaving whatever someone else put there since)."""
    global _active
    if not getattr(_thread, "counted", False):
        return
    with _lock:
        _thread.counted = False
        _active -= 1
        if _active == 0:
            for name, wrapper in WRAPPERS.items():
                previous = _saved.pop(name)
                if getattr(np, name) is wrapper:
                    setattr(np, name, previous)
            previous = _saved.pop("__getitem__")
            if _Concatenator.__dict__.get("__getitem__") is _concatenator_getitem:
                _Concatenator.__getitem__ = previous


ON_ENTER.append(_begin)
ON_EXIT.append(_end)


# ----------------------------------------------------------------------------
# functions numpy dispatches: np.append, np.select, np.piecewise
# ----------------------------------------------------------------------------

ARRAY_FUNCTIONS.update({np.select, np.piecewise})  # 0-d results are arrays (np.full, zeros)


@implements(np.append)
def append(arr, values, axis=None):
    """``np.append``: ``values`` after ``arr`` (both flattened when ``axis`` is None)."""
    arr, values = construct(arr, copy=None), construct(values, copy=None)
    if axis is None:
        if arr.ndim != 1:
            arr = ravel(arr)
        values, axis = ravel(values), arr.ndim - 1
    return concatenate((arr, values), axis=axis)


def _weak_dtype(v):
    return v.dtype if isinstance(v, Tracer) else v  # a Python number: weak, as numpy's


@implements(np.select)
def select(condlist, choicelist, default=0):
    """``np.select``: where ``condlist[i]`` is the first true condition,
    ``choicelist[i]``; ``default`` where none is.  One ``np.where`` per
    condition, so the choices not taken get no derivative."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    choices = [c if type(c) in (int, float, complex) else construct(c, copy=None)
               for c in list(choicelist) + [default]]
    try:
        dtype = np.result_type(*(_weak_dtype(c) for c in choices))
    except TypeError as e:
        raise TypeError(f"Choicelist and default value do not have a common dtype: {e}") \
            from None
    conds = [construct(c, copy=None) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    choices = [_tracer(c).astype(dtype) for c in choices]
    shape = np.broadcast_shapes(*(c.shape for c in conds + choices))
    result = broadcast_to(choices[-1], shape)
    for cond, choice in zip(conds[::-1], choices[-2::-1], strict=True):
        result = where(cond, choice, result)
    return result


@implements(np.piecewise)
def piecewise(x, condlist, funclist, *args, **kw):
    """``np.piecewise``: ``funclist[i]`` (a function or a constant) where
    ``condlist[i]`` holds, the last true condition winning, 0 where none
    does; one more function than conditions is the "otherwise" case.  As
    numpy's, the result has ``x``'s dtype.

    Each function is applied to the whole of ``x`` (numpy applies it to
    ``x[cond]``, whose shape depends on traced values), and ``np.where``
    picks its values: elementwise functions give numpy's result, and the
    elements a function does not take get no derivative from it.  A
    function's result must broadcast to ``x``'s shape."""
    x = construct(x, copy=None)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and
                                 x.ndim != 0):
        condlist = [condlist]
    conds = construct(condlist, dtype=bool, copy=None)
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:  # the "otherwise" condition
        conds = concatenate([conds, ~np.any(conds, axis=0, keepdims=True)], axis=0)
        n += 1
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    y = _literal(np.zeros((), x.dtype))
    for k, func in enumerate(funclist):
        v = _tracer(func(x, *args, **kw) if callable(func) else func)
        if np.broadcast_shapes(v.shape, conds[k].shape, x.shape) != x.shape:
            raise ValueError(
                f"np.piecewise at {user_location()}: function {k} returned shape {v.shape} "
                f"(condition of shape {conds[k].shape}); hybridad applies each function to "
                f"the whole array (shape {x.shape}), so it must be elementwise (or return a "
                "scalar)")
        y = where(conds[k], v.astype(x.dtype), y)
    return y if y.shape == x.shape else broadcast_to(y, x.shape) + 0
