"""The passes from a traced graph to what a backend runs, named in order in one
place, per backend.

A plan (:class:`hybridad.plans.plan.Plan`) traces ``f`` (core and frontend), fuses the
forward graph's elementwise regions on compiled backends and emits the
backward pass as IR (:mod:`.autodiff`), then *lowers* the graph with the passes
of :data:`LOWERING` for its backend, plans its memory (:mod:`.memory`) and
compiles it (the backend's program).  :data:`PIPELINES` is the whole list;
:func:`describe` renders it (docs/architecture.md shows it, and a test checks
the doc against it); :func:`lower` runs :data:`LOWERING` -- the same names.

Between passes the graph is checked (:func:`hybridad.ir.check`); with
``HYBRIDAD_DEBUG`` set, or ``HYBRIDAD_CHECK_RULES=1`` (the test suite sets it),
every node's shape and dtype are re-derived from its op's shape rule after
every pass.
"""

from __future__ import annotations

import os

from ..ir.graph import Graph, check, check_writes, dead_code_elimination
from .broadcasts import sink_product_broadcasts, sink_scalar_broadcasts
from .cse import eliminate_common
from .factors import share_factorizations
from .loop_parts import drop_unread_loop_parts
from .partition import (absorb_producers, accumulate_scatters, fold_accumulations, fuse_regions,
                        share_reduced_values)
from .products import hoist_transposed_products, pair_matvecs
from .region_sums import sum_into_vjp_regions, sum_stored_partials, sum_vjp_regions
from .remat import merge_accumulations, rematerialize
from .updates import order_writes, schedule_updates
from .views import simplify_views

__all__ = ["LOWERING", "PIPELINES", "STAGED_LOWERING", "check_rules", "describe", "lower"]

