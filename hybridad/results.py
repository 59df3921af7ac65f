"""Result containers the caller owns (the Python spelling of DiffResults.jl).

A result holds preallocated arrays.  ``gradient(f, x, out=res)`` overwrites
them in place and returns ``res``; accessors return *references* to the
stored arrays (never copies), so keep a copy if you need an old value after
the next call.  Nothing else is ever written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._tree import dataclass_fields, flatten, is_namedtuple, make_dataclass, number_array
from ._xp import array_module, is_array

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._types import Pytree

__all__ = ["DiffResult", "GradientResult", "HessianResult", "HvpResult", "JacobianResult"]

_COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))


def _real_dtype(dtype):
    """The dtype of a value whose derivatives have ``dtype`` (float32 for complex64)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32 if dtype in (np.float32, np.complex64) else np.float64) \
        if dtype.kind == "c" else dtype


def _given_dtype(dtype, cls):
    """``dtype`` as a numpy dtype; an array (or container) there is a second
    prototype given where one tuple of them was meant."""
    if isinstance(dtype, (list, tuple, dict)) or is_array(dtype):
        several = "" if cls in ("HessianResult", "BatchGradientResult") else (
            f". For several differentiated arguments (argnums=(0, 1)) pass one tuple of "
            f"prototypes: {cls}((x, A))")
        raise TypeError(f"{cls}(x, dtype): dtype must be a dtype; got {type(dtype).__name__}"
                        f"{several}")
    return np.dtype(dtype)


def _complex_dtype(dtype):
    """The complex dtype of ``dtype``'s precision (complex64 for float32)."""
    return np.dtype(np.complex64 if np.dtype(dtype) in (np.float32, np.complex64)
                    else np.complex128)


def _zeros_like_tree(proto, name):
    if is_array(proto) or np.isscalar(proto) or number_array(proto) is not None:
        xp = array_module(proto)  # buffers live where x does (device arrays for cupy)
        arr = proto if is_array(proto) else np.asarray(proto)
        if not is_array(proto) and arr.dtype.kind in "biu":
            arr = arr.astype(np.float64)  # as the differentiated argument is converted
        if arr.dtype.kind != "f" and arr.dtype not in _COMPLEX:
            raise TypeError(f"{name} must be a floating-point or complex array (or a tuple, "
                            f"list or dict of them); got dtype {arr.dtype}")
        return xp.zeros(arr.shape, arr.dtype)  # complex x: du/dx - 1j du/dy, x's dtype
    if type(proto) in (tuple, list):
        return type(proto)(_zeros_like_tree(p, f"{name}[{i}]") for i, p in enumerate(proto))
    if is_namedtuple(proto):
        return type(proto)(*(_zeros_like_tree(p, f"{name}[{i}]") for i, p in enumerate(proto)))
    if type(proto) is dict:
        return {k: _zeros_like_tree(v, f"{name}[{k!r}]") for k, v in proto.items()}
    names = dataclass_fields(proto)
    if names is not None:
        return make_dataclass(type(proto), names, [_zeros_like_tree(getattr(proto, k),
                                                                    f"{name}.{k}")
                                                   for k in names])
    raise TypeError(f"{name} must be an array or a tuple/list/dict of arrays; got "
                    f"{type(proto).__name__}")


class DiffResult:
    """Caller-made storage for a value and its derivatives.

    Parameters
    ----------
    value : ndarray
        Buffer for the function value (0-d for scalar functions).  Written in
        place, never replaced.
    *derivs : ndarray or tuple/list/dict of ndarray
        Buffers for the derivatives, in order (first derivative first).

    Notes
    -----
    ``value`` and ``derivs`` are the very arrays you passed (references).
    """

    __slots__ = ("_derivs", "_value")

    def __init__(self, value: Any, *derivs: Any) -> None:
        if not is_array(value):
            raise TypeError("DiffResult: value must be an ndarray (use np.zeros(()) for a "
                            f"scalar value); got {type(value).__name__}")
        self._value = value
        self._derivs = derivs

    @property
    def value(self) -> Any:
        """The value buffer (a reference; for scalar functions a 0-d array --
        ``float(res.value)`` gives a Python float)."""
        return self._value

    @property
    def derivs(self) -> tuple[Any, ...]:
        """Tuple of the derivative buffers (references)."""
        return self._derivs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self._value!r}, derivs={self._derivs!r})"


