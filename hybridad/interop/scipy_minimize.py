"""``minimize``: ``scipy.optimize.minimize`` with hybridad's exact gradient,
Hessian or Hessian-vector products (from an :class:`Objective`) filling in
what the caller leaves out, for every method; a shaped ``x0`` and user
derivatives adapted to scipy's flat vectors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import scipy.optimize

    from .._types import Backend

import weakref

import numpy as np

from .scipy_objective import Objective, check_x0, scipy_args

__all__ = ["GRADIENT_METHODS", "HESSP_METHODS", "HESS_METHODS", "minimize"]

#: methods of scipy.optimize.minimize that use the gradient
GRADIENT_METHODS = frozenset({"cg", "bfgs", "newton-cg", "l-bfgs-b", "tnc", "slsqp", "dogleg",
                              "trust-ncg", "trust-exact", "trust-krylov", "trust-constr"})
#: ... that can use Hessian-vector products (hessp)
HESSP_METHODS = frozenset({"newton-cg", "trust-ncg", "trust-krylov", "trust-constr"})
#: ... that need the Hessian matrix itself
HESS_METHODS = frozenset({"dogleg", "trust-exact"})


_FIRST_OUTPUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _first_output(f):
    """``f``'s value alone, for an ``f`` returning ``(value, gradient)``
    (``jac=True``): what hybridad traces for the Hessian.  One wrapper per
    ``f``, so its plans are cached like ``f``'s."""
    try:
        return _FIRST_OUTPUTS[f]
    except (KeyError, TypeError):
        pass

    def value(*args):
        return f(*args)[0]

    value.__name__ = value.__qualname__ = f"{getattr(f, '__name__', 'f')}[0]"
    try:
        _FIRST_OUTPUTS[f] = value
    except TypeError:  # not weakly referenceable
        pass
    return value


def _as_user_calls(f, shape, argnums, returns_grad):
    """``f`` called as scipy calls it (``f(x, *args)``, ``x`` flat) but with
    ``x`` at position ``argnums`` in ``x0``'s shape; with ``returns_grad`` the
    gradient it returns comes back flat."""
    if argnums == 0 and len(shape) == 1:
        return f

    def call(x, *args):
        x = np.reshape(x, shape)
        out = f(*args[:argnums], x, *args[argnums:])
        if returns_grad:
            value, grad = out
            return value, np.reshape(grad, -1)
        return out

    return call


def _shaped(g, shape, kind):
    """A user ``jac`` / ``hess`` / ``hessp`` for a shaped ``x0``: it gets ``x``
    (and ``p``) in ``x0``'s shape and its result comes back flat (``hess``:
    ``(n, n)``)."""
    if not callable(g) or len(shape) == 1:
        return g
    n = int(np.prod(shape, dtype=np.int64))

    call: Callable[..., Any]
    if kind == "hessp":
        def call(x, p, *args):
            return np.reshape(g(np.reshape(x, shape), np.reshape(p, shape), *args), -1)
    elif kind == "hess":
        def call(x, *args):  # type: ignore[misc]
            h = g(np.reshape(x, shape), *args)
            return h if not isinstance(h, np.ndarray) else np.reshape(h, (n, n))
    else:
        def call(x, *args):  # type: ignore[misc]
            return np.reshape(g(np.reshape(x, shape), *args), -1)
    return call


def _sparse_hessian(obj, sparse):
    """trust-constr's ``hess``: a :class:`hybridad.interop.scipy_sparse.SparseHessian`
    where a sparse Hessian is asked for or pays, else None."""
    from .scipy_sparse import SPARSE_MIN_SIZE, SparseHessian, use_sparse

    if sparse is False or sparse is None and obj.size < SPARSE_MIN_SIZE:
        return None
    hess = SparseHessian(obj.f, obj.x0.reshape(obj.shape), obj._args, obj.argnums,
                         obj.backend, sparse=sparse)
    if hess.result is None:  # (a decision on a value in f: the dense Hessian, obj's)
        return None
    return hess if use_sparse(sparse, hess.result.pattern) else None


def _bind_constraints(constraints, x0):
    """hybridad's NonlinearConstraints get their derivatives at ``x0``'s size."""
    from .scipy_sparse import NonlinearConstraint

    many = isinstance(constraints, (list, tuple))
    for c in constraints if many else [constraints]:
        if isinstance(c, NonlinearConstraint) and not c.bound:
            c.bind(x0)
    return constraints


