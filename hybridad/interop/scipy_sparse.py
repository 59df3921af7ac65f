"""Sparse derivatives for scipy.optimize: :class:`SparseJacobian` (a residual or
constraint function's Jacobian for ``least_squares`` and ``trust-constr``),
:class:`SparseHessian` (an objective's Hessian for ``trust-constr``) and
:class:`NonlinearConstraint` (scipy's, with hybridad's exact sparse Jacobian
and Hessian of ``v . c(x)``), with the rule :func:`use_sparse` that decides
when a sparse matrix pays.

Each is a callable scipy calls with its flat ``x``; the derivative is
computed into a :class:`hybridad.SparseJacobianResult` /
:class:`hybridad.SparseHessianResult` (one compressed pass, no allocation)
and handed to scipy as a **copy** of the ``csr_array``: scipy wraps what it
gets in a ``csr_matrix`` that shares the arrays, and keeps it.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from .. import api
from ..errors import TracingError
from ..plans.validate import real_values
from ..sparse import SparseHessianResult, SparseJacobianResult

__all__ = ["SPARSE_DENSITY", "SPARSE_MIN_SIZE", "NonlinearConstraint", "SparseHessian",
           "SparseJacobian", "use_sparse"]

#: ``sparse=None`` hands scipy a sparse matrix when at most this fraction of it is nonzero ...
SPARSE_DENSITY = 0.1
#: ... and it has at least this many columns (below, dense linear algebra is as fast)
SPARSE_MIN_SIZE = 200


def use_sparse(sparse, pattern):
    """Whether to hand scipy a sparse matrix: ``sparse`` if given, else by the
    pattern's size and density (:data:`SPARSE_DENSITY`, :data:`SPARSE_MIN_SIZE`)."""
    if sparse is not None:
        return bool(sparse)
    m, n = pattern.shape
    return n >= SPARSE_MIN_SIZE and pattern.nnz <= SPARSE_DENSITY * m * n


def _detected(make, sparse):
    """``make()`` -- a sparse result, its pattern read off a trace of ``fun``
    from shapes alone -- or None where that trace meets a Python decision on
    a value (``if x.max() > 5``, builtin ``max``), which only a call's values
    decide: then the dense derivatives serve (``sparse=None``), or the
    refusal says so (``sparse=True``)."""
    try:
        return make()
    except TracingError as exc:
        if sparse:
            raise TracingError(f"{exc} -- while reading the sparsity pattern off a trace from "
                               "shapes alone (sparse=True); sparse=False or sparse=None gives "
                               "dense derivatives, which take the values' decisions") from exc
        return None


class _AtX:
    """``f`` called with a buffer of ours for ``x``, inserted at ``argnums``
    among ``args``, in ``x0``'s shape; scipy's flat ``x`` is copied in."""

    def __init__(self, fun, x0, args, argnums):
        self.fun, self.argnums = fun, int(argnums)
        self._x = np.array(x0, dtype=np.float64)
        self._flat = self._x.reshape(-1)
        self._args = tuple(args)
        self.call_args = self._with_x(self._args)

    def _with_x(self, args):
        return args[:self.argnums] + (self._x,) + args[self.argnums:]

    def stage(self, x, args):
        if args and (len(args) != len(self._args) or any(
                a is not b for a, b in zip(args, self._args, strict=True))):
            self._args, self.call_args = tuple(args), self._with_x(tuple(args))
        x = real_values(x, "x")
        if x.size != self._flat.size:
            raise ValueError(f"x has {x.size} elements; expected {self._flat.size}")
        np.copyto(self._flat, x.reshape(-1), casting="unsafe")
        return self.call_args


class SparseJacobian(_AtX):
    """``jac(x, *args)``: the exact Jacobian of ``fun`` at ``x`` for scipy, a new
    ``scipy.sparse.csr_array`` (or, with ``sparse=False``, a new dense array) per call.

    Parameters
    ----------
    fun : callable
        Plain numpy code returning a vector, ``fun(x, *args)`` (``x`` at
        position ``argnums``).
    x0 : array_like
        A point (its shape is ``x``'s).
    args : tuple
        The other arguments.
    argnums : int, default 0
    sparse : bool or None
        None: sparse when :func:`use_sparse` says so.
    backend : str, optional

    Attributes
    ----------
    result : SparseJacobianResult
        Where each call computes (its ``jacobian`` is overwritten by the next).
    sparse : bool
    n_evaluations : int
    """

    def __init__(self, fun, x0, args=(), argnums=0, sparse=None, backend=None):
        super().__init__(fun, x0, args, argnums)
        self.backend = backend
        self.result = _detected(lambda: SparseJacobianResult(fun, *self.call_args,
                                                             argnums=self.argnums), sparse)
        # (no pattern: a decision on a value in fun; dense Jacobians, api.jacobian's)
        self.sparse = self.result is not None and use_sparse(sparse, self.result.pattern)
        self.n_evaluations = 0

    def evaluate(self, x, *args):
        """Compute at ``x`` into :attr:`result` (nothing is allocated); returns it
        (without a pattern, a new dense result)."""
        call = self.stage(x, args)
        res = api.jacobian(self.fun, *call, argnums=self.argnums, out=self.result,
                           backend=self.backend)
        self.n_evaluations += 1
        return res

    def __call__(self, x, *args, **kwargs):
        res = self.evaluate(x, *args)
        if self.result is None:
            return np.array(res.jacobian)
        return res.jacobian.copy() if self.sparse else res.jacobian.toarray()


