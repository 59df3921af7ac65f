"""Roots found by scipy.optimize, differentiated by the implicit function
theorem.

``scipy.optimize.brentq`` (``brenth``, ``ridder``, ``bisect``, ``toms748``)
and ``fsolve`` on traced values (see :mod:`hybridad.frontend.scipy_optimize`)
become one ``root`` node: the residual ``F(x, *consts)`` traced once into a
body graph (a :class:`~hybridad.ops.loop.LoopBody`: inputs ``[x] + consts``,
output ``F``, shaped like ``x``), solved by scipy's own solver at every call
with the body evaluated as an ODE's right-hand side is
(:data:`hybridad.ops.ode.EVALUATORS`).  The bracket or starting point are
operands too (read at every call) but carry no derivative: the root does not
move with them.

At the root ``F(x*, k) = 0``, so ``F_x dx + F_k dk = 0``:

- forward mode: ``dx = -F_x^{-1} (F_k dk)``;
- reverse mode: ``l = F_x^{-T} g``, then ``dk = -l F_k``;

``F_x`` and the products with ``F_k`` are the body's tangent and reverse
passes, traced once into bodies of their own and replayed at ``x*`` in the
plan's graph, the solve a ``np.linalg.solve`` (a division for a scalar
root) -- ordinary ops, so second derivatives follow by the same rules.
The derivative is exact at the root scipy returns (to its ``xtol``).
"""

from __future__ import annotations

import numpy as np

from ..core.tracer import Tracer
from ..ir.registry import Op, register
from .loop import TRANSFORMS, _specs, _sub_trace, _zeros, replay
from .host import resolve
from .ode import _batch, batched_tangent, body_of, parameter_body, rhs, unpack

__all__ = ["BRACKETING", "DERIVATIVE_FREE", "GRADIENT_METHODS", "SOLVERS", "gradient_body",
           "solve_root"]

#: scipy.optimize's scalar solvers on a bracket ``[a, b]``
BRACKETING = ("brentq", "brenth", "ridder", "bisect", "toms748")
#: ``minimize``'s methods given the objective's exact gradient (``jac=True``);
#: the derivative-free ones are given the objective alone
GRADIENT_METHODS = ("BFGS", "CG", "L-BFGS-B", "TNC", "SLSQP")
DERIVATIVE_FREE = ("NELDER-MEAD", "POWELL", "COBYLA")
#: every solver a ``root`` node calls (``minimize``: a root of the objective's
#: gradient, the objective an attribute of its own)
SOLVERS = BRACKETING + ("fsolve", "root", "minimize")


def _scipy(name):
    return resolve(f"scipy.optimize.{name}")


def solve_root(body, starts, consts, solver, options, evaluator="reference", objective=None):
    """The root of ``body`` (``x -> F(x, *consts)``) by scipy's ``solver``
    from ``starts`` (the bracket ``a, b``, or ``x0``); for ``minimize``, the
    minimizer of ``objective`` (whose gradient ``body`` is)."""
    lock, bound = rhs(body, evaluator)
    call = bound(consts)
    shape = body.graph.inputs[0].shape
    opts = dict(options)
    with np.errstate(all="ignore"):
        if solver in BRACKETING:
            xbuf = np.zeros((), np.float64)

            def f(x):
                with lock:
                    xbuf[...] = x
                    return float(call(xbuf))
            a, b = (float(s) for s in starts)
            return np.asarray(_scipy(solver)(f, a, b, **opts), np.float64)

        def fv(x):
            with lock:
                return np.array(call(np.asarray(x, np.float64).reshape(shape)),
                                np.float64).reshape(-1)
        x0 = np.asarray(starts[0], np.float64).reshape(-1)
        if solver == "fsolve":
            return np.asarray(_scipy(solver)(fv, x0, **opts), np.float64).reshape(shape)
        if "options" in opts:  # (scipy's options dict, kept as pairs in the node)
            opts["options"] = dict(opts["options"])
        if solver == "root":
            res = _scipy("root")(fv, x0, **opts)
        else:
            olock, obound = rhs(objective, evaluator)
            ocall = obound(consts)

            def value(x):
                with olock:
                    return float(ocall(np.asarray(x, np.float64).reshape(shape)))
            if str(opts.get("method", "BFGS")).upper() in DERIVATIVE_FREE:
                res = _scipy("minimize")(value, x0, **opts)
            else:
                res = _scipy("minimize")(lambda x: (value(x), fv(x)), x0, jac=True, **opts)
        if not res.success:
            import warnings

            warnings.warn(f"scipy.optimize.{solver} did not succeed at this call ({res.message}): "
                          "the derivative of its result, by the implicit function theorem, "
                          "holds at a solution only", RuntimeWarning, stacklevel=2)
        return np.asarray(res.x, np.float64).reshape(shape)


