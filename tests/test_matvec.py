"""Products the numba backend runs its own way.  Matrix-vector products as its own loops
(:mod:`hybridad.backends.numba.rt`'s ``matvec_dot`` / ``matvec_axpy``) where
the cost model says they beat BLAS's gemv
(:func:`hybridad.transforms.costs.matvec_choice`): the kernels against numpy,
every layout a plan hands them (a C matrix, an F one -- a transpose --, the
vector on either side, 1-D or a one-column 2-D array, a product added into
an adjoint), serial and on numba's threads, the choice following the table,
and nothing allocated per call.  Large gemms of a parallel plan shared by
its threads, a panel each (``rt.gemm_threads``)."""

import re

import numpy as np
import pytest
from conftest import rand

import hybridad as ha
from hybridad.backends.numba import kparts, rt
from hybridad.testing import count_allocations
from hybridad.transforms import costs as C

KERNELS = {"dot": (rt.matvec_dot, rt.matvec_dot_par),
           "axpy": (rt.matvec_axpy, rt.matvec_axpy_par)}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("form", ["dot", "axpy"])
@pytest.mark.parametrize("par", [False, True], ids=["serial", "threads"])
def test_kernels_agree_with_numpy(form, par, dtype):
    """Odd shapes (rows not a multiple of the eight the column loop takes at
    once, columns not a multiple of its block), beta 0 (the old contents, NaN
    here, never read), 1 (accumulate) and another value."""
    kernel = KERNELS[form][par]
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    for m, k in ((1, 1), (7, 3), (67, 301), (300, 600), (1000, 9)):
        a = rand((m, k), seed=m + k).astype(dtype)
        x = rand((k if form == "dot" else m,), seed=m).astype(dtype)
        n = m if form == "dot" else k
        want = a @ x if form == "dot" else a.T @ x
        out = np.full(n, np.nan, dtype)
        kernel(a, x, out, 0.0)
        np.testing.assert_allclose(out, want, **tol)
        base = rand((n,), seed=k).astype(dtype)
        for beta in (1.0, -0.5):
            out = base.copy()
            kernel(a, x, out, beta)
            np.testing.assert_allclose(out, want + beta * base, **tol)


def test_the_row_loop_sums_alike_on_any_thread_count():
    """Each row's dot product is one thread's: the threaded kernel's result is
    bit for bit the serial one's."""
    a, x = rand((500, 700), seed=3), rand((700,), seed=4)
    one, two = np.empty(500), np.empty(500)
    rt.matvec_dot(a, x, one, 0.0)
    rt.matvec_dot_par(a, x, two, 0.0)
    np.testing.assert_array_equal(one, two)
    one, two = np.empty(700), np.empty(700)
    rt.matvec_axpy(a, rand((500,), seed=5), one, 0.0)
    rt.matvec_axpy_par(a, rand((500,), seed=5), two, 0.0)
    np.testing.assert_array_equal(one, two)


