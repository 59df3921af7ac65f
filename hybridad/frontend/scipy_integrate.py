"""``scipy.integrate.odeint``, ``solve_ivp``, ``quad``, ``quad_vec`` and
``dblquad`` on traced values.

ODEs.  While a function is traced, a call of either solver whose initial value, extra
arguments or right-hand side reaches a traced value (an argument of ``f``,
or a value the right-hand side closes over) traces the right-hand side ONCE,
on tracers of ``y`` and ``t`` (as :func:`hybridad.fori_loop` traces its
body: values it reads from outside become operands), and becomes one
``ode`` node (:mod:`hybridad.ops.ode`): scipy's own solver at every call, on
the traced right-hand side, differentiated through the ODE's tangent
(forward) and adjoint (reverse) equations.  A call that reaches no traced
value is scipy's, on values.

As in a loop body, the right-hand side is traced without values: a Python
``if`` on ``y`` or ``t`` raises :class:`hybridad.TracingError` (write
``np.where``).  The output time points are constants (``t`` of ``odeint``,
``t_eval`` of ``solve_ivp``, which is required: without it the solver's own
steps, which move with the values, would be the output).

Integrals.  ``quad`` and ``quad_vec`` trace the integrand once, on a 0-d
tracer of ``x``, into one ``quad`` node (:mod:`hybridad.ops.quad`): scipy's
integral at every call, differentiated by Leibniz's rule; ``dblquad`` is
an inner ``quad`` inside an outer one, as scipy computes it.
"""

from __future__ import annotations

import numpy as np

from ..core.decisions import decide_constant
from ..core.trace import bind, current_trace
from ..core.tracer import Tracer
from ..errors import TracingError
from ..ir.graph import Graph
from ..ops.host import resolve
from ..ops.loop import LoopBody
from .loops import BodyTrace
from .scipy_special import intercepts

__all__ = ["dblquad", "odeint", "quad", "quad_vec", "solve_ivp", "tplquad"]


def _original(name):
    return resolve(f"scipy.integrate.{name}")


def traced_body(fn, specs, shape, what):
    """``(body trace, its input tracers, fn's value)``: ``fn`` traced ONCE on
    float64 tracers of the shapes ``specs``, in a body of the trace around it
    (as a :func:`hybridad.fori_loop` body: what it reads from outside becomes
    its operands, ``body.lifted``), its value a float64 tracer of the body
    reshaped to ``shape`` (None: as it comes; a size that differs raises
    ValueError naming ``what``) -- or None where it is no traced value and
    reads nothing traced (the body is set aside: the caller may run scipy
    on values).  A list of traced numbers is a traced array (np.array is
    traced)."""
    body = BodyTrace(current_trace(), len(specs))
    with body:
        ins = [body.input(i, s, np.dtype(np.float64)) for i, s in enumerate(specs)]
        res = fn(*ins)
        if not isinstance(res, Tracer):
            res = np.array(res) if isinstance(res, (list, tuple)) else np.asarray(res)
        if not isinstance(res, Tracer):
            if not body.lifted:
                body.abandoned = True
                return body, ins, None
            res = Tracer(body.const(np.asarray(res, np.float64), True), body)
        if shape is not None:
            size = int(np.prod(shape, dtype=np.int64))
            if res.size != size:
                raise ValueError(f"{what} returned {res.size} values; {size} expected")
            res = res.reshape(shape)
        value = res.astype(np.float64)  # (inside the body: its nodes are the body's)
    return body, ins, value


def body_graph(body, ins, outputs):
    """The :class:`LoopBody` of a :func:`traced_body`: inputs ``ins`` then the
    values it lifted, outputs ``outputs``."""
    inputs = [t.node for t in ins] + [body._lifted[x.node.id] for x in body.lifted]
    return LoopBody(Graph(body.nodes, inputs, [t.node for t in outputs]), False, 0, 0)


def _times(t, name):
    if isinstance(t, Tracer):  # (a data argument's: its values, guarded)
        t = decide_constant(t)
        if t is None:
            raise TracingError(f"scipy.integrate.{name}: the output times depend on a "
                               "differentiated argument; hybridad differentiates an ODE's "
                               "solution with respect to its initial value and parameters, at "
                               "times that are constants or data arguments")
    times = np.asarray(t, np.float64)
    if times.ndim != 1 or times.size == 0:
        raise ValueError(f"scipy.integrate.{name}: the output times must be a non-empty 1-d "
                         f"sequence; got shape {times.shape}")
    return times


