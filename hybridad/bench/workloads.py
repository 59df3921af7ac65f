"""The benchmark workloads: each a plain numpy objective (what hybridad
differentiates), its value and gradient written by hand with numpy, and a
recipe for its data at a given size.

The hand-written numba gradients are in :mod:`hybridad.bench.kernels`; the
implementations that are timed (hybridad, the hand-written ones, JAX,
PyTorch, autograd) in :mod:`hybridad.bench.impls`.  Imports numpy only.

Workloads (:data:`WORKLOADS`; float64, and for the ``gradient`` ones
float32 too: :meth:`Problem.astype` casts the data, drawn in float64, and
the reference is then the float64 hand-written gradient at the float32
data, see :meth:`Problem.reference` and :meth:`Problem.tolerance`):

* ``expsum`` -- ``r = sum(exp(-3 (x + 1)))``, ``f = r**2 + r**3 + r**4 / 4``,
  gradient w.r.t. ``x``; size n = len(x).
* ``quadform`` -- ``sum_k x @ (A[k] @ x)`` with ``A`` a list of K = 10 constant
  D x D matrices, gradient w.r.t. ``x``; size D.
* ``mlp`` -- a tanh MLP 1 -> 16 -> 16 -> 1, ``mean((pred - Y)**2)`` over a
  batch of B samples (X, Y constants), gradient w.r.t. the six weight and bias
  arrays (321 numbers); size B.
* ``wide_mlp`` -- the same MLP (:func:`mlp`, tanh) with widths 64 -> 256 ->
  256 -> 10 (85,002 parameters): BLAS-bound; no hand-written numba kernel
  (matmuls in numba loops are not what anyone would write); size B.
* ``gp`` -- a Gaussian process's negative log marginal likelihood (RBF
  kernel, Cholesky and two triangular solves) w.r.t. its three log
  hyperparameters, X (n x 3) and y constant (:mod:`hybridad.bench.gp`;
  scipy); no numba kernel; size n.
* ``chain`` -- the dense chain ``x_i = x_0 + ... + x_{i-1}`` for 20 layers
  (a Python list, ``sum(xs[1:], xs[0])``), ``f = sum(tanh(x_20))``, gradient
  w.r.t. ``x_0``; size n.
* ``rosen`` -- scipy's chained Rosenbrock function, minimized with
  ``scipy.optimize.minimize(method="L-BFGS-B")`` from ``tile([-1.2, 1], n / 2)``;
  size n.
* ``sparse_jac`` / ``sparse_hess`` -- a sparse Jacobian (the 2-D Brusselator)
  and a sparse Hessian (the 2-D Bratu energy) on N x N grids, against their
  hand-written ``scipy.sparse`` derivatives and scipy's colored finite
  differences (:mod:`hybridad.bench.sparse_workloads`, imported when such a
  problem is made: it needs scipy); size N.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from . import gp, kernels
from .kernels import CHAIN_LAYERS

SEED = 0
MLP_WIDTHS = (1, 16, 16, 1)
WIDE_MLP_WIDTHS = (64, 256, 256, 10)
DTYPES = ("float64", "float32")  # what --dtype offers; gradient workloads only
FLOAT32_RTOL = 1e-4  # float32 rows against the float64 reference (times float32_scale)
QUAD_K = 10


# --- expsum -----------------------------------------------------------------------------


def expsum(x, xp=np):
    """``r = sum(exp(-3 (x + 1)))``; ``r**2 + r**3 + r**4 / 4``.  ``xp``: jnp/torch ports."""
    r = xp.sum(xp.exp(-3 * (x + 1)))
    return r**2 + r**3 + r**4 / 4


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
    one, minus3 = np.array(1.0, x.dtype), np.array(-3.0, x.dtype)
    r, coef, value = (np.empty((), x.dtype) for _ in range(3))

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


# --- quadratic forms with constant matrices --------------------------------------------


def quadform(x, A, xp=np):
    """``sum_k x @ (A[k] @ x)`` for a list of matrices ``A`` (any array library)."""
    return sum(x @ (Ak @ x) for Ak in A)


def quadform_numpy(x, A):
    """Value and gradient ``sum_k (A_k + A_k^T) x`` of :func:`quadform`, as people write it."""
    Ax = [Ak @ x for Ak in A]
    value = sum(x @ y for y in Ax)
    return value, sum(y + Ak.T @ x for y, Ak in zip(Ax, A, strict=True))


def make_quadform_numpy_out(x, A):
    """:func:`quadform_numpy` into buffers: ``s = sum A_k x``, ``h = sum x A_k``."""
    s, h, t, g = (np.empty_like(x) for _ in range(4))
    value = np.empty((), x.dtype)

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


# --- the tanh MLP -------------------------------------------------------------------------


def mlp(W1, b1, W2, b2, W3, b3, X, Y, xp=np):
    """Mean squared error of a tanh MLP on a batch: ``mean((pred - Y)**2)``.

    ``X @ W1 + b1`` -> tanh -> ``@ W2 + b2`` -> tanh -> ``@ W3 + b3`` = ``pred``;
    differentiated w.r.t. the six weight/bias arrays, ``X`` and ``Y`` constant.
    ``xp``: the array module of the peers' ports (torch, jax.numpy, autograd.numpy).
    """
    h1 = xp.tanh(X @ W1 + b1)
    h2 = xp.tanh(h1 @ W2 + b2)
    pred = h2 @ W3 + b3
    return xp.mean((pred - Y) ** 2)


def mlp_numpy(W1, b1, W2, b2, W3, b3, X, Y):
    """Value and gradient (six arrays) of :func:`mlp`: backpropagation as people write it."""
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    r = h2 @ W3 + b3 - Y
    value = np.mean(r**2)
    dpred = (2.0 / r.size) * r
    dz2 = (dpred @ W3.T) * (1 - h2**2)
    dz1 = (dz2 @ W2.T) * (1 - h1**2)
    return value, (X.T @ dz1, dz1.sum(axis=0), h1.T @ dz2, dz2.sum(axis=0),
                   h2.T @ dpred, dpred.sum(axis=0))


def make_mlp_numpy_out(W1, b1, W2, b2, W3, b3, X, Y):
    """:func:`mlp_numpy` into buffers made here, once (``out=`` everywhere, no temporaries).

    The loss is ``dot(r, r) / size`` on the flattened residual (a view).
    """
    n, h1_width, h2_width = X.shape[0], W1.shape[1], W2.shape[1]
    dt = X.dtype
    h1, d1, t1 = (np.empty((n, h1_width), dt) for _ in range(3))
    h2, d2, t2 = (np.empty((n, h2_width), dt) for _ in range(3))
    r = np.empty((n, W3.shape[1]), dt)
    grads = tuple(np.empty_like(w) for w in (W1, b1, W2, b2, W3, b3))
    gW1, gb1, gW2, gb2, gW3, gb3 = grads
    one, inv_size, scale = (np.array(c, dt) for c in (1.0, 1.0 / r.size, 2.0 / r.size))
    value = np.empty((), dt)
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


# --- the dense chain ------------------------------------------------------------------------


def dense_chain(x0, xp=np):
    """``x_i = x_0 + ... + x_{i-1}`` for 20 layers; ``sum(tanh(x_20))``.

    ``xp``: the array module of the peers' ports (torch, jax.numpy, autograd.numpy).
    """
    xs = [x0]
    for _ in range(CHAIN_LAYERS):
        xs.append(sum(xs[1:], xs[0]))
    return xp.sum(xp.tanh(xs[-1]))


def dense_chain_numpy(x0):
    """Value and gradient of :func:`dense_chain`, written by hand the straightforward way.

    The forward pass keeps a running sum ``s = x_0 + ... + x_{i-1}``: ``x_i = s``,
    then ``s + x_i`` is the next sum (a new array per layer).  Every layer doubles,
    so ``x_20 = 2**19 x_0`` and the gradient is ``2**19 (1 - tanh(x_20)**2)``.
    """
    s = x0  # x_0 + ... + x_{i-1}; for i = 1 just x_0
    for _ in range(CHAIN_LAYERS):
        x = s  # x_i
        s = s + x  # x_0 + ... + x_i
    t = np.tanh(x)
    return np.sum(t), 2.0 ** (CHAIN_LAYERS - 1) * (1.0 - t**2)


# --- the chained Rosenbrock function (scipy.optimize.rosen) ----------------------------------


def rosen_np(x, xp=np):
    """scipy's ``rosen`` as plain numpy code: what hybridad differentiates."""
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_value_and_grad(x):
    """Value and gradient in one pass of numpy code (temporaries shared), as people write it.

    With ``d = x[1:] - x[:-1]**2`` and ``e = 1 - x[:-1]``: ``f = sum(100 d**2 + e**2)``,
    ``g[:-1] = -400 x[:-1] d - 2 e`` and ``g[1:] += 200 d``.
    """
    xm = x[:-1]
    d = x[1:] - xm * xm
    e = 1.0 - xm
    value = np.sum(100.0 * d * d + e * e)
    g = np.zeros_like(x)
    g[:-1] = -400.0 * xm * d - 2.0 * e
    g[1:] += 200.0 * d
    return float(value), g


