"""Shared helpers: finite-difference checks of hybridad gradients."""

import os
import warnings

import numpy as np
import pytest

# every node's shape and dtype re-derived from its op's shape rule after each
# lowering pass (hybridad.transforms.pipeline)
os.environ.setdefault("HYBRIDAD_CHECK_RULES", "1")
# the cost model's built-in table (what a machine without `python -m hybridad
# calibrate` uses), not a calibration a developer left in this machine's cache:
# the same store/recompute choices (and generated plans) on every machine.
# Nothing else is switched: the suite runs the defaults users get (no tiers,
# thread choice on); a test that needs another setting asks for it itself.
os.environ.setdefault("HYBRIDAD_COSTS", "builtin")

import hybridad as ha
from hybridad.testing import count_allocations, numerical_gradient


def rk4_final(x, W, steps):
    """The state after ``steps`` classic RK4 steps (``hybridad.fori_loop``) of
    ``x' = tanh(W x) - 0.1 x``, dt = 0.05: the loop tests' model whose step's
    reverse pass reads four stages."""
    def rhs(v):
        return np.tanh(W @ v) - 0.1 * v

    def step(i, v):
        k1 = rhs(v)
        k2 = rhs(v + 0.025 * k1)
        k3 = rhs(v + 0.025 * k2)
        k4 = rhs(v + 0.05 * k3)
        return v + 0.05 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return ha.fori_loop(0, steps, step, x)


def rand(shape, lo=-2.0, hi=2.0, seed=0, dtype=np.float64):
    rng = np.random.default_rng(abs(hash((shape, lo, hi, seed))) % 2**32)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


BACKENDS = ("numpy", "numba")


def slow_on_numba(*keep):
    """Marks for a parametrized case: ``slow`` on the numba backend unless the
    case's other parameters are one of ``keep``.  For tests whose numba case
    repeats what the numpy case checks through the same kernels (the LAPACK
    ops: both backends call one compiled kernel) and only adds the numba
    backend's code generation, which a few kept cases cover: the default suite
    keeps those, ``pytest -m slow`` runs the rest."""
    def marks(backend, *rest):
        tail = rest[0] if len(rest) == 1 else rest
        return [pytest.mark.slow] if backend == "numba" and tail not in keep else []
    return marks


def directional_difference(f, args, argnum, eps=1e-6, seed=1):
    """``(d, slope)``: a random direction ``d`` of argument ``argnum`` and the
    central difference of ``f(*args)`` along it (to compare with the
    gradient's ``sum(g * d)``)."""
    d = np.random.default_rng(seed).standard_normal(np.shape(args[argnum]))

    def at(s):
        a = list(args)
        a[argnum] = args[argnum] + s * d
        return f(*a)
    return d, (at(eps) - at(-eps)) / (2 * eps)


def assert_one_graph_for_every_input(f, xs, abs=1e-8, rel=1e-12, decides=False):
    """A plan of ``f`` made at ``xs[0]``: at every ``x`` of ``xs`` (masks or
    indices all different) its value is numpy's and its gradient the central
    difference's, no call retraces (a warning is an error), it holds no
    decision on values (``decides``: it holds one, which every ``x`` keeps),
    and a call allocates nothing.  Returns the plan and its result."""
    plan = ha.compile(f, xs[0])
    res = ha.GradientResult(xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a retrace warns: none may happen)
        for x in xs:
            plan.gradient(x, out=res)
            assert res.value == pytest.approx(f(x), rel=rel)
            d, slope = directional_difference(f, [x], 0)
            assert float(np.sum(res.gradient * d)) == pytest.approx(slope, rel=1e-6, abs=abs)
    assert ("decisions on values" in plan.explain()) == decides
    with count_allocations() as counts:
        plan.gradient(xs[1], out=res)
    assert counts.allocations == 0, counts
    return plan, res


