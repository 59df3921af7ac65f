"""``numpy.linalg`` while tracing: solve, inv, det, slogdet, cholesky, eigh,
eigvalsh, on the LAPACK primitives of :mod:`hybridad.ops.linalg`.

Stacks ``(..., n, n)`` are flattened to the primitives' ``(batch, n, n)`` (a
view when the layout allows, otherwise a copy into a buffer made once) and
their batch dimensions broadcast as numpy's; integer input computes in
float64, float32 stays float32; errors are numpy's (``LinAlgError``).
"""

from __future__ import annotations

import collections

import numpy as np

from .numpy_api import _tracer, broadcast_to, getitem, implements, reshape, swapaxes
from .trace import bind

__all__ = []

_linalg = getattr(np.linalg, "_linalg", None)
SlogdetResult = getattr(_linalg, "SlogdetResult", None) or \
    collections.namedtuple("SlogdetResult", "sign logabsdet")
EighResult = getattr(_linalg, "EighResult", None) or \
    collections.namedtuple("EighResult", "eigenvalues eigenvectors")


def _float(a):
    a = _tracer(a)
    if a.dtype.kind in "biu":
        return a.astype(np.float64)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"array type {a.dtype} is unsupported in linalg while tracing "
                        "(float32 and float64 are)")
    return a


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


def _unary(name, a):
    a = _float(a)
    _square(a)
    return bind(name, _stack(a, a.shape[:-2])), a.shape[:-2]


@implements(np.linalg.solve)
def solve(a, b):
    """``x`` with ``a @ x = b``; ``b`` is a vector only when it is 1-D (numpy 2)."""
    a, b = _float(a), _float(b)
    _square(a)
    dt = np.result_type(a.dtype, b.dtype)
    a, b = a.astype(dt), b.astype(dt)
    n = a.shape[-1]
    vector = b.ndim == 1
    if b.ndim < 1 or b.shape[-1 if vector else -2] != n:
        raise ValueError(f"solve: b of shape {b.shape} does not match a of shape {a.shape}")
    if vector:
        b = reshape(b, (n, 1))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = bind("solve", _stack(a, batch), _stack(b, batch))
    x = reshape(x, batch + b.shape[-2:])
    return getitem(x, (Ellipsis, 0)) if vector else x


@implements(np.linalg.inv)
def inv(a):
    x, batch = _unary("inv", a)
    return reshape(x, batch + x.shape[-2:])


@implements(np.linalg.det)
def det(a):
    d, batch = _unary("det", a)
    return reshape(d, batch)


@implements(np.linalg.slogdet)
def slogdet(a):
    p, batch = _unary("slogdet", a)
    return SlogdetResult(reshape(getitem(p, (slice(None), 0)), batch),
                         reshape(getitem(p, (slice(None), 1)), batch))


@implements(np.linalg.cholesky)
def cholesky(a, /, *, upper=False):
    """Lower factor from the lower triangle; ``upper=True``: the upper factor
    from the upper triangle (the lower one of the transpose, transposed)."""
    a = _tracer(a)
    if upper:
        return swapaxes(cholesky(swapaxes(a, -1, -2)), -1, -2)
    x, batch = _unary("cholesky", a)
    return reshape(x, batch + x.shape[-2:])


@implements(np.linalg.eigh)
def eigh(a, UPLO="L"):  # noqa: N803 - numpy's name
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix, from the
    triangle ``UPLO`` names."""
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    a = _tracer(a)
    if UPLO == "U":
        a = swapaxes(a, -1, -2)
    p, batch = _unary("eigh", a)
    n = p.shape[-1]
    return EighResult(reshape(getitem(p, (slice(None), 0)), batch + (n,)),
                      reshape(getitem(p, (slice(None), slice(1, None))), batch + (n, n)))


@implements(np.linalg.eigvalsh)
def eigvalsh(a, UPLO="L"):  # noqa: N803 - numpy's name
    return eigh(a, UPLO).eigenvalues
