"""Entry-point cost: ``ha.gradient``, ``ha.hvp``, ``ha.hessian`` and
``ha.jacobian`` with ``out=`` against the explicit plan's call, per argument
structure.

An optimizer loop over model parameters calls the convenience functions with
tuples, lists and dicts of arrays, and with static Python numbers; each call
must find the plan it made before and run it.  The goal: at most 2x the
explicit plan's call at n = 100, for every structure.

Structures (float64, n = 100 differentiated elements):

* ``gradient`` -- ``f(p, X)`` with ``p`` an array (100,), a tuple ``(W, b)``
  (W 9 x 10, b 10: 100 elements), a nested ``([W], [b])``, a dict
  ``{"W": W, "b": b}``, and the array with a static float ``f(x, X, 0.5)``;
  and ``new lambda``: the array, ``ha.gradient(lambda p, X: f(p, X), ...)``
  with a lambda made at every call (its twin's plan, hybridad.plans.cache);
* ``hvp``, ``hessian`` -- ``g(x, *rest)`` of one array (100,), the other
  arguments constants: an array, a tuple ``(A, c)``, a nested ``([A], [c])``,
  a dict, a static float;
* ``jacobian`` -- ``h(x, *rest)`` returning 10 values, the same structures.

Each pair (convenience function, plan) is checked to give the same results,
then timed in interleaved batches of ~10 ms, 5 rounds (medians, us per
call); ``ratio`` is the convenience function over the plan.

Usage::

    python benchmarks/bench_entry.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad._tree import flatten  # noqa: E402
from hybridad.bench.harness import time_round_robin  # noqa: E402

GOAL = 2.0


def _loss(W, b, X):
    return np.sum(np.tanh(X @ W + b) ** 2)


def _g(x, A, c, scale=1.0):
    return scale * np.sum(np.tanh(A @ x + c) ** 2) + 0.1 * np.sum(x ** 4)


def _h(x, A, c, scale=1.0):
    return scale * np.tanh(A @ x + c)


def _structures(rng):
    """``{name: (gradient args, rest of g/h's args)}``."""
    W, b = rng.standard_normal((9, 10)), rng.standard_normal(10)
    X = rng.standard_normal((20, 9))
    A, c = rng.standard_normal((10, 100)) / 10, rng.standard_normal(10)
    flat = np.concatenate([W.ravel(), b])
    return {
        "array": ((flat, X), (np.concatenate([A.ravel(), c]),)),
        "tuple": (((W, b), X), ((A, c),)),
        "nested": ((([W], [b]), X), (([A], [c]),)),
        "dict": (({"W": W, "b": b}, X), ({"A": A, "c": c},)),
        "static float": ((flat, X, 0.5), (np.concatenate([A.ravel(), c]), 0.5)),
    }


def _pair(p, keys, shape):
    """The matrix and vector of ``p`` in any of the structures: a dict by
    ``keys``, a tuple or list (of one-element lists: nested), or one flat
    array (the matrix of ``shape`` first)."""
    if isinstance(p, dict):
        return p[keys[0]], p[keys[1]]
    if isinstance(p, (tuple, list)):
        a, b = p
        return (a[0], b[0]) if isinstance(a, list) else (a, b)
    size = shape[0] * shape[1]
    return p[:size].reshape(shape), p[size:]


def f_grad(p, X, scale=1.0):
    W, b = _pair(p, ("W", "b"), (9, 10))
    return scale * _loss(W, b, X)


def f_scalar(x, q, scale=1.0):
    A, c = _pair(q, ("A", "c"), (10, 100))
    return _g(x, A, c, scale)


def f_vector(x, q, scale=1.0):
    A, c = _pair(q, ("A", "c"), (10, 100))
    return _h(x, A, c, scale)


def _same(a, b):
    """The same arrays (pytrees of them) to rounding; the run aborts otherwise."""
    for u, w in zip(flatten(a)[0], flatten(b)[0], strict=True):
        np.testing.assert_allclose(u, w, rtol=1e-12, atol=1e-14)


def _pairs(rng):
    """``[(kind, structure, convenience call, plan call)]``, each checked."""
    x = rng.standard_normal(100)
    v = rng.standard_normal(100)
    out = []
    for name, (gargs, rest) in _structures(rng).items():
        plan = ha.compile(f_grad, *gargs)
        r1, r2 = ha.GradientResult(gargs[0]), ha.GradientResult(gargs[0])
        ha.gradient(f_grad, *gargs, out=r1)
        plan.gradient(*gargs, out=r2)
        _same(r1.gradient, r2.gradient)
        out.append(("gradient", name, lambda g=gargs, r=r1: ha.gradient(f_grad, *g, out=r),
                    lambda g=gargs, r=r2, p=plan: p.gradient(*g, out=r)))
        if name == "array":  # (a lambda made at every call, as an optimizer loop writes it)
            out.append(("gradient", "new lambda", lambda g=gargs, r=r1: ha.gradient(
                lambda p, X: f_grad(p, X), *g, out=r),
                lambda g=gargs, r=r2, p=plan: p.gradient(*g, out=r)))

        plan = ha.compile(f_scalar, x, *rest, hvp=True)
        r1, r2 = ha.HvpResult(x), ha.HvpResult(x)
        ha.hvp(f_scalar, x, v, *rest, out=r1)
        plan.hvp(x, *rest, v=v, out=r2)
        _same(r1.hvp, r2.hvp)
        out.append(("hvp", name, lambda a=rest, r=r1: ha.hvp(f_scalar, x, v, *a, out=r),
                    lambda a=rest, r=r2, p=plan: p.hvp(x, *a, v=v, out=r)))

        plan = ha.compile(f_scalar, x, *rest, hessian=True)
        r1, r2 = ha.HessianResult(x), ha.HessianResult(x)
        ha.hessian(f_scalar, x, *rest, out=r1)
        plan.hessian(x, *rest, out=r2)
        _same(r1.hessian, r2.hessian)
        out.append(("hessian", name, lambda a=rest, r=r1: ha.hessian(f_scalar, x, *a, out=r),
                    lambda a=rest, r=r2, p=plan: p.hessian(x, *a, out=r)))

        plan = ha.compile(f_vector, x, *rest, jacobian=True)
        y = f_vector(x, *rest)
        r1, r2 = ha.JacobianResult(y, x), ha.JacobianResult(y, x)
        ha.jacobian(f_vector, x, *rest, out=r1)
        plan.jacobian(x, *rest, out=r2)
        _same(r1.jacobian, r2.jacobian)
        out.append(("jacobian", name, lambda a=rest, r=r1: ha.jacobian(f_vector, x, *a, out=r),
                    lambda a=rest, r=r2, p=plan: p.jacobian(x, *a, out=r)))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    pairs = _pairs(np.random.default_rng(0))
    rows = []
    for kind, name, conv, plan_call in pairs:
        (c, cmin, cmax, _), (p, pmin, pmax, _) = time_round_robin(
            [conv, plan_call], 3 if opts.quick else 5, 5.0 if opts.quick else 10.0)
        rows.append({"kind": kind, "structure": name, "ha_us": c, "plan_us": p,
                     "ratio": c / p})
        print(f"{kind:<9} {name:<13} ha.{kind}(out=) {c:8.2f} us  plan {p:8.2f} us  "
              f"{c / p:5.2f}x{'' if c / p <= GOAL else '  (goal 2x)'}", flush=True)
    worst = max(r["ratio"] for r in rows)
    print(f"worst ratio {worst:.2f}x (goal at most {GOAL}x)")
    if opts.json:
        _harness.write_json(opts.json, rows, {"quick": opts.quick,
                                              "numpy": _harness.version("numpy")})


if __name__ == "__main__":
    main()
