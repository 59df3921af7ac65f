"""Hessian-vector products on scipy's Rosenbrock: every entry point against
jax.jit and the gradient.

What Newton-CG, trust-ncg, trust-krylov and trust-constr call per inner
iteration: value, gradient and ``H v`` of the chained Rosenbrock
``f(x) = sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)`` at
n = 10^2, 10^4, 10^6 (``--quick``: 10^2, 10^4), float64, ``x ~ U(-1, 1)``,
``v ~ N(0, 1)`` (seeded).  Rows:

* ``hvp=True plan`` -- ``plan = ha.compile(f, x, hvp=True)``,
  ``plan.hvp(x, v=v, out=res)`` (value, gradient, ``H v``);
* ``Hessian plan hvp(x, v=)`` -- ``ha.compile(f, x, hessian=True)``'s
  ``hvp`` with arguments (its primal, then its tangent program);
* ``linearize + hvp(v=)`` -- the same plan after ``plan.linearize(x)``:
  ``plan.hvp(v=v, out=res)`` runs the tangent program only (the goal: at
  most 0.7x the ``hvp=True`` call);
* ``linearize + H v alone`` -- ``plan.hvp(v=v, out=array)``: ``H v`` only
  (what scipy's ``hessp`` asks for; the value and gradient came with
  ``linearize``), the tangent program writing nothing else;
* ``ha.hvp(out=)`` -- the convenience function into a preallocated result;
* ``gradient plan`` -- value and gradient only, for scale;
* ``jax.jit`` -- ``jax.jit(lambda x, v: (f(x), grad(f)(x), jvp(grad(f), (x,), (v,))[1]))``
  (x64), ``block_until_ready``, when jax is installed -- timed in a process
  of its own (XLA's thread pool and numba's, in one process on 2 cores,
  slowed the parallel plans 3x), one per case, right before hybridad's rows
  of that case (so that a slow spell of a shared machine, seconds long,
  falls on both), its ``H v`` checked against the plan's.

The other cases of the goals run the ``hvp=True`` plan against ``jax.jit``
only (``--quick`` skips them), each in float64 and float32 (every array
argument and ``v``; the name ends in ``32``): Rosenbrock in float32 (n = 10^2,
10^4, 10^6), ``logreg`` (``mean(logaddexp(0, -y (X w))) + 1e-3 |w|^2``, X 10^5 x 100,
w.r.t. ``w``), ``chain`` (a matmul inside an elementwise chain:
``sum(tanh(A (x cos x))**2) + sum(exp(-x^2) x)``, A 64 x n, n = 10^5) and
``mlp`` (the suite's 1-16-16-1 tanh MLP, ``mean((pred - Y)**2)`` over
B = 10^4 samples, w.r.t. the 16 x 16 ``W2``).

``cold: first hvp`` (not with ``--quick``): seconds from a fresh process's
start to its first ``hvp=True`` call at n = 10^2 and 10^6, hybridad with an
empty disk cache against jax.jit's first call (imports, trace, compile), the
median of 3 processes each.

Every row's ``H v`` is checked against the ``hvp=True`` plan's (1e-12
relative) before timing, then the timing waits for numpy's BLAS threads,
woken by the numpy reference, to sleep (``_harness.BLAS_SPIN_S``).
Interleaved batches of ~20 ms, 5 rounds: median us per call; ``vs jax`` is
the ratio of medians of the same run.

Usage::

    python benchmarks/bench_hvp.py [--quick] [--json FILE] [--cases rosen logreg ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import time_round_robin  # noqa: E402


CASES = r"""
import numpy as np

def make(case, n, lib):  # (f, args, v) of a case; lib: numpy or jax.numpy
    if case.endswith("32"):  # the case in float32: every array argument and v
        f, args, v = make(case[:-2], n, lib)
        return f, [a.astype(np.float32) for a in args], v.astype(np.float32)
    rng = np.random.default_rng(0)
    if case == "rosen":
        def f(x):
            return lib.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
        return f, [rng.uniform(-1.0, 1.0, n)], rng.standard_normal(n)
    if case == "logreg":
        X, y = rng.standard_normal((n, 100)), np.sign(rng.standard_normal(n))
        def f(w, X, y):
            return lib.mean(lib.logaddexp(0.0, -y * (X @ w))) + 1e-3 * lib.sum(w ** 2)
        return f, [rng.standard_normal(100) * 0.1, X, y], rng.standard_normal(100)
    if case == "mlp":  # the suite's 1-16-16-1 tanh MLP (hybridad.bench.workloads.mlp), w.r.t. W2
        W1, b1 = rng.standard_normal((1, 16)), 0.1 * rng.standard_normal(16)
        W2, b2 = rng.standard_normal((16, 16)) / 4, 0.1 * rng.standard_normal(16)
        W3, b3 = rng.standard_normal((16, 1)) / 4, 0.1 * rng.standard_normal(1)
        X = rng.uniform(-1.0, 1.0, (n, 1))
        Y = np.sin(np.pi * X) + 0.1 * rng.standard_normal((n, 1))
        def f(W2, W1, b1, b2, W3, b3, X, Y):
            h2 = lib.tanh(lib.tanh(X @ W1 + b1) @ W2 + b2)
            return lib.mean((h2 @ W3 + b3 - Y) ** 2)
        return f, [W2, W1, b1, b2, W3, b3, X, Y], rng.standard_normal((16, 16))
    A = rng.standard_normal((64, n)) / np.sqrt(n)
    def f(x, A):
        return lib.sum(lib.tanh(A @ (x * lib.cos(x))) ** 2) + lib.sum(lib.exp(-x ** 2) * x)
    return f, [rng.uniform(-1.0, 1.0, n), A], rng.standard_normal(n)
