"""``@hybridad.elementwise``: user scalar functions with branches and loops,
differentiated by dual numbers inside the fused kernels.

Gradients are checked against central finite differences away from kinks
(``conftest.assert_grad``: both backends, the numba one also against the
numpy reference), against analytic derivatives where they exist, and for
zero numpy allocations per repeated call."""

import math

import numpy as np
import pytest
from conftest import assert_grad, rand

import hybridad as ha
from hybridad.testing import assert_no_alloc


# -- the users' examples ------------------------------------------------------
@ha.elementwise
def huber(r, d):
    if abs(r) < d:
        return 0.5 * r * r
    return d * (abs(r) - 0.5 * d)


@ha.elementwise
def stress(eps, E, sy, H):
    """A 1-D elastic / linear-hardening law with a smooth saturation branch."""
    s = E * eps
    if abs(s) <= sy:
        return s
    sign = 1.0 if eps > 0 else -1.0
    plastic = abs(eps) - sy / E
    if plastic < 0.5:
        return sign * (sy + H * plastic)
    return sign * (sy + H * 0.5 + 0.1 * H * math.tanh(plastic - 0.5))


@ha.elementwise
def kepler(M, e):
    """Eccentric anomaly: E - e sin E = M by 12 Newton steps."""
    E = M
    for _ in range(12):
        E = E - (E - e * math.sin(E) - M) / (1.0 - e * math.cos(E))
    return E


@ha.elementwise
def lj(xi, xj):
    """A Lennard-Jones pair energy with a cutoff; zero for a particle and itself."""
    r = abs(xi - xj)
    if r < 1e-12 or r > 2.5:
        return 0.0
    inv6 = (1.0 / r) ** 6
    return 4.0 * (inv6 * inv6 - inv6)


@ha.elementwise
def series_exp(x):
    """exp by its Taylor series, summed until the terms stop mattering (while)."""
    term, total, k = 1.0, 1.0, 0
    while abs(term) > 1e-17 * abs(total) and k < 200:
        k += 1
        term = term * x / k
        total += term
    return total


@ha.elementwise
def rho(r):
    return math.exp(-3 * (r + 1))


def huber_loss(r):
    return np.sum(huber(r, 1.0))


def stress_energy(eps):
    return np.sum(stress(eps, 200.0, 1.0, 20.0) * eps)


def kepler_sum(M, e):
    return np.sum(kepler(M, e) ** 2)


def lj_energy(x):
    return 0.5 * np.sum(lj(x[:, None], x[None, :]))


def expsum_ew(x):
    r = np.sum(rho(x))
    return r ** 2 + r ** 3 + r ** 4 / 4


def expsum_arr(x):
    r = np.sum(np.exp(-3 * (x + 1)))
    return r ** 2 + r ** 3 + r ** 4 / 4


def away_from(x, kinks, gap=1e-3):
    """``x`` with entries within ``gap`` of a kink moved off it."""
    x = x.copy()
    for k in kinks:
        near = np.abs(x - k) < gap
        x[near] = k + 10 * gap
    return x


# -- outside tracing: a ufunc -----------------------------------------------------
def test_outside_tracing_it_is_a_broadcasting_ufunc():
    r = np.linspace(-3, 3, 13)
    want = np.array([huber.py_func(v, 1.0) for v in r])
    np.testing.assert_array_equal(huber(r, 1.0), want)
    grid = huber(r[:, None], np.array([0.5, 1.0, 2.0])[None, :])
    assert grid.shape == (13, 3)
    np.testing.assert_array_equal(grid[:, 1], want)
    assert huber(np.float32(0.5), np.float32(1.0)).dtype == np.float32
    assert huber(r.astype(np.float32), 1.0).dtype == np.float32
    assert float(huber(3.0, 1.0)) == 2.5
    out = np.empty_like(r)
    huber.ufunc(r, 1.0, out=out)
    np.testing.assert_array_equal(out, want)
    assert huber.__name__ == "huber" and huber.nargs == 2


# -- gradients against finite differences --------------------------------------
def test_huber_gradient():
    r = away_from(rand((40,), -3, 3), (-1.0, 1.0))
    res = assert_grad(huber_loss, (r,))
    np.testing.assert_allclose(res.gradient, np.clip(r, -1, 1), rtol=1e-15)


