#!/bin/sh
# The GPU checks of one device session, as one command (the device machine
# already has numpy, numba, scipy, cupy, jax and torch; nothing is installed):
#
#     sh benchmarks/gpu_check.sh            # logs and JSON under $OUT (or ./gpu-out)
#
# 1. the GPU test files (tests/test_gpu.py on the device; the cuBLAS handles'
#    and the graph runner's tests beside it), versions first;
# 2. benchmarks/bench_gpu.py in float64 and float32 (hybridad with and without
#    cuda_graph, torch and jax.jit; device allocations per call, peak memory,
#    what the matrix products ran in);
# 3. benchmarks/tune_gpu_sums.py (the sums' launch shapes, measured);
# 4. the profiles: by kernel (profile_gpu.py) and by statement
#    (profile_gpu_statements.py), in one file.
# Seven files in all (the device tool brings back a few); each step's output is
# kept, a failing step does not stop the next one.  About 4 minutes on an H200.
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/hybridad-gpu-check}"
PY="${PYTHON:-python3}"
{
    nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1
    "$PY" -c "import hybridad, cupy, numba; print(hybridad.__file__, cupy.__version__, numba.__version__)" 2>&1
    timeout 200 "$PY" -m pytest -q -p no:cacheprovider -rfE \
        tests/test_gpu.py tests/test_cublas_capture.py tests/test_graph_runner.py 2>&1
} > "$OUT/gpu_tests.log"
tail -3 "$OUT/gpu_tests.log"
timeout 150 "$PY" benchmarks/bench_gpu.py --json "$OUT/bench_gpu_f64.json" > "$OUT/bench_gpu_f64.txt" 2>&1
tail -27 "$OUT/bench_gpu_f64.txt"
timeout 120 "$PY" benchmarks/bench_gpu.py --float32 --json "$OUT/bench_gpu_f32.json" \
    > "$OUT/bench_gpu_f32.txt" 2>&1
tail -27 "$OUT/bench_gpu_f32.txt"
timeout 60 "$PY" benchmarks/tune_gpu_sums.py > "$OUT/tune_gpu_sums.txt" 2>&1
cat "$OUT/tune_gpu_sums.txt"
{
    timeout 60 "$PY" benchmarks/profile_gpu.py --calls 10 2>&1
    timeout 60 "$PY" benchmarks/profile_gpu_statements.py gp mlp expsum euler 2>&1
} > "$OUT/profiles.txt"
