"""The cost model: what this machine's kernels cost, and the choices a plan
makes from those costs.

A fused region's partials can be *stored* (written as arrays in the forward
sweep, read back in the backward sweep) or *recomputed* (the region's body
evaluated again in the backward sweep): :func:`partials_strategy` weighs one
extra evaluation of the body (the sum of its ops' measured costs per element)
against the memory traffic of ``k`` stored partials (a write and a read of
``k`` elements per element, at the copy rate measured for that many bytes)
and stores only when that is :data:`STORE_MARGIN` times cheaper (what is
stored also holds memory).
Whether a plan's loops run on several threads is measured call by call
instead (:class:`hybridad.backends.numba.threads.ThreadChoice`): it depends
on the load of the moment, not on the machine alone.

The costs (:class:`Costs`) come from, in this order:

1. the file named by ``HYBRIDAD_COSTS`` (``builtin``: the built-in table);
2. ``costs.json`` in the disk-cache directory, written by
   ``python -m hybridad calibrate`` (:func:`calibrate`) on this machine --
   used only where its CPU model and core count match the machine's;
3. the built-in table (:mod:`hybridad.transforms.costs_table`), measured by
   :func:`calibrate` on the reference machine (2 cores, see its ``source``).

:func:`calibrate` measures with the library's own kernels: it builds one
numba plan whose forward sweep is one fused ``op -> sum`` region per
elementwise op (over an array in the op's domain, 8192 elements: in cache,
so compute), and reads each region's time from the per-node profiler
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
import threading
import time

import numpy as np

__all__ = ["Costs", "calibrate", "costs", "partials_strategy"]

TABLE_HEADER = ('"""The built-in cost table (:mod:`hybridad.transforms.costs`): written by\n'
                '``python -m hybridad calibrate --builtin`` on the reference machine."""\n\n')

#: how much dearer than storing a second evaluation must be for the partials
#: to be stored: stored partials also hold memory (the arena) and cache lines
#: the rest of the plan wants, which the time of the traffic leaves out
STORE_MARGIN = 1.5

#: the bytes of stored partials up to which the in-cache copy rate applies
CACHE_BYTES = 1 << 20


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

    def op_cost(self, op):
        """Nanoseconds per element for ``op``; an op without a measurement
        costs as the dearest measured op when it is expensive (a user's scalar
        function, a special function) and as a multiply otherwise."""
        ns = self.op_ns.get(op)
        if ns is not None:
            return ns
        from ..ir.registry import REGISTRY

        spec = REGISTRY.get(op) if hasattr(REGISTRY, "get") else None
        if spec is not None and (spec.expensive or spec.dual is not None):
            return max(self.op_ns.values())
        return self.op_ns.get("multiply", 0.5)

    def copy_ns_per_byte(self, nbytes):
        return self.cache_ns_per_byte if nbytes <= CACHE_BYTES else self.stream_ns_per_byte

    def to_dict(self):
        return dataclasses.asdict(self)


def _machine():
    from ..bench.harness import cpu_model

    return cpu_model(), os.cpu_count() or 0


_lock = threading.Lock()
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
    """Where :func:`calibrate` writes this machine's table (the disk-cache
    directory), or None without one."""
    from ..backends.numba.cache import cache_dir

    d = cache_dir()
    return None if d is None else os.path.join(d, "costs.json")


# ---------------------------------------------------------------- choices


def partials_strategy(body, k):
    """``(strategy, reason)`` for the partials of region ``body`` with ``k``
    distinct partials: ``"store"`` when one more evaluation of the body costs
    more than :data:`STORE_MARGIN` times writing and reading ``k`` partials,
    else ``"recompute"``."""
    c = costs()
    value_ns = sum(c.op_cost(n.op) for n in body.nodes if n is not body.reduction)
    itemsize = max((np.dtype(n.dtype).itemsize for n in body.nodes), default=8)
    nbytes = k * itemsize * int(np.prod(body.shape, dtype=np.int64))
    store_ns = 2 * k * itemsize * c.copy_ns_per_byte(nbytes)
    how = "store" if value_ns > STORE_MARGIN * store_ns else "recompute"
    sign = ">" if how == "store" else "<="
    reason = (f"evaluating the body again {value_ns:.2g} ns/element {sign} {STORE_MARGIN:g} x "
              f"writing and reading {k} partial{'s' * (k != 1)} {store_ns:.2g} ns/element "
              f"({'in cache' if nbytes <= CACHE_BYTES else 'from memory'})")
    return how, reason


