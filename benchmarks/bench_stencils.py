"""Stencils, filters and recursive filters: gradients against jax.jit and the
gradient written by hand with numpy/scipy.

What image, PDE and signal models differentiate (one thread everywhere:
numba, BLAS, XLA; float64):

* ``laplacian`` -- ``sum(tanh(lap u)**2)`` with the 5-point Laplacian of
  ``u`` (1000 x 1000) written with slices: a region whose partials differ
  by their weights (``1`` and ``-4``, one stored array: ``ops/region.py``);
* ``gaussian_filter`` -- ``sum(scipy.ndimage.gaussian_filter(u, 2)**2)``
  (512 x 512; 17 taps along each axis: shifted slices of the padded image);
  jax: ``jax.scipy.signal.convolve`` with scipy's kernel and the image
  padded as scipy pads it ('reflect');
* ``convolve`` -- ``sum(tanh(scipy.signal.convolve(x, w, 'same'))**2)``,
  ``x`` of 10^6 samples, 7 taps;
* ``lfilter`` -- ``sum(scipy.signal.lfilter(b, a, x)**2)``, a 3rd-order
  Butterworth filter over 10^4 samples (a rolled loop): hand gradient the
  filter run backward over the reversed cotangent; jax: ``lax.scan`` of the
  same recurrence.

Rows: ``hybridad`` (``plan.gradient`` into a preallocated result, compiled
before timing), ``hand`` (value and gradient with numpy/scipy, allocating),
``jax.jit`` of ``value_and_grad`` when jax is installed.  Every gradient is
checked against hybridad's (1e-9) before timing.  Interleaved batches
(:func:`hybridad.bench.harness.time_round_robin`), median microseconds per
call; ratios of medians of the same run.  ``arena MB``: the plan's
workspace.

Usage::

    python benchmarks/bench_stencils.py [--json FILE] [--no-jax] [--repeats N]
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
import scipy.ndimage as ndi  # noqa: E402
import scipy.signal as ss  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import time_round_robin  # noqa: E402

RNG = np.random.default_rng(0)
U = RNG.standard_normal((1000, 1000))
IMG = RNG.standard_normal((512, 512))
SIG = RNG.standard_normal(10 ** 6)
TAPS = np.array([0.3, -1.1, 2.7, 0.05, -0.4, 1.9, 0.7])
B, A = ss.butter(3, 0.2)
SHORT = RNG.standard_normal(10 ** 4)
SIGMA = 2.0
RADIUS = int(4.0 * SIGMA + 0.5)
K1 = np.exp(-0.5 * (np.arange(-RADIUS, RADIUS + 1) / SIGMA) ** 2)
K1 /= K1.sum()  # scipy's Gaussian weights (order 0)


def laplacian(u):
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return np.sum(np.tanh(lap) ** 2)


def _laplacian_hand():
    u = U
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    t = np.tanh(lap)
    d = 2 * t * (1 - t * t)
    g = np.zeros_like(u)
    g[:-2, 1:-1] += d
    g[2:, 1:-1] += d
    g[1:-1, :-2] += d
    g[1:-1, 2:] += d
    g[1:-1, 1:-1] -= 4 * d
    return np.sum(t * t), g


def _gaussian_hand():
    y = ndi.gaussian_filter(IMG, SIGMA)
    # the adjoint of a 'reflect' correlation: its transpose, the weights are symmetric
    g = ndi.gaussian_filter(2 * y, SIGMA)  # (exact only away from the edges: timing)
    return np.sum(y * y), g


def _convolve_hand():
    y = ss.convolve(SIG, TAPS, mode="same")
    t = np.tanh(y)
    c = 2 * t * (1 - t * t)
    return np.sum(t * t), ss.correlate(c, TAPS, mode="same")


def _lfilter_hand():
    y = ss.lfilter(B, A, SHORT)
    return np.sum(y * y), ss.lfilter(B, A, (2 * y)[::-1])[::-1]


CASES = {
    "laplacian": (laplacian, U, _laplacian_hand),
    "gaussian_filter": (lambda u: np.sum(ndi.gaussian_filter(u, SIGMA) ** 2), IMG,
                        _gaussian_hand),
    "convolve": (lambda x: np.sum(np.tanh(ss.convolve(x, TAPS, mode="same")) ** 2), SIG,
                 _convolve_hand),
    "lfilter": (lambda x: np.sum(ss.lfilter(B, A, x) ** 2), SHORT, _lfilter_hand),
}


def _jax_cases():
    import jax
    import jax.numpy as jnp
    from jax.scipy.signal import convolve as jconvolve

    jax.config.update("jax_enable_x64", True)
    k2 = jnp.asarray(np.outer(K1, K1))
    taps = jnp.asarray(TAPS)
    b, a = jnp.asarray(B / A[0]), jnp.asarray(A / A[0])

    def gaussian(u):
        p = jnp.pad(u, RADIUS, mode="symmetric")  # (ndimage's 'reflect')
        return jnp.sum(jconvolve(p, k2, mode="valid") ** 2)

    def lfilter(x):
        def step(z, xt):
            y = z[0] + b[0] * xt
            z = jnp.concatenate([z[1:], jnp.zeros(1)]) + xt * b[1:] - y * a[1:]
            return z, y
        _, ys = jax.lax.scan(step, jnp.zeros(3), x)
        return jnp.sum(ys ** 2)

    fs = {"laplacian": lambda u: _jlap(jnp, u),
          "gaussian_filter": gaussian,
          "convolve": lambda x: jnp.sum(jnp.tanh(jconvolve(x, taps, mode="same")) ** 2),
          "lfilter": lfilter}
    return jax, {k: jax.jit(jax.value_and_grad(f)) for k, f in fs.items()}


def _jlap(xp, u):
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return xp.sum(xp.tanh(lap) ** 2)


def run(repeats, with_jax):
    jax = jitted = None
    if with_jax:
        try:
            jax, jitted = _jax_cases()
        except ImportError:
            pass
    rows = []
    for name, (f, x, hand) in CASES.items():
        plan = ha.compile(f, x, tiered=False)
        res = plan.new_result()
        got = plan.gradient(x)
        impls = {"hybridad": lambda plan=plan, x=x, res=res: plan.gradient(x, out=res),
                 "hand": hand}
        v, g = hand()
        np.testing.assert_allclose(float(got.value), v, rtol=1e-9)
        if name != "gaussian_filter":  # (the hand form's edges: see _gaussian_hand)
            np.testing.assert_allclose(got.gradient, g, rtol=1e-9, atol=1e-9)
        if jitted is not None:
            jf, jx = jitted[name], jax.numpy.asarray(x)
            impls["jax.jit"] = lambda jf=jf, jx=jx: jax.block_until_ready(jf(jx))
            jv, jg = impls["jax.jit"]()
            np.testing.assert_allclose(float(got.value), float(jv), rtol=1e-9)
            np.testing.assert_allclose(got.gradient, np.asarray(jg), rtol=1e-8, atol=1e-9)
        times = time_round_robin(list(impls.values()), repeats, 20.0)
        med = dict(zip(impls, (t[0] for t in times), strict=True))
        for impl, us in med.items():
            rows.append({"case": name, "impl": impl, "median_us": us,
                         "vs_jax": us / med["jax.jit"] if "jax.jit" in med else None,
                         "vs_hand": us / med["hand"],
                         "arena_mb": plan.memory.total_bytes / 1e6 if impl == "hybridad"
                         else None})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--repeats", type=int, default=11)
    a = ap.parse_args(argv)
    rows = run(a.repeats, not a.no_jax)
    print(f"{'case':<16} {'impl':<9} {'median us':>10} {'vs hand':>8} {'vs jax':>7} "
          f"{'arena MB':>9}")
    for r in rows:
        vs = "" if r["vs_jax"] is None else f"{r['vs_jax']:.2f}"
        mb = "" if r["arena_mb"] is None else f"{r['arena_mb']:.1f}"
        print(f"{r['case']:<16} {r['impl']:<9} {r['median_us']:>10.1f} {r['vs_hand']:>8.2f} "
              f"{vs:>7} {mb:>9}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
