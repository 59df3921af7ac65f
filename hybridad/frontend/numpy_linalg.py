"""``numpy.linalg`` while tracing: solve, inv, det, slogdet, cholesky, eigh,
eigvalsh (the LAPACK primitives of :mod:`hybridad.ops.linalg`), svd, svdvals,
pinv, eig, eigvals, qr, lstsq, matrix_power, the matrix norms 2, -2 and 'nuc'
(:mod:`hybridad.ops.linalg_spectral`, :mod:`hybridad.ops.linalg_factor`).

Stacks ``(..., n, n)`` are flattened to the primitives' ``(batch, n, n)`` (a
view when the layout allows, otherwise a copy into a buffer made once) and
their batch dimensions broadcast as numpy's.  As numpy.linalg does, every
input is computed in float64 (integers and float32 are cast) and the results
are cast to the result type: float32 when every operand is float32, else
float64.  Errors are numpy's (``LinAlgError``).
"""

from __future__ import annotations

import collections
import numbers
import operator
import warnings

import numpy as np

from ..ops.linalg_factor import qr_parts
from ..ops.linalg_spectral import svd_parts
from .numpy_api import (
    HANDLED,
    _tracer,
    broadcast_to,
    concatenate,
    getitem,
    implements,
    moveaxis,
    reshape,
)
from ..core.trace import bind

__all__ = []

_linalg = getattr(np.linalg, "_linalg", None)
SlogdetResult = getattr(_linalg, "SlogdetResult", None) or \
    collections.namedtuple("SlogdetResult", "sign logabsdet")
EighResult = getattr(_linalg, "EighResult", None) or \
    collections.namedtuple("EighResult", "eigenvalues eigenvectors")
EigResult = getattr(_linalg, "EigResult", None) or \
    collections.namedtuple("EigResult", "eigenvalues eigenvectors")
SVDResult = getattr(_linalg, "SVDResult", None) or \
    collections.namedtuple("SVDResult", "U S Vh")
QRResult = getattr(_linalg, "QRResult", None) or collections.namedtuple("QRResult", "Q R")


def _operands(*arrays, single=False):
    """The operands as float64 tracers, and numpy's result dtype (float32 when
    all are float32, else float64; numpy's TypeError for other types).

    With ``single`` (scipy.linalg's rule for the LAPACK routines it calls in
    single precision), operands that are all float32 stay float32: the
    computation is float32's.
    """
    arrays = [_tracer(a) for a in arrays]
    for a in arrays:
        if a.dtype.kind not in "biuf" or a.dtype.kind == "f" and \
                a.dtype not in (np.float32, np.float64):
            raise TypeError(f"array type {a.dtype} is unsupported in linalg while tracing "
                            "(integers, float32 and float64 are)")
    dtype = np.dtype(np.float32 if all(a.dtype == np.float32 for a in arrays) else np.float64)
    compute = dtype if single else np.dtype(np.float64)
    return [a.astype(compute) if a.dtype != compute else a for a in arrays], dtype


def _result(x, dtype):
    return x.astype(dtype) if x.dtype != dtype else x


def _square(a):
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")


def _stacked_2d(a):
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")


def _refuse(name, why):
    raise NotImplementedError(f"hybridad: numpy.linalg.{name} {why}")


def _stack(a, batch):
    """``a`` broadcast to ``batch`` and flattened to (batch size, *matrix)."""
    a = broadcast_to(a, batch + a.shape[-2:]) if a.shape[:-2] != batch else a
    return reshape(a, (int(np.prod(batch, dtype=np.int64)),) + a.shape[-2:])


def _unary(name, a, **attrs):
    """The primitive ``name`` on the stack ``a`` (float64), its batch shape,
    and the result dtype."""
    (a,), dtype = _operands(a)
    _square(a)
    return bind(name, _stack(a, a.shape[:-2]), **attrs), a.shape[:-2], dtype


@implements(np.linalg.solve)
def solve(a, b):
    """``x`` with ``a @ x = b``; ``b`` is a vector only when it is 1-D (numpy 2)."""
    (a, b), dtype = _operands(a, b)
    _square(a)
    n = a.shape[-1]
    vector = b.ndim == 1
    if b.ndim < 1 or b.shape[-1 if vector else -2] != n:
        raise ValueError(f"solve: b of shape {b.shape} does not match a of shape {a.shape}")
    if vector:
        b = reshape(b, (n, 1))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = bind("solve", _stack(a, batch), _stack(b, batch))
    x = reshape(x, batch + b.shape[-2:])
    return _result(getitem(x, (Ellipsis, 0)) if vector else x, dtype)


@implements(np.linalg.inv)
def inv(a):
    x, batch, dtype = _unary("inv", a)
    return _result(reshape(x, batch + x.shape[-2:]), dtype)