def test_huber_threshold_as_a_broadcast_array_and_both_gradients():
    r = away_from(rand((30, 1), -3, 3), (-1.0, 1.0, -0.5, 0.5, -2.0, 2.0))
    d = np.array([[0.5, 1.0, 2.0]])
    assert_grad(lambda r, d: np.sum(huber(r, d) * np.cos(r)), (r, d), argnums=(0, 1))


def test_piecewise_constitutive_law():
    # elastic below |eps| = 0.005, linear hardening to 0.505, then tanh saturation
    eps = away_from(rand((60,), -1.2, 1.2, seed=3), (-0.005, 0.005, -0.505, 0.505))
    assert_grad(stress_energy, (eps,))
    # each branch is taken somewhere
    s = np.abs(eps)
    assert (s < 0.005).any() or (s > 0.005).all()
    assert ((s > 0.005) & (s < 0.505)).any() and (s > 0.505).any()


def test_newton_iteration_against_the_implicit_derivative():
    M = rand((25,), 0.1, 3.0, seed=5)
    e = np.full(25, 0.3)
    res = assert_grad(kepler_sum, (M, e), argnums=(0, 1))
    E = kepler(M, e)
    np.testing.assert_allclose(E - 0.3 * np.sin(E), M, rtol=1e-14)
    dE_dM = 1 / (1 - e * np.cos(E))
    dE_de = np.sin(E) / (1 - e * np.cos(E))
    np.testing.assert_allclose(res.gradient[0], 2 * E * dE_dM, rtol=1e-12)
    np.testing.assert_allclose(res.gradient[1], 2 * E * dE_de, rtol=1e-12)


def test_pair_potential_broadcasting_n_by_m():
    x = np.arange(12.0) + rand((12,), -0.1, 0.1, seed=7)  # gaps 1, 2, 3 +- 0.2
    gaps = np.abs(x[:, None] - x[None, :])
    assert np.all(np.abs(gaps - 2.5) > 1e-3)
    res = assert_grad(lj_energy, (x,), rtol=1e-6)
    # forces sum to zero (Newton's third law)
    assert abs(res.gradient.sum()) < 1e-9 * np.abs(res.gradient).max()


def test_two_argument_pair_potential_of_two_arrays():
    a, b = rand((6, 1), 0.0, 3.0, seed=1), rand((1, 5), 3.7, 6.0, seed=2)
    assert_grad(lambda a, b: np.sum(lj(a, b)), (a, b), argnums=(0, 1))


def test_while_loop_series():
    x = rand((20,), -2, 2)
    res = assert_grad(lambda x: np.sum(series_exp(x) * x), (x,))
    np.testing.assert_allclose(res.gradient, np.exp(x) * (1 + x), rtol=1e-13)


def test_accumulator_starting_at_a_constant_and_constant_branches():
    @ha.elementwise
    def softclip(x):
        acc = 0.0  # a float that becomes a dual in the loop
        for k in range(1, 4):
            acc += math.sin(k * x) / k
        if x > 1.5:
            return 2.0  # a constant branch: zero derivative
        return acc

    x = away_from(rand((30,), -2, 2), (1.5,))
    res = assert_grad(lambda x: np.sum(softclip(x) ** 2), (x,))
    assert np.all(res.gradient[x > 1.5] == 0)


def test_math_numpy_min_max_and_operators():
    @ha.elementwise
    def mix(x, y):
        a = min(x, y) + max(x, 0.5 * y) + np.exp(-x * x) + math.hypot(x, y)
        b = math.atan2(y, x) + np.log1p(x * x) + x ** 3 - y / (1.0 + x * x) + abs(y) ** 0.5
        a += 0.25 * np.tanh(y) - math.sqrt(1.0 + y * y)
        return a * b if x < y else a - b

    x = rand((25,), -2, 2, seed=11)
    y = rand((25,), -2, 2, seed=12)
    y = np.where(np.abs(x - y) < 1e-2, y + 0.1, y)
    y = np.where(np.abs(x - 0.5 * y) < 1e-2, y + 0.1, y)
    y = np.where(np.abs(y) < 1e-2, 0.3, y)
    assert_grad(lambda x, y: np.sum(mix(x, y)), (x, y), argnums=(0, 1))


