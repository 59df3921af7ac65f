"""Dense Hessians from few Hessian-vector products: the structural sparsity of
the Hessian, read off the traced graph (:func:`.pattern.hessian_pattern`),
star-colored (:func:`.coloring.star_coloring`), so that a
:class:`~hybridad.plans.hessian.HessianPlan` computes ``H S`` -- one chunk of
``c`` seeds, the coloring's seed matrix ``S`` -- and scatters it into the
caller's dense ``(n, n)`` Hessian, where it would otherwise run ``n`` seeds.

Curtis, Powell and Reid's compression, as the sparse results of
:mod:`.results` use it, for the dense result most users ask for: the
Hessian of scipy's Rosenbrock is tridiagonal, 3 colors at any ``n``, so its
dense Hessian costs 3 Hessian-vector products instead of ``n``.  The
pattern is structural and conservative (a rule that cannot see structure
says "everything"), so the entries outside it are exact zeros and those
inside are the dense plan's to rounding.  A plan colors only where it pays:
``n`` of at least :data:`~hybridad.plans.hessian.COLORS_MIN_N` and at most
``n /`` :data:`MIN_GAIN` colors; elsewhere it runs the dense chunks as before.
"""

from __future__ import annotations

import numpy as np

from ..plans.hessian import COLORS_MIN_N

__all__ = ["MIN_GAIN", "Compression", "hessian_colors"]

#: colored only when the coloring needs at most n / MIN_GAIN seeds
MIN_GAIN = 4


class Compression:
    """A coloring of a Hessian's pattern, ready to run and to scatter.

    Attributes
    ----------
    colors : int
        Seeds per Hessian (the chunk program's batch).
    seed : ndarray
        ``(colors, n)``: row ``k`` is 1 at the columns of color ``k``.
    sources : ndarray
        For each structural nonzero, its flat position in ``H S`` stored as
        ``(colors, n)``.
    positions : ndarray
        ... and its flat position ``i * n + j`` in the dense Hessian.
    nnz : int
        Structural nonzeros (both triangles).
    """

    __slots__ = ("colors", "nnz", "positions", "seed", "sources")

    def __init__(self, colors, seed, sources, positions):
        self.colors, self.seed = colors, seed
        self.sources, self.positions = sources, positions
        self.nnz = int(positions.size)


def hessian_colors(nodes, x, y, n, dtype):
    """The :class:`Compression` of the Hessian of the scalar node ``y`` in
    ``x`` (``n`` elements) over the forward graph ``nodes``, or None where
    coloring does not pay (``n`` under :data:`COLORS_MIN_N`, a pattern that needs
    more than ``n /`` :data:`MIN_GAIN` colors, a Hessian identically zero)."""
    if n < COLORS_MIN_N:
        return None
    from . import coloring
    from .pattern import hessian_pattern
    from .rules import TooDense, limited

    try:  # (a node's pattern past the bound: a Hessian too dense to gain from colors)
        with limited(min(n * n // MIN_GAIN, max(1 << 20, 64 * n))):
            pattern = hessian_pattern(nodes, x, y)
    except TooDense:
        return None
    if pattern.nnz == 0 or coloring.lower_bound(pattern) * MIN_GAIN > n:
        return None  # (a row with more nonzeros than the colors allowed: dense)
    colors = coloring.star_coloring(pattern)
    c = int(colors.max(initial=-1)) + 1
    if c == 0 or c * MIN_GAIN > n:
        return None
    sources = np.ascontiguousarray(coloring.hessian_sources(pattern, colors), dtype=np.intp)
    rows, cols = coloring.coo(pattern)  # (csr order, as the sources)
    positions = np.ascontiguousarray(rows * n + cols, dtype=np.intp)
    return Compression(c, coloring.seed_matrix(colors, n, dtype), sources, positions)
