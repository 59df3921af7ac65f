"""Decisions on values checked by compiled code (hybridad.plans.decided): every
kind of decision agrees with the reference check, the fast path runs the
compiled check before the plan's program, the rule when the two checks
disagree, threads, and result buffers untouched by a call that fails."""

import threading

import numpy as np
import pytest

import hybridad as ha
from hybridad.errors import DecisionsChanged, TracingError
from test_decisions import CASES, near_point


def _points(x, rng, k=40):
    """Points around ``x``: scaled, shifted, signs flipped (both outcomes)."""
    out = []
    for _ in range(k):
        y = x * rng.choice([-1.0, 1.0], x.shape) * rng.uniform(0.2, 2.0, x.shape)
        out.append(y + rng.choice([0.0, 0.05, -0.05, 1.0]))
    return out


#: points where the case's other outcome needs more than a perturbation
EXTRA = {"lennard_jones": [np.array([0.0, 0.0, 0.0, 0.0, 1.0, 1.0])],  # two coincide
         "early_return": [np.array([1.0, -2.0, 1.0])]}  # a sum of 0


# (huber's masked selections are lazy, summed and dotted: it decides nothing now)
@pytest.mark.parametrize("name", [n for n in CASES if n != "huber"])
def test_each_workload_s_decisions_compile_and_agree_with_the_reference(name):
    f, points = CASES[name]
    plan = ha.compile(f, points[0])
    check = plan._decision_check
    assert check is not None and check.program is not None, plan.explain()
    rng = np.random.default_rng(11)
    outcomes = set()
    carried = plan._program.checked_parts is not None
    for x in points + EXTRA.get(name, []) + _points(points[0], rng) + _points(points[1], rng):
        compiled = check.compiled([x])
        reference = check.first_failing([x], compiled=False) is None
        assert compiled == reference, (name, x)
        if carried:  # the same check inside the plan's program
            assert _carried(plan, [x]) == compiled, (name, x)
        outcomes.add(reference)
    assert outcomes == {True, False}  # both outcomes were checked


def _int_of_float(x):
    return int(x[0]) * np.sum(x ** 2)


def _float_of_int(x, k):
    return float(k[0]) * np.sum(x ** 2)


def _index(x, k):
    return np.sum(x[: k[0]] ** 2)


def _bool_of_int(x, k):
    return np.sum(x ** 2) if k[1] else np.sum(x)


def _mask(x):
    s = x[x > 0.5]
    return np.sum(s ** 2) * len(s)  # (the count used: the mask decided)


@pytest.mark.parametrize("f, args, others", [
    (_int_of_float, (np.array([2.7, 1.0]),),
     [(np.array([2.1, 3.0]),), (np.array([-2.7, 1.0]),), (np.array([3.0, 1.0]),),
      (np.array([np.nan, 1.0]),), (np.array([np.inf, 1.0]),), (np.array([-0.5, 1.0]),)]),
    (_float_of_int, (np.array([1.0, 2.0]), np.array([3, 1])),
     [(np.array([1.0, 2.0]), np.array([3, 0])), (np.array([1.0, 2.0]), np.array([-3, 1]))]),
    (_index, (np.arange(5.0), np.array([3])),
     [(np.arange(5.0), np.array([3])), (np.arange(5.0), np.array([2]))]),
    (_bool_of_int, (np.array([1.0, 2.0]), np.array([0, 4])),
     [(np.array([1.0, 2.0]), np.array([7, 5])), (np.array([1.0, 2.0]), np.array([0, 0]))]),
    (_mask, (np.array([0.1, 0.9, 0.6]),),
     [(np.array([0.2, 0.8, 0.7]),), (np.array([0.9, 0.1, 0.6]),), (np.array([0.1, 0.9, np.nan]),)]),
], ids=["int-of-float", "float-of-int", "index", "bool-of-int", "mask"])
def test_every_kind_of_decision_agrees_with_the_reference(f, args, others):
    plan = ha.compile(f, *args, argnums=0)
    check = plan._decision_check
    assert check.program is not None, plan.explain()
    for call in [args, *others]:
        leaves = list(call)
        assert check.compiled(leaves) == (check.first_failing(leaves, compiled=False) is None)
        if plan._program.checked_parts is not None:
            assert _carried(plan, leaves) == check.compiled(leaves)
    for call in [args, *others]:  # and the plan follows each call's branch
        if any(not np.all(np.isfinite(a)) for a in call):
            continue  # (int() of NaN raises in f itself)
        got = plan.gradient(*call)
        want = ha.gradient(f, *call, argnums=0, backend="numpy")
        assert float(got.value) == pytest.approx(float(want.value), rel=1e-13)
        np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-13, atol=1e-15)


