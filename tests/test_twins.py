"""Function objects that compute the same thing share their plans
(hybridad.plans.cache.owner_of): a lambda made in a loop finds the plan of the
one before it instead of tracing and building again, and everything that
makes two such functions differ -- the values their shared cells hold now,
defaults bound per iteration, replaced code or defaults, other globals, other
closures -- still gives each its own, right, result."""

import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import hybridad as ha
from hybridad import api
from hybridad.plans import cache
from hybridad.plans.plan import Plan


def _built(monkeypatch):
    """A list that grows by one for every plan built from now on."""
    made = []
    init = Plan.__init__

    def counting(self, *args, **kwargs):
        made.append(self)
        init(self, *args, **kwargs)
    monkeypatch.setattr(Plan, "__init__", counting)
    return made


def test_a_lambda_made_in_a_loop_builds_one_plan(monkeypatch):
    w, target = np.zeros(3), np.array([1.0, -2.0, 0.5])
    res = ha.GradientResult(w)
    made = _built(monkeypatch)
    plans = set()
    for _ in range(30):
        fn = lambda w, t: np.sum((w - t) ** 2)  # noqa: E731 -- what users write
        ha.gradient(fn, w, target, out=res)
        np.testing.assert_allclose(res.gradient, 2 * (w - target), rtol=1e-15)
        plans.update(map(id, api.cached_plans(fn)))
        w -= 0.1 * res.gradient
    assert len(made) == 1 and len(plans) == 1
    np.testing.assert_allclose(w, target, atol=1e-2)


@pytest.mark.parametrize("kind", ["hvp", "hessian", "jacobian"])
def test_the_other_convenience_functions_share_too(monkeypatch, kind):
    x = np.array([0.3, -0.7, 1.1])
    made = _built(monkeypatch)
    for k in range(5):
        xk = x + 0.1 * k
        if kind == "hvp":
            got = ha.hvp(lambda x: np.sum(np.sin(x) * x), xk, np.ones(3)).hvp
            want = (2 * np.cos(xk) - xk * np.sin(xk))
        elif kind == "hessian":
            got = ha.hessian(lambda x: np.sum(np.sin(x) * x), xk).hessian
            want = np.diag(2 * np.cos(xk) - xk * np.sin(xk))
        else:
            got = ha.jacobian(lambda x: np.sin(x) * x, xk).jacobian
            want = np.diag(np.sin(xk) + xk * np.cos(xk))
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert len(made) == 1


def test_shared_cells_whose_values_change_are_seen():
    """Lambdas of one loop share its cells: the plan's guards see what the
    cells hold at each call (here a Python float and an array's row)."""
    x = np.array([0.5, 1.5, -2.0])
    rows = np.arange(12.0).reshape(4, 3)
    with warnings.catch_warnings():
        # (each lambda gets its plan, as it did before they shared one: not a
        # function whose state keeps changing under it)
        warnings.simplefilter("error", ha.RetraceWarning)
        for k in range(4):
            scale = 1.0 + k
            res = ha.gradient(lambda x: scale * np.sum((x - rows[k]) ** 2), x)
            np.testing.assert_allclose(res.gradient, 2 * scale * (x - rows[k]), rtol=1e-15)


def test_defaults_bound_per_iteration_give_each_lambda_its_own_values():
    x = np.array([0.5, 1.5, -2.0])
    for k in range(4):
        c = np.full(3, float(k))
        res = ha.gradient(lambda x, c=c, k=k: np.sum((x - c) ** 2) * (k + 1), x)
        np.testing.assert_allclose(res.gradient, 2 * (k + 1) * (x - c), rtol=1e-15)


def test_replaced_code_or_defaults_make_another_function():
    x = np.array([0.5, 1.5, -2.0])

    def f(x, p=2.0):
        return np.sum(x ** 2) * p

    def g(x, p=2.0):
        return np.sum(x ** 3) * p

    res = ha.GradientResult(x)
    ha.gradient(f, x, out=res)
    np.testing.assert_allclose(res.gradient, 4 * x)
    f.__defaults__ = (5.0,)
    ha.gradient(f, x, out=res)
    np.testing.assert_allclose(res.gradient, 10 * x)
    f.__code__ = g.__code__
    ha.gradient(f, x, out=res)
    np.testing.assert_allclose(res.gradient, 15 * x ** 2)
    np.testing.assert_allclose(ha.hessian(f, x).hessian, np.diag(30 * x))


