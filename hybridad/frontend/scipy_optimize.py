"""scipy.optimize's root finders on traced values: ``brentq``, ``brenth``,
``ridder``, ``bisect``, ``toms748`` and ``fsolve``.

While a function is traced, a call of one whose residual reaches a traced
value (an argument of ``args``, or a value the residual closes over) traces
the residual ONCE, on a tracer of ``x`` (as :func:`hybridad.fori_loop` traces
its body), and becomes one ``root`` node (:mod:`hybridad.ops.root`):
scipy's own solver at every call, differentiated by the implicit function
theorem.  A call that reaches no traced value is scipy's, on values.  The
bracket and the starting point are read at every call, and carry no
derivative (the root does not move with them).
"""

from __future__ import annotations

import numpy as np

from ..core.trace import bind, current_trace
from ..core.tracer import Tracer
from ..errors import TracingError
from ..ops.host import resolve
from ..ops.loop import replay
from ..ops.root import BRACKETING, DERIVATIVE_FREE, GRADIENT_METHODS, gradient_body
from .scipy_integrate import _option, body_graph, traced_body
from .scipy_special import intercepts

__all__ = ["RootResults", "fsolve", "minimize", "root", "root_scalar"]


def _original(name):
    return resolve(f"scipy.optimize.{name}")


def _root(name, func, starts, args, shape, options):
    """The ``root`` node of ``func(x, *args) = 0`` for ``x`` of ``shape``
    (None: nothing reaches a traced value -- the caller runs scipy)."""
    body, (x_t,), res = traced_body(lambda x: func(x, *args), [shape], shape,
                                    f"scipy.optimize.{name}: the residual")
    if res is None or not body.lifted:
        body.abandoned = True  # (nothing traced: scipy on values)
        return None
    lbody = body_graph(body, [x_t], [res])
    options = tuple(sorted((k, _option_value(v)) for k, v in options.items()))
    starts = [s.astype(np.float64) if isinstance(s, Tracer) else np.asarray(s, np.float64)
              for s in starts]
    return bind("root", *starts, *body.lifted, body=lbody, solver=name, options=options,
                n_start=len(starts))


def _bracketing(name):
    def solver(f, a, b, args=(), full_output=False, disp=True, **options):
        if full_output:
            raise TracingError(f"scipy.optimize.{name} on traced values takes no full_output=")
        args = args if isinstance(args, tuple) else (args,)
        out = _root(name, f, [a, b], args, (), dict(options, disp=disp))
        if out is None:
            return _original(name)(f, a, b, args=args, full_output=full_output, disp=disp,
                                   **options)
        return out
    solver.__name__ = name
    solver.__doc__ = (f"``scipy.optimize.{name}`` while tracing: the root, differentiable in "
                      "the arrays of ``args`` and in what ``f`` closes over (the implicit "
                      "function theorem); ``full_output`` is not taken.")
    return intercepts("scipy.optimize", name, while_tracing=True)(solver)


for _name in BRACKETING:
    globals()[_name] = _bracketing(_name)


@intercepts("scipy.optimize", "fsolve", while_tracing=True)
def fsolve(func, x0, args=(), fprime=None, full_output=0, **options):
    """``scipy.optimize.fsolve`` while tracing: the root, differentiable in the
    arrays of ``args`` and in what ``func`` closes over (the implicit function
    theorem: one linear solve with the residual's Jacobian at the root).

    Parameters
    ----------
    func, x0, args
        As scipy's: ``func(x, *args)`` of a 1-d ``x`` (``x0`` flattened).
    **options
        ``xtol``, ``maxfev``, ``epsfcn``, ``factor``, ``diag``, ``band``,
        ``col_deriv`` as scipy's (constants).
    fprime, full_output
        Not taken while tracing (the Jacobian is hybridad's work).

    Returns
    -------
    Tracer
        The root, 1-d, as scipy returns it.
    """
    if fprime is not None or full_output:
        raise TracingError("scipy.optimize.fsolve on traced values takes no fprime= (the "
                           "residual's derivatives are hybridad's work) or full_output=")
    args = args if isinstance(args, tuple) else (args,)
    n = int(np.size(x0)) if not isinstance(x0, Tracer) else x0.size
    start = x0.reshape(-1) if isinstance(x0, Tracer) else np.asarray(x0, np.float64).reshape(-1)
    out = _root("fsolve", func, [start], args, (n,), options)
    if out is None:
        return _original("fsolve")(func, x0, args=args, **options)
    return out


