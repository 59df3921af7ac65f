"""ADBench's Gaussian mixture objective: the gradient against jax.jit's.

The log-likelihood of ``n`` points in ``d`` dimensions under ``k`` Gaussians
parametrized as ADBench parametrizes them -- weights ``alphas`` (k), means
(k x d), and the inverse Cholesky factors ``icf`` (k x d(d+1)/2: the log of
the diagonal, then the strictly lower part) -- with its Wishart prior,
written with numpy as a user writes it (``np.einsum("kij,knj->kni", Q,
x - mu)``, ``scipy.special.logsumexp``).  Gradient with respect to all three,
float64, at ADBench's sizes (d, k) = (2, 5), (10, 25), (20, 50), (64, 10),
n = 1000.  Rows: hybridad's gradient plan into a preallocated result, and
``jax.jit(jax.value_and_grad)`` of the same code in ``jax.numpy`` (x64,
``block_until_ready``), timed in a process of its own; both gradients are
compared (1e-10 relative).  The goal: at most 1.0x jax.jit per call.

    python benchmarks/bench_gmm.py [--sizes 2,5 10,25 ...] [--n 1000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

_harness.use_checkout()

MODEL = r'''
import numpy as np

def data(d, k, n):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(k), rng.standard_normal((k, d)),
            0.1 * rng.standard_normal((k, d * (d + 1) // 2)), rng.standard_normal((n, d)))

def objective(xp, logsumexp, X, d, k, set_lower):
    n = X.shape[0]
    rows, cols = np.tril_indices(d, -1)
    def gmm(alphas, means, icf):
        qdiag = xp.exp(icf[:, :d])
        sum_qs = xp.sum(icf[:, :d], axis=1)
        Q = set_lower(xp.zeros((k, d, d)), rows, cols, icf[:, d:]) + \
            xp.einsum("ki,ij->kij", qdiag, xp.eye(d))
        xc = X[None, :, :] - means[:, None, :]
        Qxc = xp.einsum("kij,knj->kni", Q, xc)
        main = -0.5 * xp.sum(Qxc ** 2, axis=2) + (alphas + sum_qs)[:, None]
        prior = 0.5 * xp.sum(qdiag ** 2) + 0.5 * d * xp.sum(icf[:, d:] ** 2)
        return (-n * d * 0.5 * np.log(2 * np.pi) + xp.sum(logsumexp(main, axis=0))
                - n * logsumexp(alphas) + prior)
    return gmm

def median_us(fn, rounds=30):
    import time
    fn()
    ts = []
    for _ in range(rounds):
        s = time.perf_counter(); fn(); ts.append(time.perf_counter() - s)
    return float(np.median(ts) * 1e6)
'''

JAX = MODEL + r'''
import sys, json
import jax, jax.numpy as jnp
from jax.scipy.special import logsumexp
jax.config.update("jax_enable_x64", True)
d, k, n = map(int, sys.argv[1:4])
a, m, icf, X = data(d, k, n)
f = objective(jnp, logsumexp, X, d, k, lambda z, r, c, v: z.at[:, r, c].set(v))
g = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))
v, gs = jax.block_until_ready(g(a, m, icf))
us = median_us(lambda: jax.block_until_ready(g(a, m, icf)))
print(json.dumps({"us": us, "grad": np.concatenate([np.ravel(x) for x in gs]).tolist()}))
'''


def _set_lower(z, rows, cols, values):
    z[:, rows, cols] = values
    return z


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["2,5", "10,25", "20,50", "64,10"])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    import numpy as np
    from scipy.special import logsumexp

    import hybridad as ha

    space = {}
    exec(MODEL, space)  # noqa: S102 - the model, shared with JAX's process
    rows = []
    print(f"{'d':>3} {'k':>3} {'n':>5} {'hybridad us':>12} {'jax.jit us':>11} {'ratio':>6}")
    for size in opts.sizes:
        d, k = map(int, size.split(","))
        a, m, icf, X = space["data"](d, k, opts.n)
        f = space["objective"](np, logsumexp, X, d, k, _set_lower)
        plan = ha.compile(f, a, m, icf, argnums=(0, 1, 2))
        res = plan.gradient(a, m, icf)
        us = space["median_us"](lambda: plan.gradient(a, m, icf, out=res))
        row = {"d": d, "k": k, "n": opts.n, "hybridad_us": us}
        got = subprocess.run([sys.executable, "-c", JAX, str(d), str(k), str(opts.n)],
                             capture_output=True, text=True)
        if got.returncode == 0:
            jx = json.loads(got.stdout.strip().splitlines()[-1])
            ours = np.concatenate([np.ravel(g) for g in res.gradient])
            theirs = np.asarray(jx["grad"])
            err = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
            assert err < 1e-10, f"gradients differ from JAX's: {err:.2e}"
            row.update(jax_us=jx["us"], ratio=us / jx["us"])
        rows.append(row)
        print(f"{d:>3} {k:>3} {opts.n:>5} {us:>12.1f} {row.get('jax_us', float('nan')):>11.1f} "
              f"{row.get('ratio', float('nan')):>6.2f}", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
