"""The array API namespace of a traced array, and scipy's array-API helpers on tracers.

``Tracer.__array_namespace__()`` returns :data:`namespace`: numpy 2's own
namespace (which adopted the standard's names: ``acos``, ``concat``,
``permute_dims``, ``pow``, ``matrix_transpose``, ``vecdot``, ...), whose
functions dispatch traced arrays to hybridad, except where the standard and
numpy part ways on a traced argument:

* ``asarray(x)`` of a tracer is the tracer (cast when ``dtype`` says so), as
  the standard requires for an array of the namespace; numpy's would try to
  make memory of it;
* ``astype(x, dtype, copy=True)`` is the tracer's ``astype``
  (``result_type`` of tracers is numpy's, dispatched to :mod:`.numpy_shapes`);
* ``sort`` and ``argsort`` take the standard's ``descending``;
* the creation functions (``empty``, ``zeros``, ``full``, ``eye``, ``*_like``)
  make traced constants while a trace runs: arrays of this namespace, which
  array-API code then fills.

scipy's array-API code (``array_namespace``, ``xp_promote``, ``_asarray``)
converts its inputs with ``np.asanyarray`` whenever ``SCIPY_ARRAY_API`` is
off (the default), and asks ``__array_namespace__`` when it is on.  So that
it runs on tracers both ways -- ``scipy.optimize.rosen``, ``rosen_der``,
``rosen_hess_prod`` and the array-API functions of scipy.special, stats and
signal -- :func:`install_scipy` wraps ``scipy._lib._array_api._asarray`` (the
one helper every conversion goes through) when scipy imports it: a tracer
goes to :func:`asarray`, anything else to scipy's own; and with the switch on,
a tracer takes scipy's numpy namespace (``array_api_compat.numpy``, whose
``asarray`` keeps a tracer: :mod:`.numpy_construct`), as the ndarrays beside
it do.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from .numpy_construct import holds_tracer
from .numpy_made import made, maker
from ..core.trace import tracing
from ..core.tracer import SURFACE, Tracer

__all__ = ["argsort", "asarray", "install_scipy", "namespace", "sort"]


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """The standard's ``asarray``: a traced array is returned as it is (cast to
    ``dtype`` when that differs; ``copy=True`` a copy); a nested sequence of
    traced values is stacked (``np.asarray`` of it is traced); anything else is
    numpy's."""
    if device not in (None, "cpu"):
        raise ValueError(f"hybridad traces arrays on the CPU; device={device!r}")
    if isinstance(obj, Tracer):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            return obj.astype(dtype)
        return obj.copy() if copy else obj
    if holds_tracer(obj):
        return np.asarray(obj, dtype=dtype)
    return np.asarray(obj, dtype=dtype, copy=copy)


def astype(x, dtype, /, *, copy=True, device=None):
    """The standard's ``astype`` (``x.astype``; tracers too)."""
    return x.astype(dtype, copy=copy)


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """The standard's ``sort``: ``descending`` keeps equal elements in their
    order (numpy's ``np.sort`` has no such argument)."""
    if not descending:
        return np.sort(x, axis=axis, stable=stable)
    return np.flip(np.sort(np.flip(x, axis), axis=axis, stable=True), axis)


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """The standard's ``argsort`` (``descending`` as :func:`sort`)."""
    if not descending:
        return np.argsort(x, axis=axis, stable=stable)
    n = np.shape(x)[axis]
    return np.flip(n - 1 - np.argsort(np.flip(x, axis), axis=axis, stable=True), axis)


class _Namespace(types.ModuleType):
    """numpy's namespace, with the functions above in front."""

    __array_api_version__ = "2023.12"

    def __getattr__(self, name):
        return getattr(np, name)

    def __dir__(self):
        return sorted(set(dir(np)) | set(vars(self)))