@implements(np.linalg.det)
def det(a):
    """``sign * exp(log|det|)``, as numpy computes it."""
    d, batch, dtype = _unary("det", a)
    return _result(reshape(d, batch), dtype)


@implements(np.linalg.slogdet)
def slogdet(a):
    p, batch, dtype = _unary("slogdet", a)
    return SlogdetResult(_result(reshape(getitem(p, (slice(None), 0)), batch), dtype),
                         _result(reshape(getitem(p, (slice(None), 1)), batch), dtype))


@implements(np.linalg.cholesky)
def cholesky(a, /, *, upper=False):
    """Lower factor from the lower triangle; ``upper=True``: the upper factor
    from the upper triangle (LAPACK potrf with that triangle, as numpy)."""
    x, batch, dtype = _unary("cholesky", a, upper=bool(upper))
    return _result(reshape(x, batch + x.shape[-2:]), dtype)


def _uplo(uplo):
    if uplo not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    return uplo


@implements(np.linalg.eigh)
def eigh(a, UPLO="L"):  # noqa: N803 - numpy's name
    """Eigenvalues (ascending) and eigenvectors of the symmetric matrix the
    triangle ``UPLO`` stands for (the other one is not read)."""
    p, batch, dtype = _unary("eigh", a, uplo=_uplo(UPLO))
    n = p.shape[-1]
    return EighResult(
        _result(reshape(getitem(p, (slice(None), 0)), batch + (n,)), dtype),
        _result(reshape(getitem(p, (slice(None), slice(1, None))), batch + (n, n)), dtype))


@implements(np.linalg.eigvalsh)
def eigvalsh(a, UPLO="L"):  # noqa: N803 - numpy's name
    """Eigenvalues as numpy.linalg.eigvalsh computes them (syevd without
    eigenvectors: to rounding not eigh's values)."""
    w, batch, dtype = _unary("eigvalsh", a, uplo=_uplo(UPLO))
    return _result(reshape(w, batch + w.shape[-1:]), dtype)


# ----------------------------------------------------------------------------
# the SVD family
# ----------------------------------------------------------------------------


def _matrices(a):
    """``a`` (..., m, n) as float64 primitive operands: the stack, its batch
    shape, the matrix shape and the result dtype."""
    (a,), dtype = _operands(a)
    _stacked_2d(a)
    return _stack(a, a.shape[:-2]), a.shape[:-2], a.shape[-2:], dtype


@implements(np.linalg.svd)
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """gesdd as numpy calls it (jobz 'A', 'S' or 'N'): numpy's values and signs.
    With ``full_matrices`` and m != n, the columns of u (rows of vh) beyond
    min(m, n) are values without a derivative (any basis of the complement):
    differentiating through them raises."""
    if hermitian:
        _refuse("svd", "with hermitian=True is not supported (it sorts by traced values); "
                "use hermitian=False")
    x, batch, (m, n), dtype = _matrices(a)
    k = min(m, n)
    if not compute_uv:
        return _result(reshape(bind("svd", x, jobz="N"), batch + (k,)), dtype)
    s, u, vt = svd_parts(bind("svd", x, jobz="A" if full_matrices else "S"), m, n)
    if full_matrices and m != n:
        rest = bind("svd", x, jobz="A", complement=True)
        u, vt = (concatenate([u, rest], axis=2), vt) if m > n else \
            (u, concatenate([vt, rest], axis=1))
    return SVDResult(_result(reshape(u, batch + u.shape[1:]), dtype),
                     _result(reshape(s, batch + (k,)), dtype),
                     _result(reshape(vt, batch + vt.shape[1:]), dtype))


if hasattr(np.linalg, "svdvals"):
    @implements(np.linalg.svdvals)
    def svdvals(x, /):
        """The singular values, as ``svd(x, compute_uv=False)``."""
        return svd(x, compute_uv=False)


_NOVALUE = getattr(np, "_NoValue", None)


@implements(np.linalg.pinv)
def pinv(a, rcond=None, hermitian=False, *, rtol=_NOVALUE):
    """numpy's pseudo-inverse (gesdd; singular values at most ``rcond * max(s)``
    dropped); its derivative is the pseudo-inverse's at constant rank (smooth
    at repeated singular values)."""
    if hermitian:
        _refuse("pinv", "with hermitian=True is not supported; use hermitian=False")
    if rcond is None:
        rcond = 1e-15 if rtol is _NOVALUE else rtol
    elif rtol is not _NOVALUE:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    x, batch, (m, n), dtype = _matrices(a)
    if rcond is None:  # rtol=None
        rcond = max(m, n) * np.finfo(np.float64 if dtype == np.float64 else np.float32).eps
    if not isinstance(rcond, numbers.Real) or np.ndim(rcond):
        _refuse("pinv", "with an array or traced rcond is not supported (a constant scalar is)")
    return _result(reshape(bind("pinv", x, rcond=float(rcond)), batch + (n, m)), dtype)


