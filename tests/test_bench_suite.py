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
