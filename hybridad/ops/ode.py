"""Ordinary differential equations solved by scipy, differentiated by their
sensitivity equations.

``scipy.integrate.odeint`` and ``solve_ivp`` on traced values (see
:mod:`hybridad.frontend.scipy_integrate`) become one ``ode`` node: the
right-hand side ``f(t, y, *consts)`` traced once into a body graph (a
:class:`~hybridad.ops.loop.LoopBody`: inputs ``[y, t] + consts``, output
``dy/dt``), integrated by scipy's own solver at every call -- the values are
scipy's, step sizes and all -- with ``f`` evaluated by the body's ops'
reference implementations (one generated straight-line function,
:func:`hybridad.core.decisions.straight_line`), the operands' values read
where the plan has them.

Derivatives are those of the differential equation, solved by the same
solver to the same tolerances (as autograd's and JAX's ``odeint``), not of
the solver's arithmetic:

- forward mode (``jvp``: Hessian-vector products, forward Jacobians): the
  tangent ``s = dy`` obeys ``ds/dt = f_y s + f_k dk``, ``s(t0) = dy0``; an
  ``ode`` node of the system ``[y, s]`` (the body's tangent pass, traced
  once) gives it;
- reverse mode (``vjp``): where the sensitivities are few (a fit's handful
  of parameters: :data:`FORWARD_SENSITIVITIES`), they are integrated beside
  the state in one solve -- the body's tangent pass batched over the
  directions -- and contracted with the cotangent; otherwise the adjoint
  ``a`` obeys ``da/dt = -a f_y``
  backwards from the last time point, taking the cotangent of each output
  row as it passes that row's time, and ``dL/dk = int a f_k dt`` accumulates
  beside it (Froehlich, Loos and Hasenauer, 2017; autograd's ``odeint``);
  each stretch between two output times starts from the forward solution
  there.  One ``ode_adjoint`` node runs it.  Its own tangent (forward over
  reverse: Hessians, Hessian-vector products) is the same sweep of the
  adjoint system's tangent system; it is not reversed again.

The solver's result must have the traced shape at every call: a run that
stops early (``solve_ivp``'s ``success`` False) raises.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.registry import Op, register
from .._forksafe import Lock
from ..core.tracer import Tracer
from .host import resolve
from .loop import TRANSFORMS, LoopBody, _specs, _sub_trace, _zeros, replay

__all__ = ["EVALUATORS", "SOLVERS", "batched_tangent", "body_of", "integrate", "parameter_body",
           "rhs", "unpack"]

#: the scipy functions an ``ode`` node calls
SOLVERS = ("odeint", "solve_ivp")

_FUNCTIONS = {}  # (evaluator, body key) -> (lock, run)
_LOCK = Lock()


def _reference(body):
    from ..core.decisions import straight_line

    run = straight_line(body.graph)

    n_vars = len(body.graph.inputs)

    def bound(consts):
        leaves = [None] * (n_vars - len(consts)) + list(consts)

        def call(*variables):
            leaves[:len(variables)] = variables
            return run(leaves)[0]
        return call
    return bound


#: how a body's graph is evaluated, by name: ``factory(body) -> bound(consts)
#: -> call(*variables) -> output`` (the body's leading inputs, an ODE's ``z``
#: and ``t`` -- a 0-d array --, an integrand's ``x``; the array returned is the
#: evaluator's buffer, or a view: copy what is kept -- unless ``call.owned``,
#: a buffer of that ``call``'s alone) -- ``"reference"``,
#: the ops' numpy references in one generated function (the numpy
#: backend's); the numba backend's ``"numba"``, the body compiled
#: (:mod:`hybridad.plans.ode_rhs`), is added when the plans are imported
EVALUATORS = {"reference": _reference}


def rhs(body, evaluator="reference"):
    """``(lock, bound)`` evaluating ``body``'s graph by ``evaluator`` (made
    once per evaluator and body content; see :data:`EVALUATORS`)."""
    key = (evaluator, body.key)
    hit = _FUNCTIONS.get(key)
    if hit is None:
        with _LOCK:
            hit = _FUNCTIONS.get(key)
            if hit is None:
                try:
                    bound = EVALUATORS[evaluator](body)
                except Exception as exc:  # noqa: BLE001 - the reference serves (always, for it)
                    if evaluator == "reference":
                        raise
                    import logging

                    logging.getLogger("hybridad").debug(
                        "hybridad: an ODE's right-hand side was not compiled (%s: %s); the "
                        "reference evaluates it", type(exc).__name__, exc)
                    bound = EVALUATORS["reference"](body)
                hit = _FUNCTIONS[key] = (Lock(), _contiguous(bound))
    return hit


def _contiguous(bound):
    """``bound`` taking the constants as C-contiguous arrays (0-d ones kept 0-d)."""
    def take(consts):
        return bound([np.asarray(c, order="C") for c in consts])
    take.bound = bound  # (kept alive: a compiled one holds its program)
    return take


def integrate(body, z0, times, consts, solver, span, options, evaluator="reference",
              steps=None):
    """The solution of ``dz/dt = body(z, t, *consts)``, ``z(span[0]) = z0``,
    at ``times`` -- ``(len(times), len(z0))`` -- by scipy's ``solver``
    (``options``: its keyword arguments, as pairs; ``evaluator``: of the
    body, see :data:`EVALUATORS`).  ``steps``: a one-element list holding the
    size of the step to try first (None: the solver's choice), which gets the
    last step odeint took -- the adjoint sweep restarts it at every output
    time, and starting where the last stretch ended saves the ramp up from a
    tiny first step (where the caller gave no ``h0``)."""
    lock, bound = rhs(body, evaluator)
    call = bound(consts)
    tbuf = np.zeros((), np.float64)
    # odeint copies what f returns before it calls again (solve_ivp keeps it):
    # a result buffer of this solve's own (``call.owned``) goes as it is
    owned = solver == "odeint" and getattr(call, "owned", False)

    def f(t, z):
        with lock:
            tbuf[...] = t
            out = call(z, tbuf)
            return out if owned else np.array(out, np.float64)

    z0 = np.asarray(z0, np.float64).reshape(-1)
    solve = resolve(f"scipy.integrate.{solver}")  # (scipy's, where hybridad wraps it)
    with np.errstate(all="ignore"):
        if solver == "odeint" and steps is not None and "h0" not in dict(options):
            h0 = 0.0 if steps[0] is None else \
                float(np.copysign(min(abs(steps[0]), abs(times[-1] - times[0])),
                                  times[-1] - times[0]))
            out, info = solve(f, z0, times, tfirst=True, h0=h0, full_output=True,
                              **dict(options))
            steps[0] = float(info["hu"][-1]) or steps[0]
        elif solver == "odeint":
            out = solve(f, z0, times, tfirst=True, **dict(options))
        else:
            sol = solve(f, tuple(span), z0, t_eval=times, **dict(options))
            out = sol.y.T
            if out.shape != (len(times), len(z0)):
                raise RuntimeError(f"scipy.integrate.solve_ivp stopped at t = {sol.t[-1]!r} "
                                   f"before the last time point: {sol.message}")
    return out


def _abstract(*args, body, times, solver, span, options):
    return (len(times), args[0].shape[0]), np.dtype(np.float64)


def _run(out, z0, *consts, body, times, solver, span, options, evaluator="reference"):
    out[...] = integrate(body, z0, times, consts, solver, span, options, evaluator)


def body_of(trace, ins, outs):
    """The :class:`LoopBody` of ``trace``'s nodes with inputs ``ins`` and
    outputs ``outs`` (tracers); placeholder inputs it no longer reads (the
    seeds :func:`batched_tangent` replaced) are dropped."""
    real = {t.node.id for t in ins}
    nodes = [n for n in trace.nodes if n.op != "input" or n.id in real]
    return LoopBody(Graph(nodes, [t.node for t in ins], [t.node for t in outs]), False, 0, 0)


def batched_tangent(trace, f, seeds, directions, n):
    """The tangent of ``f`` (a tracer of ``trace``) along ``n`` directions at
    once, ``(n, *f.shape)`` float64: ``seeds`` pairs each varied tracer with a
    placeholder input standing for its tangent, ``directions`` each
    placeholder's node id to its ``n`` directions (a tracer ``(n, *shape)``)
    -- the tangent pass, then batched over the directions (``vmap``)."""
    start = len(trace.nodes)
    f64 = np.dtype(np.float64)
    t = TRANSFORMS["jvp"](trace, list(trace.nodes),
                          {x.node.id: p for x, p in seeds}).get(f.node.id)
    if t is None:
        return _zeros((n, *f.shape), f64)
    batched = dict(directions)
    TRANSFORMS["vmap"](trace, trace.nodes[start:], batched, n)
    out = batched.get(t.node.id)  # (None: the tangent does not depend on the seeds)
    return (np.broadcast_to(t, (n, *f.shape)) if out is None else out).astype(f64)


def _tangent_body(body, d_k):
    """The body of the system ``[y, s]``: ``f`` and its tangent along ``s`` and
    the tangents of consts ``d_k`` (inputs ``[[y, s], t] + consts + their
    tangents``)."""
    gin = body.graph.inputs
    m = gin[0].shape[0]
    k_in = gin[2:]
    trace, ins = _sub_trace([((2 * m,), np.dtype(np.float64)), ((), np.dtype(np.float64))] +
                            _specs(k_in) + _specs([k_in[k] for k in d_k]))
    ys, t, k_t, dk_t = ins[0], ins[1], ins[2:2 + len(k_in)], ins[2 + len(k_in):]
    with trace:
        y, s = ys[:m], ys[m:]
        (f,) = replay(body.graph, trace, [y, t, *k_t])
        seeds = {y.node.id: s, **{k_t[k].node.id: d for k, d in zip(d_k, dk_t, strict=True)}}
        tf = TRANSFORMS["jvp"](trace, list(trace.nodes), seeds).get(f.node.id)
        tf = _zeros(f.shape, f.dtype) if tf is None else tf
        out = _concat([f, tf])
    return body_of(trace, ins, [out])


def _adjoint_body(body, a_k):
    """The body of the adjoint system ``[y, a, acc]``: ``f``, ``-a f_y`` and
    ``-a f_k`` of the consts ``a_k``, flattened (inputs ``[[y, a, acc], t] +
    consts``)."""
    gin = body.graph.inputs
    m = gin[0].shape[0]
    k_in = gin[2:]
    size = 2 * m + sum(k_in[k].size for k in a_k)
    trace, ins = _sub_trace([((size,), np.dtype(np.float64)), ((), np.dtype(np.float64))] +
                            _specs(k_in))
    state, t, k_t = ins[0], ins[1], ins[2:]
    with trace:
        y, a = state[:m], state[m:2 * m]
        (f,) = replay(body.graph, trace, [y, t, *k_t])
        wrt = [y] + [k_t[k] for k in a_k]
        grads = TRANSFORMS["backward"](trace, [f], [-a], wrt, inplace=False)
        grads = [_zeros(w.shape, w.dtype) if gr is None else gr
                 for gr, w in zip(grads, wrt, strict=True)]
        out = _concat([f] + [gr.reshape(-1).astype(np.float64) for gr in grads])
    return body_of(trace, ins, [out])


def _sensitivity_body(body, y0_active, a_k):
    """The body of the forward sensitivities ``[y, S]``, ``S`` the ``(m, P)``
    derivatives of ``y`` in the ``P`` entries of ``y0`` (where active) and of
    the consts ``a_k``: ``f`` and ``f_y S + f_k E`` (``E`` the unit
    directions of the consts' entries), flattened -- the body's tangent pass
    batched over the ``P`` directions (inputs ``[[y, S], t] + consts``)."""
    gin = body.graph.inputs
    m = gin[0].shape[0]
    k_in = gin[2:]
    sizes = [k_in[k].size for k in a_k]
    n_dir = (m if y0_active else 0) + sum(sizes)
    f64 = np.dtype(np.float64)
    trace, ins = _sub_trace([((m + m * n_dir,), f64), ((), f64)] + _specs(k_in) +
                            [((m,), f64)] + _specs([k_in[k] for k in a_k]))
    n_k = len(k_in)
    state, t, k_t = ins[0], ins[1], ins[2:2 + n_k]
    s_seed, k_seeds = ins[2 + n_k], ins[3 + n_k:]  # (placeholders the batch replaces)
    with trace:
        y, S = state[:m], state[m:].reshape(m, n_dir)
        (f,) = replay(body.graph, trace, [y, t, *k_t])
        # (y's tangent along every direction is the sensitivities themselves)
        directions, offset = {s_seed.node.id: S.T}, m if y0_active else 0
        for d, size in zip(k_seeds, sizes, strict=True):
            unit = np.zeros((n_dir, size))
            unit[offset:offset + size] = np.eye(size)
            directions[d.node.id] = Tracer(trace.const(unit.reshape((n_dir, *d.shape)).astype(
                d.dtype), True), trace)
            offset += size
        seeds = [(y, s_seed), *((k_t[k], d) for k, d in zip(a_k, k_seeds, strict=True))]
        tfb = batched_tangent(trace, f, seeds, directions, n_dir)
        out = _concat([f, tfb.T.reshape(-1)])
    return body_of(trace, ins[:2 + n_k], [out])


def _concat(parts):
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _jvp(ts, node, z0, *rest, body, times, solver, span, options):
    consts, tz0, tk = rest[:-1], ts[0], ts[1:]
    d_k = [k for k, t in enumerate(tk) if t is not None]
    if tz0 is None and not d_k:
        return None
    m = z0.shape[0]
    tz0 = _zeros((m,), np.float64) if tz0 is None else tz0.astype(np.float64)
    from ..core.trace import bind

    both = bind("ode", _concat([z0, tz0]), *consts, *[tk[k] for k in d_k],
                body=_tangent_body(body, d_k), times=times, solver=solver, span=span,
                options=options)
    return both[:, m:]


#: the most entries of the forward sensitivities (states times directions) for
#: which a gradient integrates them with the state, in one solve: a few
#: parameters of a small model (a fit's), where the adjoint sweep's restart
#: at every output time costs the solver its ramp up each time
FORWARD_SENSITIVITIES = 512


def _vjp(g, node, active, z0, *rest, body, times, solver, span, options):
    """The cotangents of ``y0`` and the consts: by forward sensitivities where
    they are few (:data:`FORWARD_SENSITIVITIES`: one solve of ``[y, S]``, then
    ``g . S`` summed over the output times), else by the adjoint sweep."""
    consts, ans = rest[:-1], rest[-1]
    a_k = [k for k, on in enumerate(active[1:]) if on]
    from ..core.trace import bind

    m = z0.shape[0]
    n_dir = (m if active[0] else 0) + sum(int(consts[k].size) for k in a_k)
    if m * (n_dir + 1) <= FORWARD_SENSITIVITIES:
        s0 = np.zeros((m, n_dir))
        if active[0]:
            s0[:, :m] = np.eye(m)
        sens = bind("ode", _concat([z0.astype(np.float64), s0.reshape(-1)]), *consts,
                    body=_sensitivity_body(body, active[0], a_k), times=times, solver=solver,
                    span=span, options=options)
        S = sens[:, m:].reshape(len(times) * m, n_dir)
        cot = g.reshape(-1) @ S
        return (cot[:m] if active[0] else None,
                *unpack(cot, consts, a_k, m if active[0] else 0))

    packed = bind("ode_adjoint", g, ans, *consts, body=_adjoint_body(body, a_k), times=times,
                  solver=solver, span=span, options=options,
                  sizes=tuple(int(consts[k].size) for k in a_k), layers=1)
    return (packed[:m] if active[0] else None, *unpack(packed, consts, a_k, m))


def unpack(vec, consts, a_k, offset=0):
    """The pieces of the flat ``vec`` for the consts ``a_k`` in turn, from
    ``offset``, shaped and typed like them (None for the other consts)."""
    out = []
    for k, c in enumerate(consts):
        if k in a_k:
            out.append(vec[offset:offset + c.size].reshape(c.shape).astype(c.dtype))
            offset += c.size
        else:
            out.append(None)
    return out


def parameter_body(body, d_k, reverse):
    """The derivative of ``body`` (inputs ``[x] + consts``, one output ``F``) in
    its consts ``d_k``, at any ``x``: ``F_k dk`` (forward; inputs ``[x] +
    consts + the tangents of d_k``) or ``w . F_k`` for each of them, flattened
    and concatenated (reverse; inputs ``[x] + consts + [w]``, ``w`` shaped like
    ``F``) -- an integrand's derivative (:mod:`.quad`), a residual's
    (:mod:`.root`)."""
    gin = body.graph.inputs
    out_node = body.graph.outputs[0]
    k_in = gin[1:]
    f64 = np.dtype(np.float64)
    extra = [(out_node.shape, f64)] if reverse else _specs([k_in[k] for k in d_k])
    trace, ins = _sub_trace(_specs(gin) + extra)
    x, k_t, rest = ins[0], ins[1:1 + len(k_in)], ins[1 + len(k_in):]
    with trace:
        (f,) = replay(body.graph, trace, [x, *k_t])
        if reverse:
            wrt = [k_t[k] for k in d_k]
            grads = TRANSFORMS["backward"](trace, [f], [rest[0]], wrt, inplace=False)
            out = _concat([(_zeros(w.shape, w.dtype) if g is None else g).reshape(-1)
                           for g, w in zip(grads, wrt, strict=True)]).astype(f64)
        else:
            seeds = {k_t[k].node.id: d for k, d in zip(d_k, rest, strict=True)}
            out = TRANSFORMS["jvp"](trace, list(trace.nodes), seeds).get(f.node.id)
            out = _zeros(f.shape, f64) if out is None else out.astype(f64)
    return body_of(trace, ins, [out])


def _adjoint_abstract(*args, body, times, solver, span, options, sizes, layers):
    return (layers * (args[layers].shape[1] + sum(sizes)),), np.dtype(np.float64)


def _adjoint_run(out, *arrays, body, times, solver, span, options, sizes, layers,
                 evaluator="reference"):
    """The backward sweep: the adjoint system integrated from each output
    time to the one before (and from the first to ``span[0]``), starting from
    the forward solution there, the cotangent of each row added at its time.
    ``layers``: the state is that many ``[y, a, acc]`` (one, and the tangents
    of each for every forward-mode derivative taken of the sweep), with their
    cotangents and forward solutions the first ``2 * layers`` operands."""
    gs, yss, consts = arrays[:layers], arrays[layers:2 * layers], arrays[2 * layers:]
    m, n_acc = yss[0].shape[1], sum(sizes)
    width = 2 * m + n_acc
    a = [np.array(g[-1], np.float64) for g in gs]
    acc = [np.zeros(n_acc) for _ in gs]
    stops = list(times[::-1])
    if span[0] != times[0]:
        stops.append(span[0])
    last, steps = len(times) - 1, [None]
    for i in range(len(stops) - 1):
        row = last - i
        seg = np.array([stops[i], stops[i + 1]], np.float64)
        z0 = np.concatenate([np.concatenate([ys[row], a_l, c_l])
                             for ys, a_l, c_l in zip(yss, a, acc, strict=True)])
        end = integrate(body, z0, seg, consts, solver, seg, options, evaluator, steps)[-1]
        for j in range(layers):
            a[j] = end[j * width + m:j * width + 2 * m]
            acc[j] = end[j * width + 2 * m:(j + 1) * width]
            if row > 0:
                a[j] = a[j] + gs[j][row - 1]
    out[...] = np.concatenate([np.concatenate([a_l, c_l]) for a_l, c_l in zip(a, acc,
                                                                               strict=True)])


def _adjoint_jvp(ts, node, *operands, body, times, solver, span, options, sizes, layers):
    """The sweep's tangent: the same sweep of the adjoint system's tangent
    system (twice the layers), the tangents of the cotangents and of the
    forward solution beside theirs."""
    args = operands[:-1]
    gs, yss, consts = args[:layers], args[layers:2 * layers], args[2 * layers:]
    tg, ty, tk = ts[:layers], ts[layers:2 * layers], ts[2 * layers:]
    d_k = [k for k, t in enumerate(tk) if t is not None]
    if all(t is None for t in tg + ty) and not d_k:
        return None
    from ..core.trace import bind

    def filled(t, like):
        return _zeros(like.shape, np.float64) if t is None else t.astype(np.float64)

    both = bind("ode_adjoint", *gs, *[filled(t, g) for t, g in zip(tg, gs, strict=True)],
                *yss, *[filled(t, y) for t, y in zip(ty, yss, strict=True)], *consts,
                *[tk[k] for k in d_k], body=_tangent_body(body, d_k), times=times,
                solver=solver, span=span, options=options, sizes=sizes, layers=2 * layers)
    return both[node.shape[0]:]


def _batch(node, batched, *args, **attrs):
    """A batch of ODEs (a Hessian's or Jacobian's tangents or cotangents): one
    solve per element, stacked (each is its own adaptive solve)."""
    from ..core.trace import bind

    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    return np.stack([bind(node.op, *(a[j] if b else a for a, b in zip(args, batched,
                                                                       strict=True)), **attrs)
                     for j in range(k)])


def _no_reverse(*_, **__):
    raise NotImplementedError(
        "the reverse sweep of an ODE (scipy.integrate.odeint / solve_ivp) cannot be reversed "
        "again; second derivatives (hybridad.hessian, hybridad.hvp) take forward over "
        "reverse, which is supported")


register(Op("ode", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp, batch=_batch,
            doc="an ODE solved by scipy.integrate (odeint, solve_ivp) at given times"))
register(Op("ode_adjoint", "compute", _adjoint_abstract, run=_adjoint_run, vjp=_no_reverse,
            jvp=_adjoint_jvp, batch=_batch,
            doc="the adjoint sweep of an ode node (its reverse-mode rule)"))
