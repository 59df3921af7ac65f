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
from ..ir.graph import Graph
from ..ops.loop import LoopBody
from ..ops.root import BRACKETING
from .loops import BodyTrace
from .scipy_integrate import _option
from .scipy_special import intercepts

__all__ = ["RootResults", "fsolve", "root_scalar"]


def _original(name):
    import scipy.optimize

    fn = getattr(scipy.optimize, name)
    return getattr(fn, "__hybridad_original__", fn)


def _root(name, func, starts, args, shape, options):
    """The ``root`` node of ``func(x, *args) = 0`` for ``x`` of ``shape``
    (None: nothing reaches a traced value -- the caller runs scipy)."""
    outer = current_trace()
    body = BodyTrace(outer, 1)
    with body:
        x_t = body.input(0, shape, np.dtype(np.float64))
        res = func(x_t, *args)
        if not isinstance(res, Tracer):
            res = np.asarray(res) if not isinstance(res, (list, tuple)) else np.array(res)
        if not isinstance(res, Tracer) and not body.lifted:
            res = None
        elif not isinstance(res, Tracer):
            res = Tracer(body.const(np.asarray(res, np.float64), True), body)
    if res is None or not body.lifted:
        body.abandoned = True  # (nothing traced: scipy on values)
        return None
    if res.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"scipy.optimize.{name}: the residual returned {res.size} values for "
                         f"{int(np.prod(shape, dtype=np.int64))} unknowns")
    f = res.astype(np.float64).reshape(shape)
    inputs = [x_t.node] + [body._lifted[x.node.id] for x in body.lifted]
    lbody = LoopBody(Graph(body.nodes, inputs, [f.node]), False, 0, 0)
    options = tuple(sorted((k, _option(v)) for k, v in options.items()))
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
