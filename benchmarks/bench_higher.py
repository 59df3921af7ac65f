"""Second-order and Jacobian benchmark: hybridad's Hessian, Jacobian and HVP plans against
hand-written derivatives and JAX.

What is measured
----------------
Four workloads (float64), each row checked for correctness before it is timed:

* ``rosen hessian`` -- the Hessian of scipy's chained Rosenbrock
  ``f(x) = sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)`` at n = 100 and
  n = 1000 (n = 100 only with ``--quick``), ``x ~ U(-1, 1)`` (seeded).  Rows:

  - ``hand numba`` (the baseline) -- a hand-written ``@numba.njit(cache=False)``
    kernel (plain njit: no fastmath, no parallel) that zeroes a preallocated
    (n, n) array and fills its diagonal and off-diagonals (the Hessian is
    tridiagonal).  It computes the Hessian only (no value, no gradient);
  - ``scipy rosen_hess`` -- ``scipy.optimize.rosen_hess(x)``: hand-written, dense,
    allocates its (n, n) result every call;
  - ``hybridad`` -- ``plan = ha.compile(f, x, hessian=True, chunk=K)``,
    ``res = ha.HessianResult(x)``, ``plan.hessian(x, out=res)`` (value, gradient and
    Hessian; forward over reverse, the Hessian's columns K at a time), for the
    default (``plan.chunk`` is reported: 3, the colors of the tridiagonal
    Hessian's star coloring, :mod:`hybridad.sparse.dense`) and K = 8 and K = n
    (an explicit chunk runs every column);
  - ``jax.jit(hessian)`` -- ``jax.jit(jax.hessian(f))`` (x64), ``block_until_ready``.

* ``dense hessian`` -- a Hessian dense in every entry (nothing for the
  colored path of a structurally sparse Hessian to use):
  ``log(sum(exp(x))) + sum(tanh(A x)**2) + 0.1 sum(x**4)``, ``A`` 30 x n, at
  the Rosenbrock sizes.  Rows: ``hybridad hessian (default chunk)`` (the
  baseline) and ``jax.jit(hessian)``.

* ``jacobian 50->30`` -- the Jacobian of ``g(x) = tanh(W @ x) + 0.1 x[:30] x[20:]``,
  ``W ~ N(0, 1)/7`` of shape (30, 50) (a constant), ``x ~ U(-1, 1)`` of length 50.  Rows:

  - ``hand numpy`` (the baseline) -- the value and the analytic Jacobian
    ``J = (1 - t**2)[:, None] * W`` (``t = tanh(W @ x)``) written into a
    preallocated (30, 50) array with ``out=``, plus the product's terms added
    through two strided views of ``J`` (``J[i, i] += 0.1 x[20 + i]``,
    ``J[i, 20 + i] += 0.1 x[i]``);
  - ``hybridad forward`` / ``hybridad reverse`` -- ``ha.compile(g, x, jacobian=True,
    mode=...)``, ``res = ha.JacobianResult(g(x), x)``, ``plan.jacobian(x, out=res)``
    (value and Jacobian; the chunk is the plan's default, reported);
  - ``jax.jit(jacfwd)`` / ``jax.jit(jacrev)`` -- ``jax.jit(jax.jacfwd(g))`` and
    ``jax.jit(jax.jacrev(g))`` (x64), ``block_until_ready``.

* ``mlp hvp`` -- Hessian-vector products of the tanh MLP loss
  (:func:`_harness.mlp`, widths :data:`_harness.MLP_WIDTHS`, ``mean((pred - Y)**2)``
  over a batch of B = 10^4 samples, 10^3 with ``--quick``; data as in bench_memory's
  ``make_workload("mlp")``), differentiated w.r.t. W2 only (``argnums=2``, a (16, 16)
  array; the other parameters and X, Y constants), in a fixed seeded direction v
  shaped like W2.  Rows:

  - ``hand numpy gradient`` (the baseline of the ratios) -- ONE call of the
    hand-written backpropagation :func:`_harness.mlp_numpy` (value and all six
    gradients, allocating): the ratio of the other rows is "HVP cost in gradients".
    There is no hand-written HVP;
  - ``hybridad hvp (full)`` -- ``plan = ha.compile(mlp, *args, argnums=2,
    hessian=True)``, ``plan.hvp(*args, v=v, out=ha.HvpResult(W2))``: the forward
    and backward passes (value and gradient) and the tangent pass;
  - ``hybridad hvp (tangent only)`` -- ``plan.linearize(*args)`` once (untimed),
    then ``plan.hvp(v=v, out=res)`` without arguments: the tangent pass only;
  - ``jax.jit(jvp(grad))`` -- ``jax.jit(lambda p, v, *rest: jax.jvp(jax.grad(loss),
    (p,), (v,))[1])`` (x64; the constants are arguments, not baked in),
    ``block_until_ready``.

  The MLP's hybridad rows come twice: with the default ``parallel=True`` (at
  B = 10^4 every loop over the batch has >= 32768 iterations and runs as a numba
  ``prange``, between BLAS gemm calls) and with ``parallel=False``.  (This
  benchmark found that numba's own loop fusion merged two such loops that used
  one workspace slot in turn; hybridad now turns that fusion off.)

References and checks (abort on failure): Rosenbrock: ``rosen_hess(x)`` (and
``rosen``/``rosen_der`` for hybridad's value and gradient); Jacobian: the hand numpy
value and Jacobian; MLP: hybridad's HVP is the reference, checked against JAX's
(when jax is importable) and always against a central difference of the hand-written
gradient, ``(grad(W2 + eps v) - grad(W2 - eps v)) / (2 eps)`` with eps = 1e-6
(tolerance 1e-5); its value and gradient against :func:`_harness.mlp_numpy`, the
tangent-only HVP against the full one.  Tolerances: relative error in the max norm
(:func:`_harness.relative_error`) <= 1e-10 for hybridad and the hand-written rows,
<= 1e-9 for JAX.  ``rel_err`` is the row's error against its workload's reference
(for the MLP's hybridad rows against JAX, or the central difference without jax;
for the hand gradient row its W2 gradient against hybridad's).

How
---
``first_call_s``: from a fresh plan / jit / dispatcher, the seconds to build it and
make the first call (hybridad: trace, code generation, numba compilation or loading
from numba's disk cache under ``HYBRIDAD_CACHE_DIR``, one call; hand numba: njit
compilation and one call; jax: ``jit`` and the compiling call; numpy/scipy rows: the
first call). Before the rows, a tiny Hessian and Jacobian plan (and, in the jax process,
a tiny jit) pay the process's one-time costs. Then ``--rounds`` rounds (5; 2 with
``--quick``) per workload; in each round every row of the workload times one batch of
calls sized to about 20 ms (at least one call), after one untimed call of the same row,
the garbage collector off, the order of the rows changing from round to round, each row
after each of the others alike (so that a slow spell of a shared machine falls on all of
them).

The jax rows run first, in a process of their own, with the same batches and
rounds (XLA's thread pool beside numba's, in one process on 2 cores, slowed the parallel
plans up to 2x); their results come back as files and are checked against the references
here.

The untimed call: on the 2-core VM this was written on, the first call after
another row's batch was often 10-30x slower than the next ones (e.g. 60-120 ms instead
of 4 ms for the MLP's full HVP right after the allocating numpy gradient, with no page
faults of its own), which with batches of one or a few calls would dominate the batch;
the steady per-call cost is what is compared.  Besides, numpy's BLAS threads spin for a while after
a product and take the cores from a parallel plan's threads: a hybridad row's batch right
after a numpy or scipy row's, and each workload's first, wait that out
(``_harness.BLAS_SPIN_S``).

Reported: the median, min and max microseconds per call over the rounds, and
``ratio`` = median over the median of the workload's baseline row (``hand numba``
Hessian; ``hand numpy`` Jacobian; the ``hand numpy gradient`` for the MLP), same run.
``allocs/call`` (hybridad rows): numpy data allocations per call,
``hybridad.testing.count_allocations()`` over 20 calls after warm-up (0 expected;
a warning is printed otherwise).

Output: a plain-text table, the verdict lines (ratios only, no targets), notes;
``--json FILE`` writes ``{"rows": [...], "meta": {...}}`` (with each round's time).
The first run after hybridad changes also pays numba compilations of the plans
(about 3-10 s each); ``--quick`` with a warm cache takes well under a minute.

Usage::

    python benchmarks/bench_higher.py [--quick] [--json FILE] [--rounds N]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from scipy.optimize import rosen, rosen_der, rosen_hess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _harness
import _harness  # noqa: E402
from _harness import (balanced_orders, batch_ns, gc_disabled,  # noqa: E402
                      mlp, mlp_numpy, relative_error, version)

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad.testing import count_allocations  # noqa: E402

ROSEN_SIZES, QUICK_ROSEN_SIZES = (100, 1000), (100,)
ROSEN_CHUNKS = (None, 8, "n")  # None: the plan's default
JAC_N, JAC_M, JAC_SHIFT = 50, 30, 20  # g: R^50 -> R^30, x[:30] * x[20:]
MLP_BATCH, QUICK_MLP_BATCH = 10**4, 10**3
MLP_ARGNUM = 2  # W2
SEED = 0

ROUNDS, QUICK_ROUNDS = 5, 2
TARGET_MS = 20.0
ALLOC_CALLS = 20

RTOL = 1e-10  # hybridad and the hand-written rows
RTOL_JAX = 1e-9
FD_EPS, FD_RTOL = 1e-6, 1e-5

THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
              "NUMBA_THREADING_LAYER", "HYBRIDAD_CACHE_DIR")

COLUMNS = (  # (header, row key, format)
    ("workload", "workload", "{}"),
    ("impl", "impl", "{}"),
    ("n / shape", "size", "{}"),
    ("chunk", "chunk", "{}"),
    ("median_us", "median_us", "{:.1f}"),
    ("min_us", "min_us", "{:.1f}"),
    ("max_us", "max_us", "{:.1f}"),
    ("ratio", "ratio", "{:.2f}"),
    ("first_call_s", "first_call_s", "{:.3f}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("rel_err", "rel_err", "{:.1e}"),
)


@dataclasses.dataclass
class Row:
    """One implementation of a workload: ``call()`` is what is timed."""

    impl: str
    call: Callable
    chunk: object = "-"
    first_call_s: float | None = None
    rel_err: float | None = None
    hybridad: bool = False  # allocations are counted for hybridad rows
    baseline: bool = False
    times: list | None = None  # timed elsewhere (the jax rows: JaxRows), per round
    calls_per_round: int | None = None


def timed_first(make):
    """``make()`` -> (call, extra); returns (call, extra, seconds of make + first call)."""
    t0 = time.perf_counter()
    call, extra = make()
    call()
    return call, extra, time.perf_counter() - t0


def check(name, err, tol):
    assert err <= tol, f"{name}: relative error {err:.2e} > {tol:g}"
    return err


# --- JAX ------------------------------------------------------------------------------


def jax_available():
    """(True, None) when jax imports (x64 enabled), else (False, why)."""
    if importlib.util.find_spec("jax") is None:
        return False, "jax is not installed"
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
        return False, f"import jax failed: {exc!r}"
    return True, None


class JaxRows:
    """The jax rows of every workload, timed in a process of their own (XLA's
    thread pool and numba's, in one process on 2 cores, slowed the parallel
    plans up to 2x: the dense Hessian at n = 1000 ran 2.96 ms beside jax against
    1.51 alone), before hybridad's rows, with the same batches and rounds;
    their results come back as files, checked here against the workload's
    reference."""

    def __init__(self, settings):
        import json
        import subprocess
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        sizes = {"rosen hessian": list(settings.rosen_sizes),
                 "dense hessian": list(settings.rosen_sizes),
                 "jacobian": [None], "mlp hvp": [settings.mlp_batch]}
        spec = json.dumps({"dir": self._dir.name, "sizes": sizes, "rounds": settings.rounds,
                           "target_ms": settings.target_ms})
        got = subprocess.run([sys.executable, __file__, "--jax-worker", spec],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"})
        self._jobs = json.loads(got.stdout.strip().splitlines()[-1])

    def rows(self, workload, size, want):
        """The jax rows of ``workload`` at ``size``, their results checked
        against ``want``."""
        out = []
        for job in self._jobs:
            if job["workload"] == workload and job["size"] == size:
                got = np.load(job["path"])
                err = check(job["name"], relative_error(got, want), RTOL_JAX)
                out.append(Row(job["name"], None, first_call_s=job["first_call_s"],
                               rel_err=err, times=job["times"],
                               calls_per_round=job["calls_per_round"]))
        return out


def jax_worker(spec):
    """The jax rows (``--jax-worker``): each workload's jobs built, called
    once (``first_call_s``), timed in rounds of ~``target_ms`` batches after
    an untimed call, their results saved; prints the jobs as JSON."""
    import json

    import jax

    jax.config.update("jax_enable_x64", True)
    spec = json.loads(spec)
    jobs = []
    makers = {"rosen hessian": rosen_jax, "dense hessian": dense_jax, "jacobian": jacobian_jax,
              "mlp hvp": mlp_jax}
    jax.jit(jax.hessian(rosen_jnp))(np.linspace(-1.0, 1.0, 4)).block_until_ready()  # warm-up
    for workload, sizes in spec["sizes"].items():
        for size in sizes:
            for name, make, args in makers[workload](size):
                t0 = time.perf_counter()
                fn = make()
                result = fn(*args)
                jax.block_until_ready(result)
                first = time.perf_counter() - t0

                def call(fn=fn, args=args):
                    return jax.block_until_ready(fn(*args))

                number = calls_per_batch(call, spec["target_ms"] * 1e6)
                times = []
                with gc_disabled():
                    for _ in range(spec["rounds"]):
                        call()
                        times.append(batch_ns(call, number) / number / 1e3)
                path = os.path.join(spec["dir"], f"{len(jobs)}.npy")
                np.save(path, np.asarray(result))
                jobs.append({"workload": workload, "size": size, "name": name, "path": path,
                             "first_call_s": first, "times": times,
                             "calls_per_round": number})
    print(json.dumps(jobs))


# --- Rosenbrock Hessian ---------------------------------------------------------------


def rosen_np(x):
    """scipy's ``rosen`` as plain numpy code: what hybridad and jax differentiate."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_jnp(x):
    import jax.numpy as jnp

    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _rosen_hess_kernel(x, h):
    """The Rosenbrock Hessian into ``h`` (n, n): zeroed, then the three diagonals."""
    n = x.shape[0]
    h[:, :] = 0.0
    for i in range(n - 1):
        a = x[i]
        h[i, i] += 1200.0 * a * a - 400.0 * x[i + 1] + 2.0
        h[i + 1, i + 1] += 200.0
        off = -400.0 * a
        h[i, i + 1] = off
        h[i + 1, i] = off