@implements(np.linalg.eig)
def eig(a):
    """geev as numpy calls it, for matrices with a real spectrum (numpy returns
    real arrays then): a complex eigenvalue raises ``NotImplementedError``
    when the plan runs.  The derivative assumes distinct eigenvalues."""
    p, batch, dtype = _unary("eig", a, vectors=True)
    n = p.shape[-1]
    return EigResult(
        _result(reshape(getitem(p, (slice(None), 0)), batch + (n,)), dtype),
        _result(reshape(getitem(p, (slice(None), slice(1, None))), batch + (n, n)), dtype))


@implements(np.linalg.eigvals)
def eigvals(a):
    """geev without eigenvectors, for a real spectrum (see :func:`eig`)."""
    w, batch, dtype = _unary("eig", a, vectors=False)
    return _result(reshape(w, batch + w.shape[-1:]), dtype)


@implements(np.linalg.qr)
def qr(a, mode="reduced"):
    """geqrf + orgqr as numpy calls them; modes 'reduced', 'complete' and 'r'.
    The derivative needs R invertible (full rank); the columns of a complete
    Q beyond n (m > n) have none (any basis of the complement)."""
    if mode in ("f", "full"):
        warnings.warn("The 'full' option is deprecated in favor of 'reduced'.\nFor backward "
                      "compatibility let mode default.", DeprecationWarning, stacklevel=3)
        mode = "reduced"
    if mode in ("raw", "e", "economic"):
        _refuse("qr", f"with mode={mode!r} (LAPACK's Householder reflectors) is not "
                "supported; use 'reduced', 'complete' or 'r'")
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"Unrecognized mode '{mode}'")
    x, batch, (m, n), dtype = _matrices(a)
    k = min(m, n)
    if mode == "r":
        return _result(reshape(bind("qr", x, mode="r"), batch + (k, n)), dtype)
    complete = mode == "complete" and m > n
    q, r = qr_parts(bind("qr", x, mode=mode if complete else "reduced"), m, n)
    if complete:
        q = concatenate([q, bind("qr", x, mode="complete", complement=True)], axis=2)
        r = concatenate([r, np.zeros((r.shape[0], m - n, n))], axis=1)
    return QRResult(_result(reshape(q, batch + q.shape[1:]), dtype),
                    _result(reshape(r, batch + r.shape[1:]), dtype))


@implements(np.linalg.lstsq)
def lstsq(a, b, rcond=None):
    """``(x, residuals, rank, s)`` as numpy (gelsd's minimum-norm solution):
    ``x = pinv(a, rcond) @ b`` (numpy's values to rounding, rank-deficient
    matrices included; derivative at constant rank), ``s`` gesdd's singular
    values, ``rank`` their count above ``rcond * max(s)`` (a traced int32).
    ``residuals`` (m > n) is ``sum((b - a x)**2)`` per column; where numpy
    would return an empty array because the rank is below n, the plan raises
    ``NotImplementedError`` when it runs (only if ``residuals`` is used)."""
    (a, b), dtype = _operands(a, b)
    vector = b.ndim == 1
    b2 = reshape(b, b.shape + (1,)) if vector else b
    if a.ndim != 2 or b2.ndim != 2:
        raise np.linalg.LinAlgError(f"{max(a.ndim, b2.ndim)}-dimensional array given. Array "
                                    "must be two-dimensional")
    (m, n), k = a.shape, min(a.shape)
    if b2.shape[0] != m:
        raise np.linalg.LinAlgError("Incompatible dimensions")
    if rcond is None:
        rcond = np.finfo(np.float64).eps * max(n, m)
    if not isinstance(rcond, numbers.Real) or np.ndim(rcond):
        _refuse("lstsq", "with an array or traced rcond is not supported (a constant scalar is)")
    rcond = float(rcond) if rcond >= 0 else float(np.finfo(np.float64).eps)
    x3 = reshape(a, (1, m, n))
    x = np.matmul(reshape(bind("pinv", x3, rcond=rcond), (n, m)), b2)
    s = reshape(bind("svd", x3, jobz="N"), (k,))
    rank = np.sum(s > rcond * np.max(s, initial=0.0)).astype(np.int32) if k else \
        _tracer(np.int32(0))
    if m > n:
        res = np.sum((b2 - np.matmul(a, x)) ** 2, axis=0)
        flag = reshape((rank < n).astype(np.float64), (1,))
        res = reshape(bind("refuse_if", reshape(res, (1, 1) + res.shape), flag, code=0),
                      res.shape)
    else:
        res = np.zeros((0,), np.float64)
    return (_result(reshape(x, (n,)) if vector else x, dtype), _result(_tracer(res), dtype),
            rank, _result(s, dtype))


