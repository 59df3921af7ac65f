"""A plan whose numba program would compile longer than HYBRIDAD_COMPILE_BUDGET
seconds (estimated from its generated code before numba starts) runs its
numpy reference program instead, with a warning -- gradient, Hessian and
Jacobian plans alike -- and the same results."""

import numpy as np
import pytest

import hybridad as ha
from hybridad.backends.numba import split


def _f(x):
    return np.sum(np.tanh(x) ** 2 * np.exp(-x))


def _g(x):
    return np.tanh(x[:3]) * x[1:4] ** 2


X = np.linspace(-1.0, 1.0, 5)


@pytest.fixture
def tiny_budget(monkeypatch):
    monkeypatch.setenv("HYBRIDAD_COMPILE_BUDGET", "1e-9")


def test_budget_is_read_and_checked(monkeypatch):
    monkeypatch.setenv("HYBRIDAD_COMPILE_BUDGET", "0")
    assert split.compile_budget() == float("inf")
    monkeypatch.setenv("HYBRIDAD_COMPILE_BUDGET", "soon")
    with pytest.raises(ValueError, match="HYBRIDAD_COMPILE_BUDGET"):
        split.compile_budget()
    monkeypatch.setenv("HYBRIDAD_COMPILE_BUDGET", "1")
    src = "\n".join(f"x{i} = {i}" for i in range(200)) + "\n# fresh " + str(np.random.rand())
    with pytest.raises(ha.CompileBudgetError, match=r"201 lines .* about 2 s, over the budget"):
        split.check_budget(src, "f")


def test_gradient_plan_falls_back_to_the_reference(tiny_budget):
    with pytest.warns(RuntimeWarning, match="over the budget.*numpy reference program"):
        plan = ha.compile(lambda x: _f(x) + 0.5, X, tiered=False)
    assert plan.tier == "numpy"
    res = plan.gradient(X)
    ref = ha.gradient(_f, X, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-15)
    assert float(res.value) == pytest.approx(float(ref.value) + 0.5, rel=1e-15)
    assert "over the budget" in plan.explain()


def test_hessian_and_jacobian_plans_fall_back(tiny_budget):
    hp = ha.compile(lambda x: _f(x) * 2.0, X, hessian=True)
    with pytest.warns(RuntimeWarning, match="over the budget"):
        h = hp.hessian(X).hessian
    np.testing.assert_allclose(h, 2.0 * ha.hessian(_f, X, backend="numpy").hessian,
                               rtol=1e-14)
    assert hp._twin is not None and hp._twin.backend == "numpy"
    np.testing.assert_allclose(hp.hvp(X, v=np.ones(5)).hvp, h @ np.ones(5), rtol=1e-13)
    jp = ha.compile(lambda x: _g(x) + 1.0, X, jacobian=True)
    with pytest.warns(RuntimeWarning, match="over the budget"):
        j = jp.jacobian(X).jacobian
    np.testing.assert_allclose(j, ha.jacobian(_g, X, backend="numpy").jacobian, rtol=1e-15)


def test_hvp_plans_refuse_by_name(tiny_budget):
    with pytest.raises(ha.CompileBudgetError, match="HYBRIDAD_COMPILE_BUDGET"):
        ha.compile(lambda x: _f(x) * 3.0, X, hvp=True)


def test_the_twins_come_from_the_plan_s_own_trace(tiny_budget):
    """The numpy twin of a plan over the budget is built from the graph the plan
    traced (``f`` runs once), and the plan's guards still decide every call the
    twin serves."""
    state = {"calls": 0, "scale": 2.0}

    def f(x):
        state["calls"] += 1
        return state["scale"] * _f(x)

    with pytest.warns(RuntimeWarning, match="over the budget"):
        plan = ha.compile(f, X, tiered=False)
    assert state["calls"] == 1 and plan._reference._replay is not None
    np.testing.assert_allclose(plan.gradient(X).gradient,
                               2.0 * ha.gradient(_f, X, backend="numpy").gradient, rtol=1e-15)

    def g(x):
        state["calls"] += 1
        return state["scale"] * _g(x)

    for kind, fn, call in (("hessian", f, lambda p: p.hessian(X)),
                           ("jacobian", g, lambda p: p.jacobian(X))):
        state.update(calls=0, scale=2.0)
        plan = ha.compile(fn, X, **{kind: True})
        with pytest.warns(RuntimeWarning, match="over the budget"):
            call(plan)
        assert state["calls"] == 1 and plan._twin._replay is not None
        assert plan._recording is None
        call(plan)
        state["scale"] = 3.0  # the plan's guards see it before the twin runs
        with pytest.raises(ha.StalePlanError, match="scale"):
            call(plan)


def test_the_reference_program_is_held_to_the_memory_budget(tiny_budget):
    """The numpy program serving the calls of a plan over the compile budget
    is built within the plan's ``memory_budget``: one that cannot fit raises
    :class:`hybridad.MemoryBudgetError` saying so (it held a 730 MB workspace
    under a 2 MB budget, and ``plan.memory`` said 0.09 MB)."""
    # (a program no other test compiles: a process that compiled it already, or
    # a warm disk cache, is exempt from the compile budget)
    x = np.linspace(-1.0, 1.0, 99_991)

    def chain(x):
        u = np.sin(x) * x
        return np.sum(np.log1p(np.exp(-u * u) + 0.375 * x * x) * np.tanh(x))

    roomy = 64 * x.nbytes
    with pytest.warns(RuntimeWarning, match="over the budget"):
        plan = ha.compile(chain, x, memory_budget=roomy, tiered=False)
    assert plan.tier == "numpy"
    assert plan._reference.memory.total_bytes <= roomy
    assert f"held by the numpy reference program while it serves: " \
           f"{plan._reference.memory.total_bytes} bytes" in plan.explain()
    np.testing.assert_allclose(plan.gradient(x).gradient,
                               ha.gradient(chain, x, backend="numpy").gradient, rtol=1e-14)
    with pytest.raises(ha.MemoryBudgetError, match="numpy reference program.*does not fit "
                                                   "memory_budget"):
        ha.compile(chain, x, memory_budget=2 * x.nbytes, tiered=False)
