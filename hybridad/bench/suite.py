"""The benchmark suite behind ``python -m hybridad bench``.

For every workload (:data:`hybridad.bench.workloads.WORKLOADS`) and size, and
every implementation (:mod:`hybridad.bench.impls`), in one run:

* ``median_s`` / ``min_s`` / ``max_s`` -- seconds per value+gradient call over
  interleaved batches (:func:`~hybridad.bench.harness.time_round_robin`); for
  ``rosen`` the seconds of a whole ``scipy.optimize.minimize`` run, rounds
  rotated (:func:`~hybridad.bench.optim.time_optimizer`);
* ``f_s`` and ``grad_f_ratio`` -- the plain numpy function's value alone,
  timed in the same batches, and the value+gradient time over it (``rosen``:
  one evaluation over one value);
* ``ratio_vs_numba`` -- the median over the hand-written numba gradient's;
* ``allocs_per_call`` / ``bytes_per_call`` -- numpy allocations per call
  (:func:`hybridad.testing.count_allocations`; None for jax and torch, whose
  buffers numpy's allocator does not see: their memory is in the RSS columns);
* ``first_call_s`` -- build (trace and plan, compile or load from numba's
  disk cache, jit) and the first call (sparse rows: pattern detection and
  coloring too);
* ``peak_rss_bytes``, ``call_rss_bytes``, ``startup_rss_bytes`` -- at the
  largest size of each workload, in a fresh child process
  (:mod:`hybridad.bench.rss`): the peak RSS increase of build + first
  gradient after the library started, of one more call, and of the
  library's start-up.

Every implementation's value and gradient are checked against the
hand-written numpy ones before it is timed; a disagreement aborts the run
(:class:`BenchError`).

Dtypes (``--dtype float64 float32``, :attr:`Settings.dtypes`; default
float64 only): every ``gradient`` workload runs once per dtype, its data
cast (:meth:`~hybridad.bench.workloads.Problem.astype`) and every
implementation given arrays of that dtype; rows carry ``dtype`` and
``grad_dtype`` (the dtype of the gradient the implementation returned).  A
float32 row is checked against the float64 hand-written gradient at the
same data, at a float32 tolerance
(:meth:`~hybridad.bench.workloads.Problem.tolerance`).  ``minimize`` and
``sparse`` workloads run in float64 only (a note says so); memory children
measure the float64 rows.

The ``hybridad serial`` row is hybridad's plan built with
``parallel=False``.  After the tables, the goals summary
(:func:`hybridad.bench.report.goals`, stored as the document's ``"goals"``):
per gradient workload, size and dtype, hybridad's median over jax.jit's,
over hand numpy's and over hybridad serial's, the rows that miss a
goal marked.  The tables and the summary are formatted by
:mod:`hybridad.bench.report`.

Sparse workloads (``kind="sparse"``, :mod:`hybridad.bench.sparse_workloads`)
have rows of their own (:func:`measure_sparse`): hybridad's sparse Jacobian
or Hessian, the hand-written ``scipy.sparse`` one (the reference) and
scipy's colored finite differences, each over one call of the function
(``grad_f_ratio``), with ``colors`` and ``bound`` (the densest row's
nonzeros); no memory children.
"""

from __future__ import annotations

import concurrent.futures
import argparse
import dataclasses
import datetime
import functools
import json
import sys
import time

import numpy as np

from . import harness, optim, report
from .impls import HYBRIDAD_IMPLS, RTOL_EXACT, availability, setup
from .report import (COLUMNS, SPARSE_COLUMNS, TIME_UNIT, format_bytes,  # noqa: F401 (re-exported)
                     format_report, size_label)
from .workloads import DTYPES, WORKLOADS, make_problem, warm_problem

IMPLS = ("hybridad", "hybridad serial", "ha.gradient", "hand numpy", "hand numba", "jax.jit",
         "torch", "autograd")
