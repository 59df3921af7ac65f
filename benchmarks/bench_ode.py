"""Gradients through ``scipy.integrate.odeint``: against hand-written forward
sensitivities and jax.jit of JAX's ``odeint``.

Two parameter fits, the loss a sum of squared misfits at the output times,
``rtol = atol = 1e-10``, float64:

- ``lotka_volterra``: 2 states, 4 parameters, 21 output times on [0, 10];
- ``tanh_net``: ``dy/dt = tanh(W y) - 0.1 y``, 4 states, the 16 entries of
  ``W``, 50 output times on [0, 5].

Rows, per call (medians): hybridad's gradient plan into a preallocated
result (numba); the gradient a numpy user writes by hand -- ``odeint`` of
the state and its forward sensitivities ``S' = f_y S + f_p`` (``n + n p``
equations, the Jacobians written out), then the chain rule at the output
times; ``jax.jit(jax.value_and_grad)`` of the same model with
``jax.experimental.ode.odeint`` (dopri5, adjoint), x64, timed in a process
of its own; and scipy's ``odeint`` of the value alone, for scale.  The
gradients are compared with the hand-written ones (1e-6 relative: three
solvers at the tolerance).

    python benchmarks/bench_ode.py [--cases lotka_volterra tanh_net] [--json FILE]
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

TOL = dict(rtol=1e-10, atol=1e-10)

def lv_rhs(xp):
    def rhs(y, t, p):
        return xp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[3] * y[0] * y[1] - p[2] * y[1]])
    return rhs

def net_rhs(xp):
    def rhs(y, t, W):
        return xp.tanh(W @ y) - 0.1 * y
    return rhs

def case(name):
    """(rhs factory, y0, times, true parameters, starting parameters)"""
    rng = np.random.default_rng(0)
    if name == "lotka_volterra":
        p = np.array([1.1, 0.4, 1.0, 0.4])
        return lv_rhs, np.array([10.0, 5.0]), np.linspace(0.0, 10.0, 21), p, p * 1.1
    W = 0.6 * rng.standard_normal((4, 4))
    return net_rhs, rng.standard_normal(4), np.linspace(0.0, 5.0, 50), W, W + 0.05

def median_us(fn, rounds=15):
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
from jax.experimental.ode import odeint
jax.config.update("jax_enable_x64", True)
make, y0, t, p_true, p0 = case(sys.argv[1])
rhs = make(jnp)
data = np.asarray(odeint(rhs, jnp.asarray(y0), jnp.asarray(t), jnp.asarray(p_true), **TOL))

def loss(p):
    return jnp.sum((odeint(rhs, jnp.asarray(y0), jnp.asarray(t), p, **TOL) - data) ** 2)

g = jax.jit(jax.value_and_grad(loss))
v, gr = jax.block_until_ready(g(p0))
us = median_us(lambda: jax.block_until_ready(g(p0)))
print(json.dumps({"us": us, "grad": np.ravel(np.asarray(gr)).tolist()}))
'''


def _hand(name, y0, t, data):
    """The hand-written gradient: forward sensitivities with the Jacobians
    written out, integrated with the state by scipy's odeint."""
    import numpy as np
    from scipy.integrate import odeint

    n = len(y0)
    if name == "lotka_volterra":
        def aug(z, tt, p):
            y, S = z[:n], z[n:].reshape(n, 4)
            f = np.array([p[0] * y[0] - p[1] * y[0] * y[1], p[3] * y[0] * y[1] - p[2] * y[1]])
            fy = np.array([[p[0] - p[1] * y[1], -p[1] * y[0]],
                           [p[3] * y[1], p[3] * y[0] - p[2]]])
            fp = np.array([[y[0], -y[0] * y[1], 0.0, 0.0], [0.0, 0.0, -y[1], y[0] * y[1]]])
            return np.concatenate([f, (fy @ S + fp).ravel()])
        n_p = 4
    else:
        def aug(z, tt, W):
            y, S = z[:n], z[n:].reshape(n, n * n)
            h = np.tanh(W @ y)
            d = 1.0 - h ** 2
            fy = d[:, None] * W - 0.1 * np.eye(n)
            fp = np.zeros((n, n * n))
            for i in range(n):
                fp[i, i * n:(i + 1) * n] = d[i] * y
            return np.concatenate([h - 0.1 * y, (fy @ S + fp).ravel()])
        n_p = n * n

    def value_and_grad(p):
        Z = odeint(aug, np.concatenate([y0, np.zeros(n * n_p)]), t, args=(p,),
                   rtol=1e-10, atol=1e-10)
        r = Z[:, :n] - data
        S = Z[:, n:].reshape(len(t), n, n_p)
        return np.sum(r ** 2), 2.0 * np.einsum("ti,tip->p", r, S).reshape(np.shape(p))
    return value_and_grad


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["lotka_volterra", "tanh_net"])
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    import numpy as np
    from scipy.integrate import odeint

    import hybridad as ha

    space = {}
    exec(MODEL, space)  # noqa: S102 - the model, shared with JAX's process
    rows = []
    print(f"{'case':>15} {'hybridad us':>12} {'hand us':>9} {'jax.jit us':>11} "
          f"{'value us':>9} {'/hand':>6} {'/jax':>6}")
    for name in opts.cases:
        make, y0, t, p_true, p0 = space["case"](name)
        rhs = make(np)
        tol = space["TOL"]
        data = odeint(rhs, y0, t, args=(p_true,), **tol)

        def loss(p, rhs=rhs, y0=y0, t=t, data=data):
            return np.sum((odeint(rhs, y0, t, args=(p,), **tol) - data) ** 2)

        plan = ha.compile(loss, p0)
        res = plan.gradient(p0)
        hand = _hand(name, y0, t, data)
        hv, hg = hand(p0)
        err = float(np.max(np.abs(res.gradient - hg)) / np.max(np.abs(hg)))
        assert err < 1e-6, f"{name}: the gradient differs from the hand-written one: {err:.1e}"
        row = {"case": name, "rel_to_hand": err,
               "hybridad_us": space["median_us"](lambda: plan.gradient(p0, out=res)),
               "hand_us": space["median_us"](lambda: hand(p0)),
               "value_us": space["median_us"](lambda: loss(p0))}
        got = subprocess.run([sys.executable, "-c", JAX, name], capture_output=True, text=True)
        if got.returncode == 0:
            jx = json.loads(got.stdout.strip().splitlines()[-1])
            jerr = float(np.max(np.abs(np.ravel(res.gradient) - np.asarray(jx["grad"]))) /
                         np.max(np.abs(jx["grad"])))
            assert jerr < 1e-6, f"{name}: the gradient differs from JAX's: {jerr:.1e}"
            row.update(jax_us=jx["us"], rel_to_jax=jerr)
        rows.append(row)
        nan = float("nan")
        print(f"{name:>15} {row['hybridad_us']:>12.0f} {row['hand_us']:>9.0f} "
              f"{row.get('jax_us', nan):>11.0f} {row['value_us']:>9.0f} "
              f"{row['hybridad_us'] / row['hand_us']:>6.2f} "
              f"{row['hybridad_us'] / row.get('jax_us', nan):>6.2f}", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
