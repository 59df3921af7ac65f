"""Complex values on tracers, as pairs of real ones.

A complex traced value is a :class:`ComplexTracer`: its real and imaginary
parts, each a real tracer (or a constant).  Every complex operation is
written as real operations on the parts -- ``(a + ib)(c + id) = (ac - bd) +
i(ad + bc)``, ``exp(a + ib) = e^a (cos b + i sin b)`` -- so the IR, the
derivative rules and every backend stay real: fused kernels, zero
allocations and exact derivatives come from the real machinery unchanged.
A real loss of complex intermediates (``np.abs(np.fft.rfft(x)) ** 2``) is
differentiated like any real function.

The convention for the gradient with respect to a complex *argument* (see
:mod:`hybridad.plans.complex_args`) is autograd's and JAX's: ``du/dx - i du/dy``
for ``u = real(f)`` and ``z = x + iy`` -- the complex derivative where ``f`` is
holomorphic.

Complex values enter through complex constants (a Python ``1j``, a complex
array the function captures), complex arguments and :mod:`.numpy_fft`; the
surface here is the arithmetic, the elementary functions, ``real``/``imag``/
``conj``/``angle``/``abs``, reductions, shapes and products, and numpy's
lexicographic order (``maximum``/``minimum``/``fmax``/``fmin``, ``max``/``min``,
``argmax``/``argmin``: :mod:`.numpy_complex_order`).  Other numpy functions on
complex values raise ``NotImplementedError`` naming them.
"""

from __future__ import annotations

import numpy as np

from ..errors import TracingError, user_location
from . import numpy_complex_order as _order
from ..core.tracer import SURFACE, Tracer, _binary

__all__ = ["ComplexArrayError", "ComplexTracer", "as_complex", "involves_complex",
           "is_complex_constant"]


class ComplexArrayError(TracingError):
    """A traced complex value was converted to a numpy array (a real-valued
    consumer got it: ``np.asarray``, a plan expecting a real output)."""


def is_complex_constant(v):
    """Whether ``v`` is a complex number or array (not a tracer)."""
    return isinstance(v, complex | np.complexfloating) or \
        (isinstance(v, np.ndarray) and v.dtype.kind == "c")


def involves_complex(values):
    """Whether ``values`` (one level of lists/tuples too) hold a complex value."""
    for v in values:
        if type(v) is Tracer:  # (a real traced value: the common case)
            continue
        if isinstance(v, ComplexTracer) or is_complex_constant(v):
            return True
        if isinstance(v, list | tuple) and involves_complex(v):
            return True
    return False


def as_complex(v):
    """``v`` as a :class:`ComplexTracer` (real values get a zero imaginary part)."""
    if isinstance(v, ComplexTracer):
        return v
    if type(v) in (complex, float, int):  # a Python number: its parts stay Python numbers
        v = complex(v)  # (weak, as numpy 2 promotes them: x32 * 1j is complex64)
        return ComplexTracer(v.real, v.imag)
    if is_complex_constant(v):
        v = np.asarray(v)
        return ComplexTracer(np.ascontiguousarray(v.real), np.ascontiguousarray(v.imag))
    if isinstance(v, Tracer):
        return ComplexTracer(v, 0.0)
    v = np.asarray(v, dtype=np.float64) if not isinstance(v, np.ndarray) or \
        v.dtype.kind != "f" else v
    return ComplexTracer(v, 0.0)


