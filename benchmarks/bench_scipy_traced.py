"""scipy's functions in traced code, against scipy's own calls: the gradient
plan of each case (numba, the default backend), per call, against the
scipy calls a hand-written gradient would make.

Cases (float64):

* ``spline_table`` -- ``np.sum(cs(x) ** 2)`` with ``cs = CubicSpline(table)``
  (200 knots) at n traced points, against scipy's ``cs(x)`` and ``cs(x, 1)``
  and ``2 v dv`` (the hand-written gradient);
* ``distributions`` -- ``np.sum(truncnorm.logpdf(x, -1, 2) +
  gamma.logcdf(|x| + 0.1, 2.5))`` at n points, against scipy's two calls for
  the value alone (a hand-written gradient costs more: a lower bound);
* ``sosfiltfilt`` -- ``np.sum(sosfiltfilt(sos, x) ** 2)`` (4th-order
  Butterworth, two sections) of n samples, against scipy's ``sosfiltfilt``
  for the value alone;
* ``welch`` -- ``np.sum(welch(x, nperseg=256)[1])`` of n samples, against
  scipy's ``welch`` for the value alone;
* ``dct_blocks`` -- ``np.sum(w * dct(x.reshape(-1, 256), norm="ortho") ** 2)``
  (n samples in blocks of 256), against the hand-written gradient's scipy
  calls: ``dct`` for the value, ``idct`` of ``2 w y`` for the gradient;
* ``sqrtm`` -- ``np.sum(W * sqrtm(A))`` of a 32 x 32 matrix (not n), against
  scipy's ``sqrtm`` and the Sylvester solve of the hand-written gradient
  (``solve_sylvester(S.T, S.T, W)``).

Every plan's value is checked against scipy's first (relative 1e-12).
Interleaved batches, medians (``time_round_robin``); the ratio is hybridad's
median over scipy's.

    python benchmarks/bench_scipy_traced.py [--n 100000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import _harness  # noqa: F401 -- (the checkout first on sys.path)
import numpy as np
import scipy.fft as sf
import scipy.interpolate as si
import scipy.linalg as sl
import scipy.signal as ss
import scipy.stats as st

import hybridad as ha
from hybridad.bench.harness import format_table, time_round_robin


def cases(n):
    """name -> (f, x, scipy's calls for comparison)."""
    rng = np.random.default_rng(0)
    knots = np.linspace(0, 10, 200)
    cs = si.CubicSpline(knots, np.sin(knots))
    sos = ss.butter(4, 0.2, output="sos")

    def spline_hand(x):
        v, d = cs(x), cs(x, 1)
        return np.sum(v * v), 2 * v * d

    w = 1.0 / (1.0 + np.arange(256.0))

    def dct_hand(x):
        y = sf.dct(x.reshape(-1, 256), norm="ortho")
        return np.sum(w * y ** 2), sf.idct(2 * w * y, norm="ortho").ravel()

    b, W = rng.standard_normal((32, 32)), rng.standard_normal((32, 32))

    def sqrtm_hand(a):
        s = sl.sqrtm(a)
        return np.sum(W * s), sl.solve_sylvester(s.T, s.T, W)

    return {
        "spline_table": (lambda x: np.sum(cs(x) ** 2), rng.uniform(0, 10, n), spline_hand),
        "distributions": (lambda x: np.sum(st.truncnorm.logpdf(x, -1, 2)
                                           + st.gamma.logcdf(np.abs(x) + 0.1, 2.5)),
                          rng.uniform(-0.9, 1.9, n),
                          lambda x: (st.truncnorm.logpdf(x, -1, 2),
                                     st.gamma.logcdf(np.abs(x) + 0.1, 2.5))),
        "sosfiltfilt": (lambda x: np.sum(ss.sosfiltfilt(sos, x) ** 2), rng.standard_normal(n),
                        lambda x: ss.sosfiltfilt(sos, x)),
        "welch": (lambda x: np.sum(ss.welch(x, nperseg=256)[1]), rng.standard_normal(n),
                  lambda x: ss.welch(x, nperseg=256)),
        "dct_blocks": (lambda x: np.sum(w * sf.dct(x.reshape(-1, 256), norm="ortho") ** 2),
                       rng.standard_normal(n // 256 * 256), dct_hand),
        "sqrtm": (lambda a: np.sum(W * sl.sqrtm(a)), b @ b.T / 32 + np.eye(32), sqrtm_hand),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows, out = [], {}
    for name, (f, x, scipys) in cases(args.n).items():
        plan = ha.compile(f, x)
        res = ha.GradientResult(x)
        plan.gradient(x, out=res)
        expected = f(x)
        if abs(float(res.value) - expected) > 1e-12 * max(1.0, abs(expected)):
            raise AssertionError(f"{name}: value {float(res.value)} against scipy's {expected}")
        (ours, *_), (theirs, *_) = time_round_robin(
            [lambda: plan.gradient(x, out=res), lambda: scipys(x)], args.repeats, 20.0)
        rows.append({"case": name, "ours": ours, "theirs": theirs, "ratio": ours / theirs})
        out[name] = {"hybridad_us": ours, "scipy_us": theirs, "ratio": ours / theirs}
    print(f"n = {args.n}; medians of {args.repeats} interleaved batches (microseconds per call)")
    print(format_table(rows, [("case", "case", "{}"), ("hybridad gradient", "ours", "{:.1f}"),
                              ("scipy", "theirs", "{:.1f}"), ("ratio", "ratio", "{:.2f}")],
                       {"case"}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"n": args.n, "cases": out}, fh, indent=2)


if __name__ == "__main__":
    main()
