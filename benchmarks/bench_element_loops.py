"""Element loops benchmark: loops over array *elements*, as code ported from
C or Fortran writes them (``K[i, j] = ...`` inside ``for i``, ``for j``), whose
first gradient, per-call time and graph size hybridad's plan reaches against
the same function vectorized by hand, and against JAX.

hybridad vectorizes such loops: a run of iterations that read nothing of one
another becomes one batched step (:mod:`hybridad.transforms.rolling`), so the
element loop's plan should come close to the hand-vectorized one's.  JAX, given
the element loop ported as a JAX user would port it (``K = K.at[i, j].set(...)``),
traces and compiles every iteration: its ``loop first_s`` column shows what
that costs.

Each figure is measured in fresh processes: hybridad with an empty disk cache
(a temporary ``HYBRIDAD_CACHE_DIR`` and ``XDG_CACHE_HOME``), so ``first_s`` --
import, trace, build, numba's compile and the first call, from the start of
the process -- is what a new user meets; JAX in its own process (import,
``jit`` trace and XLA compile, the first call).  ``call_us`` is the median of
the calls that follow, in that process.  Each figure is the median of
``--repeat`` such processes (3), a row's processes interleaved (a slow spell
of a shared machine falls on every column).  Ratios are computed from figures
of the same run.

Cases (the functions are written with the module ``np``, so one source serves
hybridad (numpy) and, for the vectorized forms, JAX (``jax.numpy``)):

* ``kernel`` -- a GP-like loss: the kernel matrix filled element by element,
  ``K[i, j] = exp(-0.5 (x[i] - x[j])**2)``, then ``K + 0.1 I`` and
  ``slogdet(K)[1] + x @ solve(K, x)``; n = 30, 60.  Vectorized:
  ``exp(-0.5 (x[:, None] - x[None, :])**2)``;
* ``band`` -- a tridiagonal matrix assembled row by row (``A[i, i] = 2 +
  x[i]**2``, ``A[i, i - 1] = -x[i]``, ``A[i, i + 1] = -1``), then
  ``sum(solve(A, ones))``; n = 100.  Vectorized: three ``np.diag(v, k)``;
* ``time_elements`` -- a time loop (T = 50) whose step writes the state's
  elements one by one, ``u[t, i] = sin(x[i]) (t + 1) 0.01``, then ``x = x +
  u[t]``; ``sum(u**2) + sum(x**3)``; n = 100.  Vectorized: the inner loop as
  ``u[t] = sin(x) (t + 1) 0.01`` (the time loop stays; JAX writes the row
  with ``.at[t].set``);
* ``stencil`` -- a 1-D finite-difference Laplacian element by element,
  ``out[i] = x[i - 1] - 2 x[i] + x[i + 1]``, then ``sum(tanh(out)**2)``;
  n = 1000.  Vectorized: ``x[:-2] - 2 x[1:-1] + x[2:]`` between zero ends;
* ``grid`` -- the 2-D five-point Laplacian in two nested loops over the
  interior of an m x m grid (``x`` of m^2 elements), then ``sum(out**2)``;
  m = 30.  Vectorized: the four shifted slices of ``u[1:-1, 1:-1]``, padded.
  Each step of both reads its neighbours, elements the trace merged with
  the steps before (rolled since the twenty-sixth session).

Every gradient is w.r.t. ``x`` (``ha.compile(f, x0)`` on the default backend,
``plan.gradient(x0, out=ha.GradientResult(x0))``; ``jax.jit(jax.value_and_grad(f))``
in float64).  Each hybridad process checks, after its timings, its gradient:
the element loop's against the vectorized form's plan, the vectorized form's
value against numpy's; a max-norm relative difference over 1e-10 prints an
error row.  The JAX gradients are checked against hybridad's vectorized one
in the same way.

Columns: ``loop`` (the element loop on hybridad: ``first_s``, ``call_us`` and
``nodes``, the plan's graph size ``len(plan.graph.nodes)``), ``vec`` (the
hand-vectorized form on hybridad), ``loop/vec`` (first and per call), ``jax``
(the vectorized form on JAX), ``loop/jax`` (hybridad's element loop per call
over JAX's vectorized), ``jax loop first_s`` (JAX on the ``.at`` element loop,
only for ``--jax-loop`` rows, default kernel n = 30 and band; each process
gets ``--jax-loop-timeout`` seconds (600) and the row reads ``timeout`` past
it, its remaining repeats skipped).

The goals: the element loop's plan within 1.5x the hand-vectorized plan per
call, with a graph of the vectorized form's order of size (not n^2 nodes),
and per call at most 1.0x JAX's vectorized form.  Its first gradient also
traces the n^2 Python steps (about 0.4 ms each: 1.7 s at n = 60), which the
vectorized form does not: reported, not a goal.

    python benchmarks/bench_element_loops.py [--cases kernel band time_elements]
        [--kernel-sizes 30 60] [--band-size 100] [--time-size 100] [--steps 50]
        [--stencil-size 1000] [--grid-size 30]
        [--jax-loop kernel:30 band:100] [--jax-loop-timeout 600] [--repeat N]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a max-norm relative difference of gradients above this prints an error row
TOLERANCE = 1e-10

CASES = r'''
import numpy
rng = numpy.random.default_rng(0)

def data(case, n):
    if case == "time_elements":
        return 0.5 * rng.standard_normal(n)
    if case == "grid":
        return rng.standard_normal(n * n)
    return rng.standard_normal(n)

# -- the element loops, as code ported from C or Fortran writes them -----------------------
# (numpy writes an element in place; JAX, whose arrays are immutable, as a JAX user ports
# the loop: ``.at[...].set``)

def put(np, a, index, value):
    """``a[index] = value`` as the library ``np`` writes it; returns the array."""
    if np.__name__.startswith("jax"):
        return a.at[index].set(value)
    a[index] = value
    return a

def kernel_loop(np, n, T):
    def f(x):
        K = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                K = put(np, K, (i, j), np.exp(-0.5 * (x[i] - x[j]) ** 2))
        K = K + 0.1 * np.eye(n)
        return np.linalg.slogdet(K)[1] + x @ np.linalg.solve(K, x)
    return f

def band_loop(np, n, T):
    def f(x):
        A = np.zeros((n, n))
        for i in range(n):
            A = put(np, A, (i, i), 2.0 + x[i] ** 2)
            if i > 0:
                A = put(np, A, (i, i - 1), -x[i])
            if i < n - 1:
                A = put(np, A, (i, i + 1), -1.0)
        return np.sum(np.linalg.solve(A, np.ones(n)))
    return f

def time_elements_loop(np, n, T):
    def f(x):
        u = np.zeros((T, n))
        for t in range(T):
            for i in range(n):
                u = put(np, u, (t, i), np.sin(x[i]) * (t + 1) * 0.01)
            x = x + u[t]
        return np.sum(u ** 2) + np.sum(x ** 3)
    return f

def stencil_loop(np, n, T):
    def f(x):
        out = np.zeros(n)
        for i in range(1, n - 1):
            out = put(np, out, i, x[i - 1] - 2 * x[i] + x[i + 1])
        return np.sum(np.tanh(out) ** 2)
    return f

def grid_loop(np, n, T):
    def f(x):
        u = x.reshape(n, n)
        out = np.zeros((n, n))
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                out = put(np, out, (i, j), u[i - 1, j] + u[i + 1, j] + u[i, j - 1] +
                          u[i, j + 1] - 4 * u[i, j])
        return np.sum(out ** 2)
    return f

# -- the same, vectorized by hand (numpy or jax.numpy) --------------------------------------

def kernel_vec(np, n, T):
    def f(x):
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
        K = K + 0.1 * np.eye(n)
        return np.linalg.slogdet(K)[1] + x @ np.linalg.solve(K, x)
    return f

def band_vec(np, n, T):
    def f(x):
        A = np.diag(2.0 + x ** 2) + np.diag(-x[1:], -1) + np.diag(-np.ones(n - 1), 1)
        return np.sum(np.linalg.solve(A, np.ones(n)))
    return f

def time_elements_vec(np, n, T):
    def f(x):
        u = np.zeros((T, n))
        for t in range(T):
            u = put(np, u, t, np.sin(x) * (t + 1) * 0.01)
            x = x + u[t]
        return np.sum(u ** 2) + np.sum(x ** 3)
    return f

def stencil_vec(np, n, T):
    def f(x):
        zero = np.zeros(1)
        out = np.concatenate([zero, x[:-2] - 2 * x[1:-1] + x[2:], zero])
        return np.sum(np.tanh(out) ** 2)
    return f

def grid_vec(np, n, T):
    def f(x):
        u = x.reshape(n, n)
        inner = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        return np.sum(np.pad(inner, 1) ** 2)
    return f

def make(case, form, np, n, T):
    return globals()[f"{case}_{form}"](np, n, T)

def timed(call):  # the median of the calls after the first, in microseconds
    import time
    times = []
    while len(times) < 200 and (len(times) < 5 or sum(times) < 1.0):
        s = time.perf_counter(); call(); times.append(time.perf_counter() - s)
    return float(numpy.median(times) * 1e6)

def rel_err(got, want):
    got, want = numpy.asarray(got, dtype=float), numpy.asarray(want, dtype=float)
    scale = max(float(numpy.max(numpy.abs(want), initial=0.0)), numpy.finfo(float).tiny)
    return float(numpy.max(numpy.abs(got - want), initial=0.0)) / scale
'''

HYBRIDAD = CASES + r'''
import sys, time, json
t0 = time.perf_counter()
import numpy as np
import hybridad as ha
case, n, T, form = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
x0 = data(case, n)
f = make(case, form, np, n, T)
plan = ha.compile(f, x0)
out = ha.GradientResult(x0)
call = lambda: plan.gradient(x0, out=out)
t1 = time.perf_counter()
call()
first = time.perf_counter() - t0
build = t1 - t0
call_us = timed(call)
g, value = out.gradient.copy(), float(out.value)
graph = getattr(plan, "graph", None)
# the checks, after the timings: the loop against the vectorized form's plan
if form == "loop":
    ref = ha.compile(make(case, "vec", np, n, T), x0)
    want = ha.GradientResult(x0)
    ref.gradient(x0, out=want)
    grad_err, value_err = rel_err(g, want.gradient), rel_err(value, want.value)
else:
    grad_err, value_err = None, rel_err(value, f(x0))
print(json.dumps({"first_s": first, "build_s": build, "call_us": call_us,
                  "nodes": len(graph.nodes) if graph is not None else None,
                  "grad_err": grad_err, "value_err": value_err,
                  "value": value, "gradient": g.tolist()}))
'''

JAX = CASES + r'''
import sys, time, json
t0 = time.perf_counter()
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
case, n, T, form = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
x0 = data(case, n)
fn = jax.jit(jax.value_and_grad(make(case, form, jnp, n, T)))
call = lambda: jax.block_until_ready(fn(x0))
value, g = call()
first = time.perf_counter() - t0
call_us = timed(call)
print(json.dumps({"first_s": first, "call_us": call_us, "value": float(value),
                  "gradient": numpy.asarray(g).tolist()}))
'''


def _run(code, case, n, steps, form, env, timeout=1800):
    try:
        out = subprocess.run([sys.executable, "-c", code, case, str(n), str(steps), form],
                             capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timeout", "timeout_s": timeout}
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _hybridad(case, n, steps, form):
    """One fresh hybridad process, its disk cache empty."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HYBRIDAD_CACHE_DIR=cache, XDG_CACHE_HOME=cache,
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return _run(HYBRIDAD, case, n, steps, form, env)


