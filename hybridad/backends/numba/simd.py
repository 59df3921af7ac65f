"""The vector width LLVM prefers in generated functions.

LLVM vectorizes for 256-bit registers on Intel CPUs with AVX-512 (Skylake-SP
to Emerald Rapids: its ``prefer-256-bit`` tuning, once chosen because wide
instructions lowered the clock on early parts).  A float32 loop then runs 8
lanes, where the hardware has 16.  numba offers no per-function setting, and
its target machine's features are fixed for the whole process (changing
them would change every user's numba function too), so a generated function
asks for itself: its first statement, and the first of every ``prange`` body
(numba outlines those into functions of their own), is :func:`prefer_wide`,
which gives the LLVM function being built the attribute
``"prefer-vector-width"="512"``.  The attribute touches only that function
(and what LLVM inlines into it); on a CPU without 512-bit registers LLVM
keeps the width it has.  Whether plans use it is the machine's measured
choice (:attr:`hybridad.transforms.costs.Costs.simd_bits`).
"""

from __future__ import annotations

import functools
import re

__all__ = ["ATTRIBUTE", "CALL", "IMPORT", "SERIAL", "SERIAL_IMPORT", "measure", "prefer_wide",  # noqa: F822
           "serial_loop", "widen"]

ATTRIBUTE = '"prefer-vector-width"="512"'
CALL = "_simd_wide()"
IMPORT = "from hybridad.backends.numba.simd import prefer_wide as _simd_wide"
#: the first statement of a loop LLVM is not to vectorize (:func:`serial_loop`)
SERIAL = "_serial_loop()"
SERIAL_IMPORT = "from hybridad.backends.numba.simd import serial_loop as _serial_loop"


@functools.lru_cache(maxsize=None)
def _intrinsics():
    """``(prefer_wide, _nothing)``, made on first use (the text helpers of
    this module -- :data:`IMPORT`, :func:`widen` -- need no numba)."""
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def prefer_wide(typingctx):
        """Mark the function being compiled: LLVM may vectorize it 512 bits wide.

        A no-op at run time (no instructions); numba-only."""

        def codegen(context, builder, signature, args):
            # llvmlite's attribute set checks names against LLVM's enum attributes;
            # a string attribute is written as it will appear in the IR (an
            # llvmlite whose attributes are not a set: LLVM's width, as before)
            attributes = builder.function.attributes
            if isinstance(attributes, set):
                set.add(attributes, ATTRIBUTE)
            return context.get_dummy_value()

        return types.none(), codegen

    @intrinsic
    def _nothing(typingctx):
        return types.none(), lambda context, builder, signature, args: \
            context.get_dummy_value()

    @intrinsic
    def serial_loop(typingctx):
        """Mark the loop around the call: not to be vectorized (hybridad's
        compiler); a no-op in numba."""
        return types.none(), lambda context, builder, signature, args: \
            context.get_dummy_value()

    return prefer_wide, _nothing, serial_loop


def __getattr__(name):  # prefer_wide, serial_loop and _nothing (PEP 562)
    if name == "prefer_wide":
        return _intrinsics()[0]
    if name == "serial_loop":
        # serial_loop: the first statement of a loop whose iterations carry a
        # recurrence (a scan: p += x[t]; out[t] = p), which no vectorizer can
        # run in lanes.  hybridad's compiler (backends.jit) marks the loop
        # llvm.loop.vectorize.enable = false: LLVM 20's loop vectorizer, costing
        # such a loop beside a vectorizable one at constant trip counts of 28 to
        # 31, failed an assertion ("VPlan cost model and legacy cost model
        # disagreed") and llvmlite's LLVM, built with assertions, aborted the
        # process (a Cox likelihood's Hessian over 30 subjects).  numba: nothing
        return _intrinsics()[2]
    if name == "_nothing":
        return _intrinsics()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_DEF = re.compile(r"^(\s*)def \w+\(.*\):\s*$")
_PRANGE = re.compile(r"^(\s*)for .+ in prange\(.*\):\s*(#.*)?$")


def widen(lines):
    """``lines`` of generated source with :data:`CALL` first in every function
    decorated ``@njit`` and every ``prange`` body (4-space indentation)."""
    out = []
    for k, line in enumerate(lines):
        out.append(line)
        m = _PRANGE.match(line) or (_DEF.match(line) if k and lines[k - 1].startswith("@njit(")
                                    else None)
        if m:
            out.append(f"{m.group(1)}    {CALL}")
    return out


def _loops(wide):
    """Loops like a plan's: float32 tanh, float64 exp, a float32 multiply-add
    chain (each over one array, into another), compiled with or without
    :func:`prefer_wide`."""
    import numpy as np
    from numba import njit

    from .vmath import vexp_inline, vtanhf_inline

    flags = dict(cache=False, error_model="numpy")  # (no contraction: program.py)
    prefer_wide, _nothing, _ = _intrinsics()
    mark = prefer_wide if wide else _nothing
    f32 = np.float32

    @njit(**flags)
    def tanh32(x, out):
        mark()
        for i in range(x.size):
            out[i] = vtanhf_inline(x[i])

    @njit(**flags)
    def exp64(x, out):
        mark()
        for i in range(x.size):
            out[i] = vexp_inline(x[i])

    @njit(**flags)
    def chain32(x, out):
        mark()
        for i in range(x.size):
            v = x[i]
            for _ in range(16):
                v = v * f32(0.999) + f32(0.001)
            out[i] = v

    return tanh32, exp64, chain32


def measure(n=8192, rounds=15):
    """The median over :func:`_loops` of (time with :func:`prefer_wide`) /
    (time without), best of ``rounds`` interleaved runs each (in cache: the
    loops' compute, which is what the width changes); 1.0 where the CPU has
    no 512-bit vectors (nothing to measure)."""
    import time

    import numpy as np
    from llvmlite import binding

    if "+avx512f" not in binding.get_host_cpu_features().flatten():
        return 1.0
    pairs = list(zip(_loops(False), _loops(True), strict=True))
    x32 = np.linspace(-3.0, 3.0, n, dtype=np.float32)
    x64 = x32.astype(np.float64)
    args = [(x32, np.empty_like(x32)), (x64, np.empty_like(x64)), (x32, np.empty_like(x32))]
    ratios = []
    for (narrow, wide), a in zip(pairs, args, strict=True):
        best = [np.inf, np.inf]
        for _ in range(rounds):
            for j, fn in enumerate((narrow, wide)):
                t = time.perf_counter()
                for _ in range(20):
                    fn(*a)
                best[j] = min(best[j], time.perf_counter() - t)
        ratios.append(best[1] / best[0])
    return float(np.median(ratios))
