"""Loops benchmark: a time-stepping model's first gradient, build and per-call
time against JAX's ``lax.fori_loop`` / ``lax.scan``, at trip counts 10^2 to 10^4.

Each row is measured in fresh processes: hybridad with an empty disk cache
(so ``first_s`` -- import, trace, build, numba's compile and the first call --
is what a new user meets) and JAX (import, ``jit`` trace and XLA compile, the
first call).  ``call_us`` is the median of the calls that follow, in that
process.  Each figure is the median of ``--repeat`` such processes (3), the
row's JAX and hybridad processes interleaved.  Ratios are hybridad over JAX,
measured in the same run.

Models:

* ``euler`` -- explicit Euler, ``x = x + dt * tanh(W @ x)`` for T steps
  (``hybridad.fori_loop``), then ``sum(x**2)``; gradient w.r.t. ``x0``, n = 50;
* ``euler_wide`` -- the same at n = 1000 (not in the default list): one
  iteration's body is a 1000 x 1000 matrix-vector product, large enough to
  run on the threads (``threshold.BODY_PARALLEL_MIN``);
* ``rnn`` -- an RNN over a sequence, ``h = tanh(W @ h + U @ x_t)``
  (``hybridad.scan`` over the rows ``x_t``), then ``sum(h)``; gradient w.r.t.
  ``W``; hidden 32, input 8;
* ``heat`` -- a 1-D nonlinear heat equation on 64 points stepped in place as
  numpy code writes it (``u[1:-1] += r (u[2:] - 2 u[1:-1] + u[:-2]) - ...``)
  with every state recorded into a row of an array made before the loop
  (``out[k] = u``), then ``sum(out**2) / T + sum(u**2)``; gradient w.r.t.
  ``u0``.  Its explicit form (and JAX's) is the same step written
  functionally in ``scan``, the states its outputs;
* ``heat_wide`` -- the same on 10^5 points (not in the default list): a
  stencil step whose body runs on the threads, its state 800 kB;
* ``rk4_hessian`` -- the dense Hessian (``hybridad.hessian``) of
  ``sum(x_T**2)`` after T steps of classic RK4 on ``x' = tanh(W @ x) - 0.1 x``,
  n = 6, w.r.t. ``x0``;
* ``nested`` -- a loop inside a loop's body: T outer steps, each 5 inner
  Euler steps ``y = y + 0.1 tanh(W @ y)`` then ``x = 0.9 y`` (``fori_loop`` in
  ``fori_loop``; the python form: two Python ``for`` loops), then
  ``sum(x**2)``; gradient w.r.t. ``x0``, n = 20 (not in the default list).

Each model runs in two forms: ``explicit`` (``hybridad.fori_loop`` /
``hybridad.scan``) and ``python`` (the same step in a plain Python ``for``
loop, which the trace unrolls and the plan rolls back into a loop:
:mod:`hybridad.transforms.rolling`); JAX runs the explicit form.

The goals: first gradient at most 1.0x JAX's at T = 10^4; per call at most
1.0x; build at T = 10^4 within 1.5x that at T = 10^2 (``build_growth``); peak
memory at most the stored carries (T x state, float64) plus 10 %, and within
``memory_budget`` when one is given.  ``mem/stored``: the plan's workspace
(its arena and what its loops hold beside it, plus what a call allocates,
by tracemalloc: nothing, and the arrays a first call leaves allocated -- the
loop runners' tables -- on a second plan of the same loops, once the first
compiled the bodies) over T x state; ``jax mem/stored``: XLA's account
of the compiled program's temporaries and outputs
(``compiled.memory_analysis()``) over the same.  A Hessian's forward over
reverse carries, besides the state, its tangents for the seeds of a chunk:
its rows also print ``mem/carried``, the workspace over T x state x (1 +
the plan's chunk).  ``--budget F`` builds hybridad's plans with
``memory_budget = F x`` the stored carries.

    python benchmarks/bench_loops.py [--models euler euler_wide rnn heat heat_wide rk4_hessian]
        [--steps 100 1000 10000] [--forms explicit python] [--budget F] [--repeat N]
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

MODELS = r'''
import numpy as np
rng = np.random.default_rng(0)

def data(model):
    if model in ("euler", "wide"):
        n = 50 if model == "euler" else 1000
        return [rng.standard_normal(n), rng.standard_normal((n, n)) / np.sqrt(n)]
    if model == "rnn":
        return [np.zeros(32), rng.standard_normal((32, 32)) / np.sqrt(32),
                rng.standard_normal((32, 8)) / np.sqrt(8), None]
    if model in ("heat", "heatw"):
        n = 64 if model == "heat" else 100000
        return [np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * rng.standard_normal(n)]
    if model == "nested":
        return [rng.standard_normal(20), 0.3 * rng.standard_normal((20, 20))]
    n = 6
    return [rng.standard_normal(n), rng.standard_normal((n, n)) / np.sqrt(n)]

def py_fori(lower, upper, body, init):  # the loop as users write it: rolled by the plan
    for i in range(lower, upper):
        init = body(i, init)
    return init

def py_scan(f, init, xs):
    for x in xs:
        init, _ = f(init, x)
    return init, None

def euler(lib, T, fori):
    def f(x, W):
        return lib.sum(fori(0, T, lambda i, x: x + 0.01 * lib.tanh(W @ x), x) ** 2)
    return f

def rnn(lib, T, scan):
    def f(h, W, U, xs):
        h, _ = scan(lambda h, x: (lib.tanh(W @ h + U @ x), None), h, xs)
        return lib.sum(h)
    return f

def heat(lib, T, scan):  # scan None: the Python loop, in place, as numpy code writes it
    r = 0.2
    if scan is None:
        def f(u):
            u = u.copy()
            out = np.zeros((T, u.shape[0]))
            for k in range(T):
                u[1:-1] += r * (u[2:] - 2 * u[1:-1] + u[:-2]) - 0.01 * u[1:-1] ** 3
                out[k] = u
            return lib.sum(out ** 2) / T + lib.sum(u ** 2)
        return f
    def body(u, _):
        inner = u[1:-1] + r * (u[2:] - 2 * u[1:-1] + u[:-2]) - 0.01 * u[1:-1] ** 3
        u = lib.concatenate([u[:1], inner, u[-1:]])
        return u, u
    def f(u):
        u, us = scan(body, u, None, length=T)
        return lib.sum(us ** 2) / T + lib.sum(u ** 2)
    return f

def nested(lib, T, fori):
    def f(x, W):
        def outer(i, x):
            return fori(0, 5, lambda j, y: y + 0.1 * lib.tanh(W @ y), x) * 0.9
        return lib.sum(fori(0, T, outer, x) ** 2)
    return f

def rk4(lib, T, fori):
    def rhs(x, W):
        return lib.tanh(W @ x) - 0.1 * x
    def f(x, W):
        def step(i, x):
            dt = 0.05
            k1 = rhs(x, W)
            k2 = rhs(x + 0.5 * dt * k1, W)
            k3 = rhs(x + 0.5 * dt * k2, W)
            k4 = rhs(x + dt * k3, W)
            return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return lib.sum(fori(0, T, step, x) ** 2)
    return f
'''

HYBRIDAD = MODELS + r'''
import sys, time, json
t0 = time.perf_counter()
import hybridad as ha
model, T, form = sys.argv[1], int(sys.argv[2]), sys.argv[3]
args = data(model)
if model == "rnn":
    args[3] = rng.standard_normal((T, 8))
budget = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
state = {"euler": 50, "wide": 1000, "rnn": 32, "heat": 64, "heatw": 100000,
         "nested": 20}.get(model, 6)
stored = T * state * 8  # the carries of every step, float64
opts = {"memory_budget": int(budget * stored)} if budget else {}
fori, scan = (ha.fori_loop, ha.scan) if form == "explicit" else (py_fori, py_scan)
def model_f():
    """``(f, argnums, kind)`` of the model (a new function object each call)."""
    if model in ("euler", "wide"):
        return euler(np, T, fori), 0, "gradient"
    if model == "rnn":
        return rnn(np, T, scan), 1, "gradient"
    if model in ("heat", "heatw"):
        return heat(np, T, ha.scan if form == "explicit" else None), 0, "gradient"
    if model == "nested":
        return nested(np, T, fori), 0, "gradient"
    return rk4(np, T, fori), 0, "hessian"

def planned(f):
    """``(plan, call)``: the model's plan of ``f`` and a call of it into its result."""
    if kind == "gradient":
        plan = ha.compile(f, *args, argnums=argnums, **opts)
        out = ha.GradientResult(args[argnums])
        return plan, lambda: plan.gradient(*args, out=out)
    plan = ha.compile(f, *args, hessian=True, **opts)
    out = ha.HessianResult(args[0])
    return plan, lambda: plan.hessian(*args, out=out)