def minimize(fun: Callable[..., Any], x0: Any, *extra: Any, args: tuple = (),
             method: str | Callable[..., Any] | None = None, jac: Any = None,
             hess: Any = None, hessp: Any = None, bounds: Any = None, constraints: Any = (),
             tol: float | None = None, callback: Callable[..., Any] | None = None,
             options: dict | None = None, argnums: int = 0, backend: Backend = "numba",
             dtype: Any = None, parallel: bool | None = None,
             sparse: bool | None = None) -> scipy.optimize.OptimizeResult:
    """``scipy.optimize.minimize`` with hybridad's exact derivatives wired in.

    Every argument scipy has means what scipy's documentation says; hybridad
    supplies the derivatives you leave out (``jac=None``, and ``hess=None``
    with ``hessp=None`` for the methods that use a Hessian).

    Parameters
    ----------
    fun : callable
        Plain numpy code returning a scalar, ``fun(x, *args)`` (``x`` at
        position ``argnums``, in ``x0``'s shape); with ``jac=True`` it returns
        ``(value, gradient)``, as in scipy.
    x0 : array_like
        Starting point, any shape (finite).
    *extra
        Further arguments of ``fun``: shorthand for ``args=extra``.
    args : tuple, optional
        Further arguments of ``fun`` -- and of your ``jac``, ``hess`` and
        ``hessp`` -- after ``x``, as in scipy.  For hybridad's derivatives they
        are constants (arrays) or static values.
    method : str or callable, optional
        Any method of ``scipy.optimize.minimize``.
    jac : {None, True, False, callable, '2-point', '3-point', 'cs'}, optional
        None (the default): hybridad's exact gradient, for every method that
        uses one (value and gradient from one evaluation, handed to scipy as
        ``jac=True``).  Anything else is yours and goes to scipy unchanged:
        ``fun`` is not traced for the gradient (``True``: ``fun`` returns
        ``(value, gradient)`` and its gradient is used; a callable is called
        as ``jac(x, *args)``; ``False`` and the strings are scipy's finite
        differences).
    hess, hessp : callable, str or scipy.optimize.HessianUpdateStrategy, optional
        Yours when given (either one), passed to scipy unchanged.  When both
        are None hybridad gives Newton-CG, trust-ncg, trust-krylov and
        trust-constr exact Hessian-vector products (``hessp``), trust-exact and
        dogleg the exact Hessian matrix (``hess``).  With ``jac=True`` they
        come from tracing ``fun(x)[0]``.
    bounds, constraints, tol, callback, options :
        Passed to scipy unchanged (constraint functions and callbacks see
        scipy's flat ``x``; both callback forms, ``callback(xk)`` and
        ``callback(intermediate_result)``, work as scipy documents).
    argnums, backend, dtype, parallel :
        See :class:`Objective`.  A user ``jac`` / ``hess`` / ``hessp``
        callable requires ``argnums=0`` (scipy calls them with ``x`` first).
    sparse : {None, True, False}, default None
        trust-constr only: the exact Hessian as a ``scipy.sparse.csr_array``
        (True), its pattern detected from ``fun`` and computed by compressed
        Hessian-vector products (:class:`hybridad.SparseHessianResult`), instead
        of Hessian-vector products (False); None: sparse when the pattern is
        (:func:`hybridad.interop.scipy_sparse.use_sparse`).  Constraints made
        with :class:`hybridad.scipy.NonlinearConstraint` get their exact
        (sparse) Jacobians and Hessians whatever this is.

    Returns
    -------
    scipy.optimize.OptimizeResult
        scipy's result, with ``x`` (and ``jac``) reshaped to ``x0``'s shape and
        ``n_evaluations`` / ``n_hvp_evaluations`` (hybridad's plan runs; 0
        when hybridad computed nothing) added.

    Notes
    -----
    With a shaped (not 1-D) ``x0``, ``fun`` and your ``jac`` / ``hess`` /
    ``hessp`` receive ``x`` (and ``p``) in ``x0``'s shape and what they return
    is flattened for scipy.

    Examples
    --------
    >>> import numpy as np, hybridad.interop.scipy as hs
    >>> res = hs.minimize(lambda x: np.sum((x - 3.0) ** 2), np.zeros((2, 2)), method="BFGS")
    >>> res.x.shape, bool(np.allclose(res.x, 3.0))
    ((2, 2), True)
    >>> res = hs.minimize(lambda x, c: np.sum((x - c) ** 2), np.zeros(2),
    ...                   args=(np.array([1.0, 2.0]),), method="trust-ncg")
    >>> np.round(res.x, 6)
    array([1., 2.])
    """
    from scipy import optimize

    args = scipy_args(extra, args)
    name = method.lower() if isinstance(method, str) else ""
    uses_gradient = method is None or callable(method) or name in GRADIENT_METHODS
    exact_hess = hess is None and hessp is None and name in HESSP_METHODS | HESS_METHODS
    user_jac = jac is not None
    if argnums != 0 and any(callable(g) for g in (jac, hess, hessp)):
        raise TypeError("a jac, hess or hessp callable of your own is called by scipy as "
                        "g(x, *args): it needs argnums=0 (x as fun's first argument)")
    obj: Any = None
    if not user_jac or exact_hess:
        # hybridad evaluates fun (jac None) or supplies the Hessian: trace it
        traced = _first_output(fun) if jac is True else fun
        obj = Objective(traced, x0, args=args, argnums=argnums, backend=backend,
                        dtype=dtype, parallel=parallel)
        shape, x_start = obj.shape, obj.x0
    else:
        x0 = check_x0(x0)
        shape, x_start = x0.shape, np.array(x0, dtype=np.float64).reshape(-1)
    if user_jac:
        f_scipy = _as_user_calls(fun, shape, argnums, jac is True)
        jac = _shaped(jac, shape, "jac")
    elif uses_gradient:
        f_scipy, jac = obj.value_and_grad, True
    else:  # a method without derivatives: the value, from the plan
        f_scipy = obj.fun
    if exact_hess:
        sparse_hess = _sparse_hessian(obj, sparse) if name == "trust-constr" else None
        if name in HESS_METHODS:
            hess = obj.hess
        elif sparse_hess is not None:
            hess = sparse_hess
        else:
            hessp = obj.hessp
    else:
        hess, hessp = _shaped(hess, shape, "hess"), _shaped(hessp, shape, "hessp")
    constraints = _bind_constraints(constraints, x_start)
    res = optimize.minimize(f_scipy, x_start, args=args, method=method, jac=jac, hess=hess,
                            hessp=hessp, bounds=bounds, constraints=constraints, tol=tol,
                            callback=callback, options=options)
    size = x_start.size
    res.x = np.reshape(res.x, shape)
    if isinstance(res.get("jac"), np.ndarray) and res.jac.size == size:
        res.jac = np.reshape(res.jac, shape)
    res.n_evaluations = 0 if obj is None else obj.n_evaluations
    res.n_hvp_evaluations = 0 if obj is None else obj.n_hvp_evaluations
    return res