class ComplexTracer:
    """A complex traced value: ``real + 1j * imag`` (each real: a tracer or a constant)."""

    __array_priority__ = 1001

    def __init__(self, real, imag):
        self.re, self.im = real, imag

    # -- what it is -----------------------------------------------------------
    @property
    def shape(self):
        return np.broadcast_shapes(np.shape(self.re), np.shape(self.im))

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def real_dtype(self):
        """The dtype of the value's parts: float32 for complex64, else float64."""
        return np.dtype(np.float32 if self.dtype == np.complex64 else np.float64)

    @property
    def dtype(self):
        dts = [p.dtype for p in (self.re, self.im) if hasattr(p, "dtype") and np.ndim(p)] or \
            [getattr(p, "dtype", np.dtype(np.float64)) for p in (self.re, self.im)]
        real = np.result_type(*dts)
        return np.dtype(np.complex64 if real == np.float32 else np.complex128)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"ComplexTracer(shape={self.shape}, dtype={self.dtype})"

    def full(self):
        """The parts broadcast to the value's shape (a Python number in the
        value's real dtype: a float32 value's zero imaginary part is float32)."""
        shape, z = self.shape, _typed(self)
        return tuple(np.broadcast_to(p, shape) if np.shape(p) != shape else p
                     for p in (z.re, z.im))

    @property
    def real(self):
        return self.full()[0]

    @property
    def imag(self):
        return self.full()[1]

    @property
    def T(self):
        return np.transpose(self)

    def conj(self):
        return ComplexTracer(self.re, self.im if _zero(self.im) else -self.im)

    conjugate = conj

    def __array__(self, dtype=None, copy=None):
        raise ComplexArrayError(f"a complex traced value was converted to a numpy array at "
                           f"{user_location()}; build arrays with np.stack/np.concatenate")

    def __bool__(self):
        raise TracingError(f"the truth value of a traced complex value at {user_location()}")

    # -- numpy protocols --------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return complex_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return complex_function(func, args, kwargs)

    def __getitem__(self, index):
        re, im = self.full()
        return ComplexTracer(re[index], im[index])

    def reshape(self, *shape, **kw):
        return np.reshape(self, shape[0] if len(shape) == 1 else shape, **kw)

    def transpose(self, *axes):
        return np.transpose(self, axes or None)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        """A complex dtype: the parts cast to its precision; a real one: the real
        part (numpy discards the imaginary part, with a ComplexWarning)."""
        dtype = np.dtype(dtype)
        if dtype.kind != "c":
            import warnings

            warnings.warn("Casting complex values to real discards the imaginary part",
                          np.exceptions.ComplexWarning, stacklevel=2)
            return self.real.astype(dtype)
        real = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        return ComplexTracer(*(np.asarray(p).astype(real) for p in self.full()))

    def flatten(self, order="C"):
        return np.ravel(self, order)

    def copy(self, order="K"):
        return ComplexTracer(self.re, self.im)

    def __neg__(self):
        return ComplexTracer(-self.re, -self.im)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.absolute(self)


def _method(func):
    def method(self, *a, **kw):
        return func(self, *a, **kw)
    method.__name__ = func.__name__
    return method


# the array methods that are numpy's functions of the value
for _func in (np.sum, np.mean, np.max, np.min, np.argmax, np.argmin, np.ravel, np.squeeze,
              np.swapaxes, np.cumsum, np.prod, np.var, np.dot, np.trace, np.diagonal, np.take):
    setattr(ComplexTracer, _func.__name__, _method(_func))

for _name, _uf in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("pow", np.power), ("matmul", np.matmul)):
    setattr(ComplexTracer, f"__{_name}__", _binary(_uf))
    setattr(ComplexTracer, f"__r{_name}__", _binary(_uf, reflected=True))


# --------------------------------------------------------------------------
# ufuncs
# --------------------------------------------------------------------------
def _zero(x):
    """Whether ``x`` is a constant zero (a real value's imaginary part)."""
    return not isinstance(x, Tracer) and not np.any(x)


def _times(x, y):
    return 0.0 if _zero(x) or _zero(y) else x * y


def _plus(x, y, sign=1):
    if _zero(y):
        return x
    if _zero(x):
        return y if sign > 0 else -y
    return x + y if sign > 0 else x - y


def _mul(a, b):
    return ComplexTracer(_plus(_times(a.re, b.re), _times(a.im, b.im), -1),
                         _plus(_times(a.re, b.im), _times(a.im, b.re)))