f, argnums, kind = model_f()
plan, call = planned(f)
t1 = time.perf_counter()
call()
first = time.perf_counter() - t0
build = t1 - t0
times = []
for _ in range(max(3, min(50, int(2e4 / T)))):
    s = time.perf_counter(); call(); times.append(time.perf_counter() - s)
import tracemalloc
tracemalloc.start()
call()
per_call = tracemalloc.get_traced_memory()[1]  # what a call allocates (0: nothing)
tracemalloc.stop()
# what a plan's first call leaves allocated beside its memory plan (its loop
# runners' tables): a second plan of the same loops, whose bodies are compiled
_, call2 = planned(model_f()[0])
tracemalloc.start()
arrays = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]  # (numpy's data)
before = tracemalloc.take_snapshot().filter_traces(arrays)
call2()
after = tracemalloc.take_snapshot().filter_traces(arrays)
kept = sum(d.size_diff for d in after.compare_to(before, "filename"))
tracemalloc.stop()
memory = getattr(plan, "memory", None)
chunk = getattr(plan, "chunk", None)
print(json.dumps({"first_s": first, "build_s": build, "chunk": chunk,
                  "call_us": float(np.median(times) * 1e6),
                  "workspace_b": memory.total_bytes + per_call + kept
                  if memory is not None else None, "kept_b": kept,
                  "stored_b": stored, "budget_b": opts.get("memory_budget"),
                  "nodes": len(getattr(plan, "graph", None).nodes)
                  if getattr(plan, "graph", None) is not None else None}))