"""
_CASES = {}
exec(CASES, _CASES)  # noqa: S102 -- the same definitions as JAX's process
make = _CASES["make"]


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


JAX = CASES + r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from hybridad.bench.harness import time_round_robin
out = {}
for case, n in json.loads(sys.argv[2]):
    f, args, v = make(case, n, jnp)
    rest = [jnp.asarray(a) for a in args[1:]]
    g = jax.grad(lambda z, *r: f(z, *r))
    fn = jax.jit(lambda z, w, *r: (f(z, *r), g(z, *r),
                                   jax.jvp(lambda u: g(u, *r), (z,), (w,))[1]))
    xj, vj = jnp.asarray(args[0]), jnp.asarray(v)
    hv = np.asarray(fn(xj, vj, *rest)[2])
    (med, lo, hi, _), = time_round_robin([lambda: jax.block_until_ready(fn(xj, vj, *rest))],
                                         5, 20.0)
    out[f"{case} {n}"] = [med, lo, hi, hv.tolist()]
print(json.dumps(out))
"""


def _jax_times(sizes):
    """"case n" -> (median, min, max, H v) of jax.jit for ``sizes`` (pairs of
    case and n), from a process of its own; {} without jax."""
    import subprocess

    try:
        import jax  # noqa: F401
    except ImportError:
        return {}
    root = str(Path(__file__).resolve().parents[1])
    got = subprocess.run([sys.executable, "-c", JAX, root, json.dumps(sizes)],
                         capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    return json.loads(got.stdout.strip().splitlines()[-1])


COLD = CASES + r"""
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import numpy as np
which, n = sys.argv[2], int(sys.argv[3])
if which == "hybridad":
    import hybridad as ha
    f, args, v = make("rosen", n, np)
    plan = ha.compile(f, *args, hvp=True)
    plan.hvp(*args, v=v, out=ha.HvpResult(args[0]))
else:
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    f, args, v = make("rosen", n, jnp)
    g = jax.grad(f)
    fn = jax.jit(lambda z, w: (f(z), g(z), jax.jvp(g, (z,), (w,))[1]))
    jax.block_until_ready(fn(jnp.asarray(args[0]), jnp.asarray(v)))
print(time.perf_counter() - t0)
"""


def _cold_seconds(which, n):
    """Seconds from a fresh process's start (imports included) to its first
    HVP of Rosenbrock at ``n``: hybridad with an empty disk cache, or jax."""
    import os
    import subprocess
    import tempfile

    root = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "HYBRIDAD_CACHE_DIR": cache, "JAX_PLATFORMS": "cpu"}
        got = subprocess.run([sys.executable, "-c", COLD, root, which, str(n)],
                             capture_output=True, text=True, check=True, env=env)
    return float(got.stdout.strip().splitlines()[-1])


