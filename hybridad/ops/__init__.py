"""The op rules: every primitive declared once, with all its rules (see
:mod:`hybridad.ir.registry` for what an :class:`~hybridad.ir.registry.Op`
carries).  One module per family -- :mod:`.elementwise` (the ufunc rule
table), :mod:`.structural` (select, casts, scans, matmul, shape and index
ops), :mod:`.linalg` (LAPACK primitives, their kernels in :mod:`.lapack`),
:mod:`.region` (the fused regions the partition makes) -- and the helpers
their batch rules share (:mod:`.batch_helpers`).  Importing this package
fills the registry.

Op rules are symbolic: they may emit IR through the tracer
(:func:`hybridad.frontend.trace.bind`), and import no backend and no module
of the numpy surface.
"""

from ..ir.registry import REGISTRY, Op, get, may_raise, register, storage_root
from . import elementwise, linalg, region, structural  # noqa: F401  (fill the registry)

__all__ = ["REGISTRY", "Op", "get", "may_raise", "register", "storage_root"]