def rosen_rows(n, jax_rows):
    x = np.random.default_rng(SEED).uniform(-1.0, 1.0, n)
    want_h, want_v, want_g = rosen_hess(x), rosen(x), rosen_der(x)
    rows = []

    def hand_numba():
        import numba

        kernel = numba.njit(cache=False)(_rosen_hess_kernel)
        h = np.empty((n, n))
        return (lambda: kernel(x, h)), h

    call, h, first = timed_first(hand_numba)
    rows.append(Row("hand numba", call, first_call_s=first, baseline=True,
                    rel_err=check("hand numba Hessian", relative_error(h, want_h), RTOL)))
    call, _, first = timed_first(lambda: ((lambda: rosen_hess(x)), None))
    rows.append(Row("scipy rosen_hess", call, first_call_s=first, rel_err=0.0))

    seen = set()
    for chunk in ROSEN_CHUNKS:
        k = n if chunk == "n" else chunk

        def build(k=k):
            plan = ha.compile(rosen_np, x, hessian=True, chunk=k)
            res = ha.HessianResult(x)
            return (lambda: plan.hessian(x, out=res)), (plan, res)

        call, (plan, res), first = timed_first(build)
        if plan.chunk in seen:  # the default chunk is one of the others
            continue
        seen.add(plan.chunk)
        name = f"hybridad hessian{' (default chunk)' if chunk is None else ''}"
        err = check(f"{name} K={plan.chunk}", relative_error(res.hessian, want_h), RTOL)
        check(f"{name} value", relative_error(res.value, want_v), RTOL)
        check(f"{name} gradient", relative_error(res.gradient, want_g), RTOL)
        rows.append(Row(name, call, chunk=plan.chunk, first_call_s=first, rel_err=err,
                        hybridad=True))

    if jax_rows is not None:
        rows += jax_rows.rows("rosen hessian", n, want_h)
    return rows