# ------------------------------------------------------------- calibration


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


def _copy_rate(nbytes, seconds=0.1, least=5):
    """ns per byte moved (read + written) by a copy of ``nbytes``: the best
    of at least ``least`` copies (the pages touched first)."""
    a = np.ones(nbytes // 8)
    b = np.zeros_like(a)
    best, done = np.inf, 0
    end = time.perf_counter() + seconds
    while done < least or time.perf_counter() < end:
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
        done += 1
    return 1e9 * best / (2 * a.nbytes)


def calibrate(path=None, n=8192, budget_s=2.0, ops=None):
    """Measure this machine's costs and write them where :func:`costs` finds
    them (``path``, default :func:`calibration_path`).

    Builds one numba plan whose forward sweep holds one ``op -> sum`` region
    per elementwise op and profiles it (two compilations of a large plan:
    a minute or two).  ``ops``: names of the ops to measure (default: every
    elementwise op with a numpy ufunc); the others keep the table's figures.

    Returns
    -------
    Costs
    """
    import hybridad as ha
    from ..ops.region import recompute_partials
    from ..plans.profile import profile

    ops = [o for o in _measured_ops() if ops is None or o[0] in ops]
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.9, n)
    args = [base]
    for _, _, nin, (lo, hi) in ops:
        args += [rng.uniform(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo), n) for _ in range(nin)]

    def f(x, *ins):
        total = np.sum(x * 1.5) + np.sum(x * 1.25 * x)
        at = 0
        for _, u, nin, _ in ops:
            total = total + np.sum(u(*ins[at:at + nin]))
            at += nin
        return total

    with recompute_partials(), np.errstate(all="ignore"):  # forward regions: values only
        plan = ha.compile(f, *args, argnums=tuple(range(len(args))), parallel=False,
                          tiered=False)
        prof = profile(plan, *args, budget_s=budget_s)
    nodes = {m.id: m for m in plan.graph.nodes}
    per = {}  # the region's ops -> ns per element
    for r in prof.rows:
        if r.kind == "region_reduce" and r.phase == "forward":
            body = nodes[r.node].attrs["body"]
            per[tuple(m.op for m in body.nodes)] = r.median_ns / n
    base, twice = per.get(("multiply",)), per.get(("multiply", "multiply"))
    if base is None or twice is None:
        raise RuntimeError(f"calibration: the baseline regions are missing ({sorted(per)})")
    multiply = max(twice - base, 0.0)
    op_ns = {**(costs().op_ns if ops is not None else {}),
             "multiply": multiply, "add": multiply, "subtract": multiply}
    for name, *_ in ops:
        if (name,) in per:  # (an op the tracer rewrites, e.g. positive, has no region)
            op_ns[name] = max(per[(name,)] - base, 0.0) + multiply
    cpu, cores = _machine()
    c = Costs(op_ns={k: round(v, 4) for k, v in sorted(op_ns.items())},
              cache_ns_per_byte=round(_copy_rate(64 << 10), 5),
              stream_ns_per_byte=round(_copy_rate(64 << 20), 5),
              cpu=cpu, cores=cores, when=time.strftime("%Y-%m-%d"))
    path = path or calibration_path()
    if path:
        d = {k: v for k, v in c.to_dict().items() if k != "source"}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(d, fh, indent=1)
    reset()
    c.source = f"this machine, calibrated {c.when} ({path})"
    return c


def describe_machine():
    """One line for reports: the machine the table in effect was measured on."""
    return f"{platform.machine()}; costs: {costs().source}"
