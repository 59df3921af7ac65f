"""How many seeds a dense Hessian's or Jacobian's chunk program runs at a
time (:class:`~hybridad.plans.hessian.HessianPlan`,
:class:`~hybridad.plans.jacobian.JacobianPlan`): :func:`default_chunk` from
the seeds' count and one seed's workspace (:func:`seed_bytes`)."""

from __future__ import annotations

from ..ops import REGISTRY

__all__ = ["CHUNK_BYTES", "DEFAULT_CHUNK", "MATMUL_BATCH_BYTES", "ONE_CHUNK", "ONE_CHUNK_BYTES",
           "default_chunk", "seed_bytes"]

#: up to this many seeds, all of them run as one chunk (see :func:`default_chunk`)
ONE_CHUNK = 128
#: seeds per run of a chunk program beyond :data:`ONE_CHUNK`
DEFAULT_CHUNK = 32
#: bytes of batched workspace a default chunk may take
CHUNK_BYTES = 1 << 24
#: ... and a single chunk of all the seeds (at most :data:`ONE_CHUNK`): each
#: further chunk runs again whatever does not depend on the seeds (the
#: Hessian of an RK4 loop of 10^4 steps, 8 MB a seed: 6 seeds in one chunk
#: 73 ms a call, in six chunks of one under the 16 MB cap 108 ms)
ONE_CHUNK_BYTES = 1 << 26


#: bytes of one batched array (K seeds x n) when the seeds' pass has a
#: matrix product: its gemm wants wide panels while they stay in cache
#: (n = 1000, a 30 x n product inside: K=32 13.9 ms, K=250 8.6 ms, K=1000 15.3 ms)
MATMUL_BATCH_BYTES = 1 << 21


def seed_bytes(nodes, members, fused=True):
    """Bytes of one seed's pass (``members``: the ids of its nodes): their
    sizes -- with ``fused`` (a compiled backend, which fuses elementwise
    chains into loops), less views and the elementwise values only other
    elementwise ops read, which live in a loop's registers and not in a
    buffer.  (A logistic regression's Hessian, X 10^5 x 100: 7.3 MB a seed
    summed whole, 1.6 MB its buffers hold; chunks of 9 seeds took 107 ms,
    of 40 about 70.)"""
    if not fused:
        return sum(nd.nbytes for nd in nodes if nd.id in members)
    kinds = {}  # member id -> whether only elementwise ops (and views) read it
    for nd in nodes:
        kind = _kind(nd)
        for a in nd.args:
            if a.id in members:
                kinds[a.id] = kinds.get(a.id, True) and kind in ("elementwise", "view")
    return sum(nd.nbytes for nd in nodes if nd.id in members and _kind(nd) != "view" and
               not (_kind(nd) == "elementwise" and kinds.get(nd.id, False)))


def _kind(node):
    op = REGISTRY.get(node.op)
    return None if op is None else op.kind


def default_chunk(n, bytes_per_seed, matmul=False, itemsize=8):
    """Seeds per chunk: all ``n`` up to :data:`ONE_CHUNK`, else :data:`DEFAULT_CHUNK`;
    fewer where one seed's batched workspace (``bytes_per_seed``) is large:
    past :data:`ONE_CHUNK_BYTES` for one chunk of all the seeds, past
    :data:`CHUNK_BYTES` for the chunks of many seeds.

    Measured (2 cores, Hessians, microseconds per Hessian, K = seeds per chunk):
    Rosenbrock n = 100: K=16 113, K=32 89, K=64 85, K=100 52; n = 300: K=32 290,
    K=64 261, K=128 364, K=300 392; n = 1000: K=16 2706, K=32 2396, K=64 2893,
    K=1000 4646; log-sum-exp n = 100: K=32 74, K=100 47; n = 1000: K=32 2256,
    K=64 2697; tanh(Mx)|x|^2 n = 100: K=32 228, K=100 170.  One chunk wins
    while the batched arrays stay small (the per-run overhead is paid once);
    beyond a few hundred seeds, chunks of 32-64 keep them in cache.

    With ``matmul`` (a matrix product in the seeds' pass) a chunk beyond
    :data:`ONE_CHUNK` takes as many seeds as keep one batched array of ``n``
    elements (``itemsize`` bytes) within :data:`MATMUL_BATCH_BYTES`: the
    product's gemm on 32 columns runs far below its rate on a few hundred.
    """
    if n <= ONE_CHUNK:
        k = min(n, max(1, ONE_CHUNK_BYTES // max(1, bytes_per_seed)))
    else:
        k = min(DEFAULT_CHUNK, max(1, CHUNK_BYTES // max(1, bytes_per_seed)))
        if matmul:  # (workspace up to ONE_CHUNK_BYTES, as one chunk of few seeds)
            wide = MATMUL_BATCH_BYTES // max(1, n * itemsize)
            k = max(k, min(wide, n, ONE_CHUNK_BYTES // max(1, bytes_per_seed)))
    # the chunks balanced: each runs k seeds, the last one too, so 99 seeds in
    # chunks of 88 ran 176 (2 x 50: 100)
    k = max(1, int(k))
    return -(-n // -(-n // k)) if 0 < k < n else k
