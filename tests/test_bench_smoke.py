"""Smoke test of benchmarks/bench_core.py: a quick run writes sane JSON rows."""

import importlib.util
import json
import math
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_core.py"
HAND_IMPLS = {"numpy", "numpy_out", "numba"}  # numba is a hybridad dependency
REQUIRED_IMPLS = {"ha.gradient", "plan.gradient", "plan[numpy]"} | HAND_IMPLS
HYBRIDAD_IMPLS = {"ha.gradient", "plan.gradient", "plan[numpy]"}


def load_bench(monkeypatch):
    """Import the script from its path (registered in sys.modules for dataclasses)."""
    spec = importlib.util.spec_from_file_location("bench_core", BENCH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_core", module)
    spec.loader.exec_module(module)
    return module


def test_quick_run_writes_rows(tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    assert load_bench(monkeypatch).main(["--quick", "--json", str(out), "--sizes", "100"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert "median_us" in capsys.readouterr().out

    cases = {(r["case"], r["n"]) for r in rows}
    assert ("expsum", 100) in cases and ("mlp B=1000", 321) in cases and len(cases) >= 4
    for case in cases:
        impls = {r["impl"] for r in rows if (r["case"], r["n"]) == case}
        assert REQUIRED_IMPLS <= impls, (case, impls)
    for r in rows:
        for key in ("median_us", "min_us", "max_us", "ratio_vs_numpy", "ratio_vs_best_hand"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["case"], r["impl"], key, r[key])
        assert r["min_us"] <= r["median_us"] <= r["max_us"]
        if r["impl"] in HYBRIDAD_IMPLS:
            assert r["allocs_per_call"] == 0 and r["bytes_per_call"] == 0, r
            assert math.isfinite(r["first_call_us"]) and r["first_call_us"] > 0, r
        if r["impl"] == "numpy":
            assert r["ratio_vs_numpy"] == 1.0
        if r["impl"] in HAND_IMPLS:
            assert r["ratio_vs_best_hand"] >= 1.0, r
    for case in cases:  # the best hand-written row of each case is its own reference
        best = [r for r in rows if (r["case"], r["n"]) == case and r["ratio_vs_best_hand"] == 1.0]
        assert best and best[0]["impl"] in HAND_IMPLS, (case, best)