def _div(a, b):
    if _zero(b.im):
        return ComplexTracer(a.re / b.re, 0.0 if _zero(a.im) else a.im / b.re)
    d = b.re * b.re + b.im * b.im
    return ComplexTracer(_plus(_times(a.re, b.re), _times(a.im, b.im)) / d,
                         _plus(_times(a.im, b.re), _times(a.re, b.im), -1) / d)


def _exp(z):
    e = np.exp(z.re)
    return ComplexTracer(e * np.cos(z.im), e * np.sin(z.im))


def _log(z):
    return ComplexTracer(np.log(np.hypot(z.re, z.im)), np.arctan2(z.im, z.re))


def _sqrt(z):
    """numpy's principal branch (the sign of the imaginary part, zero too, picks
    the side of the cut), in the stable form: ``t = sqrt((|z| + |a|) / 2)`` is
    never 0 away from z = 0, so neither part divides by zero on the negative axis."""
    a, b = z.full()
    t = np.sqrt(0.5 * (np.hypot(a, b) + np.abs(a)))
    other = np.abs(b) / (2 * t) if not _zero(b) else 0.0 * t
    re = np.where(a >= 0, t, other)
    im = np.where(a >= 0, b / (2 * t) if not _zero(b) else 0.0 * t, np.copysign(t, b))
    return ComplexTracer(re, im)


def _power(z, w):
    if not isinstance(w, ComplexTracer) or isinstance(w.im, np.ndarray | float | int) and \
            not np.any(w.im) and not isinstance(w.re, Tracer):
        n = np.asarray(w.re if isinstance(w, ComplexTracer) else w)
        if n.ndim == 0 and float(n) == int(n) and abs(int(n)) <= 8:  # exact, by products
            k, out = abs(int(n)), ComplexTracer(np.ones((), z.real_dtype),
                                                np.zeros((), z.real_dtype))
            for _ in range(k):
                out = _mul(out, z)
            return _div(as_complex(1.0), out) if int(n) < 0 else out
    return _exp(_mul(as_complex(w), _log(z)))


def _scaled(z, c):
    """``z`` times the real number ``c``."""
    return ComplexTracer(z.re * c, 0.0 if _zero(z.im) else z.im * c)


def _bilinear(fn):
    """A function bilinear in its two array arguments (outer, kron, tensordot,
    einsum of two operands): four real products."""
    def apply(a, b, *args, **kwargs):
        a, b = as_complex(a), as_complex(b)
        (ar, ai), (br, bi) = a.full(), b.full()

        def f(x, y, zx, zy):
            return 0.0 if zx or zy else fn(x, y, *args, **kwargs)
        za, zb = _zero(a.im), _zero(b.im)
        return ComplexTracer(_plus(f(ar, br, False, False), f(ai, bi, za, zb), -1),
                             _plus(f(ar, bi, False, zb), f(ai, br, za, False)))
    return apply


def _einsum(subscripts, *operands, **kwargs):
    if not isinstance(subscripts, str) or len(operands) != 2:
        raise NotImplementedError("hybridad: numpy.einsum of complex values takes a subscripts "
                                  "string and two operands")
    return _bilinear(lambda x, y, **kw: np.einsum(subscripts, x, y, **kw))(*operands, **kwargs)


def _prod(z, axis=None, keepdims=False):
    z = as_complex(z)
    re, im = z.full()
    if axis is None:
        re, im, axis = np.ravel(re), np.ravel(im), 0
    axis = axis % len(np.shape(re))
    n = np.shape(re)[axis]
    out = as_complex(1.0)
    for k in range(n):  # a product over a static axis, one complex multiply per element
        out = _mul(out, ComplexTracer(np.take(re, k, axis=axis), np.take(im, k, axis=axis)))
    if keepdims:
        out = ComplexTracer(*(np.expand_dims(p, axis) for p in out.full()))
    return out


