"""Where a GPU plan's time goes, by statement of its program (profile_gpu.py: by kernel).

The GPU program is Python that launches kernels and library calls
(``plan.explain()`` prints it).  This tool runs a copy of it with the device
synchronized after every top-level statement (a loop node's whole run is one
statement) and reports, per statement, the median time over ``--repeats``
calls and its share, largest first -- what bench_gpu.py's rows above jax.jit
spend their time on.  Synchronizing costs each statement its launch latency,
so the total is above the plain call's time (printed beside it).

Needs a GPU: ``python benchmarks/profile_gpu_statements.py [--float32] [--top N] [WORKLOAD ...]``
(workload names as bench_gpu.py prints them, or a prefix: ``gp``, ``mlp``).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import bench_gpu  # noqa: E402

import hybridad as ha  # noqa: E402


def instrumented(program_fn, source, tick):
    """``program_fn``'s program with ``tick(i)`` after its ``i``-th top-level
    statement, and the statements' source lines."""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    body, text = [], []
    for stmt in fn.body:
        body.append(stmt)
        body.append(ast.parse(f"_tick({len(text)})").body[0])
        text.append(ast.unparse(stmt).splitlines()[0][:110])
    fn.body = body
    ns = dict(program_fn.__globals__, _tick=tick)
    exec(compile(ast.fix_missing_locations(tree), "<profiled>", "exec"), ns)  # noqa: S102
    return ns[fn.name], text


def profile(name, f, args, argnums, repeats, top):
    import cupy

    dev = [cupy.asarray(a) for a in args]
    plan = ha.compile(f, *dev, argnums=argnums if len(argnums) > 1 else 0, cuda_graph=False)
    res = plan.new_result()
    plan.gradient(*dev, out=res)
    sync = cupy.cuda.Device().synchronize
    sync()
    times, clock = [], [0.0]

    def tick(i):
        sync()
        now = time.perf_counter()
        times[-1][i] = now - clock[0]
        clock[0] = now

    fn, text = instrumented(plan._program.fn, plan._program.source, tick)
    leaves = plan._leaves(tuple(dev))
    grads = res.gradient if isinstance(res.gradient, tuple) else (res.gradient,)
    outs = [res.value, *grads]
    for _ in range(repeats + 1):  # (the first: warm-up)
        times.append([0.0] * len(text))
        sync()
        clock[0] = time.perf_counter()
        fn(*leaves, *outs)
    per = [statistics.median(t[i] for t in times[1:]) for i in range(len(text))]
    t0 = time.perf_counter()
    for _ in range(repeats):
        plan.gradient(*dev, out=res)
    sync()
    plain = (time.perf_counter() - t0) / repeats
    total = sum(per)
    print(f"\n== {name}: synchronized statements {total * 1e3:.2f} ms in all; the plan's "
          f"call {plain * 1e3:.2f} ms ({plan.matmul_precision or 'no products'})")
    for i in sorted(range(len(per)), key=per.__getitem__, reverse=True)[:top]:
        print(f"{per[i] * 1e3:9.3f} ms {100 * per[i] / total:5.1f} %  {text[i]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="*", help="names or prefixes (default: all)")
    p.add_argument("--float32", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    if bench_gpu.gpu_missing("profile_gpu_statements"):
        return 1
    dtype = np.float32 if args.float32 else np.float64
    for name, (f, fargs, argnums) in bench_gpu.workloads(args.quick, dtype).items():
        if args.workloads and not any(name.startswith(w) for w in args.workloads):
            continue
        profile(name, f, fargs, argnums, args.repeats, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
