"""Accurate sums on the GPU: generated CUDA kernels, one thread per partial sum.

cupy's ``sum`` adds float32 in float32, each thread a long strided run; the
cupy backend sums with these kernels instead (a fused region's reduction over
its scratch, and every float ``sum`` node), as accurately as the CPU
backends (:mod:`.reduce`): float32 accumulates in double, double sums are
compensated (Knuth's TwoSum, each partial sum carrying its rounding errors
to the next level).

A sum of ``M`` outputs over ``R`` elements each runs in levels: level 1 has
``P`` threads per output, thread ``p`` adding elements ``p, p + P, p + 2P,
...`` (neighbouring threads read neighbouring elements), into a partial array
of ``M * P`` doubles (two for double: sums and errors); the next level sums
those ``P`` partials the same way, until one thread per output writes it.
Each thread is a pure function of its index (``element(i, ...)``, host and
device), so the tests run the very kernels on the CPU (nvcc, ``tests/``), in
any order, with the GPU's results; the order of additions is fixed by the
plan, never by scheduling: deterministic.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .source import RegionKernel, c_strides, ctype

__all__ = ["SumLevel", "sum_levels", "sum_scratch", "summable"]

#: threads a level aims at: enough loads in flight to stream memory on a large
#: GPU (an H200's 132 SMs hold 270,336 threads; at 1 << 16 a fused exp-sum's
#: first level read 10^7 elements at 1.7 TB/s of the card's 4.8, bound by
#: latency -- this larger width is not measured yet)
THREADS = 1 << 18
#: fewest elements a thread of a non-final level adds
PER_THREAD = 64
#: loads a thread's loop has in flight: the loop unrolled this many times, so
#: that the loads of that many elements are issued before their additions
#: (which stay in order: the same bits as the plain loop).  A level's time
#: was its per-thread chain of loads, each waited for (an H200: 8.8 us for a
#: second level of 2441 threads over 64 partials each)
UNROLL = 8


def summable(dtype):
    """Whether sums of ``dtype`` run through these kernels (float32, float64)."""
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64))


def _widths(m, r):
    """Threads per output of each level for ``m`` outputs of ``r`` elements."""
    out = []
    while True:
        p = 1 if r <= PER_THREAD else min(-(-r // PER_THREAD), max(1, THREADS // max(m, 1)))
        out.append(p)
        if p == 1:
            return out
        r = p


def sum_scratch(shape, axis, dtype, op="sum"):
    """Doubles of partial results a sum (max, min) over ``axis`` of ``shape`` needs."""
    m = int(np.prod([s for d, s in enumerate(shape) if d not in axis], dtype=np.int64))
    r = int(np.prod([shape[d] for d in axis], dtype=np.int64))
    pairs = 2 if np.dtype(dtype) == np.float64 and op == "sum" else 1
    return sum(m * p for p in _widths(m, r)[:-1]) * pairs


class SumLevel:
    """One launch: ``kernel`` reads ``source`` and writes ``dest``.

    ``source`` and ``dest`` are ``None`` (the operand, the result) or
    ``(offset, count)`` slices of the partial-sum scratch (doubles): the sums,
    followed for double by as many errors (``count`` each)."""

    def __init__(self, kernel, source, dest):
        self.kernel, self.source, self.dest = kernel, source, dest


def _merge(dims):
    """``(size, stride)`` axes with neighbours that step as one axis merged."""
    out = []
    for size, stride in dims:
        if size == 1:
            continue
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def _offset(var, dims, name):
    """Lines computing ``name``, the element offset of flat index ``var`` over
    ``dims`` (``(size, stride)``, C order), constants folded."""
    dims = _merge(dims)
    if not dims:
        return [f"    const long long {name} = 0;"]
    if len(dims) == 1:
        size, stride = dims[0]
        return [f"    const long long {name} = {var} * {stride}LL;"]
    lines = [f"    long long {name}_q = {var}, {name} = 0;"]
    for size, stride in reversed(dims):
        lines += [f"    {name} += ({name}_q % {size}LL) * {stride}LL;",
                  f"    {name}_q /= {size}LL;"]
    return lines


def _unroll():
    """The pragma before a level's loop (:data:`UNROLL`; device code only)."""
    return ["#ifdef __CUDA_ARCH__", f"    #pragma unroll {UNROLL}", "#endif"] if UNROLL > 1 \
        else []


