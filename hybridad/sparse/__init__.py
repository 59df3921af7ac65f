"""Sparse Jacobians and Hessians: sparsity detected from the traced graph
(:mod:`.pattern`, one rule per op family in :mod:`.rules`), colored
(:mod:`.coloring`), computed as one batched pass of compressed seeds and
decompressed straight into a preallocated ``scipy.sparse.csr_array``
(:mod:`.results`, :mod:`.run`)."""

from .pattern import hessian_sparsity, jacobian_sparsity
from .results import SparseHessianResult, SparseJacobianResult

__all__ = ["SparseHessianResult", "SparseJacobianResult", "hessian_sparsity",
           "jacobian_sparsity"]
