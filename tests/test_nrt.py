"""numba's own runtime allocations per call (NUMBA_NRT_STATS), which the numpy
counter cannot see.  No array reaches the compiled plan as an array (arenas by
address, the caller's arrays and captured constants by object, see
hybridad.backends.numba.rt), so a call makes none -- also through ha.gradient and on
the general path that stages a non-contiguous argument.  With the fallback
that passes arrays (rt.ABI is None) the count is one per array argument."""

import textwrap

from conftest import nrt_rows

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np
    import hybridad as ha
    from numba.core.registry import cpu_target
    from numba.core.runtime import rtsys

    rtsys.initialize(cpu_target.target_context)  # (a plan hybridad compiles never starts it)

    def expsum(x):
        r = np.sum(np.exp(-3 * (x + 1)))
        return r ** 2 + r ** 3 + r ** 4 / 4

    def quad(x, A, B):
        return x @ (A @ x) + np.sum(np.tanh(B @ x)) + np.max(x * x)

    C = np.random.default_rng(1).random((6, 6))
    Cf = np.asfortranarray(C)

    def captured(x):  # constants captured by reference, C and Fortran order
        return x @ (C @ x) + np.sum(np.tanh(Cf @ x))

    def mlp(W1, b1, W2, X):
        return np.mean((np.tanh(X @ W1 + b1) @ W2) ** 2)

    @ha.elementwise
    def huber(r, d):  # dual numbers are structs by value: nothing on the heap
        if abs(r) < d:
            return 0.5 * r * r
        return d * (abs(r) - 0.5 * d)

    def robust(x, d):
        return np.sum(huber(x, d))

    rng = np.random.default_rng(0)
    cases = {
        "expsum": (expsum, (rng.random(100),), 0),
        "quad": (quad, (rng.random(6), rng.random((6, 6)), rng.random((3, 6))), 0),
        "captured": (captured, (rng.random(6),), 0),
        "mlp": (mlp, (rng.random((1, 8)), rng.random(8), rng.random((8, 1)),
                      rng.random((50, 1))), (0, 1, 2)),
        "elementwise": (robust, (rng.random(100) * 4 - 2, rng.random((1,)) + 0.5), (0, 1)),
    }
    N = 200
    for name, (f, args, argnums) in cases.items():
        plan = ha.compile(f, *args, argnums=argnums)
        res = plan.new_result()
        strided = tuple(np.repeat(a, 2, axis=-1)[..., ::2] for a in args)
        for path, call in (("plan", lambda: plan.gradient(*args, out=res)),
                           ("ha", lambda: ha.gradient(f, *args, argnums=argnums, out=res)),
                           ("staged", lambda: plan.gradient(*strided, out=res))):
            call()
            s0 = rtsys.get_allocation_stats()
            for _ in range(N):
                call()
            s1 = rtsys.get_allocation_stats()
            print(name, path, len(args), (s1.alloc - s0.alloc) / N, (s1.free - s0.free) / N)
""")


@pytest.mark.parametrize("jit", ["1", "0"], ids=["hybridad", "numba"])
def test_no_nrt_allocations_per_call(jit):
    """Programs compiled by hybridad's own compiler (the default) and by
    numba (``HYBRIDAD_JIT=0``, what a program the former refuses gets)."""
    rows = nrt_rows(SCRIPT, jit)
    assert len(rows) == 15, rows
    for name, path, _, allocs, frees in rows:
        assert float(allocs) == 0, (name, path, allocs)
        assert float(frees) == 0, (name, path, frees)