# --- the tiny function that warms a library up in a child process -----------------------------


def warm_function(v, xp=np):
    """``sum(tanh(v) * v)``: differentiated first by the RSS children (:mod:`.rss`)."""
    return xp.sum(xp.tanh(v) * v)


def warm_numpy(v):
    """Value and gradient ``tanh(v) + v (1 - tanh(v)**2)`` of :func:`warm_function`."""
    t = np.tanh(v)
    return np.sum(t * v), t + v * (1.0 - t * t)


# --- problems: a workload at one size ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    """One benchmark problem: objective, arguments and the hand-written gradients.

    Hand-written gradient functions take ``args`` and return ``(value, gradient)``,
    the gradient an array (``argnums`` an int) or a tuple of arrays, one per
    entry of ``argnums``.
    """

    name: str  # display name, e.g. "quadform K=10"
    n: int  # length of the gradient (differentiated scalars, all arrays together)
    f: Callable  # numpy objective f(*args)
    args: tuple  # differentiated arrays and constants, in f's order
    numpy_grad: Callable  # (*args) -> (value, gradient): the reference
    port: Callable  # array module -> objective for that module (jax.numpy, torch, ...)
    argnums: int | tuple = 0  # the differentiated arguments, as hybridad takes them
    make_numpy_out: Callable | None = None  # (*args) -> function like numpy_grad, own buffers
    make_numba: Callable | None = None  # (*args, cache=) -> like make_numpy_out, @njit
    float32_scale: float = 1.0  # the float32 tolerance's factor (see tolerance)
    workload: str = ""  # key in WORKLOADS
    size: int = 0  # the workload's size parameter
    dtype: str = "float64"  # of every floating-point array in args (see astype)

    @property
    def diff_argnums(self):
        """``argnums`` as a tuple."""
        return (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)

    def astype(self, dtype):
        """The same problem with every floating-point array of ``args`` cast to ``dtype``.

        Lists (``quadform``'s matrices) are cast element by element.  The data
        are drawn in float64 and rounded once, so every dtype's problem is the
        same one up to that rounding.
        """
        dtype = np.dtype(dtype)
        if dtype.name == self.dtype:
            return self
        return dataclasses.replace(self, args=_cast(self.args, dtype), dtype=dtype.name)

    def reference(self):
        """``(value, [gradient arrays])`` of the hand-written numpy gradient, in float64.

        For a problem in another dtype: the float64 hand-written gradient at
        the same (exactly upcast) data, so that the check measures the
        arithmetic's error, not the rounding of the inputs.
        """
        args = self.args if self.dtype == "float64" else _cast(self.args, np.float64)
        value, grad = self.numpy_grad(*args)
        return float(value), [np.asarray(g, dtype=np.float64) for g in gradient_leaves(grad)]

    def tolerance(self, rtol):
        """The relative error an implementation may have against :meth:`reference`.

        float64: ``rtol``, or the error bound of a sequential sum over the
        largest input if larger.  Implementations sum in different orders
        (numpy pairwise, a numba loop sequentially, BLAS blocked): ``m * eps``
        bounds a sequential sum of ``m`` terms, relative to the sum of their
        magnitudes.

        Other dtypes (float32): ``rtol`` does not apply (every row rounds to
        float32, whatever its float64 agreement would be); the tolerance is
        ``FLOAT32_RTOL`` times the problem's ``float32_scale`` (for its
        conditioning: 1 for the elementwise and MLP workloads, 10 for the
        Gaussian process), or ``sqrt(m) * eps`` where that is larger (every
        row measured within 1e-5 of the float64 reference).
        """
        arrays = [b for a in self.args for b in (a if isinstance(a, (list, tuple)) else (a,))]
        terms = max(np.size(a) for a in arrays)
        if self.dtype == "float64":
            return max(rtol, terms * float(np.finfo(np.float64).eps))
        eps = float(np.finfo(self.dtype).eps)
        return max(FLOAT32_RTOL * self.float32_scale, np.sqrt(terms) * eps)


def _cast(args, dtype):
    """``args`` with every floating-point array (also inside lists/tuples) cast to ``dtype``."""
    def cast(a):
        if isinstance(a, (list, tuple)):
            return type(a)(cast(b) for b in a)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            return a.astype(dtype)
        return a

    return tuple(cast(a) for a in args)


def gradient_leaves(grad):
    """A gradient (array, or tuple/list of arrays, one per argnum) as a list of copies
    (numpy arrays in their own dtype: a float32 row's gradient stays float32)."""
    parts = grad if isinstance(grad, (tuple, list)) else (grad,)
    return [np.array(g) for g in parts]


def _kernels():
    return kernels


def _port(f):
    return lambda xp: functools.partial(f, xp=xp)


def expsum_problem(n, rng):
    """``expsum`` at ``x ~ U(0, 1)`` of length ``n``."""
    x = rng.uniform(0.0, 1.0, n)
    return Problem("expsum", n, expsum, (x,), expsum_numpy, _port(expsum),
                   make_numpy_out=make_expsum_numpy_out,
                   make_numba=_kernels().make_expsum_numba, workload="expsum", size=n)


def quadform_problem(k, d, rng):
    """``quadform`` with K = ``k`` matrices D x D = ``d`` x ``d``, all standard normal."""
    x = rng.standard_normal(d)
    A = [rng.standard_normal((d, d)) for _ in range(k)]
    return Problem(f"quadform K={k}", d, quadform, (x, A), quadform_numpy, _port(quadform),
                   make_numpy_out=make_quadform_numpy_out,
                   make_numba=_kernels().make_quadform_numba, workload="quadform", size=d)


def mlp_problem(batch, rng, widths=MLP_WIDTHS):
    """MLP ``widths[0] -> ... -> widths[-1]`` (two hidden tanh layers) on ``batch`` samples.

    Weights ~ N(0, 1/fan_in), biases ~ N(0, 0.1^2); X ~ U(-1, 1) and
    Y = sin(pi X) + 0.1 N(0, 1) (constants), drawn in that order from ``rng``.
    """
    n_in, n_out = widths[0], widths[-1]
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in),
                   0.1 * rng.standard_normal(fan_out)]
    X = rng.uniform(-1.0, 1.0, (batch, n_in))
    Y = np.sin(np.pi * X[:, :n_out]) + 0.1 * rng.standard_normal((batch, n_out))
    return Problem(f"mlp B={batch}", sum(p.size for p in params), mlp, (*params, X, Y),
                   mlp_numpy, _port(mlp), argnums=tuple(range(len(params))),
                   make_numpy_out=make_mlp_numpy_out, make_numba=_kernels().make_mlp_numba,
                   workload="mlp", size=batch)