class SparseHessian(_AtX):
    """``hess(x, *args)``: the exact Hessian of a scalar ``fun`` at ``x`` for
    scipy, a new symmetric ``scipy.sparse.csr_array`` per call (both triangles).

    Parameters are those of :class:`SparseJacobian`.

    Attributes
    ----------
    result : SparseHessianResult
    n_evaluations : int
    """

    def __init__(self, fun, x0, args=(), argnums=0, backend=None, sparse=None):
        super().__init__(fun, x0, args, argnums)
        self.backend = backend
        self.result = _detected(lambda: SparseHessianResult(fun, *self.call_args,
                                                            argnums=self.argnums), sparse)
        self.n_evaluations = 0

    def evaluate(self, x, *args):
        """Compute value, gradient and Hessian at ``x`` into :attr:`result`
        (without a pattern -- a decision on a value in ``fun`` -- a new dense
        result)."""
        call = self.stage(x, args)
        res = api.hessian(self.fun, *call, argnums=self.argnums, out=self.result,
                          backend=self.backend)
        self.n_evaluations += 1
        return res

    def __call__(self, x, *args):
        h = self.evaluate(x, *args).hessian
        return np.array(h) if self.result is None else h.copy()


def _weighted(fun):
    def lagrangian(x, v):
        return np.sum(v * fun(x))

    lagrangian.__qualname__ = f"{getattr(fun, '__qualname__', 'c')}[v . c(x)]"
    return lagrangian


class NonlinearConstraint(scipy.optimize.NonlinearConstraint):
    """``scipy.optimize.NonlinearConstraint`` whose Jacobian and Hessian hybridad
    supplies: ``jac`` the exact Jacobian of ``fun`` (sparse where its pattern
    is), ``hess(x, v)`` the exact sparse Hessian of ``v . fun(x)``.

    Parameters
    ----------
    fun : callable
        Plain numpy code, ``fun(x)`` -> vector (``x`` scipy's flat vector).
    lb, ub : array_like
        Bounds, as in scipy.
    x0 : array_like, optional
        A point (for the shapes).  Without it, :func:`hybridad.scipy.minimize`
        supplies its own ``x0``; with it, the constraint works with plain
        ``scipy.optimize.minimize`` too.
    sparse : bool or None
        Sparse Jacobians (None: where :func:`use_sparse` says so).
    hess : bool, default True
        The exact Hessian of ``v . fun(x)``; False: scipy's default (BFGS).
    **kwargs
        ``keep_feasible`` and the other arguments of scipy's constraint.

    Examples
    --------
    >>> import numpy as np, hybridad.scipy as hs
    >>> con = hs.NonlinearConstraint(lambda x: x[:-1] ** 2 + x[1:] ** 2, 0.0, 1.0)
    >>> res = hs.minimize(lambda x: np.sum((x - 2.0) ** 2), np.zeros(4),
    ...                   method="trust-constr", constraints=[con])
    >>> bool(np.all(res.x[:-1] ** 2 + res.x[1:] ** 2 <= 1.0 + 1e-6))
    True
    """

    def __init__(self, fun, lb, ub, x0=None, sparse=None, hess=True, **kwargs):
        super().__init__(fun, lb, ub, **kwargs)
        self._sparse, self._exact_hess = sparse, bool(hess)
        self.jacobian = self.hessian = None
        if x0 is not None:
            self.bind(x0)

    def bind(self, x0):
        """Build the Jacobian (and Hessian) callables at ``x0``'s shape (flat)."""
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        self.jacobian = SparseJacobian(self.fun, x0, sparse=self._sparse)
        self.jac = self.jacobian
        if self._exact_hess:
            m = np.size(self.jacobian.result.value if self.jacobian.result is not None
                        else self.jacobian.evaluate(x0).value)
            self.hessian = SparseHessian(_weighted(self.fun), x0, (np.zeros(m),), 0,
                                         sparse=self._sparse)
            self.hess = self._hess
        return self

    def _hess(self, x, v):
        # v is data (an argument), x is differentiated
        h = self.hessian
        np.copyto(h._args[0], real_values(v, "v").reshape(-1), casting="unsafe")
        return h(x, h._args[0])

    @property
    def bound(self):
        """Whether the derivatives are built (see :meth:`bind`)."""
        return self.jacobian is not None
