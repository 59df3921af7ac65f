"""Measuring this machine's costs for the cost model
(:mod:`hybridad.transforms.costs`): ``python -m hybridad calibrate``.

:func:`calibrate` builds one numba plan whose forward sweep holds one fused
``op -> sum`` region per elementwise op, profiles it
(:mod:`hybridad.plans.profile`), and writes each op's nanoseconds per
element, numpy's copy rates, BLAS's gemm and gemv rates, the numba
backend's matrix-vector loops' and the vector width its loops run fastest
at where :func:`hybridad.transforms.costs.costs` finds them.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ..transforms.costs import Costs, _machine, calibration_path, costs, reset

__all__ = ["calibrate", "ensure_calibrated"]


def _measured_ops():
    """(name, ufunc, nin, domain) of the elementwise ops to calibrate: those
    whose ufunc is numpy's own."""
    from ..ir.registry import REGISTRY

    out = []
    for name, op in sorted(REGISTRY.items()):
        u = getattr(op, "ufunc", None)
        if op.kind != "elementwise" or not isinstance(u, np.ufunc) or u.nin not in (1, 2) or \
                getattr(np, u.__name__, None) is not u or u.types[0][0] == "?" and u.nin == 2:
            continue
        if not any(t.endswith("->d") for t in u.types):
            continue
        out.append((name, u, u.nin, tuple(op.domain or (-2.0, 2.0))))
    return out


def _best_ns(fn, seconds, least):
    """Best time of at least ``least`` calls of ``fn`` (and ``seconds``), ns."""
    best, done = np.inf, 0
    end = time.perf_counter() + seconds
    while done < least or time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        done += 1
    return 1e9 * best


def _gemm_rate(dtype, size=256, seconds=0.1, least=5):
    """ns per multiply-add of a single-threaded BLAS gemm ``size``-cubed (numpy's
    matmul into a buffer, the BLAS libraries at one thread): the best of at
    least ``least`` products."""
    from threadpoolctl import threadpool_limits

    a = np.ones((size, size), dtype)
    b, out = a.copy(), np.empty_like(a)
    with threadpool_limits(1, user_api="blas"):
        return _best_ns(lambda: np.matmul(a, b, out=out), seconds, least) / size ** 3


