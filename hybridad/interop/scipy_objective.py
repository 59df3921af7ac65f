"""The scipy adapter of a scalar function: :class:`Objective` (scipy's ``fun``,
``jac``, ``hess``, ``hessp`` and ``value_and_grad``, memoized, never aliasing
scipy's arrays), with the argument checks :func:`minimize` and
:func:`least_squares` share (:func:`scipy_args`, :func:`check_x0`).  The
conventions are those of :mod:`hybridad.interop.scipy`."""

from __future__ import annotations

import functools

import numpy as np

from .._forksafe import RLock
from ..plans.cache import lookup as _lookup
from ..errors import StalePlanError
from ..core.supported import refuse_subclass
from ..api import hessian_colors
from ..plans.hessian import HessianPlan
from ..plans.validate import real_values
from ..results import GradientResult, HessianResult

__all__ = ["PARALLEL_WORK", "Objective", "check_x0", "scipy_args"]

#: element operations per evaluation above which ``parallel=None`` builds
#: multithreaded plans.  Between two evaluations scipy runs its own linear
#: algebra, multithreaded by OpenBLAS; with both thread pools alive, each
#: one's idle workers keep cores busy and stall the other.  Measured on 2
#: cores, L-BFGS-B on Rosenbrock n = 1e5 (4e5 operations per evaluation,
#: 100 us per evaluation with 2 threads, 177 us serial): 2.8 s with a
#: multithreaded plan, 0.97 s serial, 0.93 s hand-written numba.  Threads
#: pay off only where an evaluation costs tens of milliseconds.
PARALLEL_WORK = 1 << 24


def _locked(method):
    """A method of :class:`Objective` run under its lock (its memoized point and
    buffers serve one call at a time: threads may share an objective)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return call


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
        second-order plan (:class:`hybridad.plans.hessian.HessianPlan`) computed.

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
        args = scipy_args(extra, args)
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
        x0 = check_x0(x0)
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
                                 "hybridad.scipy.least_squares gives scipy's "
                                 "least_squares its exact Jacobian)") from exc
            raise
        self._hvp_plan = None
        self._point = 0  # bumped whenever x or the arguments change
        self._linearized = -1  # the point the second-order plan was linearized at
        #: this objective's last linearization of the second-order plan -- a plan the
        #: cache shares with every objective of ``f`` at these shapes: another one's
        #: linearization in between moves the plan's point (see :meth:`_hvp`)
        self._token = object()
        #: one call at a time: the memoized point and results are this object's
        self._lock = RLock()
        self._res = GradientResult(self._x, dtype=dtype)
        self._hv = None
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
        if type(x) is not np.ndarray or x.dtype.kind != "f":
            x = real_values(x, "x")  # (complex: refused, not cut to its real part)
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
    @_locked
    def fun(self, x, *args):
        """f at x, as a Python float."""
        self._evaluate(x, args)
        return float(self._res.value)

    @_locked
    def jac(self, x, *args):
        """The gradient at x: a new float64 vector (scipy may keep it)."""
        self._evaluate(x, args)
        return self._float64_copy(self._res.gradient)

    @_locked
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
                    "hessian", None, parallel), build=lambda g: HessianPlan(
                    g, self._call_args, self.argnums, self.backend, parallel=parallel,
                    colors=hessian_colors))[0]
            self._hv = np.zeros_like(self._x)  # (H v: shaped and typed like x)
            self._hfull = HessianResult(self._x, dtype=self.dtype)
        if self._stage(x, args):
            self._changed()
        if self._linearized != self._point or \
                getattr(self._hvp_plan, "_objective_token", None) is not self._token:
            try:
                self._linearize(self._hvp_plan)
            except StalePlanError:  # f changed: new plans
                parallel = self._hvp_plan.parallel
                self._hvp_plan = _lookup(
                    self.f, self._call_args, self.argnums, self.backend, stale=self._hvp_plan,
                    tag=("hessian", None, parallel), build=lambda g: HessianPlan(
                        g, self._call_args, self.argnums, self.backend,
                        parallel=parallel, colors=hessian_colors))[0]
                self._plan = _lookup(self.f, self._call_args, self.argnums, self.backend,
                                     parallel=self._plan.parallel)[0]
                self._linearize(self._hvp_plan)
            self._linearized, self._valid = self._point, True
        return self._hvp_plan

    def _linearize(self, plan):
        """``plan`` linearized at this objective's point, and marked as such --
        one step for other threads (under the plan's lock): the mark always
        names the objective whose point the plan holds."""
        with plan._lock:
            plan.linearize(*self._call_args, out=self._res)
            self._token = plan._objective_token = object()

    def _hvp(self, x, p, args):
        p = real_values(p, "p")
        if p.size != self.size:
            raise ValueError(f"p has {p.size} elements; expected {self.size}")
        while True:
            plan = self._second_order(x, args)
            with plan._lock:  # (the point and the tangent pass, with no other objective's
                # linearization of the shared plan in between)
                if getattr(plan, "_objective_token", None) is not self._token:
                    continue  # (another's came first: linearized again)
                np.copyto(self._v, p.reshape(self.shape), casting="unsafe")
                plan.hvp(v=self._v, out=self._hv)  # the tangent pass only, H v alone
                self.n_hvp_evaluations += 1
                return self._hv

    @_locked
    def hessp(self, x, p, *args):
        """The Hessian at x times p (the Hessian is not formed): a new float64 vector.

        The forward and backward passes run once per x (``linearize``); each
        ``p`` at the same x costs only the tangent pass."""
        return self._float64_copy(self._hvp(x, p, args))

    @_locked
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


def scipy_args(extra, args):
    """The arguments after ``x``: hybridad's positional ``*extra`` or scipy's
    ``args=`` (a non-tuple value is one argument, as in scipy)."""
    if not isinstance(args, tuple):
        args = (args,)
    if extra and args:
        raise TypeError("give f's further arguments either positionally after x0 or as "
                        "args=(...), not both")
    return tuple(extra) or args


def check_x0(x0):
    """``x0`` as an ndarray: real, non-empty, finite, not an ndarray subclass."""
    refuse_subclass(x0, "x0")  # np.asarray would drop a mask, or matrix semantics
    several = isinstance(x0, dict) or isinstance(x0, (list, tuple)) and any(
        isinstance(a, (np.ndarray, list, tuple, dict)) for a in x0)
    kind = type(x0).__name__
    try:
        x0 = np.asarray(x0)
    except Exception as exc:  # noqa: BLE001
        if several:
            raise _pieces(kind) from exc
        raise TypeError(f"x0 must be an array of numbers; got {type(x0).__name__}") \
            from exc
    if several and x0.dtype.kind == "O":
        raise _pieces(kind)
    if x0.dtype.kind not in "biuf" or x0.size == 0:
        raise TypeError(f"x0 must be a non-empty real array; got dtype {x0.dtype} and "
                        f"shape {x0.shape}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 contains NaN or infinity: scipy's methods cannot start there")
    return x0


def _pieces(kind):
    return TypeError(f"x0 must be one real array (scipy's methods move one flat vector); got a "
                     f"{kind} of arrays. Concatenate them (np.concatenate([a.ravel() for a in "
                     f"...])) and unpack the pieces in fun")