#: pass name -> (what it does, graph-to-graph function of (nodes, inputs, outputs, updates,
#: machine)); ``machine``: the backend's facts the cost model reads
#: (:class:`~hybridad.transforms.machine.Machine`), handed in by the plan
PASSES = {
    "hoist_transposed_products": ("compute a backward A^T (c w) in the forward as A^T w, beside "
                                  "the forward's product reading A (one read from memory), "
                                  "scaled by c in the backward",
                                  lambda nodes, ins, outs, upd, mach: hoist_transposed_products(
                                      nodes, outs, machine=mach)),
    "pair_matvecs": ("one read of a matrix for two of its matrix-vector products: A u and "
                     "A^T v (one matvec_pair), A x and A y or A^T x and A^T y (one "
                     "matvec_two), the products views of its parts",
                     lambda nodes, ins, outs, upd, mach: pair_matvecs(nodes, outs, machine=mach)),
    "views": ("read chains of data movement through (a slice of a slice, of a "
              "concatenation, a reshape of a reshape, a transpose of a transpose)",
              lambda nodes, ins, outs, upd, mach: simplify_views(nodes, outs)),
    "share_factorizations": ("one factorization for the solves with one matrix: the "
                             "forward's, its transpose's in the reverse sweep, a Hessian's "
                             "tangent sweeps' (solve_lu keeps them, lu_solve reads them; "
                             "cho_solve reads the matrix's Cholesky factor, where the "
                             "function made one and the matrix is symmetric)",
                             lambda nodes, ins, outs, upd, mach: share_factorizations(nodes,
                                                                                      outs)),
    "factor_once": ("share_factorizations in a Hessian's or Jacobian's graph: each matrix "
                    "factored where it is computed (lu_factors), every solve with it an "
                    "lu_solve on the factors",
                    lambda nodes, ins, outs, upd, mach: share_factorizations(nodes, outs,
                                                                             staged=True)),
    "loop_parts": ("drop a loop's unread parts: the xs its body does not read, the "
                   "per-iteration outputs (stored carries) no one reads",
                   lambda nodes, ins, outs, upd, mach: drop_unread_loop_parts(nodes, ins, outs)),
    "dead_code": ("drop nodes no output depends on",
                  lambda nodes, ins, outs, upd, mach: dead_code_elimination(
                      Graph(nodes, ins, outs)).nodes),
    "scalar_broadcasts": ("compute an elementwise op of broadcast one-element values (the "
                          "reverse sweep's cotangent of a sum times a literal) once, and "
                          "broadcast its result: no array of one repeated value",
                          lambda nodes, ins, outs, upd, mach: sink_scalar_broadcasts(nodes, outs)),
    "product_broadcasts": ("a matmul of an operand that repeats one value along a matrix "
                           "axis (a broadcast tangent) computed on the one value: no "
                           "product of the repeated rows",
                           lambda nodes, ins, outs, upd, mach:
                           sink_product_broadcasts(nodes, outs)),
    "cse": ("one node for equal nodes: small literals by value, elementwise ops and views by "
            "op, operands and attributes (the reverse and tangent sweeps' repeated partials)",
            lambda nodes, ins, outs, upd, mach: eliminate_common(nodes, outs, upd)),
    "cse_tangents": ("cse in a graph with a tangent sweep (an HVP's: it recomputed the "
                     "forward's and the backward's values, cos(x) and sin(x)); a first-order "
                     "graph as it is",
                     lambda nodes, ins, outs, upd, mach: eliminate_common(nodes, outs, upd)
                     if any(n.phase == "tangent" for n in nodes) else nodes),
    "schedule_updates": ("move each optimizer update right after its gradient is complete",
                         lambda nodes, ins, outs, upd, mach: schedule_updates(nodes, upd)
                         if upd else nodes),
    "accumulate_scatters": ("add a functional sum's scatters (a loop body's reverse pass) in "
                            "place into a buffer only the sum reads (no zeroed copy each)",
                            lambda nodes, ins, outs, upd, mach: accumulate_scatters(nodes, outs)),
    "fuse_regions": ("fuse elementwise groups (the backward's too) into regions",
                     lambda nodes, ins, outs, upd, mach: fuse_regions(nodes, outs)),
    "rematerialize": ("evaluate a cheap region inside each region that reads it, where it "
                      "then goes away (no array written and read back)",
                      lambda nodes, ins, outs, upd, mach: rematerialize(nodes, outs)),
    "fold_accumulations": ("fold a region into the adjoint it adds to (acc += region)",
                           lambda nodes, ins, outs, upd, mach: fold_accumulations(nodes, outs)),
    "merge_accumulations": ("add a sum of two fresh accumulations into the first's buffer "
                            "(no second zeros, no pass of the add)",
                            lambda nodes, ins, outs, upd, mach: merge_accumulations(nodes, outs)),
    "share_reduced_values": ("one loop for a region and its reduced twin (g * d and its "
                             "bias sum)",
                             lambda nodes, ins, outs, upd, mach: share_reduced_values(nodes, outs)),
    "sum_stored_partials": ("sum in a loss's loop the stored partials the gradient sums whole "
                            "(a scalar parameter's)",
                            lambda nodes, ins, outs, upd, mach: sum_stored_partials(nodes, outs)),
    "sum_into_vjp_regions": ("the sum of a vjp region made as the region is evaluated (no "
                             "temporary of its loop's shape)",
                             lambda nodes, ins, outs, upd, mach:
                             sum_into_vjp_regions(nodes, outs)),
    "sum_vjp_regions_over_axes": ("the sum of a vjp region over some axes (a bias's gradient) "
                                  "made as the region is evaluated (no temporary of its loop's "
                                  "shape)", lambda nodes, ins, outs, upd, mach:
                                  sum_into_vjp_regions(nodes, outs, sum_out=True)),
    "sum_vjp_regions": ("one loop for the vjp regions summed whole (a scalar parameter's "
                        "gradients)",
                        lambda nodes, ins, outs, upd, mach: sum_vjp_regions(nodes, outs)),
    "absorb_producers": ("evaluate in a region's loop the value regions only it reads",
                         lambda nodes, ins, outs, upd, mach: absorb_producers(nodes, outs)),
    "order_writes": ("every in-place write after the reads of the old value it overwrites "
                     "(an optimizer's update of a parameter another region reads)",
                     lambda nodes, ins, outs, upd, mach: order_writes(nodes)),
}

