"""Whole optimizer runs: ``scipy.optimize.minimize(method="L-BFGS-B")`` with
each implementation's value and gradient (``jac=True``).

Used by the suite's ``rosen`` workload and by ``benchmarks/bench_scipy.py``.
Every implementation gets the same options: ``maxiter`` 15000 for n <= 10^4
(L-BFGS-B converges on the chained Rosenbrock) and 100 above (the chained
Rosenbrock needs far more iterations there, so those runs stop at the cap).
"""

from __future__ import annotations

import gc
import statistics
import time

import numpy as np

from .harness import balanced_orders, batch_ns, calls_per_batch, gc_disabled

METHOD = "L-BFGS-B"
SMALL_LIMIT = 10**4  # n <= this: run to convergence
MAXITER_SMALL = 15000
MAXITER_LARGE = 100


def options_for(n, maxiter_large=MAXITER_LARGE):
    """``minimize``'s options at size ``n``: ``{"maxiter": ...}``."""
    return {"maxiter": MAXITER_SMALL if n <= SMALL_LIMIT else maxiter_large}


def time_optimizer(runs, repeats):
    """Time whole optimizer runs in interleaved rounds.

    Parameters
    ----------
    runs : sequence of callable
        Each a whole ``minimize`` call returning an ``OptimizeResult``.
    repeats : int
        Rounds; in each every run is called once, the garbage collector off,
        each run after each of the others alike over the rounds
        (:func:`~hybridad.bench.harness.balanced_orders`), so that a slow
        spell of a shared machine falls on all of them.

    Returns
    -------
    tuple
        (per run the list of seconds of each round, per run the last result).
    """
    times = [[] for _ in runs]
    results = [None] * len(runs)
    for order in balanced_orders(len(runs), repeats):
        for i in order:  # each run after each of the others alike
            with gc_disabled():
                t0 = time.perf_counter()
                res = runs[i]()
                times[i].append(time.perf_counter() - t0)
            results[i] = res
            gc.collect()
    return times, results


def alternating(evaluate, x0, shift=1e-3):
    """``call()`` evaluating at ``x0`` and at ``x0`` with its first entry moved by
    ``shift``, in turn (hybridad's Objective memoizes by the point's contents, so
    the same point twice would not evaluate)."""
    xb = x0.copy()
    xb[0] += shift
    state = [False]

    def call():
        state[0] = not state[0]
        return evaluate(xb if state[0] else x0)

    return call


def time_evaluations(evaluates, x0, repeats, target_ms):
    """Median microseconds of one evaluation per callable (interleaved batches).

    Each ``evaluate(x)`` is called alternately at two points
    (:func:`alternating`), in ``repeats`` interleaved batches of about
    ``target_ms``, the garbage collector off.

    Returns
    -------
    list of float
    """
    calls = [alternating(evaluate, x0) for evaluate in evaluates]
    for call in calls:
        call()
        call()
    with gc_disabled():
        numbers = [calls_per_batch(call, target_ms * 1e6, step=2) for call in calls]
        per_call = [[] for _ in calls]
        for _ in range(repeats):
            for call, number, t in zip(calls, numbers, per_call, strict=True):
                t.append(batch_ns(call, number) / number / 1e3)
    return [statistics.median(t) for t in per_call]


def objective_value_and_grad(problem):
    """hybridad's scipy glue: ``hybridad.scipy.Objective(f, x0).value_and_grad``.

    Returns
    -------
    tuple
        (``value_and_grad``, seconds of the construction -- the plan -- and
        one evaluation).
    """
    import hybridad.scipy as hs

    x0 = problem.args[0]
    t0 = time.perf_counter()
    obj = hs.Objective(problem.f, x0, *problem.args[1:])
    obj.value_and_grad(x0)
    return obj.value_and_grad, time.perf_counter() - t0


def scipy_value_and_grad():
    """scipy's own hand-written derivative: ``(rosen(x), rosen_der(x))``."""
    from scipy.optimize import rosen, rosen_der

    def value_and_grad(x):
        return rosen(x), rosen_der(x)

    return value_and_grad


def minimize_run(value_and_grad, x0, options):
    """``() -> minimize(value_and_grad, x0, jac=True, method="L-BFGS-B", options=options)``."""
    from scipy.optimize import minimize

    return lambda: minimize(value_and_grad, x0, jac=True, method=METHOD, options=options)


def check_points(problem, seed=0):
    """The points the implementations are checked at: ``x0`` and a random point in [-2, 2]."""
    x0 = problem.args[0]
    return [x0, np.random.default_rng(seed).uniform(-2.0, 2.0, x0.shape)]
