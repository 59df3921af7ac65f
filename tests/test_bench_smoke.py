"""Smoke test of benchmarks/bench_core.py: a quick run writes sane JSON rows."""

import importlib.util
import json
import math
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_core.py"
REQUIRED_IMPLS = {"ha.gradient", "plan.gradient", "plan[numpy]", "numpy", "numpy_out"}
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
    assert ("expsum", 100) in cases and len(cases) >= 3
    for case in cases:
        impls = {r["impl"] for r in rows if (r["case"], r["n"]) == case}
        assert REQUIRED_IMPLS <= impls, (case, impls)
    for r in rows:
        for key in ("median_us", "min_us", "max_us", "ratio_vs_numpy"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["case"], r["impl"], key, r[key])
        assert r["min_us"] <= r["median_us"] <= r["max_us"]
        if r["impl"] in HYBRIDAD_IMPLS:
            assert r["allocs_per_call"] == 0 and r["bytes_per_call"] == 0, r
            assert math.isfinite(r["first_call_us"]) and r["first_call_us"] > 0, r
        if r["impl"] == "numpy":
            assert r["ratio_vs_numpy"] == 1.0