def test_composes_with_other_ops_and_reductions():
    A = rand((5, 8), seed=4)
    x = rand((8,), seed=6)
    assert_grad(lambda x, A: np.sum(huber(A @ np.tanh(x), 0.7) ** 2) + np.max(rho(x)), (x, A))


# -- a hand-written derivative ---------------------------------------------------
def test_defderiv_is_used_instead_of_duals():
    @ha.elementwise
    def cube(x):
        return x * x * x

    @cube.defderiv
    def cube_d(x):
        return 3.0 * x * x

    x = rand((10,))
    res = assert_grad(lambda x: np.sum(cube(x)), (x,))
    np.testing.assert_allclose(res.gradient, 3 * x * x, rtol=1e-15)
    # no dual evaluation of cube: value and derivative from the two functions
    assert "_df(" in cube.family.primitive(()).driver().hybridad_source

    # and it really is the given rule that is used
    @ha.elementwise
    def lies(x):
        return x * x

    @lies.defderiv
    def lies_d(x):
        return 7.0

    g = ha.gradient(lambda x: np.sum(lies(x)), x).gradient
    np.testing.assert_array_equal(g, np.full_like(x, 7.0))


def test_defderiv_two_arguments_and_hessian_differentiates_it():
    @ha.elementwise
    def prod2(x, y):
        return x * x * y

    @prod2.defderiv
    def prod2_d(x, y):
        return (2.0 * x * y, x * x)

    x, y = rand((6,), seed=1), rand((6,), seed=2)
    assert_grad(lambda x, y: np.sum(prod2(x, y)), (x, y), argnums=(0, 1))
    H = ha.hessian(lambda x: np.sum(prod2(x, y)), x).hessian
    np.testing.assert_allclose(H, np.diag(2 * y), rtol=1e-14, atol=1e-15)


# -- second order: Hessians by nested duals --------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_hessian_through_a_user_function(backend):
    x = rand((7,), seed=9)
    res = ha.hessian(lambda x: np.sum(rho(x)) + np.sum(huber(x, 1.0) * x), x, backend=backend)
    inside = np.abs(x) < 1.0
    # d2/dx2 [huber(x) x]: 3x inside, 2 sign(x) outside
    want = 9 * np.exp(-3 * (x + 1)) + np.where(inside, 3 * x, 2 * np.sign(x))
    np.testing.assert_allclose(res.hessian, np.diag(want), rtol=1e-13, atol=1e-14)


def test_hvp_of_mixed_partials():
    x, y = rand((5,), 0.0, 0.5, seed=3), rand((5,), 1.2, 2.0, seed=4)  # r within the cutoff
    v = rand((5,), seed=5)
    res = ha.hvp(lambda x, y: np.sum(lj(x, y)), x, v, y)
    r = y - x
    d2 = 4 * (156 * r ** -14 - 42 * r ** -8)
    np.testing.assert_allclose(res.hvp, d2 * v, rtol=1e-12)


# -- dtypes -----------------------------------------------------------------------
def test_float32_plan():
    x = rand((50,), -3, 3).astype(np.float32)
    x = away_from(x, (-1.0, 1.0)).astype(np.float32)
    res = ha.gradient(lambda r: np.sum(huber(r, np.float32(1.0)) * np.exp(r)), x)
    assert res.gradient.dtype == np.float32
    x64 = x.astype(np.float64)
    want = np.clip(x64, -1, 1) * np.exp(x64) + huber(x64, 1.0) * np.exp(x64)
    np.testing.assert_allclose(res.gradient, want, rtol=2e-6)


def test_integer_operands_use_the_float64_loop():
    x = rand((9,))
    res = assert_grad(lambda x: np.sum(huber(x, 1)), (x,))
    assert res.gradient.dtype == np.float64


