"""What the passes' choices need to know of the backend that will run the plan
and of the machine: plain data that the plan hands in.

The cost model (:mod:`.costs`) and the passes that consult it
(:mod:`.products`) weigh a backend's own loops against BLAS, and how many
threads a loop takes.  Those choices rest on facts that belong to the backend
(the block size of its column loop, how a matrix-vector pair splits its rows,
when a gemm's panels go to its threads) and on the machine (the threads a
parallel loop runs on).  A pass imports no backend: the plan asks the backend
for its :class:`Machine` (the numba backend's is
:func:`hybridad.backends.numba.machine.machine`) and passes it down, as JAX's
lowering rules receive the target's facts rather than importing a device.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Machine", "matvec_matrix"]

#: the prange threshold of a plan whose loops all run serial (no loop is that long)
NEVER = 1 << 62


@dataclasses.dataclass(frozen=True)
class Machine:
    """A backend's and a machine's facts, as the passes read them.

    Attributes
    ----------
    threads : int
        The threads a parallel loop runs on.
    parallel_min : int
        Fewest iterations of a loop that runs on several threads
        (:data:`NEVER`: every loop serial).
    matvec_block : int
        Columns per task of the column loop of ``A^T v``.
    pair_parts_max, pair_rows : int
        A matrix-vector pair runs its rows in at most ``pair_parts_max``
        parts of ``pair_rows`` rows or more (:meth:`pair_parts`).
    gemm_threads_min, gemm_threads_min_dim, gemm_small_result : int
        When a gemm's result panels go to the loops' threads
        (:meth:`gemm_on_threads`).
    gemm_k_parts_max, gemm_k_part_rows : int
        A gemm with a small result over a long contracted axis runs on the
        loops' threads in at most ``gemm_k_parts_max`` parts of that axis,
        each ``gemm_k_part_rows`` long or more (:meth:`gemm_k_parts`).
    blas_section_min : int
        Fewest multiply-adds of a BLAS product that puts the program's BLAS
        on one thread around its call (a section of a few microseconds: the
        numba backend's ``threshold.BLAS_THREADS_MIN``); 0: none does.
    """

    threads: int
    parallel_min: int
    matvec_block: int
    pair_parts_max: int
    pair_rows: int
    gemm_threads_min: int
    gemm_threads_min_dim: int
    gemm_small_result: int
    gemm_k_parts_max: int
    gemm_k_part_rows: int
    blas_section_min: int = 0

    def matvec_tasks(self, m, k, form):
        """The tasks a matrix-vector loop over an ``m x k`` matrix splits
        between threads: its rows (``form == "dot"``, ``A x``), or its blocks
        of :attr:`matvec_block` columns (``"axpy"``, ``A^T v``) -- or the
        parts of its rows where it runs in them (:meth:`axpy_parts`)."""
        if form == "dot":
            return m
        parts = self.axpy_parts(m, k)
        return parts if parts > 1 else -(-k // self.matvec_block)

    def axpy_parts(self, m, k):
        """The parts of its rows the column loop of ``A^T v`` over an ``m x k``
        matrix runs in (each into a row of scratch of its own, summed in
        order after), or 1 (its blocks of columns, no scratch): parts where
        the matrix has fewer blocks of columns than :meth:`pair_parts` gives
        its rows (``X^T g`` of a tall data matrix, 100 columns over 10^5
        rows: one block, one thread).  From the shape alone: the same sums
        on any thread count, serial or parallel."""
        parts = self.pair_parts(m)
        return parts if -(-k // self.matvec_block) < parts else 1

    def pair_parts(self, m):
        """The parts a matrix-vector pair of an ``m``-row matrix runs in (from
        the shape alone: the same sums on any thread count)."""
        return max(1, min(self.pair_parts_max, m // self.pair_rows))

    def gemm_on_threads(self, m, k, n):
        """Whether an ``m x k @ k x n`` gemm runs on the loops' threads, a
        panel of the result each: the plan's loops are parallel
        (:attr:`parallel_min` below :data:`NEVER`), there is more than
        one thread, the product has :attr:`gemm_threads_min` multiply-adds,
        rows for two panels, :attr:`gemm_threads_min_dim` columns or
        contracted length, and a result larger than
        :attr:`gemm_small_result` -- or a smaller result split along ``k``
        (:meth:`gemm_k_parts`)."""
        if self.gemm_k_parts(m, k, n):
            return True
        return self.parallel_min < NEVER and self.threads > 1 and m >= 2 and n >= 2 and \
            max(k, n) >= self.gemm_threads_min_dim and m * k * n >= self.gemm_threads_min and \
            m * n > self.gemm_small_result

    def gemm_k_parts(self, m, k, n):
        """The parts of its contracted axis an ``m x k @ k x n`` gemm with a
        small result (at most :attr:`gemm_small_result` elements: ``X^T G``
        of a narrow layer) runs in on the loops' threads, each part's product
        into a scratch of its own and the parts summed in order after; 0 where
        it is not split.  The count comes from the shape alone (at most
        :attr:`gemm_k_parts_max`, each :attr:`gemm_k_part_rows` long or more),
        so the sums are the same on any thread count."""
        if not (self.parallel_min < NEVER and self.threads > 1 and m >= 2 and n >= 2 and
                m * n <= self.gemm_small_result and m * k * n >= self.gemm_threads_min):
            return 0
        parts = min(self.gemm_k_parts_max, k // self.gemm_k_part_rows)
        return parts if parts >= 2 else 0

    def replace(self, **changes):
        """This machine with some facts changed (a plan's own prange threshold)."""
        return dataclasses.replace(self, **changes)


def matvec_matrix(a_shape, b_shape):
    """``(operand index, shape)`` of the matrix when a matmul of 1-D or 2-D
    operands of these shapes is a matrix-vector product (a 2-D matrix
    without an empty axis, the other operand a vector: 1-D, one column or
    one row), else None (a gemm, or a dot product)."""
    rows = a_shape[0] if len(a_shape) == 2 else 1
    cols = b_shape[1] if len(b_shape) == 2 else 1
    if (rows == 1) == (cols == 1):
        return None
    mat = 0 if cols == 1 else 1
    shape = tuple((a_shape, b_shape)[mat])
    return (mat, shape) if len(shape) == 2 and all(shape) else None
