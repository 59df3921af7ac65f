"""Core benchmark: hybridad's gradient against hand-written gradients (numpy, numba).

What is measured
----------------
Cases (float64; column ``n`` is the length of the gradient, i.e. the number
of differentiated scalars, all differentiated arrays together):

* ``expsum``: ``r = sum(exp(-3 (x + 1)))``, ``f = r**2 + r**3 + r**4 / 4``,
  gradient w.r.t. ``x``, at n = 100, 10^4, 10^6 (``--sizes``).
* ``quadform K=10`` and ``quadform K=1``: ``f(x, A) = sum_k x @ (A[k] @ x)``
  with ``A`` a list of K constant D x D matrices, D = 500 (n = D), gradient
  w.r.t. ``x``.
* ``mlp B=1000``: a multilayer perceptron 1 -> 16 -> 16 -> 1 with tanh
  activations on a batch of B = 1000 samples, ``f = mean((pred - Y)**2)`` (the
  mean, not the sum, over the 1000 x 1 residuals) with
  ``pred = tanh(tanh(X @ W1 + b1) @ W2 + b2) @ W3 + b3``; gradient w.r.t. all six
  weight and bias arrays W1 (1, 16), b1 (16,), W2 (16, 16), b2 (16,), W3 (16, 1),
  b3 (1,) (``argnums=(0, ..., 5)``, n = 321 parameters); X (1000, 1) and
  Y (1000, 1) are constants (seeded: X ~ U(-1, 1), Y = sin(pi X) + noise).

Implementations, all returning the value and the gradient (for the MLP a
tuple of six arrays):

* ``ha.gradient``   -- ``ha.gradient(f, *args, argnums=..., out=res)`` (cached plan lookup);
* ``plan.gradient`` -- ``plan.gradient(*args, out=res)`` (explicit plan, numba backend);
* ``plan[numpy]``   -- the same plan on the numpy reference backend;
* ``numpy``         -- the hand-written gradient (for the MLP: backpropagation)
  as people write it (allocating);
* ``numpy_out``     -- the same written into preallocated buffers with ``out=``
  (constants and reductions included: the best numpy a careful person writes);
* ``numba``         -- a hand-written ``@numba.njit`` kernel (plain ``njit``: no
  fastmath, no parallel) called from Python that writes the gradient into
  preallocated arrays and returns the value: loops for expsum (``exp`` and the
  sum in one loop, then the scaling), for quadform (one pass over each
  ``A_k`` for ``A_k x`` and ``x A_k``; ``A`` stacked into one (K, D, D) array
  once, untimed) and for the MLP (forward and backward one sample at a time).
  It is compiled by a first call before timing (its ``first_call_us``: njit
  compilation, no disk cache, plus one run).  A case without a kernel has no
  ``numba`` row (a note says so);
* ``jax.jit`` / ``torch`` -- ``jax.jit(jax.value_and_grad(f, argnums=...))`` with
  x64 and ``block_until_ready``, and torch autograd in float64 (same math);
  only when importable (they are not dependencies; otherwise a note says they
  were skipped).

Before timing, every implementation's value and gradient are checked against
``ha.gradient``'s, each gradient array on its own (relative error in the max
norm, ``max|g - g_ref| / max|g_ref|``): hand-written numpy and numba and
hybridad's plans <= 1e-12; jax/torch <= 1e-9 (their exp, tanh and reductions
differ in the last bits).

How
---
Time: each call is timed in batches with ``time.perf_counter_ns``; the
number of calls per batch is calibrated (after warm-up) so a batch lasts about
``--target-ms`` (20 ms), and ``--repeats`` (>= 7) batches are timed with the
garbage collector off.  Reported per call: the median, min and max over the
batches in microseconds (``median_us``, ``min_us``, ``max_us``);
``ratio_vs_numpy``, the median's ratio to the plain ``numpy`` median of the
same case; and ``ratio_vs_best_hand``, the median's ratio to the smallest
median among the hand-written rows of the case (``numpy``, ``numpy_out`` and
``numba`` where present; which one is in the JSON as ``best_hand``), all
measured in the same run.

Allocations (``allocs/call``, ``bytes/call``): numpy data-buffer allocations
per call, from ``hybridad.testing.count_allocations`` (a NEP-49 counting
handler, so temporaries are counted) over ``--alloc-calls`` (100) calls after
a warm-up call, divided by that number.  Not applicable to jax and torch,
whose memory is not numpy's (reported as "n/a" / null).  Memory numba code
allocates itself would not be seen (it is not numpy's); the hand-written
kernels allocate none.

First call (``first_call_us``): for hybridad, the time of the first call for
a new signature -- trace, autodiff, memory plan, code generation and one run:
``ha.gradient`` after ``ha.clear_cache()``, and ``ha.compile`` plus the first
``plan.gradient`` (numba code is cached on disk under ``HYBRIDAD_CACHE_DIR``,
so a second run of the script may load it instead of compiling it).  One-time
process costs (imports, first plan ever) are paid beforehand by warm-up plans
on tiny problems.  For ``numba`` the njit compilation and first run, for jax
the first (jit-compiling) call; "-" for the others.

Output: a plain-text table on stdout, one row per case and implementation;
``--json FILE`` writes the same rows as ``{"rows": [...], "meta": {...}}``.
``--quick`` (3 repeats of ~5 ms, 10 allocation calls, n <= 10^4) runs in
seconds (plus one-time compilations).

Usage::

    python benchmarks/bench_core.py [--quick] [--json FILE] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _harness
import _harness  # noqa: E402
from _harness import (MLP_WIDTHS, batch_ns, gc_disabled, mlp, mlp_numpy,  # noqa: E402
                      relative_error, version)

_harness.use_checkout()

import hybridad as ha  # noqa: E402
from hybridad.testing import count_allocations  # noqa: E402

SIZES = (100, 10**4, 10**6)
QUICK_SIZES = (100, 10**4)
QUAD_D = 500
QUAD_KS = (10, 1)
MLP_BATCH = 1000
SEED = 0

REPEATS = 7
TARGET_MS = 20.0
ALLOC_CALLS = 100
QUICK_REPEATS = 3
QUICK_TARGET_MS = 5.0
QUICK_ALLOC_CALLS = 10

RTOL_NUMPY = 1e-12
RTOL_OTHER = 1e-9

HYBRIDAD_IMPLS = ("ha.gradient", "plan.gradient", "plan[numpy]")
HAND_IMPLS = ("numpy", "numpy_out", "numba")  # hand-written: ratio_vs_best_hand's reference
OPTIONAL_IMPLS = (("jax.jit", "jax"), ("torch", "torch"))

COLUMNS = (  # (header, row key, format)
    ("case", "case", "{}"),
    ("n", "n", "{}"),
    ("impl", "impl", "{}"),
    ("median_us", "median_us", "{:.2f}"),
    ("min_us", "min_us", "{:.2f}"),
    ("max_us", "max_us", "{:.2f}"),
    ("ratio_vs_numpy", "ratio_vs_numpy", "{:.3f}"),
    ("ratio_vs_best_hand", "ratio_vs_best_hand", "{:.3f}"),
    ("allocs/call", "allocs_per_call", "{:g}"),
    ("bytes/call", "bytes_per_call", "{:.0f}"),
    ("first_call_us", "first_call_us", "{:.0f}"),
)


# --- objectives (plain numpy code: what hybridad differentiates) -----------------


def expsum(x, xp=np):
    """``r = sum(exp(-3 (x + 1)))``; ``r**2 + r**3 + r**4 / 4``.  ``xp``: jnp/torch ports."""
    r = xp.sum(xp.exp(-3 * (x + 1)))
    return r**2 + r**3 + r**4 / 4


def quadform(x, A):
    """``sum_k x @ (A[k] @ x)`` for a list of matrices ``A`` (any array library)."""
    return sum(x @ (Ak @ x) for Ak in A)


# --- hand-written gradients -------------------------------------------------------


def expsum_numpy(x):
    """Value and gradient of :func:`expsum`, the obvious numpy code."""
    e = np.exp(-3 * (x + 1))
    r = e.sum()
    value = r**2 + r**3 + r**4 / 4
    return value, (2 * r + 3 * r**2 + r**3) * (-3 * e)


def make_expsum_numpy_out(x):
    """:func:`expsum_numpy` writing into buffers made here, once.

    Constants are 0-d arrays and the sum goes into a 0-d buffer: a Python
    float handed to a ufunc (or a reduction to a scalar) allocates a 0-d array.
    """
    e, g = np.empty_like(x), np.empty_like(x)
    one, minus3 = np.array(1.0), np.array(-3.0)
    r, coef, value = np.empty(()), np.empty(()), np.empty(())

    def grad(x):
        np.add(x, one, out=e)
        np.multiply(e, minus3, out=e)
        np.exp(e, out=e)
        np.add.reduce(e, out=r)
        rf = float(r)
        coef[()] = -3.0 * (2 * rf + 3 * rf**2 + rf**3)
        np.multiply(e, coef, out=g)
        value[()] = rf**2 + rf**3 + rf**4 / 4
        return value, g

    return grad


def quadform_numpy(x, A):
    """Value and gradient ``sum_k (A_k + A_k^T) x`` of :func:`quadform`, as people write it."""
    Ax = [Ak @ x for Ak in A]
    value = sum(x @ y for y in Ax)
    return value, sum(y + Ak.T @ x for y, Ak in zip(Ax, A, strict=True))


def make_quadform_numpy_out(x, A):
    """:func:`quadform_numpy` into buffers: ``s = sum A_k x``, ``h = sum x A_k``."""
    s, h, t, g = (np.empty_like(x) for _ in range(4))
    value = np.empty(())

    def grad(x, A):
        s.fill(0.0)
        h.fill(0.0)
        for Ak in A:
            np.matmul(Ak, x, out=t)
            np.add(s, t, out=s)
            np.matmul(x, Ak, out=t)  # A_k^T x without a transposed copy
            np.add(h, t, out=h)
        np.dot(x, s, out=value)
        np.add(s, h, out=g)
        return value, g

    return grad


def make_mlp_numpy_out(W1, b1, W2, b2, W3, b3, X, Y):
    """:func:`mlp_numpy` into buffers made here, once (``out=`` everywhere, no temporaries).

    The loss is ``dot(r, r) / size`` on the flattened residual (a view).
    """
    n, h1_width, h2_width = X.shape[0], W1.shape[1], W2.shape[1]
    h1, d1, t1 = (np.empty((n, h1_width)) for _ in range(3))
    h2, d2, t2 = (np.empty((n, h2_width)) for _ in range(3))
    r = np.empty((n, W3.shape[1]))
    grads = tuple(np.empty_like(w) for w in (W1, b1, W2, b2, W3, b3))
    gW1, gb1, gW2, gb2, gW3, gb3 = grads
    one, inv_size, scale = np.array(1.0), np.array(1.0 / r.size), np.array(2.0 / r.size)
    value = np.empty(())
    r_flat = r.reshape(-1)  # a view

    def grad(W1, b1, W2, b2, W3, b3, X, Y):
        np.matmul(X, W1, out=h1)
        np.add(h1, b1, out=h1)
        np.tanh(h1, out=h1)
        np.matmul(h1, W2, out=h2)
        np.add(h2, b2, out=h2)
        np.tanh(h2, out=h2)
        np.matmul(h2, W3, out=r)
        np.add(r, b3, out=r)
        np.subtract(r, Y, out=r)
        np.dot(r_flat, r_flat, out=value)
        np.multiply(value, inv_size, out=value)
        np.multiply(r, scale, out=r)  # r is now d loss / d pred
        np.matmul(h2.T, r, out=gW3)
        np.add.reduce(r, axis=0, out=gb3)
        np.matmul(r, W3.T, out=d2)
        np.multiply(h2, h2, out=t2)
        np.subtract(one, t2, out=t2)
        np.multiply(d2, t2, out=d2)
        np.matmul(h1.T, d2, out=gW2)
        np.add.reduce(d2, axis=0, out=gb2)
        np.matmul(d2, W2.T, out=d1)
        np.multiply(h1, h1, out=t1)
        np.subtract(one, t1, out=t1)
        np.multiply(d1, t1, out=d1)
        np.matmul(X.T, d1, out=gW1)
        np.add.reduce(d1, axis=0, out=gb1)
        return value, grads

    return grad


# --- hand-written numba gradients (plain Python here; @numba.njit'd per case) ---------
#
# Each kernel writes the gradient into preallocated arrays, allocates nothing
# itself, and returns the value; ``make_*_numba`` wraps it in a Python function
# with the ``numpy_grad`` signature (the call from Python is part of the time).


def _expsum_kernel(x, g):
    r = 0.0
    for i in range(x.shape[0]):
        e = np.exp(-3.0 * (x[i] + 1.0))
        g[i] = e
        r += e
    coef = -3.0 * (2.0 * r + 3.0 * r * r + r * r * r)
    for i in range(x.shape[0]):
        g[i] *= coef
    return r * r + r * r * r + r * r * r * r / 4.0


def _quadform_kernel(x, A, s, h, g):
    """``A`` stacked (K, D, D); one pass over each ``A_k`` for ``s = A_k x`` and ``h = x A_k``."""
    d = x.shape[0]
    for i in range(d):
        s[i] = 0.0
        h[i] = 0.0
    for k in range(A.shape[0]):
        for i in range(d):
            xi = x[i]
            acc = 0.0
            for j in range(d):
                a = A[k, i, j]
                acc += a * x[j]
                h[j] += a * xi
            s[i] += acc
    value = 0.0
    for i in range(d):
        value += x[i] * s[i]
        g[i] = s[i] + h[i]
    return value


def _mlp_kernel(W1, b1, W2, b2, W3, b3, X, Y, gW1, gb1, gW2, gb2, gW3, gb3, h1, h2, d1, d2):
    """Forward and backward one sample at a time (``h*``, ``d*``: per-sample scratch)."""
    n, n_in = X.shape
    n_h1, n_h2, n_out = W1.shape[1], W2.shape[1], W3.shape[1]
    for g in (gW1.reshape(-1), gb1, gW2.reshape(-1), gb2, gW3.reshape(-1), gb3):
        for i in range(g.shape[0]):
            g[i] = 0.0
    scale = 2.0 / (n * n_out)
    loss = 0.0
    for s in range(n):
        for j in range(n_h1):
            z = b1[j]
            for i in range(n_in):
                z += X[s, i] * W1[i, j]
            h1[j] = np.tanh(z)
        for k in range(n_h2):
            z = b2[k]
            for j in range(n_h1):
                z += h1[j] * W2[j, k]
            h2[k] = np.tanh(z)
            d2[k] = 0.0
        for o in range(n_out):
            z = b3[o]
            for k in range(n_h2):
                z += h2[k] * W3[k, o]
            r = z - Y[s, o]
            loss += r * r
            dp = scale * r
            gb3[o] += dp
            for k in range(n_h2):
                gW3[k, o] += h2[k] * dp
                d2[k] += W3[k, o] * dp
        for k in range(n_h2):
            d2[k] *= 1.0 - h2[k] * h2[k]
            gb2[k] += d2[k]
        for j in range(n_h1):
            acc = 0.0
            for k in range(n_h2):
                gW2[j, k] += h1[j] * d2[k]
                acc += W2[j, k] * d2[k]
            d1[j] = acc * (1.0 - h1[j] * h1[j])
            gb1[j] += d1[j]
            for i in range(n_in):
                gW1[i, j] += X[s, i] * d1[j]
    return loss / (n * n_out)


def _njit(kernel):
    """A fresh dispatcher (compiled at its first call, no disk cache)."""
    import numba

    return numba.njit(kernel)


def make_expsum_numba(x):
    kernel, g = _njit(_expsum_kernel), np.empty_like(x)

    def grad(x):
        return kernel(x, g), g

    return grad


def make_quadform_numba(x, A):
    """The list ``A`` is stacked into one (K, D, D) array here, once (not timed)."""
    kernel, stacked = _njit(_quadform_kernel), np.stack(A)
    s, h, g = (np.empty_like(x) for _ in range(3))

    def grad(x, A):
        return kernel(x, stacked, s, h, g), g

    return grad


def make_mlp_numba(W1, b1, W2, b2, W3, b3, X, Y):
    kernel = _njit(_mlp_kernel)
    grads = tuple(np.empty_like(w) for w in (W1, b1, W2, b2, W3, b3))
    scratch = (np.empty(W1.shape[1]), np.empty(W2.shape[1]),
               np.empty(W1.shape[1]), np.empty(W2.shape[1]))

    def grad(W1, b1, W2, b2, W3, b3, X, Y):
        return kernel(W1, b1, W2, b2, W3, b3, X, Y, *grads, *scratch), grads

    return grad


# --- cases --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark problem: objective, arguments and the hand-written gradients.

    Hand-written gradient functions take ``args`` and return ``(value, gradient)``,
    the gradient an array (``argnums`` an int) or a tuple of arrays, one per
    entry of ``argnums``.
    """

    name: str
    n: int  # length of the gradient (differentiated scalars, all arrays together)
    f: Callable  # numpy objective f(*args)
    args: tuple  # differentiated arrays and constants, in f's order
    numpy_grad: Callable  # (*args) -> (value, gradient)
    make_numpy_out: Callable  # (*args) -> function like numpy_grad, own buffers
    port: Callable  # array module -> objective for that module (jax.numpy, torch)
    argnums: int | tuple = 0  # the differentiated arguments, as hybridad takes them
    make_numba: Callable | None = None  # like make_numpy_out, an @njit kernel; None: no row

    @property
    def diff_argnums(self):
        """``argnums`` as a tuple."""
        return (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)