def rosen_jax(n):
    """The jax rows' (name, make, args) (in the jax worker)."""
    import jax
    import jax.numpy as jnp

    x = np.random.default_rng(SEED).uniform(-1.0, 1.0, n)
    return [("jax.jit(hessian)", lambda: jax.jit(jax.hessian(rosen_jnp)), (jnp.asarray(x),))]


# --- a dense Hessian -----------------------------------------------------------------


def dense_np(x, A):
    """A Hessian dense in every entry (no structure to color): log-sum-exp, a
    30-row product inside tanh, and a quartic."""
    return np.log(np.sum(np.exp(x))) + np.sum(np.tanh(A @ x) ** 2) + 0.1 * np.sum(x ** 4)


def dense_jnp(x, A):
    import jax.numpy as jnp

    return jnp.log(jnp.sum(jnp.exp(x))) + jnp.sum(jnp.tanh(A @ x) ** 2) + 0.1 * jnp.sum(x ** 4)


def dense_data(n):
    rng = np.random.default_rng(SEED)
    return rng.uniform(-1.0, 1.0, n), rng.standard_normal((30, n)) / np.sqrt(n)


def dense_rows(n, jax_rows):
    x, A = dense_data(n)
    every = ha.compile(dense_np, x, A, hessian=True, backend="numpy").hessian(x, A)
    want_h = every.hessian
    rows = []

    def build():
        plan = ha.compile(dense_np, x, A, hessian=True)
        res = ha.HessianResult(x)
        return (lambda: plan.hessian(x, A, out=res)), (plan, res)

    call, (plan, res), first = timed_first(build)
    assert plan._compression is None  # (a dense pattern: the every-column chunks)
    err = check("dense hessian", relative_error(res.hessian, want_h), RTOL)
    rows.append(Row("hybridad hessian (default chunk)", call, chunk=plan.chunk,
                    first_call_s=first, rel_err=err, hybridad=True, baseline=True))
    if jax_rows is not None:
        rows += jax_rows.rows("dense hessian", n, want_h)
    return rows