def _var(z, axis=None, ddof=0, keepdims=False):
    """numpy's var of complex values: the mean of |z - mean(z)|^2 (real)."""
    z = as_complex(z)
    re, im = z.full()
    dr = re - np.mean(re, axis=axis, keepdims=True)
    di = im - np.mean(im, axis=axis, keepdims=True)
    n = np.size(dr) if axis is None else np.prod([np.shape(dr)[a] for a in np.atleast_1d(axis)])
    return np.sum(dr * dr + di * di, axis=axis, keepdims=keepdims) / (n - ddof)


def _matmul(a, b):
    def mm(x, y):
        return 0.0 if _zero(x) or _zero(y) else np.matmul(x, y)
    return ComplexTracer(_plus(mm(a.re, b.re), mm(a.im, b.im), -1),
                         _plus(mm(a.re, b.im), mm(a.im, b.re)))


_UNARY = {
    np.negative: lambda z: ComplexTracer(-z.re, -z.im),
    np.positive: lambda z: z,
    np.conjugate: lambda z: z.conj(),
    np.absolute: lambda z: np.hypot(z.re, z.im),
    np.square: lambda z: _mul(z, z),
    np.reciprocal: lambda z: _div(as_complex(1.0), z),
    np.exp: _exp,
    np.log: _log,
    np.sqrt: _sqrt,
    np.sin: lambda z: ComplexTracer(np.sin(z.re) * np.cosh(z.im), np.cos(z.re) * np.sinh(z.im)),
    np.cos: lambda z: ComplexTracer(np.cos(z.re) * np.cosh(z.im),
                                    -np.sin(z.re) * np.sinh(z.im)),
    np.sinh: lambda z: ComplexTracer(np.sinh(z.re) * np.cos(z.im), np.cosh(z.re) * np.sin(z.im)),
    np.cosh: lambda z: ComplexTracer(np.cosh(z.re) * np.cos(z.im), np.sinh(z.re) * np.sin(z.im)),
    np.tanh: lambda z: _div(_UNARY[np.sinh](z), _UNARY[np.cosh](z)),
    np.tan: lambda z: _div(_UNARY[np.sin](z), _UNARY[np.cos](z)),
    np.isfinite: lambda z: np.isfinite(z.re) & np.isfinite(z.im),
    np.exp2: lambda z: _exp(_scaled(z, float(np.log(2.0)))),  # (a Python float: weak)
    np.expm1: lambda z: _BINARY[np.subtract](_exp(z), as_complex(1.0)),
    np.log2: lambda z: _scaled(_log(z), float(1 / np.log(2.0))),
    np.log10: lambda z: _scaled(_log(z), float(1 / np.log(10.0))),
    np.log1p: lambda z: _log(_BINARY[np.add](z, as_complex(1.0))),
    # numpy's principal branches: asinh z = log(z + sqrt(z^2 + 1)), acosh z =
    # log(z + sqrt(z + 1) sqrt(z - 1)), atanh z = (log(1 + z) - log(1 - z)) / 2
    np.arcsinh: lambda z: _log(_BINARY[np.add](z, _sqrt(_BINARY[np.add](_mul(z, z),
                                                                         as_complex(1.0))))),
    np.arccosh: lambda z: _log(_BINARY[np.add](z, _mul(
        _sqrt(_BINARY[np.add](z, as_complex(1.0))),
        _sqrt(_BINARY[np.subtract](z, as_complex(1.0)))))),
    np.arctanh: lambda z: _scaled(_BINARY[np.subtract](
        _log(_BINARY[np.add](as_complex(1.0), z)),
        _log(_BINARY[np.subtract](as_complex(1.0), z))), 0.5),
}
_BINARY = {
    np.add: lambda a, b: ComplexTracer(_plus(a.re, b.re), _plus(a.im, b.im)),
    np.subtract: lambda a, b: ComplexTracer(_plus(a.re, b.re, -1), _plus(a.im, b.im, -1)),
    np.multiply: _mul,
    np.true_divide: _div,
    np.power: lambda a, b: _power(a, b),
    np.matmul: lambda a, b: _matmul(a, b),
    # numpy's lexicographic order (real parts, then imaginary), NaN propagated
    np.maximum: lambda a, b: ComplexTracer(*_order.pick(a.full(), b.full())),
    np.minimum: lambda a, b: ComplexTracer(*_order.pick(a.full(), b.full(), largest=False)),
    np.fmax: lambda a, b: ComplexTracer(*_order.pick(a.full(), b.full(), ignore_nan=True)),
    np.fmin: lambda a, b: ComplexTracer(*_order.pick(a.full(), b.full(), largest=False,
                                                     ignore_nan=True)),
}