def expsum_case(n, rng):
    x = rng.uniform(0.0, 1.0, n)
    return Case("expsum", n, expsum, (x,), expsum_numpy, make_expsum_numpy_out,
                lambda xp: functools.partial(expsum, xp=xp), make_numba=make_expsum_numba)


def quadform_case(k, d, rng):
    x = rng.standard_normal(d)
    A = [rng.standard_normal((d, d)) for _ in range(k)]
    return Case(f"quadform K={k}", d, quadform, (x, A), quadform_numpy,
                make_quadform_numpy_out, lambda xp: quadform, make_numba=make_quadform_numba)


def mlp_case(batch, widths, rng):
    """MLP ``widths[0] -> ... -> widths[-1]`` (two hidden tanh layers) on ``batch`` samples.

    Weights ~ N(0, 1/fan_in), biases ~ N(0, 0.1^2); X ~ U(-1, 1) and
    Y = sin(pi X) + 0.1 N(0, 1) (constants).
    """
    n_in, n_h1, n_h2, n_out = widths
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in),
                   0.1 * rng.standard_normal(fan_out)]
    X = rng.uniform(-1.0, 1.0, (batch, n_in))
    Y = np.sin(np.pi * X[:, :n_out]) + 0.1 * rng.standard_normal((batch, n_out))
    return Case(f"mlp B={batch}", sum(p.size for p in params), mlp, (*params, X, Y), mlp_numpy,
                make_mlp_numpy_out, lambda xp: functools.partial(mlp, xp=xp),
                argnums=tuple(range(len(params))), make_numba=make_mlp_numba)