def _made_traced(name):
    """The standard's array-creation function ``name``: while a trace runs, its
    array is a traced constant -- an array of this namespace, which code then
    writes into (scipy's array-API ``clip``: ``out = xp.empty(...); out[()] =
    x``), as it would into an array of its namespace (numpy_made's rule for the
    arrays ``f`` makes: ``empty`` is ``zeros``)."""
    numpy_fn = maker(name)

    @functools.wraps(getattr(np, name))
    def make(*args, device=None, **kwargs):
        if device not in (None, "cpu"):
            raise ValueError(f"hybridad traces arrays on the CPU; device={device!r}")
        out = numpy_fn(*args, **kwargs)
        return made(out, args[0] if args else None) if tracing() else out
    return make


namespace = _Namespace("hybridad.array_api", __doc__)
for _fn in (asarray, astype, sort, argsort):
    setattr(namespace, _fn.__name__, _fn)
for _name in ("empty", "zeros", "ones", "full", "eye", "empty_like", "zeros_like", "ones_like",
              "full_like"):
    setattr(namespace, _name, _made_traced(_name))
SURFACE.namespace = namespace  # (Tracer.__array_namespace__ returns it)


def _wrap_asarray(original):
    @functools.wraps(original)
    def _asarray(array, dtype=None, order=None, copy=None, *, xp=None, check_finite=False,
                 subok=False):
        if not holds_tracer(array):
            return original(array, dtype=dtype, order=order, copy=copy, xp=xp,
                            check_finite=check_finite, subok=subok)
        if check_finite:
            raise ValueError("check_finite=True needs the values, which a traced array does "
                             "not have while tracing")
        return asarray(array, dtype=dtype, copy=copy)

    _asarray.__hybridad_original__ = original
    return _asarray


def _wrap_namespace(original, np_compat):
    @functools.wraps(original)
    def array_namespace(*xs, **kwargs):
        if any(isinstance(x, Tracer) for x in xs):
            return np_compat  # (numpy's, as for the ndarrays beside them: one namespace)
        return original(*xs, **kwargs)

    array_namespace.__hybridad_original__ = original
    return array_namespace


def install_scipy(module):
    """Wrap ``module._asarray`` (``scipy._lib._array_api``) and the
    ``array_namespace`` of its vendored array_api_compat, once: with
    ``SCIPY_ARRAY_API=1`` a tracer beside ndarrays takes scipy's numpy
    namespace (whose ``asarray`` keeps tracers), not a second namespace scipy
    would refuse to mix."""
    original = getattr(module, "_asarray", None)
    if original is not None and not hasattr(original, "__hybridad_original__"):
        module._asarray = _wrap_asarray(original)
    import importlib

    try:  # (scipy's vendored copy: its helpers look the function up on the package)
        compat = importlib.import_module("scipy._lib.array_api_compat")
        np_compat = importlib.import_module("scipy._lib.array_api_compat.numpy")
    except ImportError:
        return
    original = getattr(compat, "array_namespace", None)
    if original is not None and np_compat is not None and \
            not hasattr(original, "__hybridad_original__"):
        compat.array_namespace = _wrap_namespace(original, np_compat)
    clip = getattr(np_compat, "clip", None)
    if clip is not None and not hasattr(clip, "__hybridad_original__"):
        np_compat.clip = _wrap_clip(clip)


def _wrap_clip(original):
    """The numpy namespace's ``clip`` (its masked writes need the values) as
    ``np.clip`` of a traced array, in its dtype."""
    @functools.wraps(original)
    def clip(x, /, min=None, max=None, **kwargs):  # noqa: A002 - the standard's names
        if not any(isinstance(v, Tracer) for v in (x, min, max)):
            return original(x, min, max, **kwargs)
        if kwargs.get("out") is not None:
            raise NotImplementedError("hybridad: clip(out=) of traced values is not supported")
        out = np.clip(x, -np.inf if min is None else min, np.inf if max is None else max)
        return out if out.dtype == x.dtype else out.astype(x.dtype)

    clip.__hybridad_original__ = original
    return clip