class GradientResult(DiffResult):
    """Preallocated value and gradient of a scalar function.

    Parameters
    ----------
    x : ndarray or tuple/list/dict of ndarray
        Prototype: only its structure, shapes and dtypes are used (its values
        are never read or kept).  For several differentiated arguments
        (``argnums=(0, 1)``) pass a tuple of prototypes, one per argument.
    dtype : dtype, optional
        dtype of the value buffer (default: the first gradient leaf's dtype).

    Attributes
    ----------
    value : ndarray, shape ()
        The function value, written in place (0-d so that writing allocates
        nothing).
    gradient : ndarray or tuple/list/dict of ndarray
        Same structure, shapes and dtypes as ``x``; overwritten by each call.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> res = ha.GradientResult(x)
    >>> _ = ha.gradient(lambda x: np.sum(x ** 2), x, out=res)
    >>> float(res.value), res.gradient
    (5.0, array([2., 4.]))
    """

    __slots__ = ()

    def __init__(self, x: Pytree, dtype: npt.DTypeLike | None = None) -> None:
        grad = _zeros_like_tree(x, "x")
        leaves, _ = flatten(grad)
        dtype = _given_dtype(dtype, type(self).__name__) if dtype is not None else (
            _real_dtype(leaves[0].dtype) if leaves else np.dtype(np.float64))
        super().__init__(array_module(*leaves).zeros((), dtype), grad)

    @property
    def gradient(self) -> Pytree:
        """The gradient buffer(s), shaped like ``x`` (a reference)."""
        return self._derivs[0]


class HvpResult(GradientResult):
    """Preallocated value, gradient and Hessian-vector product of a scalar function.

    Parameters
    ----------
    x : ndarray or tuple/list/dict of ndarray
        Prototype of the differentiated argument(s), as for :class:`GradientResult`.
    dtype : dtype, optional
        dtype of the value buffer (default: the first leaf's dtype).

    Attributes
    ----------
    value : ndarray, shape ()
    gradient : ndarray or tuple/list/dict of ndarray
        Shaped like ``x``.
    hvp : ndarray or tuple/list/dict of ndarray
        ``H v``, shaped like ``x``.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    >>> res = ha.hvp(lambda x: np.sum(x ** 3), x, v, out=ha.HvpResult(x))
    >>> res.hvp
    array([6., 0.])
    """

    __slots__ = ()

    def __init__(self, x: Pytree, dtype: npt.DTypeLike | None = None) -> None:
        super().__init__(x, dtype)
        self._derivs += (_zeros_like_tree(x, "x"),)

    @property
    def hvp(self) -> Pytree:
        """The Hessian-vector product buffer(s), shaped like ``x`` (a reference)."""
        return self._derivs[1]


def _float_array(proto, name):
    arr = proto if is_array(proto) else np.asarray(proto)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array; got dtype {arr.dtype}")
    return arr


def _numeric_array(proto, name):
    """A floating-point or complex (complex64/complex128) prototype."""
    arr = proto if is_array(proto) else np.asarray(proto)
    if arr.dtype.kind != "f" and arr.dtype not in _COMPLEX:
        raise TypeError(f"{name} must be a floating-point or complex array; got dtype "
                        f"{arr.dtype}")
    return arr