def build_cases(sizes):
    rng = np.random.default_rng(SEED)
    return ([expsum_case(n, rng) for n in sizes]
            + [quadform_case(k, QUAD_D, rng) for k in QUAD_KS]
            + [mlp_case(MLP_BATCH, MLP_WIDTHS, rng)])


# --- implementations ------------------------------------------------------------------


@dataclasses.dataclass
class Impl:
    """A ready-to-time implementation of one case."""

    name: str
    call: Callable[[], object]  # one gradient evaluation
    result: Callable[[object], tuple]  # call()'s return -> (float value, [gradient arrays])
    rtol: float  # tolerance of the check against hybridad
    first_call_us: float | None = None
    numpy_memory: bool = True  # are its allocations numpy's (countable)?


def _elapsed_us(t0_ns):
    return (time.perf_counter_ns() - t0_ns) / 1e3


def _gradient_leaves(grad):
    """A gradient (array, or tuple/list of arrays, one per argnum) as a list of numpy copies."""
    parts = grad if isinstance(grad, (tuple, list)) else (grad,)
    return [np.array(g, dtype=np.float64) for g in parts]


def _result_pair(res):
    return float(res.value), _gradient_leaves(res.gradient)


def _gradient_result(case):
    """A ``GradientResult`` for the case's differentiated argument(s)."""
    if isinstance(case.argnums, int):
        return ha.GradientResult(case.args[case.argnums])
    return ha.GradientResult(tuple(case.args[i] for i in case.argnums))


