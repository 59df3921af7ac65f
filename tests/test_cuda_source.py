"""The CUDA dialect, checked without a GPU: every elementwise op's generated
CUDA (value and dual-number partials, float64 and float32) and a few whole
regions are compiled by ``nvcc`` for the device (``-arch=sm_90``) and, since
each kernel's per-element function is ``__host__ __device__``, run on the CPU
from a host program nvcc builds from the same source; the results are
compared with numpy and the rule table.  Skipped where nvcc is not installed.
"""

import math
import os
import subprocess

import numpy as np
import pytest
from conftest import rand
from cuda_host import NVCC, NVRTC, nvcc_build, nvrtc_compile

import hybridad as ha
from hybridad.backends.cuda.program import module_source
from hybridad.backends.cuda.source import region_kernel
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import derived
from hybridad.transforms.partition import find_regions

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the generated "
                                "CUDA source is not compile-checked on this machine")

N = 7
UNARY = sorted(n for n, op in REGISTRY.items() if op.kind == "elementwise"
               and isinstance(op.ufunc, np.ufunc) and op.ufunc.nin == 1 and op.dual is None)
BINARY = sorted(n for n, op in REGISTRY.items() if op.kind == "elementwise"
                and isinstance(op.ufunc, np.ufunc) and op.ufunc.nin == 2 and op.dual is None)


def _carray(a):
    values = ", ".join(repr(float(v)) if a.dtype.kind == "f" else str(int(v))
                       for v in a.ravel()) or "0"
    return values


def run_on_host(cases, tmp_path):
    """Compile the kernels of ``cases`` (``(kernel, inputs, out_dtypes)``) into
    one program with nvcc -- device code for sm_90 included -- run each
    kernel's element function over its loop on the CPU and return the outputs."""
    # (the kernels' module as CupyLauncher compiles it, then the host driver)
    lines = [module_source([k for k, _, _ in cases]), "#include <cstdio>", "int main() {"]
    for c, (kernel, inputs, out_dtypes) in enumerate(cases):
        lines.append("  {")
        args = []
        for k, a in enumerate(inputs):
            t = {"f8": "double", "f4": "float", "b1": "bool"}[a.dtype.str[1:]]
            lines.append(f"    static const {t} a{k}[] = {{{_carray(a)}}};")
            args.append(f"a{k}")
        for k, dt in enumerate(out_dtypes):
            t = "double" if dt == np.float64 else "float"
            lines.append(f"    static {t} o{k}[{kernel.size}];")
            args.append(f"o{k}")
        lines.append(f"    for (long long i = 0; i < {kernel.size}LL; ++i) "
                     f"{kernel.name}_::element(i, {', '.join(args)});")
        for k in range(len(out_dtypes)):
            lines.append(f"    for (long long i = 0; i < {kernel.size}LL; ++i) "
                         f"printf(\"{c} {k} %.17g\\n\", (double)o{k}[i]);")
        lines.append("  }")
    lines += ["  return 0;", "}"]
    exe = tmp_path / "kernels"
    nvcc_build("\n".join(lines) + "\n", str(exe))
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    outs = [[[] for _ in out_dtypes] for _, _, out_dtypes in cases]
    for line in run.stdout.splitlines():
        c, k, v = line.split()
        outs[int(c)][int(k)].append(float(v))
    return [[np.array(o) for o in per_case] for per_case in outs]


def _op_region(name, dtype):
    """The one-op region of ``sum(op(x[, y]))`` and its example inputs."""
    op = REGISTRY[name]
    lo, hi = op.domain
    xs = [rand((N,), lo, hi, seed=s).astype(dtype) for s in range(op.ufunc.nin)]
    if name in ("floor_divide", "remainder", "fmod", "floor", "ceil", "rint", "trunc",
                "sign", "heaviside"):
        xs[0][:3] = np.array([0.0, -1.0, 2.5], dtype)  # the interesting points
    plan = ha.compile(lambda *a: np.sum(op.ufunc(*a).astype(dtype)), *xs,
                      argnums=derived(op), backend="numpy")
    fwd = [n for n in plan.graph.nodes if n.phase == "forward"]
    regions = [r for r in find_regions(fwd, [plan.graph.outputs[0]])
               if any(n.op == name for n in r.nodes)]
    return regions[0], xs


def _expected(name, xs):
    """Value and partials of op ``name`` at ``xs`` from numpy and the rule table."""
    op = REGISTRY[name]
    with np.errstate(all="ignore"):
        ans = op.ufunc(*xs)
        parts = []
        for j, p in enumerate(op.partials):
            if p is None or (not callable(p) and p == 0) or j not in derived(op):
                parts.append(np.zeros_like(ans, dtype=np.float64))
            elif callable(p):
                parts.append(np.broadcast_to(np.asarray(p(*xs, ans), np.float64), ans.shape))
            else:
                parts.append(np.full(ans.shape, float(p)))
    return ans, parts