def test_the_same_code_over_other_globals_or_closures_is_another_function():
    x = np.array([0.5, 1.5, -2.0])
    code = compile("def f(x):\n    return np.sum(x ** 2) * c\n", "<twins>", "exec")
    one, two = {"np": np, "c": 1.0}, {"np": np, "c": 3.0}
    exec(code, one)  # noqa: S102
    exec(code, two)  # noqa: S102
    assert one["f"].__code__ is two["f"].__code__
    np.testing.assert_allclose(ha.gradient(one["f"], x).gradient, 2 * x)
    np.testing.assert_allclose(ha.gradient(two["f"], x).gradient, 6 * x)

    def make(c):
        return lambda x: np.sum(x ** 2) * c

    np.testing.assert_allclose(ha.gradient(make(1.0), x).gradient, 2 * x)
    np.testing.assert_allclose(ha.gradient(make(4.0), x).gradient, 8 * x)


def test_a_closure_made_once_and_dropped_takes_its_plans_with_it():
    x = np.array([0.5, 1.5, -2.0])
    gc.collect()
    twins = len(cache._twins)
    plans = []

    def make(c):
        return lambda x: np.sum(x ** 2 * c)

    for k in range(20):
        fn = make(np.full(3, float(k)))
        np.testing.assert_allclose(ha.gradient(fn, x).gradient, 2 * k * x)
        plans += [weakref.ref(p) for p in api.cached_plans(fn)]
    del fn
    gc.collect()
    assert len(cache._twins) <= twins
    assert all(p() is None for p in plans)


def test_orphans_are_bounded_and_dropped_with_what_they_hold():
    """Twins of functions that are gone but can be made again (their code
    is held here) stay among a bounded number of orphans."""
    x = np.array([0.5, 1.5, -2.0])
    gc.collect()
    before = set(cache._twins)
    kept = [compile(f"lambda x: np.sum(x ** 2) * {k + 1}.0", "<orphans>", "eval")
            for k in range(cache.MAX_ORPHANS + 6)]
    made = []
    for k, code in enumerate(kept):
        g = eval(code)  # noqa: S307 -- a function of code this test holds
        np.testing.assert_allclose(ha.gradient(g, x).gradient, 2 * (k + 1) * x)
        made.append(weakref.ref(api.cached_plans(g)[0]))
        del g
    gc.collect()
    assert len(cache._orphans) <= cache.MAX_ORPHANS
    assert 0 < len(set(cache._twins) - before) <= cache.MAX_ORPHANS
    alive = [r() is not None for r in made]
    assert sum(alive) <= cache.MAX_ORPHANS and alive[-1] and not alive[0]


def test_lambdas_from_two_threads():
    x = np.linspace(-1.0, 1.0, 7)
    errors = []

    def work(t):
        for k in range(40):
            a = float(t + k)
            res = ha.gradient(lambda x: a * np.sum(np.tanh(x) ** 2), x)
            want = 2 * a * np.tanh(x) / np.cosh(x) ** 2
            if not np.allclose(res.gradient, want, rtol=1e-13, atol=0):
                errors.append((t, k))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_a_new_lambda_like_the_last_skips_the_lookup(monkeypatch, kind):
    """After the first, a lambda made anew finds its twin's most recent plan
    the way a repeated call of one function does (no argument flattening,
    no cache key), and allocates nothing."""
    from hybridad.testing import count_allocations

    x, c = np.linspace(-1.0, 1.0, 9), np.full(9, 0.5)
    res = ha.GradientResult(x) if kind == "gradient" else ha.HvpResult(x)
    lookups = []
    real = api._lookup

    def counted(*a, **k):
        lookups.append(1)
        return real(*a, **k)
    monkeypatch.setattr(api, "_lookup", counted)
    monkeypatch.setattr(cache, "lookup", counted)

    def call():
        if kind == "gradient":
            return ha.gradient(lambda x, c: np.sum(np.sin(x) * c), x, c, out=res)
        return ha.hvp(lambda x, c: np.sum(np.sin(x) * c), x, c, c, out=res)
    for _ in range(5):
        call()
    with count_allocations() as counts:
        call()
    assert len(lookups) == 1 and counts.allocations == 0
    np.testing.assert_allclose(res.gradient, np.cos(x) * c, rtol=1e-15)
