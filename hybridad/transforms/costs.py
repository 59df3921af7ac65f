"""The cost model: what this machine's kernels cost, and the choices a plan
makes from those costs.

A fused region's partials can be *stored* (written as arrays in the forward
sweep, read back in the backward sweep) or *recomputed* (the region's body
evaluated again in the backward sweep, one loop per input differentiated):
:func:`partials_strategy` weighs those evaluations of the body (the sum of
its ops' measured costs per element, or its longest chain of dependent ops at
the measured latency per op where that is more) against the memory traffic
storing adds (``k`` partials written and read per element, less the inputs
the evaluations would read again, at the copy rate measured for that many
bytes) and stores only when that is :data:`STORE_MARGIN` times cheaper (what
is stored also holds memory).
Whether a plan's loops run on several threads is measured call by call
instead (:class:`hybridad.backends.numba.threads.ThreadChoice`): it depends
on the load of the moment, not on the machine alone.

The costs (:class:`Costs`) come from, in this order:

1. the file named by ``HYBRIDAD_COSTS`` (``builtin``: the built-in table);
2. ``costs.json`` in the disk-cache directory, written by
   ``python -m hybridad calibrate`` (:mod:`hybridad.plans.calibrate`) on this machine --
   used only where its CPU model and core count match the machine's;
3. the built-in table (:mod:`hybridad.transforms.costs_table`), measured by
   the same calibration on the reference machine (2 cores, see its ``source``).

:func:`hybridad.plans.calibrate.calibrate` measures with the library's own kernels: it builds one
numba plan per :data:`~hybridad.plans.calibrate.GROUP` elementwise ops whose
forward sweep is one fused ``op -> sum`` region per op (over an array in the
op's domain, 8192 elements: in cache, so compute; a small plan, so vmath's
functions are inlined and vectorize as in the plans' loops), and reads each
region's time from the per-node profiler
(:mod:`hybridad.plans.profile`); an op's cost is its region's time less a
baseline region's, plus one multiply.  The copy rates are numpy's
``copyto`` over 64 KiB (cache) and 64 MiB (memory).  ``plan.explain()``
prints, for each region, the choice and the figures it rests on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform

import numpy as np

from .._forksafe import Lock
from ..ops import region as _region

__all__ = ["Costs", "costs", "matvec_choice", "partials_strategy"]

TABLE_HEADER = ('"""The built-in cost table (:mod:`hybridad.transforms.costs`): written by\n'
                '``python -m hybridad calibrate --builtin`` on the reference machine."""\n\n')

#: how much dearer than storing a second evaluation must be for the partials
#: to be stored: stored partials also hold memory (the arena) and cache lines
#: the rest of the plan wants, which the time of the traffic leaves out
STORE_MARGIN = 1.5

#: a body cheaper than this (ns per element) is always recomputed: a few
#: arithmetic ops are not worth an array, however cheap the traffic in cache
STORE_MIN_NS = 0.5

#: the bytes of stored partials up to which the in-cache copy rate applies
CACHE_BYTES = 1 << 20

#: ns per matrix element of single-threaded matrix-vector products where the
#: table has no measurement (the reference machine, 512 x 512 matrices from L3)
MATVEC_NS = {"float64": {"blas": 0.36, "dot": 0.33, "axpy": 0.31},
             "float32": {"blas": 0.27, "dot": 0.1, "axpy": 0.25}}

#: both dimensions of a matrix-vector product at least this for it to run as
#: the numba backend's loops: the rates are measured on square matrices, and
#: on a skinny one per-row or per-column overheads (a dot of 16 elements, a
#: single block of columns) decide instead -- BLAS then (measured, 2 cores,
#: 10^5 x 16 float64: gemv 0.136 ns/element, the row loop 0.143 on one thread
#: and 0.132 on two; 10^5 x 8: 0.179 against 0.207 / 0.197)
MATVEC_MIN = 64

#: a skinny product (a dimension under :data:`MATVEC_MIN`, none under this)
#: still runs the loops where gemv would put the program's BLAS on one thread
#: around its call (:attr:`~hybridad.transforms.machine.Machine.blas_section_min`)
#: and the loops cost less than gemv and that section: its cost, ns (measured
#: on 2 cores: 2.1 us a call), and the loops' rate on a skinny matrix over the
#: square one's.  Logistic regression's gradient, 2 cores: 200 x 50 9.9 -> 4.8
#: us, 400 x 30 10.7 -> 6.2 us; at 1000 x 20 the loops lose (15.4 against 13.0)
SKINNY_MIN = 24
SECTION_NS = 2100.0
SKINNY_LOOP = 1.5


