"""Integrals computed by ``scipy.integrate.quad``, differentiated under the
integral sign.

``scipy.integrate.quad(f, a, b, args)`` on traced values (see
:mod:`hybridad.frontend.scipy_integrate`) becomes one ``quad`` node: the
integrand ``f(x, *consts)`` traced once into a body graph (a
:class:`~hybridad.ops.loop.LoopBody`: inputs ``[x] + consts``, its output
the integrand's value, 0-d -- or a vector: a derivative's, integrated a
component at a time by ``quad`` where they are few, else by ``quad_vec``),
integrated by scipy at every call with the body evaluated as an ODE's
right-hand side is (:data:`hybridad.ops.ode.EVALUATORS`).  The node's value
is ``[integral..., abserr]``: scipy's estimate and its error bound.

The derivative is Leibniz's rule, each integral again scipy's, to the same
tolerances:

- in the integrand's parameters, the integral of the integrand's
  derivative: reverse mode integrates ``w . f_k`` (``w`` the cotangent, one
  more operand), forward mode ``f_k dk`` -- each a ``quad`` node of that
  body (the tangent pass, or the reverse pass, of the integrand's);
- in the limits, the integrand there: ``f(b) db - f(a) da``, the body
  replayed at the limit in the plan's own graph.

The error bound has no derivative (its cotangent is dropped; its tangent 0).
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import Op, register
from .loop import replay
from .host import resolve
from .ode import _batch, parameter_body, rhs, unpack

__all__ = ["integrate_quad"]


#: the most components of a vector integrand from ``quad`` (a derivative's: one
#: per parameter) integrated one by one by QUADPACK, as ``quad`` itself; more
#: go to ``quad_vec`` at once
PER_COMPONENT = 8


def integrate_quad(body, a, b, consts, options, evaluator="reference", solver="quad"):
    """``[integral..., abserr]`` of ``body`` (``x -> f(x, *consts)``) over
    ``[a, b]`` by scipy's ``quad`` (a scalar integrand) or ``quad_vec``
    (``solver`` "quad_vec": the user's call, its options as given)."""
    lock, bound = rhs(body, evaluator)
    call = bound(consts)
    xbuf = np.zeros((), np.float64)
    size = body.graph.outputs[0].size
    opts = dict(options)
    quad, quad_vec = resolve("scipy.integrate.quad"), resolve("scipy.integrate.quad_vec")
    with np.errstate(all="ignore"):
        if solver == "quad" and body.graph.outputs[0].shape == ():
            def f(x):
                with lock:
                    xbuf[...] = x
                    return float(call(xbuf))
            value, err = quad(f, float(a), float(b), **opts)
            return np.array([value, err])

        def fv(x):
            with lock:
                xbuf[...] = x
                return np.array(call(xbuf), np.float64).reshape(-1)
        if solver == "quad_vec":
            value, err = quad_vec(fv, float(a), float(b), **opts)
            return np.concatenate([np.ravel(value), [err]])
        if "weight" in opts or size <= PER_COMPONENT:
            # (each component by QUADPACK: quad_vec takes no weight, and its Python
            # loop costs more than a few compiled integrations)
            parts = [quad(lambda x, j=j: fv(x)[j], float(a), float(b), **opts)
                     for j in range(size)]
            return np.array([p[0] for p in parts] + [max(p[1] for p in parts)])
        vec = {k: v for k, v in opts.items() if k in ("epsabs", "epsrel", "limit", "points")}
        value, err = quad_vec(fv, float(a), float(b), **vec)
        return np.concatenate([np.ravel(value), [err]])


def _abstract(a, b, *consts, body, options, solver):
    return (body.graph.outputs[0].size + 1,), np.dtype(np.float64)


def _run(out, a, b, *consts, body, options, solver, evaluator="reference"):
    out[...] = integrate_quad(body, a, b, consts, options, evaluator, solver)


def _at(body, x, consts):
    """The integrand at ``x`` (a tracer of the plan's graph), flattened."""
    trace = x._trace
    (f,) = replay(body.graph, trace, [x.astype(np.float64), *consts])
    return f.reshape(-1)


def _limits(ta, tb, a, b, body, consts):
    """``f(b) db - f(a) da`` (None where neither limit moves)."""
    out = None
    for t, x, sign in ((tb, b, 1.0), (ta, a, -1.0)):
        if t is not None:
            term = sign * _at(body, x, consts) * t
            out = term if out is None else out + term
    return out


def _jvp(ts, node, a, b, *rest, body, options, solver):
    consts, (ta, tb), tk = rest[:-1], ts[:2], ts[2:]
    d_k = [k for k, t in enumerate(tk) if t is not None]
    from ..core.trace import bind

    size = node.shape[0] - 1
    value = None
    if d_k:
        inner = bind("quad", a, b, *consts, *[tk[k] for k in d_k],
                     body=parameter_body(body, d_k, False), options=options, solver=solver)
        value = inner[:size]
    edge = _limits(ta, tb, a, b, body, consts)
    if edge is not None:
        value = edge if value is None else value + edge
    if value is None:
        return None
    return np.concatenate([value.astype(np.float64), np.zeros(1)])


def _vjp(g, node, active, a, b, *rest, body, options, solver):
    consts = rest[:-1]
    size = node.shape[0] - 1
    w = g[:size]
    a_k = [k for k, on in enumerate(active[2:]) if on]
    from ..core.trace import bind

    out = [None, None] + [None] * len(consts)
    if a_k:
        wb = w.reshape(body.graph.outputs[0].shape)
        packed = bind("quad", a, b, *consts, wb, body=parameter_body(body, a_k, True),
                      options=options, solver=solver)
        out[2:] = unpack(packed, consts, a_k)
    for j, (x, sign) in enumerate(((a, -1.0), (b, 1.0))):
        if active[j]:
            out[j] = (sign * np.sum(w * _at(body, x, consts))).astype(x.dtype)
    return tuple(out)


register(Op("quad", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp, batch=_batch,
            doc="an integral by scipy.integrate.quad (quad_vec for a vector integrand)"))
