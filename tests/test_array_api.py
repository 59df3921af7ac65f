"""The array API: a traced array's namespace, and scipy's array-API code on
tracers (hybridad.frontend.array_api), with and without SCIPY_ARRAY_API=1
(scipy reads it once, at import: each setting in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hybridad as ha
from hybridad.testing import numerical_gradient

X = np.array([1.3, 0.7, 0.8, 1.9, 1.2])


def test_namespace_of_a_tracer():
    seen = {}

    def f(x):
        xp = x.__array_namespace__()
        seen["xp"] = xp
        assert xp.asarray(x) is x  # an array of the namespace: as it is
        y = xp.asarray(x, dtype=xp.float32)
        assert y.dtype == np.float32 and xp.isdtype(y.dtype, "real floating")
        assert xp.result_type(x, 1.0) == np.float64
        z = xp.astype(x, xp.float64)
        return xp.sum(xp.pow(z, 2.0)) + xp.sum(xp.concat([x[:1], xp.acos(x[1:2] / 2)]))

    res = ha.gradient(f, X)
    xp = seen["xp"]
    assert xp.__array_api_version__ and xp.__name__ == "hybridad.array_api"
    np.testing.assert_allclose(res.gradient, numerical_gradient(f, X), rtol=1e-6)
    assert xp.asarray([1.0, 2.0]).dtype == np.float64  # plain data: numpy's


CHILD = r"""
import json, sys, warnings
import numpy as np
import hybridad as ha
import hybridad.scipy as hs
from scipy.optimize import rosen, rosen_der, rosen_hess_prod
import scipy.stats as st, scipy.special as sp
warnings.simplefilter("ignore")
x = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
out = {}

def fd(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])

for backend in ("numpy", "numba"):
    r = ha.gradient(rosen, x, backend=backend)
    out[f"rosen {backend}"] = bool(abs(r.value - rosen(x)) <= 1e-12 * rosen(x)) and \
        bool(np.allclose(r.gradient, rosen_der(x), rtol=1e-13))
h = ha.hvp(rosen, x, np.ones(5))
out["rosen hvp"] = bool(np.allclose(h.hvp, rosen_hess_prod(x, np.ones(5)), rtol=1e-13))
g = ha.gradient(lambda x: np.sum(rosen_der(x) ** 2), x)
out["rosen_der traced"] = bool(np.allclose(g.gradient, fd(lambda x: np.sum(rosen_der(x) ** 2), x),
                                           rtol=1e-6))
res = hs.minimize(rosen, x, method="L-BFGS-B")
out["minimize"] = bool(res.success and res.fun < 1e-8)
for name, f in {"zscore": lambda x: np.sum(st.zscore(x) ** 3), "gmean": st.gmean,
                "hmean": st.hmean, "pmean": lambda x: st.pmean(x, 2.5), "skew": st.skew,
                "kurtosis": st.kurtosis, "moment": lambda x: st.moment(x, 3), "sem": st.sem,
                "tmean": st.tmean, "logsumexp": sp.logsumexp,
                "softmax": lambda x: np.sum(sp.softmax(x) ** 2)}.items():
    r = ha.gradient(f, x, backend="numpy")
    out[name] = bool(np.isclose(r.value, f(x), rtol=1e-13)) and \
        bool(np.allclose(r.gradient, fd(f, x), rtol=1e-5, atol=1e-8))
print(json.dumps(out))
"""


@pytest.mark.parametrize("switch", ["0", "1"])
def test_scipy_array_api_functions_trace_unchanged(switch):
    """scipy.optimize.rosen (array_namespace + xp_promote + xp.sum), its
    derivative and Hessian product, the array-API statistics of scipy.stats
    and scipy.special: values, gradients against finite differences, in
    ha.gradient, ha.hvp and hybridad.scipy.minimize."""
    env = dict(os.environ, SCIPY_ARRAY_API=switch)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(out.values()), {k: v for k, v in out.items() if not v}


def test_the_namespace_makes_arrays_that_array_api_code_fills():
    """``xp.empty(...)`` (and zeros, ones, full, eye, *_like) of a traced array's
    namespace is an array of that namespace while tracing: array-API code that
    writes into it (scipy's compat ``clip``: ``out[()] = x``) is traced."""
    def f(x):
        xp = x.__array_namespace__()
        out = xp.empty(x.shape, dtype=x.dtype)
        out[()] = x
        out[:2] = xp.full((2,), 3.0) * x[:2]
        return xp.sum(out * out + xp.eye(3)[0])

    x = np.array([0.5, -1.0, 2.0])
    res = ha.gradient(f, x, backend="numpy")
    np.testing.assert_allclose(res.value, np.sum(np.r_[3 * x[:2], x[2]] ** 2) + 1.0)
    np.testing.assert_allclose(res.gradient, [2 * 9 * 0.5, 2 * 9 * -1.0, 4.0])
    assert type(NAMESPACE_EMPTY(3)) is np.ndarray  # outside a trace: numpy's


def NAMESPACE_EMPTY(n):  # noqa: N802 - the namespace's function, outside any trace
    from hybridad.frontend.array_api import namespace

    return namespace.empty(n)