# -- zero allocations -------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_no_allocation_per_call(backend):
    x = rand((1000,))
    plan = ha.compile(expsum_ew, x, backend=backend)
    res = ha.GradientResult(x)
    assert_no_alloc(plan.gradient, x, out=res)
    assert_no_alloc(ha.gradient, expsum_ew, x, out=res, backend=backend)
    np.testing.assert_allclose(res.gradient, ha.gradient(expsum_arr, x).gradient, rtol=1e-13)


def test_no_allocation_pair_potential_and_hessian():
    x = np.arange(12.0) + rand((12,), -0.1, 0.1, seed=7)
    res = ha.GradientResult(x)
    plan = ha.compile(lj_energy, x)
    assert_no_alloc(plan.gradient, x, out=res, n=20)
    hres = ha.HessianResult(x)
    assert_no_alloc(ha.hessian, lj_energy, x, out=hres, n=5)


# -- structure: fused like a built-in op --------------------------------------------
def test_fused_into_one_region_with_its_neighbours():
    x = rand((100,))
    plan = ha.compile(expsum_ew, x)
    fwd = [n for n in plan.graph.nodes if n.phase == "forward" and n.op == "region"]
    ref = ha.compile(expsum_arr, x)
    assert len(fwd) == len([n for n in ref.graph.nodes if n.phase == "forward"
                            and n.op == "region"]) == 2  # sum(rho(x)), then the polynomial
    body = fwd[0].attrs["body"]
    assert [n.op.split("@")[0] for n in body.nodes] == ["rho"]
    assert body.reduction.op == "sum"
    assert not [n for n in plan.graph.nodes if n.op.startswith("rho")]  # nothing unfused
    src = plan.explain()
    assert "_hd_kernel('rho@" in src
    np.testing.assert_allclose(ha.gradient(expsum_ew, x).gradient,
                               ha.gradient(expsum_arr, x).gradient, rtol=1e-14)


# -- identity: the primitive changes with the code -----------------------------------
SCALE = 2.0


def test_primitive_name_tracks_code_globals_and_closures():
    def make(k):
        @ha.elementwise
        def f(x):
            return k * x * SCALE

        return f

    a, b, c = make(1.0), make(1.0), make(3.0)
    assert a.family.tag == b.family.tag != c.family.tag

    @ha.elementwise
    def f(x):
        return x + 1.0

    @ha.elementwise
    def g(x):
        return x + 2.0

    assert f.family.primitive(()).name != g.family.primitive(()).name
    x = rand((4,))
    np.testing.assert_allclose(ha.gradient(lambda x: np.sum(c(x)), x).gradient, 6.0)


