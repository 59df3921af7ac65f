"""``np.linalg`` on the GPU program: the LAPACK primitives' device runs.

The CPU backends run solve, inv, det, slogdet, cholesky, triangular solves,
cholesky's reverse rule, eigh and eigvalsh (numpy's and scipy's), svd, pinv,
qr and eig (real spectra) through host LAPACK kernels
(:mod:`hybridad.ops.lapack`), which take host pointers.  On the GPU program
these ops run numpy's functions on the device arrays instead, which numpy
hands to cupy (``cupy.linalg``: cuSOLVER's getrf/getrs, potrf, syevd, gesvd
-- gesvdj for stacks of small matrices --, geqrf/orgqr and geev), with the
kernels' semantics: the matrix a factorization reads is the triangle LAPACK
reads (the other triangle ignored), the factor's other triangle is zero,
results are packed as the kernels pack them
(:mod:`hybridad.ops.lapack_more`), and what LAPACK reports -- a matrix that
is not positive definite, an exactly singular one, a decomposition that did
not converge (a non-finite result), a complex spectrum for eig -- raises as
on the CPU (cupy itself does not check: its checks would stop at the first
call; these read the factor's diagonal or the result back, one
synchronization per such op).  Eigenvectors, singular vectors and Q's
columns are cuSOLVER's: each is determined up to its sign only (eig's have
unit norm, as LAPACK's), and numpy's LAPACK may pick the other one, so a
function that depends on those signs can differ between the backends, as it
differs between numpy and cupy.

Each op of a program runs through :class:`Preallocated`: from its second
call on, what these calls allocate (results, cuSOLVER's workspaces) comes
from one device buffer the program's ops share (:class:`Workspace`: the
largest op's requests), so a plan's calls make no device allocation.  A
CUDA graph records them between its segments, as library calls.  expm and
lu_factor (scipy's, which numpy does not hand to cupy) stay on the CPU
backends.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..._xp import array_module
from ...ops.lapack_names import COMPLEX_SPECTRUM

__all__ = ["DEVICE_LINALG", "Preallocated", "Workspace", "matmul"]


def _mT(x):
    return np.swapaxes(x, -1, -2)


#: stacks of matrices larger than this run one matrix at a time: cupy hands a
#: stack to cuBLAS's and cuSOLVER's batched routines (getrfBatched,
#: potrfBatched, ...), made for many small matrices and several times slower
#: than the plain ones on one large matrix (a single matrix, as ``np.linalg``
#: on a 2-D array reaches these runs, is a stack of one)
BATCHED_UP_TO = 64


def _stacked(fn, *operands, **kw):
    """``fn(*operands, **kw)`` of numpy's stacked linear algebra, on a stack of
    one matrix or of large ones one matrix at a time (:data:`BATCHED_UP_TO`)."""
    a = operands[0]
    if a.ndim != 3 or (a.shape[0] != 1 and a.shape[-1] <= BATCHED_UP_TO) or a.shape[0] == 0:
        return fn(*operands, **kw)
    parts = [fn(*(x[i] for x in operands), **kw) for i in range(a.shape[0])]
    if isinstance(parts[0], tuple):  # (eigh, eig, svd, qr: several results)
        return tuple(_join(p) for p in zip(*parts, strict=True))
    return _join(parts)


def _join(parts):
    return parts[0][None] if len(parts) == 1 else np.stack(parts)


def _scipy_linalg(a):
    """scipy.linalg's functions for ``a``: cupyx.scipy.linalg on the device,
    scipy.linalg itself on host arrays (the emulation)."""
    if array_module(a) is np:
        import scipy.linalg as sl
    else:
        import cupyx.scipy.linalg as sl
    return sl


def _triangular(t, b, lower, trans=0, unit=False):
    """``op(t)^-1 b`` for the triangle ``lower`` of each matrix of ``t`` (the
    other triangle ignored; ``trans`` 1: ``t^T``): BLAS's trsm -- cuBLAS's
    through cupyx.scipy.linalg on the device, scipy's on host arrays -- one
    matrix at a time."""
    tri = _scipy_linalg(t).solve_triangular
    return _join([tri(t[i], b[i], trans=trans, lower=lower, unit_diagonal=unit)
                  for i in range(t.shape[0])])


def _eye(a):
    """The identity of ``a``'s matrices, on ``a``'s device (from ``a``: numpy's
    ``eye(like=)`` hands cupy a ``device`` keyword it does not take)."""
    return np.diag(np.ones_like(np.diagonal(a, axis1=-2, axis2=-1)[0]))


def _finite(*arrays):
    return all(bool(np.all(np.isfinite(x))) for x in arrays)


def _singular_if_not_finite(out, *operands):
    """An exactly singular matrix (a zero pivot: a non-finite ``out`` from
    finite operands) raises, as LAPACK's gesv does."""
    if not _finite(out) and _finite(*operands):
        raise np.linalg.LinAlgError("Singular matrix")


