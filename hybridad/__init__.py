"""hybridad: automatic differentiation of numpy code into preallocated results.

>>> import numpy as np, hybridad as ha
>>> x = np.array([1.0, 2.0, 3.0])
>>> res = ha.GradientResult(x)
>>> _ = ha.gradient(lambda x: np.sum(x ** 2), x, out=res)
>>> res.gradient
array([2., 4., 6.])

The package in pipeline order (docs/architecture.md walks it): :mod:`.frontend`
(tracing, the numpy surface) -> :mod:`.ir` (the graph, the op registry) ->
:mod:`.ops` (every op's rules) -> :mod:`.transforms` (autodiff, batching,
partition, memory plan) -> :mod:`.backends` (numpy, numba, cuda) ->
:mod:`.plans` (run into :mod:`.results`); :mod:`.sparse` (sparse Jacobians and
Hessians: detection, coloring, compressed passes); :mod:`.interop` (scipy, dask).
"""

import sys as _sys

from .backends.numba.threads import short_blas_spin as _short_blas_spin

# idle OpenBLAS workers sleep after tens of microseconds, not 0.1 s, in the
# BLAS libraries loaded from here on (scipy's: every plan's gemm); see
# hybridad.backends.numba.threads
_short_blas_spin()

from . import optim
from .backends.numba import elementwise as _elementwise  # noqa: F401  (compiles @elementwise)
from .api import clear_cache, compile, gradient, hessian, hvp, jacobian
from .errors import (CompileBudgetError, MemoryBudgetError, RetraceWarning,
                     StalePlanError, TracingError)
from .frontend import numpy_api as _numpy_api  # noqa: F401  (the numpy surface: methods on tracers)
from .frontend.loops import fori_loop, scan
from .frontend.scalar_functions import ElementwiseError, elementwise
from .plans import plan as _plan_module
from .plans.plan import Plan
from .results import (
                      BatchGradientResult,
                      DiffResult,
                      GradientResult,
                      HessianResult,
                      HvpResult,
                      JacobianResult,
)

# plans pickled before the package was laid out in folders name hybridad.plan
_sys.modules.setdefault(__name__ + ".plan", _plan_module)

__version__ = "0.1.0"

__all__ = [
           "DiffResult",
           "ElementwiseError",
           "GradientResult", "BatchGradientResult",
           "HessianResult",
           "HvpResult",
           "JacobianResult",
           "CompileBudgetError", "MemoryBudgetError",
           "Plan",
           "SparseHessianResult", "SparseJacobianResult",
           "RetraceWarning",
           "StalePlanError",
           "TracingError",
           "__version__",
           "clear_cache",
           "compile",
           "elementwise",
           "fori_loop",
           "gradient",
           "hessian",
           "hessian_sparsity",
           "hvp",
           "scan",
           "jacobian",
           "jacobian_sparsity",
           "optim",
]


#: public names of :mod:`.sparse`, imported on first use (scipy.sparse and the
#: coloring kernels cost ~75 ms that a gradient never needs)
_SPARSE_NAMES = frozenset({"SparseHessianResult", "SparseJacobianResult", "hessian_sparsity",
                           "jacobian_sparsity"})


def __getattr__(name):
    if name in _SPARSE_NAMES:
        from . import sparse

        value = getattr(sparse, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hybridad' has no attribute {name!r}")