def dense_jax(n):
    """The jax rows' (name, make, args) (in the jax worker)."""
    import jax
    import jax.numpy as jnp

    x, A = dense_data(n)
    return [("jax.jit(hessian)", lambda: jax.jit(jax.hessian(dense_jnp)),
             (jnp.asarray(x), jnp.asarray(A)))]


# --- Jacobian 50 -> 30 ----------------------------------------------------------------


def jac_case():
    rng = np.random.default_rng(SEED)
    W = rng.standard_normal((JAC_M, JAC_N)) / 7.0
    x = rng.uniform(-1.0, 1.0, JAC_N)

    def g(x):
        return np.tanh(W @ x) + 0.1 * x[:JAC_M] * x[JAC_SHIFT:]

    def g_jnp(x):
        import jax.numpy as jnp

        return jnp.tanh(W @ x) + 0.1 * x[:JAC_M] * x[JAC_SHIFT:]

    return W, x, g, g_jnp


def make_hand_jacobian(W):
    """Value and analytic Jacobian of g, the Jacobian into a preallocated (30, 50) array.

    ``d g_i / d x_j = (1 - t_i**2) W[i, j]`` plus ``0.1 x[20 + i]`` at j = i and
    ``0.1 x[i]`` at j = 20 + i (two strided views of ``J``'s flat storage).
    """
    m, n = W.shape
    J = np.empty((m, n))
    flat = J.reshape(-1)
    diag0 = flat[0:m * (n + 1):n + 1]  # J[i, i]
    diag20 = flat[JAC_SHIFT:JAC_SHIFT + m * (n + 1):n + 1]  # J[i, 20 + i]
    assert diag0.size == m and diag20.size == m

    def jac(x):
        t = np.tanh(W @ x)
        s = 1.0 - t * t
        np.multiply(s[:, None], W, out=J)
        np.add(diag0, 0.1 * x[JAC_SHIFT:], out=diag0)
        np.add(diag20, 0.1 * x[:m], out=diag20)
        return t + 0.1 * x[:m] * x[JAC_SHIFT:], J

    return jac


