"""scipy.linalg on tracers: solve (every ``assume_a`` but 'banded'),
solve_triangular, cholesky, cho_factor/cho_solve, lu_factor/lu_solve, eigh
(subset by index, values only), expm, block_diag, toeplitz, circulant, and
inv, det, norm (numpy's).

Registered in :data:`.scipy_special.INTERCEPTED` under ``"scipy.linalg"``:
``scipy.linalg.solve(a, b)`` inside a traced function comes here when an
argument is a tracer (:func:`.scipy_special.install` wraps the module's
attributes when hybridad or scipy.linalg is imported, whichever is second:
``from scipy.linalg import solve`` after ``import hybridad`` binds the
wrapper).  Batches broadcast as scipy's (``b`` is a vector when it is 1-D,
else a matrix).

Values are scipy's: the same LAPACK call where scipy makes one directly
(trtrs as scipy calls it for a C-ordered matrix, potrf, getrf, syevr: bit
for bit), elsewhere a composition computing the same function (each
function's docstring says which, and how close).  float32 operands of
solve_triangular, cholesky, cho_factor and cho_solve are computed in single
precision, as scipy does (LAPACK's s-routines); the other functions compute
float32 in float64 and round.  scipy's call depends on its operands' memory
order: the kernels make the one it makes for C-ordered operands, and
solve_triangular on a traced transpose (``L.T``, Fortran-ordered for scipy)
the one scipy makes for that (:func:`_untransposed`).  ``check_finite`` is
not applied (NaN and inf propagate; scipy raises).  docs/limitations.md
lists these.

``lu_factor`` returns scipy's ``(lu, piv)`` (``piv`` a traced int32 array).
``lu_solve`` takes them back when ``piv`` is the traced array ``lu_factor``
returned in the same trace (the permutation travels with it) or a constant;
``lu`` may be any array.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..ops.linalg_factor import lu_parts
from .numpy_api import _tracer, concatenate, getitem, reshape
from .numpy_linalg import _operands, _result, _stack
from .scipy_special import intercepts
from ..core.trace import bind, current_trace
from ..core.tracer import Tracer

__all__ = ["symmetric_from"]

_M = "scipy.linalg"

#: trace -> {id(piv node): (piv node, P stack, batch)} of lu_factor's results
_LU = weakref.WeakKeyDictionary()


def _mT(x):
    return np.swapaxes(x, -1, -2)


def symmetric_from(a, lower):
    """The symmetric matrices the triangle ``lower`` names of ``a`` stands for
    (its diagonal once; the other triangle not read)."""
    tri = np.tril(a) if lower else np.triu(a)
    return tri + _mT(np.tril(a, -1) if lower else np.triu(a, 1))


def _refuse(name, why):
    raise NotImplementedError(f"hybridad: scipy.linalg.{name} {why}")


def _square(a, name="a"):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected square matrix {name}, got shape {a.shape}")


def _system(a, b, single=False):
    """scipy's batching of (a: a matrix, b: a vector if 1-D, else a matrix):
    both as float64 stacks (float32 ones with ``single`` when both are
    float32), and how to give the result back."""
    (a, b), dtype = _operands(a, b, single=single)
    _square(a)
    vector = b.ndim == 1
    b2 = reshape(b, b.shape + (1,)) if vector else b
    if b2.ndim < 2 or b2.shape[-2] != a.shape[-1]:
        raise ValueError(f"shapes of a {a.shape} and b {b.shape} are incompatible")
    batch = np.broadcast_shapes(a.shape[:-2], b2.shape[:-2])

    def back(x):
        x = reshape(x, batch + b2.shape[-2:])
        return _result(getitem(x, (Ellipsis, 0)) if vector else x, dtype)

    return _stack(a, batch), _stack(b2, batch), batch, back


def _tri(a, b, lower, trans=0, unit=False):
    return bind("solve_triangular", a, b, lower=bool(lower), trans=int(trans), unit=bool(unit))


@intercepts(_M, "solve_triangular")
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """trtrs as scipy calls it for a C-ordered ``a``: scipy's values."""
    trans = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if trans not in (0, 1, 2):
        raise ValueError("trans must be 0, 1, 2, 'N', 'T' or 'C'")
    a, lower, trans = _untransposed(a, lower, trans)
    a, b, _, back = _system(a, b, single=True)
    return back(_tri(a, b, lower, trans, unit_diagonal))


