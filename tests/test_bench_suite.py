"""The benchmark suite (``python -m hybridad bench``) in its smallest form, so it cannot rot.

One workload (expsum) at n = 100, quick settings, the hybridad and
hand-written rows only (no peers: they would dominate the time), no memory
children except one tiny one run on its own.  The wide MLP and the
Gaussian process at tiny sizes: hybridad against the hand-written
gradients and central differences, the GP's peer ports; ``--dtype`` and
the goals summary.
"""

import importlib.util
import json
import math
import struct
import subprocess
import sys

import numpy as np
import pytest

from hybridad.__main__ import main
from hybridad.bench import harness, kernels, report, rss, suite, workloads
from hybridad.bench.workloads import make_problem

FIELDS = ("median_s", "min_s", "max_s", "f_s", "grad_f_ratio", "ratio_vs_numba",
          "first_call_s")


def test_smallest_run_writes_json_table_and_plot(tmp_path, capsys, monkeypatch):
    # jax is asked for but reported missing: the run goes on and says so
    real = suite.availability
    monkeypatch.setattr(suite, "availability", lambda name: (
        "jax is not installed (test)" if name == "jax.jit" else real(name)))
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    status = main(["bench", "--workload", "expsum", "--quick", "--sizes", "100",
                   "--impl", "hybridad", "ha.gradient", "hand numpy", "hand numba", "jax.jit",
                   "--no-memory", "--progress", "plain",
                   "--json", str(out_json), "--plot", str(out_png)])
    assert status == 0
    captured = capsys.readouterr()
    assert "[1/1] expsum n=100" in captured.err  # the plain progress fallback
    assert "x numba" in captured.out and "hand numba" in captured.out  # the table
    assert "note: jax.jit skipped (jax is not installed (test))" in captured.out

    doc = json.loads(out_json.read_text())
    assert set(doc) >= {"workloads", "skipped", "meta"}
    assert list(doc["workloads"]) == ["expsum"]
    assert doc["skipped"] == {"jax.jit": "jax is not installed (test)"}
    rows = doc["workloads"]["expsum"]["rows"]
    assert {r["impl"] for r in rows} == {"hybridad", "ha.gradient", "hand numpy", "hand numba"}
    for r in rows:
        assert r["size"] == 100 and r["n"] == 100
        for key in FIELDS:
            assert math.isfinite(r[key]) and r[key] > 0, (r["impl"], key, r[key])
        assert r["min_s"] <= r["median_s"] <= r["max_s"], r
        assert r["rel_err"] <= 1e-12, r
        if r["impl"] in ("hybridad", "ha.gradient", "hand numba"):
            assert r["allocs_per_call"] == 0 and r["bytes_per_call"] == 0, r
        if r["impl"] == "hand numba":
            assert r["ratio_vs_numba"] == 1.0
        if r["impl"] == "hand numpy":
            assert r["allocs_per_call"] > 0
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in captured.out
        pytest.skip("matplotlib is not installed: the plot part is not checked")
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wrong_gradient_aborts_before_timing(monkeypatch):
    real = kernels.make_expsum_numba

    def wrong(x, cache=True):
        grad = real(x, cache=cache)
        return lambda x: (grad(x)[0], 1.001 * grad(x)[1])

    monkeypatch.setattr(kernels, "make_expsum_numba", wrong)
    settings = suite.make_settings(quick=True, workloads=["expsum"], sizes=[100],
                                   impls=["hand numpy", "hand numba"], memory=False)
    with pytest.raises(suite.BenchError, match="expsum n=100 hand numba.*disagrees"):
        suite.run(settings, progress="none")


def test_memory_child_of_a_hand_written_gradient():
    """One tiny child: the RSS method, and no hybridad/__init__ (numba) in a peer's process."""
    out = rss.run_child("expsum", 100, "hand numpy", warm=False)
    assert out["increase"] >= 0 and out["call_increase"] >= 0
    assert out["rel_err"] <= 1e-12
    assert out["numba_loaded"] is False