def _matvec_rates(dtype, size=512, nbytes=16 << 20, seconds=0.1, least=5):
    """ns per matrix element of single-threaded matrix-vector products of
    ``size``-square C matrices, ``nbytes`` of them in turn (each read from
    L3, as a plan's matrices are, not from L2, where gemv runs twice as fast):
    scipy's BLAS gemv (the library the plans call; the mean of ``A x`` and
    ``A^T x``, through the F view, so no copy) and the numba backend's row
    and column loops (:mod:`hybridad.backends.numba.rt`)."""
    import scipy.linalg.blas as sb
    from threadpoolctl import threadpool_limits

    from ..backends.numba import rt

    rng = np.random.default_rng(0)
    count = max(1, nbytes // (size * size * np.dtype(dtype).itemsize))
    mats = [rng.standard_normal((size, size)).astype(dtype) for _ in range(count)]
    x, out = rng.standard_normal(size).astype(dtype), np.empty(size, dtype)
    gemv = sb.get_blas_funcs("gemv", dtype=np.dtype(dtype))

    def each(fn):
        return lambda: [fn(a) for a in mats]

    rates = {}
    with threadpool_limits(1, user_api="blas"):
        rates["blas"] = np.mean([_best_ns(each(lambda a, t=t: gemv(
            1.0, a.T, x, 0.0, out, trans=t, overwrite_y=1)), seconds, least) for t in (0, 1)])
    rates["dot"] = _best_ns(each(lambda a: rt.matvec_dot(a, x, out, 0.0)), seconds, least)
    rates["axpy"] = _best_ns(each(lambda a: rt.matvec_axpy(a, x, out, 0.0)), seconds, least)
    return {k: round(float(v) / (count * size * size), 5) for k, v in rates.items()}


def _simd_bits(gain=0.95):
    """512 where loops like a plan's run in at most ``gain`` of their time with
    LLVM asked for 512-bit vectors (:func:`hybridad.backends.numba.simd.measure`),
    else None (LLVM's default width)."""
    from ..backends.numba import simd

    return 512 if simd.measure() <= gain else None


def _copy_rate(nbytes, seconds=0.1, least=5):
    """ns per byte moved (read + written) by a copy of ``nbytes``: the best
    of at least ``least`` copies (the pages touched first)."""
    a = np.ones(nbytes // 8)
    b = np.zeros_like(a)
    return _best_ns(lambda: np.copyto(b, a), seconds, least) / (2 * a.nbytes)


#: ops per profiled plan: in one generated function of 48 loops LLVM stops
#: inlining vmath's helpers and the loops of exp, log and tanh run scalar
#: (tanh 8.5 ns per element against 1.3 ns in a small plan)
GROUP = 6


def _region_times(f, args, n, budget_s):
    """``{ops of a forward region -> ns per element}`` of a serial plan of
    ``f`` (gradient w.r.t. every argument, partials recomputed: the forward
    regions compute values only), profiled for ``budget_s``."""
    from ..ops.region import recompute_partials
    from .plan import Plan
    from .profile import profile

    with recompute_partials(), np.errstate(all="ignore"):
        plan = Plan(f, args, tuple(range(len(args))), "numba", parallel=False, tiered=False)
        prof = profile(plan, *args, budget_s=budget_s)
    nodes = {m.id: m for m in plan.graph.nodes}
    return {tuple(m.op for m in nodes[r.node].attrs["body"].nodes): r.median_ns / n
            for r in prof.rows if r.kind == "region_reduce" and r.phase == "forward"}


def _profile_group(ops, n, budget_s, rng, dtype=np.float64):
    """``(multiply, {op: ns per element})`` from one plan of ``ops``' regions
    and two baseline regions, in ``dtype``."""
    args = [rng.uniform(0.2, 0.9, n).astype(dtype)]
    for _, _, nin, (lo, hi) in ops:
        args += [rng.uniform(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo), n).astype(dtype)
                 for _ in range(nin)]

    def f(x, *ins):
        total = np.sum(x * 1.5) + np.sum(x * 1.25 * x)
        at = 0
        for _, u, nin, _ in ops:
            total = total + np.sum(u(*ins[at:at + nin]))
            at += nin
        return total

    per = _region_times(f, args, n, budget_s)
    base, twice = per.get(("multiply",)), per.get(("multiply", "multiply"))
    if base is None or twice is None:
        raise RuntimeError(f"calibration: the baseline regions are missing ({sorted(per)})")
    multiply = max(twice - base, 0.0)
    return multiply, {name: max(per[(name,)] - base, 0.0) + multiply
                      for name, *_ in ops if (name,) in per}  # (positive: no region)


def _dependent_ns(n, budget_s, rng, chain=16):
    """ns per element of an op on a chain of dependent ops: a region of
    ``chain`` dependent multiply-adds (float64) against one multiply, per op."""
    def f(x):
        w = x
        for _ in range(chain):
            w = w * 0.999 + 0.001
        return np.sum(x * 1.5) + np.sum(w)

    per = _region_times(f, [rng.uniform(0.2, 0.9, n)], n, budget_s)
    base, chained = per.get(("multiply",)), per.get(("multiply", "add") * chain)
    if base is None or chained is None:
        raise RuntimeError(f"calibration: the chain regions are missing ({sorted(per)})")
    return max(chained - base, 0.0) / (2 * chain - 1)


def calibrate(path=None, n=8192, budget_s=2.0, ops=None):
    """Measure this machine's costs and write them where :func:`costs` finds
    them (``path``, default :func:`calibration_path`).

    Builds numba plans whose forward sweeps hold one ``op -> sum`` region
    per elementwise op, :data:`GROUP` ops a plan, and profiles them (a
    minute or two of compiles).  ``ops``: names of the ops to measure (default: every
    elementwise op with a numpy ufunc); the others keep the table's figures.

    Returns
    -------
    Costs
    """
    from ..backends.numba.vmath_names import FLOAT32_NATIVE, FLOAT32_UFUNCS

    names, ops = ops, [o for o in _measured_ops() if ops is None or o[0] in ops]
    rng = np.random.default_rng(0)
    op_ns, multiplies = dict(costs().op_ns if names is not None else {}), []
    groups = [ops[at:at + GROUP] for at in range(0, len(ops), GROUP)]
    # float32 kernels run vmath's float32 twins and float32-arithmetic functions
    # (about half the float64 arithmetic, or less): measured in float32 by one
    # more plan, as "<op>:float32"
    twins = [o for o in ops if o[0] in FLOAT32_UFUNCS or o[0] in FLOAT32_NATIVE]
    share = budget_s / (len(groups) + bool(twins))  # the profiling budget, per plan
    for group in groups:
        multiply, measured = _profile_group(group, n, share, rng)
        multiplies.append(multiply)
        op_ns.update(measured)
    multiply = float(np.median(multiplies))
    op_ns.update(multiply=multiply, add=multiply, subtract=multiply)
    if twins:
        _, measured = _profile_group(twins, n, share, rng, np.float32)
        op_ns.update({f"{k}:float32": v for k, v in measured.items()})
    cpu, cores = _machine()
    c = Costs(op_ns={k: round(v, 4) for k, v in sorted(op_ns.items())},
              cache_ns_per_byte=round(_copy_rate(64 << 10), 5),
              stream_ns_per_byte=round(_copy_rate(64 << 20), 5),
              cpu=cpu, cores=cores, when=time.strftime("%Y-%m-%d"),
              gemm_ns={dt: round(_gemm_rate(dt), 5) for dt in ("float64", "float32")},
              matvec_ns={dt: _matvec_rates(dt) for dt in ("float64", "float32")},
              simd_bits=_simd_bits(),
              dependent_ns=round(_dependent_ns(n, share, rng), 5))
    path = path or calibration_path()
    if path:
        d = {k: v for k, v in c.to_dict().items() if k != "source"}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(d, fh, indent=1)
    reset()
    c.source = f"this machine, calibrated {c.when} ({path})"
    return c


def ensure_calibrated(log=print):
    """The cost table in effect, this machine's: measured first (:func:`calibrate`,
    once per machine: the table is written to the disk cache) when the table in
    effect is another machine's -- the built-in one, measured on the reference
    machine, on a machine without a calibration of its own.

    ``python -m hybridad bench`` calls it before it times anything, so that its
    plans choose (store or recompute partials, matrix-vector loop or gemv)
    by this machine's costs, as a calibrated
    user's plans do.  A table named by ``HYBRIDAD_COSTS`` (``builtin`` too) is
    used as it is.  Without a disk cache, the table goes to a temporary file
    that ``HYBRIDAD_COSTS`` names for the rest of the process.

    Parameters
    ----------
    log : callable
        Where the note on the measurement goes (``print``).

    Returns
    -------
    Costs
    """
    if os.environ.get("HYBRIDAD_COSTS", "").strip():
        return costs()
    c, (cpu, cores) = costs(), _machine()
    if (c.cpu, c.cores) == (cpu, cores):
        return c
    log(f"note: no cost table for this machine ({cpu or 'unknown CPU'}, {cores} cores; "
        f"the one in effect is {c.cpu or 'another machine'}'s): measuring it first, once "
        "(python -m hybridad calibrate; a minute or two of compiles on a new disk cache)")
    t0 = time.perf_counter()
    path = calibration_path()
    if path is None:  # no disk cache: a file of its own for this process
        import tempfile

        fd, path = tempfile.mkstemp(prefix="hybridad-costs-", suffix=".json")
        os.close(fd)
        os.environ["HYBRIDAD_COSTS"] = path
    calibrate(path=path)
    reset()
    c = costs()
    log(f"note: cost table measured in {time.perf_counter() - t0:.0f} s: {c.source}")
    return c