def assert_float32_follows_float64(f, xs, backend):
    """A plan of ``f`` made at float32 ``xs[0]`` on ``backend``: at every
    ``x`` of ``xs`` its float32 gradient is float64's (the numpy backend's)
    to float32 rounding, and no call retraces (a warning is an error).
    Returns the plan and its result."""
    plan = ha.compile(f, xs[0], backend=backend)
    res = ha.GradientResult(xs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in xs:
            plan.gradient(x, out=res)
            want = ha.gradient(f, x.astype(np.float64), backend="numpy").gradient
            assert res.gradient.dtype == np.float32
            np.testing.assert_allclose(res.gradient, want, rtol=2e-5,
                                       atol=2e-5 * np.abs(want).max())
    return plan, res


def hessian_fd(f, x, h=1e-5):
    """Central differences of the numerical gradient (a dense Hessian)."""
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        cols.append((numerical_gradient(f, x + e) - numerical_gradient(f, x - e)) / (2 * h))
    return np.array(cols)


def assert_matrix_vector_hvp(f, A, x, *rest, seed=14):
    """``H t`` of ``f(A, x, *rest)`` along a tangent of ``A`` and ``x`` at once
    (the two packed into one argument), forward over reverse on the numpy
    backend, against central differences of the gradient: the jvp rules of
    an op over a matrix and a vector."""
    m, k = A.shape
    n = x.shape[0]

    def packed(z, *rest):
        return f(z[:m * k].reshape(m, k), z[m * k:], *rest)

    z, t = np.concatenate([A.ravel(), x]), rand((m * k + n,), seed=seed)
    got = ha.hvp(packed, z, t, *rest, backend="numpy")

    def grad(zz):
        return ha.gradient(packed, zz, *rest, backend="numpy").gradient

    h = 1e-5
    want = (grad(z + h * t) - grad(z - h * t)) / (2 * h)
    np.testing.assert_allclose(got.hvp, want, rtol=0, atol=1e-6 * np.abs(want).max())


def assert_grad(f, args, argnums=0, rtol=1e-6, atol=1e-8, backends=BACKENDS):
    """Gradient of f w.r.t. argnums against central finite differences (float64),
    on every backend; the compiled backend agrees with the numpy reference to
    rounding.  Returns the numpy backend's result."""
    assert backends[0] == "numpy", "the numpy backend is the reference"
    results = [_assert_grad(f, args, argnums, rtol, atol, b) for b in backends]
    ref = results[0]
    for other, res in zip(backends[1:], results[1:], strict=True):
        assert_same_as_reference(res, ref, other, several=not isinstance(argnums, int))
    return ref


def assert_same_as_reference(res, ref, other, several=True, labels=None):
    """A compiled backend's value and gradients (``res``) are the numpy
    reference's (``ref``) to rounding.  ``several``: the gradient is a tuple,
    one per argument differentiated (``argnums`` a tuple); ``labels``: a name
    for each of them in the messages."""
    np.testing.assert_allclose(float(res.value), float(ref.value), rtol=1e-12)
    refs, gots = (r.gradient if several else (r.gradient,) for r in (ref, res))
    labels = labels or [""] * len(refs)
    for label, g0, g1 in zip(labels, refs, gots, strict=True):
        np.testing.assert_allclose(g1, g0, rtol=1e-11, atol=1e-13 * max(
            1.0, float(np.max(np.abs(g0), initial=0))),
            err_msg=f"{label + ': ' if label else ''}{other} vs numpy")


def _assert_grad(f, args, argnums, rtol, atol, backend):
    nums = (argnums,) if isinstance(argnums, int) else argnums
    res = ha.gradient(f, *args, argnums=argnums, backend=backend)
    expected_value = float(f(*args))
    np.testing.assert_allclose(float(res.value), expected_value, rtol=1e-12, atol=1e-300)
    grads = (res.gradient,) if isinstance(argnums, int) else res.gradient
    for k, g in zip(nums, grads, strict=True):
        def fk(xk, k=k):
            a = list(args)
            a[k] = xk
            return f(*a)

        num = numerical_gradient(fk, args[k])
        scale = max(1.0, float(np.max(np.abs(num), initial=0.0)))
        assert g.shape == np.shape(args[k]) and g.dtype == args[k].dtype
        np.testing.assert_allclose(g, num, rtol=0, atol=atol + rtol * scale,
                                   err_msg=f"gradient w.r.t. argument {k} ({backend})")
    return res


@pytest.fixture
def rates(monkeypatch, tmp_path):
    """Use a cost table whose matrix-vector rates (ns per element) are given:
    ``rates(blas=..., dot=..., axpy=...)``, both dtypes."""
    import json

    from hybridad.transforms import costs as C

    def use(blas, dot, axpy):
        table = {**C._builtin().to_dict(), "matvec_ns": {
            dt: {"blas": blas, "dot": dot, "axpy": axpy} for dt in ("float64", "float32")}}
        table.pop("source")
        path = tmp_path / "costs.json"
        path.write_text(json.dumps(table))
        monkeypatch.setenv("HYBRIDAD_COSTS", str(path))
        C.reset()
    yield use
    C.reset()


@pytest.fixture(autouse=True)
def _ieee_quiet():
    with np.errstate(all="ignore"):
        yield


def nrt_rows(script, jit):
    """Run ``script`` in a fresh interpreter with numba's runtime statistics on
    (``NUMBA_NRT_STATS=1``) and ``HYBRIDAD_JIT=jit``; its stdout lines, split."""
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_NRT_STATS="1", HYBRIDAD_JIT=jit)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return [line.split() for line in out.stdout.splitlines()]


