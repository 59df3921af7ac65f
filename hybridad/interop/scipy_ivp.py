"""Stiff ODEs: the exact Jacobian of a plain numpy right-hand side for
``scipy.integrate.solve_ivp`` (BDF, Radau, LSODA), sparse where its pattern is.

:class:`OdeJacobian` is the ``jac`` callable: ``jac(t, y, *args)``.  The
pattern of ``d f / d y`` is detected once from ``f(t, y, *args)``'s traced
graph and colored; each call is one compressed pass into a
:class:`hybridad.SparseJacobianResult` -- no allocation.  ``t`` reaches ``f``
as a 0-d array (a plan argument, not a static value: a new ``t`` is not a new
plan), so ``f`` may compute with it but not branch on it in Python.

What scipy is handed, and why no copy is made where none is needed:

* sparse (BDF, Radau): the result's ``csr_array`` itself.  Both solvers turn
  a sparse Jacobian into a new ``csc_matrix`` before keeping it, so the
  next call overwriting ``.data`` changes nothing scipy holds;
* dense (LSODA, or ``sparse=False``): a dense copy of the nonzeros scattered
  into a buffer of ours.  BDF and Radau keep the dense array they are given
  (``np.asarray`` makes no copy), so it is copied for them; LSODA copies it
  into its Fortran workspace, so it gets the buffer itself.

:func:`solve_ivp` is ``scipy.integrate.solve_ivp`` with this ``jac`` filled in
for the implicit methods when you give none.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import api
from ..plans.validate import real_values
from ..sparse import SparseJacobianResult
from .scipy_sparse import use_sparse

__all__ = ["IMPLICIT_METHODS", "OdeJacobian", "solve_ivp"]

#: the methods of scipy.integrate.solve_ivp that use a Jacobian
IMPLICIT_METHODS = ("BDF", "Radau", "LSODA")


class OdeJacobian:
    """``jac(t, y, *args)`` for ``scipy.integrate.solve_ivp``: the exact ``d f / d y``
    of a right-hand side ``f(t, y, *args)`` written in plain numpy.

    Parameters
    ----------
    fun : callable
        ``fun(t, y, *args)`` -> ``dy/dt``, plain numpy (``y`` 1-D).
    t0 : float
        A time (only to trace ``fun``).
    y0 : array_like
        A state, 1-D.
    *args
        Further arguments of ``fun`` (arrays are data, other values static),
        as scipy's ``args=``.
    sparse : bool or None, default None
        Hand scipy a ``scipy.sparse.csr_array`` (True) or a dense array
        (False); None: sparse where :func:`hybridad.interop.scipy_sparse.use_sparse`
        says so.  LSODA takes dense Jacobians only.
    method : {"BDF", "Radau", "LSODA"}, default "BDF"
        The solver it is for (what it may share with scipy, see the module notes).
    backend : {"numba", "numpy"}, optional

    Attributes
    ----------
    result : SparseJacobianResult
        Where each call computes (``result.jacobian``, ``result.value``).
    sparse : bool
    n_evaluations : int

    Examples
    --------
    >>> import numpy as np, hybridad.scipy as hs
    >>> from scipy.integrate import solve_ivp
    >>> def rober(t, y):  # Robertson's stiff chemical kinetics
    ...     a, b, c = y[0], y[1], y[2]
    ...     return np.stack([-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b * b,
    ...                      3e7 * b * b])
    >>> jac = hs.OdeJacobian(rober, 0.0, [1.0, 0.0, 0.0], method="Radau")
    >>> sol = solve_ivp(rober, (0.0, 1e3), [1.0, 0.0, 0.0], method="Radau", jac=jac,
    ...                 rtol=1e-6, atol=1e-10)
    >>> bool(sol.success), round(float(sol.y[:, -1].sum()), 6)
    (True, 1.0)
    """

    def __init__(self, fun, t0, y0, *args, sparse=None, method="BDF", backend=None):
        if method not in IMPLICIT_METHODS:
            raise ValueError(f"method must be one of {IMPLICIT_METHODS}; got {method!r}")
        y0 = np.asarray(y0)
        if y0.ndim != 1 or y0.dtype.kind not in "biuf":
            raise ValueError(f"y0 must be a 1-D real array; got shape {y0.shape}, dtype "
                             f"{y0.dtype}")
        self.fun, self.method, self.backend = fun, method, backend
        self._t = np.array(float(t0))
        self._y = np.array(y0, dtype=np.float64)
        self._args = tuple(args)
        self.result = SparseJacobianResult(fun, self._t, self._y, *self._args, argnums=1)
        self.sparse = method != "LSODA" and use_sparse(sparse, self.result.pattern)
        if not self.sparse:
            n = self._y.size
            p = self.result.pattern
            rows = np.repeat(np.arange(n, dtype=np.intp), np.diff(p.indptr))
            self._dense = np.zeros((n, n))
            self._dense_flat = self._dense.reshape(-1)
            self._positions = rows * n + p.indices.astype(np.intp)
        self.n_evaluations = 0

    def evaluate(self, t, y, *args):
        """Compute ``d f / d y`` at ``(t, y)`` into :attr:`result` (no allocation)."""
        if args and (len(args) != len(self._args) or any(
                a is not b for a, b in zip(args, self._args, strict=True))):
            self._args = tuple(args)
        y = real_values(y, "y")
        if y.shape != self._y.shape:
            raise ValueError(f"y has shape {y.shape}; the Jacobian was built for y0 of shape "
                             f"{self._y.shape}")
        self._t.fill(t)
        np.copyto(self._y, y, casting="unsafe")
        api.jacobian(self.fun, self._t, self._y, *self._args, argnums=1, out=self.result,
                     backend=self.backend)
        self.n_evaluations += 1
        return self.result

    def __call__(self, t, y, *args):
        res = self.evaluate(t, y, *args)
        if self.sparse:
            return res.jacobian  # BDF and Radau convert it to a new csc_matrix
        np.put(self._dense_flat, self._positions, res.jacobian.data, mode="wrap")
        return self._dense if self.method == "LSODA" else self._dense.copy()


def solve_ivp(fun: Callable[..., Any], t_span: Any, y0: Any, method: Any = "RK45", *,
              args: tuple | None = None, jac: Any = None, sparse: bool | None = None,
              backend: str | None = None, **options: Any) -> Any:
    """``scipy.integrate.solve_ivp`` with the exact Jacobian for the implicit methods.

    Parameters
    ----------
    fun, t_span, y0, method :
        As in scipy (``fun(t, y, *args)`` plain numpy code).
    args : tuple, optional
        As in scipy.
    jac : callable, array or None
        None (the default) with BDF, Radau or LSODA: hybridad's
        :class:`OdeJacobian`.  Anything else goes to scipy unchanged.
    sparse : bool or None
        See :class:`OdeJacobian`.
    backend : {"numba", "numpy"}, optional
    **options
        Every other argument of scipy's ``solve_ivp`` (``t_eval``, ``rtol``,
        ``atol``, ``dense_output``, ``events``, ``vectorized``, ...).

    Returns
    -------
    scipy.integrate OdeResult
        scipy's result, with ``jacobian`` (the :class:`OdeJacobian`, or None)
        added.
    """
    from scipy import integrate

    ode_jac = None
    if jac is None and method in IMPLICIT_METHODS:
        extra = () if args is None else tuple(args)
        ode_jac = OdeJacobian(fun, t_span[0], y0, *extra, sparse=sparse, method=method,
                              backend=backend)
        jac = ode_jac
    if jac is not None:  # (scipy warns of a jac its explicit methods do not use)
        options["jac"] = jac
    sol = integrate.solve_ivp(fun, t_span, y0, method=method, args=args, **options)
    sol.jacobian = ode_jac
    return sol