'''

JAX = MODELS + r'''
import sys, time, json
t0 = time.perf_counter()
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
model, T = sys.argv[1], int(sys.argv[2])
args = data(model)
if model == "rnn":
    args[3] = rng.standard_normal((T, 8))
if model in ("euler", "wide"):
    fn = jax.jit(jax.value_and_grad(euler(jnp, T, jax.lax.fori_loop)))
elif model == "rnn":
    fn = jax.jit(jax.value_and_grad(rnn(jnp, T, jax.lax.scan), argnums=1))
elif model in ("heat", "heatw"):
    fn = jax.jit(jax.value_and_grad(heat(jnp, T, jax.lax.scan)))
elif model == "nested":
    fn = jax.jit(jax.value_and_grad(nested(jnp, T, jax.lax.fori_loop)))
else:
    fn = jax.jit(jax.hessian(rk4(jnp, T, jax.lax.fori_loop)))
call = lambda: jax.block_until_ready(fn(*args))
call()
try:  # XLA's own account of the compiled program's buffers
    mem = fn.lower(*args).compile().memory_analysis()
    temp_b = int(mem.temp_size_in_bytes + mem.output_size_in_bytes)
except Exception:  # (a backend without it)
    temp_b = None
first = time.perf_counter() - t0
times = []
for _ in range(max(3, min(50, int(2e4 / T)))):
    s = time.perf_counter(); call(); times.append(time.perf_counter() - s)
print(json.dumps({"first_s": first, "call_us": float(np.median(times) * 1e6),
                  "workspace_b": temp_b}))