def jacobian_rows(jax_rows):
    W, x, g, g_jnp = jac_case()
    rows = []

    def hand():
        jac = make_hand_jacobian(W)
        return (lambda: jac(x)), jac

    call, jac, first = timed_first(hand)
    want_v, want_j = (a.copy() for a in jac(x))
    # the analytic Jacobian itself, checked against a central difference
    fd = np.stack([(g(x + 1e-6 * e) - g(x - 1e-6 * e)) / 2e-6 for e in np.eye(JAC_N)], axis=1)
    check("hand numpy Jacobian vs central difference", relative_error(want_j, fd), FD_RTOL)
    check("hand numpy value", relative_error(want_v, g(x)), RTOL)
    rows.append(Row("hand numpy", call, first_call_s=first, rel_err=0.0, baseline=True))

    for mode in ("forward", "reverse"):
        def build(mode=mode):
            plan = ha.compile(g, x, jacobian=True, mode=mode)
            res = ha.JacobianResult(g(x), x)
            return (lambda: plan.jacobian(x, out=res)), (plan, res)

        call, (plan, res), first = timed_first(build)
        name = f"hybridad {mode}"
        assert plan.mode == mode, f"{name}: plan.mode is {plan.mode!r}"
        err = check(f"{name} Jacobian", relative_error(res.jacobian, want_j), RTOL)
        check(f"{name} value", relative_error(res.value, want_v), RTOL)
        rows.append(Row(name, call, chunk=plan.chunk, first_call_s=first, rel_err=err,
                        hybridad=True))

    if jax_rows is not None:
        rows += jax_rows.rows("jacobian", None, want_j)
    return rows, f"{JAC_N}->{JAC_M}"


