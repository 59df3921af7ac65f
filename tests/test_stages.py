"""Each pipeline stage on its own, on small hand-built graphs.

In the spirit of tinygrad's ``test_memory_planner.py`` and JAX's
``check_jaxpr``: graphs are built with :class:`hybridad.core.trace.Trace` and
:func:`hybridad.core.trace.bind` (never through ``hybridad.gradient``), then one
stage runs and its output is checked against what its rules promise:

* autodiff (:func:`hybridad.transforms.autodiff.backward`): the backward nodes it
  appends, activity analysis, and the value of the gradient (a tiny numpy
  evaluator of the IR, against central finite differences);
* partition (:func:`hybridad.transforms.partition.find_regions`, ``fuse_regions``,
  ``fold_accumulations``): which nodes form a region, single-output,
  convexity and maximality over random DAGs, fused graphs computing the same;
* memory (:func:`hybridad.transforms.memory.plan_memory`): exact lifetimes, slot
  sharing, no overlap of live slots over random graphs, alignment, bounds,
  and the numpy reference program run over the packed (poisoned) arena.

Nothing here compiles with numba.
"""

import numpy as np
import pytest

from hybridad.transforms.autodiff import active_nodes, backward
from hybridad.backends.numpy.program import compile_program
from hybridad.ir.graph import Graph, check, users_of
from hybridad.transforms.memory import ALIGN, plan_memory
from hybridad.ops import REGISTRY, storage_root
from hybridad.transforms.partition import (FUSABLE_REDUCTIONS, find_regions, fold_accumulations,
                                           fuse_regions)
from hybridad.core.trace import Trace, bind

F64 = np.dtype(np.float64)


# ----------------------------------------------------------------------------
# helpers: building graphs, a tiny reference evaluator of the IR
# ----------------------------------------------------------------------------


def total(t):
    """Full sum of a tracer (the ``sum`` primitive over every axis)."""
    return bind("sum", t, axis=tuple(range(len(t.shape))), keepdims=False)


def trace_grad(build, shapes, wrt=None, seed=False):
    """Trace ``build(*inputs)`` and append its reverse pass.

    Returns ``(graph, n_forward, out_node, grads)``: the graph's inputs are
    the ``input`` nodes (the seed last, when ``seed``), its outputs the value
    then the non-None gradients; ``n_forward`` is the number of forward nodes;
    ``grads`` has one entry (Node or None) per ``wrt`` position."""
    tr = Trace()
    with tr:
        xs = [tr.input(i, s, F64) for i, s in enumerate(shapes)]
        out = build(*xs)
        n_forward = len(tr.nodes)
        s = tr.input(len(xs), out.shape, out.dtype) if seed else None
        targets = xs if wrt is None else [xs[i] for i in wrt]
        grads = backward(tr, out, targets, seed=s)
    inputs = [x.node for x in xs] + ([s.node] if seed else [])
    grads = [None if g is None else g.node for g in grads]
    graph = Graph(tr.nodes, inputs, [out.node] + [g for g in grads if g is not None])
    check(graph)
    return graph, n_forward, out.node, grads


def _run_node(n, vals):
    op = REGISTRY[n.op]
    args = [vals[a.id] for a in n.args]
    if op.kind == "view":
        return op.view(*args, **n.attrs)
    if op.kind == "inplace":  # writes into its first operand's storage, as the backends do
        op.run(args[0], *args, **n.attrs)
        return args[0]
    out = np.empty(n.shape, n.dtype)
    op.run(out, *args, **n.attrs)
    return out


def _run_region(n, vals):
    """A ``region`` / ``region_acc`` node: its (cloned) body, node by node."""
    body = n.attrs["body"]
    local = dict(vals)
    operands = n.args[1:] if n.op == "region_acc" else n.args
    assert [a.id for a in operands] == [a.id for a in body.inputs]
    for m in body.nodes + ([body.reduction] if body.reduction is not None else []):
        local[m.id] = _run_node(m, local)
    value = local[body.output.id]
    if n.op == "region":
        return np.array(value, dtype=n.dtype)
    acc = vals[n.args[0].id]
    index = n.attrs.get("index")
    target = acc if index is None else acc[index + (...,)]
    np.add(target, value, out=target)
    return acc


def evaluate(nodes, args):
    """node id -> value, running every node's numpy reference (``Op.run`` /
    ``Op.view``; regions through their bodies) in graph order."""
    vals = {}
    with np.errstate(all="ignore"):
        for n in nodes:
            if n.op == "input":
                vals[n.id] = np.array(args[n.attrs["index"]], dtype=n.dtype)
            elif n.op == "const":
                vals[n.id] = n.attrs["value"]
            elif n.op in ("region", "region_acc"):
                vals[n.id] = _run_region(n, vals)
            else:
                vals[n.id] = _run_node(n, vals)
    return vals


def central_difference(graph, n_forward, out, args, k, eps=1e-6):
    """d out / d args[k] of the forward nodes, by central differences."""
    fwd = graph.nodes[:n_forward]
    grad = np.zeros_like(args[k])
    for i in np.ndindex(args[k].shape):
        hi = [a.copy() for a in args]
        lo = [a.copy() for a in args]
        hi[k][i] += eps
        lo[k][i] -= eps
        grad[i] = (evaluate(fwd, hi)[out.id] - evaluate(fwd, lo)[out.id]) / (2 * eps)
    return grad


def backward_nodes(graph, n_forward):
    back = graph.nodes[n_forward:]
    assert all(n.phase == "backward" for n in back if n.op != "input")
    return [n for n in back if n.op != "input"]


def backward_ops(graph, n_forward, skip=("const",)):
    return [n.op for n in backward_nodes(graph, n_forward) if n.op not in skip]