SCIPY_ROW = "scipy rosen_der"  # minimize workloads: scipy's own hand-written derivative
REFERENCE = "hand numpy"
BASELINE = "hand numba"
NO_CHILD = {"ha.gradient", "hybridad serial", SCIPY_ROW}  # no memory child: hybridad's plan
# again (ha.gradient, the serial plan's arenas are the default plan's) / not a gradient
SPARSE_FD = "scipy colored FD"  # sparse workloads: approx_derivative(..., sparsity=)
SPARSE_MAX = 1024  # sparse workloads: the largest grid (N x N, 2 N^2 unknowns)
DEFAULT_PLOT = "hybridad-bench.png"  # written where matplotlib is installed (--no-plot: not)

ALLOC_BUDGET_S = 1.0  # gradient rows: allocation counts over at most ~this many seconds of calls
FULL = {"repeats": 7, "target_ms": 20.0, "alloc_calls": 100, "minimize_repeats": 5}
QUICK = {"repeats": 3, "target_ms": 5.0, "alloc_calls": 10, "minimize_repeats": 3}


class BenchError(RuntimeError):
    """An implementation disagrees with the hand-written gradient (or a child failed)."""


@dataclasses.dataclass
class Settings:
    """What one run measures (see :func:`make_settings`)."""

    quick: bool
    workloads: list
    sizes: dict  # workload -> sizes
    impls: list
    memory: bool
    repeats: int
    target_ms: float
    alloc_calls: int
    minimize_repeats: int
    jobs: int = 2
    seed: int = 0
    dtypes: tuple = ("float64",)  # gradient workloads run in each; others in float64 only
    calibrate: bool = False  # measure this machine's cost table first where it has none


def make_settings(quick=False, workloads=None, sizes=None, impls=None, memory=True,
                  repeats=None, jobs=2, dtypes=None, calibrate=False):
    """Settings of a run.

    Parameters
    ----------
    quick : bool
        One size per workload (its ``quick_sizes``), 3 batches of ~5 ms.
    workloads : list of str, optional
        Default: all of :data:`~hybridad.bench.workloads.WORKLOADS`.
    sizes : list of int, optional
        Sizes for every selected workload (default: the workload's own).
    impls : list of str, optional
        Default :data:`IMPLS` (optional peers that cannot be imported are
        skipped with a note).  The reference (``hand numpy``) always runs.
    memory : bool
        Run the RSS children.
    repeats : int, optional
        Timed batches (rounds for ``minimize`` workloads).
    jobs : int
        Memory children run at once.
    dtypes : list of str, optional
        Some of :data:`~hybridad.bench.workloads.DTYPES` (default float64
        only): every ``gradient`` workload runs in each, data and every
        implementation in that dtype (``minimize`` and ``sparse`` workloads
        run in float64 only, with a note).  Memory children measure the
        float64 rows.
    calibrate : bool
        Before timing hybridad, measure this machine's cost table when the
        one in effect is another machine's
        (:func:`hybridad.plans.calibrate.ensure_calibrated`; the command line's
        default, ``--no-calibrate`` leaves it out).

    Returns
    -------
    Settings
    """
    names = list(workloads or WORKLOADS)
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    chosen = {w: tuple(sizes) if sizes else (WORKLOADS[w].quick_sizes if quick
                                              else WORKLOADS[w].sizes) for w in names}
    for w, ws in chosen.items():
        kind = WORKLOADS[w].kind
        bad = [n for n in ws if n < 2 or (kind == "minimize" and n % 2)
               or (kind == "sparse" and n > SPARSE_MAX)]
        if bad:
            raise ValueError(f"sizes {bad} do not fit workload {w!r} (at least 2"
                             + (", even: tile([-1.2, 1], n/2))" if w == "rosen" else
                                f", at most {SPARSE_MAX}: an N x N grid)" if kind == "sparse"
                                else ")"))
    dtypes = tuple(dict.fromkeys(dtypes or ("float64",)))
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; choose from {list(DTYPES)}")
    wanted = set(impls or IMPLS) | {REFERENCE}
    impls = [n for n in (*IMPLS, "hand numpy out=") if n in wanted]
    base = QUICK if quick else FULL
    return Settings(quick, names, chosen, impls, memory,
                    repeats or base["repeats"], base["target_ms"], base["alloc_calls"],
                    repeats or base["minimize_repeats"], jobs, dtypes=dtypes,
                    calibrate=calibrate)


