"""The LAPACK primitives by name: which ops have LAPACK kernels, where each
kernel lives and the integer arguments it takes -- plain data, importable
without numba or scipy.linalg, for the stages that generate code
(:mod:`hybridad.backends.numba.program` imports a kernel's module only when
the plan calls it).  The kernels are in :mod:`hybridad.ops.lapack` (whose
conventions they follow), :mod:`hybridad.ops.lapack_more` and
:mod:`hybridad.ops.lapack_solve`."""

from __future__ import annotations

import numpy as np

__all__ = ["COMPLEX_SPECTRUM", "KERNEL_MODULES", "LAPACK_OPS", "SINGLE_OPS", "kernel_args",
           "kind_of"]

#: what eig and eigvals raise (``NotImplementedError``) for a matrix with complex
#: eigenvalues, on every backend
COMPLEX_SPECTRUM = ("numpy.linalg.eig/eigvals: the matrix has complex eigenvalues, where "
                    "numpy returns complex arrays; hybridad traces real spectra only")

_HERE = ("solve", "inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh")
_MORE = ("svd", "pinv", "qr", "eig", "eigh_evr")
_SOLVE = ("solve_triangular", "lu_factor", "expm", "refuse_if", "cholesky_adjoint", "solve_lu",
          "lu_factors", "lu_solve", "symmetric", "cho_solve")
#: the primitives whose kernels live in :mod:`hybridad.ops.lapack`, then those of
#: :mod:`hybridad.ops.lapack_more` and :mod:`hybridad.ops.lapack_solve` (each
#: kernel has its op's name)
LAPACK_OPS = _HERE + _MORE + _SOLVE
#: the primitives whose kernels also compute in single precision (LAPACK's and
#: BLAS's s-routines, for float32 operands: scipy.linalg's solve_triangular and
#: cholesky compute float32 so, and cholesky's reverse rule follows its factor);
#: the others take float64 only (numpy.linalg computes every float type in
#: double precision)
SINGLE_OPS = ("cholesky", "solve_triangular", "cholesky_adjoint")
#: op -> the module of its kernel (by name: importing one binds its LAPACK symbols)
KERNEL_MODULES = {**dict.fromkeys(_HERE, "hybridad.ops.lapack"),
                  **dict.fromkeys(_MORE, "hybridad.ops.lapack_more"),
                  **dict.fromkeys(_SOLVE, "hybridad.ops.lapack_solve")}


def kind_of(dtype):
    """LAPACK's type letter: ``ord('d')`` for float64, ``ord('s')`` for float32."""
    return {np.dtype(np.float64): ord("d"), np.dtype(np.float32): ord("s")}[np.dtype(dtype)]


def kernel_args(op, attrs):
    """The kernel's arguments after ``kind`` from the primitive's attributes
    (integers, the same for the reference ``run`` and generated code):
    ``ord(UPLO)`` for eigh and eigvalsh, ``upper`` (0/1) for cholesky."""
    if op in ("eigh", "eigvalsh"):
        return (ord(attrs.get("uplo", "L")),)
    if op == "cholesky":
        return (int(bool(attrs.get("upper", False))),)
    return _more_args(op, attrs)


def _more_args(op, attrs):
    """:func:`kernel_args` of the kernels of :mod:`hybridad.ops.lapack_more` and
    :mod:`hybridad.ops.lapack_solve`."""
    if op == "svd":
        return ord(attrs.get("jobz", "S")), int(attrs.get("complement", False))
    if op == "pinv":
        return (float(attrs["rcond"]),)
    if op == "qr":
        return (("r", "reduced", "complete").index(attrs.get("mode", "reduced")),
                int(attrs.get("complement", False)))
    if op == "eig":
        return (int(attrs.get("vectors", True)),)
    if op == "eigh_evr":
        return (ord(attrs["uplo"]), int(attrs["lo"]), int(attrs["hi"]),
                int(attrs["vectors"]), int(attrs["subset"]))
    if op == "solve_triangular":
        return (int(attrs["lower"]), int(attrs["trans"]), int(attrs["unit"]))
    if op == "refuse_if":
        return (int(attrs["code"]),)
    if op == "lu_solve":
        return int(attrs["trans"]), int(attrs["at"])
    if op == "cho_solve":
        return (int(bool(attrs.get("upper", False))),)
    return ()