def _option(v):
    """An option's value as a hashable, picklable attribute (arrays as tuples)."""
    if isinstance(v, Tracer):
        raise TracingError("a solver option (rtol, atol, epsabs, xtol, ...) is a traced "
                           "value; options are constants")
    if isinstance(v, np.ndarray):
        return tuple(v.tolist())
    return v.item() if isinstance(v, np.generic) else v


def _ode(name, rhs_call, y0, times, span, solver_options):
    """The ``ode`` node of ``rhs_call(y, t)`` from ``y0`` (None: the caller
    runs scipy on values -- nothing reaches a traced value)."""
    # (a list of traced numbers is a traced array here: np.asarray is traced)
    z0 = (y0 if isinstance(y0, Tracer) else np.asarray(y0)).astype(np.float64).reshape(-1)
    m = z0.shape[0]
    body, (y_t, t_t), f = traced_body(rhs_call, [(m,), ()], (m,),
                                      f"scipy.integrate.{name}: the right-hand side")
    if f is None or (not body.lifted and not isinstance(z0, Tracer)):
        body.abandoned = True  # (nothing traced: scipy on values)
        return None
    lbody = body_graph(body, [y_t, t_t], [f])
    options = tuple(sorted((k, _option(v)) for k, v in solver_options.items()))
    return bind("ode", z0, *body.lifted, body=lbody, times=tuple(times.tolist()),
                solver=name, span=(float(span[0]), float(span[1])), options=options)


@intercepts("scipy.integrate", "odeint", while_tracing=True)
def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None,
           rtol=None, atol=None, tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0,
           mxhnil=0, mxordn=12, mxords=5, printmessg=0, tfirst=False):
    """``scipy.integrate.odeint`` while tracing: differentiable in ``y0``, in
    the arrays of ``args`` and in what ``func`` closes over.

    Parameters
    ----------
    func, y0, t, args, tfirst
        As scipy's; ``t`` is constant.
    rtol, atol, tcrit, h0, hmax, hmin, ixpr, mxstep, mxhnil, mxordn, mxords, printmessg, ml, mu
        Passed to scipy's solver (constants).
    Dfun, col_deriv, full_output
        Not taken while tracing (``Dfun``: scipy's solver is given the
        right-hand side only; ``full_output``'s solver statistics are no
        array of the graph).

    Returns
    -------
    Tracer or ndarray
        ``(len(t), len(y0))``: the solution at ``t``.
    """
    if Dfun is not None or full_output:
        raise TracingError("scipy.integrate.odeint with Dfun= or full_output= on traced values: "
                           "hybridad traces the right-hand side only (drop Dfun: its "
                           "derivatives are hybridad's work) and returns the solution only")
    times = _times(t, "odeint")
    args = args if isinstance(args, tuple) else (args,)

    def call(y, tt):
        return func(tt, y, *args) if tfirst else func(y, tt, *args)

    opts = {k: v for k, v in dict(rtol=rtol, atol=atol, tcrit=tcrit, ml=ml, mu=mu).items()
            if v is not None}
    opts.update({k: v for k, v, d in (("h0", h0, 0.0), ("hmax", hmax, 0.0), ("hmin", hmin, 0.0),
                                      ("ixpr", ixpr, 0), ("mxstep", mxstep, 0),
                                      ("mxhnil", mxhnil, 0), ("mxordn", mxordn, 12),
                                      ("mxords", mxords, 5), ("printmessg", printmessg, 0))
                 if v != d})
    out = _ode("odeint", call, y0, times, (times[0], times[-1]), opts)
    if out is None:
        return _original("odeint")(func, y0, t, args=args, Dfun=Dfun, col_deriv=col_deriv,
                                   full_output=full_output, tfirst=tfirst, **opts)
    return out