#: backend -> the lowering passes, in order
LOWERING = {
    "numpy": ("views", "share_factorizations", "loop_parts", "dead_code", "schedule_updates"),
    "numba": ("views", "share_factorizations", "loop_parts", "hoist_transposed_products",
              "pair_matvecs", "scalar_broadcasts", "product_broadcasts", "cse_tangents",
              "dead_code",
              "schedule_updates", "accumulate_scatters", "fuse_regions", "rematerialize",
              "fold_accumulations", "merge_accumulations", "share_reduced_values",
              "sum_stored_partials", "sum_vjp_regions", "sum_vjp_regions_over_axes",
              "absorb_producers", "order_writes"),
    "cupy": ("views", "share_factorizations", "loop_parts", "cse_tangents", "dead_code",
             "schedule_updates", "fuse_regions", "rematerialize", "share_reduced_values",
             "absorb_producers", "sum_into_vjp_regions", "order_writes"),
}

#: backend -> the lowering of the graph of a Hessian or Jacobian plan (the
#: primal, tangent and chunk programs in one graph: :mod:`hybridad.plans.staged`)
STAGED_LOWERING = {
    "numpy": ("views", "factor_once", "loop_parts", "dead_code"),
    "numba": ("views", "factor_once", "loop_parts", "scalar_broadcasts", "product_broadcasts",
              "cse",
              "dead_code", "accumulate_scatters", "fuse_regions", "rematerialize",
              "fold_accumulations", "merge_accumulations", "order_writes"),
    "cupy": ("views", "factor_once", "loop_parts", "dead_code", "fuse_regions"),
}

#: the backends whose lowering asks the cost model (and so needs a machine)
NEEDS_MACHINE = ("numba",)

#: backend -> the whole pipeline of a plan, in order (the lowering in the middle)
PIPELINES = {
    backend: ("trace",) + (("fuse_regions(forward)",) if backend != "numpy" else ()) +
    ("autodiff",) + passes + ("memory_plan", f"{backend}_program", "run into DiffResult")
    for backend, passes in LOWERING.items()}


def check_rules():
    """Whether :func:`lower` re-runs every op's shape rule after each pass."""
    return bool(os.environ.get("HYBRIDAD_DEBUG", "").strip("0") or
                os.environ.get("HYBRIDAD_CHECK_RULES", "").strip("0"))


def describe(backend):
    """The pipeline of ``backend`` as one line: ``trace -> ... -> run into DiffResult``."""
    return "  ->  ".join(PIPELINES[backend])


def lower(nodes, inputs, outputs, backend, updates=(), stage=None, machine=None,
          staged=False):
    """The traced ``nodes`` as the graph ``backend`` runs: the passes of
    :data:`LOWERING` (``staged``: of :data:`STAGED_LOWERING`) in order, each
    followed by :func:`hybridad.ir.check`.

    ``machine``: the backend's :class:`~hybridad.transforms.machine.Machine`
    (the numba lowering's cost choices read it; the others need none).
    ``stage``: a ``stage(name)`` context manager timing each pass (as
    ``lower: <pass>``) and the checks (``lower: checks``), or None."""
    import contextlib

    if machine is None and backend in NEEDS_MACHINE and not staged:
        raise ValueError(f"the {backend} lowering needs the backend's machine facts")
    stage = stage or (lambda name: contextlib.nullcontext())
    rules = check_rules()
    graph = Graph(nodes, inputs, outputs)
    with stage("lower: checks"):
        check(graph, rules)
    for name in (STAGED_LOWERING if staged else LOWERING)[backend]:
        with stage(f"lower: {name}"):
            graph = Graph(PASSES[name][1](graph.nodes, inputs, outputs, updates, machine),
                          inputs, outputs)
        with stage("lower: checks"):
            check(graph, rules)
    if rules:
        with stage("lower: checks"):
            check_writes(graph)
    return graph
