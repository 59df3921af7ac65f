"""Where a plan's build time goes: wall seconds per stage of the pipeline.

A :class:`~hybridad.plans.plan.Plan` records, while it is built, the time of
each stage -- the trace of ``f``, region fusion, the reverse pass, each
lowering pass (:data:`hybridad.transforms.pipeline.LOWERING`, with the graph
checks after them), the memory plan and the backend's program (code
generation and compile, or the disk-cache load) -- in
``plan.build_times``; :meth:`explain` prints them with the graph's size and
names the stage that dominates.  Every stage is meant to run in time linear
(or ``n log n``) in the traced nodes (``benchmarks/bench_build.py`` measures
it from 10^3 to 10^5 nodes).
"""

from __future__ import annotations

import contextlib
import time

__all__ = ["BuildTimes"]


class BuildTimes:
    """Seconds per build stage, in the order the stages first ran.

    Attributes
    ----------
    stages : dict
        stage name -> wall seconds (summed when a stage runs more than once).
    nodes : int
        The number of traced nodes (set by the plan after its trace).
    """

    def __init__(self):
        self.stages = {}
        self.nodes = 0

    @contextlib.contextmanager
    def stage(self, name):
        """Time the ``with`` block as stage ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t0

    @property
    def total(self):
        """Seconds of all stages together."""
        return sum(self.stages.values())

    def dominant(self):
        """``(name, seconds)`` of the longest stage, or None before any ran."""
        if not self.stages:
            return None
        return max(self.stages.items(), key=lambda kv: kv[1])

    def lines(self):
        """:meth:`explain`'s lines: the total, the cost per traced node, each
        stage's seconds and share, and the dominant one."""
        total = self.total
        if not self.stages:
            return ["build: not timed"]
        per = f", {1e6 * total / self.nodes:.1f} us per traced node" if self.nodes else ""
        name, secs = self.dominant()
        out = [f"build: {total:.3f} s for {self.nodes} traced nodes{per}; "
               f"dominated by {name} ({secs:.3f} s, {100 * secs / max(total, 1e-12):.0f} %)"]
        out += [f"  {k:<36} {v:8.3f} s  {100 * v / max(total, 1e-12):5.1f} %"
                for k, v in self.stages.items()]
        return out