def setup_ha_gradient(case):
    f, args, argnums = case.f, case.args, case.argnums
    res = _gradient_result(case)
    ha.clear_cache()
    t0 = time.perf_counter_ns()
    ha.gradient(f, *args, argnums=argnums, out=res)
    first = _elapsed_us(t0)

    def call():
        return ha.gradient(f, *args, argnums=argnums, out=res)

    return Impl("ha.gradient", call, _result_pair, RTOL_NUMPY, first)


def _setup_plan(case, backend, name):
    args = case.args
    res = _gradient_result(case)
    t0 = time.perf_counter_ns()
    plan = ha.compile(case.f, *args, argnums=case.argnums, backend=backend)
    plan.gradient(*args, out=res)
    first = _elapsed_us(t0)

    def call():
        return plan.gradient(*args, out=res)

    return Impl(name, call, _result_pair, RTOL_NUMPY, first)


def setup_plan_gradient(case):
    """The explicit plan on the default (numba) backend."""
    return _setup_plan(case, "numba", "plan.gradient")


def setup_plan_gradient_numpy(case):
    """The explicit plan on the numpy reference backend."""
    return _setup_plan(case, "numpy", "plan[numpy]")


def _numpy_pair(ret):
    value, grad = ret
    return float(value), _gradient_leaves(grad)