def _kernel(in_type, kept, reduced, p, compensated, carry, final, out_type, o_major, op="sum",
            fused=None):
    """CUDA source of one level (see the module docstring); ``fused``: a
    region's value function read in place of the operand (:func:`sum_levels`)."""
    m = int(np.prod([s for s, _ in kept], dtype=np.int64))
    r = int(np.prod([s for s, _ in reduced], dtype=np.int64))
    if fused is None:
        params = [f"const {in_type}* __restrict__ x"]

        def read(at):
            return f"(double)x[{at}]"
    else:
        params = list(fused.decls)

        def read(at):
            return f"(double){fused.name}_::value({at}, {', '.join(fused.params)})"
    if carry:
        params.append("const double* __restrict__ xc")
    params.append(f"{out_type if final else 'double'}* __restrict__ y")
    if compensated and not final:
        params.append("double* __restrict__ yc")
    body = [f"    const long long o = i / {p}LL, p = i - o * {p}LL;" if o_major else
            f"    const long long p = i / {m}LL, o = i - p * {m}LL;"]
    body += _offset("o", kept, "base")
    if op != "sum":  # max / min: thread p reads element p first (p < P <= r), NaN wins
        body += _offset("p", reduced, "first")
        body += [f"    double s = {read('base + first')};", *_unroll(),
                 f"    for (long long r = p + {p}LL; r < {r}LL; r += {p}LL) {{"]
        body += ["    " + x for x in _offset("r", reduced, "off")]
        body += [f"        s = hd_{'maximum' if op == 'max' else 'minimum'}"
                 f"(s, {read('base + off')});", "    }"]
        body.append(f"    y[{'o' if final else 'i'}] = {f'({out_type})s' if final else 's'};")
        return _finish(op, body, params, m * p, fused)
    body += ["    double s = 0.0, c = 0.0;", *_unroll(),
             f"    for (long long r = p; r < {r}LL; r += {p}LL) {{"]
    body += ["    " + x for x in _offset("r", reduced, "off")]
    body.append(f"        const double v = {read('base + off')};")
    if compensated:  # TwoSum: t + (its error) == s + v exactly
        body += ["        const double t = s + v, z = t - s;",
                 "        c += (s - (t - z)) + (v - z);",
                 "        s = t;"]
    else:
        body.append("        s += v;")
    if carry:
        body.append("        c += xc[base + off];")
    body.append("    }")
    if final:  # an infinity or NaN absorbs the sum and leaves c NaN: then s alone
        value = "(s - s == 0.0 ? s + c : s)" if compensated else "s"
        body.append(f"    y[o] = ({out_type}){value};")
    else:
        body.append("    y[i] = s;")
        if compensated:
            body.append("    yc[i] = c;")
    return _finish(op, body, params, m * p, fused)


def _finish(op, body, params, threads, fused=None):
    """The kernel of one level's ``element`` ``body`` (with the code of the
    region it reads, when ``fused``)."""
    text = "\n".join(body)
    head = fused.code if fused is not None else ""
    name = f"hybridad_{op}_" + hashlib.sha256(
        (head + text + ",".join(params)).encode()).hexdigest()[:16]
    names = [q.rsplit(" ", 1)[1] for q in params]
    params.append("long long n")
    code = "\n".join([  # (the region's namespace inside this kernel's: defined once)
        f"namespace {name}_ {{  // thread i's partial sum (host and device: tests run it)",
        head, f"HD void element(long long i, {', '.join(params[:-1])}) {{", text, "}", "}", "",
        f"extern \"C\" __global__ void {name}({', '.join(params)}) {{",
        "    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
        "    if (i >= n) return;",
        f"    {name}_::element(i, {', '.join(names)});", "}", ""])
    return RegionKernel(name, code, names + ["n"], threads)


def sum_levels(shape, strides, axis, dtype, op="sum", fused=None):
    """The launches of the sum (``op="max"``, ``"min"``: the maximum, the
    minimum, NaN-propagating as numpy's) over ``axis`` of an operand of
    ``shape`` and element ``strides`` (None: C-contiguous), result dtype
    ``dtype`` (float32 or float64), into a C-contiguous result of the kept axes.

    ``fused``: a region's value function (:func:`.source.region_kernel` with
    ``fused=True``) is the operand (C order over ``shape``): the first level
    computes each element as it adds it -- values never stored -- and takes
    the region's parameters in place of the operand.

    Returns a list of :class:`SumLevel`; the partial sums take
    :func:`sum_scratch` doubles."""
    dtype = np.dtype(dtype)
    if strides is None:
        strides = c_strides(shape)
    kept = [(s, st) for d, (s, st) in enumerate(zip(shape, strides, strict=True))
            if d not in axis]
    reduced = [(shape[d], strides[d]) for d in sorted(axis)]
    m = int(np.prod([s for s, _ in kept], dtype=np.int64))
    r = int(np.prod([s for s, _ in reduced], dtype=np.int64))
    compensated = dtype == np.float64 and op == "sum"  # (max, min: exact in double)
    # neighbouring threads read neighbouring elements: the partials of one
    # output side by side when the reduced axes hold the unit stride
    o_major = bool(reduced) and min(st for _, st in reduced) <= min(
        (st for _, st in kept), default=np.inf)
    t = ctype(dtype)
    levels, source, offset, in_type = [], None, 0, t
    for p in _widths(m, r):
        final = p == 1
        k = _kernel(in_type, kept, reduced, p, compensated, compensated and source is not None,
                    final, t, o_major, op, fused if source is None else None)
        dest = None if final else (offset, m * p)
        levels.append(SumLevel(k, source, dest))
        if final:
            return levels
        offset += m * p * (2 if compensated else 1)
        source, in_type = dest, "double"
        # the partials as an operand: (m, p), o-major or p-major
        kept, reduced = ([(m, p)], [(p, 1)]) if o_major else ([(m, 1)], [(p, m)])
        r = p
    return levels
