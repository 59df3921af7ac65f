"""The ops stage, the op rules: every primitive declared once, with all its rules (see
:mod:`hybridad.ir.registry` for what an :class:`~hybridad.ir.registry.Op`
carries).  One module per family -- :mod:`.elementwise` (the ufunc rule
table), :mod:`.select` (where, casts, copy), :mod:`.reductions`,
:mod:`.scans` (cumsum, cumprod and their adjoints), :mod:`.matmul`,
:mod:`.shape` (reshape, transpose, broadcast_to, concatenate),
:mod:`.indexing` (getitem, gather, gather_positions), :mod:`.sorting`,
:mod:`.accumulate` (the scatter and in-place adds the reverse pass emits),
:mod:`.linalg`, :mod:`.linalg_spectral` and :mod:`.linalg_factor` (LAPACK
primitives, their kernels in :mod:`.lapack`, :mod:`.lapack_more` and
:mod:`.lapack_solve`),
:mod:`.special` (scipy.special's ufuncs, the rule table continued),
:mod:`.fft` (Fourier transforms, pocketfft's),
:mod:`.host` (ufuncs without rules, on values that need no derivative),
:mod:`.region` (the fused regions the partition makes), :mod:`.loop` (a
body traced once, run many times) -- and the helpers
their rules share (:mod:`.common`, :mod:`.batch_helpers`).  Importing this
package fills the registry.

Op rules are symbolic: they may emit IR through the tracer
(:func:`hybridad.core.trace.bind`), and import no backend and no module
of the numpy surface.
"""

from ..ir.registry import REGISTRY, Op, get, may_raise, register, storage_root
from . import (  # noqa: F401  (fill the registry)
    accumulate,
    elementwise,
    fft,
    host,
    indexing,
    linalg,
    linalg_factor,
    linalg_spectral,
    loop,
    matmul,
    ode,
    quad,
    reductions,
    region,
    root,
    scans,
    select,
    shape,
    sorting,
    special,
)

__all__ = ["REGISTRY", "Op", "get", "may_raise", "register", "storage_root"]