def jacobian_jax(_):
    """The jax rows' (name, make, args) (in the jax worker)."""
    import jax
    import jax.numpy as jnp

    _, x, _, g_jnp = jac_case()
    xj = jnp.asarray(x)
    return [(name, lambda jac_fn=jac_fn: jax.jit(jac_fn(g_jnp)), (xj,))
            for name, jac_fn in (("jax.jit(jacfwd)", jax.jacfwd), ("jax.jit(jacrev)", jax.jacrev))]


# --- MLP Hessian-vector product -------------------------------------------------------


def mlp_args(batch):
    """bench_memory's ``make_workload("mlp")`` data (the suite's MLP problem:
    W ~ N(0, 1/fan_in), b ~ N(0, 0.1^2), X ~ U(-1, 1), Y = sin(pi X) + 0.1 N(0, 1)); seeded."""
    from hybridad.bench.workloads import mlp_problem

    return mlp_problem(batch, np.random.default_rng(SEED)).args


def w2_gradient(args, w2):
    """The hand-written gradient w.r.t. W2 at W2 = ``w2``."""
    a = list(args)
    a[MLP_ARGNUM] = w2
    return mlp_numpy(*a)[1][MLP_ARGNUM]


def mlp_direction(w2):
    return np.random.default_rng(SEED + 1).standard_normal(w2.shape)


def mlp_rows(batch, jax_rows):
    args = mlp_args(batch)
    w2 = args[MLP_ARGNUM]
    v = mlp_direction(w2)
    rows = []

    call, _, first = timed_first(lambda: ((lambda: mlp_numpy(*args)), None))
    want_value, want_grads = mlp_numpy(*args)
    rows.append(Row("hand numpy gradient", call, first_call_s=first, baseline=True))

    fd = (w2_gradient(args, w2 + FD_EPS * v) - w2_gradient(args, w2 - FD_EPS * v)) / (2 * FD_EPS)

    hybridad_rows = []
    ref = fd_err = None
    for parallel in (True, False):  # the default, and serial plans (see the docstring)
        tag = "" if parallel else ", parallel=False"

        def build_full(parallel=parallel):
            plan = ha.compile(mlp, *args, argnums=MLP_ARGNUM, hessian=True, parallel=parallel)
            res = ha.HvpResult(w2)
            return (lambda: plan.hvp(*args, v=v, out=res)), res

        call, res_full, first = timed_first(build_full)
        name = f"hybridad hvp (full{tag})"
        check(f"{name} value", relative_error(res_full.value, want_value), RTOL)
        check(f"{name} gradient", relative_error(res_full.gradient, want_grads[MLP_ARGNUM]),
              RTOL)
        if ref is None:
            ref = res_full.hvp.copy()
            fd_err = check(f"{name} vs central difference of the hand gradient",
                           relative_error(ref, fd), FD_RTOL)
            rows[0].rel_err = relative_error(want_grads[MLP_ARGNUM], res_full.gradient)
        check(f"{name} vs the first", relative_error(res_full.hvp, ref), RTOL)
        hybridad_rows.append(Row(name, call, first_call_s=first, rel_err=fd_err,
                                 hybridad=True))

        def build_tangent(parallel=parallel):
            plan = ha.compile(mlp, *args, argnums=MLP_ARGNUM, hessian=True, parallel=parallel)
            plan.linearize(*args)
            res = ha.HvpResult(w2)
            return (lambda: plan.hvp(v=v, out=res)), res

        call, res_tan, first = timed_first(build_tangent)
        name = f"hybridad hvp (tangent only{tag})"
        check(f"{name} vs full", relative_error(res_tan.hvp, ref), RTOL)
        hybridad_rows.append(Row(name, call, first_call_s=first, rel_err=fd_err,
                                 hybridad=True))
    rows += hybridad_rows

    if jax_rows is not None:
        (jrow,) = jax_rows.rows("mlp hvp", batch, ref)
        for row in hybridad_rows:  # the reference: checked against jax
            row.rel_err = jrow.rel_err
        rows.append(jrow)
    return rows, f"W2 {w2.shape[0]}x{w2.shape[1]}, B={batch}"