def _jax(case, n, steps, form, timeout=1800):
    """One fresh JAX process (CPU, float64)."""
    return _run(JAX, case, n, steps, form, dict(os.environ, JAX_PLATFORMS="cpu"), timeout)


def _median(runs):
    """One cell of a row (its fresh processes): each figure's median, the first
    process's gradient; an error if any failed; {} for none."""
    if not runs:
        return {}
    failed = [r for r in runs if "error" in r]
    if failed:
        return dict(failed[0], runs=len(runs))
    out = dict(runs[0], runs=len(runs))
    for key in ("first_s", "build_s", "call_us"):
        if key in out:
            out[key] = float(statistics.median([r[key] for r in runs]))
    for key in ("grad_err", "value_err"):  # the worst of the processes
        if out.get(key) is not None:
            out[key] = max(r[key] for r in runs)
    return out


def _rel_err(got, want):
    import numpy as np
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    scale = max(float(np.max(np.abs(want), initial=0.0)), np.finfo(float).tiny)
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


def _fmt(cell, key, spec):
    if not cell:
        return "-"
    if "error" in cell:
        return "timeout" if cell["error"] == "timeout" else "error"
    return "-" if cell.get(key) is None else format(cell[key], spec)


def _ratio(a, b, key):
    if not a or not b or "error" in a or "error" in b or not b.get(key):
        return "-"
    return f"{a[key] / b[key]:.2f}"


