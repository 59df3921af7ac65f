"""Problems the sparse tests share: the 2-D Brusselator (two species, 5-point
periodic Laplacian by np.roll), the Bratu energy and the minimal-surface area
(5- and 7-point Hessians) -- the benchmark suite's own definitions
(:mod:`hybridad.bench.sparse_workloads`)."""

import numpy as np

from hybridad.bench import sparse_workloads as _workloads
from hybridad.bench.sparse_workloads import brusselator, minimal_surface  # noqa: F401


def bratu(u, lam=_workloads.BRATU_LAMBDA):
    """:func:`hybridad.bench.sparse_workloads.bratu` with ``n`` from ``u``'s size."""
    return _workloads.bratu(u, int(round(np.sqrt(u.size))), lam)