def solve(out, a, b, work=None):
    out[...] = _stacked(np.linalg.solve, a, b)
    _singular_if_not_finite(out, a, b)


def inv(out, a, work=None):
    out[...] = _stacked(np.linalg.inv, a)
    _singular_if_not_finite(out, a)


def det(out, a, work=None):
    out[...] = _stacked(np.linalg.det, a)


def slogdet(out, a, work=None):
    sign, logdet = _stacked(np.linalg.slogdet, a)
    out[..., 0] = sign
    out[..., 1] = logdet


def _symmetric(a, uplo):
    """The symmetric matrices ``a``'s triangle ``uplo`` stands for (the other
    triangle ignored, as LAPACK's potrf and syevd read it)."""
    if uplo == "L":
        return np.tril(a) + _mT(np.tril(a, -1))
    return np.triu(a) + _mT(np.triu(a, 1))


def _factor(a):
    """The lower Cholesky factor of the symmetric matrix ``a``'s lower
    triangle stands for; raises where it is not positive definite.  A matrix
    factored on its own (:func:`_stacked`) is handed over as it is: cupy's
    2-D cholesky, as numpy's, runs potrf on the lower triangle alone and
    zeroes the other (no symmetric copy of a large matrix is made); a stack
    of small ones goes to the batched routine symmetrized first."""
    one_at_a_time = a.shape[0] == 1 or a.shape[-1] > BATCHED_UP_TO
    lo = _stacked(np.linalg.cholesky, a if one_at_a_time else _symmetric(a, "L"))
    if lo.size and not bool(np.all(np.diagonal(lo, axis1=-2, axis2=-1) > 0)):
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return lo


def cholesky(out, a, upper=False, work=None):
    # upper: U with a = U^T U from the upper triangle, the lower factor of a^T transposed
    out[...] = _mT(_factor(_mT(a))) if upper else _factor(a)


def solve_triangular(out, a, b, lower=False, trans=0, unit=False, work=None):
    if out.size == 0:
        return
    if not unit and a.shape[-1] and \
            not bool(np.all(np.diagonal(a, axis1=-2, axis2=-1) != 0)):
        raise np.linalg.LinAlgError("singular matrix: a diagonal element of the "
                                    "triangular matrix is exactly zero")
    # (trans 2, 'C': real, so 'T')
    out[...] = _triangular(a, b, lower, trans=1 if trans else 0, unit=unit)


def cholesky_adjoint(out, lo, g, work=None):
    """The gradient w.r.t. the lower triangle the factor ``lo`` was computed
    from, given ``g`` w.r.t. ``lo`` (its upper triangle ignored): with
    ``P = phi(L^T tril(g))`` (the lower triangle, its diagonal halved) and
    ``M = L^-T P L^-1``, ``tril(M + M^T)`` with ``M``'s diagonal once -- a
    product and two triangular solves in place (cuBLAS's trsm on one
    buffer), ``out`` holding ``tril(g)`` first: one matrix allocated per
    call, where the plain formula makes seventeen (what a run allocates
    sizes the program's linear-algebra workspace).  ``lo`` is a Cholesky
    factor: its strict upper triangle zero, as every backend's cholesky
    writes it (the product reads it whole)."""
    if lo.size == 0:
        return
    out[...] = g
    _keep_lower(out)  # tril(g)
    p = np.empty_like(out)
    matmul(p, _mT(lo), out)
    _keep_lower(p)
    _scale_diagonal(p, 0.5)
    for i in range(p.shape[0]):
        _trsm(lo[i], p[i], "left_t")  # L^-T P
        _trsm(lo[i], p[i], "right")  # (L^-T P) L^-1 = M
    np.add(p, _mT(p), out=out)
    _scale_diagonal(out, 0.5)  # (M's diagonal once)
    _keep_lower(out)


