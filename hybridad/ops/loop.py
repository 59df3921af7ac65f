"""The loop primitive: a body traced once, run ``length`` times.

:func:`hybridad.fori_loop` and :func:`hybridad.scan` trace their body once
into a :class:`LoopBody` -- a graph whose inputs are, in order, the iteration
index (when the body takes it), the *carries* (the state handed from one
iteration to the next), the per-iteration slices of the *xs* (arrays with a
leading axis of ``length``) and the *constants* (everything else the body
reads: closed-over traced values, captured arrays) -- and whose outputs are
the new carries, then the per-iteration outputs *ys*.

One ``loop`` node runs it.  Its operands are the initial carries, the xs and
the constants; its value is ONE flat buffer (the IR has one value per node)
holding, in the order ``attrs["order"]`` gives (body output positions), the
final value of each carry and the stacked ``ys`` (``length`` x its shape).
The tracer cuts each part out as a view (:func:`part`).  So every stage after
tracing handles it as one node of a known shape, and the plan's cost does not
grow with the trip count: the body is differentiated and compiled once.

Rules, all derived from the body graph:

* reverse (``vjp``): the forward loop saves the carry at the start of every
  iteration (``attrs["saved"]``: the body outputs that return the carries
  unchanged, stacked -- the *stored carries*, ``length`` x state); the
  backward is another ``loop`` over the body's reverse pass, run the other way
  round, carrying the carries' cotangents and the constants' accumulated
  cotangents, its per-iteration outputs the xs' cotangents;
* forward (``jvp``): a loop over the body's tangent pass, carrying each carry
  with its tangent (Hessian-vector products through loops: forward over the
  reverse loop);
* ``batch``: a loop over the body's batched graph (chunks of tangents: dense
  Hessians and Jacobians), batching only the carries a batched value reaches
  (the primal state a chunk's loop recomputes is carried once, not per seed).

Backends run the node with the body compiled once as a program of its own
(:mod:`hybridad.backends.loops`); the op's ``run`` is the reference, the body
evaluated node by node (what Python decisions on a loop's value use).  The
differentiating transforms are those of :mod:`hybridad.transforms` (a later
stage), which hands them to this module when it is imported
(:data:`TRANSFORMS`), so imports run one way.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..ir.graph import Graph, computed_from, dead_code_elimination, redirect
from .._settings import enabled
from ..ir.registry import REGISTRY, Op, may_raise, register

__all__ = ["TRANSFORMS", "LoopBody", "layout", "part", "replay"]

#: the graph transforms the rules apply to a body: ``backward``, ``jvp`` and
#: ``vmap``, set by :mod:`hybridad.transforms.autodiff` and
#: :mod:`hybridad.transforms.batching` when they are imported, and the memory
#: pass's ``plan_memory`` (what a body's workspace takes, :mod:`.memory`)
TRANSFORMS = {}


class LoopBody:
    """A loop body traced once.

    Parameters
    ----------
    graph : Graph
        Inputs: ``[index] + carries + xs slices + constants``; outputs: new
        carries, then the per-iteration outputs.
    index : bool
        Whether the first input is the iteration index (int64, 0-d).
    n_carry, n_xs : int
        How many inputs are carries and xs slices.
    """

    __slots__ = ("graph", "index", "key", "n_carry", "n_xs")

    def __init__(self, graph, index, n_carry, n_xs):
        self.graph = dead_code_elimination(graph)
        self.index = bool(index)
        self.n_carry = int(n_carry)
        self.n_xs = int(n_xs)
        self.key = _digest(self.graph, (self.index, self.n_carry, self.n_xs))

    def __getstate__(self):
        return (self.graph, self.index, self.n_carry, self.n_xs, self.key)

    def __setstate__(self, state):
        self.graph, self.index, self.n_carry, self.n_xs, self.key = state

    @property
    def n_const(self):
        return len(self.graph.inputs) - self.index - self.n_carry - self.n_xs

    @property
    def raises(self):
        """Whether some node of the body can fail at run time."""
        return any(may_raise(n) for n in self.graph.nodes)

    def __repr__(self):
        return (f"<loop body {self.key[:8]}: {self.n_carry} carries, {self.n_xs} xs, "
                f"{self.n_const} constants, {len(self.graph.nodes)} nodes>")


def _digest(graph, head):
    """A content hash of ``graph`` (ids renumbered, constants' bytes included):
    two bodies traced alike share their compiled programs."""
    h = hashlib.sha1(repr(head).encode())
    pos = {}
    for n in graph.nodes:
        pos[n.id] = len(pos)
        items = []
        for k in sorted(n.attrs):
            v = n.attrs[k]
            if isinstance(v, np.ndarray):
                h.update(v.dtype.str.encode() + repr(v.shape).encode() + v.tobytes())
                v = "<array>"
            elif isinstance(v, LoopBody):
                v = v.key
            items.append((k, repr(v)))
        h.update(repr((n.op, [pos[a.id] for a in n.args], items, n.shape,
                       n.dtype.str)).encode())
    h.update(repr(([pos[n.id] for n in graph.inputs],
                   [pos[n.id] for n in graph.outputs])).encode())
    return h.hexdigest()


def layout(body, length, order):
    """``[(body output position, offset, shape)]`` of a loop's value, in order:
    a carry's final value, or a per-iteration output stacked (``length`` first)."""
    out, offset = [], 0
    for k in order:
        node = body.graph.outputs[k]
        shape = node.shape if k < body.n_carry else (length, *node.shape)
        out.append((k, offset, shape))
        offset += int(np.prod(shape, dtype=np.int64))
    return out


def part(packed, offset, shape):
    """The view of ``packed`` (a loop's value, or its tangent) holding one part."""
    size = int(np.prod(shape, dtype=np.int64))
    return np.reshape(packed[offset:offset + size], shape)


def replay(graph, trace, inputs, env=None):
    """Emit ``graph``'s nodes into ``trace`` on the tracers ``inputs`` (one per
    graph input); returns the tracers of its outputs.  ``env``: a dict that
    receives node id -> tracer for every node."""
    from ..core.trace import bind
    from ..core.tracer import Tracer

    env = {} if env is None else env
    env.update({n.id: t for n, t in zip(graph.inputs, inputs, strict=True)})
    for n in graph.nodes:
        if n.id in env:
            continue
        if n.op == "const":
            env[n.id] = Tracer(trace.const(n.attrs["value"], n.attrs.get("literal", False)),
                               trace)
        else:
            env[n.id] = bind(n.op, *(env[a.id] for a in n.args), **n.attrs)
    return [env[n.id] for n in graph.outputs]


def _abstract(*args, body, length, start, reverse, order, saved):
    dtypes = {n.dtype for n in body.graph.outputs}
    if len(dtypes) != 1:
        raise TypeError("a loop's carries and per-iteration outputs must share one dtype; "
                        f"got {sorted(d.name for d in dtypes)}")
    last = layout(body, length, order)[-1] if order else (0, 0, (0,))
    return (last[1] + int(np.prod(last[2], dtype=np.int64)),), dtypes.pop()


def _sub_trace(specs):
    """A fresh trace and one input tracer per ``(shape, dtype)``."""
    from ..core.trace import Trace

    trace = Trace()
    with trace:
        inputs = [trace.input(i, s, d) for i, (s, d) in enumerate(specs)]
    return trace, inputs


def _specs(nodes):
    return [(n.shape, n.dtype) for n in nodes]


def _zeros(shape, dtype):
    from ..core.trace import bind

    return bind("zeros", shape=tuple(shape), dtype=np.dtype(dtype))


def _bind_loop(args, body, length, start, reverse, order, saved):
    from ..core.trace import bind

    return bind("loop", *args, body=body, length=length, start=start, reverse=reverse,
                order=tuple(order), saved=saved)


def _split(body, args):
    nc, nx = body.n_carry, body.n_xs
    return list(args[:nc]), list(args[nc:nc + nx]), list(args[nc + nx:])


def _vjp(g, node, active, *operands, body, length, start, reverse, order, saved):
    """The backward loop: the body's reverse pass, iterations the other way round."""
    if saved is None:
        raise NotImplementedError(
            "a loop emitted by a derivative (a reverse or tangent loop) cannot be reversed "
            "again; forward over reverse (hvp, hessian) is supported")
    nc = body.n_carry
    if len(saved) == nc and not enabled("recompute_partials"):
        kept = _keep_residuals(g, node, active, operands, body, length, start, reverse,
                               order, saved)
        if kept is not None:
            return kept
    return _reverse_loop(g, node, active, operands, body, length, start, reverse, order, saved)


def _keep_residuals(g, node, active, operands, body, length, start, reverse, order, saved):
    """The values of the forward body that its reverse pass reads (a matrix
    product's result, an activation), stored per iteration by the forward loop
    -- its node takes them as more per-iteration outputs, after the others --
    so that the reverse body reads them instead of recomputing them (as
    JAX's scan keeps residuals).  Not under a memory budget
    (``recompute_partials``): the carries alone are stored then.  None when
    the reverse pass needs nothing but the body's inputs."""
    nc = body.n_carry
    trace, _, env, _ = _reverse_body(body, active, saved)
    back = {n.id for n in trace.nodes if n.phase != "forward"}
    read = {a.id for n in trace.nodes if n.id in back for a in n.args}
    inputs = {n.id for n in body.graph.inputs}
    by_replay = {t.node.id: nid for nid, t in env.items()}
    residuals = []
    for n in body.graph.nodes:
        t = env.get(n.id)
        op = REGISTRY.get(n.op)
        if t is None or n.id in inputs or n.op == "const" or t.node.id not in read or \
                n.dtype != body.graph.outputs[0].dtype or op is None or op.kind == "view" or \
                n.op == "loop":  # (a nested loop keeps its own, and may widen while reversed)
            continue
        residuals.append(n)
    if not residuals or not all(by_replay.get(env[n.id].node.id) == n.id for n in residuals):
        return None
    g0 = body.graph
    # a residual that is a new carry (an RNN's h = tanh(...)) is the carry
    # stored at the next iteration: not stored twice, the reverse loop carries
    # it from one iteration to the one before (``shifted``)
    new_carry = {o.id: j for j, o in enumerate(g0.outputs[:nc])}
    shifted = tuple(new_carry[n.id] for n in residuals if n.id in new_carry)
    residuals = [n for n in residuals if n.id not in new_carry]
    first = len(g0.outputs)
    wider = LoopBody(Graph(g0.nodes, g0.inputs, [*g0.outputs, *residuals]), body.index,
                     body.n_carry, body.n_xs)
    extra = tuple(range(first, first + len(residuals)))
    reversed_body = _reverse_body(wider, active, tuple(saved) + extra, shifted)
    if _stored_bytes(wider, reversed_body, residuals, shifted) > \
            RESIDUAL_SLACK * sum(c.nbytes for c in g0.inputs[int(body.index):][:nc]):
        return None  # (an RK4 step's four stages: the carry stored, the stages recomputed)
    attrs = dict(node.attrs, body=wider, order=tuple(order) + extra, saved=tuple(saved) + extra)
    node.attrs = attrs
    node.shape = _abstract(*node.args, **attrs)[0]
    return _reverse_loop(g, node, active, operands, wider, length, start, reverse,
                         attrs["order"], attrs["saved"], shifted, reversed_body)


#: residuals are kept while what the forward loop stores per iteration with
#: them is at most this many times its carries (the issue of loops: peak
#: memory within the stored carries plus 10 %); beyond, the carries alone are
#: stored and the reverse body recomputes the step from them (an RK4 Hessian
#: through 10^3 steps: 28 -> 7.3 x the carries, 1.3 x the time a call)
RESIDUAL_SLACK = 1.1


def _stored_bytes(body, reversed_body, residuals, shifted):
    """Bytes per iteration the forward loop stores for the reverse body
    ``reversed_body`` (:func:`_reverse_body`'s answer): the residuals, and
    each carry that body still reads (its recomputation from the carry is
    otherwise dead code)."""
    _, ins, _, (results, _, a_k, _) = reversed_body
    live, todo = set(), [t.node for t in results]
    while todo:
        n = todo.pop()
        if n.id not in live:
            live.add(n.id)
            todo.extend(n.args)
    nc = body.n_carry
    first = int(body.index) + nc + len(a_k) + len(shifted)  # (the stored carries' inputs)
    carries = body.graph.inputs[int(body.index):][:nc]
    return sum(r.nbytes for r in residuals) + sum(
        c.nbytes for c, t in zip(carries, ins[first:first + nc], strict=True)
        if t.node.id in live)


def _reverse_body(body, active, saved, shifted=()):
    """The trace of the reverse body and its inputs: ``[index] + (carry
    cotangents, constants' sums, the next iteration's carries ``shifted``
    names) + (stored carries, residuals, xs slices, ys' cotangents) +
    constants``.  The new carries ``shifted`` names are read from those
    carries, each the stored carry of the iteration after (the next iteration
    of the reverse body gets this one's stored carry)."""
    backward = TRANSFORMS["backward"]
    gin = body.graph.inputs
    nc, nx, idx = body.n_carry, body.n_xs, int(body.index)
    a_x = [k for k in range(nx) if active[nc + k]]
    a_k = [k for k in range(len(gin) - idx - nc - nx) if active[nc + nx + k]]
    residuals = [body.graph.outputs[k] for k in saved[nc:]]
    user_ys = [k for k in range(nc, len(body.graph.outputs)) if k not in saved]
    c_in, x_in, k_in = gin[idx:idx + nc], gin[idx + nc:idx + nc + nx], gin[idx + nc + nx:]
    specs = _specs(gin[:idx]) + _specs(c_in) + _specs([k_in[k] for k in a_k]) + \
        _specs([c_in[j] for j in shifted]) + _specs(c_in) + _specs(residuals) + _specs(x_in) + \
        _specs([body.graph.outputs[k] for k in user_ys]) + _specs(k_in)
    trace, ins = _sub_trace(specs)
    it = iter(ins)
    index = [next(it)] if idx else []
    ct_c = [next(it) for _ in range(nc)]
    acc = [next(it) for _ in a_k]
    nxt = [next(it) for _ in shifted]
    c_t = [next(it) for _ in range(nc)]
    r_t = [next(it) for _ in residuals]
    x_t = [next(it) for _ in range(nx)]
    ct_y = [next(it) for _ in user_ys]
    k_t = [next(it) for _ in k_in]
    env = {}
    with trace:
        outs = replay(body.graph, trace, index + c_t + x_t + k_t, env=env)
        wrt = c_t + [x_t[k] for k in a_x] + [k_t[k] for k in a_k]
        grads = backward(trace, outs[:nc] + [outs[k] for k in user_ys], ct_c + ct_y, wrt,
                         inplace=False)
        grads = [_zeros(w.shape, w.dtype) if gr is None else gr
                 for gr, w in zip(grads, wrt, strict=True)]
        new_ct = grads[:nc]
        ct_x = grads[nc:nc + len(a_x)]
        new_acc = [s if (s := start_sum_at(a, gr)) is not None else a + gr
                   for a, gr in zip(acc, grads[nc + len(a_x):], strict=True)]
    results = new_ct + new_acc + [c_t[j] for j in shifted] + ct_x
    # the reverse pass reads the stored residuals, not their recomputation (the
    # forward nodes that computed them are left to dead-code elimination)
    stored = {env[r.id].node.id: t.node for r, t in zip(residuals, r_t, strict=True)}
    new_carries = body.graph.outputs[:nc]
    stored.update({env[new_carries[j].id].node.id: t.node
                   for j, t in zip(shifted, nxt, strict=True)})
    redirect([n for n in trace.nodes if n.phase != "forward"], stored)
    return trace, ins, env, (results, a_x, a_k, user_ys)


def start_sum_at(acc, gr):
    """``acc + gr`` without an add where ``gr`` is a sum a reverse loop
    accumulates from zero (a constant's cotangent: the part of that loop's
    value holding a carry the body only adds to): the loop's sum starts at
    ``acc`` instead, in place.  Sums then run in the unsplit loop's order --
    a checkpointed loop's segments (nested loops, and a tail loop) continue
    one another's sums -- so its gradient is bitwise the unsplit loop's.
    None where ``gr`` is not such a sum (add them)."""
    found = _summed_carry(gr.node)
    if found is None:
        return None
    loop, k = found
    init = loop.args[k]
    if init.op != "zeros" or acc.shape != gr.shape or acc.dtype != gr.dtype or \
            computed_from(acc.node, loop):  # (x both a carry's start and a constant)
        return None
    redirect([loop], {init.id: acc.node})
    return gr


def _summed_carry(node):
    """``(loop, k)`` where ``node`` is the final value of carry ``k`` of a
    reverse ``loop`` whose body only adds to that carry (``c + x``, or a
    nested reverse loop's sum started at ``c``), and which reads its initial
    value nowhere else; or None."""
    view = node.args[0] if node.op == "reshape" and node.args else node
    if view.op != "getitem" or not view.args or view.args[0].op != "loop":
        return None
    loop, index = view.args[0], view.attrs["index"]
    if loop.attrs["saved"] is not None or len(index) != 1 or type(index[0]) is not slice or \
            index[0].step not in (None, 1):
        return None
    body = loop.attrs["body"]
    for k, off, shape in layout(body, loop.attrs["length"], loop.attrs["order"]):
        if off == index[0].start and k < body.n_carry and tuple(shape) == tuple(node.shape):
            carry, new = body.graph.inputs[int(body.index) + k], body.graph.outputs[k]
            readers = [n for n in body.graph.nodes if carry in n.args]
            if sum(a is loop.args[k] for a in loop.args) != 1:
                return None
            if new is carry and not readers:
                return loop, k
            if new.op == "add" and new.args[0] is carry and readers == [new]:
                return loop, k
            inner = _summed_carry(new)
            if inner is not None and inner[0].args[inner[1]] is carry and readers == [inner[0]]:
                return loop, k
            return None
    return None


def _reverse_loop(g, node, active, operands, body, length, start, reverse, order, saved,
                  shifted=(), reversed_body=None):
    args, ans = operands[:-1], operands[-1]
    nc, nx, idx = body.n_carry, body.n_xs, int(body.index)
    carries, xs, consts = _split(body, args)
    trace, ins, _, (results, a_x, a_k, user_ys) = reversed_body or \
        _reverse_body(body, active, saved, shifted)
    where = {k: (off, shape) for k, off, shape in layout(body, length, order)}
    n_carry = nc + len(a_k) + len(shifted)
    rbody = LoopBody(Graph(trace.nodes, [t.node for t in ins], [t.node for t in results]),
                     idx, n_carry, len(saved) + nx + len(user_ys))
    finals = [part(g, *where[j]) for j in range(nc)]
    zeros = [_zeros(consts[k].shape, consts[k].dtype) for k in a_k]
    last = [part(ans, *where[j]) for j in shifted]  # the carries after the last iteration
    stored = [part(ans, *where[k]) for k in saved]
    gys = [part(g, *where[k]) for k in user_ys]
    n_out = n_carry + len(a_x)
    packed = _bind_loop(finals + zeros + last + stored + xs + gys + consts, rbody, length, start,
                        not reverse, range(n_out), None)
    rl = layout(rbody, length, range(n_out))
    cts = [part(packed, off, shape) for _, off, shape in rl]
    out = [None] * len(args)
    for j in range(nc):
        if active[j]:
            out[j] = cts[j]
    for m, k in enumerate(a_k):
        out[nc + nx + k] = cts[nc + m]
    for m, k in enumerate(a_x):
        out[nc + k] = cts[n_carry + m]
    return tuple(out)


def _jvp(ts, node, *operands, body, length, start, reverse, order, saved):
    """A loop over the body's tangent pass: each carry carried with its tangent."""
    args = operands[:-1]
    jvp = TRANSFORMS["jvp"]
    gin, gout = body.graph.inputs, body.graph.outputs
    nc, nx, idx = body.n_carry, body.n_xs, int(body.index)
    carries, xs, consts = _split(body, args)
    tc, tx, tk = _split(body, ts)
    d_x = [k for k in range(nx) if tx[k] is not None]
    d_k = [k for k in range(len(consts)) if tk[k] is not None]
    c_in, x_in, k_in = gin[idx:idx + nc], gin[idx + nc:idx + nc + nx], gin[idx + nc + nx:]
    specs = _specs(gin[:idx]) + _specs(c_in) * 2 + _specs(x_in) + \
        _specs([x_in[k] for k in d_x]) + _specs(k_in) + _specs([k_in[k] for k in d_k])
    trace, ins = _sub_trace(specs)
    it = iter(ins)
    index = [next(it)] if idx else []
    c_t = [next(it) for _ in range(nc)]
    dc_t = [next(it) for _ in range(nc)]
    x_t = [next(it) for _ in range(nx)]
    dx_t = [next(it) for _ in d_x]
    k_t = [next(it) for _ in consts]
    dk_t = [next(it) for _ in d_k]
    with trace:
        outs = replay(body.graph, trace, index + c_t + x_t + k_t)
        seeds = {c.node.id: d for c, d in zip(c_t, dc_t, strict=True)}
        seeds.update({x_t[k].node.id: d for k, d in zip(d_x, dx_t, strict=True)})
        seeds.update({k_t[k].node.id: d for k, d in zip(d_k, dk_t, strict=True)})
        tmap = jvp(trace, list(trace.nodes), dict(seeds))
        touts = [tmap.get(o.node.id) for o in outs]
        touts = [_zeros(o.shape, o.dtype) if t is None else t
                 for t, o in zip(touts, outs, strict=True)]
    n_y = len(gout) - nc
    new_outs = outs[:nc] + touts[:nc] + outs[nc:] + touts[nc:]
    jbody = LoopBody(Graph(trace.nodes, [t.node for t in ins], [t.node for t in new_outs]),
                     idx, 2 * nc, nx + len(d_x))

    def pos(k):
        return k if k < nc else nc + k

    def tpos(k):
        return nc + k if k < nc else nc + n_y + k
    dinit = [_zeros(c.shape, c.dtype) if t is None else t for c, t in zip(carries, tc, strict=True)]
    packed = _bind_loop(carries + dinit + xs + [tx[k] for k in d_x] + consts +
                        [tk[k] for k in d_k], jbody, length, start, reverse,
                        [pos(k) for k in order] + [tpos(k) for k in order], None)
    n = node.shape[0]
    return packed[n:2 * n]


def _batched_carries(body, bc, bx, bk):
    """Which carries the batched loop carries batched: those given batched,
    and every one whose new value depends, in the body, on a batched input --
    to a fixed point (the others stay one value for the whole batch, as JAX's
    batched loops keep them: a Hessian chunk's tangents are batched, the
    primal state its loop recomputes is not)."""
    gin = body.graph.inputs
    nc, idx = body.n_carry, int(body.index)
    outs = body.graph.outputs[:nc]
    fixed = [n.id for n, b in zip(gin[idx + nc:], [*bx, *bk], strict=True) if b]
    batched = list(bc)
    while True:
        dep = set(fixed) | {gin[idx + j].id for j in range(nc) if batched[j]}
        for n in body.graph.nodes:
            if n.id not in dep and any(a.id in dep for a in n.args):
                dep.add(n.id)
        more = [b or o.id in dep for b, o in zip(batched, outs, strict=True)]
        if more == batched:
            return batched
        batched = more


def _batch(node, batched, *args, body, length, start, reverse, order, saved):
    """A loop over the body's batched graph: the carries that a batched value
    reaches batched (:func:`_batched_carries`), the others not; every
    per-iteration output batched."""
    vmap = TRANSFORMS["vmap"]
    gin = body.graph.inputs
    nc, nx, idx = body.n_carry, body.n_xs, int(body.index)
    carries, xs, consts = _split(body, args)
    given, bx, bk = _split(body, batched)
    bc = _batched_carries(body, given, bx, bk)
    k = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    specs = _specs(gin[:idx]) + \
        [((k, *n.shape), n.dtype) for n, b in zip(gin[idx:idx + nc], bc, strict=True) if b] + \
        [((k, *n.shape) if b else n.shape, n.dtype)
         for n, b in zip(gin[idx + nc:idx + nc + nx], bx, strict=True)] + \
        [((k, *n.shape) if b else n.shape, n.dtype)
         for n, b in zip(gin[idx + nc + nx:], bk, strict=True)] + \
        _specs(gin[idx:idx + nc])  # the carries unbatched (the batched ones' placeholders)
    trace, ins = _sub_trace(specs)
    nb = sum(bc)
    index = ins[:idx]
    c_b = iter(ins[idx:idx + nb])
    c_b = [next(c_b) if b else None for b in bc]
    x_in = ins[idx + nb:idx + nb + nx]
    k_in = ins[idx + nb + nx:idx + nb + nx + len(consts)]
    c_plain = ins[idx + nb + nx + len(consts):]
    with trace:
        # the body on unbatched stand-ins, then what depends on a batched value again
        x_plain = [x if not b else x[0] for x, b in zip(x_in, bx, strict=True)]
        k_plain = [c if not b else c[0] for c, b in zip(k_in, bk, strict=True)]
        outs = replay(body.graph, trace, index + c_plain + x_plain + k_plain)
        seeds = {c.node.id: b for c, b in zip(c_plain, c_b, strict=True) if b is not None}
        seeds.update({p.node.id: x for p, x, b in zip(x_plain, x_in, bx, strict=True) if b})
        seeds.update({p.node.id: c for p, c, b in zip(k_plain, k_in, bk, strict=True) if b})
        bmap = vmap(trace, list(trace.nodes), dict(seeds), k)
        bouts = [bmap.get(o.node.id) for o in outs]
        bouts = [o if j < nc and not bc[j] else
                 np.broadcast_to(o, (k, *o.shape)) + 0 if b is None else b
                 for j, (b, o) in enumerate(zip(bouts, outs, strict=True))]
    carried = [p if c is None else c for c, p in zip(c_b, c_plain, strict=True)]
    bbody = LoopBody(Graph(trace.nodes, [t.node for t in index + carried + x_in + k_in],
                           [t.node for t in bouts]), idx, nc, nx)
    binit = [np.broadcast_to(c, (k, *c.shape)) if b and not was else c
             for c, b, was in zip(carries, bc, given, strict=True)]
    bxs = [np.moveaxis(x, 0, 1) if b else x for x, b in zip(xs, bx, strict=True)]
    packed = _bind_loop(binit + bxs + consts, bbody, length, start, reverse, order, None)
    parts = []
    for j, off, shape in layout(bbody, length, order):
        p = part(packed, off, shape)
        if j >= nc:  # stacked (length, k, ...): the batch axis first
            p = np.moveaxis(p, 1, 0)
        elif not bc[j]:  # one value for the batch
            p = np.broadcast_to(np.reshape(p, (1, -1)), (k, p.size))
        parts.append(np.reshape(p, (k, -1)))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _run(out, *arrays, body, length, start, reverse, order, saved):
    """The reference: every iteration evaluates the body graph by its ops'
    own reference implementations (:func:`hybridad.core.decisions.evaluate`,
    which Python decisions on traced values use too).  It allocates; the
    backends run a loop with its body compiled (:mod:`hybridad.backends.loops`)."""
    from ..core.decisions import evaluate

    nc, nx, idx = body.n_carry, body.n_xs, int(body.index)
    outs = body.graph.outputs
    where = {k: (off, shape) for k, off, shape in layout(body, length, order)}
    carries = [np.array(a) for a in arrays[:nc]]
    xs, consts = arrays[nc:nc + nx], list(arrays[nc + nx:])
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        leaves = [np.int64(start + t)] * idx + carries + [x[t, ...] for x in xs] + consts
        cache = {}
        values = [evaluate(o, leaves, cache)[0] for o in outs]
        carries = [np.array(v) for v in values[:nc]]
        for k in range(nc, len(outs)):
            part(out, *where[k])[t] = values[k]
    for k in range(nc):
        part(out, *where[k])[...] = carries[k]


def _raises(node):
    return node.attrs["body"].raises


def _held(node):
    """What a backend keeps for the loop beside the plan's arena: two sets of
    carries (the runner's) and the body's workspace, its memory plan (by the
    memory pass, the one caller, which hands it in: :data:`TRANSFORMS`;
    nested loops count their own in turn).  A numba plan gives a loop whose
    body runs natively this workspace in its arena instead, as the node's
    scratch (then nothing is held beside it)."""
    body = node.attrs["body"]
    carries = sum(n.nbytes for n in body.graph.outputs[:body.n_carry])
    return 2 * carries + TRANSFORMS["plan_memory"](body.graph).total_bytes


register(Op("loop", "compute", _abstract, run=_run, vjp=_vjp, jvp=_jvp, batch=_batch,
            raises=_raises, held=_held, packed=True,
            doc="a body traced once, run length times (hybridad.fori_loop, hybridad.scan)"))
