"""scipy.optimize integration: exact derivatives for ``minimize`` in one line.

The public face of :mod:`.scipy_objective` (:class:`Objective`),
:mod:`.scipy_minimize` (:func:`minimize`) and :mod:`.scipy_least_squares`
(:func:`least_squares`); ``hybridad.scipy`` re-exports it.

>>> import numpy as np, hybridad.interop.scipy as hs
>>> def rosen(x):
...     return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
>>> res = hs.minimize(rosen, np.full(10, -1.0), method="trust-ncg")
>>> bool(res.success), bool(np.allclose(res.x, 1.0))
(True, True)

:class:`Objective` adapts a function to scipy's callables (``fun``, ``jac``,
``hess``, ``hessp`` and ``value_and_grad`` for ``jac=True``); :func:`minimize`
wires them for the chosen method.

How it treats scipy
-------------------
* scipy keeps references to the arrays it is given (BFGS and L-BFGS-B
  difference successive gradients) and some methods update their ``x`` in
  place.  So every array handed to scipy is a **new array** (one allocation,
  on purpose), and scipy's ``x`` is copied into the objective's own buffer
  before ``f`` runs -- nothing is aliased, nothing handed out is overwritten.
  The evaluation itself (plan, buffers) allocates nothing.
* **Memoization**: ``fun``, ``jac`` and ``value_and_grad`` at the same point
  share one evaluation (value and gradient come from one plan call), as does
  ``hessp`` (which computes them too).  The point is compared by *contents*,
  so an ``x`` changed in place is seen.
* **dtype**: scipy iterates in float64.  By default ``f`` is evaluated in
  float64 whatever ``x0``'s dtype (a float32 ``x0`` is promoted): no precision
  is lost between scipy and ``f``.  ``dtype=np.float32`` evaluates ``f`` in
  float32 (scipy's float64 points are rounded to float32 and the derivatives
  returned as float64); line searches then see float32 rounding and may stop
  early -- choose it knowingly.
* ``x0`` of any shape: scipy works on the flattened vector; ``f`` receives it
  reshaped (a view) and :func:`minimize` returns ``x`` in ``x0``'s shape.
* **scipy's arguments mean what scipy says.**  ``args`` go to ``f`` (and to
  your ``jac`` / ``hess`` / ``hessp``) after ``x``; a ``jac`` you give
  (``True``, a callable, ``False`` or a finite-difference string) is used and
  ``f`` is not traced for the gradient; a ``hess`` / ``hessp`` you give (a
  callable, a ``HessianUpdateStrategy``, a string) is used too.  hybridad
  fills in only what is left out: ``jac=None`` gets the exact gradient,
  ``hess=hessp=None`` the exact Hessian (products) for the methods that use
  one.  Everything else (bounds, constraints, callback, options, tol) goes to
  scipy unchanged.
"""

from .scipy_least_squares import least_squares
from .scipy_minimize import (  # noqa: F401  (the constants: attributes of this module too)
    GRADIENT_METHODS,
    HESS_METHODS,
    HESSP_METHODS,
    minimize,
)
from .scipy_ivp import OdeJacobian, solve_ivp
from .scipy_objective import PARALLEL_WORK, Objective  # noqa: F401
from .scipy_sparse import NonlinearConstraint, SparseHessian, SparseJacobian

__all__ = ["NonlinearConstraint", "Objective", "OdeJacobian", "SparseHessian",
           "SparseJacobian", "least_squares", "minimize", "solve_ivp"]