@intercepts("scipy.integrate", "solve_ivp", while_tracing=True)
def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False, events=None,
              vectorized=False, args=None, **options):
    """``scipy.integrate.solve_ivp`` while tracing: differentiable in ``y0``,
    in the arrays of ``args`` and in what ``fun`` closes over.

    Parameters
    ----------
    fun, t_span, y0, method, args, **options
        As scipy's (``method`` by name; ``t_span`` and the options constant).
    t_eval : array_like
        The output times (constants), required while tracing.
    dense_output, events, vectorized
        Not taken while tracing.

    Returns
    -------
    scipy.integrate OdeResult
        ``t`` (``t_eval``), ``y`` (a tracer, ``(len(y0), len(t_eval))``),
        ``status`` 0, ``success`` True and scipy's message: a call whose
        solver stops early raises instead.
    """
    if t_eval is None:
        raise TracingError("scipy.integrate.solve_ivp on traced values needs t_eval: without it "
                           "the output times are the solver's own steps, which move with the "
                           "values (a graph has fixed shapes)")
    if dense_output or events is not None or vectorized or not isinstance(method, str):
        raise TracingError("scipy.integrate.solve_ivp on traced values takes method by name, "
                           "and not dense_output=, events= or vectorized=")
    if "jac" in options or "jac_sparsity" in options:
        raise TracingError("scipy.integrate.solve_ivp on traced values: drop jac= (the "
                           "right-hand side is traced; its derivatives are hybridad's work)")
    times = _times(t_eval, "solve_ivp")
    span = [float(s) if isinstance(s, Tracer) else float(np.asarray(s)) for s in t_span]
    args = () if args is None else (args if isinstance(args, tuple) else (args,))

    def call(y, tt):
        return fun(tt, y, *args)

    out = _ode("solve_ivp", call, y0, times, span, dict(options, method=method))
    if out is None:
        return _original("solve_ivp")(fun, t_span, y0, method=method, t_eval=t_eval,
                                      args=args or None, **options)
    from scipy.integrate._ivp.ivp import OdeResult

    return OdeResult(t=times, y=out.T, sol=None, t_events=None, y_events=None, status=0,
                     message="The solver successfully reached the end of the integration "
                     "interval.", success=True)



@intercepts("scipy.integrate", "quad", while_tracing=True)
def quad(func, a, b, args=(), full_output=0, epsabs=1.49e-08, epsrel=1.49e-08, limit=50,
         points=None, weight=None, wvar=None, wopts=None, maxp1=50, limlst=50,
         complex_func=False):
    """``scipy.integrate.quad`` while tracing: differentiable in the limits, in
    the arrays of ``args`` and in what ``func`` closes over (Leibniz's rule,
    each integral scipy's: :mod:`hybridad.ops.quad`).

    Parameters
    ----------
    func, a, b, args
        As scipy's; ``func(x, *args)`` returns a number (traced once, on a
        0-d tracer ``x``: a Python ``if`` on ``x`` raises, write ``np.where``).
    epsabs, epsrel, limit, points, weight, wvar, maxp1, limlst
        Passed to scipy (constants); the derivatives' integrals take them too.
    full_output, wopts, complex_func
        Not taken while tracing.

    Returns
    -------
    tuple
        ``(integral, abserr)``: 0-d tracers (the error bound has no derivative).
    """
    if full_output or wopts is not None or complex_func:
        raise TracingError("scipy.integrate.quad on traced values takes no full_output=, "
                           "wopts= or complex_func=")
    args = args if isinstance(args, tuple) else (args,)
    opts = {"epsabs": epsabs, "epsrel": epsrel, "limit": limit, "points": points,
            "weight": weight, "wvar": wvar, "maxp1": maxp1, "limlst": limlst}
    out = _integral("quad", lambda x: func(x, *args), a, b, opts, shape=())
    if out is None:
        return _original("quad")(func, a, b, args=args, **opts)
    return out[0][0], out[0][1]


#: scipy's defaults of quad's and quad_vec's options (an option left at its
#: default is not written into the node: plans of either spelling are one)
_DEFAULTS = {"quad": {"epsabs": 1.49e-08, "epsrel": 1.49e-08, "limit": 50, "points": None,
                      "weight": None, "wvar": None, "maxp1": 50, "limlst": 50},
             "quad_vec": {"epsabs": 1e-200, "epsrel": 1e-08, "norm": "2", "limit": 10000,
                          "points": None, "quadrature": None, "cache_size": 100000000.0}}