def assert_gradients_match_fd(graph, n_forward, out, grads, args, seed=None):
    vals = evaluate(graph.nodes, list(args) + ([seed] if seed is not None else []))
    for k, g in enumerate(grads):
        if g is None:
            continue
        fd = central_difference(graph, n_forward, out, list(args), k)
        if seed is not None:
            fd = fd * seed
        assert vals[g.id].shape == args[k].shape
        np.testing.assert_allclose(vals[g.id], fd, rtol=1e-6, atol=1e-8)


def _rng_args(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, s) for s in shapes]


# ----------------------------------------------------------------------------
# autodiff
# ----------------------------------------------------------------------------


def test_autodiff_chain_exp_sum():
    # seeded: sum's VJP broadcasts the seed (views), exp's multiplies by the
    # forward value exp(x) -- reused, not recomputed; nothing else
    graph, nf, out, (gx,) = trace_grad(lambda x: total(bind("exp", x)), [(5,)], seed=True)
    back = backward_nodes(graph, nf)
    assert [n.op for n in back] == ["reshape", "broadcast_to", "safe_multiply"]
    assert all(n.phase == "backward" for n in back)
    assert all(n.phase == "forward" for n in graph.nodes[:nf])
    (exp_node,) = [n for n in graph.nodes if n.op == "exp"]
    mul = back[-1]
    assert gx is mul and mul.args == (back[1], exp_node)
    args = _rng_args([(5,)], 0)
    assert_gradients_match_fd(graph, nf, out, [gx], args, seed=np.float64(1.5))

    # seed 1 (a literal): g * exp(x) folds to exp(x) -- the gradient IS the
    # forward node and the backward sweep computes nothing
    graph, nf, out, (gx,) = trace_grad(lambda x: total(bind("exp", x)), [(5,)])
    assert backward_ops(graph, nf) == []
    assert gx.op == "exp" and gx.phase == "forward"
    assert_gradients_match_fd(graph, nf, out, [gx], args)


def test_autodiff_diamond_accumulates_in_place():
    # x*x + sin(x): three contributions to x's adjoint -- the first fresh one
    # becomes the adjoint, the next two are added into it (iadd), no sum of temporaries
    def f(x):
        return total(bind("add", bind("multiply", x, x), bind("sin", x)))

    graph, nf, out, (gx,) = trace_grad(f, [(6,)], seed=True)
    ops = backward_ops(graph, nf)
    assert sorted(ops) == sorted(["reshape", "broadcast_to", "cos", "safe_multiply",
                                  "safe_multiply", "safe_multiply", "iadd", "iadd"])
    assert "add" not in ops and "subtract" not in ops
    iadds = [n for n in backward_nodes(graph, nf) if n.op == "iadd"]
    assert gx is iadds[-1]
    assert iadds[1].args[0] is iadds[0], "the second add goes into the first's buffer"
    first = iadds[0].args[0]
    assert first.op == "safe_multiply" and first.phase == "backward"
    assert storage_root(gx) is first
    _assert_in_place_only_into_fresh_adjoints(graph, nf)
    x = graph.inputs[0]
    (cos,) = [n for n in graph.nodes if n.op == "cos"]
    assert cos.args == (x,)
    assert_gradients_match_fd(graph, nf, out, [gx], _rng_args([(6,)], 1), seed=np.float64(-0.7))
    # and with the literal seed
    graph, nf, out, grads = trace_grad(f, [(6,)])
    assert_gradients_match_fd(graph, nf, out, grads, _rng_args([(6,)], 2))


def test_autodiff_broadcast_add_sums_back_over_broadcast_axes():
    graph, nf, out, (ga, gb) = trace_grad(lambda a, b: total(bind("add", a, b)),
                                          [(3, 1), (1, 4)], seed=True)
    sums = [n for n in backward_nodes(graph, nf) if n.op == "sum"]
    assert len(sums) == 2
    assert ga.op == "sum" and ga.attrs == {"axis": (1,), "keepdims": True} and ga.shape == (3, 1)
    assert gb.op == "sum" and gb.attrs == {"axis": (0,), "keepdims": True} and gb.shape == (1, 4)
    assert backward_ops(graph, nf) == ["reshape", "broadcast_to", "sum", "sum"]
    args = _rng_args([(3, 1), (1, 4)], 3)
    assert_gradients_match_fd(graph, nf, out, [ga, gb], args, seed=np.float64(2.0))

    # b constant: no adjoint, so no sum over axis 0 is emitted for it
    graph, nf, out, (ga,) = trace_grad(lambda a, b: total(bind("add", a, b)),
                                       [(3, 1), (1, 4)], wrt=[0], seed=True)
    assert backward_ops(graph, nf) == ["reshape", "broadcast_to", "sum"]
    assert ga.attrs["axis"] == (1,)

    # a nonlinear broadcast: b gets contributions through the add and the multiply
    def g(a, b):
        return total(bind("multiply", bind("exp", bind("add", a, b)), b))

    graph, nf, out, grads = trace_grad(g, [(3, 1), (1, 4)])
    assert [gr.shape for gr in grads] == [(3, 1), (1, 4)]
    assert_gradients_match_fd(graph, nf, out, grads, args)


def test_autodiff_matmul():
    graph, nf, out, (ga, gb) = trace_grad(lambda a, b: total(bind("matmul", a, b)),
                                          [(3, 2), (2, 4)], seed=True)
    a, b = graph.inputs[:2]
    assert backward_ops(graph, nf) == ["reshape", "broadcast_to", "transpose", "matmul",
                                       "transpose", "matmul"]
    # dA = g @ B^T, dB = A^T @ g: the transposes are views of the forward operands
    assert ga.op == "matmul" and ga.args[1].op == "transpose" and ga.args[1].args == (b,)
    assert gb.op == "matmul" and gb.args[0].op == "transpose" and gb.args[0].args == (a,)
    args = _rng_args([(3, 2), (2, 4)], 4)
    assert_gradients_match_fd(graph, nf, out, [ga, gb], args, seed=np.float64(0.5))

    # only A active: one product, B's transpose only
    def f(a, b):
        return total(bind("tanh", bind("matmul", a, b)))

    graph, nf, out, (ga,) = trace_grad(f, [(3, 2), (2, 4)], wrt=[0])
    back = backward_nodes(graph, nf)
    assert [n.op for n in back].count("matmul") == 1
    assert [n.args[0] for n in back if n.op == "transpose"] == [graph.inputs[1]]
    assert_gradients_match_fd(graph, nf, out, [ga], args)
    graph, nf, out, grads = trace_grad(f, [(3, 2), (2, 4)])
    assert_gradients_match_fd(graph, nf, out, grads, args)


