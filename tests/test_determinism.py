"""Deterministic: a call's results are a function of its inputs and the plan,
bitwise -- never of timing, load or cache state.

The same optimizer runs (``hybridad.scipy.minimize``: an MLP fit with L-BFGS-B,
a 30-dimensional quintic with BFGS, a logistic regression over 40,000 rows
whose loops run on numba's threads) in fresh processes: with an empty disk
cache, again with the cache it left, and again beside a competing process
that keeps every core busy (the thread choice then runs one thread).  Their
final ``x``, values and iteration counts must be identical, bit for bit.
With ``HYBRIDAD_TIERED=1`` too: the first call is the reference program's in
every run, whatever the compile's speed.
"""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import hashlib, json, time
import numpy as np
import hybridad as ha
from hybridad.scipy import minimize

rng = np.random.default_rng(0)
out = {}


def pause(*_):
    # each iteration takes 10 ms or more: a run outlasts a warm cache's compile
    # (numba's start-up, ~0.7 s) and not a cold one's, so a switch of program
    # where a compile ends would fall at another iteration in each run
    time.sleep(0.01)


def digest(r):
    return hashlib.sha256(np.ascontiguousarray(r.x).tobytes()
                          + np.float64(r.fun).tobytes()).hexdigest() + f"/{r.nit}"


# an MLP 1-16-16-1, mean squared error, L-BFGS-B
T = np.linspace(-2, 2, 400)[:, None]
Y = np.sin(3 * T[:, 0]) * np.exp(-T[:, 0] ** 2)


def mlp(p, T, Y):
    W1, b1 = p[:16].reshape(1, 16), p[16:32]
    W2, b2 = p[32:288].reshape(16, 16), p[288:304]
    w3, b3 = p[304:320], p[320]
    h = np.tanh(np.tanh(T @ W1 + b1) @ W2 + b2)
    return np.mean((h @ w3 + b3 - Y) ** 2)


p0 = rng.normal(size=321) * 0.5
out["mlp"] = digest(minimize(mlp, p0, T, Y, method="L-BFGS-B", options={"maxiter": 150},
                             callback=pause))


# a 30-dimensional quintic, BFGS
def quintic(x):
    return np.sum(np.abs(x ** 5 - 3 * x ** 4 + 4 * x ** 3 + 2 * x ** 2 - 10 * x - 4) ** 1.5
                  + 0.1 * x ** 2)


out["quintic"] = digest(minimize(quintic, rng.uniform(-2, 2, 30), method="BFGS",
                                 options={"maxiter": 200}, callback=pause))


# logistic regression over 40,000 rows: parallel loops, the thread choice on
X = rng.normal(size=(40_000, 20))
y = np.sign(X @ rng.normal(size=20) + 0.5 * rng.normal(size=40_000))


def logreg(w, X, y):
    return np.mean(np.logaddexp(0.0, -y * (X @ w))) + 1e-3 * np.sum(w ** 2)


out["logreg"] = digest(minimize(logreg, np.zeros(20), X, y, method="L-BFGS-B",
                                callback=pause))
print(json.dumps(out))
"""

def _run(tmp_path, cache, tiered):
    import json

    env = {**os.environ, "HYBRIDAD_CACHE_DIR": str(cache)}
    env.pop("HYBRIDAD_TIERED", None)
    if tiered:
        env["HYBRIDAD_TIERED"] = "1"
    path = tmp_path / "fit.py"
    path.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tiered", [False, True], ids=["default", "tiered"])
def test_optimizer_runs_are_bitwise_equal_cold_warm_and_loaded(tiered, tmp_path):
    cache = tmp_path / "cache"
    cold = _run(tmp_path, cache, tiered)
    warm = _run(tmp_path, cache, tiered)
    # every core busy: one spinning interpreter per core, beside the run
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        loaded = _run(tmp_path, tmp_path / "cache2", tiered)  # cold and loaded at once
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert cold == warm == loaded, (cold, warm, loaded)
