"""Optimizer steps fused into the backward sweep (``compile(..., update=...)``)
against gradients then the update.

Workloads (float64): bench_core's tanh MLP 1 -> 16 -> 16 -> 1 on a batch of
10^5 samples, and a wide one, 512 -> 1024 -> 1024 -> 1 on a batch of 256
(large weight matrices: the gradient buffers dominate).  For each rule (SGD,
Adam):

* ``fused``: ``plan = ha.compile(loss, *params, X, Y, argnums=..., update=rule)``,
  ``plan.step(*params, X, Y, out=res)``;
* ``gradient + update``: ``plan.gradient(..., out=res)`` into a preallocated
  ``GradientResult``, then the same update written with numpy in place
  (``p -= lr * g``; Adam's moments with ``out=``-style in-place operations).

Memory (bytes, exact): the plan's workspace arena, plus, for the unfused
loop, the gradient buffers the caller must hold (``GradientResult``); the
rule's state (Adam's moments) is the same for both and reported apart.
Time: median / min / max milliseconds per step over interleaved batches
(``hybridad.bench.harness.time_round_robin``); both variants are first
checked to produce the same parameters after 3 steps (1e-12 relative).

Usage: ``python benchmarks/bench_optim.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

import hybridad as ha  # noqa: E402
from hybridad.bench.harness import (format_table, relative_error,  # noqa: E402
                                    time_round_robin, write_json)
from hybridad.optim import SGD, Adam  # noqa: E402


def mlp3(W1, b1, W2, b2, W3, b3, X, Y):
    return _harness.mlp(W1, b1, W2, b2, W3, b3, X, Y)


def workloads(quick):
    rng = np.random.default_rng(0)
    out = {}
    for name, widths, batch in (("mlp B=1e5", (1, 16, 16, 1), 10**4 if quick else 10**5),
                                ("wide mlp B=256", (512, 1024, 1024, 1), 256)):
        params = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            params += [rng.standard_normal((a, b)) / math.sqrt(a), np.zeros(b)]
        X = rng.standard_normal((batch, widths[0]))
        Y = np.sin(X[:, :1])
        out[name] = (params, X, Y)
    return out


class NumpyUpdate:
    """The rule written with numpy, in place (what a user loop does)."""

    def __init__(self, rule, params):
        self.rule, self.t = rule, 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.tmp = [np.zeros_like(p) for p in params]

    def __call__(self, params, grads):
        rule, self.t = self.rule, self.t + 1
        for p, g, m, v, tmp in zip(params, grads, self.m, self.v, self.tmp, strict=True):
            if isinstance(rule, SGD):
                np.multiply(g, rule.lr, out=tmp)
                p -= tmp
                continue
            np.subtract(g, m, out=tmp)
            tmp *= 1 - rule.b1
            m += tmp
            np.multiply(g, g, out=tmp)
            tmp -= v
            tmp *= 1 - rule.b2
            v += tmp
            lr_t, eps_t = rule.hyper(self.t)
            np.sqrt(v, out=tmp)
            tmp += eps_t
            np.divide(m, tmp, out=tmp)
            tmp *= lr_t
            p -= tmp


def measure(name, params, X, Y, rule, repeats, target_ms):
    argnums = tuple(range(len(params)))
    fused_p = [p.copy() for p in params]
    loop_p = [p.copy() for p in params]
    fused = ha.compile(mlp3, *fused_p, X, Y, argnums=argnums, update=rule)
    grad = ha.compile(mlp3, *loop_p, X, Y, argnums=argnums, wait=True)
    out, res = ha.DiffResult(np.zeros(())), ha.GradientResult(tuple(loop_p))
    update = NumpyUpdate(rule, loop_p)

    def step_fused():
        fused.step(*fused_p, X, Y, out=out)

    def step_loop():
        grad.gradient(*loop_p, X, Y, out=res)
        update(loop_p, res.gradient)

    for _ in range(3):
        step_fused()
        step_loop()
    err = max(relative_error(a, b) for a, b in zip(fused_p, loop_p, strict=True))
    if err > 1e-12:
        raise SystemExit(f"{name} {rule}: fused step disagrees ({err:.1e})")
    timings = time_round_robin([step_fused, step_loop], repeats, target_ms)
    grads = sum(p.nbytes for p in params)
    state = grads * len(rule.state)
    rows = []
    for label, plan, extra, (median, lo, hi, _) in (
            ("fused", fused, 0, timings[0]), ("gradient + update", grad, grads, timings[1])):
        rows.append({"workload": name, "rule": type(rule).__name__, "impl": label,
                     "arena": plan.memory.total_bytes, "gradients": extra,
                     "total": plan.memory.total_bytes + extra, "state": state,
                     "median_ms": median / 1e3, "min_ms": lo / 1e3, "max_ms": hi / 1e3})
    saved = rows[1]["total"] - rows[0]["total"]
    rows[0]["saved"], rows[1]["saved"] = saved, 0
    return rows


COLUMNS = (("workload", "workload", "{}"), ("rule", "rule", "{}"), ("impl", "impl", "{}"),
           ("arena", "arena", "{:,}"), ("+ gradients", "gradients", "{:,}"),
           ("total", "total", "{:,}"), ("saved", "saved", "{:,}"), ("state", "state", "{:,}"),
           ("median_ms", "median_ms", "{:.2f}"), ("min_ms", "min_ms", "{:.2f}"),
           ("max_ms", "max_ms", "{:.2f}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="batch 1e4 for the MLP, 3 rounds")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    repeats, target_ms = (3, 10.0) if args.quick else (7, 50.0)
    rows = []
    for name, (params, X, Y) in workloads(args.quick).items():
        for rule in (SGD(1e-3), Adam(1e-3)):
            rows += measure(name, params, X, Y, rule, repeats, target_ms)
    print(format_table(rows, COLUMNS, {"workload", "rule", "impl"}))
    if args.json:
        write_json(args.json, rows, {"quick": args.quick})
    return 0


if __name__ == "__main__":
    sys.exit(main())