def test_activity_analysis():
    tr = Trace()
    with tr:
        x = tr.input(0, (4,), F64)
        c = tr.input(1, (4,), F64)
        k = tr.input(2, (4,), np.int64)
        xc = bind("multiply", x, c)
        cc = bind("multiply", c, c)  # depends on c only
        kx = bind("multiply", x, bind("cast", k, dtype=F64))
        unused = bind("exp", x)  # the output does not depend on it
        mask = bind("greater", x, c)  # bool: derived from x, yet not differentiable
        picked = bind("where", mask, cc, c)  # depends on x only through the mask
        out = total(bind("add", bind("add", bind("add", xc, cc), kx), picked))
    nodes = list(tr.nodes)
    act = active_nodes(nodes, {x.node.id}, out.node.id)
    sums = [n for n in nodes if n.op == "add"]
    assert act == {x.node.id, xc.node.id, kx.node.id, out.node.id} | {n.id for n in sums}
    assert cc.node.id not in act and c.node.id not in act and k.node.id not in act
    assert unused.node.id not in act
    assert mask.node.id not in act and picked.node.id not in act


def _assert_in_place_only_into_fresh_adjoints(graph, n_forward):
    """Every in-place update writes into a buffer the reverse pass made for that
    adjoint: never an input, a constant, a forward value or a (broadcast) view."""
    fresh = {n.id for n in backward_nodes(graph, n_forward)}
    for n in backward_nodes(graph, n_forward):
        if n.op in REGISTRY and REGISTRY[n.op].kind == "inplace":
            root = storage_root(n)
            assert root.id in fresh and root.op not in ("input", "const"), \
                f"%{n.id} {n.op} writes into %{root.id} {root.op}"


@pytest.mark.parametrize("seed", [False, True])
def test_autodiff_fan_out_never_adds_into_a_shared_cotangent(seed):
    # e = exp(x) feeds e + e*e: its adjoint starts as the incoming cotangent
    # (not ours to write), so the later contributions must not be added into it
    def f(x):
        e = bind("exp", x)
        return total(bind("add", e, bind("multiply", e, e)))

    graph, nf, out, grads = trace_grad(f, [(5,)], seed=seed)
    _assert_in_place_only_into_fresh_adjoints(graph, nf)
    assert_gradients_match_fd(graph, nf, out, grads, _rng_args([(5,)], 12),
                              seed=np.float64(0.9) if seed else None)


def test_constants_get_no_adjoint_and_zero_gradients_stay_symbolic():
    const = np.linspace(0.1, 1.0, 5)

    def f(x, y):  # y does not reach the output; exp(const) is constant
        return total(bind("multiply", bind("exp", const), bind("sin", x)))

    graph, nf, out, (gx, gy) = trace_grad(f, [(5,), (5,)], seed=True)
    assert gy is None, "an input the output does not depend on has no gradient node"
    ops = backward_ops(graph, nf)
    # the adjoint of x only: g * exp(c) * cos(x); nothing for exp(const) or for y
    assert sorted(ops) == sorted(["reshape", "broadcast_to", "safe_multiply", "cos",
                                  "safe_multiply"])
    assert "zeros" not in ops and "exp" not in ops
    for n in backward_nodes(graph, nf):
        if n.op == "const":
            assert np.any(n.attrs["value"] != 0), "no zero adjoint materialized"
    assert len(graph.outputs) == 2
    args = _rng_args([(5,), (5,)], 5)
    assert_gradients_match_fd(graph, nf, out, [gx], args, seed=np.float64(1.25))


# ----------------------------------------------------------------------------
# partition
# ----------------------------------------------------------------------------