PARTS = ((1, 1), (7, 3), (130, 9), (1000, 100), (4099, 17), (300, 600), (20000, 5))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_column_loops_in_parts_of_the_rows_agree_with_numpy_on_any_thread_count(dtype):
    """``A^T v`` (and ``A^T x``, ``A^T y`` at once) with the rows in parts:
    numpy's product to rounding for rows not a multiple of the parts or of
    the four rows taken at once, beta 0 (the old contents, NaN, never read),
    1 and another value; the serial and threaded kernels, on one thread and
    on two, bit for bit alike -- the parts come from the shape."""
    import numba

    from hybridad.backends.numba import matvecs
    from hybridad.backends.numba.machine import machine

    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
    threads = numba.get_num_threads()
    for m, k in PARTS:
        a = rand((m, k), seed=m + k).astype(dtype)
        x, y = rand((m,), seed=m).astype(dtype), rand((m,), seed=k).astype(dtype)
        n = max(1, machine().axpy_parts(m, k))
        base = rand((k,), seed=3).astype(dtype)
        ones, twos = [], []
        for kernel, kernel2 in ((matvecs.matvec_axpy_parts, matvecs.matvec_axpy2_parts),
                                (matvecs.matvec_axpy_parts_par, matvecs.matvec_axpy2_parts_par)):
            for count in (1, min(2, threads)):
                numba.set_num_threads(count)
                try:
                    got = []
                    for beta in (0.0, 1.0, -0.5):
                        out = np.full(k, np.nan, dtype) if beta == 0 else base.copy()
                        kernel(a, x, out, beta, np.full((n, k), np.nan, dtype))
                        np.testing.assert_allclose(out, a.T @ x + beta * base * (beta != 0),
                                                   **tol)
                        got.append(out)
                    ox, oy = np.full(k, np.nan, dtype), np.full(k, np.nan, dtype)
                    kernel2(a, x, y, ox, oy, np.full((2 * n, k), np.nan, dtype))
                    np.testing.assert_allclose(ox, a.T @ x, **tol)
                    np.testing.assert_allclose(oy, a.T @ y, **tol)
                    np.testing.assert_array_equal(ox, got[0])  # (the same sums as one vector's)
                finally:
                    numba.set_num_threads(threads)
                ones.append(got)
                twos.append((ox, oy))
        for other in ones[1:]:
            for one, two in zip(ones[0], other, strict=True):
                np.testing.assert_array_equal(one, two)
        for other in twos[1:]:
            for one, two in zip(twos[0], other, strict=True):
                np.testing.assert_array_equal(one, two)


