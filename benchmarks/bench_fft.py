"""np.fft in traced code: the gradient plan (numba, the default backend) per
call, against ``jax.jit(jax.value_and_grad(f))`` of the same function in
``jax.numpy`` (where JAX is installed) and against a hand-written numpy
gradient, in one run.

Cases (float64, n samples):

* ``power`` -- ``sum(w * |rfft(x)|^2)``; by hand: ``rfft``, then the
  gradient ``irfft(2 w X / c, norm="forward")`` (``c``: irfft's weights);
* ``convolution`` -- ``sum(irfft(rfft(x) * K)^2)``, a circular convolution
  with a fixed kernel; by hand: ``y``, then ``irfft(rfft(2 y) * conj(K))``;
* ``complex_filter`` -- ``sum(|ifft(fft(x * e^{i x}) * H)|^2)`` (complex
  intermediates, fft of a complex input); by hand: numpy's transforms and
  the chain rule through ``e^{i x}``;
* ``spectral_steps`` -- 20 pseudo-spectral time steps ``u <- irfft(rfft(u) *
  decay) + 0.05 sin(u)`` then ``sum(u^2)`` (a rolled loop); by hand: the
  forward sweep stored, the adjoint sweep back.

Every plan's value and gradient are checked against the hand-written ones
first (relative 1e-10).  Interleaved batches, medians (``time_round_robin``);
ratios are hybridad's median over the other's.

    python benchmarks/bench_fft.py [--sizes 256 4096 65536] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import _harness  # noqa: F401 -- (the checkout first on sys.path)
import numpy as np

import hybridad as ha
from hybridad.bench.harness import format_table, time_round_robin

STEPS = 20


def _weights(n):
    c = np.full(n // 2 + 1, 2.0)
    c[0] = 1.0
    if n % 2 == 0:
        c[-1] = 1.0
    return c


def cases(n, xp):
    """name -> (f in the array module ``xp``, x, hand-written (value, gradient))."""
    rng = np.random.default_rng(0)
    m = n // 2 + 1
    w = 1.0 / (1.0 + np.arange(m))
    kernel = np.fft.rfft(np.exp(-np.arange(n) / 4.0))
    filt = np.exp(-((np.arange(n) - n / 2) / (n / 8)) ** 2)
    decay = np.exp(-1e-4 * np.arange(m) ** 2)
    c = _weights(n)
    F = xp.fft

    def power(x):
        return xp.sum(w * xp.abs(F.rfft(x)) ** 2)

    def power_hand(x):
        X = np.fft.rfft(x)
        return np.sum(w * np.abs(X) ** 2), np.fft.irfft(2 * w * X / c, n, norm="forward")

    def convolution(x):
        return xp.sum(F.irfft(F.rfft(x) * kernel, n) ** 2)

    def convolution_hand(x):
        y = np.fft.irfft(np.fft.rfft(x) * kernel, n)
        return np.sum(y * y), np.fft.irfft(np.fft.rfft(2 * y) * np.conj(kernel), n)

    def complex_filter(x):
        return xp.sum(xp.abs(F.ifft(F.fft(x * xp.exp(1j * x)) * filt)) ** 2)

    def complex_filter_hand(x):
        e = np.exp(1j * x)
        y = np.fft.ifft(np.fft.fft(x * e) * filt)
        # the cotangent of z = x e^{ix} (u = sum |y|^2, du = Re(conj(2 y) dy)):
        # each transform's transpose is the other direction, unscaled here
        gz = np.fft.ifft(np.fft.fft(2 * y, norm="forward") * filt, norm="forward")
        return np.sum(np.abs(y) ** 2), np.real(np.conj(gz) * (e + 1j * x * e))

    def steps(u):
        for _ in range(STEPS):
            u = F.irfft(F.rfft(u) * decay, n) + 0.05 * xp.sin(u)
        return xp.sum(u ** 2)

    def steps_hand(u):
        us = []
        for _ in range(STEPS):
            us.append(u)
            u = np.fft.irfft(np.fft.rfft(u) * decay, n) + 0.05 * np.sin(u)
        g = 2 * u
        for v in reversed(us):  # the step's transpose: the filter is symmetric
            g = np.fft.irfft(np.fft.rfft(g) * decay, n) + 0.05 * np.cos(v) * g
        return np.sum(u * u), g

    x = rng.standard_normal(n)
    return {"power": (power, x, power_hand),
            "convolution": (convolution, x, convolution_hand),
            "complex_filter": (complex_filter, x / 4, complex_filter_hand),
            "spectral_steps": (steps, x, steps_hand)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 4096, 65536])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
    except ImportError:
        jax = None
    rows, out = [], {}
    for n in args.sizes:
        jcases = cases(n, jnp) if jax is not None else {}
        for name, (f, x, hand) in cases(n, np).items():
            plan = ha.compile(f, x)
            res = ha.GradientResult(x)
            plan.gradient(x, out=res)
            value, grad = hand(x)
            scale = max(1.0, np.abs(grad).max())
            if abs(float(res.value) - value) > 1e-10 * max(1.0, abs(value)) or \
                    np.abs(res.gradient - grad).max() > 1e-10 * scale:
                raise AssertionError(f"{name} at n={n}: gradient differs from the hand-written one")
            calls = [lambda: plan.gradient(x, out=res), lambda: hand(x)]
            if jax is not None:
                jf = jax.jit(jax.value_and_grad(jcases[name][0]))
                jf(x)[1].block_until_ready()
                calls.append(lambda jf=jf: jf(x)[1].block_until_ready())
            timed = time_round_robin(calls, args.repeats, 20.0)
            ours, theirs = timed[0][0], timed[1][0]
            row = {"case": f"{name} n={n}", "ours": ours, "hand": theirs, "vs_hand": ours / theirs}
            if jax is not None:
                row.update(jax=timed[2][0], vs_jax=ours / timed[2][0])
            rows.append(row)
            out[f"{name}/{n}"] = row
    print(f"medians of {args.repeats} interleaved batches (microseconds per call)")
    cols = [("case", "case", "{}"), ("hybridad gradient", "ours", "{:.1f}"),
            ("numpy by hand", "hand", "{:.1f}"), ("vs hand", "vs_hand", "{:.2f}")]
    if jax is not None:
        cols += [("jax.jit", "jax", "{:.1f}"), ("vs jax.jit", "vs_jax", "{:.2f}")]
    print(format_table(rows, cols, {"case"}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
