"""The package's layout: imports run one way, down the pipeline.

Walks the source's imports with ``ast`` (nothing is imported), function-level
imports included, and fails on an import cycle anywhere in the package, on
an op module that imports a backend or the numpy surface, and on a module
that outgrows one concern.
"""

import ast
import os

import hybridad

ROOT = os.path.dirname(hybridad.__file__)
PKG = "hybridad"
#: the longest a module may be (docs/architecture.md: one module, one thing)
MAX_LINES = 600


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


def test_check_rederives_shapes_from_the_rules():
    import numpy as np
    import pytest

    from hybridad.frontend.trace import Trace, bind
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
