"""scipy.optimize integration: exact derivatives for ``minimize`` in one line.

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

from __future__ import annotations

import weakref

import numpy as np

from ..api import _lookup
from ..errors import StalePlanError
from ..plans.higher import HessianPlan, JacobianPlan
from ..results import GradientResult, HessianResult, HvpResult
from ..frontend.trace import refuse_subclass

__all__ = ["Objective", "least_squares", "minimize"]

#: methods of scipy.optimize.minimize that use the gradient
GRADIENT_METHODS = frozenset({"cg", "bfgs", "newton-cg", "l-bfgs-b", "tnc", "slsqp", "dogleg",
                              "trust-ncg", "trust-exact", "trust-krylov", "trust-constr"})
#: ... that can use Hessian-vector products (hessp)
HESSP_METHODS = frozenset({"newton-cg", "trust-ncg", "trust-krylov", "trust-constr"})
#: ... that need the Hessian matrix itself
HESS_METHODS = frozenset({"dogleg", "trust-exact"})

#: element operations per evaluation above which ``parallel=None`` builds
#: multithreaded plans.  Between two evaluations scipy runs its own linear
#: algebra, multithreaded by OpenBLAS; with both thread pools alive, each
#: one's idle workers keep cores busy and stall the other.  Measured on 2
#: cores, L-BFGS-B on Rosenbrock n = 1e5 (4e5 operations per evaluation,
#: 100 us per evaluation with 2 threads, 177 us serial): 2.8 s with a
#: multithreaded plan, 0.97 s serial, 0.93 s hand-written numba.  Threads
#: pay off only where an evaluation costs tens of milliseconds.
PARALLEL_WORK = 1 << 24


class Objective:
    """A scalar function of a vector, with exact derivatives for scipy.optimize.

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar, called as ``f(*args)`` with the
        optimized variable inserted at position ``argnums``.
    x0 : array_like
        Starting point (any shape; scipy sees it flattened).  Must be finite.
    *extra
        The other arguments of ``f`` (arrays are constants, other values static).
    args : tuple, optional
        The same, scipy's way (``args=(A,)``); give ``*extra`` or ``args``,
        not both.  A single non-tuple value is taken as ``(value,)``, as scipy
        does.
    argnums : int, default 0
        Position of the optimized variable among ``f``'s arguments.
    backend : {"numba", "numpy"}, default "numba"
        See :func:`hybridad.compile`.
    dtype : {None, numpy.float64, numpy.float32}, default None
        dtype ``f`` is evaluated in; None means float64 (see the module notes).
    parallel : {None, True, False}, default None
        Multithreaded loops in the plans (see :func:`hybridad.compile`).
        None: only for evaluations of at least :data:`PARALLEL_WORK` element
        operations; smaller ones run serially, because scipy's own
        multithreaded BLAS between the calls and the plan's worker threads
        slow each other down (2.9x on Rosenbrock n = 1e5 on 2 cores).

    Attributes
    ----------
    x0 : ndarray
        ``x0`` flattened, float64 (a copy): the vector to hand scipy.
    shape : tuple
        ``x0``'s shape.
    n_evaluations, n_hvp_evaluations : int
        How many times ``f``'s gradient plan ran (memoized calls do not
        count), and how many Hessian-vector products and Hessians its
        second-order plan (:class:`hybridad.plans.higher.HessianPlan`) computed.

    Notes
    -----
    The plan is built at construction, so an ``f`` that does not return a
    scalar or does not trace fails here, before scipy starts.  ``args``
    passed to a method (scipy's ``args=``) replace the stored ones; they are
    compared by identity for memoization -- do not change an argument array
    in place between the calls scipy makes at one point.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.optimize import minimize
    >>> from hybridad.interop.scipy import Objective
    >>> obj = Objective(lambda x, c: np.sum((x - c) ** 2), np.zeros(3), np.arange(3.0))
    >>> res = minimize(obj.fun, obj.x0, jac=obj.jac, hessp=obj.hessp, method="Newton-CG")
    >>> np.round(res.x, 6)
    array([0., 1., 2.])
    """

    def __init__(self, f, x0, *extra, args=(), argnums=0, backend="numba", dtype=None,
                 parallel=None):
        args = _scipy_args(extra, args)
        if isinstance(argnums, bool) or not isinstance(argnums, (int, np.integer)):
            raise TypeError(f"argnums must be an int (the position of x in f's arguments); "
                            f"got {argnums!r}")
        if not -len(args) - 1 <= argnums <= len(args):
            raise ValueError(f"argnums={argnums} is out of range for f called with "
                             f"{len(args) + 1} arguments")
        self.argnums = int(argnums) % (len(args) + 1)
        if parallel is not None and not isinstance(parallel, (bool, np.bool_)):
            raise TypeError(f"parallel must be None, True or False; got {parallel!r}")
        dtype = np.dtype(np.float64 if dtype is None else dtype)
        if dtype not in (np.float64, np.float32):
            raise TypeError(f"dtype must be float64 or float32; got {dtype}")
        x0 = _check_x0(x0)
        self.f = f
        self.backend = backend
        self.dtype = dtype
        self.shape = x0.shape
        self.size = x0.size
        self.x0 = np.array(x0, dtype=np.float64).reshape(-1)
        self._x = np.array(x0, dtype=dtype)  # f's argument: scipy's x is copied in here
        self._key = np.empty(self.size)  # the point of the current results (float64)
        self._same = np.empty(self.size, dtype=bool)
        self._all_same = np.empty((), dtype=bool)
        self._v = np.empty(self.shape, dtype)
        self._args = args
        self._call_args = self._with_x(args)
        try:
            # the plan cache: a new Objective for the same f and shapes reuses the plan
            self._plan = _lookup(f, self._call_args, self.argnums, backend,
                                 parallel=bool(parallel))[0]
            if parallel is None and self._plan.work >= PARALLEL_WORK:
                self._plan = _lookup(f, self._call_args, self.argnums, backend)[0]
        except ValueError as exc:
            if "must return a scalar" in str(exc):
                raise ValueError(f"{exc} (for a residual vector, "
                                 "hybridad.interop.scipy.least_squares gives scipy's "
                                 "least_squares its exact Jacobian)") from exc
            raise
        self._hvp_plan = None
        self._point = 0  # bumped whenever x or the arguments change
        self._linearized = -1  # the point the second-order plan was linearized at
        self._res = GradientResult(self._x, dtype=dtype)
        self._hres = None
        self._valid = False
        self.n_evaluations = 0
        self.n_hvp_evaluations = 0

    def _with_x(self, args):
        return args[:self.argnums] + (self._x,) + args[self.argnums:]

    # ------------------------------------------------------------- staging
    def _stage(self, x, args):
        """Copy scipy's x into our buffer; True when it is the point of the
        current results (contents compared, not identity)."""
        if args and args is not self._args:
            if len(args) != len(self._args) or any(
                    a is not b for a, b in zip(args, self._args, strict=True)):
                self._args, self._call_args, self._valid = args, self._with_x(args), False
                self._point += 1
        if type(x) is not np.ndarray:
            x = np.asarray(x, dtype=np.float64)
        if x.size != self.size:
            raise ValueError(f"x has {x.size} elements; the objective was built for x0 with "
                             f"{self.size} (shape {self.shape})")
        flat = x.reshape(-1)
        if self._valid:
            np.equal(flat, self._key, out=self._same)
            if self._same.all(out=self._all_same):  # (no 0-d result allocated)
                return True
        np.copyto(self._key, flat, casting="unsafe")
        np.copyto(self._x, self._key.reshape(self.shape), casting="unsafe")
        self._valid = False
        self._point += 1
        return False

    def _evaluate(self, x, args):
        if not self._stage(x, args) or self._changed():
            try:
                self._plan.gradient(*self._call_args, out=self._res)
            except StalePlanError:  # f changed (its globals, closure, ...): a new plan
                self._plan = _lookup(self.f, self._call_args, self.argnums, self.backend,
                                     parallel=self._plan.parallel, stale=self._plan)[0]
                self._hvp_plan = None
                self._plan.gradient(*self._call_args, out=self._res)
            self.n_evaluations += 1
            self._valid = True

    def _changed(self):
        """Whether what ``f`` reads besides its arguments changed since the
        memoized results were computed (:mod:`hybridad.frontend.guards`)."""
        if self._plan._stale_reason(self._call_args) is not None:
            self._valid = False
            self._point += 1
            return True
        return False

    def _float64_copy(self, buf):
        return buf.astype(np.float64).reshape(-1)  # a new array: scipy may keep it

    # ------------------------------------------------------------ the API
    def fun(self, x, *args):
        """f at x, as a Python float."""
        self._evaluate(x, args)
        return float(self._res.value)

    def jac(self, x, *args):
        """The gradient at x: a new float64 vector (scipy may keep it)."""
        self._evaluate(x, args)
        return self._float64_copy(self._res.gradient)

    def value_and_grad(self, x, *args):
        """``(f(x), gradient)`` in one evaluation, for ``minimize(..., jac=True)``."""
        self._evaluate(x, args)
        return float(self._res.value), self._float64_copy(self._res.gradient)

    def _second_order(self, x, args):
        """The Hessian plan, linearized at x (value and gradient come with it)."""
        if self._hvp_plan is None:
            parallel = self._plan.parallel
            self._hvp_plan = _lookup(
                self.f, self._call_args, self.argnums, self.backend, tag=(
                    "hessian", None, parallel), build=lambda: HessianPlan(
                    self.f, self._call_args, self.argnums, self.backend, parallel=parallel))[0]
            self._hres = HvpResult(self._x, dtype=self.dtype)
            self._hfull = HessianResult(self._x, dtype=self.dtype)
        if self._stage(x, args):
            self._changed()
        if self._linearized != self._point:
            try:
                self._hvp_plan.linearize(*self._call_args, out=self._res)
            except StalePlanError:  # f changed: new plans
                parallel = self._hvp_plan.parallel
                self._hvp_plan = _lookup(
                    self.f, self._call_args, self.argnums, self.backend, stale=self._hvp_plan,
                    tag=("hessian", None, parallel), build=lambda: HessianPlan(
                        self.f, self._call_args, self.argnums, self.backend,
                        parallel=parallel))[0]
                self._plan = _lookup(self.f, self._call_args, self.argnums, self.backend,
                                     parallel=self._plan.parallel)[0]
                self._hvp_plan.linearize(*self._call_args, out=self._res)
            self._linearized, self._valid = self._point, True
        return self._hvp_plan

    def _hvp(self, x, p, args):
        plan = self._second_order(x, args)
        p = np.asarray(p)
        if p.size != self.size:
            raise ValueError(f"p has {p.size} elements; expected {self.size}")
        np.copyto(self._v, p.reshape(self.shape), casting="unsafe")
        plan.hvp(v=self._v, out=self._hres)  # the tangent pass only
        self.n_hvp_evaluations += 1
        return self._hres.hvp

    def hessp(self, x, p, *args):
        """The Hessian at x times p (the Hessian is not formed): a new float64 vector.

        The forward and backward passes run once per x (``linearize``); each
        ``p`` at the same x costs only the tangent pass."""
        return self._float64_copy(self._hvp(x, p, args))

    def hess(self, x, *args):
        """The Hessian matrix at x, ``(n, n)`` float64, symmetric (a new array).

        Forward over reverse in chunks of tangents (:meth:`HessianPlan.hessian`),
        then symmetrized (``(H + H.T) / 2``, which only removes rounding).
        """
        self._second_order(x, args)
        self._hvp_plan.hessian(*self._call_args, out=self._hfull)
        self.n_hvp_evaluations += 1
        h = self._hfull.hessian.astype(np.float64)
        h += h.T
        h *= 0.5
        return h


def _scipy_args(extra, args):
    """The arguments after ``x``: hybridad's positional ``*extra`` or scipy's
    ``args=`` (a non-tuple value is one argument, as in scipy)."""
    if not isinstance(args, tuple):
        args = (args,)
    if extra and args:
        raise TypeError("give f's further arguments either positionally after x0 or as "
                        "args=(...), not both")
    return tuple(extra) or args


def _check_x0(x0):
    """``x0`` as an ndarray: real, non-empty, finite, not an ndarray subclass."""
    refuse_subclass(x0, "x0")  # np.asarray would drop a mask, or matrix semantics
    try:
        x0 = np.asarray(x0)
    except Exception as exc:  # noqa: BLE001
        raise TypeError(f"x0 must be an array of numbers; got {type(x0).__name__}") \
            from exc
    if x0.dtype.kind not in "biuf" or x0.size == 0:
        raise TypeError(f"x0 must be a non-empty real array; got dtype {x0.dtype} and "
                        f"shape {x0.shape}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 contains NaN or infinity: scipy's methods cannot start there")
    return x0


_FIRST_OUTPUTS = weakref.WeakKeyDictionary()


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

    if kind == "hessp":
        def call(x, p, *args):
            return np.reshape(g(np.reshape(x, shape), np.reshape(p, shape), *args), -1)
    elif kind == "hess":
        def call(x, *args):
            h = g(np.reshape(x, shape), *args)
            return h if not isinstance(h, np.ndarray) else np.reshape(h, (n, n))
    else:
        def call(x, *args):
            return np.reshape(g(np.reshape(x, shape), *args), -1)
    return call


def minimize(fun, x0, *extra, args=(), method=None, jac=None, hess=None, hessp=None,
             bounds=None, constraints=(), tol=None, callback=None, options=None, argnums=0,
             backend="numba", dtype=None, parallel=None):
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

    args = _scipy_args(extra, args)
    name = method.lower() if isinstance(method, str) else ""
    uses_gradient = method is None or callable(method) or name in GRADIENT_METHODS
    exact_hess = hess is None and hessp is None and name in HESSP_METHODS | HESS_METHODS
    user_jac = jac is not None
    if argnums != 0 and any(callable(g) for g in (jac, hess, hessp)):
        raise TypeError("a jac, hess or hessp callable of your own is called by scipy as "
                        "g(x, *args): it needs argnums=0 (x as fun's first argument)")
    obj = None
    if not user_jac or exact_hess:
        # hybridad evaluates fun (jac None) or supplies the Hessian: trace it
        traced = _first_output(fun) if jac is True else fun
        obj = Objective(traced, x0, args=args, argnums=argnums, backend=backend,
                        dtype=dtype, parallel=parallel)
        shape, x_start = obj.shape, obj.x0
    else:
        x0 = _check_x0(x0)
        shape, x_start = x0.shape, np.array(x0, dtype=np.float64).reshape(-1)
    if user_jac:
        f_scipy = _as_user_calls(fun, shape, argnums, jac is True)
        jac = _shaped(jac, shape, "jac")
    elif uses_gradient:
        f_scipy, jac = obj.value_and_grad, True
    else:  # a method without derivatives: the value, from the plan
        f_scipy = obj.fun
    if exact_hess:
        if name in HESS_METHODS:
            hess = obj.hess
        else:
            hessp = obj.hessp
    else:
        hess, hessp = _shaped(hess, shape, "hess"), _shaped(hessp, shape, "hessp")
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
                       build=lambda: JacobianPlan(self.fun, call_args, 0, self.backend,
                                                  parallel=self.parallel))[0]

    def jac(self, x, *args, **kwargs):
        """The Jacobian at ``x``: a new ``(m, n)`` float64 array (scipy keeps it)."""
        if args and (len(args) != len(self._args) or any(
                a is not b for a, b in zip(args, self._args, strict=True))):
            self._args, self._call_args = args, (self._x, *args)
        x = np.asarray(x)
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


def least_squares(fun, x0, *extra, jac=None, args=(), kwargs=None, backend="numba",
                  parallel=None, **options):
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
        :class:`hybridad.plans.higher.JacobianPlan` (forward or reverse mode,
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

    args = _scipy_args(extra, args)
    kwargs = {} if kwargs is None else dict(kwargs)
    if parallel is not None and not isinstance(parallel, (bool, np.bool_)):
        raise TypeError(f"parallel must be None, True or False; got {parallel!r}")
    x0 = _check_x0(x0)
    residuals = None
    if jac is None:
        traced = fun
        if kwargs:  # a plan takes positional arguments: bind the keywords
            def traced(*a):
                return fun(*a, **kwargs)
        residuals = _Residuals(traced, np.atleast_1d(x0), args, backend, parallel)
        jac = residuals.jac
    res = optimize.least_squares(fun, x0, jac=jac, args=args, kwargs=kwargs, **options)
    res.n_evaluations = 0 if residuals is None else residuals.n_evaluations
    return res
