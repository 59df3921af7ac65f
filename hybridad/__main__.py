"""Command line: ``python -m hybridad demo``.

``demo`` runs a short optimizer loop (gradient descent on a regularized
logistic regression) that calls ``gradient(loss, w, X, y, out=res)`` every
step, and prints the value, the gradient norm and the numpy bytes allocated
per call, counted exactly.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def loss(w, X, y, lam):
    margins = y * (X @ w)
    return np.mean(np.logaddexp(0.0, -margins)) + 0.5 * lam * np.sum(w * w)


def demo(steps=200, n_samples=500, n_features=100, seed=0):
    import hybridad as ha
    from hybridad.testing import count_allocations

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    w_true = rng.standard_normal(n_features)
    y = np.sign(X @ w_true + 0.1 * rng.standard_normal(n_samples))
    w = np.zeros(n_features)
    lam, lr = 1e-3, 0.5

    res = ha.GradientResult(w)
    t0 = time.perf_counter()
    ha.gradient(loss, w, X, y, lam, out=res)  # first call: trace + build the plan
    build = time.perf_counter() - t0
    print(f"hybridad demo: logistic regression, {n_samples} samples x {n_features} features")
    print(f"first call (trace + plan): {build * 1e3:.1f} ms")
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
    return per_call


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hybridad")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="optimizer loop printing value, |grad|, bytes per call")
    d.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(steps=args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