def logreg(w, X, y):  # a tall data matrix: X^T g has one block of 100 columns
    return np.mean(np.logaddexp(0.0, -y * (X @ w))) + 1e-3 * np.sum(w ** 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_tall_matrix_transposed_runs_in_parts_of_its_rows(dtype):
    """A logistic regression's gradient and HVP: ``X^T g`` (and the HVP's
    ``X^T g``, ``X^T g'`` from one read) in parts of X's 20 000 rows -- the
    one block of its 100 columns was one thread's --; parallel and serial
    plans bit for bit alike, the numpy backend's to rounding, finite
    differences, nothing allocated per call."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20000, 100)).astype(dtype)
    y = np.sign(rng.standard_normal(20000)).astype(dtype)
    w, v = (0.1 * rng.standard_normal(100)).astype(dtype), rng.standard_normal(100).astype(dtype)
    results = []
    for parallel in (True, False):
        g = ha.compile(logreg, w, X, y, parallel=parallel, tiered=False)
        h = ha.compile(logreg, w, X, y, hvp=True, parallel=parallel, tiered=False)
        assert re.search(r"_mv_axpy_parts(_par)?\(", g._program.source), g._program.source
        assert re.search(r"_mv_axpy2_parts(_par)?\(", h._program.source), h._program.source
        assert "parts of the rows" in h.explain()
        gr, hr = g.gradient(w, X, y), h.hvp(w, X, y, v=v)
        with count_allocations() as counts:
            for _ in range(3):
                g.gradient(w, X, y, out=gr)
                h.hvp(w, X, y, v=v, out=hr)
        assert counts.allocations == 0
        results.append((gr, hr))
    (ga, ha_), (gb, hb) = results
    np.testing.assert_array_equal(ga.gradient, gb.gradient)
    np.testing.assert_array_equal(ha_.gradient, hb.gradient)
    np.testing.assert_array_equal(ha_.hvp, hb.hvp)
    ref = ha.hvp(logreg, w, v, X, y, backend="numpy")
    tol = 1e-10 if dtype == np.float64 else 2e-4
    scale = np.abs(ref.gradient).max()
    np.testing.assert_allclose(ga.gradient, ref.gradient, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(ha_.hvp, ref.hvp, rtol=tol, atol=tol * np.abs(ref.hvp).max())
    if dtype == np.float64:
        eps = 1e-6
        e = np.zeros(100)
        e[3] = eps
        fd = (logreg(w + e, X, y) - logreg(w - e, X, y)) / (2 * eps)
        assert ga.gradient[3] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def _products(x, A, B, v):
    """Every form a plan meets: A x (A C), A^T v (an F view), x^T B (B C),
    x^T A^T, one-column and one-row 2-D vectors, and the backward's
    transposed products, added into x's adjoint (beta = 1)."""
    y = A @ x  # row loop; backward: A^T (.) added into x's adjoint
    z = A.T @ v  # column loop over A
    w = v @ B  # column loop over B
    u = (A @ x[:, None])[:, 0] + (x[None, :] @ A.T)[0]  # 2-D vectors
    return np.sum(np.tanh(y) * v) + np.sum(z * x) + np.sum(np.sin(w)) + np.sum(u * u)


def _problem(m, k, dtype=np.float64):
    return (rand((k,), seed=1).astype(dtype), rand((m, k), seed=2).astype(dtype) / 8,
            rand((m, 90), seed=3).astype(dtype), rand((m,), seed=4).astype(dtype))


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
def test_plans_run_matvecs_as_loops_and_agree(rates, parallel):
    """With loops cheaper than gemv every matrix-vector product is a loop call
    (threaded where the plan's loops are parallel and the product is long), the
    gradient agrees with the numpy backend to rounding and with finite
    differences, and a call allocates nothing."""
    rates(blas=1.0, dot=0.1, axpy=0.1)
    args = _problem(300, 600)
    plan = ha.compile(_products, *args, argnums=(0, 1, 3), parallel=parallel, tiered=False)
    src = plan._program.source
    assert "_gemm(" not in src, src
    # (2: two products a call; _parts: a column loop over few columns in parts of its rows)
    calls = re.findall(r"_mv_(?:dot|axpy)(2?)(?:_parts)?(?:_par)?\(", src)
    assert sum(2 if two else 1 for two in calls) >= 4, src
    assert bool(re.search(r"_mv_dot2?_par\(", src)) == parallel, src
    assert bool(re.search(r"_mv_axpy2?(?:_parts)?_par\(", src)) == parallel, src
    assert "row loop 0.1 ns/element" in plan.explain()  # why, in the source shown
    res = plan.gradient(*args)
    ref = ha.gradient(_products, *args, argnums=(0, 1, 3), backend="numpy")
    assert res.value == pytest.approx(ref.value, rel=1e-12)
    for g, r in zip(res.gradient, ref.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    x, A, B, v = args
    eps = 1e-6
    for k in (0, 5):  # finite differences of two of x's entries
        e = np.zeros_like(x)
        e[k] = eps
        fd = (_products(x + e, A, B, v) - _products(x - e, A, B, v)) / (2 * eps)
        assert res.gradient[0][k] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    out = plan.gradient(*args)
    with count_allocations() as counts:
        for _ in range(20):
            plan.gradient(*args, out=out)
    assert counts.allocations == 0


def test_float32_products_and_the_choice_follows_the_table(rates):
    """float32 runs its own kernels; with gemv cheaper every product goes to
    BLAS, and the two plans agree."""
    args = _problem(256, 128, np.float32)
    rates(blas=1.0, dot=0.1, axpy=0.1)
    loops = ha.compile(_products, *args, argnums=(0, 1), tiered=False)
    rates(blas=0.1, dot=1.0, axpy=1.0)
    blas = ha.compile(_products, *args, argnums=(0, 1), tiered=False)
    calls = re.compile(r"_mv_\w+\(")
    assert not calls.search(blas._program.source) and "_gemm(" in blas._program.source
    assert calls.search(loops._program.source) and "_gemm(" not in loops._program.source
    a, b = loops.gradient(*args), blas.gradient(*args)
    assert a.value == pytest.approx(b.value, rel=1e-5)
    for g, r in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * np.abs(r).max())


def test_choice_figures():
    """The loop wins by its rate over the threads it can use; skinny products
    (a dimension under MATVEC_MIN) stay on BLAS; a column loop's threads are
    its column blocks, or the parts of its rows where the blocks are fewer."""
    from hybridad.backends.numba.machine import machine
    from hybridad.backends.numba.threshold import MATVEC_BLOCK

    facts = machine()
    c = C.costs()
    r = c.matvec_rates("float64")
    how, why, threads = C.matvec_choice(500, 500, "float64", "dot", facts, threads=2)
    assert threads == 2 and how == ("loop" if r["dot"] / 2 < r["blas"] else "blas")
    assert "/ 2 threads" in why and "gemv" in why
    assert C.matvec_choice(10**5, 16, "float64", "dot", facts, threads=2)[0] == "blas"
    assert C.matvec_choice(64, MATVEC_BLOCK, "float64", "axpy", facts, threads=2)[2] == 1
    assert facts.axpy_parts(500, MATVEC_BLOCK) == 7  # (one block: 7 parts of 64 rows and more)
    assert C.matvec_choice(500, MATVEC_BLOCK, "float64", "axpy", facts, threads=2)[2] == 2
    assert C.matvec_choice(500, 2 * MATVEC_BLOCK + 1, "float64", "axpy", facts, threads=8)[2] == 7
    assert facts.axpy_parts(100, 8 * MATVEC_BLOCK + 1) == 1
    assert C.matvec_choice(100, 8 * MATVEC_BLOCK + 1, "float64", "axpy", facts,
                           threads=16)[2] == 9


def test_a_skinny_product_takes_the_loops_where_gemv_would_cost_the_blas_section():
    """A dimension under MATVEC_MIN keeps gemv, unless gemv would put the
    program's BLAS on one thread (a product of BLAS_THREADS_MIN multiply-adds
    or more) and the loops, at a skinny matrix's rate, cost less than gemv
    and that section: logistic regression at 200 x 50 runs its loops and no
    section (9.9 -> 4.8 us a gradient); at 1000 x 20, 5000 x 10 and
    20000 x 30 gemv stays; below the section's size nothing changes."""
    from hybridad.backends.numba.machine import machine

    facts = machine()
    r = C.costs().matvec_rates("float64")

    def choice(m, k, form="dot"):
        return C.matvec_choice(m, k, "float64", form, facts, threads=2)

    for m, k in ((200, 50), (400, 30), (50, 200)):
        loop = r["dot"] * C.SKINNY_LOOP * m * k < r["blas"] * m * k + C.SECTION_NS
        how, why, threads = choice(m, k)
        assert how == ("loop" if loop else "blas") and threads == 1 and "section" in why
    assert choice(1000, 20)[0] == "blas"  # (a dimension under SKINNY_MIN)
    assert choice(20000, 30)[0] == "blas"  # (the loops' cost past the section's)
    assert choice(100, 50)[0] == "blas"  # (5000 multiply-adds: no section to save)
    assert C.matvec_choice(200, 50, "float64", "dot", facts.replace(blas_section_min=0),
                           threads=2)[0] == "blas"  # (a backend without the section)
    rng = np.random.default_rng(0)
    X, w = rng.standard_normal((200, 50)), rng.standard_normal(50) * 0.1
    y = np.sign(rng.standard_normal(200))

    def loss(w, X, y):
        return np.mean(np.logaddexp(0, -y * (X @ w))) + 1e-3 * np.sum(w ** 2)

    plan = ha.compile(loss, w, X, y)
    got = plan.gradient(w, X, y).gradient
    loops = all(r[f] * C.SKINNY_LOOP * 10000 < r["blas"] * 10000 + C.SECTION_NS
                for f in ("dot", "axpy"))  # (X w and X^T v: both on the loops, no BLAS)
    assert ("BLAS and LAPACK on one thread" in plan.explain()) != loops
    np.testing.assert_allclose(got, ha.gradient(loss, w, X, y, backend="numpy").gradient,
                               rtol=1e-12, atol=1e-15)


def test_quadratic_forms_give_their_threads_to_the_loops(rates):
    """A plan of matrix-vector products only: they run as the backend's own
    loops on the plan's threads, and the profile names them."""
    rates(blas=1.0, dot=0.3, axpy=0.3)
    As = [rand((256, 256), seed=s) for s in range(3)]
    x = rand((256,), seed=9)

    def f(x, As):
        return sum(x @ (A @ x) for A in As)

    plan = ha.compile(f, x, As, tiered=False)
    assert not plan._program.blas_limited  # (the products are the backend's loops)
    res = plan.gradient(x, As)
    np.testing.assert_allclose(res.gradient, sum(A @ x + A.T @ x for A in As), rtol=1e-12)
    from hybridad.plans.profile import profile

    table = profile(f, x, As, budget_s=0.2).table()
    # (A x and the hoisted A^T x: one matvec_pair, see tests/test_products.py)
    assert "256x256C: A u and A^T v, one read of A (4 parts, 2 threads)" in table, table


_CACHED = """
import numpy as np
import hybridad as ha

rng = np.random.default_rng(0)
As = [rng.standard_normal((300, 300)) for _ in range(2)]
x = rng.standard_normal(300)
plan = ha.compile(lambda x, As: sum(x @ (A @ x) for A in As), x, As, tiered=False)
assert "_mv_pair_par(" in plan._program.source, plan._program.source
res = plan.gradient(x, As)
np.testing.assert_allclose(res.gradient, sum(A @ x + A.T @ x for A in As), rtol=1e-12)
print("ok")
"""


def test_a_plan_calling_threaded_loops_runs_from_the_disk_cache(rates, tmp_path):
    """numba's pool is started before a threaded plan's machine code loads.

    A plan whose only parallel code is :mod:`.rt`'s threaded loops, compiled
    while those came from numba's disk cache, lost numba's own start-up hook:
    loaded from the cache in a later process, its first call crashed.  Three
    processes: one compiles the loops (numba caches them), one compiles the
    plan into a fresh cache, one loads it from there."""
    import os
    import subprocess
    import sys

    rates(blas=1.0, dot=0.1, axpy=0.1)
    env = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    for cache in ("warm", "plan", "plan"):
        env["HYBRIDAD_CACHE_DIR"] = str(tmp_path / cache)
        run = subprocess.run([sys.executable, "-c", _CACHED], env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0 and run.stdout.strip() == "ok", (cache, run.returncode,
                                                                    run.stderr[-2000:])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemm_threads_agrees_with_numpy(dtype):
    """rt.gemm_threads (a panel per thread, each one gemm through
    rt.gemm_panel: column panels of a wide result, row panels of a tall or
    square one) against numpy, every layout pair, beta 0 (NaN never read)
    and 0.5, panel extents below, at and above the panel count."""
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    for m, k, n in ((1, 3, 2), (2, 7, 5), (3, 40, 9), (67, 33, 70), (2, 5, 1), (5, 7, 2),
                    (9, 40, 3), (70, 33, 67), (16, 9, 16)):
        for la in "CF":
            for lb in "CF":
                a = np.asarray(rand((m, k), seed=m).astype(dtype), order=la)
                b = np.asarray(rand((k, n), seed=n).astype(dtype), order=lb)
                base = rand((m, n), seed=k).astype(dtype)
                out = np.full((m, n), np.nan, dtype)
                rt.gemm_threads(a, b, out, 0.0)
                np.testing.assert_allclose(out, a @ b, **tol, err_msg=f"{la}{lb} {m}x{k}x{n}")
                out = base.copy()
                rt.gemm_threads(a, b, out, 0.5)
                np.testing.assert_allclose(out, a @ b + 0.5 * base, **tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemm_kparts_agrees_with_numpy(dtype):
    """kparts.gemm_kparts (a small result over a long contracted axis: each part
    of the axis one gemm through kparts.gemm_kpanel into its rows of the parts,
    summed in order) against numpy, every layout pair, beta 0 (NaN never
    read) and 0.5, part counts that divide the axis and that do not."""
    def check(out, want, a, b, msg=""):
        if dtype == np.float64:
            np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12, err_msg=msg)
            return
        # float32: against the float64 product of the same inputs, within the
        # rounding a k-term float32 sum makes in any order (its sqrt(k) scale:
        # BLAS kernels of another vector width add in another order)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        bound = 4 * np.finfo(np.float32).eps * np.sqrt(a.shape[1]) * (np.abs(a64) @ np.abs(b64))
        err = np.abs(out - want)
        assert np.all(err <= bound + 1e-6), (msg, float((err / (bound + 1e-6)).max()))

    for m, k, n in ((16, 2048, 16), (5, 3001, 7), (2, 999, 2), (16, 10000, 3)):
        for la in "CF":
            for lb in "CF":
                a = np.asarray(rand((m, k), seed=m).astype(dtype), order=la)
                b = np.asarray(rand((k, n), seed=n).astype(dtype), order=lb)
                base = rand((m, n), seed=k).astype(dtype)
                exact = a.astype(np.float64) @ b.astype(np.float64) if dtype == np.float32 \
                    else a @ b
                for p in (2, 3, 8):
                    parts = np.full((p * m, n), np.nan, dtype)
                    out = np.full((m, n), np.nan, dtype)
                    kparts.gemm_kparts(a, b, out, 0.0, parts)
                    check(out, exact, a, b, f"{la}{lb} {m}x{k}x{n} {p} parts")
                    out = base.copy()
                    kparts.gemm_kparts(a, b, out, 0.5, parts)
                    check(out, exact + 0.5 * base, a, b)


def test_small_results_over_long_axes_run_in_parts_of_it():
    """A parallel plan's ``X^T G`` with a 16 x 16 result over 10^4 rows runs
    as kparts.gemm_kparts (parts of the contracted axis on the threads), compiled
    by hybridad's own compiler, with the numpy backend's gradient, the same
    bits on any thread count (test_thread_choice: ``narrow``), no allocation;
    the serial plan keeps one call."""
    X, W = rand((10000, 16), seed=4), rand((16, 16), seed=5) / 4

    def f(W):
        return np.sum(np.tanh(X @ W) ** 2)

    plan = ha.compile(f, W, tiered=False)
    serial = ha.compile(f, W, parallel=False, tiered=False)
    src = plan._program.source
    assert "_gemm_kparts(" in src and "_gemm_kparts(" not in serial._program.source, src
    assert "own compiler" in plan._program.compiler
    res = ha.GradientResult(W)
    plan.gradient(W, out=res)
    ref = ha.gradient(f, W, backend="numpy")
    np.testing.assert_allclose(res.gradient, ref.gradient, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(serial.gradient(W).gradient, ref.gradient, rtol=1e-11, atol=1e-12)
    with count_allocations() as counts:
        for _ in range(3):
            plan.gradient(W, out=res)
    assert counts.allocations == 0, counts


def test_plans_share_large_gemms_among_their_threads():
    """A parallel plan's large gemms run as rt.gemm_threads (a layer of a
    tanh network: forward product and the backward's two, one of them a
    transposed operand's), with the serial plan's result and no allocation."""
    X, W, V = rand((2000, 64), seed=1), rand((64, 96), seed=2) / 8, rand((96, 64), seed=3) / 8

    def f(W, V):
        return np.sum(np.tanh(np.tanh(X @ W) @ V) ** 2)

    plan = ha.compile(f, W, V, argnums=(0, 1), tiered=False)
    serial = ha.compile(f, W, V, argnums=(0, 1), parallel=False, tiered=False)
    src = plan._program.source
    assert src.count("_gemm_threads(") >= 3, src
    a, b = plan.gradient(W, V), serial.gradient(W, V)
    assert a.value == pytest.approx(b.value, rel=1e-12)
    for x, y in zip(a.gradient, b.gradient, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-13 * np.abs(y).max())
    eps = 1e-6
    for (i, j) in ((0, 0), (17, 41)):  # finite differences of two of W's entries
        e = np.zeros_like(W)
        e[i, j] = eps
        fd = (f(W + e, V) - f(W - e, V)) / (2 * eps)
        assert a.gradient[0][i, j] == pytest.approx(fd, rel=1e-6, abs=1e-8)
    out = plan.gradient(W, V)
    with count_allocations() as counts:
        for _ in range(10):
            plan.gradient(W, V, out=out)
    assert counts.allocations == 0
