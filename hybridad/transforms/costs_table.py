"""The built-in cost table (:mod:`hybridad.transforms.costs`): written by
``python -m hybridad calibrate --builtin`` on the reference machine.

The four ``"<op>:float32"`` entries (vmath's float32 twins) were added by
hand on 2026-11-26: the float64 figure times the float32 / float64 ratio
``calibrate(ops=["exp", "expm1", "log", "tanh"])`` measured here in two runs
(exp 0.64, expm1 0.61, log 0.80, tanh 0.61); the next ``--builtin`` run
measures them directly.  ``"tanh:float32"`` again on 2026-11-27, when float32
tanh moved to float32 arithmetic (``vmath.vtanhf``): ratio 0.28 and 0.23 in two
runs, 0.255 taken.  ``"exp:float32"`` on 2026-11-27, when float32 exp had
moved to float32 arithmetic (``vmath.vexpf``) the day before: ratio 0.274,
0.281 and 0.284 in three runs, 0.28 taken (0.5273 had described the widened
float64 twin).

``"log1p"`` and ``"logaddexp"`` (and their ``":float32"`` entries) by hand
on 2026-12-04, when both moved to vmath (``vlog1p``, ``vlogaddexp``: 10.9 and
21.5 ns had been libm's scalar calls): ``calibrate(ops=["log1p",
"logaddexp", "exp", "log"])`` on a 2-core AMD EPYC, three runs, gave 0.956,
2.24, 1.067 and 2.51 ns, scaled by 1.45 (this table's exp and log over that
machine's: 1.51 and 1.40).  Until that day the calibration profiled a
program numba compiled (its timers' clock was an intrinsic only numba
knew), where the plans run hybridad's own compiler's: numba's LLVM left
the larger vmath functions as calls, scalar.

``matvec_ns`` was added on 2026-11-27: the medians of five runs of
:func:`hybridad.plans.calibrate._matvec_rates` per dtype here (single-threaded
gemv and the numba backend's row and column loops over 16 MiB of 512 x 512
matrices; float64 gemv 0.29-0.52 ns per element, the loops 0.25-0.41).

``simd_bits`` and ``dependent_ns`` were added on 2026-11-27, measured on the
2-core Intel Xeon (Emerald Rapids) these sessions run on, not the reference
machine: :func:`hybridad.backends.numba.simd.measure` gave 0.74-0.79 (512-bit
vectors chosen; a CPU without them keeps its width whatever this says), and
:func:`hybridad.plans.calibrate._dependent_ns` 0.0154-0.0163 ns per op."""

TABLE = {
 "op_ns": {
  "absolute": 0.0,
  "add": 0.0,
  "arccos": 10.3315,
  "arccosh": 13.2264,
  "arcsin": 4.717,
  "arcsinh": 25.4014,
  "arctan": 8.7227,
  "arctan2": 14.59,
  "arctanh": 19.8291,
  "cbrt": 11.8491,
  "ceil": 0.0,
  "copysign": 0.0476,
  "cos": 9.7031,
  "cosh": 6.1387,
  "deg2rad": 0.011,
  "divide": 0.2101,
  "exp": 0.8239,
  "exp:float32": 0.2307,
  "exp2": 2.3722,
  "expm1": 1.0146,
  "expm1:float32": 0.6189,
  "fabs": 0.0,
  "floor": 0.0,
  "floor_divide": 0.1871,
  "fmod": 5.752,
  "heaviside": 0.0856,
  "hypot": 8.3932,
  "log": 1.291,
  "log:float32": 1.0328,
  "log10": 7.1163,
  "log1p": 1.386,
  "log1p:float32": 1.547,
  "log2": 3.3741,
  "logaddexp": 3.25,
  "logaddexp:float32": 3.64,
  "logaddexp2": 19.845,
  "multiply": 0.0,
  "negative": 0.0171,
  "positive": 0.0208,
  "power": 10.2214,
  "rad2deg": 0.0282,
  "reciprocal": 0.2091,
  "remainder": 5.7704,
  "rint": 0.0,
  "sign": 0.0244,
  "sin": 8.0026,
  "sinh": 13.1726,
  "sqrt": 0.4059,
  "square": 0.0073,
  "subtract": 0.0,
  "tan": 8.675,
  "tanh": 1.2543,
  "tanh:float32": 0.3198,
  "trunc": 0.0123
 },
 "cache_ns_per_byte": 0.0126,
 "stream_ns_per_byte": 0.03816,
 "cpu": "AMD EPYC",
 "cores": 2,
 "when": "2026-11-26",
 "gemm_ns": {
  "float64": 0.03837,
  "float32": 0.01905
 },
 "matvec_ns": {
  "float64": {"blas": 0.36, "dot": 0.33, "axpy": 0.31},
  "float32": {"blas": 0.27, "dot": 0.1, "axpy": 0.25}
 },
 "simd_bits": 512,
 "dependent_ns": 0.016
}