def _typed(z):
    """``z`` with a Python-number part as a 0-d array of its real dtype: a
    function of that part (``np.exp(0.0)``) is then of the value's precision,
    as numpy's complex64 result is (a float64 scalar would promote it)."""
    if not isinstance(z.re, int | float) and not isinstance(z.im, int | float):
        return z
    return ComplexTracer(*(np.asarray(p, z.real_dtype) if isinstance(p, int | float) else p
                           for p in (z.re, z.im)))


def complex_ufunc(ufunc, method, inputs, kwargs):
    """A ufunc call with a complex operand."""
    if method != "__call__" or any(v is not None for v in kwargs.values()):
        raise NotImplementedError(f"hybridad: numpy.{ufunc.__name__}.{method} (or with "
                                  f"keywords) on complex values is not supported "
                                  f"(at {user_location()})")
    if ufunc in _UNARY and len(inputs) == 1:
        return _UNARY[ufunc](_typed(as_complex(inputs[0])))
    if ufunc is np.power and not involves_complex(inputs[1:]):
        return _power(_typed(as_complex(inputs[0])), inputs[1])
    if ufunc in _BINARY:
        return _BINARY[ufunc](*(as_complex(v) for v in inputs))
    raise NotImplementedError(f"hybridad: numpy.{ufunc.__name__} of complex values is not "
                              f"supported (at {user_location()}); see docs/limitations.md")


# --------------------------------------------------------------------------
# functions
# --------------------------------------------------------------------------
def _both(fn):
    """A function applied to the real and imaginary parts alike."""
    def apply(z, *args, **kwargs):
        re, im = as_complex(z).full()
        return ComplexTracer(fn(re, *args, **kwargs), fn(im, *args, **kwargs))
    return apply


def _joined(fn):
    """``concatenate``/``stack``-like: the parts of every operand joined."""
    def apply(seq, *args, **kwargs):
        parts = [as_complex(v).full() for v in seq]
        return ComplexTracer(fn([p[0] for p in parts], *args, **kwargs),
                             fn([p[1] for p in parts], *args, **kwargs))
    return apply


def _angle(z, deg=False):
    z = as_complex(z)
    a = np.arctan2(*np.broadcast_arrays(z.im, z.re)) if not isinstance(z.im, Tracer) and \
        not isinstance(z.re, Tracer) else np.arctan2(z.im, z.re)
    return a * (180 / np.pi) if deg else a


def _ordered(largest, arg):
    """``np.max``/``np.min`` (``arg``: ``np.argmax``/``np.argmin``) of complex values."""
    def apply(z, axis=None, out=None, keepdims=False, **kwargs):
        if out is not None or kwargs:
            raise NotImplementedError("hybridad: out=, initial= and where= of complex "
                                      f"max/min/argmax/argmin (at {user_location()})")
        parts = as_complex(z).full()
        if arg:
            return _order.argbest(*parts, axis=axis, keepdims=keepdims, largest=largest)
        return ComplexTracer(*_order.best(*parts, axis=axis, keepdims=keepdims,
                                          largest=largest))
    return apply


def _vdot(a, b):
    a, b = as_complex(a).conj(), as_complex(b)
    return np.sum(_mul(_both(np.ravel)(a), _both(np.ravel)(b)))


