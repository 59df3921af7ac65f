"""Gradients over narrow rows: 10^6 elements as (10^6 / K, K) with K from 3 to 32.

The shapes of everyday models: a layer of 10 units, 10 features, 10 classes,
3 coordinates.  With an innermost extent below 16 LLVM unrolls a generated
loop's constant inner count and vectorizes nothing, so each case is measured
at K = 5, 10 and 32 (``--quick``: 10 only), one thread everywhere (numba,
BLAS, XLA), float64:

* ``bias`` -- ``sum(tanh(X + b) ** 2)``, w.r.t. ``b`` and ``X`` (a bias read
  by every row: ``backends/numba/tiles.py``);
* ``diag_gauss`` -- a diagonal Gaussian's NLL, w.r.t. the mean and the log
  scale per column (their gradients summed over the rows: ``leading.py``);
* ``softmax_ce`` -- softmax cross-entropy with ``scipy.special.logsumexp``
  over the K classes, w.r.t. the logits (sums over short rows: ``rowblocks.py``);
* ``row_norm`` -- ``sum(Y * Z / |Z|_rows)``, w.r.t. ``Z``.

Rows: ``hybridad`` (``plan.gradient`` into a preallocated result, the plan
compiled before timing), ``hand numpy`` (the gradient written with numpy,
allocating) where given, and ``jax.jit`` of ``value_and_grad`` when jax is
installed.  Values and gradients are checked against jax's (1e-9).
Interleaved batches (:func:`hybridad.bench.harness.time_round_robin`),
median microseconds per call; ratios of medians in the same run.

Usage::

    python benchmarks/bench_narrow.py [--quick] [--json FILE] [--no-jax]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.update(NUMBA_NUM_THREADS="1", HYBRIDAD_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                  OMP_NUM_THREADS="1", JAX_PLATFORMS="cpu",
                  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402
import scipy.special  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import time_round_robin  # noqa: E402

N = 10 ** 6


def _cases(xp, sp):
    def bias(b, X):
        return xp.sum(xp.tanh(X + b) ** 2)

    def diag_gauss(p, X):
        d = X.shape[1]
        z = (X - p[:d]) * xp.exp(-p[d:])
        return 0.5 * xp.sum(z ** 2) + X.shape[0] * xp.sum(p[d:])

    def softmax_ce(Z, Y):
        return -xp.sum(Y * (Z - sp.logsumexp(Z, axis=1, keepdims=True)))

    def row_norm(Z, Y):
        return xp.sum(Y * Z / xp.sqrt(xp.sum(Z * Z, axis=1, keepdims=True)))

    return {"bias": (bias, (0, 1)), "diag_gauss": (diag_gauss, 0),
            "softmax_ce": (softmax_ce, 0), "row_norm": (row_norm, 0)}


def _hand(name, args):
    """The gradient written with numpy (value, gradient), or None."""
    if name == "diag_gauss":
        p, X = args
        d = X.shape[1]
        s = np.exp(-p[d:])
        z = (X - p[:d]) * s
        return lambda: (0.5 * np.sum(z * z) + X.shape[0] * np.sum(p[d:]),
                        np.concatenate([-(z * s).sum(0), -(z * z).sum(0) + X.shape[0]]))
    if name == "softmax_ce":
        Z, Y = args

        def ce():
            m = Z.max(axis=1, keepdims=True)
            e = np.exp(Z - m)
            s = e.sum(axis=1, keepdims=True)
            lse = m + np.log(s)
            return -np.sum(Y * (Z - lse)), Y.sum(axis=1, keepdims=True) * e / s - Y
        return ce
    return None


def _args(name, K, rng):
    B = N // K
    X = rng.standard_normal((B, K))
    if name == "bias":
        return (0.1 * rng.standard_normal(K), X)
    if name == "diag_gauss":
        return (0.1 * rng.standard_normal(2 * K), X)
    return (X, rng.random((B, K)))


def run(widths, repeats, with_jax):
    rng = np.random.default_rng(0)
    ours = _cases(np, scipy.special)
    theirs = None
    if with_jax:
        try:
            import jax
            import jax.numpy as jnp
            import jax.scipy.special as jsp

            jax.config.update("jax_enable_x64", True)
            theirs = _cases(jnp, jsp)
        except ImportError:
            theirs = None
    rows = []
    for name, (f, argnums) in ours.items():
        for K in widths:
            args = _args(name, K, rng)
            plan = ha.compile(f, *args, argnums=argnums, tiered=False)
            res = plan.new_result()
            impls = {"hybridad": lambda plan=plan, args=args, res=res: plan.gradient(*args,
                                                                                  out=res)}
            hand = _hand(name, args)
            if hand is not None:
                impls["hand numpy"] = hand
            if theirs is not None:
                jf = jax.jit(jax.value_and_grad(theirs[name][0], argnums=argnums))
                jargs = tuple(jnp.asarray(a) for a in args)
                impls["jax.jit"] = lambda jf=jf, jargs=jargs: jax.block_until_ready(jf(*jargs))
                v, g = impls["jax.jit"]()
                got = plan.gradient(*args)
                np.testing.assert_allclose(float(got.value), float(v), rtol=1e-9)
                for a, b in zip(got.gradient if isinstance(argnums, tuple) else [got.gradient],
                                g if isinstance(argnums, tuple) else [g], strict=True):
                    np.testing.assert_allclose(a, np.asarray(b), rtol=1e-9, atol=1e-9)
            times = time_round_robin(list(impls.values()), repeats, 20.0)
            med = dict(zip(impls, (t[0] for t in times), strict=True))
            for impl, us in med.items():
                rows.append({"case": name, "K": K, "impl": impl, "median_us": us,
                             "vs_jax": us / med["jax.jit"] if "jax.jit" in med else None})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args(argv)
    rows = run((10,) if a.quick else (5, 10, 32), a.repeats, not a.no_jax)
    print(f"{'case':<11} {'K':>3} {'impl':<11} {'median us':>10} {'vs jax':>7}")
    for r in rows:
        vs = "" if r["vs_jax"] is None else f"{r['vs_jax']:.2f}"
        print(f"{r['case']:<11} {r['K']:>3} {r['impl']:<11} {r['median_us']:>10.1f} {vs:>7}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
