"""``numpy.linalg`` while tracing: solve, inv, det, slogdet, cholesky, eigh,
eigvalsh, on the LAPACK primitives of :mod:`hybridad.ops.linalg`.

Stacks ``(..., n, n)`` are flattened to the primitives' ``(batch, n, n)`` (a
view when the layout allows, otherwise a copy into a buffer made once) and
their batch dimensions broadcast as numpy's.  As numpy.linalg does, every
input is computed in float64 (integers and float32 are cast) and the results
are cast to the result type: float32 when every operand is float32, else
float64.  Errors are numpy's (``LinAlgError``).
"""

from __future__ import annotations

import collections

import numpy as np

from .numpy_api import _tracer, broadcast_to, getitem, implements, reshape
from .trace import bind

__all__ = []

_linalg = getattr(np.linalg, "_linalg", None)
SlogdetResult = getattr(_linalg, "SlogdetResult", None) or \
    collections.namedtuple("SlogdetResult", "sign logabsdet")
EighResult = getattr(_linalg, "EighResult", None) or \
    collections.namedtuple("EighResult", "eigenvalues eigenvectors")


def _operands(*arrays):
    """The operands as float64 tracers, and numpy's result dtype (float32 when
    all are float32, else float64; numpy's TypeError for other types)."""
    out, single = [], True
    for a in arrays:
        a = _tracer(a)
        if a.dtype.kind not in "biuf" or a.dtype.kind == "f" and \
                a.dtype not in (np.float32, np.float64):
            raise TypeError(f"array type {a.dtype} is unsupported in linalg while tracing "
                            "(integers, float32 and float64 are)")
        single = single and a.dtype == np.float32
        out.append(a.astype(np.float64) if a.dtype != np.float64 else a)
    return out, np.dtype(np.float32 if single else np.float64)


def _result(x, dtype):
    return x.astype(dtype) if x.dtype != dtype else x


def _square(a):
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")


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
