"""Start-up benchmark: the first value+gradient in a fresh process, hybridad against JAX.

Every run is a new Python process (``python -c CHILD``) that imports numpy and
the library, builds the data, the plan (hybridad: ``ha.compile``; JAX:
``jax.jit(jax.value_and_grad(f, argnums))``) and makes ONE value+gradient
call.  The child prints a line the moment the first result is there; the
parent timestamps that line and the process's exit:

* ``first_s`` -- from the parent's spawn of the process (interpreter start-up
  included) to the first result: what a user waits for (parent-measured);
* ``process_s`` -- the whole process (exit included; a tiered child waits
  for its compile with ``plan.wait()`` after its first result, to report
  ``compiled_s``);

and the child reports its own breakdown, from its first line (before
``import numpy``): ``import_s`` (numpy and the library), ``data_s`` (the
workload's arrays), ``plan_s`` (hybridad: trace, lowering, memory plan,
the reference plan and the start of the background compile, or the whole
numba compile when tiering is off; JAX: ``jax.jit`` only), ``call_s`` (the
first call; JAX: tracing, XLA compilation and the run, to
``block_until_ready``), ``child_first_s`` (their sum: first line to first
result), ``tier`` (hybridad: which program answered the first call,
``numpy`` = the reference program, ``numba`` = compiled code) and
``compiled_s`` (tiered hybridad: first line to the compiled program in place,
``plan.wait()``, measured after the first result).

Implementations:

* ``ha cold`` -- hybridad as a user gets it (the default: the plan compiles
  its numba program before it answers), an empty ``HYBRIDAD_CACHE_DIR`` (a
  new temporary directory);
* ``ha warm`` -- the same directory again, right after the ``ha cold`` run
  that filled it;
* ``ha tiered`` -- ``HYBRIDAD_TIERED=1`` (tiers on request) and another empty
  cache: the numpy reference program answers the first call while numba
  compiles in a background thread;
* ``jax`` -- x64, no persistent compilation cache; skipped when jax is not
  importable.

Workloads: ``mlp16`` (tanh MLP 1-16-16-1, mean squared error, batch 1000),
``logreg`` (``mean(logaddexp(0, -y (X @ w))) + 1e-3 |w|^2``, X 500 x 100) and
the ``python -m hybridad bench`` workloads at a small size each
(``hybridad.bench.workloads``; re-declared here so that the JAX children do
not import hybridad -- the parent checks the copies against the originals).

Byte code: the parent first byte-compiles the package (``compileall``, into
its ``__pycache__``), the state ``pip install`` leaves a package in (pip
compiles at install, as it did numpy's and JAX's).  Without it a machine that
sets ``PYTHONDONTWRITEBYTECODE`` (this project's does) re-compiles the
library's ~90 modules from source in every child: ~0.12 s of ``import_s``
that no installed copy pays.  ``meta["bytecode"]`` records it.

Medians of ``--repeats`` fresh processes per (workload, implementation).
Goals: ``first_s`` of hybridad at most 1.0x JAX's with an empty
cache and at most 0.5x with a warm one.

    python benchmarks/bench_startup.py [--repeats 3] [--json FILE]
        [--workloads mlp16 logreg ...] [--impls "ha cold" "ha warm" ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the goals: hybridad's first_s over JAX's
GOAL_COLD, GOAL_WARM = 1.0, 0.5

#: the workloads' data and objectives; ``xp`` is numpy or jax.numpy.  Executed
#: by the child (after its imports) and by the parent's check (_check_copies).
WORKLOADS_SRC = r'''
def build(name, xp, np):
    """(f, args, argnums) of workload ``name``; data drawn with numpy, seed 0."""
    rng = np.random.default_rng(0)
    if name == "mlp16":  # MLP 1-16-16-1, batch 1000
        X = rng.uniform(-1, 1, (1000, 1))
        Y = np.sin(np.pi * X)
        def f(W1, b1, W2, b2, W3, b3, X, Y):
            h = xp.tanh(X @ W1 + b1)
            h = xp.tanh(h @ W2 + b2)
            return xp.mean((h @ W3 + b3 - Y) ** 2)
        args = (rng.standard_normal((1, 16)), np.zeros(16), rng.standard_normal((16, 16)) / 4,
                np.zeros(16), rng.standard_normal((16, 1)) / 4, np.zeros(1), X, Y)
        return f, args, tuple(range(6))
    if name == "logreg":  # logistic regression, X 500 x 100
        X = rng.standard_normal((500, 100))
        y = np.sign(rng.standard_normal(500))
        def f(w, X, y):
            return xp.mean(xp.logaddexp(0.0, -y * (X @ w))) + 1e-3 * xp.sum(w * w)
        return f, (0.1 * rng.standard_normal(100), X, y), 0
    # the suite's workloads (hybridad.bench.workloads), the same data recipes
    if name == "expsum":
        def f(x):
            r = xp.sum(xp.exp(-3 * (x + 1)))
            return r**2 + r**3 + r**4 / 4
        return f, (rng.uniform(0.0, 1.0, SIZES[name]),), 0
    if name == "quadform":
        d = SIZES[name]
        x = rng.standard_normal(d)
        A = [rng.standard_normal((d, d)) for _ in range(10)]
        def f(x, A):
            return sum(x @ (Ak @ x) for Ak in A)
        return f, (x, A), 0
    if name == "chain":
        def f(x0):
            xs = [x0]
            for _ in range(20):
                xs.append(sum(xs[1:], xs[0]))
            return xp.sum(xp.tanh(xs[-1]))
        return f, (rng.uniform(-1.0, 1.0, SIZES[name]) * 2.0**-19,), 0
    if name == "mlp":
        params = []
        for fan_in, fan_out in ((1, 16), (16, 16), (16, 1)):
            params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in),
                       0.1 * rng.standard_normal(fan_out)]
        B = SIZES[name]
        X = rng.uniform(-1.0, 1.0, (B, 1))
        Y = np.sin(np.pi * X[:, :1]) + 0.1 * rng.standard_normal((B, 1))
        def f(W1, b1, W2, b2, W3, b3, X, Y):
            h1 = xp.tanh(X @ W1 + b1)
            h2 = xp.tanh(h1 @ W2 + b2)
            return xp.mean((h2 @ W3 + b3 - Y) ** 2)
        return f, (*params, X, Y), tuple(range(6))
    raise ValueError(name)
'''

#: sizes of the suite's workloads (its smallest quick sizes; chain: 10^3)
SIZES = {"expsum": 100, "quadform": 100, "chain": 1000, "mlp": 100}
WORKLOADS = {
    "mlp16": "MLP 1-16-16-1 B=1000",
    "logreg": "logreg 500x100",
    "expsum": f"bench expsum n={SIZES['expsum']}",
    "quadform": f"bench quadform K=10 D={SIZES['quadform']}",
    "chain": f"bench chain n={SIZES['chain']}",
    "mlp": f"bench mlp B={SIZES['mlp']}",
}
IMPLS = ("ha cold", "ha warm", "ha tiered", "jax")

CHILD = r'''
import time
T0 = time.perf_counter()
import json
import sys
NAME, IMPL = sys.argv[1], sys.argv[2]
SIZES = json.loads(sys.argv[3])
import numpy as np
t_numpy = time.perf_counter()
if IMPL == "jax":
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as xp
else:
    import hybridad as ha
    xp = np
t_import = time.perf_counter()
exec(WORKLOADS_SRC)
f, args, argnums = build(NAME, xp, np)
t_data = time.perf_counter()
if IMPL == "jax":
    fn = jax.jit(jax.value_and_grad(f, argnums=argnums))
    t_plan = time.perf_counter()
    value, grad = jax.block_until_ready(fn(*args))
else:
    plan = ha.compile(f, *args, argnums=argnums)
    t_plan = time.perf_counter()
    res = plan.gradient(*args)
    value = res.value
t_first = time.perf_counter()
print("FIRST", flush=True)  # the parent timestamps this line
out = {"numpy_s": t_numpy - T0, "import_s": t_import - T0, "data_s": t_data - t_import,
       "plan_s": t_plan - t_data, "call_s": t_first - t_plan, "child_first_s": t_first - T0,
       "value": float(value)}
if IMPL != "jax":
    out["tier"] = plan.tier
    compiled = plan.wait()  # (a tiered plan: its compile, after the first result)
    out["compiled_s"] = time.perf_counter() - T0 if compiled else None
    out["tier_calls"] = plan._tier_calls
print(json.dumps(out), flush=True)
'''


def child_env(impl, cache_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE"):
        env.pop(k, None)
    if impl != "jax":
        env["HYBRIDAD_CACHE_DIR"] = str(cache_dir)
        env.pop("HYBRIDAD_TIERED", None)
        if impl == "ha tiered":
            env["HYBRIDAD_TIERED"] = "1"
    return env


def run_child(name, impl, cache_dir=None):
    """One fresh process: the child's figures plus ``first_s`` and ``process_s``."""
    src = CHILD.replace("exec(WORKLOADS_SRC)", WORKLOADS_SRC)
    with tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", src, name, impl, json.dumps(SIZES)],
                                env=child_env(impl, cache_dir), stdout=subprocess.PIPE,
                                stderr=err, text=True, cwd=ROOT)
        line = proc.stdout.readline()
        first = time.perf_counter() - t
        rest = proc.stdout.read()
        rc = proc.wait()
        process = time.perf_counter() - t
        if rc != 0 or line.strip() != "FIRST":
            err.seek(0)
            raise RuntimeError(f"{name} / {impl}: child failed (rc {rc}):\n{err.read()[-3000:]}")
    row = json.loads(rest.strip().splitlines()[-1])
    return {"workload": name, "impl": impl, "first_s": first, "process_s": process, **row}