def wide_mlp_problem(batch, rng):
    """:func:`mlp_problem` with widths :data:`WIDE_MLP_WIDTHS` (64-256-256-10); no numba kernel."""
    problem = mlp_problem(batch, rng, WIDE_MLP_WIDTHS)
    return dataclasses.replace(problem, name=f"wide_mlp B={batch}", make_numba=None,
                               workload="wide_mlp")


def gp_problem(n, rng):
    """The GP likelihood (:mod:`hybridad.bench.gp`) on ``n`` points; ``float32_scale`` 10.

    float32 rounding in ``K`` is amplified by its condition number (up to
    ``n s2 / noise``, about 2e4 at n = 1000), so the float32 rows get 10x
    the MLP's tolerance (measured: every row within 6e-6 of the float64
    reference at n = 200 and 1000).
    """
    theta, X, y = gp.gp_data(n, rng)
    return Problem(f"gp n={n}", theta.size, gp.gp_nll, (theta, X, y), gp.gp_numpy, gp.gp_port,
                   workload="gp", size=n, float32_scale=10.0)


def chain_problem(n, rng):
    """The dense chain at ``x_0 ~ U(-1, 1) * 2**-19`` (so ``x_20 = 2**19 x_0`` is in [-1, 1])."""
    x0 = rng.uniform(-1.0, 1.0, n) * 2.0 ** -(CHAIN_LAYERS - 1)
    return Problem("dense chain", n, dense_chain, (x0,), dense_chain_numpy, _port(dense_chain),
                   make_numba=_kernels().make_chain_numba, workload="chain", size=n)