# --- progress ------------------------------------------------------------------------------


class Progress:
    """A tqdm bar when tqdm is importable (``mode="auto"``), else one line per step."""

    def __init__(self, total, mode="auto", stream=None):
        self.stream = stream or sys.stderr
        self.total, self.done, self.bar = total, 0, None
        self.mode = mode
        if mode in ("auto", "tqdm"):
            try:
                from tqdm import tqdm
            except ImportError:
                if mode == "tqdm":
                    raise
                self.mode = "plain"
            else:
                self.mode = "tqdm"
                self.bar = tqdm(total=total, file=self.stream, unit="step", desc="bench",
                                dynamic_ncols=True)

    def step(self, label):
        """Mark the start of a step named ``label``."""
        self.done += 1
        if self.bar is not None:
            if self.done > 1:
                self.bar.update(1)
            self.bar.set_postfix_str(label, refresh=True)
        elif self.mode == "plain":
            print(f"[{self.done}/{self.total}] {label}", file=self.stream, flush=True)

    def expect(self, remaining):
        """There are ``remaining`` more steps (the total is adjusted)."""
        self.total = self.done + remaining
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.update(self.total - self.bar.n)
            self.bar.close()


# --- measuring ------------------------------------------------------------------------------


def where_label(workload, problem):
    """``mlp B=10^4`` (``mlp B=10^4 float32`` in another dtype than float64): for messages."""
    dtype = getattr(problem, "dtype", "float64")
    return (f"{workload.name} {size_label(workload.size_name, problem.size)}"
            + ("" if dtype == "float64" else f" {dtype}"))


def _check(problem, name, got, rtol, where, reference=None):
    reference = problem.reference() if reference is None else reference
    try:
        return harness.check_against(name, got, reference, problem.tolerance(rtol))
    except AssertionError as exc:
        raise BenchError(f"{where}: {exc} -- the hand-written numpy gradient is the "
                         "reference; this implementation is wrong, nothing was timed") from None


def _row(problem, workload, name, **fields):
    row = {"workload": workload.name, "size": problem.size, "size_name": workload.size_name,
           "dtype": getattr(problem, "dtype", "float64"), "n": problem.n, "impl": name,
           "median_s": None, "min_s": None, "max_s": None,
           "f_s": None, "grad_f_ratio": None, "ratio_vs_numba": None,
           "allocs_per_call": None, "bytes_per_call": None, "first_call_s": None,
           "peak_rss_bytes": None, "call_rss_bytes": None, "startup_rss_bytes": None,
           "rel_err": None}
    row.update(fields)
    return row


