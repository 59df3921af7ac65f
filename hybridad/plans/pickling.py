"""Plans across processes: a gradient plan pickles as a recipe -- its
function, the example arguments' structure, shapes and dtypes, and its
options -- and unpickling rebuilds it once per process and recipe, its
compiled code loaded from the disk cache (``hybridad.dask`` ships plans so)."""

from __future__ import annotations

import numpy as np

from .. import _tree
from ..frontend.guard_walk import root_of

__all__ = ["PLAN_TYPE", "PicklingMixin"]

#: the plan class a recipe builds, put here by :mod:`.plan` (imports run one way)
PLAN_TYPE = [None]


class PicklingMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""

    def __reduce__(self):
        """Pickle as a recipe: the function, the example arguments' structure,
        shapes and dtypes, and the options; unpickling rebuilds the plan (once
        per process and recipe; numba's code comes from the disk cache).
        Gradient plans only."""
        f = self._f()
        if f is None or type(self) is not PLAN_TYPE[0] or self.order != 1 or \
                self.update is not None or self._cuda_graph:
            raise TypeError(f"only gradient plans of a live function can be pickled "
                            f"({self.name})")
        return _rebuild_plan, (f, self._protos(), self.argnums, self.backend, self.parallel)

    def _protos(self):
        """The example arguments' structure, shapes and dtypes: ``[(treedef,
        [(shape, dtype name), ...]), ...]`` (:func:`_example_args` makes them)."""
        protos, it = [], iter(self._specs)
        for td in self._treedefs:
            leaves = [(s, str(np.dtype(d))) for s, d in
                      (next(it) for _ in range(_tree.count_leaves(td)))]
            protos.append((td, leaves))
        return protos


_REBUILT = {}  # recipe -> plan, in this process (workers unpickle a plan once)


def _rebuild_plan(f, protos, argnums, backend, parallel):
    """Unpickling a :class:`Plan`: the plan of ``f`` at example arguments of
    the pickled structure, shapes and dtypes (one per process and recipe)."""
    from ..frontend.scalar_functions import fingerprint

    key = (fingerprint(f), repr(protos), argnums, backend, parallel)
    plan = _REBUILT.get(key)
    if plan is None:
        plan = _REBUILT[key] = PLAN_TYPE[0](f, _example_args(protos), argnums, backend,
                                            parallel=parallel)
        # the unpickled f (shipped by value to a worker: a function of __main__, a
        # lambda, a closure) has no other owner there: the plan keeps it alive, as
        # hybridad.compile's plans do (gradient_batch traces it again per batch size)
        plan._root = root_of(f)
    return plan


def _example_args(protos):
    """Arguments of zeros of the structure, shapes and dtypes ``protos``
    (:meth:`Plan._protos`)."""
    return tuple(_tree.unflatten(td, [np.zeros(s, d) for s, d in leaves])
                 for td, leaves in protos)