class RootResults:
    """What ``scipy.optimize.root_scalar`` returns, for a traced root: ``root``
    (a tracer), ``converged`` True and ``flag`` 'converged' (a call whose
    solver does not converge raises, as scipy's does with ``disp``), and
    ``method``.  The iteration and call counts, which change from call to
    call, are not kept."""

    def __init__(self, root, method):
        self.root, self.method = root, method
        self.converged, self.flag = True, "converged"

    def __repr__(self):
        return f"RootResults(root={self.root!r}, converged=True, method={self.method!r})"


@intercepts("scipy.optimize", "root_scalar", while_tracing=True)
def root_scalar(f, args=(), method=None, bracket=None, fprime=None, fprime2=None, x0=None,
                x1=None, xtol=None, rtol=None, maxiter=None, options=None):
    """``scipy.optimize.root_scalar`` while tracing: a bracketing method
    (``brentq``, ``brenth``, ``ridder``, ``bisect``, ``toms748``; scipy's
    choice where ``bracket`` is given alone) is :func:`brentq` & co, the root
    differentiable by the implicit function theorem; the other methods are
    scipy's (its Python iterations, traced through: their convergence tests
    are decisions on values).

    Returns
    -------
    RootResults
        ``root`` a tracer (scipy's ``RootResults`` for the other methods).
    """
    name = method.lower() if isinstance(method, str) else method
    if name is None and bracket is not None and fprime is None and fprime2 is None:
        name = "brentq"
    if name not in BRACKETING or bracket is None:
        return _original("root_scalar")(f, args=args, method=method, bracket=bracket,
                                        fprime=fprime, fprime2=fprime2, x0=x0, x1=x1,
                                        xtol=xtol, rtol=rtol, maxiter=maxiter, options=options)
    args = args if isinstance(args, tuple) else (args,)
    kwargs = {k: v for k, v in (("xtol", xtol), ("rtol", rtol), ("maxiter", maxiter))
              if v is not None}
    kwargs.update(options or {})
    out = _root(name, f, list(bracket), args, (), kwargs)
    if out is None:
        return _original("root_scalar")(f, args=args, method=method, bracket=bracket,
                                        xtol=xtol, rtol=rtol, maxiter=maxiter, options=options)
    return RootResults(out, name)


def _result(**fields):
    from scipy.optimize import OptimizeResult

    return OptimizeResult(**fields)


@intercepts("scipy.optimize", "root", while_tracing=True)
def root(fun, x0, args=(), method="hybr", jac=None, tol=None, callback=None, options=None):
    """``scipy.optimize.root`` while tracing: a system's root, as :func:`fsolve`,
    by any of scipy's methods (``jac`` and ``callback`` not taken).

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x`` (a tracer, 1-d), ``fun`` (the residual there, traced),
        ``success`` True: a call whose solve does not succeed warns.
    """
    if jac is not None or callback is not None:
        raise TracingError("scipy.optimize.root on traced values takes no jac= (the "
                           "residual's derivatives are hybridad's work) or callback=")
    args = args if isinstance(args, tuple) else (args,)
    n = x0.size if isinstance(x0, Tracer) else int(np.size(x0))
    start = x0.reshape(-1) if isinstance(x0, Tracer) else np.asarray(x0, np.float64).reshape(-1)
    body, (x_t,), f = traced_body(lambda x: fun(x, *args), [(n,)], (n,),
                                  "scipy.optimize.root: the residual")
    if f is None or not body.lifted:
        body.abandoned = True  # (nothing traced: scipy on values)
        return _original("root")(fun, x0, args=args, method=method, tol=tol, options=options)
    lbody = body_graph(body, [x_t], [f])
    opts = {k: v for k, v in (("method", method), ("tol", tol), ("options", options))
            if v is not None}
    x = bind("root", start, *body.lifted, body=lbody, solver="root",
             options=tuple(sorted((k, _option_value(v)) for k, v in opts.items())), n_start=1)
    (residual,) = replay(lbody.graph, current_trace(), [x, *body.lifted])
    return _result(x=x, fun=residual, success=True, status=1,
                   message="The solution converged (a call where it does not warns).")


