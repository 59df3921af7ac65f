"""The GPU backend against PyTorch CUDA and JAX on the same device.

Workloads (float64 unless ``--float32``):

* ``expsum n=1e7`` -- ``r = sum(exp(-3 (x + 1)))``, ``f = r**2 + r**3 + r**4/4``;
* ``mlp B=1e5`` -- the tanh MLP 1 -> 16 -> 16 -> 1 of bench_core on a batch of
  10^5 samples, gradient w.r.t. its six weight and bias arrays;
* ``dense chain n=1e6`` -- ``x_i = x_0 + ... + x_{i-1}`` for 20 layers,
  ``f = sum(tanh(x_20))`` (bench_memory's): the peak device memory of one
  gradient is the figure here;
* ``gp n=4096`` -- a Gaussian process's negative log-likelihood, cholesky
  and a solve of the 4096 x 4096 kernel matrix, gradient w.r.t. the three
  hyperparameters and the 4096 x 3 inputs;
* ``euler loop T=100`` -- 100 explicit Euler steps of a batch of states,
  ``X <- X + 0.01 tanh(X W)`` (B x 64 states, 64 x 64 ``W``), stated as a
  loop (``hybridad.fori_loop``, ``jax.lax.fori_loop``; a Python loop for
  torch), ``f = sum(X_T^2)``, gradient w.r.t. ``X_0`` and ``W``: the host
  launches the body per step on hybridad's plan.

Rows: hybridad (``ha.compile`` on cupy arrays, ``plan.gradient(x, out=res)``:
the default, a CUDA graph replayed once the same arrays come back), hybridad
with ``cuda_graph=True`` (captured at the first call) and ``cuda_graph=False``
(``eager``: every kernel launched from Python), ``torch`` (autograd on CUDA tensors) and
``jax.jit(jax.value_and_grad)`` (x64), the peers when importable.  Each row's
value and gradient are checked against hybridad's numpy backend on the host
first (1e-10 relative; 1e-4 in float32).  Time per call: median / min / max
of ``--repeats`` batches, each synchronized at its end (``cupy``
``Device.synchronize``, ``torch.cuda.synchronize``, ``block_until_ready``).
Device allocations per call: cupy's memory pool seen by a counting
``MemoryHook`` (hybridad rows).  Peak device memory of one gradient after
warm-up: cupy's pool high-water mark through the same hook (bytes in use,
arguments and results included), ``torch.cuda.max_memory_allocated`` and
JAX's ``memory_stats()["peak_bytes_in_use"]``.

Each hybridad row with matrix products says what they ran in
(``plan.matmul_precision``: hybridad's kernels or cuBLAS, and TF32 only where
``CUPY_TF32=1`` asked cupy for it); JAX runs with
``jax_default_matmul_precision = "highest"`` (no TF32 either).

Needs a GPU: ``python benchmarks/bench_gpu.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import hybridad as ha  # noqa: E402


def expsum(x, xp=np):
    r = xp.sum(xp.exp(-3 * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def chain(x0, xp=np):
    xs = [x0]
    for _ in range(20):
        xs.append(sum(xs[1:], xs[0]))
    return xp.sum(xp.tanh(xs[-1]))


def _fori(xp):
    """The loop primitive that goes with array module ``xp``."""
    if xp is np:
        return ha.fori_loop
    if xp.__name__.startswith("jax"):
        import jax

        return jax.lax.fori_loop

    def fori(lower, upper, body, init):  # (torch: a Python loop on its tape)
        for i in range(lower, upper):
            init = body(i, init)
        return init
    return fori


def euler_loop(X, W, xp=np):
    return xp.sum(_fori(xp)(0, 100, lambda i, x: x + 0.01 * xp.tanh(x @ W), X) ** 2)


def gp(theta, X, y, eye, xp=np):
    """A Gaussian process's negative log-likelihood (up to a constant): a
    squared-exponential kernel with amplitude, length scale and noise
    ``exp(theta)``; cholesky for the log-determinant, a solve for the fit."""
    sq = xp.sum(X ** 2, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2 * (X @ X.T)
    K = xp.exp(theta[0]) * xp.exp(-0.5 * xp.exp(-2 * theta[1]) * d2) + xp.exp(theta[2]) * eye
    L = xp.linalg.cholesky(K)
    return 0.5 * (y @ xp.linalg.solve(K, y)) + xp.sum(xp.log(xp.diag(L)))


#: the check against the numpy backend on the host: relative error, float64 /
#: float32 (the GP's solve and cholesky of a kernel matrix of condition ~1e4
#: lose that much more in float32, in every implementation)
TOLERANCE = {"gp": (1e-9, 5e-3)}


def workloads(quick, dtype):
    rng = np.random.default_rng(0)
    n = 10**6 if quick else 10**7
    batch = 10**4 if quick else 10**5
    m = 1024 if quick else 4096
    w = _harness.MLP_WIDTHS
    params = []
    for a, b in zip(w[:-1], w[1:], strict=True):
        params += [rng.standard_normal((a, b)) / np.sqrt(a), np.zeros(b)]
    X = rng.uniform(-1, 1, (batch, 1))
    Y = np.sin(np.pi * X)
    cast = [p.astype(dtype) for p in params + [X, Y]]
    return {
        f"expsum n={n:.0e}": (expsum, [rng.uniform(-1, 1, n).astype(dtype)], (0,)),
        f"mlp B={batch:.0e}": (_harness.mlp, cast, tuple(range(6))),
        "dense chain n=1e6": (chain, [rng.uniform(-1, 1, 10**6).astype(dtype) * 1e-6], (0,)),
        f"euler loop T=100 B={batch // 10:.0e}": (
            euler_loop, [rng.standard_normal((batch // 10, 64)).astype(dtype),
                         (rng.standard_normal((64, 64)) / 8).astype(dtype)], (0, 1)),
        f"gp n={m}": (gp, [np.array([0.0, 0.0, np.log(0.5)]).astype(dtype),
                           rng.uniform(-1, 1, (m, 3)).astype(dtype),
                           rng.standard_normal(m).astype(dtype),
                           np.eye(m, dtype=dtype)], (0, 1)),
    }


class PoolWatch:
    """cupy memory-pool mallocs and the high-water mark of bytes in use."""

    def __init__(self):
        import cupy
        from cupy.cuda import memory_hook

        watch = self
        pool = cupy.get_default_memory_pool()

        class Hook(memory_hook.MemoryHook):
            name = "hybridad-bench"

            def malloc_postprocess(self, **kwargs):
                watch.mallocs += 1
                watch.peak = max(watch.peak, pool.used_bytes())

        self.hook, self.mallocs, self.peak, self.pool = Hook(), 0, 0, pool

    def __enter__(self):
        self.peak = self.pool.used_bytes()
        self.hook.__enter__()
        return self

    def __exit__(self, *exc):
        return self.hook.__exit__(*exc)


def hybridad_row(f, args, argnums, cuda_graph):
    import cupy

    dev = [cupy.asarray(a) for a in args]
    t0 = time.perf_counter()
    plan = ha.compile(f, *dev, argnums=argnums if len(argnums) > 1 else 0,
                      cuda_graph=cuda_graph)
    res = plan.new_result()
    plan.gradient(*dev, out=res)
    cupy.cuda.Device().synchronize()
    first = time.perf_counter() - t0

    def call():
        plan.gradient(*dev, out=res)

    call.precision = plan.matmul_precision  # (what its matrix products ran in)

    def result():
        grads = res.gradient if isinstance(res.gradient, tuple) else (res.gradient,)
        return float(res.value), [cupy.asnumpy(g) for g in grads]

    def sync():
        cupy.cuda.Device().synchronize()

    with PoolWatch() as watch:
        call()
        sync()
    peak = watch.peak
    with PoolWatch() as watch:
        for _ in range(10):
            call()
        sync()
    return call, sync, result, first, watch.mallocs / 10, peak


def torch_row(f, args, argnums):
    import torch

    dev = [torch.tensor(a, device="cuda", requires_grad=i in argnums)
           for i, a in enumerate(args)]

    def call():
        for i in argnums:
            dev[i].grad = None
        v = f(*dev, xp=torch)
        v.backward()
        return v

    holder = {}

    def run():
        holder["v"] = call()

    def result():
        return float(holder["v"]), [dev[i].grad.cpu().numpy() for i in argnums]

    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()  # then: bytes in use at the peak, arguments included
    run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return run, torch.cuda.synchronize, result, first, None, peak


def jax_row(f, args, argnums):
    import jax

    jax.config.update("jax_enable_x64", True)
    # float32 products in float32, as cuBLAS gives hybridad and torch (JAX's
    # GPU default rounds their inputs to TF32: 1e-3 off, not the same work)
    jax.config.update("jax_default_matmul_precision", "highest")
    import jax.numpy as jnp

    dev = [jax.device_put(a) for a in args]
    fn = jax.jit(jax.value_and_grad(lambda *a: f(*a, xp=jnp), argnums=argnums))
    holder = {}

    def run():
        holder["out"] = fn(*dev)

    def sync():
        jax.block_until_ready(holder["out"])

    def result():
        v, g = holder["out"]
        return float(v), [np.asarray(x) for x in g]

    t0 = time.perf_counter()
    run()
    sync()
    first = time.perf_counter() - t0
    stats = jax.devices()[0].memory_stats() or {}
    return run, sync, result, first, None, stats.get("peak_bytes_in_use")


def measure(run, sync, repeats, target_s=0.05):
    run()
    sync()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        sync()
        if time.perf_counter() - t0 > target_s / 4 or number > 10**5:
            break
        number *= 4
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        sync()
        times.append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(times), min(times), max(times)


COLUMNS = (("workload", "workload", "{}"), ("impl", "impl", "{}"),
           ("median_us", "median_us", "{:.1f}"), ("min_us", "min_us", "{:.1f}"),
           ("max_us", "max_us", "{:.1f}"), ("device allocs/call", "allocs", "{:g}"),
           ("peak device bytes", "peak", "{:,}"), ("first_call_s", "first", "{:.2f}"))


def gpu_missing(tool):
    """Whether cupy or a GPU is missing (said, naming ``tool``)."""
    ok, why = __import__("hybridad.backends.cuda.program", fromlist=["x"]).cupy_available()
    if not ok:
        print(f"{tool} needs cupy and a GPU: {why}")
    return not ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n = 1e6, B = 1e4, 3 repeats")
    p.add_argument("--float32", action="store_true")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    if gpu_missing("bench_gpu"):
        return 1
    dtype = np.float32 if args.float32 else np.float64
    repeats = 3 if args.quick else args.repeats
    rows = []
    for name, (f, fargs, argnums) in workloads(args.quick, dtype).items():
        ref = ha.gradient(f, *fargs, argnums=argnums if len(argnums) > 1 else 0,
                          backend="numpy")
        ref_grads = ref.gradient if isinstance(ref.gradient, tuple) else (ref.gradient,)
        impls = {"hybridad": lambda: hybridad_row(f, fargs, argnums, None),  # (the default)
                 "hybridad cuda_graph": lambda: hybridad_row(f, fargs, argnums, True),
                 "hybridad eager": lambda: hybridad_row(f, fargs, argnums, False)}
        for peer, make in (("torch", torch_row), ("jax.jit", jax_row)):
            if _harness.version("torch" if peer == "torch" else "jax"):
                impls[peer] = lambda make=make: make(f, fargs, argnums)
        for impl, make in impls.items():
            # the last row's plan (its arena, its result) is freed first: the pool's
            # bytes in use are one row's, not two (the graph rows read 2x before)
            run = sync = result = None
            gc.collect()
            try:
                run, sync, result, first, allocs, peak = make()
            except Exception as err:  # noqa: BLE001 - a peer without CUDA support
                print(f"note: {impl} on {name} skipped: {err}")
                continue
            run()
            sync()
            value, grads = result()
            tol = TOLERANCE.get(f.__name__, (1e-10, 1e-4))[bool(args.float32)]
            err = max([_harness.relative_error(value, float(ref.value))] +
                      [_harness.relative_error(g, r) for g, r in zip(grads, ref_grads,
                                                                        strict=True)])
            if err > tol:
                raise SystemExit(f"{impl} on {name} disagrees with the numpy backend ({err:.1e})")
            median, lo, hi = measure(run, sync, repeats)
            rows.append({"workload": name, "impl": impl, "median_us": median, "min_us": lo,
                         "max_us": hi, "allocs": allocs, "peak": peak, "first": first,
                         "products": getattr(run, "precision", None)})
            print(f"{name} | {impl} | {median:.1f} us | allocs {allocs} | peak {peak} | "
                  f"first {first:.2f} s", flush=True)  # (each row as it is measured)
            if rows[-1]["products"]:
                print(f"note: {impl} on {name}: matrix products {rows[-1]['products']}")
    print(_harness.format_table(rows, COLUMNS, {"workload", "impl"}))
    if args.json:
        _harness.write_json(args.json, rows, {"dtype": np.dtype(dtype).name,
                                              "quick": args.quick})
    return 0


if __name__ == "__main__":
    sys.exit(main())