def mlp_jax(batch):
    """The jax rows' (name, make, args) (in the jax worker)."""
    import jax
    import jax.numpy as jnp

    args = mlp_args(batch)
    v = mlp_direction(args[MLP_ARGNUM])
    jargs = tuple(jnp.asarray(a) for a in args)
    others = jargs[:MLP_ARGNUM] + jargs[MLP_ARGNUM + 1:]

    def loss_of_w2(p, rest):
        return mlp(*rest[:MLP_ARGNUM], p, *rest[MLP_ARGNUM:], xp=jnp)

    def make():
        return jax.jit(lambda p, vv, *rest: jax.jvp(
            jax.grad(lambda q: loss_of_w2(q, rest)), (p,), (vv,))[1])

    return [("jax.jit(jvp(grad))", make, (jargs[MLP_ARGNUM], jnp.asarray(v), *others))]


# --- timing ---------------------------------------------------------------------------


def calls_per_batch(call, target_ns):
    """Calls needed for a batch of about ``target_ns`` (grows a trial batch 10x at a time)."""
    number = 1
    while True:
        elapsed = batch_ns(call, number)
        if elapsed >= target_ns / 10 or number >= 10**7:
            return max(1, round(number * target_ns / max(elapsed, 1)))
        number *= 10


def time_rows(rows, rounds, target_ms):
    """Per row: microseconds per call of each round (batches interleaved, each row
    after each of the others alike, each batch after one untimed call); rows
    timed elsewhere (``times``) as they come."""
    mine = [i for i, row in enumerate(rows) if row.times is None]
    for i in mine:
        rows[i].call()  # warm-up
    per_call = [list(row.times) if row.times is not None else [] for row in rows]
    numbers = [row.calls_per_round for row in rows]
    with gc_disabled():
        for i in mine:
            numbers[i] = calls_per_batch(rows[i].call, target_ms * 1e6)
        previous = None
        for order in balanced_orders(len(mine), rounds):
            for j in order:
                i = mine[j]
                if rows[i].hybridad and previous is not None and not previous.hybridad:
                    _harness.blas_settled()  # (numpy's BLAS threads: asleep again)
                rows[i].call()  # untimed: absorbs a stall left by the previous row
                per_call[i].append(batch_ns(rows[i].call, numbers[i]) / numbers[i] / 1e3)
                previous = rows[i]
    return per_call, numbers


def allocations_per_call(call, calls):
    call()
    with count_allocations() as counts:
        for _ in range(calls):
            call()
    return counts.allocations / calls


def measure(workload, size, rows, settings):
    """Time the rows of one workload; their table rows (dicts)."""
    _harness.blas_settled()  # (after the references: numpy's BLAS threads asleep)
    per_call, numbers = time_rows(rows, settings.rounds, settings.target_ms)
    base = statistics.median(per_call[next(i for i, r in enumerate(rows) if r.baseline)])
    out = []
    for row, times, number in zip(rows, per_call, numbers, strict=True):
        median = statistics.median(times)
        allocs = allocations_per_call(row.call, ALLOC_CALLS) if row.hybridad else None
        out.append({"workload": workload, "impl": row.impl, "size": size, "chunk": row.chunk,
                    "median_us": median, "min_us": min(times), "max_us": max(times),
                    "ratio": median / base, "first_call_s": row.first_call_s,
                    "allocs_per_call": allocs, "rel_err": row.rel_err,
                    "baseline": row.baseline, "times_us": times, "calls_per_round": number,
                    "rounds": settings.rounds})
    gc.collect()
    return out


def warm_up():
    """Pay one-time process costs (lazy imports, hybridad's runtime)."""
    x = np.linspace(-1.0, 1.0, 4)
    ha.compile(rosen_np, x, hessian=True).hessian(x)
    ha.compile(lambda x: np.tanh(x) * x[0], x, jacobian=True).jacobian(x)


# --- output ---------------------------------------------------------------------------


