#!/bin/sh
# The GPU checks of one device session, as one command (the device machine
# already has numpy, numba, scipy, cupy, jax and torch; nothing is installed):
#
#     sh benchmarks/gpu_check.sh            # logs and JSON under $OUT (or ./gpu-out)
#
# 1. the GPU test files (tests/test_gpu.py on the device; the host emulation's
#    and the CUDA sources' tests beside it);
# 2. benchmarks/bench_gpu.py in float64 and float32 (hybridad with and without
#    cuda_graph, torch and jax.jit; device allocations per call, peak memory,
#    what the matrix products ran in).
# Each step's output is kept; a failing step does not stop the next one.
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
"$PY" -c "import hybridad, cupy; print(hybridad.__file__, cupy.__version__)" 2>&1 |
    tee "$OUT/versions.txt"
"$PY" -m pytest -q -p no:cacheprovider \
    tests/test_gpu.py tests/test_cupy_program.py tests/test_cuda_source.py 2>&1 |
    tee "$OUT/gpu_tests.log"
"$PY" benchmarks/bench_gpu.py --json "$OUT/bench_gpu_f64.json" 2>&1 | tee "$OUT/bench_gpu_f64.txt"
"$PY" benchmarks/bench_gpu.py --float32 --json "$OUT/bench_gpu_f32.json" 2>&1 |
    tee "$OUT/bench_gpu_f32.txt"
