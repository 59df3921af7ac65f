"""The environment switches more than one backend module reads, in one place:
hybridad's compiler (:mod:`.jit`) and the numba backend's layout decisions
(:func:`.numba.layouts.runs_natively`: a loop inside a loop body runs in
place only in that compiler's code) must agree on them."""

from __future__ import annotations

import os

__all__ = ["jit_enabled"]


def jit_enabled():
    """Whether programs are offered to hybridad's own compiler
    (``HYBRIDAD_JIT``, default on; ``0``, ``false``, ``no``, ``off``: numba
    compiles every program)."""
    return os.environ.get("HYBRIDAD_JIT", "1").strip().lower() not in ("0", "false", "no",
                                                                        "off")