@implements(np.linalg.matrix_power)
def matrix_power(a, n):
    """numpy's products: ``n`` = 0 the identity, n < 0 on ``inv(a)``, else the
    same binary decomposition (the same matmuls in the same order)."""
    a = _tracer(a)
    try:
        n = operator.index(n)
    except TypeError as e:
        raise TypeError("exponent must be an integer") from e
    _square(a)
    if n == 0:
        return _tracer(np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape).copy())
    if n < 0:
        a, n = inv(a), -n
    if n <= 3:
        return a if n == 1 else np.matmul(a, a) if n == 2 else np.matmul(np.matmul(a, a), a)
    z = result = None
    while n > 0:
        z = a if z is None else np.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else np.matmul(result, z)
    return result


# ----------------------------------------------------------------------------
# the matrix norms of singular values (the others: numpy_products.norm)
# ----------------------------------------------------------------------------

_OTHER_NORMS = HANDLED[np.linalg.norm]


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """numpy.linalg.norm; the matrix norms 2, -2 (largest, smallest singular
    value) and 'nuc' (their sum) from gesdd's singular values, as numpy
    (differentiable where the singular values used are distinct and, for
    'nuc', nonzero); every other order: :func:`.numpy_products.norm`."""
    x = _tracer(x)
    if isinstance(ord, str) and ord != "nuc" or ord not in (2, -2, "nuc"):
        return _OTHER_NORMS(x, ord, axis, keepdims)
    if axis is None:
        if x.ndim != 2:
            return _OTHER_NORMS(x, ord, axis, keepdims)
        axis = (0, 1)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    if len(axes) != 2:
        return _OTHER_NORMS(x, ord, axis, keepdims)
    r, c = (operator.index(a) for a in axes)
    if not (-x.ndim <= r < x.ndim and -x.ndim <= c < x.ndim):
        raise ValueError(f"Invalid axis {axis!r} for an array with shape {x.shape}")
    r, c = r % x.ndim, c % x.ndim
    if r == c:
        raise ValueError("Duplicate axes given.")
    s = svd(moveaxis(x, (r, c), (-2, -1)), compute_uv=False)
    out = np.max(s, axis=-1) if ord == 2 else np.min(s, axis=-1) if ord == -2 else \
        np.sum(s, axis=-1)
    if keepdims:
        out = reshape(out, tuple(1 if i in (r, c) else d for i, d in enumerate(x.shape)))
    return out


if hasattr(np.linalg, "matrix_norm"):
    @implements(np.linalg.matrix_norm)
    def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
        """``norm(x, ord, axis=(-2, -1), keepdims=keepdims)``."""
        return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


# --------------------------------------------------------------------------
# numpy 2's array-API spellings in np.linalg: the top-level functions on the
# last two axes (numpy's own definitions), dispatched to them again
# --------------------------------------------------------------------------

def _linalg_vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """``np.linalg.vector_norm``: the norm of ``x``'s elements along ``axis``
    (all of them for None; a tuple of axes taken as one flattened axis)."""
    nd = np.ndim(x)
    axes = tuple(range(nd)) if axis is None else \
        tuple(a % nd for a in (axis if isinstance(axis, tuple) else (axis,)))
    rest = [a for a in range(nd) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    flat = np.reshape(moved, tuple(np.shape(x)[a] for a in rest) + (-1,))
    out = np.linalg.norm(flat, ord=ord, axis=-1)
    if keepdims:
        out = np.reshape(out, tuple(1 if a in axes else np.shape(x)[a] for a in range(nd)))
    return out


_LINALG_SPELLINGS = {
    "matrix_transpose": lambda x, /: np.swapaxes(x, -1, -2),
    "outer": lambda x1, x2, /: np.outer(x1, x2),
    "tensordot": lambda x1, x2, /, *, axes=2: np.tensordot(x1, x2, axes=axes),
    "trace": lambda x, /, *, offset=0, dtype=None: np.trace(x, offset=offset, axis1=-2,
                                                            axis2=-1, dtype=dtype),
    "vecdot": lambda x1, x2, /, *, axis=-1: np.vecdot(x1, x2, axis=axis),
    "matmul": lambda x1, x2, /: np.matmul(x1, x2),
    "diagonal": lambda x, /, *, offset=0: np.diagonal(x, offset=offset, axis1=-2, axis2=-1),
    "cross": lambda x1, x2, /, *, axis=-1: np.cross(x1, x2, axis=axis),
    "vector_norm": _linalg_vector_norm,
}
for _name, _impl in _LINALG_SPELLINGS.items():
    if hasattr(np.linalg, _name):  # (numpy 2)
        implements(getattr(np.linalg, _name))(_impl)
