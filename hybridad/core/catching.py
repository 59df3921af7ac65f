"""Whether the code that called into hybridad would catch an exception raised now.

numpy code catches linear-algebra failures and retries::

    jitter = 1e-10
    while True:
        try:
            L = np.linalg.cholesky(K + jitter * np.eye(n))
            break
        except np.linalg.LinAlgError:
            jitter *= 10

A trace that only knows shapes cannot take that branch, and a plan traced
where the factorization succeeded would raise at the call where it fails
instead of retrying.  :func:`hybridad.core.decisions.decide_raises` therefore
evaluates an op that can fail (:attr:`hybridad.ir.registry.Op.raises`) on the
traced call's values -- and records whether it failed as a decision, checked
before every call -- where :func:`caught_here` says a ``try`` statement of
the calling code surrounds the call.  Elsewhere a failure propagates as it
would from numpy, and nothing is evaluated.

The answer is read from the calling frames' exception tables (Python 3.11
and later): the handler that covers each frame's current instruction is an
``except`` clause (it catches), a ``with`` statement's or a ``finally``
block's (they re-raise: the next handler out decides), or none.  A context
manager that swallows exceptions (``contextlib.suppress``) is not seen.
Without exception tables (Python 3.10) every such call counts as caught:
the decision then costs a check per call, never a wrong result.
"""

from __future__ import annotations

import dis
import functools
import sys

from ..errors import PACKAGE_DIR

__all__ = ["caught_here"]

_TABLES = hasattr(dis, "_parse_exception_table") and sys.version_info >= (3, 11)
#: handlers that end the search: an ``except`` clause tests the exception's type
_MATCH = frozenset({"CHECK_EXC_MATCH", "CHECK_EG_MATCH"})
#: where a handler that does not test the exception ends (it re-raises)
_END = frozenset({"RERAISE", "POP_EXCEPT", "RETURN_VALUE", "RETURN_CONST"})


def caught_here():
    """Whether a ``try`` statement in the code that called into hybridad
    surrounds the call being traced now: the innermost frames outside
    hybridad (the user's function, the helpers and libraries it went
    through), up to the first of hybridad's own frames beyond them (the
    plan that traces ``f``)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame = frame.f_back
    while frame is not None and not frame.f_code.co_filename.startswith(PACKAGE_DIR):
        if not _TABLES or _caught(frame.f_code, frame.f_lasti):
            return True
        frame = frame.f_back
    return False


@functools.lru_cache(maxsize=4096)
def _caught(code, offset):
    """Whether an exception at instruction ``offset`` of ``code`` reaches an
    ``except`` clause of ``code`` (following ``with`` and ``finally``
    handlers, which re-raise, outward)."""
    table = dis._parse_exception_table(code)
    seen = set()
    while offset not in seen:
        seen.add(offset)
        entry = next((e for e in table if e.start <= offset < e.end), None)
        if entry is None:
            return False
        kind = _handler_kind(code, entry.target)
        if kind == "except":
            return True
        offset = entry.target  # (a re-raising handler: the one around it decides)
    return False


def _handler_kind(code, target):
    """``"except"`` when the handler at ``target`` is an ``except`` clause
    (typed or bare), else ``"reraise"`` (a ``with`` statement's, a ``finally``
    block's, the cleanup of a handler)."""
    ops = [ins.opname for ins in dis.get_instructions(code)
           if ins.offset >= target and ins.opname not in ("CACHE", "NOP")]
    if not ops or ops[0] != "PUSH_EXC_INFO":  # (a cleanup: it re-raises)
        return "reraise"
    if len(ops) > 1 and ops[1] == "POP_TOP":  # a bare ``except:`` drops the exception
        return "except"
    for op in ops[1:]:
        if op in _MATCH:  # (``except E:`` loads E, then tests it)
            return "except"
        if op in _END or op == "WITH_EXCEPT_START":
            return "reraise"
    return "reraise"
