"""The benchmark suite: ``python -m hybridad bench``.

hybridad's gradient against hand-written numpy and numba gradients of the
same functions, and JAX, PyTorch and autograd when importable: time per
call, ratios, numpy allocations per call, peak memory in a fresh process
and first-call time.  See ``docs/benchmarks.md``.

Modules: :mod:`.workloads` (the objectives, their hand-written numpy
gradients and data), :mod:`.kernels` (hand-written numba gradients),
:mod:`.impls` (the implementations timed), :mod:`.harness` (timing,
allocation counts, tables), :mod:`.rss` (peak RSS in child processes),
:mod:`.optim` (scipy optimizer runs), :mod:`.sparse_workloads` (sparse
Jacobians and Hessians), :mod:`.gp` (the Gaussian-process likelihood and its
ports), :mod:`.suite` (the runner and the command line), :mod:`.report`
(the tables and the goals summary), :mod:`.plot` (the figure).  Nothing here is imported by
``import hybridad``; peers (jax, torch, autograd), tqdm and matplotlib are
imported only by the functions that use them.
"""