class HessianResult(GradientResult):
    """Preallocated value, gradient and Hessian of a scalar function of one array.

    Parameters
    ----------
    x : ndarray
        Prototype of the differentiated argument (shape and dtype only).
    dtype : dtype, optional
        dtype of the value buffer (default ``x.dtype``; its real dtype for a
        complex ``x``).

    Attributes
    ----------
    value : ndarray, shape ()
    gradient : ndarray
        Shaped like ``x`` (complex for a complex ``x``: ``du/dx - 1j du/dy``).
    hessian : ndarray, shape (x.size, x.size)
        ``H[i, j] = d^2 f / dx_i dx_j`` over ``x`` flattened in C order.  For a
        complex ``x`` the real Hessian over ``(x.real, x.imag)``, shape
        ``(2 * x.size, 2 * x.size)`` (see :func:`hybridad.hessian`).

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> res = ha.hessian(lambda x: x[0] ** 2 * x[1], x, out=ha.HessianResult(x))
    >>> res.hessian
    array([[4., 2.],
           [2., 0.]])
    """

    __slots__ = ()

    def __init__(self, x: Pytree, dtype: npt.DTypeLike | None = None) -> None:
        x = _numeric_array(x, "x")
        super().__init__(x, dtype)
        n = x.size * (2 if x.dtype.kind == "c" else 1)  # complex: over (x.real, x.imag)
        self._derivs += (array_module(x).zeros((n, n), _real_dtype(x.dtype)),)

    @property
    def hessian(self) -> Any:
        """The Hessian buffer, ``(x.size, x.size)`` (a reference)."""
        return self._derivs[1]


class JacobianResult(DiffResult):
    """Preallocated value and Jacobian of a function from one array to an array.

    Parameters
    ----------
    y : ndarray
        Prototype of the function's value (shape and dtype only; complex for a
        function returning complex values).
    x : ndarray
        Prototype of the differentiated argument (real or complex).

    Attributes
    ----------
    value : ndarray
        Shaped and typed like ``y``.
    jacobian : ndarray, shape (y.size, x.size)
        ``J[i, j] = d y_i / d x_j`` over ``y`` and ``x`` flattened in C order;
        complex (of ``y``'s precision) when ``y`` or ``x`` is complex (see
        :func:`hybridad.jacobian` for what it holds then).

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> res = ha.jacobian(lambda x: x * x[0], x, out=ha.JacobianResult(x, x))
    >>> res.jacobian
    array([[2., 0.],
           [2., 1.]])
    """

    __slots__ = ()

    def __init__(self, y: Any, x: Any) -> None:
        y, x = _numeric_array(y, "y"), _numeric_array(x, "x")
        xp = array_module(y, x)
        jdt = _complex_dtype(y.dtype) if "c" in (y.dtype.kind, x.dtype.kind) else y.dtype
        super().__init__(xp.zeros(y.shape, y.dtype), xp.zeros((y.size, x.size), jdt))

    @property
    def jacobian(self) -> Any:
        """The Jacobian buffer, ``(y.size, x.size)`` (a reference)."""
        return self._derivs[0]


class BatchGradientResult(DiffResult):
    """Preallocated values and gradients of a scalar function at ``B`` points
    (what :meth:`hybridad.plans.plan.Plan.gradient_batch` fills).

    Parameters
    ----------
    X : ndarray, shape (B, *x.shape)
        Prototype of the stacked points (shape and dtype only).
    dtype : dtype, optional
        dtype of the values (default: ``X``'s).

    Attributes
    ----------
    value : ndarray, shape (B,)
        ``f`` at each point, overwritten by each call (also ``values``).
    gradient : ndarray, shape (B, *x.shape)
        The gradient at each point, overwritten by each call.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> plan = ha.compile(lambda x: np.sum(x ** 2), np.zeros(2))
    >>> res = plan.gradient_batch(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> res.value, res.gradient
    (array([ 5., 25.]), array([[2., 4.],
           [6., 8.]]))
    """

    __slots__ = ()

    def __init__(self, X: Any, dtype: npt.DTypeLike | None = None) -> None:
        X = _float_array(X, "X")
        if X.ndim < 1:
            raise ValueError("X must have a leading batch axis: shape (B, *x.shape)")
        xp = array_module(X)
        super().__init__(xp.zeros(X.shape[0], _given_dtype(dtype, "BatchGradientResult")
                                  if dtype is not None else X.dtype),
                         xp.zeros(X.shape, X.dtype))

    @property
    def values(self) -> Any:
        """The values buffer, ``(B,)`` (a reference; the same as :attr:`value`)."""
        return self._value

    @property
    def gradient(self) -> Pytree:
        """The gradients buffer, shaped like ``X`` (a reference)."""
        return self._derivs[0]