def _checks(row):
    """The row's error lines: failed processes and gradients that differ."""
    errors = []
    for name in ("loop", "vec", "jax", "jax_loop"):
        cell = row[name]
        if cell and "error" in cell and cell["error"] != "timeout":
            errors.append(f"{name} failed: {cell['error']}")
    loop, vec = row["loop"], row["vec"]
    if loop and "error" not in loop and loop["grad_err"] > TOLERANCE:
        errors.append(f"loop gradient differs from the vectorized plan's: "
                      f"{loop['grad_err']:.2e} (> {TOLERANCE:g})")
    if vec and "error" not in vec and vec["value_err"] > TOLERANCE:
        errors.append(f"vec value differs from numpy's: {vec['value_err']:.2e}")
    for name in ("jax", "jax_loop"):
        cell = row[name]
        if cell and "error" not in cell and vec and "error" not in vec:
            cell["grad_err"] = _rel_err(cell["gradient"], vec["gradient"])
            if cell["grad_err"] > TOLERANCE:
                errors.append(f"{name} gradient differs from hybridad's vectorized: "
                              f"{cell['grad_err']:.2e} (> {TOLERANCE:g})")
    for name in ("loop", "vec", "jax", "jax_loop"):  # (not kept in the JSON)
        row[name].pop("gradient", None)
    return errors


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+",
                        default=["kernel", "band", "time_elements", "stencil", "grid"],
                        choices=["kernel", "band", "time_elements", "stencil", "grid"])
    parser.add_argument("--kernel-sizes", nargs="+", type=int, default=[30, 60])
    parser.add_argument("--band-size", type=int, default=100)
    parser.add_argument("--time-size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50, help="time_elements' T")
    parser.add_argument("--stencil-size", type=int, default=1000)
    parser.add_argument("--grid-size", type=int, default=30, help="the grid's side m")
    parser.add_argument("--jax-loop", nargs="*", default=["kernel:30", "band:100"],
                        help="CASE:N rows that also run JAX on the .at element loop "
                             "(none: no such rows)")
    parser.add_argument("--jax-loop-timeout", type=float, default=600.0,
                        help="seconds per JAX element-loop process ('timeout' past it)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per cell (the median of each figure)")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness
    _harness.installed_bytecode()  # (what an install compiles)
    print(f"hybridad {_harness.version('hybridad')} from {ROOT}, repeat {opts.repeat}")
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    sizes = {"kernel": opts.kernel_sizes, "band": [opts.band_size],
             "time_elements": [opts.time_size], "stencil": [opts.stencil_size],
             "grid": [opts.grid_size]}
    jax_loop = {tuple(spec.split(":")) for spec in opts.jax_loop}
    rows = []
    header = (f"{'case':<14} {'n':>4} | {'loop first_s':>12} {'call_us':>9} {'nodes':>6} | "
              f"{'vec first_s':>11} {'call_us':>9} | {'loop/vec 1st':>12} {'call':>5} | "
              f"{'jax first_s':>11} {'call_us':>9} | {'loop/jax call':>13} | "
              f"{'jax loop first_s':>16}")
    print(header)
    print("-" * len(header))
    for case in opts.cases:
        for n in sizes[case]:
            runs = {"loop": [], "vec": [], "jax": [], "jax_loop": []}
            with_loop = have_jax and (case, str(n)) in jax_loop
            for _ in range(opts.repeat):  # (interleaved: a slow spell falls on every column)
                if have_jax:
                    runs["jax"].append(_jax(case, n, opts.steps, "vec"))
                if with_loop and not any(r.get("error") == "timeout" for r in runs["jax_loop"]):
                    runs["jax_loop"].append(_jax(case, n, opts.steps, "loop",
                                                 opts.jax_loop_timeout))
                runs["loop"].append(_hybridad(case, n, opts.steps, "loop"))
                runs["vec"].append(_hybridad(case, n, opts.steps, "vec"))
            row = {"case": case, "n": n, "T": opts.steps if case == "time_elements" else None}
            row.update({name: _median(cells) for name, cells in runs.items()})
            row["errors"] = _checks(row)
            rows.append(row)
            loop, vec, jx, jl = row["loop"], row["vec"], row["jax"], row["jax_loop"]
            print(f"{case:<14} {n:>4} | {_fmt(loop, 'first_s', '.2f'):>12} "
                  f"{_fmt(loop, 'call_us', '.1f'):>9} {_fmt(loop, 'nodes', 'd'):>6} | "
                  f"{_fmt(vec, 'first_s', '.2f'):>11} {_fmt(vec, 'call_us', '.1f'):>9} | "
                  f"{_ratio(loop, vec, 'first_s'):>12} {_ratio(loop, vec, 'call_us'):>5} | "
                  f"{_fmt(jx, 'first_s', '.2f'):>11} {_fmt(jx, 'call_us', '.1f'):>9} | "
                  f"{_ratio(loop, jx, 'call_us'):>13} | {_fmt(jl, 'first_s', '.2f'):>16}",
                  flush=True)
            for error in row["errors"]:
                print(f"{case:<14} {n:>4} | ERROR {error}", flush=True)
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