def divides_vectors(tmp_path, script):
    """Whether the last module hybridad's compiler made running ``script`` (a
    fresh process, empty cache) divides vectors of doubles once optimized as
    :func:`hybridad.backends.jit.engine.compile_ir` optimizes it (tanh's
    ``e / (e + 2)`` in a loop that vectorized).  Skips when the compiler is off."""
    import re
    import subprocess
    import sys

    from hybridad.backends import jit
    from hybridad.backends.jit import engine

    if not jit.enabled():
        pytest.skip("hybridad's compiler is off (HYBRIDAD_JIT=0)")
    env = {**os.environ, "HYBRIDAD_JIT_DEBUG": "ir", "TMPDIR": str(tmp_path),
           "HYBRIDAD_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    ir = engine.optimized_ir((tmp_path / "hybridad_jit.ll").read_text())
    return re.search(r"fdiv[^\n]*<\d+ x double>", ir) is not None


def assert_same_bits_and_right(f, args, plan, other, dtype, differences=1):
    """A plan built another way (``other``: the same function, a code path
    switched off) gives ``plan``'s bits; ``plan`` allocates nothing per call,
    agrees with the numpy reference, and (float64) with central differences
    in the first ``differences`` arguments at a few elements."""
    from hybridad.testing import count_allocations

    res = plan.new_result()
    plan.gradient(*args, out=res)
    with count_allocations() as counts:
        plan.gradient(*args, out=res)
    assert counts.allocations == 0, counts
    want = other.gradient(*args)
    assert float(res.value) == float(want.value)
    for got, ref in zip(res.gradient, want.gradient, strict=True):
        np.testing.assert_array_equal(got, ref)
    ref = ha.compile(f, *args, argnums=tuple(range(len(args))),
                     backend="numpy").gradient(*args)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(float(res.value), float(ref.value), **tol)
    for got, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(got, r, **tol)
    if dtype != np.float64:
        return
    args = list(args)
    for k in range(differences):
        x = args[k] = args[k].copy()
        for j in np.linspace(0, x.size - 1, 4).astype(int):
            at = np.unravel_index(j, x.shape)
            h, old = 1e-6 * max(1.0, abs(x[at])), x[at]
            x[at] = old + h
            up = f(*args)
            x[at] = old - h
            down = f(*args)
            x[at] = old
            g = res.gradient[k][at]
            fd = (up - down) / (2 * h)
            assert abs(fd - g) <= 1e-6 * max(1.0, abs(g), abs(up) * 1e-3), (k, at, g, fd)