def measure_gradient(problem, workload, settings, names):
    """Rows of a value+gradient problem, one per implementation it has.

    Each implementation's value and gradient are checked against the
    reference first (:meth:`~hybridad.bench.workloads.Problem.reference`:
    float64, also for a float32 problem); ``grad_dtype`` records the dtype
    of the gradient it returned.
    """
    where = where_label(workload, problem)
    impls = [impl for impl in (setup(name, problem) for name in names) if impl is not None]
    reference = problem.reference()
    results = [impl.result(impl.call()) for impl in impls]
    errors = [_check(problem, impl.name, got, impl.rtol, f"{where} {impl.name}", reference)
              for impl, got in zip(impls, results, strict=True)]
    grad_dtypes = ["/".join(sorted({np.asarray(g).dtype.name for g in got[1]}))
                   for got in results]
    args = problem.args

    def f_value():
        return problem.f(*args)

    timings = harness.time_round_robin([impl.call for impl in impls] + [f_value],
                                       settings.repeats, settings.target_ms)
    f_us = timings[-1][0]
    rows = []
    for impl, (median, lo, hi, number), err, grad_dtype in zip(impls, timings, errors,
                                                               grad_dtypes, strict=False):
        # (counts are per call: slow rows are counted over fewer calls, at least 2)
        calls = max(2, min(settings.alloc_calls, int(ALLOC_BUDGET_S / (median * 1e-6))))
        allocs, nbytes = (harness.allocations_per_call(impl.call, calls)
                          if impl.numpy_memory else (None, None))
        rows.append(_row(problem, workload, impl.name, median_s=median * 1e-6,
                         min_s=lo * 1e-6, max_s=hi * 1e-6, f_s=f_us * 1e-6,
                         grad_f_ratio=median / f_us, allocs_per_call=allocs,
                         bytes_per_call=nbytes, first_call_s=impl.first_call_s, rel_err=err,
                         repeats=settings.repeats, calls_per_repeat=number,
                         grad_dtype=grad_dtype, alloc_calls=calls if impl.numpy_memory else None))
    return rows


def measure_minimize(problem, workload, settings, names):
    """Rows of a ``minimize`` problem: whole L-BFGS-B runs per implementation."""
    where = where_label(workload, problem)
    x0 = problem.args[0]
    options = optim.options_for(problem.n)
    entries = []  # (name, value_and_grad, rtol, first_call_s, numpy_memory)
    for name in names:
        if name in ("ha.gradient", "hybridad serial"):
            continue  # the optimizer's hybridad row is hybridad.scipy.Objective
        if name == "hybridad":
            vg, first = optim.objective_value_and_grad(problem)
            entries.append((name, vg, RTOL_EXACT, first, True))
            continue
        impl = setup(name, problem)
        if impl is not None and impl.value_and_grad is not None:
            entries.append((name, impl.value_and_grad, impl.rtol, impl.first_call_s,
                            impl.numpy_memory))
    scipy_vg = optim.scipy_value_and_grad()
    t0 = time.perf_counter()
    scipy_vg(x0)
    entries.append((SCIPY_ROW, scipy_vg, RTOL_EXACT, time.perf_counter() - t0, True))
    errors = {name: 0.0 for name, *_ in entries}
    for x in optim.check_points(problem, settings.seed):
        ref = dataclasses.replace(problem, args=(x, *problem.args[1:]))
        for name, vg, rtol, _, _ in entries:
            value, grad = vg(x)
            errors[name] = max(errors[name], _check(ref, name, (value, [grad]), rtol,
                                                    f"{where} {name}"))
    runs = [optim.minimize_run(entry[1], x0, options) for entry in entries]
    for run in runs:
        run()  # untimed: warm (plans, jit, caches)
    times, results = optim.time_optimizer(runs, settings.minimize_repeats)
    evals = optim.time_evaluations([entry[1] for entry in entries] + [problem.f], x0,
                                   max(settings.repeats, 3), settings.target_ms)
    f_us = evals[-1]
    rows = []
    for (name, vg, _, first, numpy_memory), t, res, eval_us in zip(
            entries, times, results, evals, strict=False):
        allocs, nbytes = (harness.allocations_per_call(optim.alternating(vg, x0),
                                                       settings.alloc_calls)
                          if numpy_memory else (None, None))
        rows.append(_row(problem, workload, name, median_s=float(np.median(t)), min_s=min(t),
                         max_s=max(t), f_s=f_us * 1e-6, eval_s=eval_us * 1e-6,
                         grad_f_ratio=eval_us / f_us, allocs_per_call=allocs,
                         bytes_per_call=nbytes, first_call_s=first, rel_err=errors[name],
                         repeats=settings.minimize_repeats, times_s=t, nit=int(res.nit),
                         nfev=int(res.nfev), f_final=float(res.fun),
                         maxiter=options["maxiter"]))
    return rows