'''


#: a model's name in the scripts above
_SCRIPT_NAME = {"euler_wide": "wide", "heat_wide": "heatw", "rk4_hessian": "rk4"}


def _run(code, model, steps, env, form="explicit", budget=0.0):
    out = subprocess.run([sys.executable, "-c", code, model, str(steps), form, str(budget)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs):
    """One row of ``runs`` (the same row's fresh processes): each figure's
    median; an error if any failed; {} for none."""
    if not runs:
        return {}
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    out = dict(runs[0])
    for key in ("first_s", "build_s", "call_us"):
        if key in out:
            out[key] = float(statistics.median([r[key] for r in runs]))
    return out


def _carried(ha):
    """A Hessian row's workspace over the carries and their chunk's tangents."""
    k = ha.get("chunk")
    if not k:
        return ""
    return f"  mem/carried {ha['workspace_b'] / (ha['stored_b'] * (1 + k)):.2f} (chunk {k})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["euler", "rnn", "heat", "rk4_hessian"],
                        choices=["euler", "euler_wide", "rnn", "heat", "heat_wide", "rk4_hessian",
                                 "nested"])
    parser.add_argument("--steps", nargs="+", type=int, default=[100, 1000, 10000])
    parser.add_argument("--forms", nargs="+", default=["explicit", "python"],
                        choices=["explicit", "python"])
    parser.add_argument("--budget", type=float, default=0.0,
                        help="memory_budget as a fraction of the stored carries (T x state)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per row (the median of each figure)")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness
    _harness.installed_bytecode()  # (what an install compiles)
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    rows = []
    print(f"{'model':<12} {'form':<8} {'T':>6} {'first_s':>8} {'jax_first':>9} {'ratio':>6} "
          f"{'build_s':>8} {'call_us':>10} {'jax_us':>10} {'ratio':>6} {'mem/stored':>10} "
          f"{'jax mem/stored':>14}")
    for model in opts.models:
        for steps in opts.steps:
            jxs, has = [], {form: [] for form in opts.forms}
            for _ in range(opts.repeat):  # (interleaved: a slow spell falls on every column)
                if have_jax:
                    jxs.append(_run(JAX, _SCRIPT_NAME.get(model, model), steps,
                                    dict(os.environ, JAX_PLATFORMS="cpu")))
                for form in opts.forms:
                    with tempfile.TemporaryDirectory() as cache:
                        env = dict(os.environ, HYBRIDAD_CACHE_DIR=cache,
                                   PYTHONPATH=str(ROOT) + os.pathsep +
                                   os.environ.get("PYTHONPATH", ""))
                        has[form].append(_run(HYBRIDAD, _SCRIPT_NAME.get(model, model), steps,
                                              env, form, opts.budget))
            jx = _median(jxs)
            for form in opts.forms:
                ha = _median(has[form])
                row = {"model": model, "form": form, "T": steps, "hybridad": ha, "jax": jx}
                rows.append(row)
                if "error" in ha:
                    print(f"{model:<12} {form:<8} {steps:>6} hybridad failed: {ha['error']}")
                    continue

                def ratio(a, b):
                    return f"{a / b:6.2f}" if b else "   n/a"
                print(f"{model:<12} {form:<8} {steps:>6} {ha['first_s']:8.2f} "
                      f"{jx.get('first_s', 0):9.2f} {ratio(ha['first_s'], jx.get('first_s'))} "
                      f"{ha['build_s']:8.2f} {ha['call_us']:10.1f} {jx.get('call_us', 0):10.1f} "
                      f"{ratio(ha['call_us'], jx.get('call_us'))} "
                      f"{ratio(ha['workspace_b'] or 0, ha['stored_b']):>10} "
                      f"{ratio(jx.get('workspace_b') or 0, ha['stored_b']):>14}" +
                      _carried(ha), flush=True)
    for model in opts.models:
        for form in opts.forms:
            b = {r["T"]: r["hybridad"].get("build_s") for r in rows
                 if r["model"] == model and r["form"] == form}
            lo, hi = min(b), max(b)
            if b.get(lo) and b.get(hi):
                print(f"{model} ({form}): build at T={hi} over T={lo}: {b[hi] / b[lo]:.2f}x")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