def setup_numpy(case):
    grad, args = case.numpy_grad, case.args

    def call():
        return grad(*args)

    return Impl("numpy", call, _numpy_pair, RTOL_NUMPY)


def setup_numpy_out(case):
    args = case.args
    grad = case.make_numpy_out(*args)

    def call():
        return grad(*args)

    return Impl("numpy_out", call, _numpy_pair, RTOL_NUMPY)


def setup_numba(case):
    """The case's hand-written @njit kernel, compiled by a first call (its first_call_us)."""
    if case.make_numba is None:
        return None
    args = case.args
    t0 = time.perf_counter_ns()
    grad = case.make_numba(*args)
    grad(*args)
    first = _elapsed_us(t0)

    def call():
        return grad(*args)

    return Impl("numba", call, _numpy_pair, RTOL_NUMPY, first)


def setup_jax(case):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    fn = jax.jit(jax.value_and_grad(case.port(jnp), argnums=case.argnums))
    args = jax.tree_util.tree_map(jnp.asarray, case.args)
    t0 = time.perf_counter_ns()
    jax.block_until_ready(fn(*args))
    first = _elapsed_us(t0)

    def call():
        return jax.block_until_ready(fn(*args))

    return Impl("jax.jit", call, _numpy_pair, RTOL_OTHER, first, numpy_memory=False)