def op_kernels(dtype):
    """``(cases, expect)``: a kernel per op (value and every partial), its
    inputs and output dtypes; and what to compare them with."""
    cases, expect = [], []
    for name in UNARY + BINARY:
        region, xs = _op_region(name, dtype)
        if REGISTRY[name].partials[0] is None:  # masks: the value only
            kernel = region_kernel(region, "value", region.inputs)
            seeds = ()
        else:
            rules = derived(REGISTRY[name])
            seeds = tuple(k for k, n in enumerate(region.inputs)
                          if n.op == "input" and n.attrs["index"] in rules)
            kernel = region_kernel(region, "value", region.inputs, seeds=seeds)
        inputs = [xs[n.attrs["index"]] for n in region.inputs if n.op == "input"]
        out_dtypes = [region.nodes[-1].dtype] * (1 + len(seeds))
        cases.append((kernel, inputs, out_dtypes))
        expect.append((name, xs, region, seeds))
    return cases, expect


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_op_compiles_and_matches_numpy_on_the_host(dtype, tmp_path):
    cases, expect = op_kernels(dtype)
    outs = run_on_host(cases, tmp_path)
    tol = 1e-13 if dtype == np.float64 else 2e-6
    for (name, xs, region, seeds), got in zip(expect, outs, strict=True):
        ans, parts = _expected(name, xs)
        # the region may hold a cast after the op (float32): compare the op's value
        np.testing.assert_allclose(got[0], np.asarray(ans, np.float64), rtol=tol, atol=tol,
                                   err_msg=f"{name} value")
        by_input = {region.inputs[k].attrs["index"]: k for k in seeds}
        for j, part in enumerate(parts):
            if j in by_input:
                np.testing.assert_allclose(got[1 + list(seeds).index(by_input[j])], part,
                                           rtol=tol, atol=tol, err_msg=f"{name} d/d{j}")


BODIES = {
    # every op involves x: one region (an op of y alone would be a region of its own shape)
    "transcendental": lambda x, y: np.tanh(x) * np.sin(x * y) ** 2 + np.exp(-x * y),
    "where": lambda x, y: np.where(x > 0.2, np.log1p(x * x), np.arctan(x * y)) / (2 + np.cos(x)),
    "maximum_hypot": lambda x, y: np.maximum(x, 0.1) * np.sqrt(x * x + 1) - np.hypot(x, y),
    "power_logaddexp": lambda x, y: np.abs(x) ** 1.5 + np.logaddexp(x, y) - x / (1 + x * y),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_fused_regions_on_the_host_against_the_numpy_gradient(name, tmp_path):
    f = BODIES[name]
    x, y = rand((3, 4), seed=1), rand((4,), 0.1, 2.0, seed=2)  # y broadcasts along axis 0
    plan = ha.compile(lambda x, y: np.sum(f(x, y)), x, y, argnums=(0, 1), backend="numpy")
    fwd = [n for n in plan.graph.nodes if n.phase == "forward"]
    (region,) = find_regions(fwd, [plan.graph.outputs[0]])
    seeds = tuple(k for k, n in enumerate(region.inputs) if n.op == "input")
    kernel = region_kernel(region, "value", region.inputs, seeds=seeds)
    vjps = [region_kernel(region, "vjp", list(region.inputs) + [region.inputs[0]], wrt=k,
                          cotangent=(1, 1)) for k in seeds]
    args = {0: x, 1: y}
    ins = [args[n.attrs["index"]] if n.op == "input" else n.attrs["value"]
           for n in region.inputs if not (n.is_literal and n.size == 1)]
    g = np.array([[2.0]])
    cases = [(kernel, ins, [np.float64] * (1 + len(seeds)))] + \
        [(k, ins + [g], [np.float64]) for k in vjps]
    got = run_on_host(cases, tmp_path)
    np.testing.assert_allclose(got[0][0].reshape(3, 4), f(x, y), rtol=1e-13)
    ref = ha.gradient(lambda x, y: np.sum(f(x, y)), x, y, argnums=(0, 1), backend="numpy")
    for k, partial, (vjp,) in zip(seeds, got[0][1:], got[1:], strict=True):
        which = region.inputs[k].attrs["index"]
        total = partial.reshape(3, 4) if which == 0 else partial.reshape(3, 4).sum(axis=0)
        np.testing.assert_allclose(total, ref.gradient[which], rtol=1e-12)
        np.testing.assert_allclose(vjp, 2.0 * partial, rtol=1e-15)


def test_constants_are_exact_and_non_finite_constants_compile(tmp_path):
    third, big = 1 / 3, 1e308

    def f(x):
        return np.sum(np.minimum(x * third + big, np.inf) + np.where(x > 0, x, -np.inf))

    x = np.array([0.5, -0.25, 2.0])
    plan = ha.compile(f, x, backend="numpy")
    (region,) = find_regions([n for n in plan.graph.nodes if n.phase == "forward"],
                             [plan.graph.outputs[0]])
    kernel = region_kernel(region, "value", region.inputs, seeds=(0,))
    assert "0.3333333333333333" in kernel.code
    assert "__builtin_bit_cast(double, 0x7ff0000000000000ULL)" in kernel.code  # +inf, exact
    if NVRTC is not None:  # no host headers there: the constants by their bits
        assert f".entry {kernel.name}(" in nvrtc_compile(kernel.source)
    (value, partial), = run_on_host([(kernel, [x], [np.float64, np.float64])], tmp_path)
    want = np.minimum(x * third + big, np.inf) + np.where(x > 0, x, -np.inf)
    np.testing.assert_array_equal(value, want)
    assert math.isinf(value[1]) and value[1] < 0
    np.testing.assert_array_equal(partial, third + (x > 0))