#: the kernels of :func:`_keep_lower`, one per float type (tests/test_nvrtc.py compiles them)
KEEP_LOWER_SOURCE = "\n".join(
    f'''extern "C" __global__ void hybridad_keep_lower_{t}({t}* x, long long n, long long total) {{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total && i % n > (i / n) % n) x[i] = 0;
}}''' for t in ("double", "float"))
_KEEP_LOWER = {}  # float type -> cupy's kernel, compiled at the first device call


def _keep_lower(x):
    """The strict upper triangles of the C-contiguous stack ``x`` set to 0, in
    place (numpy's tril allocates its result): one kernel on the device, an
    index on host arrays."""
    n = x.shape[-1]
    if array_module(x) is np:
        r, c = np.triu_indices(n, 1)
        x[..., r, c] = 0
        return
    if x.size == 0:
        return
    t = "double" if x.dtype == np.float64 else "float"
    kernel = _KEEP_LOWER.get(t)
    if kernel is None:
        import cupy

        kernel = _KEEP_LOWER[t] = cupy.RawModule(code=KEEP_LOWER_SOURCE).get_function(
            f"hybridad_keep_lower_{t}")
    kernel((-(-x.size // 256),), (256,), (x, np.int64(n), np.int64(x.size)))


def matmul(out, a, b):
    """``out = a @ b``: cuBLAS through hybridad's handle on the device (a
    transposed operand read in place), numpy's (cupy's) matmul otherwise."""
    if array_module(out) is not np:
        from .cublas_capture import available, eager_gemm

        if available() and eager_gemm(out, a, b):
            return
    np.matmul(a, b, out=out)


def _scale_diagonal(x, factor):
    """The diagonals of the C-contiguous stack ``x`` times ``factor``, in place."""
    n = x.shape[-1]
    x.reshape(x.shape[0], n * n)[:, ::n + 1] *= factor


def _trsm(lower, b, side):
    """In place on ``b`` (C-contiguous), ``L`` the lower triangle of
    ``lower``: ``"left_t"``: ``b <- L^-T b``; ``"right"``: ``b <- b L^-1`` --
    cuBLAS's trsm through hybridad's handle on the device, scipy's
    solve_triangular on host arrays."""
    xp = array_module(b)
    if xp is not np:
        from .cublas_capture import available, eager_handle

        if available() and eager_handle().trsm(lower, b, side):
            return
    if side == "right":  # b L^-1 = (L^-T b^T)^T
        b[...] = _mT(_triangular(lower[None], _mT(b)[None], True, trans=1)[0])
    else:
        b[...] = _triangular(lower[None], b[None], True, trans=1)[0]


def _converged(what, out):
    """A result that is not finite raises as LAPACK's failure to converge does
    on the CPU (numpy's message; a non-finite matrix fails there too)."""
    if not _finite(out):
        raise np.linalg.LinAlgError(f"{what} did not converge")


def eigh(out, a, uplo="L", work=None):
    # eigenvalues in row 0, eigenvectors (columns) below (:mod:`hybridad.ops.linalg`)
    eigh_evr(out, a, uplo, 0, a.shape[-1] - 1, True)


def eigvalsh(out, a, uplo="L", work=None):
    eigh_evr(out, a, uplo, 0, a.shape[-1] - 1, False)


def eigh_evr(out, a, uplo="L", lo=0, hi=0, vectors=True, subset=False, work=None):
    # scipy.linalg.eigh (and numpy's eigh and eigvalsh: all of them): eigenvalues
    # lo..hi (ascending) in row 0, their vectors below (cuSOLVER's syevd on the
    # whole matrix, then the subset)
    if out.size == 0:
        return
    sym = _symmetric(a, uplo)
    if vectors:
        w, v = _stacked(np.linalg.eigh, sym)
        out[:, 0, :] = w[:, lo:hi + 1]
        out[:, 1:, :] = v[:, :, lo:hi + 1]
    else:
        out[...] = _stacked(np.linalg.eigvalsh, sym)[:, lo:hi + 1]
    _converged("Eigenvalues", out)


def eig(out, a, vectors=True, work=None):
    # real spectra only, as on the CPU: eigenvalues in row 0, the right
    # eigenvectors (columns, unit norm: cuSOLVER's geev, as LAPACK's) below
    if out.size == 0:
        return
    if not _finite(a):
        raise np.linalg.LinAlgError("Array must not contain infs or NaNs")
    w, v = _stacked(np.linalg.eig, a) if vectors else (_stacked(np.linalg.eigvals, a), None)
    if not bool(np.all(np.imag(w) == 0)):  # (a real Schur form's real eigenvalues: exact)
        raise NotImplementedError(COMPLEX_SPECTRUM)
    if vectors:
        out[:, 0, :] = np.real(w)
        out[:, 1:, :] = np.real(v)
    else:
        out[...] = np.real(w)
    _converged("Eigenvalues", out)


def _pack(out, *parts):
    """Stacks ``parts`` (each ``(b, ...)``) written one after the other, each
    matrix row by row, into the rows of ``out`` (``(b, total)``): the packed
    results of :mod:`hybridad.ops.lapack_more`."""
    b, at = out.shape[0], 0
    for part in parts:
        size = part.size // b
        out[:, at:at + size] = part.reshape(b, size)
        at += size


def svd(out, a, jobz="S", complement=False, work=None):
    # packed as :mod:`hybridad.ops.lapack_more` says: s, then U (m x k) and Vt
    # (k x n) row by row; or the columns k.. of the full U (m > n) / rows k.. of
    # the full Vt
    b, m, n = a.shape
    k = min(m, n)
    if b == 0 or out.size == 0:
        return
    if k == 0:  # (a complement of an empty matrix: numpy's full U or Vt, the identity)
        out[...] = _eye(out)
        return
    if jobz == "N" and not complement:
        out[...] = _stacked(np.linalg.svd, a, compute_uv=False)
    else:
        u, s, vt = _stacked(np.linalg.svd, a, full_matrices=bool(complement))
        if complement:
            out[...] = u[:, :, k:] if m > n else vt[:, k:, :]
        else:
            _pack(out, s, u, vt)
    _converged("SVD", out)


def qr(out, a, mode="reduced", complement=False, work=None):
    # packed as :mod:`hybridad.ops.lapack_more` says: Q (m x k) then R (k x n) row
    # by row; mode 'r': R alone; or the columns k.. of the complete Q (m > n)
    b, m, n = a.shape
    k = min(m, n)
    if b == 0 or out.size == 0:
        return
    if complement:
        out[...] = _eye(out) if k == 0 else _stacked(np.linalg.qr, a, mode="complete")[0][:, :, k:]
    elif mode == "r":
        out[...] = _stacked(np.linalg.qr, a, mode="r")
    else:
        _pack(out, *_stacked(np.linalg.qr, a, mode="reduced"))


def pinv(out, a, rcond=1e-15, work=None):
    if out.size:
        # (singular values at most rcond * max(s) dropped, as numpy's and the kernel's)
        out[...] = _stacked(np.linalg.pinv, a, rcond=rcond)
        _converged("SVD", out)


class Workspace:
    """The device buffer the :class:`Preallocated` runs of one program share:
    they run one after another on one stream, and what a run allocates dies
    with it (its results are copied into the program's arena), so each run's
    regions start at the buffer's head and the buffer is the largest run's
    size, not the sum."""

    def __init__(self, xp):
        self.xp, self.buffer, self.size = xp, None, 0

    def at_least(self, size):
        """The buffer's first pointer, the buffer grown to ``size`` bytes first
        (at first calls only: later calls ask for what they asked before)."""
        if self.buffer is None or size > self.size:
            self.buffer, self.size = self.xp.empty(max(size, 1), dtype=self.xp.uint8), size
        return self.buffer.data


class Preallocated:
    """A device run (:data:`DEVICE_LINALG`) whose cupy allocations -- the
    results of numpy's functions, cuSOLVER's workspaces and info words, the
    checks' temporaries -- come from its program's :class:`Workspace` from
    its second call on, so that a plan's calls allocate no device memory.

    The first call runs under an allocator that takes cupy's (its memory
    pool) and records each request's size; each then has its own offset in
    the workspace (512-byte aligned, as cudaMalloc's).  Later calls run under
    an allocator that hands out those regions in the same order -- the same
    shapes make the same requests -- each at most once per call, so no two
    live allocations overlap.  A request out of that order takes any region
    of the call not yet handed out that holds it; one that none holds (a size
    or a request the first call did not make) goes to cupy's pool that once,
    and a region of its size is added for the calls after it.  Calls on one stream run
    in order, so a region's reuse by the next run waits for this one.  With
    an array module without ``cuda.using_allocator`` (the host emulation) the
    run is called as is."""

    ALIGN = 512

    def __init__(self, run, xp, workspace=None):
        self.run, self.xp = run, xp
        self.workspace = Workspace(xp) if workspace is None else workspace
        self.regions = None  # [(size, offset)] of the first call's requests
        self.size = 0

    def __call__(self, *args, **kwargs):
        cuda = getattr(self.xp, "cuda", None)
        if cuda is None or not hasattr(cuda, "using_allocator"):
            return self.run(*args, **kwargs)
        pool = cuda.get_allocator()
        if self.regions is None:
            sizes = []

            def record(size):
                sizes.append(int(size))
                return pool(size)

            with cuda.using_allocator(record):
                self.run(*args, **kwargs)
            self.regions = []
            self._add(sizes)
            return None
        base, regions, k = self.workspace.at_least(self.size), self.regions, [0]
        used, missed = [False] * len(regions), []

        def serve(size):
            j = k[0]
            if j >= len(regions) or used[j] or size > regions[j][0]:
                # off the recorded order (a first call's one-off request, say):
                # any region of this call not yet handed out that is large enough
                j = next((i for i, (s, _) in enumerate(regions)
                          if not used[i] and size <= s), None)
                if j is None:  # a request no region holds: the pool's, this once
                    missed.append(int(size))
                    return pool(size)
            used[j], k[0] = True, j + 1
            return base + regions[j][1]

        try:
            with cuda.using_allocator(serve):
                return self.run(*args, **kwargs)
        finally:
            if missed:  # the next call finds them in the workspace
                self._add(missed)

    def _add(self, sizes):
        """Regions for requests of ``sizes`` bytes, after the recorded ones."""
        at = self.size
        for size in sizes:
            self.regions.append((size, at))
            at += -(-size // self.ALIGN) * self.ALIGN
        self.size = at
        self.workspace.at_least(at)


def solve_lu(out, a, b, work=None):
    # the CPU kernel's packing (hybridad.ops.lapack_solve.solve_lu): x, then LU,
    # then LAPACK's 1-based pivots as floats; a zero pivot raises as gesv's
    n, k = a.shape[-1], b.shape[-1]
    if n == 0 or a.shape[0] == 0:
        return
    sl = _scipy_linalg(a)
    for i in range(a.shape[0]):
        with warnings.catch_warnings():  # (scipy's and cupyx's word on a singular matrix:
            warnings.simplefilter("ignore")  # raised below, as the CPU kernel raises it)
            lu, piv = sl.lu_factor(a[i], check_finite=False)
        if not bool(np.all(np.diagonal(lu) != 0)):
            raise np.linalg.LinAlgError("Singular matrix")
        out[i, :, k:k + n] = lu
        out[i, :, k + n] = piv + 1
        if k:
            out[i, :, :k] = sl.lu_solve((lu, piv), b[i], check_finite=False)


def lu_factors(out, a, work=None):
    solve_lu(out, a, a[:, :, :0])


def lu_solve(out, p, b, trans=0, at=0, work=None):
    n = p.shape[1]
    if n == 0 or out.size == 0:
        return
    sl = _scipy_linalg(p)
    for i in range(p.shape[0]):
        piv = (p[i, :, at + n] - 1).astype(np.int32)
        out[i] = sl.lu_solve((p[i, :, at:at + n], piv), b[i], trans=trans, check_finite=False)


def symmetric(out, a, work=None):
    # (1.0 where a matrix equals its transpose exactly: the CPU kernel's answer)
    out[...] = np.all(a == _mT(a), axis=(1, 2))


def cho_solve(out, lo, flags, a, b, upper=False, work=None):
    # by the Cholesky factor where the factored matrix is symmetric (two
    # triangular solves: cuBLAS's trsm), else numpy's solve on the matrix
    if out.size == 0:
        return
    for i, same in enumerate(flags.tolist()):  # (one read of the flags on the host)
        if same:
            low = _mT(lo[i:i + 1]) if upper else lo[i:i + 1]
            out[i:i + 1] = _triangular(low, _triangular(low, b[i:i + 1], True), True, trans=1)
        else:
            solve(out[i:i + 1], a[i:i + 1], b[i:i + 1])


#: op -> its device run ``run(out, *operands, work=None, **attrs)``
DEVICE_LINALG = {"solve": solve, "inv": inv, "det": det, "slogdet": slogdet,
                 "cholesky": cholesky, "solve_triangular": solve_triangular,
                 "cholesky_adjoint": cholesky_adjoint, "eigh": eigh, "eigvalsh": eigvalsh,
                 "eigh_evr": eigh_evr, "svd": svd, "pinv": pinv, "qr": qr,
                 "eig": eig, "solve_lu": solve_lu, "lu_factors": lu_factors,
                 "lu_solve": lu_solve, "symmetric": symmetric, "cho_solve": cho_solve}
