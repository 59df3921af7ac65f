"""scikit-learn's losses as shipped, differentiated by hybridad, against
scikit-learn's own hand-written gradients.

* ``mlp``: ``MLPClassifier``'s forward pass -- ``BaseMultilayerPerceptron.
  _forward_pass`` itself, every activation in place (``np.maximum(X, 0,
  out=X)``, in-place softmax) -- and its loss (``log_loss`` of
  ``sklearn.neural_network._base`` plus ``_backprop``'s L2 term), a network
  64-256-256-10 (relu) at sklearn's default minibatch B = 200 and at B = 1024;
  ``ha.gradient(loss, *coefs, *intercepts, out=res)`` against
  ``model._backprop(X, Y, None, activations, deltas, coef_grads,
  intercept_grads)``.
* ``huber``: ``HuberRegressor``'s ``_huber_loss_and_gradient(w, X, y,
  epsilon, alpha, sample_weight)[0]`` -- its outliers a mask computed from
  the values (``abs_linear_loss[outliers_mask]``, a guarded decision in
  hybridad) -- at n = 10^4 and 10^5 samples of 20 features;
  ``ha.gradient(..., out=res)`` against the same function's value and
  hand-written gradient.

Both sides checked to agree to 1e-12 first.  Each side runs in a process of
its own, as a training loop runs one of them: rounds of fresh processes, the
two sides taking turns (which goes first alternating), each process timing
batches of about 100 ms after a warm-up; the medians of all batches,
microseconds per call, and their ratio (the goal: at most 1.0).
``--same-process`` interleaves the two sides' batches in one process instead
(``hybridad.bench.harness.time_round_robin``): there, after each of
scikit-learn's matrix products numpy's OpenBLAS workers spin for about 0.1 s
on the cores the plan's threads then run on, so that measure says as much
about the two thread pools sharing 2 cores as about either side.

Usage: ``python benchmarks/bench_sklearn.py [--quick] [--same-process] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402,F401  (the checkout first on sys.path)

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import (format_table, relative_error, time_round_robin,  # noqa: E402
                                    write_json)


def mlp_case(B):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.neural_network import _multilayer_perceptron as mod
    from sklearn.neural_network._base import LOSS_FUNCTIONS

    rng = np.random.default_rng(0)
    X = rng.standard_normal((B, 64))
    labels = rng.integers(0, 10, B)
    model = MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=1, alpha=1e-4,
                          random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, labels)
    Y = model._label_binarizer.transform(labels).astype(np.float64)
    L = len(model.coefs_)

    def loss(*params):  # what _backprop computes before its hand-written backward pass
        net = types.SimpleNamespace(n_layers_=model.n_layers_, activation=model.activation,
                                    out_activation_=model.out_activation_,
                                    coefs_=list(params[:L]), intercepts_=list(params[L:]))
        activations = mod.BaseMultilayerPerceptron._forward_pass(net, [X] + [None] * L)
        value = LOSS_FUNCTIONS["log_loss"](Y, activations[-1])
        values = 0
        for s in net.coefs_:
            s = s.ravel()
            values += np.dot(s, s)
        return value + (0.5 * model.alpha) * values / X.shape[0]

    params = [*model.coefs_, *model.intercepts_]
    argnums = tuple(range(len(params)))
    res = ha.gradient(loss, *params, argnums=argnums)
    activations = [X] + [None] * L
    deltas = [None] * L
    coef_grads = [np.empty_like(c) for c in model.coefs_]
    intercept_grads = [np.empty_like(b) for b in model.intercepts_]
    value, cg, ig = model._backprop(X, Y, None, activations, deltas, coef_grads,
                                    intercept_grads)
    err = max(relative_error(np.array(float(res.value)), np.array(value)),
              *(relative_error(a, b) for a, b in zip(res.gradient, [*cg, *ig], strict=True)))

    def ours():
        ha.gradient(loss, *params, argnums=argnums, out=res)

    def theirs():
        model._backprop(X, Y, None, activations, deltas, coef_grads, intercept_grads)

    return ours, theirs, err


def huber_case(n):
    from sklearn.linear_model._huber import _huber_loss_and_gradient

    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, 20))
    y = X @ rng.standard_normal(20) + rng.standard_normal(n) * np.where(
        rng.uniform(size=n) < 0.1, 8.0, 1.0)
    w = np.concatenate([rng.standard_normal(20) * 0.1, [0.0, 1.0]])  # coefs, intercept, scale
    sw = np.ones(n)

    def loss(w):
        return _huber_loss_and_gradient(w, X, y, 1.35, 1e-4, sw)[0]

    res = ha.gradient(loss, w)
    value, grad = _huber_loss_and_gradient(w, X, y, 1.35, 1e-4, sw)
    err = max(relative_error(np.array(float(res.value)), np.array(value)),
              relative_error(res.gradient, grad))

    def ours():
        ha.gradient(loss, w, out=res)

    def theirs():
        _huber_loss_and_gradient(w, X, y, 1.35, 1e-4, sw)

    return ours, theirs, err


COLUMNS = (("loss", "loss", "{}"), ("size", "size", "{}"),
           ("ha.gradient us", "ours", "{:,.1f}"), ("scikit-learn us", "theirs", "{:,.1f}"),
           ("ratio", "ratio", "{:.2f}"), ("rel. error", "err", "{:.1e}"))


CASES = {"mlp": mlp_case, "huber": huber_case}


def child(name, arg, side, batches, target_ms):
    """One side of a case timed in this process: per-call microseconds of
    ``batches`` batches of about ``target_ms`` each, after a warm-up."""
    ours, theirs, _ = CASES[name](arg)
    call = ours if side == "ours" else theirs
    start = time.perf_counter()
    while time.perf_counter() - start < 0.2:  # warm-up: caches, thread pools, the plan
        call()
    out = []
    for _ in range(batches):
        n, t0 = 0, time.perf_counter()
        while True:
            call()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= target_ms / 1e3:
                break
        out.append(elapsed / n * 1e6)
    return out


def isolated(name, arg, rounds, batches, target_ms):
    """Median per-call microseconds of ``(ours, theirs)``, each side in fresh
    processes of its own, the sides taking turns round by round."""
    per = {"ours": [], "theirs": []}
    for r in range(rounds):
        for side in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
            out = subprocess.run([sys.executable, __file__, "--child", name, str(arg), side,
                                  str(batches), str(target_ms)],
                                 capture_output=True, text=True, check=True)
            per[side] += json.loads(out.stdout.strip().splitlines()[-1])
    return statistics.median(per["ours"]), statistics.median(per["theirs"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the smaller sizes, 3 rounds")
    p.add_argument("--same-process", action="store_true",
                   help="interleave both sides' batches in one process")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, arg, side, batches, target_ms = args.child
        print(json.dumps(child(name, int(arg), side, int(batches), float(target_ms))))
        return 0
    repeats, target_ms = (3, 30.0) if args.quick else (9, 100.0)
    cases = [("mlp", f"B={B}", mlp_case, B) for B in ((200,) if args.quick else (200, 1024))]
    cases += [("huber", f"n={n:,}", huber_case, n)
              for n in ((10**4,) if args.quick else (10**4, 10**5))]
    rows = []
    for name, size, make, arg in cases:
        ours, theirs, err = make(arg)
        if err > 1e-12:
            raise SystemExit(f"{name} {size}: hybridad and scikit-learn disagree ({err:.1e})")
        if args.same_process:
            (a, *_), (b, *_) = time_round_robin([ours, theirs], repeats, target_ms)
        else:
            a, b = isolated(name, arg, 2 if args.quick else 4, repeats, target_ms)
        rows.append({"loss": name, "size": size, "ours": a, "theirs": b, "ratio": a / b,
                     "err": err})
    print(format_table(rows, COLUMNS, {"loss", "size"}))
    if args.json:
        write_json(args.json, rows, {"quick": args.quick, "same_process": args.same_process})
    return 0


if __name__ == "__main__":
    sys.exit(main())
