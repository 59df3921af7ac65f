"""``out=`` into traced arrays: a ufunc's or a numpy function's result written
into a traced array made inside ``f`` by numpy's in-place semantics
(``np.tanh(a, out=a)``, scikit-learn's ``np.maximum(X, 0, out=X)`` and
in-place softmax, ``np.dot(a, b, out=c)``, ``np.sum(x, axis, out=s)``).  The
result is computed as a new value and the tracer object takes it
(:func:`hybridad.frontend.objects.assign`: views of the array see it); an
``out`` that is an argument of ``f`` (or a view of one), or a plain numpy
array, is refused by name.  :mod:`.numpy_api` calls these through its
:data:`~hybridad.frontend.numpy_api.OUT` table (imports run one way)."""

from __future__ import annotations

from ..errors import ConversionError, user_location, user_namespaces
import numpy as np

from .numpy_api import OUT, _tracer, _ufunc, broadcast_to, implements, where
from .objects import assign, settle, tracers_in
from ..core.tracer import Tracer

__all__ = ["copyto", "function_into_out", "into_out"]


def into_out(ufunc, method, inputs, kwargs):
    """``ufunc(..., out=a)`` with ``a`` a traced array made inside ``f``
    (``np.tanh(a, out=a)``, scikit-learn's ``np.maximum(X, 0, out=X)``): the
    result is computed as a new value and written into ``a`` by numpy's
    in-place semantics (:func:`hybridad.frontend.objects.assign`: views of
    ``a`` see it; ``where=`` keeps ``a``'s old values where it is False;
    ``casting`` as numpy's).  An ``out`` that is an argument of ``f`` (or a
    view of one) is refused by name, as element writes into it are; one that
    is a plain numpy array too (the trace cannot follow writes into it), unless
    ``f`` made it: then ``f`` is traced again (:mod:`.numpy_made`)."""
    outs = kwargs.pop("out")
    outs = outs if isinstance(outs, tuple) else (outs,)
    _traced_outs(outs)
    mask = kwargs.pop("where", True)
    casting = kwargs.pop("casting", "same_kind")
    result = _ufunc(ufunc, method, inputs, kwargs)
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(outs):
        raise ValueError(f"{ufunc.__name__} has {len(results)} outputs; out= gave {len(outs)}")
    for target, value in zip(outs, results, strict=True):
        if target is not None:
            _write(target, value, f"out= of np.{ufunc.__name__}", casting, mask, ufunc)
    written = tuple(o if o is not None else r for o, r in zip(outs, results, strict=True))
    return written if isinstance(result, tuple) else written[0]


def function_into_out(impl, func, args, kwargs):
    """``func(*args, out=o)`` (hybridad's ``impl`` of it) with ``o`` traced
    arrays made inside ``f``: the result, written into them (numpy casts a
    function's ``out`` unsafely)."""
    out = kwargs["out"]
    _traced_outs(out if isinstance(out, tuple) else (out,))
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    result = settle(impl(*args, **rest), tracers_in(args, rest), "new")
    outs, results = (out, result) if isinstance(out, tuple) else ((out,), (result,))
    for target, value in zip(outs, results, strict=True):
        _write(target, value, f"out= of np.{func.__name__}", "unsafe")
    return out


def _traced_outs(outs):
    """Refuse ``out=`` arrays that are not traced (None: no output there): a
    :class:`ConversionError`, so that ``f`` is traced again with the arrays
    it makes traced (:mod:`.numpy_made`) -- an ``out`` made inside ``f`` then
    is one."""
    if not all(isinstance(o, Tracer) or o is None for o in outs):
        raise ConversionError(
            f"out= a numpy array at {user_location()} (or `a += t` with `a` a numpy array): "
            "writes of traced values into memory the trace does not follow are not traced; "
            "use the returned value, or make `a` from a traced array (`np.zeros_like(x)`, "
            "`x.copy()`)", user_namespaces())


def _write(target, value, what, casting, mask=True, ufunc=None):
    """``value`` into the traced array ``target``: broadcast to its shape (as
    numpy broadcasts a result into ``out``), kept where ``mask`` is False."""
    value = _tracer(value)
    if value.shape != target.shape:
        value = broadcast_to(value, target.shape)
    if mask is not True:
        value = where(mask, value, target)
    assign(target, value, what, casting=casting, ufunc=ufunc)


@implements(np.copyto)
def copyto(dst, src, casting="same_kind", where=True):  # noqa: F811 -- numpy's argument name
    """``np.copyto(dst, src)`` with a traced value: ``dst`` a traced array made
    inside ``f`` takes ``src`` by numpy's in-place semantics (broadcast,
    ``casting``, kept where ``where`` is False); a plain numpy array as
    ``dst`` -- ``np.full(n, t, dtype=...)``'s own, made inside numpy -- is
    refused as every write of a traced value into memory the trace does not
    follow, and ``f`` is traced again with the arrays it makes traced
    (:mod:`.numpy_made`)."""
    if not isinstance(dst, Tracer):
        raise ConversionError(
            f"np.copyto of a traced value into a numpy array at {user_location()}: writes "
            "of traced values into memory the trace does not follow are not traced; make "
            "the array from a traced one (`np.zeros_like(x)`, `x.copy()`)", user_namespaces())
    _write(dst, src, "np.copyto", casting, where)


OUT.ufunc, OUT.function = into_out, function_into_out