def cold_builds(sizes, rows):
    """The first HVP of a fresh process (the median of 3), hybridad against
    jax.jit where jax is installed (the goal: at most 1.0x at n = 10^6)."""
    try:
        import jax  # noqa: F401
        impls = ("hybridad", "jax")
    except ImportError:
        impls = ("hybridad",)
    for n in sizes:
        secs = {w: float(np.median([_cold_seconds(w, n) for _ in range(3)])) for w in impls}
        ratio = secs["hybridad"] / secs["jax"] if "jax" in secs else None
        rows.append({"n": n, "impl": "cold build + first hvp (s)", "s": secs["hybridad"],
                     "jax_s": secs.get("jax"), "vs_jax": ratio})
        vs = f"{ratio:6.2f}x jax ({secs['jax']:.2f} s)" if ratio is not None else ""
        print(f"n={n:<8} {'cold: first hvp':<26} {secs['hybridad']:10.2f} s   {vs}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--cases", nargs="+", default=None,
                        choices=("rosen", "rosen32", "logreg", "chain", "mlp", "cold"),
                        help="only these (logreg, chain, mlp: float64 and float32)")
    opts = parser.parse_args(argv)
    _harness.installed_bytecode()  # (its cold builds run in fresh processes)
    want = set(opts.cases or ("rosen", "rosen32", "logreg", "chain", "mlp", "cold"))
    sizes = [100, 10 ** 4] if opts.quick else [100, 10 ** 4, 10 ** 6]
    sizes = sizes if "rosen" in want else []
    others = [] if opts.quick else \
        [("rosen32", n) for n in (100, 10 ** 4, 10 ** 6) if "rosen32" in want] + \
        [(case + dt, n) for case, n in (("logreg", 10 ** 5), ("chain", 10 ** 5), ("mlp", 10 ** 4))
         if case in want for dt in ("", "32")]
    rows = []
    for n in sizes:
        jax_rows = _jax_times([("rosen", n)])  # (right before ours: one spell of the machine)
        rng = np.random.default_rng(0)
        x, v = rng.uniform(-1.0, 1.0, n), rng.standard_normal(n)
        hp = ha.compile(rosen, x, hvp=True)
        ref = hp.hvp(x, v=v)
        hs = ha.compile(rosen, x, hessian=True)
        lin = ha.compile(rosen, x, hessian=True)
        gp = ha.compile(rosen, x)
        outs = [ha.HvpResult(x) for _ in range(4)]
        alone = np.zeros(n)
        rg = ha.GradientResult(x)
        calls = {
            "hvp=True plan": lambda: hp.hvp(x, v=v, out=outs[0]),
            "Hessian plan hvp(x, v=)": lambda: hs.hvp(x, v=v, out=outs[1]),
            "linearize + hvp(v=)": lambda: lin.hvp(v=v, out=outs[2]),
            "linearize + H v alone": lambda: lin.hvp(v=v, out=alone),
            "ha.hvp(out=)": lambda: ha.hvp(rosen, x, v, out=outs[3]),
            "gradient plan": lambda: gp.gradient(x, out=rg),
        }
        lin.linearize(x)
        for call in calls.values():
            call()
        for hv in [res.hvp for res in outs] + [alone]:
            np.testing.assert_allclose(hv, ref.hvp, rtol=1e-12, atol=1e-12 * n)
        _harness.blas_settled()
        times = dict(zip(calls, time_round_robin(list(calls.values()), 5, 20.0), strict=True))
        jax_us = None
        if f"rosen {n}" in jax_rows:
            med, lo, hi, hv = jax_rows[f"rosen {n}"]
            np.testing.assert_allclose(np.asarray(hv), ref.hvp, rtol=1e-10, atol=1e-10 * n)
            times["jax.jit"], jax_us = (med, lo, hi, None), med
        base = times["hvp=True plan"][0]
        for name, (med, lo, hi, _) in times.items():
            rows.append({"n": n, "impl": name, "us": med, "min": lo, "max": hi,
                         "vs_jax": med / jax_us if jax_us else None, "vs_hvp_plan": med / base})
            vs = f"{med / jax_us:6.2f}x jax" if jax_us else ""
            print(f"n={n:<8} {name:<26} {med:10.1f} us  [{lo:.1f}, {hi:.1f}]  {vs}  "
                  f"{med / base:5.2f}x hvp plan", flush=True)
    for case, n in others:
        jax_rows = _jax_times([(case, n)])
        f, args, v = make(case, n, np)
        plan = ha.compile(f, *args, hvp=True)
        res = ha.HvpResult(args[0])
        ref = ha.hvp(f, args[0], v, *args[1:], backend="numpy")
        plan.hvp(*args, v=v, out=res)
        tol = 1e-3 if case.endswith("32") else 1e-10
        np.testing.assert_allclose(res.hvp, ref.hvp, rtol=tol, atol=tol * np.abs(ref.hvp).max())
        _harness.blas_settled()  # (the numpy reference's BLAS threads asleep again)
        (med, lo, hi, _), = time_round_robin([lambda: plan.hvp(*args, v=v, out=res)], 5, 20.0)
        key = f"{case} {n}"
        jax_us = None
        if key in jax_rows:
            jax_us = jax_rows[key][0]
            np.testing.assert_allclose(np.asarray(jax_rows[key][3]), ref.hvp, rtol=tol,
                                       atol=tol * np.abs(ref.hvp).max())
        rows.append({"n": n, "impl": f"{case}: hvp=True plan", "us": med, "min": lo, "max": hi,
                     "jax_us": jax_us, "vs_jax": med / jax_us if jax_us else None})
        vs = f"{med / jax_us:6.2f}x jax ({jax_us:.1f} us)" if jax_us else ""
        print(f"n={n:<8} {case + ': hvp=True plan':<26} {med:10.1f} us  [{lo:.1f}, {hi:.1f}]  "
              f"{vs}", flush=True)
    if not opts.quick and "cold" in want:
        cold_builds([100, 10 ** 6], rows)
    if opts.json:
        _harness.write_json(opts.json, rows, {"quick": opts.quick,
                                              "numpy": _harness.version("numpy")})


if __name__ == "__main__":
    main()