@intercepts("scipy.optimize", "minimize", while_tracing=True)
def minimize(fun, x0, args=(), method=None, jac=None, hess=None, hessp=None, bounds=None,
             constraints=(), tol=None, callback=None, options=None):
    """``scipy.optimize.minimize`` while tracing: an unconstrained minimizer,
    differentiable in what the objective reads by the implicit function
    theorem on its optimality condition (the gradient is zero there: one
    linear solve with the objective's Hessian at the solution).

    Parameters
    ----------
    fun, x0, args, tol, options
        As scipy's: ``fun(x, *args)`` of a 1-d ``x`` (``jac=True``: it
        returns the value and the gradient, of which the value is used).
    method
        ``BFGS`` (scipy's default here), ``CG``, ``L-BFGS-B``, ``TNC``,
        ``SLSQP`` -- given the objective's exact gradient, traced --, or the
        derivative-free ``Nelder-Mead``, ``Powell``, ``COBYLA``.
    hess, hessp, bounds, constraints, callback
        Not taken while tracing (a bound or a constraint active at the
        solution moves it otherwise than the optimality condition says).

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x``, ``fun`` and ``jac`` (traced; ``fun``'s derivative is the
        objective's partial, the solution's motion contributing nothing at a
        minimum), ``success`` True: a call whose solve does not succeed warns.
    """
    if hess is not None or hessp is not None or bounds is not None or constraints or \
            callback is not None:
        raise TracingError("scipy.optimize.minimize on traced values takes no hess=, hessp=, "
                           "bounds=, constraints= or callback= (an unconstrained minimum is "
                           "differentiated through its optimality condition)")
    name = "BFGS" if method is None else str(method)
    if name.upper() not in (*[m.upper() for m in GRADIENT_METHODS], *DERIVATIVE_FREE):
        raise TracingError(f"scipy.optimize.minimize on traced values: method {name!r} is not "
                           f"taken; use one of {', '.join(GRADIENT_METHODS)} or "
                           "Nelder-Mead, Powell, COBYLA")
    args = args if isinstance(args, tuple) else (args,)
    n = x0.size if isinstance(x0, Tracer) else int(np.size(x0))
    start = x0.reshape(-1) if isinstance(x0, Tracer) else np.asarray(x0, np.float64).reshape(-1)

    def objective(x, *a):
        value = fun(x, *a)
        return value[0] if jac is True else value
    body, (x_t,), f = traced_body(lambda x: objective(x, *args), [(n,)], (),
                                  "scipy.optimize.minimize: the objective")
    if f is None or not body.lifted:
        body.abandoned = True  # (nothing traced: scipy on values)
        return _original("minimize")(fun, x0, args=args, method=method, jac=jac, tol=tol,
                                     options=options)
    obj = body_graph(body, [x_t], [f])
    opts = {k: v for k, v in (("method", name), ("tol", tol), ("options", options))
            if v is not None}
    residual = gradient_body(obj)
    x = bind("root", start, *body.lifted, body=residual, objective=obj, solver="minimize",
             n_start=1, options=tuple(sorted((k, _option_value(v)) for k, v in opts.items())))
    trace = current_trace()
    (value,) = replay(obj.graph, trace, [x, *body.lifted])
    (grad,) = replay(residual.graph, trace, [x, *body.lifted])
    return _result(x=x, fun=value, jac=grad, success=True, status=0,
                   message="Optimization terminated successfully (a call where it does not "
                   "warns).")


def _option_value(v):
    """An option as a node attribute: a dict of options as sorted pairs."""
    if isinstance(v, dict):
        return tuple(sorted((k, _option(x)) for k, x in v.items()))
    return _option(v)