@dataclasses.dataclass
class Costs:
    """A machine's measured costs (nanoseconds).

    ``op_ns``: op name -> nanoseconds per element of evaluating the op in a
    fused loop (float64); ``cache_ns_per_byte`` / ``stream_ns_per_byte``:
    a copy's time per byte moved (read + written) in cache and from memory;
    ``cpu``, ``cores``: the machine measured; ``source``: where the table
    comes from (shown by ``explain()``).
    """

    op_ns: dict
    cache_ns_per_byte: float
    stream_ns_per_byte: float
    cpu: str = ""
    cores: int = 0
    when: str = ""
    source: str = ""
    #: dtype name -> nanoseconds per multiply-add of a single-threaded BLAS
    #: gemm of a square-ish product (256 x 256 x 256), as ``python -m hybridad
    #: calibrate`` reports it; None: not measured
    gemm_ns: dict | None = None
    #: dtype name -> {"blas", "dot", "axpy"} -> nanoseconds per matrix element
    #: of a single-threaded matrix-vector product of 512 x 512 C matrices
    #: read from L3 (:func:`hybridad.plans.calibrate._matvec_rates`): BLAS
    #: gemv (both directions' mean) and the numba backend's row loop (``A x``)
    #: and column loop (``A^T v``); None: not measured (:data:`MATVEC_NS`)
    matvec_ns: dict | None = None
    #: the vector width (bits) generated numba functions ask LLVM to prefer
    #: (:mod:`hybridad.backends.numba.simd`): 512 where loops measured faster
    #: with it than with LLVM's default for the CPU; None: LLVM's default
    simd_bits: int | None = None
    #: nanoseconds per element of an op that waits for the one before it (a
    #: chain of dependent multiply-adds: the pipeline's latency, not the
    #: throughput ``op_ns`` measures); None: not measured (no such term)
    dependent_ns: float | None = None

    def op_cost(self, op, dtype=None):
        """Nanoseconds per element for ``op`` (in ``dtype``: an op measured in
        it has its own figure, ``"exp:float32"``, else the float64 one); an op
        without a measurement costs as the dearest measured op when it is
        expensive (a user's scalar function, a special function) and as a
        multiply otherwise."""
        if dtype is not None:
            ns = self.op_ns.get(f"{op}:{np.dtype(dtype).name}")
            if ns is not None:
                return ns
        ns = self.op_ns.get(op)
        if ns is not None:
            return ns
        from ..ir.registry import REGISTRY

        spec = REGISTRY.get(op)
        if spec is not None and (spec.expensive or spec.dual is not None):
            return max(self.op_ns.values())
        return self.op_ns.get("multiply", 0.5)

    def body_cost(self, body):
        """Nanoseconds per element of one evaluation of a region's ``body``
        (its elementwise ops; the reduction it may end in is not counted):
        the sum of its ops' costs, or its longest chain of dependent ops where
        that costs more (each op there at least :attr:`dependent_ns`: twenty
        additions one after the other cost their latency, while each alone
        measures as free beside a loop's loads and stores)."""
        ops = [(n, self.op_cost(n.op, n.dtype)) for n in body.nodes if n is not body.reduction]
        total = sum(ns for _, ns in ops)
        if not self.dependent_ns:
            return total
        path = {}
        for n, ns in ops:
            before = max((path.get(a.id, 0.0) for a in n.args), default=0.0)
            path[n.id] = before + max(ns, self.dependent_ns)
        return max(total, max(path.values(), default=0.0))

    def matvec_rates(self, dtype):
        """``{"blas", "dot", "axpy"}`` -> ns per matrix element of a
        single-threaded matrix-vector product in ``dtype`` (see
        :attr:`matvec_ns`)."""
        table = self.matvec_ns or MATVEC_NS
        return table.get(np.dtype(dtype).name, table["float64"])

    def copy_ns_per_byte(self, nbytes):
        return self.cache_ns_per_byte if nbytes <= CACHE_BYTES else self.stream_ns_per_byte

    def to_dict(self):
        return dataclasses.asdict(self)