def measure_sparse(problem, workload, settings, names):
    """Rows of a sparse workload: hybridad's sparse derivative (with ``hybridad``
    or ``ha.gradient`` among ``names``), the hand-written one and scipy's colored
    finite differences, each checked against the hand-written one first."""
    import scipy.sparse as sp
    from scipy.optimize._numdiff import approx_derivative, group_columns

    import hybridad as ha
    from hybridad.plans.tiered import join_all

    where = where_label(workload, problem)
    f, args = problem.f, problem.args
    ref = sp.csr_array(problem.derivative(*args))
    structure = sp.csr_array((np.ones(ref.nnz), ref.indices, ref.indptr), shape=ref.shape)
    groups = group_columns(structure)
    entries = []  # (name, call, the derivative of its return, rtol, first_call_s, fields)
    if "hybridad" in names or "ha.gradient" in names:
        t0 = time.perf_counter()
        if problem.kind == "jacobian":
            res = ha.SparseJacobianResult(f, *args)
            call = functools.partial(ha.jacobian, f, *args, out=res)
        else:
            res = ha.SparseHessianResult(f, *args)
            call = functools.partial(ha.hessian, f, *args, out=res)
        call()
        join_all()  # (the warm figures are the compiled program's)
        entries.append(("hybridad", call, lambda r: getattr(r, problem.kind), RTOL_EXACT,
                        time.perf_counter() - t0,
                        {"colors": res.colors, "bound": res.lower_bound}))
    for name, call, rtol in (
            ("hand numpy", functools.partial(problem.derivative, *args), RTOL_EXACT),
            (SPARSE_FD, functools.partial(approx_derivative, problem.fd_function, args[0],
                                          sparsity=(structure, groups)), 1e-5)):
        t0 = time.perf_counter()
        call()
        entries.append((name, call, sp.csr_array, rtol, time.perf_counter() - t0,
                        {"colors": int(groups.max()) + 1} if name == SPARSE_FD else {}))
    scale = max(float(abs(ref).max()), np.finfo(np.float64).tiny)
    errors = []
    for name, call, matrix, rtol, _, _ in entries:
        diff = sp.csr_array(matrix(call())) - ref
        err = float(abs(diff).max()) / scale if diff.nnz else 0.0
        if not err <= rtol:
            raise BenchError(f"{where} {name}: its {problem.kind} disagrees with the "
                             f"hand-written one (max relative error {err:.3g} > {rtol:g}); "
                             "nothing was timed")
        errors.append(err)
    timings = harness.time_round_robin([e[1] for e in entries] + [functools.partial(f, *args)],
                                       settings.repeats, settings.target_ms)
    f_us = timings[-1][0]
    rows = []
    for (name, call, _, _, first, fields), (median, lo, hi, number), err in zip(
            entries, timings, errors, strict=False):
        allocs, nbytes = harness.allocations_per_call(call, settings.alloc_calls)
        rows.append(_row(problem, workload, name, median_s=median * 1e-6, min_s=lo * 1e-6,
                         max_s=hi * 1e-6, f_s=f_us * 1e-6, grad_f_ratio=median / f_us,
                         allocs_per_call=allocs, bytes_per_call=nbytes, first_call_s=first,
                         rel_err=err, repeats=settings.repeats, calls_per_repeat=number,
                         unknowns=problem.n, colors=fields.get("colors"),
                         bound=fields.get("bound", int(np.diff(ref.indptr).max()))))
    return rows


MEASURE = {"minimize": measure_minimize, "sparse": measure_sparse}


def _ratios(rows):
    base = {(r["workload"], r["size"], r["dtype"]): r["median_s"] for r in rows
            if r["impl"] == BASELINE}
    for r in rows:
        b = base.get((r["workload"], r["size"], r["dtype"]))
        r["ratio_vs_numba"] = None if b is None else r["median_s"] / b