def setup_torch(case):
    import torch

    diff = case.diff_argnums

    def convert(i, a):
        if i in diff:
            return torch.tensor(a, dtype=torch.float64, requires_grad=True)
        return [torch.from_numpy(b) for b in a] if isinstance(a, list) else torch.from_numpy(a)

    targs = [convert(i, a) for i, a in enumerate(case.args)]
    params = [targs[i] for i in diff]
    objective = case.port(torch)

    def call():
        value = objective(*targs)
        grads = torch.autograd.grad(value, params)
        return value.detach(), grads

    def pair(ret):
        return float(ret[0]), [g.numpy().copy() for g in ret[1]]

    return Impl("torch", call, pair, RTOL_OTHER, numpy_memory=False)


SETUPS = {"ha.gradient": setup_ha_gradient, "plan.gradient": setup_plan_gradient,
          "plan[numpy]": setup_plan_gradient_numpy,
          "numpy": setup_numpy, "numpy_out": setup_numpy_out, "numba": setup_numba,
          "jax.jit": setup_jax, "torch": setup_torch}


def available_optional():
    """(impl names that can run, {impl: why skipped}) for jax and torch."""
    ok, skipped = [], {}
    for impl, module in OPTIONAL_IMPLS:
        if importlib.util.find_spec(module) is None:
            skipped[impl] = f"{module} is not installed"
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
            skipped[impl] = f"import {module} failed: {exc!r}"
            continue
        ok.append(impl)
    return ok, skipped


