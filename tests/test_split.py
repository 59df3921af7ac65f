"""Generated functions of bounded size (hybridad.backends.numba.split): a long
plan body runs as parts of at most MAX_LINES lines, cut only where no local
value crosses, with the same results as one function."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba import split
from hybridad.backends.numba.split import split_body
from hybridad.testing import count_allocations, numerical_gradient

GUARDS = ["    _t = _view(_tabp, np.int64(3), np.int64)", "    _e = _check(_t)"]


def _body(*stmts):
    return GUARDS + [line for s in stmts for line in s]


def _loop(out, src):
    return ["    for i0 in range(10):", f"        {out}[i0] = {src}[i0] * 2.0"]


def test_cuts_between_statements_and_repeats_view_definitions():
    views = ["    a0d = _ld64(a0p + _ABI[1])", "    a0 = _view(a0d, np.int64(10), np.float64)",
             "    b1 = _view(ar_float64p + 0, np.int64(10), np.float64)",
             "    b2 = _view(ar_float64p + 80, np.int64(10), np.float64)"]
    body = _body([views[0]], [views[1]], [views[2]], [views[3]], _loop("b1", "a0"),
                 _loop("b2", "b1"), _loop("b1", "b2"), _loop("b2", "a0"))
    params = ["ar_float64p", "_tabp", "a0p"]
    main, defs, parts = split_body(body, len(GUARDS), params, "cache=True", ", parallel=True",
                                   max_lines=6)
    assert parts >= 2
    assert main[:2] == GUARDS and all(line.startswith("    _part") for line in main[2:])
    text = "\n".join(defs)
    for j in range(parts):
        part = text.split(f"def _part{j}(")[1].split("def _part")[0]
        # every view a part reads is cut in the part, from the same address
        for name in ("a0", "b1", "b2"):
            if f"{name}[i0]" in part:
                assert f"    {name} = _view(" in part
        if "a0 = _view(a0d" in part:
            assert "a0d = _ld64(a0p" in part
    assert "parallel" not in text  # no prange: no parallel flags


def test_views_of_views_and_aliases_are_repeated_whole():
    # scratch reused under one name: each part cuts the chain it reads again
    views = ["    sc1 = _view(ar_float64p + 0, np.int64(40), np.float64)",
             "    sc2 = _view(ar_float64p + 320, np.int64(40), np.float64)"]
    body = _body([views[0]], [views[1]], ["    scf = sc1"], ["    sc = scf[:10]"],
                 _loop("sc", "a0"), _loop("b1", "sc"), ["    scf = sc2"], ["    sc = scf[:10]"],
                 _loop("sc", "b1"), _loop("b2", "sc"))
    main, defs, parts = split_body(body, len(GUARDS), ["ar_float64p"], "", "", max_lines=4)
    assert parts >= 2
    text = "\n".join(defs)
    for part in text.split("def _part")[1:]:
        if "sc[i0]" in part:  # the alias and the view it slices, from the right scratch
            assert "    sc = scf[:10]" in part and "    scf = sc" in part
            src = part.split("    scf = ")[1].split("\n")[0]
            assert f"    {src} = _view(" in part
    # the last part reads the second scratch
    assert "scf = sc2" in text.split("def _part")[-1]


def _defined_before_use(defs, params, globals_=("np", "range", "_view", "_ld64")):
    """Every name a part reads is a parameter, a global or set earlier in the part."""
    for part in "\n".join(defs).split("def _part")[1:]:
        known = set(params) | set(globals_)
        for stmt in split._statements([ln for ln in part.splitlines()[1:]
                                       if ln.startswith("    ")]):
            stores, first, _ = split._names(stmt)
            assert first <= known, (first - known, part)
            known |= stores


def test_a_name_redefined_in_the_part_takes_the_right_definition():
    # the statements around a cut: scf is rebound to the next scratch just before
    # it, and the part re-slices it: the part must cut scf = sc2 again, not an older sc
    views = ["    sc1 = _view(ar_float64p + 0, np.int64(40), np.float64)",
             "    sc2 = _view(ar_float64p + 320, np.int64(40), np.float64)"]
    body = _body([views[0]], [views[1]], ["    scf = sc1"], ["    sc = scf[:4]"],
                 _loop("sc", "a0"), _loop("b1", "sc"), ["    scf = sc2"], ["    sc = scf[:4]"],
                 _loop("sc", "b1"), _loop("b2", "sc"), _loop("b1", "b2"))
    params = ["ar_float64p", "a0", "b1", "b2"]
    for limit in range(2, 12):
        main, defs, parts = split_body(body, len(GUARDS), params, "", "", max_lines=limit)
        _defined_before_use(defs, params)
        for part in "\n".join(defs).split("def _part")[1:]:
            if "sc = scf[:4]" in part.split("for ")[0]:  # a repeated definition of sc ...
                head = part.split("for ")[0]
                # ... reads the scf of that point: sc2 once the rebinding is behind
                assert head.index("scf = ") < head.index("sc = scf")


def test_no_cut_across_a_local_value():
    body = _body(["    acc = 0.0"], _loop("b1", "a0"), _loop("b2", "b1"),
                 ["    for i0 in range(10):", "        acc += b2[i0]"], ["    o0[()] = acc"])
    main, defs, parts = split_body(body, len(GUARDS), ["p"], "", "", max_lines=3)
    assert parts == 0 and main == body  # acc is set first and read last: one piece


def test_short_bodies_stay_whole():
    body = _body(_loop("b1", "a0"))
    assert split_body(body, len(GUARDS), ["p"], "", "", max_lines=100) == (body, [], 0)


def _layers(x):
    # distinct elementwise ops between reductions: each node's code occurs once
    y = x
    total = 0.0
    for k, op in enumerate([np.sin, np.tanh, np.exp, np.cos, np.arctan, np.sinh] * 3):
        y = op(0.5 * y) + 0.1 * k
        total = total + np.sum(y * y) * (k + 1)
    return total


@pytest.fixture(scope="module")
def plans():
    x = np.linspace(-0.5, 0.5, 300)
    before = split.MAX_LINES
    try:
        split.MAX_LINES = 10**6
        whole = ha.compile(_layers, x)
        split.MAX_LINES = 60
        cut = ha.compile(_layers, x)
    finally:
        split.MAX_LINES = before
    return x, whole, cut


def test_split_plan_matches_the_whole_one(plans):
    x, whole, cut = plans
    assert "def _part" not in whole._program.source
    nparts = cut._program.source.count("def _part")
    assert nparts >= 3
    body = cut._program.source.split("def plan_fn(")[1]
    for part in cut._program.source.split("def _part")[1:]:  # the limit (a statement may
        code = [ln for ln in part.splitlines()[1:]            # straddle it), views apart
                if ln.strip() and split._view_def([ln]) is None]
        assert len(code) <= 2 * 60
    assert body.count("_part") == nparts
    r1, r2 = ha.GradientResult(x), ha.GradientResult(x)
    whole.gradient(x, out=r1)
    cut.gradient(x, out=r2)
    assert float(r1.value) == float(r2.value) and np.array_equal(r1.gradient, r2.gradient)
    reference = ha.gradient(_layers, x, backend="numpy").gradient  # numpy's ufuncs
    np.testing.assert_allclose(r2.gradient, reference, rtol=1e-10, atol=1e-12)
    small = np.linspace(-0.5, 0.5, 7)  # and finite differences where they are accurate
    np.testing.assert_allclose(ha.gradient(_layers, small).gradient,
                               numerical_gradient(_layers, small), rtol=1e-5)
    with count_allocations() as counts:
        for _ in range(5):
            cut.gradient(x, out=r2)
    assert counts.allocations == 0


def test_parts_that_do_not_compile_fall_back_to_one_function(monkeypatch):
    import hybridad.backends.numba.program as program

    real = program.split_body

    def broken(body, n, params, flags, parallel_flags, max_lines=None):
        main, defs, parts = real(body, n, params, flags, parallel_flags, max_lines=40)
        return main, [ln + " + _no_such_name" if "= _view(" in ln else ln for ln in defs], parts

    monkeypatch.setattr(program, "split_body", broken)
    x = np.linspace(-0.5, 0.5, 303)
    with pytest.warns(RuntimeWarning, match="split into parts did not compile"):
        plan = ha.compile(_layers, x)
    assert "def _part" not in plan._program.source
    np.testing.assert_allclose(plan.gradient(x).gradient,
                               ha.gradient(_layers, x, backend="numpy").gradient, rtol=1e-10)
