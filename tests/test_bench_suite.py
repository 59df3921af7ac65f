"""The benchmark suite (``python -m hybridad bench``) in its smallest form, so it cannot rot.

One workload (expsum) at n = 100, quick settings, the hybridad and
hand-written rows only (no peers: they would dominate the time), no memory
children except one tiny one run on its own.
"""

import importlib.util
import json
import math
import subprocess
import sys

import pytest

from hybridad.__main__ import main
from hybridad.bench import kernels, rss, suite

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
                   "--impl", "hybridad", "--progress", "none", "--json", str(out_json)])
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