def test_import_hybridad_does_not_load_the_suite():
    code = "import sys, hybridad; print(any(m.startswith('hybridad.bench') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_sparse_rows(tmp_path, capsys):
    """The sparse family: hybridad's sparse Jacobian / Hessian, the hand-written
    scipy.sparse ones and scipy's colored finite differences, checked and timed."""
    out_json = tmp_path / "sparse.json"
    status = main(["bench", "--workload", "sparse_jac", "sparse_hess", "--quick", "--sizes", "8",
                   "--impl", "hybridad", "--progress", "none", "--json", str(out_json),
                   "--memory", "--no-plot"])
    assert status == 0  # (memory on: sparse workloads have no children)
    captured = capsys.readouterr()
    assert "deriv/f" in captured.out and suite.SPARSE_FD in captured.out
    doc = json.loads(out_json.read_text())
    assert list(doc["workloads"]) == ["sparse_jac", "sparse_hess"]
    for name, unknowns, bound in (("sparse_jac", 128, 6), ("sparse_hess", 64, 5)):
        w = doc["workloads"][name]
        assert w["kind"] == "sparse" and w["memory_size"] == 8
        rows = {r["impl"]: r for r in w["rows"]}
        assert set(rows) == {"hybridad", "hand numpy", suite.SPARSE_FD}
        for r in rows.values():
            assert r["size"] == 8 and r["unknowns"] == unknowns and r["bound"] == bound
            for key in ("median_s", "min_s", "max_s", "f_s", "grad_f_ratio", "first_call_s"):
                assert math.isfinite(r[key]) and r[key] > 0, (name, r["impl"], key, r[key])
            assert r["peak_rss_bytes"] is None
        ha_row = rows["hybridad"]
        assert ha_row["rel_err"] <= 1e-12 and rows[suite.SPARSE_FD]["rel_err"] <= 1e-5
        assert bound <= ha_row["colors"] <= bound + 2
        assert ha_row["allocs_per_call"] == 0 and ha_row["bytes_per_call"] == 0


def test_sparse_rows_refuse_a_wrong_derivative(monkeypatch):
    from hybridad.bench import sparse_workloads

    real = sparse_workloads.make_bratu_derivatives

    def wrong(n, lam=sparse_workloads.BRATU_LAMBDA):
        gradient, hessian = real(n, lam)
        return gradient, lambda u, n: 1.001 * hessian(u, n)

    monkeypatch.setattr(sparse_workloads, "make_bratu_derivatives", wrong)
    settings = suite.make_settings(quick=True, workloads=["sparse_hess"], sizes=[6],
                                   impls=["hybridad"], memory=False)
    with pytest.raises(suite.BenchError, match="sparse_hess N=6 hybridad.*disagrees"):
        suite.run(settings, progress="none")
    with pytest.raises(ValueError, match="at most 1024"):
        suite.make_settings(workloads=["sparse_jac"], sizes=[10**4])


# --- the wide MLP, the Gaussian process, --dtype and the goals summary --------------


def _directional_fd(problem, direction, h):
    """Central difference of the problem's objective along ``direction`` (a list of
    arrays, one per differentiated argument), in float64."""
    def at(t):
        args = list(problem.args)
        for i, d in zip(problem.diff_argnums, direction, strict=True):
            args[i] = args[i] + t * d
        return float(problem.f(*args))

    return (at(h) - at(-h)) / (2 * h)