def _carried(plan, leaves):
    """The plan's program run with the decision check it carries
    (hybridad.backends.numba.prelude) on ``leaves``, into buffers filled with a
    sentinel: True when it ran, False when it raised DecisionsChanged -- having
    written nothing."""
    prog = plan._program
    own, fixed, bound = prog.checked_parts
    outs = [np.full(shape, -7.0, dtype) for shape, dtype in prog._out_specs]
    try:
        own(*fixed, *[id(a) for a in leaves], *bound, *[id(o) for o in outs])
    except DecisionsChanged:
        assert all(np.all(o == -7.0) for o in outs)
        return False
    return True


def test_the_fast_path_runs_the_check_inside_the_program():
    """One native call: the program's argument checks, the decisions, then the
    work; the general path's calls pass no slot and run the program as it was."""
    x, far = np.array([0.31, 1.0, 2.0]), np.array([0.9, 1.0, 2.0])
    plan = ha.compile(near_point, x)
    source = plan.gradient.source
    assert "_gj(" not in source and source.count("_j(") == 1  # one call
    assert source.index("try:\n                        _j(") < source.index("except _Changed:")
    prog = plan._program.source
    assert prog.index("_e = _check(") < prog.index("if _dflagp != 0:") < \
        prog.index("raise _DecisionsChanged") < prog.index("for i0")
    assert "inside the plan's program" in plan.explain()
    assert _carried(plan, [x]) and not _carried(plan, [far])
    own, fixed, bound = plan._program.parts  # (slot 0: no check)
    assert fixed[-1] == 0 and plan._program.checked_parts[1][-1] != 0
    res = ha.GradientResult(far)
    own(*fixed, id(far), *bound, id(res._value), id(res.gradient))  # runs, unchecked:
    assert float(res.value) == pytest.approx(np.sum(far ** 2), rel=1e-14)  # x's branch
    np.testing.assert_allclose(res.gradient, 2 * far, rtol=1e-14)


def test_either_check_passing_keeps_the_plan():
    """The rule where the compiled and reference checks disagree (a value a
    rounding apart at a threshold): the decisions hold when either passes;
    a call never loops and never makes a needless specialization."""
    x = np.array([0.31, 1.0, 2.0])
    plan = ha.compile(near_point, x)
    check = plan._decision_check
    far = np.array([0.9, 1.0, 2.0])
    check.compiled = lambda leaves: False  # compiled fails, reference holds
    assert check.first_failing([x]) is None
    res = ha.gradient(near_point, x)
    assert float(Plan_gradient(plan, x).value) == pytest.approx(float(res.value), rel=1e-14)
    assert plan._specializations == []
    check.compiled = lambda leaves: True  # compiled passes: the reference is not asked
    assert check.first_failing([far]) is None
    check.compiled = lambda leaves: False
    assert check.first_failing([far]) is not None


def Plan_gradient(plan, *args):  # noqa: N802 - the general path (not the fast path)
    return type(plan).gradient(plan, *args)


def test_threads_calling_both_branches():
    """The compiled check's answer leaves the call with it (it raises): a thread
    never reads another's outcome."""
    x0, x1 = np.array([0.31, 1.0, 2.0]), np.array([0.9, 1.0, 2.0])
    plan = ha.compile(near_point, x0)
    want = {k: ha.gradient(near_point, x, backend="numpy") for k, x in ((0, x0), (1, x1))}
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        res = ha.GradientResult(x0)
        for _ in range(300):
            k = int(rng.integers(2))
            plan.gradient(x1 if k else x0, out=res)
            if float(res.value) != pytest.approx(float(want[k].value), rel=1e-13):
                errors.append((k, float(res.value)))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_call_whose_other_branch_fails_leaves_the_buffers_untouched():
    def f(x):
        if x[0] > 0:
            return np.sum(x ** 2)
        return np.sum(x) * float(x[1])  # float() of a traced float: refused

    x = np.array([0.5, 1.0, 2.0])
    plan = ha.compile(f, x)
    assert plan._decision_check.program is not None
    res = ha.GradientResult(x)
    plan.gradient(x, out=res)
    value, grad = res.value.copy(), res.gradient.copy()
    with pytest.raises(TracingError):
        plan.gradient(-x, out=res)
    assert res.value.tobytes() == value.tobytes() and res.gradient.tobytes() == grad.tobytes()


def test_hvp_plans_check_compiled_decisions_too():
    f, (x, y) = CASES["near_point"]
    plan = ha.compile(f, x, hvp=True)
    assert plan._decision_check.program is not None
    v = np.array([0.3, -0.2, 0.5])
    for p in (x, y, x):
        got = plan.hvp(p, v=v)
        want = ha.hvp(f, p, v=v, backend="numpy")
        np.testing.assert_allclose(got.hvp, want.hvp, rtol=1e-12, atol=1e-14)


