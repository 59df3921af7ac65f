"""The numba backend's facts as the passes read them: one
:class:`~hybridad.transforms.machine.Machine`, built from :mod:`.threshold`'s
block sizes and the thread count of the moment, which the plan hands to the
passes and the cost model (they import no backend)."""

from __future__ import annotations

from ...transforms.machine import Machine
from . import threshold

__all__ = ["lowering_machine", "machine"]


def machine(**changes):
    """This backend's :class:`~hybridad.transforms.machine.Machine` now: the
    threads a plan's structure is made for (:func:`.threshold.design_threads`:
    the machine's, not the thread settings of the moment), the
    prange threshold in effect (:func:`.threshold.parallel_min`: none inside
    :func:`.threshold.serial_loops`) and the block sizes of its kernels; the
    keyword arguments change facts (a plan's own threshold)."""
    m = Machine(threads=threshold.design_threads(), parallel_min=threshold.parallel_min(),
                matvec_block=threshold.MATVEC_BLOCK, pair_parts_max=threshold.PAIR_PARTS,
                pair_rows=threshold.PAIR_ROWS, gemm_threads_min=threshold.GEMM_THREADS_MIN,
                gemm_threads_min_dim=threshold.GEMM_THREADS_MIN_DIM,
                gemm_small_result=threshold.GEMM_SMALL_RESULT,
                gemm_k_parts_max=threshold.GEMM_K_PARTS, gemm_k_part_rows=threshold.GEMM_K_ROWS,
                blas_section_min=threshold.BLAS_THREADS_MIN)
    return m.replace(**changes) if changes else m


def lowering_machine(backend):
    """What ``backend``'s lowering is handed (:func:`hybridad.transforms.pipeline.lower`):
    this backend's :func:`machine` where its passes ask the cost model
    (:data:`~hybridad.transforms.pipeline.NEEDS_MACHINE`), else None."""
    from ...transforms.pipeline import NEEDS_MACHINE

    return machine() if backend in NEEDS_MACHINE else None