def have_jax():
    return subprocess.run([sys.executable, "-c", "import jax"], capture_output=True).returncode == 0


def _check_copies(names):
    """The re-declared suite workloads equal hybridad.bench.workloads' (value at the same data)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from hybridad.bench import workloads as wl

    scope = {"SIZES": SIZES}
    exec(WORKLOADS_SRC, scope)
    for name in names:
        if name not in SIZES:
            continue
        f, args, argnums = scope["build"](name, np, np)
        prob = wl.make_problem(name, SIZES[name])
        mine, theirs = f(*args), prob.f(*prob.args)
        if prob.diff_argnums != (argnums if isinstance(argnums, tuple) else (argnums,)) or \
                not np.isclose(mine, theirs, rtol=1e-12):
            raise AssertionError(f"{name}: the copy differs from hybridad.bench.workloads "
                                 f"({mine!r} vs {theirs!r})")


def _median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(raw, names, impls):
    """Medians per (workload, impl), in table order."""
    out = []
    for name in names:
        for impl in impls:
            rows = [r for r in raw if r["workload"] == name and r["impl"] == impl]
            if not rows:
                continue
            s = {"workload": name, "impl": impl, "runs": len(rows)}
            for key in ("first_s", "process_s", "numpy_s", "import_s", "data_s", "plan_s",
                        "call_s", "child_first_s", "compiled_s"):
                s[key] = _median(rows, key)
            tiers = sorted({r["tier"] for r in rows if "tier" in r})
            s["tier"] = "/".join(tiers) if tiers else "-"
            out.append(s)
    return out


def ratios(summary, names):
    """Per workload: hybridad over JAX, first_s and process_s, cold and warm."""
    by = {(s["workload"], s["impl"]): s for s in summary}
    out = []
    for name in names:
        jx = by.get((name, "jax"))
        if jx is None:
            continue
        r = {"workload": name}
        for impl, tag in (("ha cold", "cold"), ("ha warm", "warm"), ("ha tiered", "tiered")):
            s = by.get((name, impl))
            if s is not None:
                r[f"{tag}_first_x"] = s["first_s"] / jx["first_s"]
                r[f"{tag}_process_x"] = s["process_s"] / jx["process_s"]
        out.append(r)
    return out


def _f(v, fmt="{:.3f}"):
    return "-" if v is None else fmt.format(v)


def table(summary, ratio_rows, repeats):
    lines = [f"Medians of {repeats} fresh processes per row, seconds.  first_s and process_s: "
             "measured by the parent (interpreter start-up included); the rest inside the "
             "child, from its first line.", "",
             "| workload | impl | first_s | process_s | import_s | data_s | plan_s | call_s "
             "| child_first_s | tier | compiled_s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {WORKLOADS[s['workload']]} | {s['impl']} | {_f(s['first_s'])} | "
                     f"{_f(s['process_s'])} | {_f(s['import_s'])} | {_f(s['data_s'])} | "
                     f"{_f(s['plan_s'])} | {_f(s['call_s'], '{:.4f}')} | "
                     f"{_f(s['child_first_s'])} | {s['tier']} | {_f(s['compiled_s'])} |")
    if ratio_rows:
        x = "{:.2f}x"
        lines += ["", f"hybridad / JAX (goals: first_s <= {GOAL_COLD}x with an empty cache, "
                  f"<= {GOAL_WARM}x with a warm one):", "",
                  "| workload | cold first_s | goal | warm first_s | goal | tiered first_s "
                  "| cold process_s | warm process_s |", "|---|---|---|---|---|---|---|---|"]
        for r in ratio_rows:
            cold, warm = r.get("cold_first_x"), r.get("warm_first_x")
            lines.append(
                f"| {WORKLOADS[r['workload']]} | {_f(cold, x)} | "
                f"{'-' if cold is None else 'met' if cold <= GOAL_COLD else 'not met'} | "
                f"{_f(warm, x)} | "
                f"{'-' if warm is None else 'met' if warm <= GOAL_WARM else 'not met'} | "
                f"{_f(r.get('tiered_first_x'), x)} | {_f(r.get('cold_process_x'), x)} | "
                f"{_f(r.get('warm_process_x'), x)} |")
    return "\n".join(lines)


def meta(use_jax):
    import numba
    import numpy

    info = {"date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version(),
            "numpy": numpy.__version__, "numba": numba.__version__,
            "cpus": os.cpu_count(), "machine": platform.machine()}
    if use_jax:
        info["jax"] = subprocess.run([sys.executable, "-c", "import jax; print(jax.__version__)"],
                                     capture_output=True, text=True).stdout.strip()
    return info


def byte_compile():
    """Byte-compile the package as ``pip install`` does; True if every module compiled."""
    import compileall

    return bool(compileall.compile_dir(str(ROOT / "hybridad"), quiet=1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per row (medians)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--json", metavar="FILE", help="also write {rows, summary, ratios, meta}")
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness
    _harness.installed_bytecode()  # (what an install compiles)
    impls = list(a.impls)
    if "ha warm" in impls and "ha cold" not in impls:
        impls.append("ha cold")  # a warm run needs the cache its cold run filled
    use_jax = "jax" in impls and have_jax()
    if "jax" in impls and not use_jax:
        print("jax is not importable: no JAX rows", file=sys.stderr)
        impls.remove("jax")
    impls = [i for i in IMPLS if i in impls]
    _check_copies(a.workloads)
    info = meta(use_jax)
    info["bytecode"] = "compiled" if byte_compile() else "compile failed"
    print(f"# bench_startup: {info}", file=sys.stderr)
    raw = []
    for name in a.workloads:
        for rep in range(a.repeats):
            # one round: cold then warm from the same new directory, tiered
            # from its own, jax; the groups rotate from round to round
            groups = [[i for i in ("ha cold", "ha warm") if i in impls]] + \
                [[i] for i in ("ha tiered", "jax") if i in impls]
            groups = [g for g in groups if g]
            k = rep % len(groups)
            for group in groups[k:] + groups[:k]:
                with tempfile.TemporaryDirectory(prefix="hybridad-startup-") as cache_dir:
                    for impl in group:
                        row = run_child(name, impl, cache_dir)
                        row["repeat"] = rep
                        raw.append(row)
                        print(f"  {name:<9} {impl:<12} first {row['first_s']:6.3f} s  process "
                              f"{row['process_s']:6.3f} s  tier {row.get('tier', '-')}",
                              file=sys.stderr, flush=True)
    summary = summarize(raw, a.workloads, impls)
    ratio_rows = ratios(summary, a.workloads)
    print(table(summary, ratio_rows, a.repeats))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": raw, "summary": summary,
                                            "ratios": ratio_rows, "meta": info}, indent=1))
    return {"rows": raw, "summary": summary, "ratios": ratio_rows}


if __name__ == "__main__":
    main()
