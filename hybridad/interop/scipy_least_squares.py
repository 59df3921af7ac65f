"""``least_squares``: ``scipy.optimize.least_squares`` with the exact Jacobian
of the residuals from a :class:`hybridad.plans.jacobian.JacobianPlan`
(:class:`_Residuals`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import scipy.optimize

import numpy as np

from ..plans.cache import lookup as _lookup
from ..errors import StalePlanError
from ..plans.jacobian import JacobianPlan
from ..plans.validate import real_values
from .scipy_objective import check_x0, scipy_args

__all__ = ["least_squares"]


class _Residuals:
    """The exact Jacobian of a residual function, for scipy's least_squares:
    ``jac(x, *args)`` returns a new ``(m, n)`` float64 array each call."""

    def __init__(self, fun, x0, args, backend, parallel):
        self.fun, self.backend, self.parallel = fun, backend, bool(parallel)
        self._x = np.array(x0, dtype=np.float64)
        self._args = args
        self._call_args = (self._x, *args)
        self._plan = self._lookup(None)
        self._res = self._plan.new_result()
        self.n_evaluations = 0

    def _lookup(self, stale):
        call_args = self._call_args
        return _lookup(self.fun, call_args, 0, self.backend, parallel=self.parallel,
                       tag=("jacobian", "auto", None), stale=stale,
                       build=lambda g: JacobianPlan(g, call_args, 0, self.backend,
                                                  parallel=self.parallel))[0]

    def jac(self, x, *args, **kwargs):
        """The Jacobian at ``x``: a new ``(m, n)`` float64 array (scipy keeps it)."""
        if args and (len(args) != len(self._args) or any(
                a is not b for a, b in zip(args, self._args, strict=True))):
            self._args, self._call_args = args, (self._x, *args)
        x = real_values(x, "x")
        if x.size != self._x.size:
            raise ValueError(f"x has {x.size} elements; expected {self._x.size}")
        np.copyto(self._x, x.reshape(self._x.shape), casting="unsafe")
        try:
            self._plan.jacobian(*self._call_args, out=self._res)
        except StalePlanError:  # fun changed (its globals, closure, ...): a new plan
            self._plan = self._lookup(self._plan)
            self._plan.jacobian(*self._call_args, out=self._res)
        self.n_evaluations += 1
        return self._res.jacobian.astype(np.float64)  # a new array: scipy may keep it


#: ``sparse=None`` tries a sparse Jacobian from this many unknowns on (a dense
#: Jacobian of 5000 columns and its SVD at every iteration are scipy's limit)
SPARSE_LSQ_SIZE = 5000


def _sparse_residuals(fun, x0, args, backend, sparse, options):
    """A :class:`hybridad.interop.scipy_sparse.SparseJacobian` where a sparse
    Jacobian is asked for (``sparse=True``, or ``tr_solver="lsmr"``) or where
    a dense one would not do, else None.  A sparse Jacobian makes scipy solve
    with ``lsmr``, which converges differently: never chosen silently for
    problems the dense path handles."""
    from .scipy_sparse import SparseJacobian

    if sparse is False or options.get("method", "trf") == "lm" or sparse is None and \
            options.get("tr_solver") != "lsmr" and x0.size < SPARSE_LSQ_SIZE:
        return None
    jac = SparseJacobian(fun, x0, args, 0, sparse=sparse, backend=backend)
    return jac if jac.sparse else None


def least_squares(fun: Callable[..., Any], x0: Any, *extra: Any, jac: Any = None,
                  args: tuple = (), kwargs: dict | None = None, backend: str = "numba",
                  parallel: bool | None = None, sparse: bool | None = None,
                  **options: Any) -> scipy.optimize.OptimizeResult:
    """``scipy.optimize.least_squares`` with hybridad's exact Jacobian.

    Parameters
    ----------
    fun : callable
        Plain numpy code returning the residual vector, ``fun(x, *args,
        **kwargs)``, as in scipy.
    x0 : array_like
        Starting point (1-D or a scalar, as scipy requires); finite.
    *extra
        Further arguments of ``fun``: shorthand for ``args=extra``.
    jac : {None, callable, '2-point', '3-point', 'cs'}, optional
        None (the default): the exact Jacobian, from a
        :class:`hybridad.plans.jacobian.JacobianPlan` (forward or reverse mode,
        whichever has fewer seeds); a new ``(m, n)`` array per call.  Anything
        else is yours and goes to scipy unchanged (``fun`` is not traced).
    args, kwargs :
        Further positional and keyword arguments of ``fun`` (and of your
        ``jac``), as in scipy; for hybridad's Jacobian they are constants.
    backend : {"numba", "numpy"}, default "numba"
        See :func:`hybridad.compile`.
    parallel : {None, True, False}, default None
        Multithreaded loops in the Jacobian plan; None means serial (see
        :class:`Objective`).
    sparse : {None, True, False}, default None
        True: the Jacobian as a ``scipy.sparse.csr_array`` (a new one per
        call), its pattern detected from ``fun``, computed by compressed
        passes (:class:`hybridad.SparseJacobianResult`); scipy's ``trf`` and
        ``dogbox`` then solve with ``lsmr``.  None: sparse where the pattern
        is (:func:`hybridad.interop.scipy_sparse.use_sparse`) and either
        ``tr_solver="lsmr"`` is given or ``x0`` has at least
        :data:`SPARSE_LSQ_SIZE` elements; never for ``method="lm"`` (dense
        Jacobians only).
    **options
        Every other argument of ``scipy.optimize.least_squares`` (bounds,
        method, ftol, xtol, gtol, x_scale, loss, f_scale, diff_step,
        tr_solver, tr_options, jac_sparsity, max_nfev, verbose, callback,
        ...), passed unchanged.

    Returns
    -------
    scipy.optimize.OptimizeResult
        scipy's result, with ``n_evaluations`` (Jacobian plan runs; 0 with
        your own ``jac``) added.

    Examples
    --------
    >>> import numpy as np, hybridad.interop.scipy as hs
    >>> t = np.linspace(0.0, 1.0, 20)
    >>> y = 2.0 * np.exp(-1.5 * t)
    >>> res = hs.least_squares(lambda p, t, y: p[0] * np.exp(p[1] * t) - y, np.ones(2),
    ...                        args=(t, y))
    >>> np.round(res.x, 6)
    array([ 2. , -1.5])
    """
    from scipy import optimize

    args = scipy_args(extra, args)
    kwargs = {} if kwargs is None else dict(kwargs)
    if parallel is not None and not isinstance(parallel, (bool, np.bool_)):
        raise TypeError(f"parallel must be None, True or False; got {parallel!r}")
    x0 = check_x0(x0)
    residuals = None
    if jac is None:
        traced = fun
        if kwargs:  # a plan takes positional arguments: bind the keywords
            def traced(*a):
                return fun(*a, **kwargs)
        residuals = _sparse_residuals(traced, np.atleast_1d(x0), args, backend, sparse,
                                      options)
        if residuals is None:
            residuals = _Residuals(traced, np.atleast_1d(x0), args, backend, parallel)
        jac = residuals.jac if isinstance(residuals, _Residuals) else residuals
    res = optimize.least_squares(fun, x0, jac=jac, args=args, kwargs=kwargs, **options)
    res.n_evaluations = 0 if residuals is None else residuals.n_evaluations
    return res