def _integral(solver, integrand, a, b, opts, shape=None):
    """``(the quad node's value, the integrand's shape)`` of ``integrand`` over
    ``[a, b]`` (its value reshaped to ``shape`` where given), or None where
    nothing reaches a traced value (the caller runs scipy)."""
    body, (x_t,), f = traced_body(integrand, [()], shape, f"scipy.integrate.{solver}: "
                                  "the integrand")
    if f is None or not (body.lifted or isinstance(a, Tracer) or isinstance(b, Tracer)):
        body.abandoned = True  # (nothing traced: scipy on values)
        return None
    lbody = body_graph(body, [x_t], [f])
    default = _DEFAULTS[solver]
    options = tuple(sorted((k, _option(v)) for k, v in opts.items()
                           if not _same_option(v, default[k])))
    limits = [x.astype(np.float64).reshape(()) if isinstance(x, Tracer) else float(x)
              for x in (a, b)]
    return bind("quad", *limits, *body.lifted, body=lbody, options=options,
                solver=solver), f.shape


def _same_option(v, default):
    if v is None or default is None:
        return v is default
    try:
        return bool(v == default)
    except (TypeError, ValueError):  # (an array of points)
        return False


@intercepts("scipy.integrate", "quad_vec", while_tracing=True)
def quad_vec(f, a, b, epsabs=1e-200, epsrel=1e-08, norm="2", cache_size=100000000.0,
             limit=10000, workers=1, points=None, quadrature=None, full_output=False, *,
             args=()):
    """``scipy.integrate.quad_vec`` while tracing: an array-valued integrand,
    as :func:`quad` (``workers`` is not used: one process evaluates it).

    Returns
    -------
    tuple
        ``(integral, abserr)``: the integral a tracer shaped like ``f``'s
        value, the error bound a 0-d tracer with no derivative.
    """
    if full_output:
        raise TracingError("scipy.integrate.quad_vec on traced values takes no full_output=")
    args = args if isinstance(args, tuple) else (args,)
    opts = {"epsabs": epsabs, "epsrel": epsrel, "norm": norm, "limit": limit,
            "points": points, "quadrature": quadrature, "cache_size": cache_size}
    out = _integral("quad_vec", lambda x: f(x, *args), a, b, opts)
    if out is None:
        return _original("quad_vec")(f, a, b, epsabs=epsabs, epsrel=epsrel, norm=norm,
                                     cache_size=cache_size, limit=limit, workers=workers,
                                     points=points, quadrature=quadrature, args=args)
    value, shape = out
    return value[:-1].reshape(shape), value[-1]


@intercepts("scipy.integrate", "dblquad", while_tracing=True)
def dblquad(func, a, b, gfun, hfun, args=(), epsabs=1.49e-08, epsrel=1.49e-08):
    """``scipy.integrate.dblquad`` while tracing: ``int_a^b int_g(x)^h(x)
    func(y, x) dy dx`` as scipy computes it -- an inner :func:`quad` in ``y``
    inside the outer one in ``x`` --, differentiable in everything both read.

    Returns
    -------
    tuple
        ``(integral, abserr)`` of the outer integral.
    """
    args = args if isinstance(args, tuple) else (args,)

    def inner(x):
        lo = gfun(x) if callable(gfun) else gfun
        hi = hfun(x) if callable(hfun) else hfun
        return quad(lambda y: func(y, x, *args), lo, hi, epsabs=epsabs, epsrel=epsrel)[0]
    return quad(inner, a, b, epsabs=epsabs, epsrel=epsrel)


@intercepts("scipy.integrate", "tplquad", while_tracing=True)
def tplquad(func, a, b, gfun, hfun, qfun, rfun, args=(), epsabs=1.49e-08, epsrel=1.49e-08):
    """``scipy.integrate.tplquad`` while tracing: ``int_a^b int_g(x)^h(x)
    int_q(x,y)^r(x,y) func(z, y, x) dz dy dx`` as scipy computes it -- a
    :func:`quad` in ``z`` inside a :func:`dblquad` in ``y`` and ``x`` --,
    differentiable in everything the three read.

    Returns
    -------
    tuple
        ``(integral, abserr)`` of the outermost integral.
    """
    args = args if isinstance(args, tuple) else (args,)

    def inner(y, x):
        lo = qfun(x, y) if callable(qfun) else qfun
        hi = rfun(x, y) if callable(rfun) else rfun
        return quad(lambda z: func(z, y, x, *args), lo, hi, epsabs=epsabs, epsrel=epsrel)[0]
    return dblquad(inner, a, b, gfun, hfun, epsabs=epsabs, epsrel=epsrel)

