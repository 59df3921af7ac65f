"""Command line: ``python -m hybridad demo``, ``explain``, ``bench``, ``cache`` and
``calibrate``.

``demo`` runs a short optimizer loop (gradient descent on a regularized
logistic regression) that calls ``gradient(loss, w, X, y, out=res)`` every
step, and prints the value, the gradient norm and the numpy bytes allocated
per call, counted exactly.

``explain MODULE:FUNCTION --shape 1000 [--shape 3,4 ...]`` builds the plan of
``FUNCTION`` (from an importable module or a ``.py`` file) at random
arguments of those shapes and prints ``plan.explain()`` and its memory
profile; ``--plot FILE`` saves the live-bytes curve (needs matplotlib).

``bench [--quick] [--workload NAME ...] [--json FILE] [--plot FILE]`` runs the
benchmark suite (:mod:`hybridad.bench`): hybridad against hand-written numpy
and numba gradients (and JAX, PyTorch, autograd when importable) on the
expsum, quadform, MLP, dense-chain and scipy Rosenbrock workloads; time per
call, ratios, allocations per call, peak memory and first-call time, as a
table, JSON and a plot (see docs/benchmarks.md).

``cache --info`` prints where the disk cache of generated plans is
(``HYBRIDAD_CACHE_DIR``), whether it is used and its size; ``cache --clear``
deletes hybridad's files in it (they are rebuilt on demand).

``calibrate [--out FILE]`` measures what this machine's kernels cost (the
cost model that decides whether a fused region stores or recomputes its
partials, :mod:`hybridad.transforms.costs`) and writes the table into the
disk cache, where later plans find it; ``--builtin`` rewrites the package's
built-in table instead.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

_STARTED = time.perf_counter()  # the demo reports the process's time from here


def loss(w, X, y, lam):
    margins = y * (X @ w)
    return np.mean(np.logaddexp(0.0, -margins)) + 0.5 * lam * np.sum(w * w)


def demo(steps=200, n_samples=500, n_features=100, seed=0):
    t_import = time.perf_counter()
    import hybridad as ha
    from hybridad.testing import count_allocations

    t_import = time.perf_counter() - t_import

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    w_true = rng.standard_normal(n_features)
    y = np.sign(X @ w_true + 0.1 * rng.standard_normal(n_samples))
    w = np.zeros(n_features)
    lam, lr = 1e-3, 0.5

    res = ha.GradientResult(w)
    t0 = time.perf_counter()
    ha.gradient(loss, w, X, y, lam, out=res)  # first call: trace, plan and numba compile
    build = time.perf_counter() - t0
    print(f"hybridad demo: logistic regression, {n_samples} samples x {n_features} features")
    print(f"first call (trace, plan and compile; numba's disk cache serves later "
          f"processes): {build * 1e3:.1f} ms")
    print("every step below runs the compiled numba program")
    print(f"{'step':>6} {'loss':>14} {'|grad|':>12}")

    with count_allocations() as counts:
        t0 = time.perf_counter()
        for step in range(steps):
            ha.gradient(loss, w, X, y, lam, out=res)
            w -= lr * res.gradient
            if step % max(1, steps // 8) == 0 or step == steps - 1:
                gnorm = np.sqrt(np.dot(res.gradient, res.gradient))
                print(f"{step:>6} {float(res.value):>14.8f} {gnorm:>12.3e}")
        elapsed = time.perf_counter() - t0
    # the printing above calls np.dot once per printed line; count only gradient calls
    with count_allocations() as per_call:
        for _ in range(steps):
            ha.gradient(loss, w, X, y, lam, out=res)
    print(f"time per step: {elapsed / steps * 1e6:.1f} us")
    print(f"numpy bytes allocated per gradient call: {per_call.bytes / steps:.1f} "
          f"({per_call.allocations} allocations in {steps} calls)")
    print(f"(whole loop incl. printing and the update: {counts.allocations} allocations)")
    print(f"this process so far: {time.perf_counter() - _STARTED:.2f} s -- importing hybridad "
          f"{t_import:.2f} s, the first call {build:.2f} s, {steps} steps "
          f"{elapsed:.3f} s, the allocation count {steps} more; the interpreter's exit "
          "after this line (numba's and LLVM's teardown) takes a second or two more")
    return per_call


def load_function(spec):
    """``"package.module:name"`` or ``"path/to/file.py:name"`` -> the function."""
    import importlib
    import importlib.util
    from pathlib import Path

    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise SystemExit(f"expected MODULE:FUNCTION, got {spec!r}")
    if module_name.endswith(".py") or Path(module_name).is_file():
        path = Path(module_name)
        if not path.is_file():
            raise SystemExit(f"no such file: {module_name}")
        loader = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        sys.path.insert(0, ".")
        module = importlib.import_module(module_name)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"{module_name} has no function {name!r}") from None


def _shape(text):
    text = text.strip("()[] ")
    return tuple(int(s) for s in text.split(",") if s.strip()) if text else ()


def explain(spec, shapes, dtype="float64", argnums=0, backend="numba", plot=None, seed=0,
            source=True):
    import hybridad as ha

    f = load_function(spec)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
    plan = ha.compile(f, *args, argnums=argnums, backend=backend)
    text = plan.explain()
    if not source:
        text = text[:text.index("generated source:")].rstrip()
    print(text)
    prof = plan.memory_profile()
    print()
    print("memory profile (bytes live at each step):")
    print(prof.table())
    print(f"peak live {prof.lower_bound} B, arena {prof.arena_bytes} B, one slot per buffer "
          f"{prof.naive_bytes} B")
    if plot:
        try:
            prof.plot(plot)
            print(f"plot saved to {plot}")
        except ImportError:
            print("matplotlib is not installed: no plot (pip install matplotlib)")
    return plan


def cache_command(clear=False):
    """``cache --info`` (print where the disk cache is) or ``--clear`` (empty it).

    Parameters
    ----------
    clear : bool
        Delete hybridad's files in the cache directory instead of describing it.

    Returns
    -------
    int
        The exit status.
    """
    from .backends.numba import cache

    if clear:
        try:
            removed = cache.clear()
        except PermissionError as err:
            print(f"hybridad cache: {err}", file=sys.stderr)
            return 1
        print(f"hybridad cache: removed {removed} files from {cache.cache_location()}")
        return 0
    print(cache.info())
    return 0


def calibrate_command(out=None, builtin=False):
    """``calibrate``: measure the costs the plans choose by and write them
    (:func:`hybridad.transforms.costs.calibrate`); print the table."""
    import json
    import os

    from .plans.calibrate import calibrate
    from .transforms import costs

    if builtin:
        path = os.path.join(os.path.dirname(costs.__file__), "costs_table.py")
        c = calibrate(path=os.devnull)
        table = {k: v for k, v in c.to_dict().items() if k != "source"}
        with open(path, "w") as fh:
            fh.write(costs.TABLE_HEADER + "TABLE = " + json.dumps(table, indent=1) + "\n")
        print(f"wrote {path}")
    else:
        c = calibrate(path=out)
        print(f"wrote {out or costs.calibration_path()}")
    width = max(len(k) for k in c.op_ns)
    for k, v in sorted(c.op_ns.items(), key=lambda kv: kv[1]):
        print(f"  {k:<{width}} {v:8.3f} ns/element")
    print(f"  copy: {c.cache_ns_per_byte:.4f} ns/byte in cache, {c.stream_ns_per_byte:.4f} "
          "ns/byte from memory")
    print("  gemm (one thread, 256 x 256 x 256): " + ", ".join(
        f"{dt} {ns:.4f} ns/multiply-add" for dt, ns in (c.gemm_ns or {}).items()))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hybridad")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="optimizer loop printing value, |grad|, bytes per call")
    d.add_argument("--steps", type=int, default=200)
    e = sub.add_parser("explain", help="a function's plan: graph, regions, buffers with "
                                       "lifetimes, memory profile")
    e.add_argument("function", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    e.add_argument("--shape", action="append", type=_shape, required=True,
                   help="shape of the next argument (random normal values), e.g. 1000 or 3,4; "
                        "once per argument")
    e.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    e.add_argument("--argnums", default="0",
                   help="differentiated argument(s): 0 or 0,1")
    e.add_argument("--backend", default="numba", choices=["numba", "numpy"])
    e.add_argument("--plot", metavar="FILE", help="save the memory profile as an image")
    e.add_argument("--no-source", action="store_true", help="leave out the generated source")
    b = sub.add_parser("bench", help="benchmark suite: time, allocations and memory against "
                                     "hand-written gradients and peers")
    from .bench.suite import add_arguments

    add_arguments(b)
    c = sub.add_parser("cache", help="where the disk cache of compiled plans is; clear it")
    what = c.add_mutually_exclusive_group()
    what.add_argument("--info", action="store_true",
                      help="location, status and size (the default)")
    what.add_argument("--clear", action="store_true",
                      help="delete hybridad's files in it (rebuilt on demand)")
    k = sub.add_parser("calibrate", help="measure this machine's kernel costs for the cost "
                                         "model (a minute or two)")
    k.add_argument("--out", metavar="FILE",
                   help="where to write the table (default: costs.json in the disk cache)")
    k.add_argument("--builtin", action="store_true",
                   help="rewrite the package's built-in table (hybridad/transforms/"
                        "costs_table.py) instead: for the reference machine")
    args = parser.parse_args(argv)
    if args.command == "calibrate":
        return calibrate_command(args.out, args.builtin)
    if args.command == "demo":
        demo(steps=args.steps)
    elif args.command == "explain":
        nums = tuple(int(a) for a in args.argnums.split(","))
        explain(args.function, args.shape, args.dtype, nums[0] if len(nums) == 1 else nums,
                args.backend, args.plot, source=not args.no_source)
    elif args.command == "bench":
        from .bench.suite import main as bench_main

        return bench_main(args)
    elif args.command == "cache":
        return cache_command(clear=args.clear)
    return 0


if __name__ == "__main__":
    sys.exit(main())