def _untransposed(a, lower, trans):
    """A traced transpose of a matrix (``L.T``, ``np.swapaxes(L, -1, -2)``) as
    the matrix itself, the other triangle and the other ``trans``: the same
    system, solved without copying the transpose into C order.  It is also
    scipy's call: a C-ordered ``L`` makes ``L.T`` Fortran-ordered, which scipy
    hands to trtrs as it is -- the call the kernel makes for ``L`` with the
    triangle and ``trans`` flipped."""
    if not isinstance(a, Tracer) or a.node.op != "transpose":
        return a, lower, trans
    axes, nd = a.node.attrs["axes"], a.ndim
    if nd < 2 or tuple(axes) != tuple(range(nd - 2)) + (nd - 1, nd - 2):
        return a, lower, trans
    return Tracer(a.node.args[0], current_trace()), not lower, 1 if trans == 0 else 0


@intercepts(_M, "cholesky")
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """potrf on the triangle asked for (upper by default, as scipy), the other
    triangle zero."""
    (a,), dtype = _operands(a, single=True)
    _square(a)
    x = bind("cholesky", _stack(a, a.shape[:-2]), upper=not lower)
    return _result(reshape(x, a.shape), dtype)


@intercepts(_M, "cho_factor")
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` as scipy: the factor in one triangle, the other holding
    ``a``'s entries (potrf with clean=False)."""
    (a,), dtype = _operands(a, single=True)
    c = cholesky(a, lower=lower)
    rest = np.triu(a, 1) if lower else np.tril(a, -1)
    return _result(c + rest, dtype), bool(lower)


def _cho(c, b, lower):
    if lower:
        return _tri(c, _tri(c, b, True), True, trans=1)
    return _tri(c, _tri(c, b, False, trans=1), False)


@intercepts(_M, "cho_solve")
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """potrs: two triangular solves with the triangle of ``c`` that holds the
    factor (the other is not read)."""
    c, lower = c_and_lower
    if isinstance(lower, Tracer):
        _refuse("cho_solve", "with a traced `lower` flag is not supported")
    c, b, _, back = _system(c, b, single=True)
    return back(_cho(c, b, bool(lower)))


@intercepts(_M, "lu_factor")
def lu_factor(a, overwrite_a=False, check_finite=True):
    """getrf as scipy calls it: ``(lu, piv)``, 0-based int32 pivots.  A singular
    matrix is factored without scipy's warning."""
    (a,), dtype = _operands(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _refuse("lu_factor", f"of a non-square matrix {a.shape} is not supported")
    batch, n = a.shape[:-2], a.shape[-1]
    p = bind("lu_factor", _stack(a, batch))
    lu, perm = lu_parts(p)
    piv = reshape(getitem(p, (slice(None), n)), batch + (n,)).astype(np.int32)
    _LU.setdefault(current_trace(), {})[id(piv.node)] = (piv.node, perm, batch)
    return _result(reshape(lu, a.shape), dtype), piv


def _permutation(piv, lu, b, batch, name):
    """Functions applying P^T and P (``a = P L U``) to stacks like ``b``."""
    if isinstance(piv, Tracer):
        known = _LU.get(current_trace(), {}).get(id(piv.node))
        if known is None or known[0] is not piv.node:
            _refuse(name, "needs `piv` as lu_factor returned it in this traced function (or a "
                    "constant array): a traced permutation cannot be followed otherwise")
        perm = _stack(reshape(known[1], known[2] + known[1].shape[1:]), batch)
        return (lambda x: np.matmul(_mT(perm), x)), (lambda x: np.matmul(perm, x))
    piv = np.broadcast_to(np.asarray(piv), batch + (lu.shape[-1],)).reshape(-1, lu.shape[-1])
    rows = np.empty(piv.shape, np.intp)
    for i, p in enumerate(piv):  # the row interchanges, as getrs applies them
        r = np.arange(len(p))
        for j, k in enumerate(p):
            r[j], r[k] = r[k], r[j]
        rows[i] = r
    back = np.argsort(rows, axis=-1)
    return (lambda x: np.take_along_axis(x, rows[:, :, None], axis=1)), \
        (lambda x: np.take_along_axis(x, back[:, :, None], axis=1))


@intercepts(_M, "lu_solve")
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """getrs: the row interchanges, then the unit lower and the upper
    triangular solves (transposed, in reverse, for ``trans`` 1 or 2)."""
    lu, piv = lu_and_piv
    trans = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if trans not in (0, 1, 2):
        raise ValueError("trans must be 0, 1, 2, 'N', 'T' or 'C'")
    lu, b, batch, back = _system(lu, b)
    forward, inverse = _permutation(piv, lu, b, batch, "lu_solve")
    if trans == 0:
        return back(_tri(lu, _tri(lu, forward(b), True, unit=True), False))
    return back(inverse(_tri(lu, _tri(lu, b, False, trans=1), True, trans=1, unit=True)))


_STRUCTURES = {None: "gen", "general": "gen", "gen": "gen", "diagonal": "diagonal",
               "tridiagonal": "tridiagonal", "upper triangular": "upper",
               "lower triangular": "lower", "pos": "pos", "positive definite": "pos",
               "sym": "sym", "symmetric": "sym", "her": "sym", "hermitian": "sym"}


@intercepts(_M, "solve")
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
    """``a x = b`` (``a^T x = b`` when ``transposed``) by the structure
    ``assume_a`` names: 'gen' (and None) gesv, 'pos' potrf and two triangular
    solves (potrs), the triangular ones trtrs -- scipy's LAPACK calls; 'sym'
    gesv on the symmetric matrix the triangle ``lower`` stands for (scipy:
    sytrf, the same solution to rounding); 'diagonal' and 'tridiagonal' read
    only those entries, as scipy.  scipy's warning for an ill-conditioned
    matrix is not given."""
    if assume_a == "banded":
        _refuse("solve", "with assume_a='banded' is not supported")
    structure = _STRUCTURES.get(assume_a)
    if structure is None:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    a = _tracer(a)
    if a.ndim < 2:
        a = reshape(a, (1, 1) if a.size == 1 else (1, -1))
    a, b, _, back = _system(a, b)
    n = a.shape[-1]
    if structure in ("upper", "lower"):
        return back(_tri(a, b, structure == "lower", trans=int(bool(transposed))))
    if structure == "pos":
        c = bind("cholesky", a, upper=not lower)
        return back(_cho(c, b, bool(lower)))
    if structure == "diagonal":
        return back(b / np.diagonal(a, axis1=1, axis2=2)[:, :, None])
    if structure == "sym":
        a = symmetric_from(a, lower)
    elif structure == "tridiagonal":
        band = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= 1
        a = a * band.astype(np.float64)
    return back(bind("solve", _mT(a) if transposed else a, b))


@intercepts(_M, "eigh")
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         type=1, check_finite=True, subset_by_index=None, subset_by_value=None,  # noqa: A002
         driver=None):
    """syevr (scipy's default driver; 'evd': syevd) on the triangle ``lower``
    names, all eigenvalues or those ``subset_by_index`` selects: scipy's
    values, eigenvector signs included."""
    if b is not None:
        _refuse("eigh", "of a generalized problem (b given) is not supported")
    if subset_by_value is not None:
        _refuse("eigh", "with subset_by_value is not supported (how many eigenvalues it "
                "selects depends on the values); use subset_by_index")
    if driver not in (None, "evr", "evd", "ev", "evx", "gv", "gvd", "gvx"):
        raise ValueError(f'"{driver}" is unknown.')
    if driver in ("gv", "gvd", "gvx"):
        raise ValueError(f"{driver} requires input b array to be supplied for generalized "
                         "eigenvalue problems.")
    if driver in ("ev", "evx"):
        _refuse("eigh", f"with driver={driver!r} is not supported; use 'evr' or 'evd'")
    (a,), dtype = _operands(a)
    _square(a, '"a"')
    batch, n = a.shape[:-2], a.shape[-1]
    x, uplo = _stack(a, batch), "L" if lower else "U"
    if driver == "evd":
        if subset_by_index is not None:
            raise ValueError('"evd" cannot compute subsets of eigenvalues')
        if eigvals_only:
            return _result(reshape(bind("eigvalsh", x, uplo=uplo), batch + (n,)), dtype)
        p = bind("eigh", x, uplo=uplo)
    else:
        lo, hi = (0, max(n - 1, 0)) if subset_by_index is None else \
            (int(v) for v in subset_by_index)
        if subset_by_index is not None and not 0 <= lo <= hi < n:
            raise ValueError("Requested eigenvalue indices are not valid. Valid range is "
                             f"[0, {n - 1}] and start <= end, but start={lo}, end={hi} is "
                             "given")
        attrs = dict(uplo=uplo, lo=lo, hi=hi, subset=subset_by_index is not None)
        if eigvals_only:
            w = bind("eigh_evr", x, vectors=False, **attrs)
            return _result(reshape(w, batch + w.shape[-1:]), dtype)
        p = bind("eigh_evr", x, vectors=True, **attrs)
    s = p.shape[-1]
    return (_result(reshape(getitem(p, (slice(None), 0)), batch + (s,)), dtype),
            _result(reshape(getitem(p, (slice(None), slice(1, None))), batch + (n, s)), dtype))


@intercepts(_M, "expm")
def expm(A):  # noqa: N803 - scipy's name
    """Scaling and squaring with the Pade(13) approximant (Higham 2005; the
    kernel of :mod:`hybridad.ops.lapack_solve`).  scipy picks the degree by
    norm estimates (Al-Mohy & Higham 2009): the same matrix exponential to
    rounding.  The derivative is the exponential's Frechet derivative (the
    block matrix ``[[A, E], [0, A]]``), accurate as expm itself."""
    a = _tracer(A)
    if a.size == 1 and a.ndim < 2:
        return reshape(np.exp(a.astype(np.float64) if a.dtype.kind != "f" else a), (1, 1))
    if a.ndim < 2:
        raise np.linalg.LinAlgError("The input array must be at least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    (x,), dtype = _operands(a)
    if min(a.shape) == 0 or a.shape[-1] == 1:
        return _result(np.exp(x), dtype)
    return _result(reshape(bind("expm", _stack(x, a.shape[:-2])), a.shape), dtype)


@intercepts(_M, "block_diag")
def block_diag(*arrs):
    """The blocks on the diagonal, zeros elsewhere; batches broadcast."""
    arrs = [_tracer(a) for a in (arrs or ([],))]
    arrs = [reshape(a, (1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a for a in arrs]
    batch = np.broadcast_shapes(*(a.shape[:-2] for a in arrs))
    dtype = np.result_type(*(a.dtype for a in arrs))
    arrs = [np.broadcast_to(a.astype(dtype) if a.dtype != dtype else a, batch + a.shape[-2:])
            for a in arrs]
    cols = sum(a.shape[-1] for a in arrs)
    rows, at = [], 0
    for a in arrs:
        r, c = a.shape[-2:]
        rows.append(concatenate([np.zeros(batch + (r, at), dtype), a,
                                 np.zeros(batch + (r, cols - at - c), dtype)], axis=-1))
        at += c
    return concatenate(rows, axis=-2)


@intercepts(_M, "toeplitz")
def toeplitz(c, r=None):
    """``T[..., i, j] = c[..., i - j]`` for i >= j, else ``r[..., j - i]``: one
    gather (batches of c and r broadcast, as scipy)."""
    c = _tracer(c)
    c = reshape(c, (1,)) if c.ndim == 0 else c
    r = c if r is None else _tracer(r)
    r = reshape(r, (1,)) if r.ndim == 0 else r
    batch = np.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    c, r = np.broadcast_to(c, batch + c.shape[-1:]), np.broadcast_to(r, batch + r.shape[-1:])
    nc, nr = c.shape[-1], r.shape[-1]
    vals = concatenate([c[..., ::-1], r[..., 1:]], axis=-1)
    index = nc - 1 - np.arange(nc)[:, None] + np.arange(nr)[None, :]
    return vals[..., index]


@intercepts(_M, "circulant")
def circulant(c):
    """``C[..., i, j] = c[..., (i - j) % n]``: one gather."""
    c = _tracer(c)
    c = reshape(c, (1,)) if c.ndim == 0 else c
    n = c.shape[-1]
    return c[..., (np.arange(n)[:, None] - np.arange(n)[None, :]) % n]


@intercepts(_M, "inv")
def inv(a, overwrite_a=False, check_finite=True):
    """``scipy.linalg.inv``: numpy's ``inv`` (LAPACK's gesv against the
    identity; scipy calls getrf and getri: values agree to rounding)."""
    return np.linalg.inv(_tracer(a))


@intercepts(_M, "det")
def det(a, overwrite_a=False, check_finite=True):
    """``scipy.linalg.det``: numpy's ``det`` (both from an LU factorization)."""
    return np.linalg.det(_tracer(a))


@intercepts(_M, "norm")
def norm(a, ord=None, axis=None, keepdims=False, check_finite=True):  # noqa: A002
    """``scipy.linalg.norm``: numpy's ``norm`` (scipy's calls it, or BLAS nrm2
    for a vector's 2-norm: values agree to rounding)."""
    return np.linalg.norm(_tracer(a), ord=ord, axis=axis, keepdims=keepdims)