def test_keywords_and_defaults_bind_as_in_python():
    """``f(r, d=2.0)``, a default left out, keywords in any order: the
    arguments Python would bind, traced and eager alike."""
    @ha.elementwise
    def scaled_huber(r, d=1.0, s=1.0):
        return s * (0.5 * r * r if abs(r) < d else d * (abs(r) - 0.5 * d))
    r = np.array([0.5, -3.0, 0.2, 2.0])
    want = 2.0 * huber(r, 1.5)
    np.testing.assert_array_equal(scaled_huber(r, s=2.0, d=1.5), want)
    for f in (lambda r: np.sum(scaled_huber(r, 1.5, 2.0)),
              lambda r: np.sum(scaled_huber(s=2.0, r=r, d=1.5))):
        res = ha.gradient(f, r)
        assert float(res.value) == pytest.approx(np.sum(want))
        np.testing.assert_allclose(res.gradient, 2.0 * np.clip(r, -1.5, 1.5))
    np.testing.assert_array_equal(scaled_huber(r), huber(r, 1.0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'k'"):
        scaled_huber(r, k=1.0)


# -- errors -------------------------------------------------------------------------
def test_definition_errors():
    with pytest.raises(ha.ElementwiseError, match="positional"):
        ha.elementwise(lambda *xs: xs[0])
    with pytest.raises(ha.ElementwiseError, match="Python function"):
        ha.elementwise(np.sin)
    with pytest.raises(TypeError, match="takes 2 argument"):
        huber(1.0)

    @ha.elementwise
    def one(x):
        return x

    with pytest.raises(ha.ElementwiseError, match="same 1 argument"):
        one.defderiv(lambda x, y: x)


def test_uncompilable_function_names_the_line_and_reason():
    @ha.elementwise
    def bad(x):
        y = x + 1.0
        return y.no_such_attribute

    x = rand((5,))
    res = ha.GradientResult(x)
    res.gradient[...] = 42.0
    with pytest.raises(ha.ElementwiseError) as info:
        ha.gradient(lambda x: np.sum(bad(x)), x, out=res)
    msg = str(info.value)
    assert "bad" in msg and "test_elementwise.py" in msg and "no_such_attribute" in msg
    with open(__file__) as fh:
        line = next(i for i, text in enumerate(fh, 1) if "return y.no_such_attribute" in text)
    assert f"test_elementwise.py:{line}" in msg
    assert np.all(res.gradient == 42.0)  # untouched


def test_non_scalar_return_is_rejected_at_trace_time():
    @ha.elementwise
    def pair(x):
        return (x, 2 * x)

    with pytest.raises(ha.ElementwiseError, match="must return one scalar"):
        ha.gradient(lambda x: np.sum(pair(x)), rand((3,)))


def test_function_without_a_dual_rule():
    @ha.elementwise
    def gam(x):
        return math.gamma(x)

    assert float(gam(5.0)) == 24.0  # fine as a ufunc
    with pytest.raises(ha.ElementwiseError, match="dual numbers"):
        ha.gradient(lambda x: np.sum(gam(x)), rand((3,), 1, 2))


# -- numba's disk cache ----------------------------------------------------------------
CACHE_SCRIPT = """
import sys
import numpy as np
import hybridad as ha

sys.path.insert(0, sys.argv[1])
from laws import law  # an importable module: its plans are cached on disk

ns = {"ha": ha, "__name__": "nowhere"}  # no module to import it from: not cached
exec("import math\\n@ha.elementwise\\ndef made(x):\\n    return math.sin(x) * x\\n", ns)

x = np.linspace(-2, 2, 50)
for f in (lambda x: np.sum(law(x, 0.5)), lambda x: np.sum(ns["made"](x))):
    plan = ha.compile(f, x)
    res = plan.gradient(x)
    hits = sum(plan._program.parts[0].stats.cache_hits.values())
    print(hits, float(res.value), float(res.gradient[3]))
# the dual evaluation's driver (what tracing checks compiles): from disk when importable
for g in (law, ns["made"]):
    stats = g.family.primitive(()).driver().stats
    print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_plans_are_cached_on_disk_when_the_function_is_importable(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "laws.py").write_text(
        "import hybridad as ha\n\n\n@ha.elementwise\ndef law(x, a):\n"
        "    if x > a:\n        return x * x\n    return a * x\n")
    env = dict(os.environ, HYBRIDAD_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT, str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append([line.split() for line in out.stdout.splitlines()])
    (hits0, *vals0), (hits1, *vals1) = runs[0][0], runs[1][0]
    assert (hits0, hits1) == ("0", "1") and vals0 == vals1  # the law's plan: from disk
    assert runs[0][1][0] == runs[1][1][0] == "0" and runs[0][1][1:] == runs[1][1][1:]
    # the law's driver compiled once, then loaded; the unimportable one's compiled each time
    assert runs[0][2] == ["0", "1"] and runs[1][2] == ["1", "0"], runs
    assert runs[0][3][0] == runs[1][3][0] == "0", runs


def _scaled_by(values):
    a = np.array(values)

    @ha.elementwise
    def g(x):
        return x * a[0] + a[1]
    return g


def test_elementwise_closures_over_other_arrays_compile_apart():
    """Two ``@elementwise`` functions of one code over different arrays:
    each computes with its own (numba freezes the array into the code, and
    the two shared one compiled primitive: the second gave the first's)."""
    x = np.linspace(0.0, 1.0, 5)
    for values in ([2.0, 1.0], [3.0, -1.0]):
        g = _scaled_by(values)
        res = ha.gradient(lambda x, g=g: np.sum(g(x) ** 2), x)
        want = 2 * (x * values[0] + values[1]) * values[0]
        np.testing.assert_allclose(res.gradient, want, rtol=1e-14)