# --- measuring -------------------------------------------------------------------------


def check_against(impl, reference):
    """Assert ``impl``'s value and gradient equal the reference, array by array.

    Each gradient array is compared on its own scale (max-norm relative error).
    """
    value, grads = impl.result(impl.call())
    ref_value, ref_grads = reference
    shapes, ref_shapes = [g.shape for g in grads], [g.shape for g in ref_grads]
    assert shapes == ref_shapes, f"{impl.name}: gradient shapes {shapes}, hybridad {ref_shapes}"
    value_err = relative_error(np.float64(value), np.float64(ref_value))
    grad_errs = [relative_error(g, r) for g, r in zip(grads, ref_grads, strict=True)]
    assert value_err <= impl.rtol and max(grad_errs) <= impl.rtol, (
        f"{impl.name} disagrees with hybridad: relative error value {value_err:.2e}, "
        f"gradient {', '.join(f'{e:.2e}' for e in grad_errs)} (tolerance {impl.rtol:g})")


def calls_per_batch(call, target_ns):
    """Calls needed for a batch of about ``target_ns`` (grows a trial batch 10x at a time)."""
    number = 1
    while True:
        elapsed = batch_ns(call, number)
        if elapsed >= target_ns / 10 or number >= 10**7:
            return max(1, round(number * target_ns / max(elapsed, 1)))
        number *= 10


def time_round_robin(calls, repeats, target_ms):
    """Per implementation: (median, min, max) microseconds per call over
    ``repeats`` batches of about ``target_ms``, and calls per batch.  The
    batches are interleaved (one of each implementation per round), so that a
    slow spell of a shared machine falls on all of them and ratios stay fair."""
    for call in calls:
        call()  # warm-up
    with gc_disabled():
        numbers = [calls_per_batch(call, target_ms * 1e6) for call in calls]
        per_call = [[] for _ in calls]
        for _ in range(repeats):
            for call, number, times in zip(calls, numbers, per_call, strict=True):
                times.append(batch_ns(call, number) / number / 1e3)
    return [(statistics.median(t), min(t), max(t), number)
            for t, number in zip(per_call, numbers, strict=True)]


def allocations_per_call(call, calls):
    """(numpy allocations, bytes) per call, averaged over ``calls`` calls after a warm-up call."""
    call()
    with count_allocations() as counts:
        for _ in range(calls):
            call()
    return counts.allocations / calls, counts.bytes / calls


def measure_case(case, impl_names, settings):
    """Rows (dicts) for one case, one per implementation the case has, in ``impl_names`` order.

    ``impl_names[0]`` must be ``ha.gradient``: the reference of the checks.
    """
    impls = [impl for impl in (SETUPS[name](case) for name in impl_names) if impl is not None]
    reference = impls[0].result(impls[0].call())  # hybridad's value and gradient
    rows = []
    for impl in impls:
        check_against(impl, reference)
    timings = time_round_robin([impl.call for impl in impls], settings.repeats,
                               settings.target_ms)
    for impl, (median, lo, hi, number) in zip(impls, timings, strict=True):
        allocs, nbytes = (allocations_per_call(impl.call, settings.alloc_calls)
                          if impl.numpy_memory else (None, None))
        rows.append({"case": case.name, "n": case.n, "impl": impl.name,
                     "median_us": median, "min_us": lo, "max_us": hi, "ratio_vs_numpy": None,
                     "ratio_vs_best_hand": None, "best_hand": None,
                     "allocs_per_call": allocs, "bytes_per_call": nbytes,
                     "first_call_us": impl.first_call_us, "repeats": settings.repeats,
                     "calls_per_repeat": number})
    numpy_median = next(r["median_us"] for r in rows if r["impl"] == "numpy")
    best = min((r for r in rows if r["impl"] in HAND_IMPLS), key=lambda r: r["median_us"])
    for row in rows:
        row["ratio_vs_numpy"] = row["median_us"] / numpy_median
        row["ratio_vs_best_hand"] = row["median_us"] / best["median_us"]
        row["best_hand"] = best["impl"]
    return rows


