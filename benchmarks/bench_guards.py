"""Guard cost: what a Python decision on a traced value costs per call.

A function with ``if`` on a value (``hybridad.core.decisions``) is traced for
the outcome of the example's values; every call then checks the decision on
its own arrays before the plan's program runs (on the plan's generated fast
path, by a compiled check: ``hybridad.plans.decided``), and a call that
decides otherwise runs another specialization.
This benchmark measures that check against the same plan without it.

Cases (float64, n = 100 and 10^4; ``--quick``: 100):

* ``no decision`` -- ``f(x) = sum(x**2 - 0.5 x)``, the baseline of the ratios;
* ``decision`` -- ``if x[0] > 0: f(x) else sum(x**3)``, every call on the
  traced branch: the cost of the guard;
* ``decision, alternating`` -- the same plan called at two points whose
  outcomes differ, one after the other (two specializations, each call
  checking the first one's decision);
* ``jax.jit`` -- the decision as ``jnp.where(x[0] > 0, ...)`` under
  ``jax.value_and_grad`` (JAX refuses the Python ``if``), when jax is
  installed.

Rows are timed in interleaved batches of ~20 ms, 5 rounds (medians, us per
call: value and gradient into a preallocated result); ``vs no decision`` is
the ratio of medians in the same run.

Usage::

    python benchmarks/bench_guards.py [--quick] [--json FILE]
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
from hybridad.bench.harness import time_round_robin  # noqa: E402


def plain(x):
    return np.sum(x ** 2 - 0.5 * x)


def decided(x):
    if x[0] > 0:
        return np.sum(x ** 2 - 0.5 * x)
    return np.sum(x ** 3)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
    except ImportError:
        jax = None
    rows = []
    for n in ([100] if opts.quick else [100, 10 ** 4]):
        rng = np.random.default_rng(0)
        x = rng.uniform(0.1, 1.0, n)
        y = x.copy()
        y[0] = -y[0]  # the other outcome
        calls, names = [], []
        for name, f, points in (("no decision", plain, [x]), ("decision", decided, [x]),
                                ("decision, alternating", decided, [x, y])):
            plan = ha.compile(f, x)
            res = ha.GradientResult(x)
            for p in points:
                plan.gradient(p, out=res)
                ref = ha.gradient(f, p, backend="numpy")
                np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-12, atol=1e-14)
            if len(points) == 1:
                calls.append(lambda plan=plan, res=res: plan.gradient(x, out=res))
            else:  # (two calls per call: halved below)
                calls.append(lambda plan=plan, res=res: (plan.gradient(x, out=res),
                                                         plan.gradient(y, out=res)))
            names.append(name)
        if jax is not None:
            def loss(z):
                return jnp.where(z[0] > 0, jnp.sum(z ** 2 - 0.5 * z), jnp.sum(z ** 3))
            fn = jax.jit(jax.value_and_grad(loss))
            xj = jnp.asarray(x)
            calls.append(lambda: jax.block_until_ready(fn(xj)))
            names.append("jax.jit (jnp.where)")
        times = time_round_robin(calls, 5, 20.0)
        base = times[0][0]
        for name, (med, lo, hi, _) in zip(names, times, strict=True):
            if name == "decision, alternating":
                med, lo, hi = med / 2, lo / 2, hi / 2
            rows.append({"n": n, "case": name, "us": med, "min": lo, "max": hi,
                         "vs_plain": med / base})
            print(f"n={n:<6} {name:<24} {med:9.2f} us  [{lo:.2f}, {hi:.2f}]  "
                  f"{med / base:6.2f}x no decision", flush=True)
    if opts.json:
        _harness.write_json(opts.json, rows, {"quick": opts.quick,
                                              "numpy": _harness.version("numpy")})


if __name__ == "__main__":
    main()
