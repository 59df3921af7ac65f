"""A plan's build under ``memory_budget`` (:class:`BudgetMixin`, a mixin of
:class:`hybridad.plans.plan.Plan`): what it gives up, in order, until its
workspace fits."""

from __future__ import annotations

from ..errors import MemoryBudgetError
from ..ops.region import recompute_partials
from ..transforms.checkpoint import outer_counts

__all__ = ["BudgetMixin"]


class _OverBudget(Exception):
    def __init__(self, memory):
        super().__init__()
        self.memory = memory


class BudgetMixin:
    #: loops split into this many nested levels for the budget
    #: (:mod:`hybridad.transforms.checkpoint`), or None
    checkpoint_levels = None
    #: on 2 levels, each loop's outer segments (fewer than the classic square
    #: root of its trip count, when the budget allows), or None: the classic
    checkpoint_outer = None
    _has_loops = False
    _longest_loop = 0

    def _loops_seen(self, trace):
        """Note, after tracing, whether the graph has loops and the longest's trip count."""
        lengths = [n.attrs["length"] for n in trace.nodes if n.op == "loop"]
        self._has_loops, self._longest_loop = bool(lengths), max(lengths, default=0)

    def _build_within_budget(self, f, args, leaves, first):
        """Build again for ``memory_budget``: every region recomputing its
        partials in the backward sweep instead of keeping them from the
        forward sweep; then, if the graph has loops, their carries
        checkpointed on 2, 3, 4 levels (each level one more forward sweep of
        the loop instead of storing every carry).  On 2 levels, first with
        as few outer segments as fit (2, 4, 8, ...: a segment's carries are
        stored while it is reversed), then the classic square root: the
        same work, but each outer segment is a call of the inner loop's
        runner, three per segment (an RK4 loop of 500 steps checkpointed
        classically: 23 segments, 17x the plan without a budget)."""
        self.recomputed_for_budget = True
        tries = [("storing partials", first.memory)]
        with recompute_partials():
            for levels in (None, 2, 3, 4):
                if levels is not None and not self._has_loops:
                    break
                for outer in outer_counts(levels, self._longest_loop):
                    self.checkpoint_levels, self.checkpoint_outer = levels, outer
                    how = "recomputing every region" + (
                        f", loops checkpointed on {levels} levels" if levels else "") + (
                        f" ({outer} outer segments)" if outer else "")
                    if self._build_fits(f, args, leaves, how, tries):
                        return
        self.checkpoint_levels = self.checkpoint_outer = None
        best = min((m for _, m in tries), key=lambda m: m.total_bytes)
        raise MemoryBudgetError(
            f"{self.name}: memory_budget={self.memory_budget} bytes is too small; the smallest "
            f"workspace hybridad can plan is {best.total_bytes} bytes (liveness lower bound "
            f"{best.lower_bound}; " + ", ".join(f"{m.total_bytes} bytes {how}"
                                                 for how, m in tries) + ")") from None

    def _build_fits(self, f, args, leaves, how, tries):
        """Whether a build (``how``: what it does for the budget) fits the
        budget; one that does not is added to ``tries``."""
        try:
            self._build(f, args, leaves)
            return True
        except _OverBudget as over:
            tries.append((how, over.memory))
            return False