def gradient_body(objective):
    """The body of ``objective``'s gradient in ``x`` (the residual a minimizer
    zeroes): inputs as ``objective``'s, one output shaped like ``x``."""
    gin = objective.graph.inputs
    f64 = np.dtype(np.float64)
    trace, ins = _sub_trace(_specs(gin))
    with trace:
        (f,) = replay(objective.graph, trace, ins)
        one = Tracer(trace.const(np.ones((), f.dtype), True), trace)
        (g,) = TRANSFORMS["backward"](trace, [f], [one], [ins[0]], inplace=False)
        g = _zeros(gin[0].shape, f64) if g is None else g.astype(f64)
    return body_of(trace, ins, [g])


def _abstract(*args, body, solver, options, n_start, objective=None):
    return body.graph.inputs[0].shape, np.dtype(np.float64)


def _run(out, *arrays, body, solver, options, n_start, objective=None, evaluator="reference"):
    out[...] = solve_root(body, arrays[:n_start], arrays[n_start:], solver, options, evaluator,
                          objective)


def _jacobian_body(body):
    """``F_x`` at any ``x`` (inputs ``[x] + consts``): 0-d for a scalar root,
    else ``(n, n)``, the body's tangent pass batched over the unit directions."""
    gin = body.graph.inputs
    shape, n = gin[0].shape, gin[0].size
    trace, ins = _sub_trace(_specs(gin) + [(shape, np.dtype(np.float64))])
    x, k_t, seed = ins[0], ins[1:-1], ins[-1]  # (seed: a placeholder the batch replaces)
    with trace:
        (f,) = replay(body.graph, trace, [x, *k_t])
        units = Tracer(trace.const(np.eye(n).reshape((n, *shape)), True), trace)
        rows = batched_tangent(trace, f, [(x, seed)], {seed.node.id: units}, n)
        # (direction j, component i): F_x transposed
        jac = rows.reshape(()) if shape == () else rows.reshape(n, n).T
    return body_of(trace, ins[:-1], [jac])


def _solve(jac, rhs_, transpose=False):
    if jac.shape == ():
        return rhs_ / jac
    return np.linalg.solve(jac.T if transpose else jac, rhs_)


def _jvp(ts, node, *rest, body, solver, options, n_start, objective=None):
    ans, operands = rest[-1], rest[:-1]
    consts, tk = operands[n_start:], ts[n_start:]
    d_k = [k for k, t in enumerate(tk) if t is not None]
    if not d_k:
        return None
    trace = ans._trace
    (jac,) = replay(_jacobian_body(body).graph, trace, [ans, *consts])
    (fk,) = replay(parameter_body(body, d_k, False).graph, trace,
                   [ans, *consts, *[tk[k] for k in d_k]])
    return -_solve(jac, fk)


def _vjp(g, node, active, *rest, body, solver, options, n_start, objective=None):
    ans, operands = rest[-1], rest[:-1]
    consts = operands[n_start:]
    a_k = [k for k, on in enumerate(active[n_start:]) if on]
    out = [None] * len(operands)
    if not a_k:
        return tuple(out)
    trace = ans._trace
    (jac,) = replay(_jacobian_body(body).graph, trace, [ans, *consts])
    lam = _solve(jac, g.astype(np.float64), transpose=True)
    (packed,) = replay(parameter_body(body, a_k, True).graph, trace, [ans, *consts, lam])
    out[n_start:] = unpack(-packed, consts, a_k)
    return tuple(out)


register(Op("root", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp, batch=_batch,
            doc="a root by scipy.optimize (brentq & co, fsolve)"))