def _norm(x, ord=None, axis=None, keepdims=False):
    z = as_complex(x)
    matrix = (axis is None and z.ndim == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if ord in (None, "fro") or (ord == 2 and not matrix):  # smooth where an element is 0
        return np.sqrt(np.sum(z.re * z.re + z.im * z.im, axis=axis, keepdims=keepdims))
    if matrix and ord in (2, -2, "nuc"):
        raise NotImplementedError(f"hybridad: np.linalg.norm(ord={ord!r}) of complex matrices "
                                  "(singular values of a complex matrix)")
    # every other norm is numpy's of the moduli, as numpy computes it
    return np.linalg.norm(np.absolute(z), ord=ord, axis=axis, keepdims=keepdims)


_FUNCTIONS = {
    np.real: lambda z: as_complex(z).real,
    np.imag: lambda z: as_complex(z).imag,
    np.conj: lambda z: as_complex(z).conj(),
    np.angle: _angle,
    np.abs: lambda z: np.absolute(as_complex(z)),
    np.sum: _both(np.sum),
    np.mean: _both(np.mean),
    np.cumsum: _both(np.cumsum),
    np.reshape: _both(np.reshape),
    np.ravel: _both(np.ravel),
    np.transpose: _both(np.transpose),
    np.swapaxes: _both(np.swapaxes),
    np.moveaxis: _both(np.moveaxis),
    np.expand_dims: _both(np.expand_dims),
    np.squeeze: _both(np.squeeze),
    np.broadcast_to: _both(np.broadcast_to),
    np.flip: _both(np.flip),
    np.roll: _both(np.roll),
    np.take: _both(np.take),
    np.diagonal: _both(np.diagonal),
    np.trace: _both(np.trace),
    np.concatenate: _joined(np.concatenate),
    np.stack: _joined(np.stack),
    np.dot: _bilinear(np.dot),  # numpy's dot semantics for every rank (not matmul's)
    np.vdot: _vdot,
    np.linalg.norm: _norm,
    np.iscomplexobj: lambda z: True,
    np.result_type: lambda *args: np.result_type(*(getattr(a, "dtype", a) if isinstance(
        a, ComplexTracer | Tracer) else a for a in args)),
    np.isrealobj: lambda z: False,
    np.ndim: lambda z: as_complex(z).ndim,
    np.shape: lambda z: as_complex(z).shape,
    np.size: lambda z: as_complex(z).size,
    np.outer: _bilinear(np.outer),
    np.kron: _bilinear(np.kron),
    np.tensordot: _bilinear(np.tensordot),
    np.inner: _bilinear(np.inner),
    np.einsum: _einsum,
    np.prod: _prod,
    np.var: _var,
    np.max: _ordered(True, False),
    np.amax: _ordered(True, False),
    np.min: _ordered(False, False),
    np.amin: _ordered(False, False),
    np.argmax: _ordered(True, True),
    np.argmin: _ordered(False, True),
    np.std: lambda z, axis=None, ddof=0, keepdims=False: np.sqrt(_var(z, axis, ddof, keepdims)),
}


def complex_function(func, args, kwargs):
    """A numpy function call with a complex argument."""
    impl = _FUNCTIONS.get(func)
    if impl is None:
        from .numpy_api import HANDLED

        impl = HANDLED.get(func) if getattr(func, "__module__", "") == "numpy.fft" else None
    if impl is None:
        raise NotImplementedError(
            f"hybridad: {getattr(func, '__module__', 'numpy')}.{func.__name__} of complex values "
            f"is not supported (at {user_location()}); see docs/limitations.md")
    return impl(*args, **kwargs)


def _install():
    real_ufunc, real_function = SURFACE.apply_ufunc, SURFACE.apply_function

    def apply_ufunc(ufunc, method, inputs, kwargs):
        if involves_complex(inputs):
            return complex_ufunc(ufunc, method, inputs, kwargs)
        return real_ufunc(ufunc, method, inputs, kwargs)

    def apply_function(func, args, kwargs):
        if involves_complex(args) or involves_complex(kwargs.values()):
            return complex_function(func, args, kwargs)
        return real_function(func, args, kwargs)

    SURFACE.apply_ufunc, SURFACE.apply_function = apply_ufunc, apply_function


_install()
