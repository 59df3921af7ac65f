"""The package's layout: imports run one way, down the pipeline.

Walks the source's imports with ``ast`` (nothing is imported), function-level
imports included, and fails on an import from an earlier stage to a later one
(:data:`STAGES`, the order docs/architecture.md shows), on an import cycle
anywhere in the package, on an op module that imports a backend or the numpy
surface, and on a module that outgrows one concern.
"""

import ast
import os

import hybridad

ROOT = os.path.dirname(hybridad.__file__)
PKG = "hybridad"
#: the longest a module may be (docs/architecture.md: one module, one thing)
MAX_LINES = 600

#: the stages in the order data flows, each with the modules (or packages) it
#: holds; a module imports only from its own stage or an earlier one
STAGES = (
    ("base", ("errors", "_settings", "_xp", "_alloc", "_cachedir", "_sources", "_libcache",
              "_types", "_forksafe")),
    ("ir", ("ir",)),
    ("core", ("core", "_tree", "trace")),
    ("ops", ("ops",)),
    ("frontend", ("frontend",)),
    ("transforms", ("transforms", "optim")),
    ("backends", ("backends",)),
    ("plans", ("plans", "results")),
    ("sparse", ("sparse",)),
    ("api", ("api",)),
    ("interop", ("interop", "scipy", "dask", "testing")),
    ("tools", ("bench", "coverage", "__main__", "")),
)


def _modules():
    mods = {}
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                mods[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return mods


def _imports(mods):
    """module -> the package's modules it imports (anywhere in its source)."""
    edges = {}
    for mod, path in mods.items():
        package = mod if path.endswith("__init__.py") else mod.rsplit(".", 1)[0]
        found = set()
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                found.update(subs)
                if len(subs) < len(node.names):  # names defined in the module itself
                    found.add(target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        edges[mod] = {t for t in found if t in mods and t != mod}
    return edges


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def stage_of(module):
    """The index in :data:`STAGES` of ``module`` (``hybridad.x.y``): its top
    component's stage (the package itself: the last)."""
    top = module.split(".")[1] if "." in module else ""
    for i, (_, members) in enumerate(STAGES):
        if top in members:
            return i
    raise AssertionError(f"{module} is in no stage of STAGES: give it one")


def upward_imports(edges):
    """``(importer, imported)`` pairs where a stage imports a later stage."""
    return sorted((m, t) for m, ts in edges.items() for t in ts if stage_of(t) > stage_of(m))


def describe_stages():
    """The stage order as docs/architecture.md shows it: one line."""
    return "  <  ".join(f"{name} ({', '.join(m or 'hybridad' for m in members)})"
                        for name, members in STAGES)


def test_imports_run_from_later_stages_to_earlier_ones():
    """Every import (function-level ones too) goes down the stages or stays
    within one: op rules import no tracer surface, graph passes no backend,
    tracing no backend, a backend no plan, op rules no cache of a backend."""
    edges = _imports(_modules())
    for m in edges:
        stage_of(m)  # every module has a stage
    bad = upward_imports(edges)
    assert not bad, "imports from an earlier stage to a later one:\n" + "\n".join(
        f"  {m} ({STAGES[stage_of(m)][0]}) -> {t} ({STAGES[stage_of(t)][0]})" for m, t in bad)


def test_the_stage_check_finds_upward_imports():
    """The five kinds of wrong-way import the layout once had are each found."""
    found = upward_imports({
        "hybridad.ops.region": {"hybridad.core.trace", "hybridad.transforms.costs"},
        "hybridad.transforms.costs": {"hybridad.backends.numba.threshold"},
        "hybridad.frontend.scalar_functions": {"hybridad.backends.numba"},
        "hybridad.backends.numba.threads": {"hybridad.plans.tiered"},
        "hybridad._libcache": {"hybridad.backends.numba.cache"},
        "hybridad.plans.plan": {"hybridad.transforms.costs", "hybridad.results"},
    })
    assert found == [
        ("hybridad._libcache", "hybridad.backends.numba.cache"),
        ("hybridad.backends.numba.threads", "hybridad.plans.tiered"),
        ("hybridad.frontend.scalar_functions", "hybridad.backends.numba"),
        ("hybridad.ops.region", "hybridad.transforms.costs"),
        ("hybridad.transforms.costs", "hybridad.backends.numba.threshold"),
    ]


def test_the_architecture_doc_shows_the_stage_order():
    doc = open(os.path.join(os.path.dirname(ROOT), "docs", "architecture.md"),
               encoding="utf-8").read()
    assert describe_stages() in doc, describe_stages()


def test_no_import_cycle():
    cycles = _cycles(_imports(_modules()))
    assert not cycles, "import cycles (function-level imports included): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_op_rules_import_no_backend_and_no_numpy_surface():
    edges = _imports(_modules())
    bad = {m: sorted(t for t in ts if t.startswith((f"{PKG}.backends", f"{PKG}.frontend.numpy")))
           for m, ts in edges.items() if m.startswith(f"{PKG}.ops")}
    assert not any(bad.values()), {m: t for m, t in bad.items() if t}


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_modules_hold_one_concern():
    long = {m: n for m, path in _modules().items()
            if (n := sum(1 for _ in open(path, encoding="utf-8"))) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _square_sum(x):
    import numpy as np

    return np.sum(x * x)


def test_plans_pickled_before_the_layout_load():
    """A plan pickled when it lived in ``hybridad.plan`` (or, later, in
    ``hybridad.plans.plan``) unpickles now."""
    import pickle

    import numpy as np

    plan = hybridad.compile(_square_sum, np.ones(3), backend="numpy")
    now = pickle.dumps(plan, protocol=0)
    assert b"chybridad.plans.pickling\n" in now
    for then in (b"hybridad.plan\n", b"hybridad.plans.plan\n"):
        old = now.replace(b"hybridad.plans.pickling\n", then)
        assert b"c" + then in old
        np.testing.assert_array_equal(pickle.loads(old).gradient(np.arange(3.0)).gradient,
                                      [0.0, 2.0, 4.0])


def test_the_pipeline_is_described_as_it_runs():
    """docs/architecture.md shows each backend's pipeline as
    hybridad.transforms.pipeline lists it (and runs it)."""
    from hybridad.transforms.pipeline import LOWERING, PASSES, PIPELINES, describe

    doc = open(os.path.join(os.path.dirname(ROOT), "docs", "architecture.md"),
               encoding="utf-8").read()
    for backend in PIPELINES:
        assert describe(backend) in doc, backend
        assert all(p in PASSES for p in LOWERING[backend])


def test_the_tracer_keeps_its_old_address():
    """``hybridad.trace`` (what the autograd-suite harness imports ``Tracer``
    from) names the core's classes."""
    from hybridad import trace
    from hybridad.core import trace as core_trace, tracer as core_tracer

    assert trace.Tracer is core_tracer.Tracer and trace.Trace is core_trace.Trace
    assert trace.bind is core_trace.bind and trace.current_trace is core_trace.current_trace


def test_check_rederives_shapes_from_the_rules():
    import numpy as np
    import pytest

    from hybridad.core.trace import Trace, bind
    from hybridad.ir import Graph, check

    tr = Trace()
    with tr:
        x = tr.input(0, (3,), np.dtype(np.float64))
        y = bind("exp", x)
    graph = Graph(tr.nodes, [x.node], [y.node])
    assert check(graph, rules=True)
    y.node.shape = (4,)  # what a broken pass could leave behind
    with pytest.raises(AssertionError, match="shape rule"):
        check(graph, rules=True)
    assert check(graph)  # (the structural check alone does not see it)