def test_hvp_plans_carry_their_check_on_the_plain_path(monkeypatch):
    """An ``hvp=True`` plan's program carries the decisions' check too: a
    plain call on the traced branch runs one native call (no separate check:
    ``_specialized`` is not reached); a call that decides otherwise is routed
    to its specialization with the buffers of the failed call untouched until
    then; each branch matches the numpy backend, with no allocation."""
    from hybridad.testing import count_allocations

    f, (x, y) = CASES["near_point"]
    v = np.array([0.3, -0.2, 0.5])
    plan = ha.compile(f, x, hvp=True)
    assert plan._program.checked_parts is not None
    res = ha.HvpResult(x)
    plan.hvp(x, v=v, out=res)
    with monkeypatch.context() as m:
        m.setattr(type(plan), "_specialized", lambda *a: pytest.fail("checked apart"))
        plan.hvp(x, v=v, out=res)
    for p in (x, y, x, y):
        want = ha.hvp(f, p, v=v, backend="numpy")
        plan.hvp(p, v=v, out=res)
        np.testing.assert_allclose(res.hvp, want.hvp, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-12, atol=1e-14)
    assert len(plan._specializations) == 1
    for p in (x, y):
        plan.hvp(p, v=v, out=res)
        with count_allocations() as counts:
            for _ in range(3):
                plan.hvp(p, v=v, out=res)
        assert counts.allocations == 0, (p, counts)


def test_hessian_and_jacobian_plans_compile_their_checks():
    f, (x, y) = CASES["near_point"]
    plan = ha.compile(f, x, hessian=True)
    assert plan._decision_check.program is not None
    for p in (x, y, x, y):
        got = plan.hessian(p)
        want = ha.hessian(f, p, backend="numpy")
        np.testing.assert_allclose(got.hessian, want.hessian, rtol=1e-12, atol=1e-14)
    def g(x):
        return x ** 2 if x[0] > 0 else np.sin(x)

    plan = ha.compile(g, x, jacobian=True)
    assert plan._decision_check.program is not None
    for p in (x, -x, x):
        got = plan.jacobian(p)
        want = ha.jacobian(g, p, backend="numpy")
        np.testing.assert_allclose(got.jacobian, want.jacobian, rtol=1e-13, atol=1e-15)


def test_a_tiered_plan_attaches_its_compiled_check_at_the_switch():
    """A tiered plan answers its first call at once (no check compiled before
    it); the compiled check comes with the compiled program and is put in
    place at the switch -- never when a background compile happens to end."""
    x, y = np.array([0.31, 1.0, 2.0]), np.array([0.9, 1.0, 2.0])
    plan = ha.compile(near_point, x, tiered=True)
    check = plan._decision_check
    first = plan.gradient(x)
    assert check.program is None or plan.tier == "numba"
    plan.wait()
    assert plan.tier == "numba" and check.program is not None
    assert plan._program.checked_parts is not None  # (compiled first, carried inside)
    assert "except _Changed" in plan.gradient.source
    for p in (x, y, x):
        want = ha.gradient(near_point, p, backend="numpy")
        np.testing.assert_allclose(plan.gradient(p).gradient, want.gradient, rtol=1e-13)
    np.testing.assert_allclose(first.gradient, ha.gradient(near_point, x).gradient, rtol=1e-13)


def _routes_the_other_outcome_alone(plan, f, x, y, monkeypatch):
    """Hessians of ``plan`` at ``x, x, y, x`` into one result, each the numpy
    backend's; only the call at ``y`` (the other outcome) takes the general
    path, which routes it to its own plan.  Returns the result."""
    res = ha.HessianResult(x)
    for _ in range(2):  # (the entry is made after the first call)
        plan.hessian(x, out=res)
    general = []
    real = plan._check
    monkeypatch.setattr(plan, "_check", lambda *a, **k: general.append(1) or real(*a, **k))
    for p in (x, x, y, x):
        plan.hessian(p, out=res)
        want = ha.hessian(f, p, backend="numpy")
        np.testing.assert_allclose(res.hessian, want.hessian, rtol=1e-12, atol=1e-14)
    assert len(general) <= 1  # (the call at y only: routed to its own plan)
    return res


def test_one_chunk_hessian_plans_that_decide_take_their_fast_entry(monkeypatch):
    """A one-chunk Hessian plan that decided on values runs its compiled check
    and then its whole program on its fast entry; a call that decides
    otherwise is routed by the general path to its specialization."""
    f, (x, y) = CASES["near_point"]
    plan = ha.compile(f, x, hessian=True)
    assert plan._decision_check.program is not None
    res = _routes_the_other_outcome_alone(plan, f, x, y, monkeypatch)
    # the whole program carries the check: one native call, no separate check
    whole = plan._programs["chunk+primal"]
    assert whole.checked_parts is not None and "raise _DecisionsChanged" in whole.source
    with monkeypatch.context() as m:
        m.setattr(plan._decision_check.program, "parts", None)  # (a separate call would fail)
        plan.hessian(x, out=res)
    np.testing.assert_allclose(res.hessian, ha.hessian(f, x, backend="numpy").hessian,
                               rtol=1e-12, atol=1e-14)


