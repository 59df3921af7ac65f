"""numpy arrays that refuse what cupy refuses: the GPU program's emulation.

``tests/test_cupy_program.py`` runs the GPU backend's program on the host,
numpy arrays standing in for cupy's.  numpy accepts calls cupy does not --
``np.take(..., mode=)``, ``np.maximum.reduce``, a keyword cupy's function
lacks -- and a program that ran here failed on the first real GPU.  With
:data:`STRICT` as the array module, every buffer of the program is a
:class:`StrictArray`, and each numpy function or ufunc method called on one
is first checked against cupy's own (imported, no GPU needed):

* a function: cupy has one of that name in the same namespace (``numpy.X``
  -> ``cupy.X``, ``numpy.linalg.X`` -> ``cupy.linalg.X``), and its signature
  binds the call's arguments (``inspect.signature(cupy.take).bind(...)``);
* a ufunc: cupy has it, the call's keywords are ones cupy's ufuncs take, and
  a method other than ``__call__`` (``reduce``, ``accumulate``, ``at``) is
  one cupy implements for it -- asked of cupy itself, which raises
  ``NotImplementedError`` for the others before touching a device.

Then numpy runs the call.  Without cupy, :data:`STRICT` is None and the
emulation runs on plain numpy.
"""

import functools
import inspect
import types

import numpy as np

try:
    import cupy
except Exception:  # noqa: BLE001 - not installed (or broken): no strict checks
    cupy = None

#: keywords cupy's ufuncs take, per method
_UFUNC_KEYWORDS = {"__call__": {"out", "dtype", "casting"},
                   "reduce": {"axis", "dtype", "out", "keepdims"},
                   "accumulate": {"axis", "dtype", "out"},
                   "at": set(), "outer": {"out", "dtype"}}


def _plain(x):
    return x.view(np.ndarray) if isinstance(x, StrictArray) else x


def _unwrap(x):
    """``x`` (arguments: tuples, lists, dicts of them) with strict arrays plain."""
    if isinstance(x, StrictArray):
        return x.view(np.ndarray)
    if isinstance(x, (tuple, list)):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


@functools.cache
def _cupy_function(module, name):
    space = cupy
    for part in module.split(".")[1:]:
        space = getattr(space, part, None)
        if space is None:
            return None
    return getattr(space, name, None)


@functools.cache
def _method_supported(name, method):
    """Whether cupy implements ``cupy.<name>.<method>`` (asked of cupy: its
    unsupported methods raise NotImplementedError before any device work)."""
    fn = getattr(getattr(cupy, name), method, None)
    if fn is None:
        return False
    try:
        if method == "at":
            fn(np.zeros(2), np.zeros(1, np.int64), 1.0)
        elif method == "outer":
            fn(np.zeros(2), np.zeros(2))
        else:
            fn(np.zeros(2))
    except NotImplementedError:
        return False
    except Exception:  # noqa: BLE001 - got past the check (then failed on host arrays)
        return True
    return True


class StrictArray(np.ndarray):
    """A numpy array whose numpy calls are checked against cupy's API first."""

    def __array_function__(self, func, types_, args, kwargs):
        module = func.__module__ or "numpy"
        target = _cupy_function(module, func.__name__)
        if target is None:
            raise TypeError(f"cupy has no {module.replace('numpy', 'cupy')}.{func.__name__} "
                            "(a GPU program called numpy's)")
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):  # a compiled function without one: not checkable
            signature = None
        if signature is not None:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as err:
                raise TypeError(f"cupy's {func.__name__} does not take this call: {err}") \
                    from None
        # numpy's own implementation on plain arrays (it calls ufunc methods
        # with numpy's keywords inside), its array result strict again
        result = func(*_unwrap(args), **_unwrap(kwargs))
        return result.view(StrictArray) if type(result) is np.ndarray else result

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if getattr(cupy, name, None) is None:
            raise TypeError(f"cupy has no ufunc {name}")
        extra = set(kwargs) - _UFUNC_KEYWORDS.get(method, set())
        if extra:
            raise TypeError(f"cupy's {name}.{method} takes no {sorted(extra)}")
        if method != "__call__" and not _method_supported(name, method):
            raise NotImplementedError(f"cupy has no {name}.{method}")
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        return getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)


def _strict(make):
    @functools.wraps(make)
    def wrapper(*args, **kwargs):
        return make(*args, **kwargs).view(StrictArray)

    return wrapper


def _module():
    """numpy, with the constructors the GPU program allocates through
    returning :class:`StrictArray`; ``ndarray`` stays numpy's (a caller's
    result buffers are plain arrays, as cupy's are cupy's)."""
    m = types.ModuleType("strict_numpy", __doc__)
    m.__getattr__ = lambda name: getattr(np, name)
    for name in ("empty", "zeros", "ones", "full", "asarray", "ascontiguousarray", "array",
                 "empty_like", "zeros_like"):
        setattr(m, name, _strict(getattr(np, name)))
    m.ndarray = np.ndarray
    return m


STRICT = _module() if cupy is not None else None