def verdicts(rows):
    """hybridad's Hessian and Jacobian against the hand-written baselines: ratios only."""
    lines = []
    for size in sorted({r["size"] for r in rows if r["workload"] == "rosen hessian"}):
        group = [r for r in rows if r["workload"] == "rosen hessian" and r["size"] == size]
        ours = [r for r in group if r["impl"].startswith("hybridad")]
        default = next(r for r in ours if "default" in r["impl"])
        best = min(ours, key=lambda r: r["median_us"])
        scipy_row = next(r for r in group if r["impl"] == "scipy rosen_hess")
        lines.append(f"Hessian n={size}: hybridad (default chunk K={default['chunk']}) "
                     f"{default['ratio']:.2f}x the hand numba Hessian (best chunk K="
                     f"{best['chunk']}: {best['ratio']:.2f}x; scipy rosen_hess "
                     f"{scipy_row['ratio']:.2f}x)")
    jac = [r for r in rows if r["workload"] == "jacobian"]
    if jac:
        parts = [f"{r['impl'].split()[-1]} {r['ratio']:.2f}x" for r in jac
                 if r["impl"].startswith("hybridad")]
        lines.append(f"Jacobian {jac[0]['size']}: hybridad {', '.join(parts)} the hand numpy "
                     f"Jacobian")
    hvp = [r for r in rows if r["workload"] == "mlp hvp"]
    if hvp:
        parts = [f"{r['impl'][len('hybridad hvp '):]} {r['ratio']:.2f}" for r in hvp
                 if r["impl"].startswith("hybridad")]
        lines.append(f"MLP HVP ({hvp[0]['size']}): hybridad {', '.join(parts)} hand numpy "
                     f"gradients per HVP")
    for r in rows:
        if r["allocs_per_call"]:
            lines.append(f"warning: {r['workload']} {r['impl']} allocates "
                         f"{r['allocs_per_call']:g} arrays per call (expected 0)")
    return lines


def environment(settings, skipped):
    return {"python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "hybridad": ha.__version__,
            "hybridad_path": str(Path(ha.__file__).parent), "numba": version("numba"),
            "jax": version("jax"), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "quick": settings.quick, "rounds": settings.rounds,
            "target_ms": settings.target_ms, "rosen_sizes": list(settings.rosen_sizes),
            "mlp_batch": settings.mlp_batch,
            "alloc_calls": ALLOC_CALLS, "skipped": skipped,
            "thread_env": {k: os.environ.get(k) for k in THREAD_ENV}}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"Rosenbrock n = {QUICK_ROSEN_SIZES[0]} only, MLP B = {QUICK_MLP_BATCH}, "
                        f"{QUICK_ROUNDS} rounds (default n = {ROSEN_SIZES}, B = {MLP_BATCH}, "
                        f"{ROUNDS})")
    p.add_argument("--json", metavar="FILE", help='also write the rows as JSON {"rows": [...]}')
    p.add_argument("--rounds", type=int, help="timed rounds per row (median)")
    args = p.parse_args(argv)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    if rounds < 1:
        p.error("--rounds must be >= 1")
    return argparse.Namespace(
        quick=args.quick, json=args.json, rounds=rounds, target_ms=TARGET_MS,
        rosen_sizes=QUICK_ROSEN_SIZES if args.quick else ROSEN_SIZES,
        mlp_batch=QUICK_MLP_BATCH if args.quick else MLP_BATCH)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--jax-worker"]:
        return jax_worker(argv[1])
    settings = parse_args(argv)
    jax_ok, why = jax_available()
    skipped = {} if jax_ok else {"jax rows": why}
    meta = environment(settings, skipped)
    print(f"hybridad {meta['hybridad']} ({meta['hybridad_path']}), numpy {meta['numpy']}, "
          f"scipy {meta['scipy']}, numba {meta['numba']}, jax {meta['jax']}, "
          f"Python {meta['python']}, {meta['cpu_count']} CPUs, {meta['platform']}")
    print(f"{settings.rounds} interleaved rounds of ~{settings.target_ms:g} ms batches per row, "
          f"medians; float64" + (" (--quick)" if settings.quick else ""))
    thread_env = ", ".join(f"{k}={v}" for k, v in meta["thread_env"].items() if v is not None)
    print(f"environment: {thread_env or 'no thread or cache settings (library defaults)'}")
    t_start = time.perf_counter()
    jax_rows = JaxRows(settings) if jax_ok else None  # (first: its own process)
    warm_up()
    rows = []
    for n in settings.rosen_sizes:
        rows += measure("rosen hessian", n, rosen_rows(n, jax_rows), settings)
    for n in settings.rosen_sizes:
        rows += measure("dense hessian", n, dense_rows(n, jax_rows), settings)
    jrows, shape = jacobian_rows(jax_rows)
    rows += measure("jacobian", shape, jrows, settings)
    mrows, shape = mlp_rows(settings.mlp_batch, jax_rows)
    rows += measure("mlp hvp", shape, mrows, settings)
    meta["total_s"] = time.perf_counter() - t_start
    print()
    print(_harness.format_table(rows, COLUMNS, {"workload", "impl", "n / shape"}))
    print()
    for line in verdicts(rows):
        print(line)
    for what, reason in skipped.items():
        print(f"note: {what} skipped ({reason})")
    print(f"total {meta['total_s']:.0f} s")
    if settings.json:
        _harness.write_json(settings.json, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