def cpu_model():
    """The CPU's model name from ``/proc/cpuinfo`` (else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _machine():
    """(CPU model, core count) of this machine: what a calibration is valid for."""
    return cpu_model() or "", os.cpu_count() or 0


_lock = Lock()
_current = None


def costs():
    """The cost table in effect (loaded once; see the module docstring)."""
    global _current
    with _lock:
        if _current is None:
            _current = _load()
        return _current


def reset():
    """Forget the loaded table (the next :func:`costs` loads again)."""
    global _current
    with _lock:
        _current = None


def _builtin():
    from .costs_table import TABLE

    return Costs(**{**TABLE, "source": "the built-in table, measured on " +
                    f"{TABLE['cpu'] or 'the reference machine'} ({TABLE['cores']} cores, "
                    f"{TABLE['when']}); python -m hybridad calibrate measures this machine"})


def _read(path, source):
    with open(path) as fh:
        d = json.load(fh)
    d["source"] = source
    return Costs(**d)


def _load():
    env = os.environ.get("HYBRIDAD_COSTS", "").strip()
    if env == "builtin":
        return _builtin()
    if env:
        return _read(env, f"{env} (HYBRIDAD_COSTS)")
    path = calibration_path()
    if path is not None and os.path.isfile(path):
        try:
            c = _read(path, f"this machine, calibrated {{when}} ({path})")
        except (OSError, ValueError, TypeError):
            return _builtin()
        if (c.cpu, c.cores) == _machine():
            c.source = c.source.format(when=c.when)
            return c
    return _builtin()


def calibration_path():
    """Where :func:`hybridad.plans.calibrate.calibrate` writes this machine's table (the disk-cache
    directory), or None without one."""
    from .._cachedir import cache_dir

    d = cache_dir()
    return None if d is None else os.path.join(d, "costs.json")


# ---------------------------------------------------------------- choices


def _traffic(body, evaluations):
    """``(loop, itemsize, reads)`` of region ``body``: its loop's elements, the
    bytes of one partial an element, and the bytes an element that evaluating
    the body again in ``evaluations`` loops reads (an input smaller than the
    loop, a broadcast one, counts its share)."""
    loop = int(np.prod(body.shape, dtype=np.int64))
    itemsize = max((np.dtype(n.dtype).itemsize for n in body.nodes), default=8)
    reads = evaluations * sum(np.dtype(a.dtype).itemsize * min(1.0, a.size / loop)
                              for a in body.inputs if a.size > 1) if loop else 0.0
    return loop, itemsize, reads


def partials_strategy(body, k, evaluations=1, in_result=False):
    """``(strategy, reason)`` for the partials of region ``body`` with ``k``
    distinct partials, which the backward sweep otherwise gets by evaluating
    the body again in ``evaluations`` loops (one per input it differentiates,
    each reading the region's array inputs again): ``"store"`` when those
    evaluations cost more than :data:`STORE_MARGIN` times the traffic storing
    adds -- ``k`` partials written by the forward loop and read by the
    backward one, less the inputs the evaluations would have read -- and
    more than :data:`STORE_MIN_NS`; else ``"recompute"``.

    The traffic is bytes moved per element of the loop at the copy rate
    measured for the partials' size (an input smaller than the loop, a
    broadcast one, counts its share: a row of 16 read for 10^5 rows is in
    cache).  exp-sum at n = 10^6 (one exp, one input of 8 bytes, one partial):
    recomputing costs the exp, 1.2 ns/element on a 2-core Xeon; storing adds
    8 bytes written (0.56 ns), since the backward loop reads the partial in
    place of the input.

    ``in_result``: each partial would be written into the gradient buffer of
    the argument it differentiates (an array the plan writes anyway, see
    :func:`hybridad.ops.region._in_result_buffers`).  Such a partial holds no
    memory of its own, so the memory's share of the bar (the margin and the
    floor) does not apply: it is stored when evaluating the body again costs
    more than the traffic.  exp-sum at n = 10^6 float32 (exp 0.38 ns against
    4 bytes more written, 0.28 ns): 0.91 -> 0.75 ms with 2 threads, 1.55 ->
    1.13 ms on one."""
    c = costs()
    value_ns = evaluations * c.body_cost(body)
    loop, itemsize, reads = _traffic(body, evaluations)
    nbytes = k * itemsize * loop
    store_ns = max(0.0, 2 * k * itemsize - reads) * c.copy_ns_per_byte(nbytes)
    margin, floor = (1.0, 0.0) if in_result else (STORE_MARGIN, STORE_MIN_NS)
    bar = max(margin * store_ns, floor)
    how = "store" if value_ns > bar else "recompute"
    sign = ">" if how == "store" else "<="
    loops = f" in {evaluations} loops" if evaluations > 1 else ""
    less = " less reading the inputs again" if reads else ""
    where = "from memory" if nbytes > CACHE_BYTES else "in cache"
    where += ", into the gradient buffer: no array of its own" if in_result else ""
    reason = (f"evaluating the body again{loops} {value_ns:.2g} ns/element {sign} " + (
        f"{'' if in_result else f'{margin:g} x '}writing and reading {k} "
        f"partial{'s' * (k != 1)}{less} {store_ns:.2g} ns/element ({where})"
        if bar > floor or in_result else f"{STORE_MIN_NS:g} ns/element, below which nothing "
        "is worth an array"))
    return how, reason


#: ns per element (this machine's measured costs) above which a region's body
#: is taken as bound by arithmetic on a GPU as well (exp: about 1 ns; a Bessel
#: function or an incomplete gamma: tens): its partials are chosen by the
#: measured rule, not by traffic alone
GPU_COMPUTE_BOUND_NS = 20.0


def partials_by_traffic(body, k, evaluations=1, in_result=False):
    """``(strategy, reason)`` as :func:`partials_strategy`, for a GPU plan:
    by memory traffic alone.  An elementwise body is bound by memory on a GPU
    (an H200 computes ~60 float64 operations in the time it loads a double),
    so evaluating it again costs only the inputs it reads again; storing
    costs its ``k`` partials written and read back, and their memory.
    ``"store"`` only when evaluating moves :data:`STORE_MARGIN` times the
    bytes storing does (the CPU rule's share of the bar for memory); ``in_result``
    changes nothing here (the partial's write into the gradient buffer and
    its read back are traffic all the same).  exp-sum at n = 10^7 on an
    H200: the stored partial made the forward sum write 80 MB and the
    backward read them (320 MB moved, 240 recomputing).
    ``HYBRIDAD_CUDA_PARTIALS=measured`` asks for :func:`partials_strategy`
    (the CPU's measured costs) instead; a body dearer than
    :data:`GPU_COMPUTE_BOUND_NS` on the CPU (special functions: bound by
    arithmetic on a GPU too) keeps that rule."""
    if os.environ.get("HYBRIDAD_CUDA_PARTIALS", "").strip().lower() == "measured" or \
            costs().body_cost(body) > GPU_COMPUTE_BOUND_NS:
        return partials_strategy(body, k, evaluations, in_result)  # (the CPU's rule)
    _, itemsize, reads = _traffic(body, evaluations)
    stored = 2 * k * itemsize
    how = "store" if STORE_MARGIN * stored < reads else "recompute"
    loops = f" in {evaluations} loops" if evaluations > 1 else ""
    return how, (f"GPU, by traffic: evaluating the body again{loops} reads {reads:.3g} "
                 f"bytes/element {'>' if how == 'store' else '<='} {STORE_MARGIN:g} x writing "
                 f"and reading {k} partial{'s' * (k != 1)} {stored} bytes/element")


# the region VJPs' choice (the ops stage reads it from here, handed in: imports run one way)
_region.COST_MODEL.update(partials_strategy=partials_strategy,
                          partials_by_traffic=partials_by_traffic)


def matvec_choice(m, k, dtype, form, machine, threads=1):
    """``(how, reason, threads)`` for a matrix-vector product over an
    ``m x k`` C matrix: ``"loop"`` (the numba backend's own loop, :mod:`.rt`'s
    ``matvec_dot`` for ``form == "dot"``, ``A x``, or ``matvec_axpy`` for
    ``"axpy"``, ``A^T v``) or ``"blas"`` (gemv).

    ``threads``: the threads the loop may take (returned: those it uses) --
    a parallel plan's loops own the cores, and BLAS runs on one thread
    (:func:`hybridad.backends.numba.threshold.blas_may_thread`); the row loop
    splits the ``m`` rows, the column loop blocks of ``machine.matvec_block`` columns
    (:class:`~hybridad.transforms.machine.Machine`, handed in).  The
    loop is chosen when its measured single-threaded rate over the threads it
    can use is below gemv's (:attr:`Costs.matvec_ns`) and both dimensions are
    at least :data:`MATVEC_MIN`; a skinny product (one dimension under it,
    none under :data:`SKINNY_MIN`) runs the loops, on one thread, only where
    gemv would put the program's BLAS on one thread and the loops cost less
    than gemv and that section (:data:`SECTION_NS`)."""
    if min(m, k) < MATVEC_MIN:
        section = machine.blas_section_min
        if min(m, k) < SKINNY_MIN or not section or m * k < section:
            return "blas", f"a dimension below {MATVEC_MIN}: gemv", 1
        rates = costs().matvec_rates(dtype)
        loop_ns = rates[form] * SKINNY_LOOP * m * k
        blas_ns = rates["blas"] * m * k + SECTION_NS
        how = "loop" if loop_ns < blas_ns else "blas"
        return how, (f"skinny: {'row' if form == 'dot' else 'column'} loop {loop_ns:.0f} ns "
                     f"{'<' if how == 'loop' else '>='} gemv and BLAS's one-thread section "
                     f"{blas_ns:.0f}"), 1
    rates = costs().matvec_rates(dtype)
    tasks = machine.matvec_tasks(m, k, form)
    p = max(1, min(threads, tasks))
    loop_ns, blas_ns = rates[form] / p, rates["blas"]
    how = "loop" if loop_ns < blas_ns else "blas"
    return how, (f"{'row' if form == 'dot' else 'column'} loop "
                 f"{rates[form]:.3g} ns/element / {p} thread{'s' * (p > 1)} "
                 f"{'<' if how == 'loop' else '>='} gemv {blas_ns:.3g}"), p


def pair_choice(m, k, dtype, machine):
    """``(pair, reason)``: whether ``A u`` and ``A^T v`` over an ``m x k`` C
    matrix run as one ``matvec_pair`` (:func:`hybridad.backends.numba.rt.matvec_pair`:
    one read of ``A`` for both) rather than as two products, each as
    :func:`matvec_choice` gives it.  The pair streams ``A`` once doing both
    loops' work: its cost is taken as the slower loop's measured rate over
    ``machine.threads`` its parts can use
    (:meth:`~hybridad.transforms.machine.Machine.pair_parts`); the two
    products' as the sum of their choices' rates; a dimension under
    :data:`MATVEC_MIN` keeps the two products.  (Measured on 2 cores, ten
    matrices read in turn: the pair 0.6-0.75x the two loops' time from 64 x 64
    to 1000 x 1000, float64 and float32.)"""
    if min(m, k) < MATVEC_MIN:  # (skinny: two products, each as matvec_choice gives it)
        return False, f"a dimension below {MATVEC_MIN}: two products"
    rates = costs().matvec_rates(dtype)
    threads = machine.threads
    pair_ns = max(rates["dot"], rates["axpy"]) / max(1, min(threads, machine.pair_parts(m)))
    two_ns = 0.0
    for form in ("dot", "axpy"):
        how, _, p = matvec_choice(m, k, dtype, form, machine, threads)
        two_ns += rates[form] / p if how == "loop" else rates["blas"]
    pair = pair_ns < two_ns
    return pair, (f"one read of A {pair_ns:.3g} ns/element {'<' if pair else '>='} "
                  f"two products {two_ns:.3g}")


#: a ``matvec_two``'s time over one product's loop at the same rate: the second
#: vector's multiply-adds ride on the one read of the matrix (memory-bound
#: when the matrix is larger than the caches; in them, 1.3-1.6x)
TWO_FACTOR = 1.4


def two_choice(m, k, dtype, form, machine):
    """``(two, reason)``: whether two products of one form over an ``m x k``
    C matrix (``A x`` and ``A y``, or ``A^T x`` and ``A^T y``) run as one
    ``matvec_two`` (:mod:`hybridad.backends.numba.matvecs`: one read of ``A``)
    rather than as two products, each as :func:`matvec_choice` gives it.  The
    kernel is the form's loop with a second vector: its cost is taken as
    :data:`TWO_FACTOR` times the loop's measured rate over the threads it can
    use; a dimension under :data:`MATVEC_MIN` keeps the two products."""
    if min(m, k) < MATVEC_MIN:
        return False, f"a dimension below {MATVEC_MIN}: two products"
    rates = costs().matvec_rates(dtype)
    how, _, p = matvec_choice(m, k, dtype, form, machine, machine.threads)
    tasks = machine.matvec_tasks(m, k, form)
    two_ns = TWO_FACTOR * rates[form] / max(1, min(machine.threads, tasks))
    apart_ns = 2 * (rates[form] / p if how == "loop" else rates["blas"])
    two = two_ns < apart_ns
    return two, (f"one read of A for both {two_ns:.3g} ns/element "
                 f"{'<' if two else '>='} two products {apart_ns:.3g}")