def measure_memory(rows, settings, progress):
    """Run the RSS children (largest size of each workload, float64 rows) and fill the
    rows' RSS fields."""
    jobs = []
    for w in settings.workloads:
        if WORKLOADS[w].kind == "sparse":
            continue  # (rows of their own: no memory children)
        size = max(settings.sizes[w])
        for r in rows:
            if (r["workload"] == w and r["size"] == size and r["impl"] not in NO_CHILD
                    and r["dtype"] == "float64"):
                jobs.append(r)
    progress.expect(len(jobs))
    with concurrent.futures.ThreadPoolExecutor(max_workers=settings.jobs) as pool:
        from .rss import ChildError, run_child

        futures = [(r, pool.submit(run_child, r["workload"], r["size"], r["impl"],
                                   seed=settings.seed)) for r in jobs]
        for r, fut in futures:
            progress.step(f"memory: {r['workload']} "
                          f"{size_label(r['size_name'], r['size'])} {r['impl']}")
            try:
                out = fut.result()
            except ChildError as exc:
                raise BenchError(str(exc)) from None
            r.update(peak_rss_bytes=out["increase"], call_rss_bytes=out["call_increase"],
                     startup_rss_bytes=out["startup"], rss_peak_reset=out["peak_reset"])
    return len(jobs)


def warm_up(names):
    """Pay each library's one-time process costs (lazy imports, numba's and hybridad's
    runtime set-up, the XLA client, torch's engine) on a tiny function of its own, so
    that ``first_call_s`` is what a new function costs in a process using the library."""
    for name in names:
        setup(name, warm_problem())
    if any(n in HYBRIDAD_IMPLS for n in names):
        import hybridad as ha

        ha.clear_cache()


def run(settings, progress="auto", log=print):
    """Run the suite; the JSON document ``{"workloads": ..., "skipped": ..., "meta": ...}``.

    Parameters
    ----------
    settings : Settings
    progress : {"auto", "tqdm", "plain", "none"}
        The progress display (on stderr).
    log : callable
        Where notes go (``print``).

    Raises
    ------
    BenchError
        When an implementation's value or gradient is wrong, or a child fails.
    """
    t_start, started = time.perf_counter(), datetime.datetime.now()
    skipped = {name: why for name in settings.impls if (why := availability(name))}
    names = [n for n in settings.impls if n not in skipped]
    for name, why in skipped.items():
        log(f"note: {name} skipped ({why})")
    notes = [f"{w} runs in float64 only (a {WORKLOADS[w].kind} workload): no "
             f"{', '.join(d for d in settings.dtypes if d != 'float64')} rows"
             for w in settings.workloads
             if WORKLOADS[w].kind != "gradient" and set(settings.dtypes) - {"float64"}]
    for note in notes:
        log(f"note: {note}")
    problems = [(w, s, d) for w in settings.workloads for s in settings.sizes[w]
                for d in (settings.dtypes if WORKLOADS[w].kind == "gradient" else ("float64",))]
    children = (sum(len([n for n in names if n not in NO_CHILD]) for w in settings.workloads
                    if WORKLOADS[w].kind != "sparse")
                if settings.memory and "float64" in settings.dtypes else 0)
    costs = None
    if any(n in HYBRIDAD_IMPLS for n in names):
        # the plans choose by this machine's kernel costs, as a calibrated user's do
        from ..plans.calibrate import ensure_calibrated
        from ..transforms.costs import costs as costs_in_effect

        costs = (ensure_calibrated(log) if settings.calibrate else costs_in_effect()).source
    bar = Progress(len(problems) + children, progress)
    try:
        warm_up(names)
        rows = []
        for w, size, dtype in problems:
            workload = WORKLOADS[w]
            problem = make_problem(w, size, settings.seed, dtype)
            bar.step(where_label(workload, problem))
            measure = MEASURE.get(workload.kind, measure_gradient)
            rows.extend(measure(problem, workload, settings, names))
        _ratios(rows)
        if settings.memory:
            measure_memory(rows, settings, bar)
    finally:
        bar.close()
    doc = {"workloads": {}, "skipped": skipped, "notes": notes, "meta": {
        **harness.machine(), "date": started.isoformat(timespec="seconds"),
        "quick": settings.quick, "repeats": settings.repeats, "target_ms": settings.target_ms,
        "alloc_calls": settings.alloc_calls, "minimize_repeats": settings.minimize_repeats,
        "memory": settings.memory, "impls": names, "reference": REFERENCE,
        "baseline": BASELINE, "seed": settings.seed, "dtypes": list(settings.dtypes),
        "costs": costs,
        "total_s": time.perf_counter() - t_start}}
    for w in settings.workloads:
        workload = WORKLOADS[w]
        doc["workloads"][w] = {
            "title": workload.title, "kind": workload.kind, "size_name": workload.size_name,
            "sizes": list(settings.sizes[w]),
            "memory_size": max(settings.sizes[w]) if settings.memory else None,
            "time_unit": TIME_UNIT.get(workload.kind, "value+gradient call"),
            "rows": [r for r in rows if r["workload"] == w]}
    doc["goals"] = report.goals(doc)
    return doc


