"""hybridad: automatic differentiation of numpy code into preallocated results.

>>> import numpy as np, hybridad as ha
>>> x = np.array([1.0, 2.0, 3.0])
>>> res = ha.GradientResult(x)
>>> _ = ha.gradient(lambda x: np.sum(x ** 2), x, out=res)
>>> res.gradient
array([2., 4., 6.])

Pipeline (one module per stage): :mod:`.trace` -> :mod:`.ir` ->
:mod:`.autodiff` -> :mod:`.memory` -> :mod:`.backends` -> :mod:`.results`.
"""

from .frontend import numpy_api as _numpy_api  # noqa: F401  (the numpy surface: methods on tracers)
from . import optim
from .api import clear_cache, compile, gradient, hessian, hvp, jacobian
from .errors import MemoryBudgetError, RetraceWarning, StalePlanError, TracingError
from .plans.plan import Plan
from .frontend.scalar_functions import ElementwiseError, elementwise
from .results import (BatchGradientResult, DiffResult, GradientResult, HessianResult, HvpResult,
                      JacobianResult)

__version__ = "0.1.0"

__all__ = [
           "DiffResult",
           "ElementwiseError",
           "GradientResult", "BatchGradientResult",
           "HessianResult",
           "HvpResult",
           "JacobianResult",
           "MemoryBudgetError",
           "Plan",
           "RetraceWarning",
           "StalePlanError",
           "TracingError",
           "__version__",
           "clear_cache",
           "compile",
           "elementwise",
           "gradient",
           "hessian",
           "hvp",
           "jacobian",
           "optim",
]
