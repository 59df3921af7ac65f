"""Rosenbrock with scipy.optimize and hybridad's exact derivatives.

Runs L-BFGS-B, Newton-CG and trust-exact through ``hybridad.scipy.minimize``
and the same methods with scipy's hand-written ``rosen_der`` /
``rosen_hess_prod`` / ``rosen_hess``, and prints final value, iterations and
evaluations side by side.

    python examples/scipy_rosenbrock.py [n]
"""

import sys
import time

import numpy as np
from scipy.optimize import minimize, rosen, rosen_der, rosen_hess, rosen_hess_prod

import hybridad.scipy as hs


def rosen_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def main(n=100):
    x0 = np.tile([-1.2, 1.0], n // 2)
    hand = {"L-BFGS-B": {"jac": rosen_der},
            "Newton-CG": {"jac": rosen_der, "hessp": rosen_hess_prod},
            "trust-exact": {"jac": rosen_der, "hess": rosen_hess}}
    options = {"Newton-CG": {"xtol": 1e-12}}
    print(f"Rosenbrock, n = {n}, x0 = (-1.2, 1, -1.2, 1, ...)")
    print(f"{'method':12} {'derivatives':10} {'f':>10} {'nit':>5} {'nfev':>5} {'s':>6}")
    results = {}
    for method, derivs in hand.items():
        for label in ("scipy", "hybridad"):
            t = time.perf_counter()
            if label == "scipy":
                res = minimize(rosen, x0, method=method, options=options.get(method), **derivs)
            else:
                res = hs.minimize(rosen_np, x0, method=method, options=options.get(method))
            t = time.perf_counter() - t  # hybridad's first run includes building the plan
            print(f"{method:12} {label:10} {res.fun:10.3g} {res.nit:5d} {res.nfev:5d} {t:6.2f}")
            results[method, label] = res
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