def test_one_chunk_hessian_entry_with_its_check_apart(monkeypatch):
    """Where the whole program cannot carry the check (inline_check says None),
    the one-chunk entry runs the compiled check as a call of its own
    (``check.compiled``) and then the program; a call that decides otherwise
    takes the general path, which routes it."""
    import hybridad.backends.numba.program as P

    monkeypatch.setattr(P, "inline_check", lambda *a: None)
    f, (x, y) = CASES["near_point"]
    plan = ha.compile(f, x, hessian=True)
    _routes_the_other_outcome_alone(plan, f, x, y, monkeypatch)
    assert plan._programs["chunk+primal"].checked_parts is None


def test_one_chunk_jacobian_plans_carry_their_check():
    """A reverse Jacobian plan of one chunk that decided on values: its whole
    program carries the check; each branch matches the numpy backend."""
    def g(x):
        return np.sin(x) * 2.0 if x[0] > 0 else x ** 3

    x, y = np.array([0.5, 1.0, 2.0]), np.array([-0.5, 1.0, 2.0])
    plan = ha.compile(g, x, jacobian=True)
    res = ha.JacobianResult(x, np.zeros(3))
    for _ in range(2):
        plan.jacobian(x, out=res)
    whole = plan._programs.get("chunk+primal")
    assert whole is not None and whole.checked_parts is not None
    for p in (x, y, x, y):
        plan.jacobian(p, out=res)
        want = ha.jacobian(g, p, backend="numpy")
        np.testing.assert_allclose(res.jacobian, want.jacobian, rtol=1e-12, atol=1e-14)


def _big(x):
    if x[0] > 0:
        return np.sum(np.tanh(x) ** 2)
    return np.sum(np.exp(-x * x))


def test_a_parallel_program_carries_its_check_too():
    """A program large enough to release the GIL and run on threads: the fast
    path calls it with its check through the program's lock and thread choice;
    each branch is followed, nothing is allocated, and a changed decision
    writes nothing."""
    from hybridad.testing import count_allocations

    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 1.0, 1 << 17)
    y = -x
    plan = ha.compile(_big, x)
    assert plan._program.heavy and plan._program.checked_parts is not None
    assert "_inv(" in plan.gradient.source and "except _Changed" in plan.gradient.source
    assert _carried(plan, [x]) and not _carried(plan, [y])
    res = ha.GradientResult(x)
    for p in (x, y, x, y):
        want = ha.gradient(_big, p, backend="numpy")
        plan.gradient(p, out=res)
        assert float(res.value) == pytest.approx(float(want.value), rel=1e-12)
        np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-12, atol=1e-300)
    plan.gradient(x, out=res)
    with count_allocations() as counts:
        for _ in range(3):
            plan.gradient(x, out=res)
    assert counts.allocations == 0, counts


def test_the_check_is_carried_only_where_the_budget_holds_it_twice():
    """The program holds a workspace of its own for the check: under a
    ``memory_budget`` that fits the check's workspace once but not twice, the
    check runs as its own call (and the plan stays within the budget)."""
    x = np.array([0.31, 1.0, 2.0])
    free = ha.compile(near_point, x)
    need = free.memory.total_bytes + free._check_program.memory.total_bytes
    assert free._program.checked_parts is not None
    tight = ha.compile(near_point, x, memory_budget=need)
    assert tight._decision_check.program is not None
    assert tight._program.checked_parts is None and "_gj(" in tight.gradient.source
    roomy = ha.compile(near_point, x, memory_budget=need + free._check_program.memory.total_bytes)
    assert roomy._program.checked_parts is not None
    for p in (x, np.array([0.9, 1.0, 2.0])):
        want = ha.gradient(near_point, p, backend="numpy")
        for plan in (tight, roomy):
            res = ha.GradientResult(p)
            plan.gradient(p, out=res)
            np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-13)


def test_a_float32_plan_carries_its_check():
    """float32 arguments: the carried check decides as the standalone one, and
    each branch's gradient matches the numpy backend."""
    f, (x, y) = CASES["near_point"]
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    plan = ha.compile(f, x32)
    assert plan._program.checked_parts is not None
    check = plan._decision_check
    for p in (x32, y32):
        assert _carried(plan, [p]) == check.compiled([p])
    res = ha.GradientResult(x32)
    for p in (x32, y32, x32):
        plan.gradient(p, out=res)
        want = ha.gradient(f, p, backend="numpy")
        np.testing.assert_allclose(res.gradient, want.gradient, rtol=1e-5, atol=1e-6)