@pytest.mark.parametrize(("workload", "size"), [("wide_mlp", 8), ("gp", 12)])
def test_new_workloads_hybridad_matches_the_hand_gradient(workload, size):
    """hybridad's gradient equals the hand-written numpy one to rounding, and both
    agree with central differences along a random direction.

    hybridad's numpy backend (the same derivative program without a numba
    compile of a plan no other test shares: ~5-15 s here); the numba plans
    are checked by every bench run before anything is timed.
    """
    from hybridad.bench import impls

    problem = make_problem(workload, size)
    value, grads = problem.reference()
    assert value == pytest.approx(float(problem.f(*problem.args)), rel=1e-12)
    assert [g.shape for g in grads] == [np.shape(problem.args[i]) for i in problem.diff_argnums]
    impl = impls.setup("hybridad", problem, backend="numpy")
    err = harness.check_against("hybridad", impl.result(impl.call()), (value, grads),
                                problem.tolerance(impls.RTOL_EXACT))
    assert err <= 1e-12
    rng = np.random.default_rng(1)
    direction = [rng.standard_normal(g.shape) for g in grads]
    want = sum(float(np.vdot(g, d)) for g, d in zip(grads, direction, strict=True))
    got = _directional_fd(problem, direction, 1e-5)
    assert got == pytest.approx(want, rel=1e-7, abs=1e-9)
    if workload == "gp":  # every hyperparameter on its own too
        from hybridad.testing import numerical_gradient

        theta, rest = problem.args[0], problem.args[1:]
        num = numerical_gradient(lambda t: problem.f(t, *rest), theta)
        np.testing.assert_allclose(grads[0], num, rtol=1e-7, atol=1e-9)


def test_gp_ports_agree_in_both_dtypes():
    """The GP's jax / torch / autograd ports (as the suite runs them) give the hand-written
    gradient, and keep float32 data in float32 (jax with x64 on included)."""
    from hybridad.bench import impls

    ran = []
    for dtype in ("float64", "float32"):
        problem = make_problem("gp", 6, dtype=dtype)
        reference = problem.reference()
        for name in ("hand numpy", "jax.jit", "torch", "autograd"):
            if impls.availability(name):
                continue
            impl = impls.setup(name, problem)
            value, grads = impl.result(impl.call())
            harness.check_against(name, (value, grads), reference,
                                  problem.tolerance(impl.rtol))
            if name != "autograd":  # (autograd's vjps may promote; not checked)
                assert {g.dtype.name for g in grads} == {dtype}, (name, dtype)
            ran.append((name, dtype))
    assert ("hand numpy", "float32") in ran


def test_float32_problems_stay_close_to_the_float64_reference():
    for workload, size in (("wide_mlp", 16), ("gp", 50), ("quadform", 20), ("mlp", 50)):
        problem = make_problem(workload, size, dtype="float32")
        arrays = [a for a in problem.args if isinstance(a, np.ndarray)]
        assert arrays and all(a.dtype == np.float32 for a in arrays)
        value, grads = problem.numpy_grad(*problem.args)
        grads = workloads.gradient_leaves(grads)
        assert all(g.dtype == np.float32 for g in grads)
        err = harness.check_against("hand numpy float32", (value, grads), problem.reference(),
                                    problem.tolerance(1e-12))
        assert err < 1e-5, (workload, err)
        assert problem.tolerance(1e-12) >= 1e-4


def test_dtype_option_rows_and_goals(tmp_path, capsys, monkeypatch):
    """--dtype float64 float32: every row twice, the dtype shown; hybridad gets float32
    data and returns float32 gradients; the goals summary covers both.  The plot is
    drawn by default where matplotlib is installed, one panel per workload."""
    out_json = tmp_path / "dtypes.json"
    monkeypatch.chdir(tmp_path)
    status = main(["bench", "--workload", "expsum", "rosen", "--sizes", "100", "--quick",
                   "--repeats", "1", "--dtype", "float64", "float32", "--impl", "hybridad",
                   "hybridad serial", "--progress", "none", "--json", str(out_json)])
    assert status == 0
    out = capsys.readouterr().out
    png = tmp_path / "hybridad-bench.png"
    if importlib.util.find_spec("matplotlib") is not None:
        assert "plot written to hybridad-bench.png" in out
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png.read_bytes()[16:24])
        assert (width, height) == (880, 455)  # two panels side by side, 100 dpi
    else:
        assert not png.exists() and "plot written" not in out
    doc0 = json.loads(out_json.read_text())
    assert all(r["peak_rss_bytes"] is None for w in doc0["workloads"].values() for r in w["rows"])
    assert "float32" in out and "goals: " in out and "hybridad serial" in out
    assert "note: rosen runs in float64 only" in out
    doc = json.loads(out_json.read_text())
    assert doc["meta"]["dtypes"] == ["float64", "float32"]
    assert {r["dtype"] for r in doc["workloads"]["rosen"]["rows"]} == {"float64"}
    rows = doc["workloads"]["expsum"]["rows"]
    assert {(r["impl"], r["dtype"]) for r in rows} == {
        (i, d) for i in ("hybridad", "hybridad serial", "hand numpy")
        for d in ("float64", "float32")}
    for r in rows:
        assert r["grad_dtype"] == r["dtype"], r
        assert r["rel_err"] <= (1e-12 if r["dtype"] == "float64" else 1e-4), r
    goals = {g["dtype"]: g for g in doc["goals"]}
    assert set(goals) == {"float64", "float32"}
    for g in goals.values():
        assert g["vs_jax"] is None and g["jax_s"] is None  # not asked for: not a miss
        assert g["vs_numpy"] == pytest.approx(g["hybridad_s"] / g["numpy_s"])
        assert g["vs_serial"] == pytest.approx(g["hybridad_s"] / g["serial_s"])
        assert g["met"] == (not g["misses"])
    with pytest.raises(ValueError, match="unknown dtype"):
        suite.make_settings(dtypes=["float16"])