def add_arguments(parser):
    """The ``bench`` subcommand's options (``python -m hybridad bench --help``)."""
    parser.add_argument("--quick", action="store_true",
                        help="one size per workload, 3 batches of ~5 ms, no memory children, "
                        "the built-in cost table (about 60-90 s on 2 cores, compiles included)")
    parser.add_argument("--workload", metavar="NAME", nargs="+", action="extend",
                        choices=list(WORKLOADS), help=f"some of {', '.join(WORKLOADS)}")
    parser.add_argument("--json", metavar="FILE", help='write {"workloads": ...} as JSON')
    parser.add_argument("--plot", metavar="FILE", default=DEFAULT_PLOT,
                        help="where to draw time and allocations per call: a PNG, one panel "
                        f"per workload (default: {DEFAULT_PLOT} when matplotlib is installed)")
    parser.add_argument("--no-plot", action="store_true", help="draw no plot")
    parser.add_argument("--sizes", metavar="N", type=int, nargs="+",
                        help="sizes for every selected workload (default: each its own)")
    parser.add_argument("--impl", metavar="NAME", nargs="+", action="extend",
                        choices=list(IMPLS) + ["hand numpy out="],
                        help=f"implementations (default: {', '.join(IMPLS)})")
    parser.add_argument("--dtype", metavar="DTYPE", nargs="+", action="extend",
                        choices=list(DTYPES), help="run the gradient workloads in each of "
                        "these dtypes (default: float64)")
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None,
                        help="measure peak RSS in child processes (default: yes, "
                        "no with --quick)")
    parser.add_argument("--repeats", type=int, help="timed batches per row")
    parser.add_argument("--jobs", type=int, default=2, help="memory children run at once")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="time hybridad with the cost table in effect, even where it is "
                        "another machine's (default without --quick: measure this "
                        "machine's first, once: python -m hybridad calibrate)")
    parser.add_argument("--progress", choices=["auto", "tqdm", "plain", "none"],
                        default="auto", help="progress display on stderr (auto: tqdm if "
                        "installed, else one line per step)")


def main(args):
    """Run the ``bench`` subcommand from parsed arguments; the exit status."""
    try:
        memory = not args.quick if args.memory is None else args.memory
        settings = make_settings(args.quick, args.workload, args.sizes, args.impl, memory,
                                 args.repeats, args.jobs, args.dtype,
                                 calibrate=not (args.quick or args.no_calibrate))
        doc = run(settings, args.progress)
    except (BenchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print()
    print(format_report(doc))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        print(f"JSON written to {args.json}")
    if args.plot and not args.no_plot:
        from .plot import write_plot

        note = write_plot(doc, args.plot, asked=args.plot != DEFAULT_PLOT)
        if note:
            print(note)
    return 0
