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
   ``python -m hybridad calibrate`` (:mod:`hybridad.plans.calibrate`) on this machine --
   used only where its CPU model and core count match the machine's;
3. the built-in table (:mod:`hybridad.transforms.costs_table`), measured by
   the same calibration on the reference machine (2 cores, see its ``source``).

:func:`hybridad.plans.calibrate.calibrate` measures with the library's own kernels: it builds one
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

import numpy as np

__all__ = ["Costs", "costs", "partials_strategy"]

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

        spec = REGISTRY.get(op)
        if spec is not None and (spec.expensive or spec.dual is not None):
            return max(self.op_ns.values())
        return self.op_ns.get("multiply", 0.5)

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
    """Where :func:`hybridad.plans.calibrate.calibrate` writes this machine's table (the disk-cache
    directory), or None without one."""
    from ..backends.cachedir import cache_dir

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
    bar = max(STORE_MARGIN * store_ns, STORE_MIN_NS)
    how = "store" if value_ns > bar else "recompute"
    sign = ">" if how == "store" else "<="
    reason = (f"evaluating the body again {value_ns:.2g} ns/element {sign} " + (
        f"{STORE_MARGIN:g} x writing and reading {k} partial{'s' * (k != 1)} "
        f"{store_ns:.2g} ns/element ({'in cache' if nbytes <= CACHE_BYTES else 'from memory'})"
        if bar > STORE_MIN_NS else f"{STORE_MIN_NS:g} ns/element, below which nothing is "
        "worth an array"))
    return how, reason