def rosen_problem(n, rng=None):
    """The chained Rosenbrock at scipy's usual start ``tile([-1.2, 1], n / 2)`` (``n`` even)."""
    x0 = np.tile([-1.2, 1.0], n // 2)
    return Problem("rosen", n, rosen_np, (x0,), rosen_value_and_grad, _port(rosen_np),
                   make_numba=_kernels().make_rosen_numba, workload="rosen", size=n)


def warm_problem(n=8):
    """:func:`warm_function` at ``linspace(-1, 1, n)``."""
    v = np.linspace(-1.0, 1.0, n)
    return Problem("warm", n, warm_function, (v,), warm_numpy, _port(warm_function),
                   make_numba=_kernels().make_warm_numba, workload="warm", size=n)


# --- the registry ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """A family of problems over sizes, as the suite runs it."""

    name: str
    title: str  # one line for tables and plots
    size_name: str  # what the size is: "n", "D", "B"
    sizes: tuple  # full run
    quick_sizes: tuple  # --quick
    build: Callable  # (size, rng) -> Problem
    kind: str = "gradient"  # "gradient": value+gradient calls; "minimize": whole scipy runs;
    # "sparse": sparse Jacobian / Hessian calls (a SparseProblem, no memory children)


def _sparse(builder):
    """A sparse workload's ``build``: :mod:`.sparse_workloads` imported on use."""

    def build(size, rng):
        from . import sparse_workloads

        return getattr(sparse_workloads, builder)(size, rng)

    return build


WORKLOADS = {w.name: w for w in (
    Workload("expsum", "r = sum(exp(-3 (x + 1))); r^2 + r^3 + r^4/4", "n",
             (100, 10**3, 10**4, 10**5, 10**6), (10**4,), expsum_problem),
    Workload("quadform", f"sum_k x @ (A_k @ x), K = {QUAD_K} constant D x D matrices", "D",
             (100, 500, 1000), (100,), functools.partial(quadform_problem, QUAD_K)),
    Workload("mlp", "tanh MLP 1-16-16-1, mean squared error over B samples (321 parameters)",
             "B", (100, 10**3, 10**4, 10**5), (10**3,), mlp_problem),
    Workload("wide_mlp", "tanh MLP 64-256-256-10, mean squared error over B samples "
             "(85002 parameters)", "B", (256, 1024, 4096), (256,), wide_mlp_problem),
    Workload("gp", "Gaussian-process NLL, RBF kernel on n points in 3-D: cholesky + 2 "
             "triangular solves; gradient w.r.t. 3 log hyperparameters", "n", (200, 1000),
             (200,), gp_problem),
    Workload("chain", f"dense chain, {CHAIN_LAYERS} layers x_i = x_0 + ... + x_(i-1); "
             "sum(tanh(x_20))", "n", (10**3, 10**4, 10**5, 10**6), (10**5,),
             chain_problem),
    Workload("rosen", "scipy L-BFGS-B on the chained Rosenbrock (time of a whole minimize)",
             "n", (100, 10**3, 10**5), (100,), rosen_problem, kind="minimize"),
    Workload("sparse_jac", "2-D Brusselator (2 N^2 unknowns, np.roll Laplacian): sparse "
             "Jacobian, value included", "N", (32, 128), (32,), _sparse("brusselator_problem"),
             kind="sparse"),
    Workload("sparse_hess", "2-D Bratu energy (N^2 unknowns, np.diff): sparse Hessian, value "
             "and gradient included", "N", (32, 128), (32,), _sparse("bratu_problem"),
             kind="sparse"),
)}


def make_problem(workload, size, seed=SEED, dtype="float64"):
    """The problem of ``workload`` (a key of :data:`WORKLOADS`) at ``size``, data from ``seed``.

    Parameters
    ----------
    workload : str
    size : int
    seed : int, default SEED
        A fresh ``numpy.random.default_rng(seed)`` draws the data: a child
        process rebuilds the same problem from (workload, size, seed).
    dtype : str, default "float64"
        The data's dtype (:meth:`Problem.astype`; drawn in float64 first).

    Returns
    -------
    Problem
    """
    problem = (warm_problem(size) if workload == "warm"
               else WORKLOADS[workload].build(size, np.random.default_rng(seed)))
    if np.dtype(dtype) == np.float64:
        return problem
    if not isinstance(problem, Problem):
        raise ValueError(f"workload {workload!r} runs in float64 only")
    return problem.astype(dtype)