def test_goals_flags_misses_and_noise():
    def row(impl, median, lo=None, hi=None, dtype="float64"):
        return {"impl": impl, "size": 10, "dtype": dtype, "median_s": median,
                "min_s": median if lo is None else lo, "max_s": median if hi is None else hi}

    doc = {"workloads": {
        "w": {"kind": "gradient", "size_name": "n", "rows": [
            row("hybridad", 2.0, 1.9, 2.1), row("jax.jit", 1.0, 0.9, 1.1),
            row("hand numpy", 4.0), row("hybridad serial", 1.7, 1.6, 2.0)]},
        "r": {"kind": "minimize", "size_name": "n", "rows": [row("hybridad", 1.0)]}}}
    (g,) = report.goals(doc)
    assert (g["vs_jax"], g["vs_numpy"]) == (2.0, 0.5)
    assert g["vs_serial"] == pytest.approx(2.0 / 1.7)
    assert g["misses"] == ["jax.jit"] and g["overlap"] == [] and not g["met"]
    doc["workloads"]["w"]["rows"][3] = row("hybridad serial", 1.5, 1.4, 1.95)
    (g,) = report.goals(doc)
    assert g["misses"] == ["jax.jit", "serial"] and g["overlap"] == ["serial"]
    text = report.format_goals([g])
    assert "MISS jax.jit, serial?" in text and "1 of 1 rows miss a goal" in text


@pytest.mark.parametrize("n", range(1, 8))
def test_round_robin_orders_give_every_call_each_predecessor_alike(n, monkeypatch):
    """Each call of an interleaved timing directly follows each of the others
    equally often over a cycle of rounds (a call right after another
    library's spinning thread pool runs slower): once each for an even
    number of calls, twice for an odd one; the timing runs those orders."""
    rows = harness.balanced_orders(n)
    follows = {}
    for row in rows:
        assert sorted(row) == list(range(n))
        for a, b in zip(row[:-1], row[1:], strict=True):
            follows[a, b] = follows.get((a, b), 0) + 1
    assert len(rows) == (n if n % 2 == 0 else 2 * n) or n == 1
    assert sorted(follows) == [(a, b) for a in range(n) for b in range(n) if a != b]
    assert set(follows.values()) <= {1 if n % 2 == 0 else 2}
    assert harness.balanced_orders(n, 2 * len(rows) + 1) == rows * 2 + rows[:1]

    seen = []
    calls = [lambda i=i: seen.append(i) for i in range(n)]
    monkeypatch.setattr(harness, "settle", lambda calls: None)
    monkeypatch.setattr(harness, "calls_per_batch", lambda call, target_ns, step=1: 3)
    harness.time_round_robin(calls, repeats=len(rows), target_ms=0.01)
    timed = seen[-3 * n * len(rows)::3]  # (a batch: three calls)
    assert [timed[r * n:(r + 1) * n] for r in range(len(rows))] == rows