def warm_up_hybridad():
    """Pay one-time process costs (lazy imports, first plan) before first-call timings."""
    rng = np.random.default_rng(1)
    for case in (expsum_case(3, rng), quadform_case(2, 3, rng), mlp_case(4, (1, 2, 2, 1), rng)):
        ha.gradient(case.f, *case.args, argnums=case.argnums)
        ha.compile(case.f, *case.args, argnums=case.argnums).gradient(*case.args)
    ha.clear_cache()


# --- output --------------------------------------------------------------------------


def format_table(rows):
    """Plain-text table, one line per row; missing values as ``-`` (or ``n/a`` for allocs)."""
    allocs = ("allocs_per_call", "bytes_per_call")
    return _harness.format_table(rows, COLUMNS, {"case", "impl"},
                                 missing=lambda key: "n/a" if key in allocs else "-")


def environment(settings, skipped):
    return {"python": platform.python_version(), "numpy": np.__version__,
            "hybridad": ha.__version__, "hybridad_path": str(Path(ha.__file__).parent),
            "numba": version("numba"), "jax": version("jax"), "torch": version("torch"),
            "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "quick": settings.quick, "repeats": settings.repeats,
            "target_ms": settings.target_ms, "alloc_calls": settings.alloc_calls,
            "sizes": list(settings.sizes), "skipped": skipped}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_REPEATS} repeats of ~{QUICK_TARGET_MS:g} ms, "
                        f"{QUICK_ALLOC_CALLS} allocation calls, expsum sizes {QUICK_SIZES}")
    p.add_argument("--json", metavar="FILE", help='also write the rows as JSON {"rows": [...]}')
    p.add_argument("--sizes", metavar="N", type=int, nargs="+",
                   help=f"expsum sizes (default {SIZES}; quadform (n = {QUAD_D}) and mlp "
                        "do not depend on it)")
    p.add_argument("--repeats", type=int, help=f"timed batches per row (default {REPEATS})")
    p.add_argument("--target-ms", type=float,
                   help=f"duration of one timed batch (default {TARGET_MS:g} ms)")
    p.add_argument("--alloc-calls", type=int,
                   help=f"calls counted for allocations per call (default {ALLOC_CALLS})")
    args = p.parse_args(argv)
    quick = args.quick
    return argparse.Namespace(
        quick=quick, json=args.json,
        sizes=tuple(args.sizes or (QUICK_SIZES if quick else SIZES)),
        repeats=args.repeats or (QUICK_REPEATS if quick else REPEATS),
        target_ms=args.target_ms or (QUICK_TARGET_MS if quick else TARGET_MS),
        alloc_calls=args.alloc_calls or (QUICK_ALLOC_CALLS if quick else ALLOC_CALLS))


def main(argv=None):
    settings = parse_args(argv)
    optional, skipped = available_optional()
    impl_names = list(HYBRIDAD_IMPLS + HAND_IMPLS) + optional
    meta = environment(settings, skipped)
    print(f"hybridad {meta['hybridad']} ({meta['hybridad_path']}), numpy {meta['numpy']}, "
          f"numba {meta['numba']}, Python {meta['python']}, {meta['cpu_count']} CPUs, "
          f"{meta['platform']}")
    print(f"{settings.repeats} repeats of ~{settings.target_ms:g} ms per row, medians; "
          f"allocations over {settings.alloc_calls} calls"
          + (" (--quick)" if settings.quick else ""))
    warm_up_hybridad()
    rows, absent = [], {}
    for case in build_cases(settings.sizes):
        case_rows = measure_case(case, impl_names, settings)
        rows.extend(case_rows)
        for impl in sorted(set(impl_names) - {r["impl"] for r in case_rows}):
            absent.setdefault(impl, []).append(f"{case.name} n={case.n}")
    meta["absent"] = absent
    print()
    print(format_table(rows))
    for impl, why in skipped.items():
        print(f"note: {impl} skipped ({why})")
    for impl, cases in absent.items():
        print(f"note: no {impl} implementation for {'; '.join(cases)}")
    if settings.json:
        _harness.write_json(settings.json, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
