"""Where a GPU plan's time goes: every CUDA kernel of its gradient calls.

The workloads of ``bench_gpu.py``; each plan (with and without
``cuda_graph=True``) is warmed up, then ``--calls`` gradient calls run under
``torch.profiler``, whose CUPTI tracer records every kernel the process
launches -- hybridad's generated ones (``hybridad_<hash>``: regions,
``hybridad_sum_``/``_max_``/``_min_``: reduction levels), cuBLAS's and
cupy's -- with its device time.  Prints, per workload, the kernels by total
device time and the wall time per call, and writes the tables to ``--out``.

Needs a GPU, cupy and torch: ``python benchmarks/profile_gpu.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu  # noqa: E402

import hybridad as ha  # noqa: E402


def profile(f, args, argnums, cuda_graph, calls):
    import cupy
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dev = [cupy.asarray(a) for a in args]
    plan = ha.compile(f, *dev, argnums=argnums if len(argnums) > 1 else 0,
                      cuda_graph=cuda_graph)
    res = plan.new_result()
    for _ in range(5):
        plan.gradient(*dev, out=res)
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        plan.gradient(*dev, out=res)
    cupy.cuda.Device().synchronize()
    wall = (time.perf_counter() - t0) / calls
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            plan.gradient(*dev, out=res)
        cupy.cuda.Device().synchronize()
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None)
        if device_us is None:
            device_us = e.cuda_time_total
        if device_us > 0:
            rows.append((device_us / calls, e.count // calls, e.key))
    rows.sort(reverse=True)
    return wall, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--float32", action="store_true")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--out", metavar="FILE")
    a = p.parse_args()
    dtype = np.float32 if a.float32 else np.float64
    lines = []
    for name, (f, args, argnums) in bench_gpu.workloads(a.quick, dtype).items():
        for graph in (False, True):
            wall, rows = profile(f, args, argnums, graph, a.calls)
            total = sum(r[0] for r in rows)
            lines.append(f"\n{name} ({np.dtype(dtype).name}, cuda_graph={graph}): "
                         f"{wall * 1e6:.1f} us per call, kernels {total:.1f} us")
            for us, count, key in rows[:15]:
                lines.append(f"  {us:9.1f} us  {100 * us / max(total, 1e-9):5.1f}%  x{count:<3d} "
                             f"{key[:90]}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