def _trace_forward(build, shapes):
    tr = Trace()
    with tr:
        xs = [tr.input(i, s, F64) for i, s in enumerate(shapes)]
        outs = build(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tr.nodes, [x.node for x in xs], [o.node for o in outs]


def test_elementwise_chain_is_one_region():
    def f(x):
        return bind("multiply", bind("sin", bind("exp", x)), bind("tanh", x))

    nodes, (x,), (out,) = _trace_forward(f, [(7,)])
    (region,) = find_regions(nodes, [out])
    assert [n.op for n in region.nodes] == ["exp", "sin", "tanh", "multiply"]
    assert region.reduction is None and region.output is out
    assert region.inputs == [x] and region.shape == (7,)


def test_reduction_consuming_the_chain_joins_the_region():
    def f(x):
        return total(bind("sin", bind("exp", x)))

    nodes, _, (out,) = _trace_forward(f, [(3, 4)])
    (region,) = find_regions(nodes, [out])
    assert [n.op for n in region.nodes] == ["exp", "sin"]
    assert region.reduction is out and region.output is out and region.shape == (3, 4)
    # only the reductions asked for
    (region,) = find_regions(nodes, [out], reductions=())
    assert region.reduction is None and region.output.op == "sin"
    assert "prod" not in FUSABLE_REDUCTIONS
    nodes, _, (out,) = _trace_forward(
        lambda x: bind("prod", bind("sin", x), axis=(0,), keepdims=False), [(5,)])
    (region,) = find_regions(nodes, [out])
    assert region.reduction is None


def test_a_value_used_outside_stays_a_region_output():
    def f(x, a):
        e = bind("exp", x)  # read by the chain and by the matmul
        left = total(bind("sin", bind("multiply", e, x)))
        right = total(bind("tanh", bind("matmul", a, bind("reshape", e, shape=(4, 1)))))
        return bind("add", left, right)

    nodes, (x, a), (out,) = _trace_forward(f, [(4,), (3, 4)])
    regions = find_regions(nodes, [out])
    by_out = {r.output.op: r for r in regions}
    exp_region = [r for r in regions if r.nodes[-1].op == "exp"]
    assert len(exp_region) == 1 and exp_region[0].nodes[0].op == "exp"
    assert len(exp_region[0].nodes) == 1 and exp_region[0].reduction is None
    e = exp_region[0].nodes[0]
    chain = [r for r in regions if any(n.op == "sin" for n in r.nodes)][0]
    assert [n.op for n in chain.nodes] == ["multiply", "sin"] and e in chain.inputs
    assert all(n.op != "matmul" for r in regions for n in r.nodes)
    assert "add" in by_out  # the final scalar add is a region of its own
    # a graph output is external too: it ends its region
    nodes, _, outs = _trace_forward(lambda x: (total(bind("sin", bind("exp", x))),
                                               bind("exp", x)), [(4,)])
    regions = find_regions(nodes, outs)
    assert sorted([n.op for n in r.nodes] for r in regions) == [["exp"], ["sin"]]
    assert [r for r in regions if r.nodes == [outs[1]]][0].reduction is None


def test_matmul_and_shape_changes_split_regions():
    def f(a, b):
        return total(bind("exp", bind("matmul", bind("tanh", a), bind("negative", b))))

    nodes, (a, b), (out,) = _trace_forward(f, [(3, 2), (2, 4)])
    regions = find_regions(nodes, [out])
    assert sorted([n.op for n in r.nodes] for r in regions) == [["exp"], ["negative"],
                                                                ["tanh"]]
    mm = [n for n in nodes if n.op == "matmul"][0]
    assert [r for r in regions if r.nodes[0].op == "exp"][0].inputs == [mm]
    # a (3,1) elementwise operand of a (3,4) op is a region of its own shape
    nodes, _, (out,) = _trace_forward(
        lambda a, b: total(bind("add", bind("sin", a), bind("cos", b))), [(3, 1), (1, 4)])
    regions = find_regions(nodes, [out])
    assert sorted(r.shape for r in regions) == [(1, 4), (3, 1), (3, 4)]
    assert [r for r in regions if r.shape == (3, 4)][0].reduction is out


UNARY = ("sin", "tanh", "negative", "exp")
BINARY = ("add", "multiply", "subtract")


def random_elementwise_graph(seed, n=14, sums=True):
    """A random DAG of elementwise ops over (4,)-shaped values, with region
    breakers: ``copy`` (a compute op) and keepdims sums whose (1,) result
    broadcasts back into the (4,) ops.  Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    tr = Trace()
    with tr:
        pool = [tr.input(i, (4,), F64) for i in range(2)]
        small = []
        for _ in range(n):
            r = rng.random()
            pick = pool[int(rng.integers(len(pool)))]
            if r < 0.1:
                t = bind("copy", pick)
            elif r < 0.2 and sums:
                t = bind("sum", pick, axis=(0,), keepdims=True)
                small.append(t)
                continue
            elif r < 0.5:
                t = bind(UNARY[int(rng.integers(len(UNARY)))], pick)
            else:
                other = pool + small
                t = bind(BINARY[int(rng.integers(len(BINARY)))], pick,
                         other[int(rng.integers(len(other)))])
            pool.append(t)
        outs = [pool[-1]] + [pool[int(i)] for i in rng.integers(2, len(pool), size=2)]
    return tr.nodes, [n for n in tr.nodes if n.op == "input"], [o.node for o in outs]


@pytest.mark.parametrize("seed", range(50))
def test_random_dags_regions_are_convex_single_output_and_maximal(seed):
    nodes, inputs, outputs = random_elementwise_graph(seed)
    users = users_of(nodes)
    external = {o.id for o in outputs}
    regions = find_regions(nodes, outputs)
    owner = {}
    for k, r in enumerate(regions):
        members = {n.id for n in r.nodes}
        for n in r.nodes:
            assert n.id not in owner, "a node in two regions"
            owner[n.id] = k
            assert REGISTRY[n.op].kind == "elementwise" and n.shape == r.shape
        pos = [nodes.index(n) for n in r.nodes]
        assert pos == sorted(pos), "members in execution order"
        # single output: every other member is read only inside and is no graph output
        for n in r.nodes[:-1]:
            assert n.id not in external
            assert all(u.id in members for u in users[n.id])
        # convex: nothing reachable from a member through a non-member is a member
        frontier = [u for n in r.nodes for u in users[n.id] if u.id not in members]
        seen = set()
        while frontier:
            u = frontier.pop()
            if u.id in seen:
                continue
            seen.add(u.id)
            assert u.id not in members, f"a path leaves {r} and comes back at %{u.id}"
            frontier.extend(users[u.id])
        # inputs: exactly the members' operands from outside, in first-use order
        expect = []
        for n in r.nodes:
            for a in n.args:
                if a.id not in members and a not in expect:
                    expect.append(a)
        assert r.inputs == expect
        if r.reduction is not None:
            assert r.reduction.op in FUSABLE_REDUCTIONS
            assert users[r.nodes[-1].id] == [r.reduction] and r.nodes[-1].id not in external
    # every elementwise node is in some region
    assert {n.id for n in nodes if REGISTRY.get(n.op) and
            REGISTRY[n.op].kind == "elementwise"} == set(owner)
    # maximal: an operand that could join (same shape, fusable, not external, all
    # users in the region) does -- unless another region holds it
    for k, r in enumerate(regions):
        members = {n.id for n in r.nodes}
        for n in r.nodes:
            for a in n.args:
                if a.id in members or a.id in external or a.shape != r.shape or \
                        REGISTRY.get(a.op) is None or REGISTRY[a.op].kind != "elementwise":
                    continue
                if all(owner.get(u.id) == k for u in users[a.id]):
                    pytest.fail(f"%{a.id} could join {r} but was left out")


@pytest.mark.parametrize("seed", range(0, 50, 5))
def test_fused_random_dags_compute_the_same(seed):
    nodes, inputs, outputs = random_elementwise_graph(seed)
    args = _rng_args([(4,), (4,)], seed)
    ref = evaluate(nodes, args)
    expected = [ref[o.id] for o in outputs]
    nodes, inputs, outputs = random_elementwise_graph(seed)  # fuse_regions rewrites nodes
    n_regions = len(find_regions(nodes, outputs))
    fused = fuse_regions(nodes, outputs)
    check(Graph(fused, inputs, outputs))
    assert sum(n.op == "region" for n in fused) == n_regions
    assert not any(REGISTRY[n.op].kind == "elementwise" for n in fused
                   if n.op not in ("input", "const"))
    got = evaluate(fused, args)
    for o, e in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got[o.id], e, rtol=1e-14, atol=0)


# ----------------------------------------------------------------------------
# fold_accumulations
# ----------------------------------------------------------------------------


def _accumulation_graph(kind="iadd", also_output=False, reduce=False, shape=(5,),
                        read_acc=None):
    """acc = exp(x) (backward phase); v = g * sin(x) (one region); acc <- acc + v."""
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        g = tr.input(1, shape, F64)
        tr.phase = "backward"
        acc = bind("exp", x)
        base = bind("sin", x) if shape == (5,) else bind("sin", g)
        if read_acc == "same":
            base = bind("subtract", base, acc)
        elif read_acc == "reversed":
            base = bind("subtract", base, bind("getitem", acc, index=(slice(None, None, -1),)))
        v = bind("multiply", g, base)
        if reduce:
            v = bind("sum", v, axis=(0,), keepdims=True)
        if kind == "iadd":
            res = bind("iadd", acc, v)
        elif kind == "scatter_add":
            res = bind("scatter_add", acc, bind("getitem", v, index=(slice(0, 3),)),
                       index=(slice(2, 5),))
        else:  # scatter into zeros
            res = bind("scatter", v, index=(slice(0, 5),), shape=(7,))
    outputs = [res.node] + ([v.node] if also_output else [])
    return tr.nodes, outputs, v.node


def _fold(nodes, outputs):
    fused = fuse_regions(nodes, outputs)
    return fused, fold_accumulations(fused, outputs)


def test_region_added_into_an_adjoint_becomes_region_acc_in_place():
    args = _rng_args([(5,), (5,)], 6)
    nodes, outputs, v = _accumulation_graph()
    expected = evaluate(nodes, args)[outputs[0].id].copy()
    nodes, outputs, v = _accumulation_graph()
    fused, folded = _fold(nodes, outputs)
    (res,) = outputs
    assert v.op == "region" and v in fused
    assert v not in folded, "the temporary region is gone"
    assert res.op == "region_acc" and res.attrs["mode"] == "value"
    assert res.attrs["index"] is None and res.attrs["body"].output.op == "multiply"
    acc = res.args[0]
    assert acc.op == "region" and [n.op for n in acc.attrs["body"].nodes] == ["exp"]
    assert list(res.args[1:]) == res.attrs["body"].inputs
    check(Graph(folded, [n for n in folded if n.op == "input"], outputs))
    # in place: the memory plan gives it the adjoint's storage
    mem = plan_memory(Graph(folded, [n for n in folded if n.op == "input"], outputs))
    assert mem.storage[res.id] == "alias" and mem.alias_of[res.id] is acc
    assert res.id not in mem.slots
    np.testing.assert_allclose(evaluate(folded, args)[res.id], expected, rtol=1e-15)


def test_read_of_the_adjoint_at_the_same_element_is_folded():
    # acc += g * (sin(x) - acc): each element reads acc[i] before adding to it
    args = _rng_args([(5,), (5,)], 7)
    nodes, outputs, _ = _accumulation_graph(read_acc="same")
    expected = evaluate(nodes, args)[outputs[0].id].copy()
    nodes, outputs, _ = _accumulation_graph(read_acc="same")
    _, folded = _fold(nodes, outputs)
    assert outputs[0].op == "region_acc"
    np.testing.assert_allclose(evaluate(folded, args)[outputs[0].id], expected, rtol=1e-15)


@pytest.mark.parametrize("case", ["also_output", "reduce", "broadcast", "reversed"])
def test_accumulations_that_must_not_fold(case):
    kw = {"also_output": {"also_output": True}, "reduce": {"reduce": True},
          "broadcast": {"shape": (1,)}, "reversed": {"read_acc": "reversed"}}[case]
    nodes, outputs, v = _accumulation_graph(**kw)
    _, folded = _fold(nodes, outputs)
    assert not any(n.op == "region_acc" for n in folded)
    assert outputs[0].op == "iadd" and v in folded


def test_scatter_add_and_scatter_fold_with_their_index():
    args = _rng_args([(5,), (5,)], 8)
    for kind in ("scatter_add", "scatter"):
        nodes, outputs, v = _accumulation_graph(kind)
        expected = evaluate(nodes, args)[outputs[0].id].copy()
        nodes, outputs, v = _accumulation_graph(kind)
        fused, folded = _fold(nodes, outputs)
        (res,) = outputs
        if kind == "scatter_add":
            # the contribution is a view of v: not a region used only by the add
            assert res.op == "scatter_add"
            continue
        assert res.op == "region_acc" and res.attrs["index"] == (slice(0, 5),)
        zeros = res.args[0]
        assert zeros.op == "zeros" and zeros.shape == (7,)
        assert folded.index(zeros) < folded.index(res)
        check(Graph(folded, [n for n in folded if n.op == "input"], outputs))
        np.testing.assert_allclose(evaluate(folded, args)[res.id], expected, rtol=1e-15)


def test_scatter_add_of_a_region_folds_with_its_index():
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        g = tr.input(1, (3,), F64)
        tr.phase = "backward"
        acc = bind("exp", x)
        v = bind("multiply", g, bind("cos", g))
        res = bind("scatter_add", acc, v, index=(slice(2, 5),))
    args = _rng_args([(5,), (3,)], 9)
    expected = evaluate(tr.nodes, args)[res.node.id].copy()
    np.testing.assert_allclose(expected[2:], np.exp(args[0][2:]) + args[1] * np.cos(args[1]))
    _, folded = _fold(tr.nodes, [res.node])
    assert res.node.op == "region_acc" and res.node.attrs["index"] == (slice(2, 5),)
    assert v.node not in folded
    np.testing.assert_allclose(evaluate(folded, args)[res.node.id], expected, rtol=1e-15)


def test_region_reading_the_whole_adjoint_it_adds_into_a_slice_of_is_not_folded():
    # acc[::-1] += g * acc: the loop would read elements it already added to
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        g = tr.input(1, (5,), F64)
        tr.phase = "backward"
        acc = bind("exp", x)
        v = bind("multiply", g, bind("sin", acc))
        res = bind("scatter_add", acc, v, index=(slice(None, None, -1),))
    _, folded = _fold(tr.nodes, [res.node])
    assert res.node.op == "scatter_add" and v.node in folded


def test_region_with_a_fused_reduction_is_not_folded():
    # acc (5,) += sum over axis 0 of a (4, 5) region: the loop is not acc's shape
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        g = tr.input(1, (4, 5), F64)
        tr.phase = "backward"
        acc = bind("exp", x)
        v = bind("sum", bind("multiply", g, bind("sin", g)), axis=(0,), keepdims=False)
        res = bind("iadd", acc, v)
    fused, folded = _fold(tr.nodes, [res.node])
    assert v.node.op == "region" and v.node.attrs["body"].reduction is not None
    assert res.node.op == "iadd" and v.node in folded


def test_zeros_move_ahead_of_a_run_of_region_accs():
    # two scatters into fresh adjoints, their contributions computed first: the
    # two region_accs end up adjacent (one loop in the backend), both zeros before them
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        y = tr.input(1, (5,), F64)
        tr.phase = "backward"
        v1 = bind("multiply", x, bind("sin", y))
        v2 = bind("multiply", y, bind("cos", x))
        s1 = bind("scatter", v1, index=(slice(0, 5),), shape=(6,))
        s2 = bind("scatter", v2, index=(slice(1, 6),), shape=(6,))
    outputs = [s1.node, s2.node]
    args = _rng_args([(5,), (5,)], 11)
    expected = evaluate(tr.nodes, args)
    expected = [expected[o.id].copy() for o in outputs]
    _, folded = _fold(tr.nodes, outputs)
    ops = [n.op for n in folded if n.op != "input"]
    assert ops == ["zeros", "zeros", "region_acc", "region_acc"]
    assert [n.args[0].op for n in outputs] == ["zeros", "zeros"]
    check(Graph(folded, [n for n in folded if n.op == "input"], outputs))
    got = evaluate(folded, args)
    for o, e in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got[o.id], e, rtol=1e-15)


# ----------------------------------------------------------------------------
# memory planner
# ----------------------------------------------------------------------------


def _graph_of(tr, outputs):
    g = Graph(tr.nodes, [n for n in tr.nodes if n.op == "input"], [o.node for o in outputs])
    check(g)
    return g


def _spans(mem):
    """(key, dtype, lo, hi, first, last) per slot and scratch slot."""
    out = [(nid, dt, off, off + nbytes, *mem.lifetimes[nid])
           for nid, (dt, off, nbytes, _) in mem.slots.items()]
    out += [(("scratch", nid), dt, off, off + count * dt.itemsize,
             *mem.lifetimes[("scratch", nid)]) for nid, (dt, off, count) in mem.scratch.items()]
    return out


def assert_no_live_overlap(mem):
    spans = _spans(mem)
    for i, (k1, dt1, lo1, hi1, a1, b1) in enumerate(spans):
        assert lo1 % ALIGN == 0, f"{k1} at {lo1} is not {ALIGN}-byte aligned"
        assert hi1 <= mem.arena_bytes[dt1]
        for k2, dt2, lo2, hi2, a2, b2 in spans[i + 1:]:
            if dt1 == dt2 and a1 <= b2 and a2 <= b1:
                assert hi1 <= lo2 or hi2 <= lo1, f"{k1} and {k2} are live together and overlap"


def test_chain_lifetimes_are_exact_and_dead_buffers_share():
    tr = Trace()
    with tr:
        x = tr.input(0, (5,), F64)
        a = bind("exp", x)  # pos 1
        b = bind("sin", a)  # pos 2
        c = bind("exp", b)  # pos 3
        d = bind("sin", c)  # pos 4
        out = total(d)  # pos 5
    mem = plan_memory(_graph_of(tr, [out]))
    a, b, c, d, out = (t.node.id for t in (a, b, c, d, out))
    # inclusive: from the writer to the last reader; the output to the end (6)
    assert mem.lifetimes == {a: (1, 2), b: (2, 3), c: (3, 4), d: (4, 5), out: (5, 6)}
    off = {k: v[1] for k, v in mem.slots.items()}
    assert off[a] == off[c] and off[b] == off[d], "dead buffers' space is reused"
    assert off[a] != off[b], "an op's result never shares memory with its operand"
    assert off[out] != off[d]
    assert mem.arena_bytes == {F64: 2 * ALIGN}
    assert mem.lower_bound == 2 * 40 and mem.total_bytes >= mem.lower_bound
    assert mem.naive_total == 4 * ALIGN + ALIGN
    assert mem.storage[x.node.id] == "input" and x.node.id not in mem.slots
    assert list(mem.live_bytes) == [0, 40, 80, 80, 80, 48]
    assert_no_live_overlap(mem)


def test_lifetimes_extend_through_views_and_in_place_updates():
    tr = Trace()
    with tr:
        x = tr.input(0, (2, 3), F64)
        a = bind("exp", x)  # 1
        v = bind("reshape", a, shape=(6,))  # 2, a view of a
        b = bind("sin", x)  # 3
        acc = bind("iadd", b, x)  # 4, b's storage
        c = bind("tanh", x)  # 5
        d = bind("multiply", bind("reshape", acc, shape=(6,)), v)  # 6 reshape, 7 multiply
        out = total(bind("add", d, bind("reshape", c, shape=(6,))))  # 8, 9, 10
    mem = plan_memory(_graph_of(tr, [out]))
    assert mem.storage[v.node.id] == "view" and mem.storage[acc.node.id] == "alias"
    assert mem.alias_of[acc.node.id] is b.node
    assert set(mem.slots) == {a.node.id, b.node.id, c.node.id, d.node.id, 9, out.node.id}
    assert mem.lifetimes[a.node.id] == (1, 7), "a is read through its view by %7"
    assert mem.lifetimes[b.node.id] == (3, 7), "b is read through the iadd's result"
    assert mem.lifetimes[c.node.id] == (5, 9)
    assert mem.lifetimes[out.node.id] == (10, 11)
    assert_no_live_overlap(mem)


def test_inputs_consts_and_direct_outputs_take_no_arena_space():
    const = np.arange(4.0)
    tr = Trace()
    with tr:
        x = tr.input(0, (4,), F64)
        y = bind("multiply", bind("exp", x), const)
        out = total(y)
        tr.phase = "backward"
        g = bind("cos", x)
        h = bind("add", g, const)
    graph = _graph_of(tr, [out, h])
    mem = plan_memory(graph, direct_outputs=True)
    cid = [n.id for n in graph.nodes if n.op == "const"][0]
    assert mem.storage[x.node.id] == "input" and mem.storage[cid] == "const"
    assert mem.direct == {h.node.id: 1}, "a gradient output is written to the caller"
    assert h.node.id not in mem.slots and out.node.id in mem.slots
    assert x.node.id not in mem.slots and cid not in mem.slots
    assert g.node.id in mem.slots
    # without direct outputs it takes a slot, live to the end
    mem = plan_memory(graph)
    assert mem.direct == {} and mem.lifetimes[h.node.id] == (len(graph.nodes) - 1,
                                                             len(graph.nodes))


def test_outputs_written_before_an_op_that_can_fail_stay_in_the_arena():
    tr = Trace()
    with tr:
        x = tr.input(0, (3, 3), F64)
        early = bind("exp", x)  # a gradient output, written first
        sq = bind("reshape", bind("add", x, np.eye(3) * 4), shape=(1, 3, 3))
        inv = bind("inv", sq)  # LAPACK: may raise
        late = bind("sin", inv)
        out = total(late)
    assert REGISTRY["inv"].raises
    graph = _graph_of(tr, [out, early, late])
    mem = plan_memory(graph, direct_outputs=True)
    assert late.node.id in mem.direct and early.node.id not in mem.direct
    assert early.node.id in mem.slots


def test_scratch_is_aligned_and_live_at_its_node_only():
    tr = Trace()
    with tr:
        x = tr.input(0, (10,), F64)
        a = bind("exp", x)
        b = bind("sin", a)
        out = total(b)
    graph = _graph_of(tr, [out])
    mem = plan_memory(graph, scratch={b.node.id: (np.float32, 3)})
    pos = graph.nodes.index(b.node)
    assert mem.lifetimes[("scratch", b.node.id)] == (pos, pos)
    dt, off, count = mem.scratch[b.node.id]
    assert dt == np.float32 and count == 3 and off % ALIGN == 0
    assert set(mem.arena_bytes) == {F64, np.dtype(np.float32)}
    assert_no_live_overlap(mem)


SHAPES = [(8, 16), (16, 8), (16,), (8, 8), (128,)]


def random_memory_graph(seed, n=24):
    """A random graph over several shapes and two dtypes: elementwise ops,
    matmuls, reductions, views (reshape, transpose, a slice) and in-place adds."""
    rng = np.random.default_rng(seed)
    tr = Trace()
    with tr:
        pool = [tr.input(0, (8, 16), F64), tr.input(1, (16, 8), F64), tr.input(2, (16,), F64)]
        computed = []
        for i in range(n):
            if i == n // 2:
                tr.phase = "backward"
            t = pool[int(rng.integers(len(pool)))]
            r = rng.random()
            if r < 0.3:
                new = bind(UNARY[int(rng.integers(3))], t)
            elif r < 0.45:
                same = [p for p in pool if p.shape == t.shape and p.dtype == t.dtype]
                new = bind(BINARY[int(rng.integers(3))], t, same[int(rng.integers(len(same)))])
            elif r < 0.55 and len(t.shape) == 2:
                other = [p for p in pool if len(p.shape) == 2 and p.shape[0] == t.shape[1]
                         and p.dtype == t.dtype]
                new = bind("matmul", t, other[int(rng.integers(len(other)))]) if other else \
                    bind("transpose", t, axes=(1, 0))
            elif r < 0.62 and len(t.shape) == 2:
                new = bind("sum", t, axis=(int(rng.integers(2)),), keepdims=False)
            elif r < 0.7:
                new = bind("reshape", t, shape=(t.size,)) if len(t.shape) == 2 else \
                    bind("getitem", t, index=(slice(None, None, 2),))
            elif r < 0.78 and t.dtype == F64:
                new = bind("cast", t, dtype=np.float32)
            elif r < 0.9 and computed:
                acc = computed[int(rng.integers(len(computed)))]
                src = [p for p in pool if p.shape == acc.shape and p.dtype == acc.dtype]
                new = bind("iadd", acc, src[int(rng.integers(len(src)))])
            else:
                new = bind("tanh", t)
            pool.append(new)
            if REGISTRY[new.node.op].kind not in ("view", "inplace"):
                computed.append(new)
        outs = [total(pool[-1])] + [pool[int(i)] for i in rng.integers(3, len(pool), size=2)]
    return _graph_of(tr, outs)


def reference_lifetimes(graph, mem):
    """Liveness recomputed independently: a buffer lives from its node to the
    last reader of anything sharing its storage (views, in-place results), to
    the end of the schedule if such a node is a graph output."""
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    users = graph.users()
    outputs = {o.id for o in graph.outputs}
    life = {}
    for n in graph.nodes:
        root = n
        while mem.storage[root.id] in ("view", "alias"):
            root = root.args[0]
        if mem.storage[root.id] != "buffer":
            continue
        a, b = life.get(root.id, (pos[root.id], pos[root.id]))
        b = max([b, pos[n.id]] + [pos[u.id] for u in users[n.id]])
        if n.id in outputs:
            b = len(graph.nodes)
        life[root.id] = (a, b)
    return life


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_never_overlap_live_buffers(seed):
    graph = random_memory_graph(seed)
    mem = plan_memory(graph)
    # storage: inputs and consts outside the arena, every computed root in it
    for n in graph.nodes:
        kind = REGISTRY[n.op].kind if n.op in REGISTRY else n.op
        if n.op in ("input", "const"):
            assert mem.storage[n.id] == n.op and n.id not in mem.slots
        elif kind == "inplace":
            assert mem.storage[n.id] == "alias" and mem.alias_of[n.id] is n.args[0]
        elif kind == "view":
            assert mem.storage[n.id] in ("view", "buffer")
        else:
            assert mem.storage[n.id] == "buffer" and n.id in mem.slots
    for nid, (dt, _off, nbytes, shape) in mem.slots.items():
        node = [n for n in graph.nodes if n.id == nid][0]
        assert (dt, nbytes, shape) == (node.dtype, node.nbytes, node.shape)
    assert mem.lifetimes == reference_lifetimes(graph, mem)
    assert_no_live_overlap(mem)
    # the liveness lower bound, recomputed
    steps = len(graph.nodes)
    live = np.zeros(steps, np.int64)
    for nid, (a, b) in mem.lifetimes.items():
        live[a:min(b, steps - 1) + 1] += mem.slots[nid][2]
    assert mem.lower_bound == live.max()
    assert list(mem.live_bytes) == list(live)
    per_dtype_bound = {}
    for nid, (dt, _, nbytes, _) in mem.slots.items():
        a, b = mem.lifetimes[nid]
        at = per_dtype_bound.setdefault(dt, np.zeros(steps + 1, np.int64))
        at[a:b + 1] += -(-nbytes // ALIGN) * ALIGN
    for dt, at in per_dtype_bound.items():
        assert at.max() <= mem.arena_bytes[dt] <= mem.naive_bytes[dt]
    assert mem.lower_bound <= mem.total_bytes <= mem.naive_total
    # greedy packing stays near the (aligned) liveness bound on these graphs
    assert mem.total_bytes <= 1.25 * sum(at.max() for at in per_dtype_bound.values())
    unpacked = plan_memory(graph, pack=False)
    assert unpacked.total_bytes == unpacked.naive_total == mem.naive_total


@pytest.mark.parametrize("seed", range(20))
def test_equal_sized_buffers_pack_to_the_liveness_bound(seed):
    # equal sizes: first fit in order of start is optimal for intervals, so
    # the arena is exactly (most buffers live at once) x (one aligned slot)
    nodes, inputs, outputs = random_elementwise_graph(seed, n=20, sums=False)
    assert all(n.shape == (4,) for n in nodes)
    graph = Graph(nodes, inputs, outputs)
    mem = plan_memory(graph)
    assert mem.lower_bound % 32 == 0
    assert mem.total_bytes == mem.lower_bound // 32 * ALIGN


@pytest.mark.parametrize("seed", range(0, 50, 5))
def test_packed_poisoned_arena_runs_like_the_reference(seed):
    # the numpy reference program over the packed arena, NaN-filling every slot
    # outside its lifetime, computes what the plain evaluator computes
    graph = random_memory_graph(seed)
    args = _rng_args([(8, 16), (16, 8), (16,)], seed)
    expected = evaluate(graph.nodes, args)
    mem = plan_memory(graph)
    prog = compile_program(graph.nodes, graph.inputs, graph.outputs, mem, mem.allocate(),
                           poison=True)
    outs = [np.empty(o.shape, o.dtype) for o in graph.outputs]
    with np.errstate(all="ignore"):
        prog(*args, *outs)
    for o, got in zip(graph.outputs, outs, strict=True):
        np.testing.assert_array_equal(got, expected[o.id])


@pytest.mark.parametrize("name", ["chain", "diamond", "broadcast", "matmul"])
def test_autodiff_graphs_run_over_a_packed_arena(name):
    build, shapes = {
        "chain": (lambda x: total(bind("exp", x)), [(5,)]),
        "diamond": (lambda x: total(bind("add", bind("multiply", x, x), bind("sin", x))),
                    [(5,)]),
        "broadcast": (lambda a, b: total(bind("multiply", bind("exp", bind("add", a, b)), b)),
                      [(3, 1), (1, 4)]),
        "matmul": (lambda a, b: total(bind("tanh", bind("matmul", a, b))), [(3, 2), (2, 4)]),
    }[name]
    graph, nf, out, grads = trace_grad(build, shapes, seed=True)
    args = _rng_args(shapes, 10) + [np.float64(0.75)]
    expected = evaluate(graph.nodes, args)
    mem = plan_memory(graph)  # (the numpy program writes no output directly)
    assert_no_live_overlap(mem)
    prog = compile_program(graph.nodes, graph.inputs, graph.outputs, mem, mem.allocate(),
                           poison=True)
    outs = [np.empty(o.shape, o.dtype) for o in graph.outputs]
    prog(*args, *outs)
    for o, got in zip(graph.outputs, outs, strict=True):
        np.testing.assert_array_equal(got, expected[o.id])
