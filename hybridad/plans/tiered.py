"""Tiered execution, on request: a numba plan answers its first call at once.

Compiling a plan's numba program takes from a few tenths of a second to
several seconds (LLVM); the numpy reference program of the same function is
built in milliseconds and, like the compiled one, allocates nothing per call.
A tiered plan (``hybridad.compile(..., tiered=True)`` or
``HYBRIDAD_TIERED=1`` in the environment; gradient plans on numba) is
traced, lowered and memory-planned as usual, then

1. builds the reference plan of the same function (``backend="numpy"``);
2. compiles the numba program in a background thread;
3. serves its **first call** (gradient or value) with the reference program
   and **every later call** with the compiled program: the second call waits
   for the compile if it is still running.

The switch is at a call the program fixes, never where a compile happens to
finish: the same calls give the same bits on a cold or a warm cache, on a
busy or a quiet machine.  The first call's results agree with the compiled
program's to rounding, not bitwise: the reference program evaluates the same
graph with numpy's ufuncs and reductions where the compiled one runs fused
loops (``docs/performance.md``, "First calls").  Until the switch the plan holds both
programs' workspaces.

Plans are not tiered by default: the default plan compiles before it
answers, and every call is the compiled program's.

A compile that fails leaves the plan on the reference program for good,
with a :class:`RuntimeWarning` naming the error.  :meth:`TieredMixin.wait`
blocks until the compiled program is in place (``hybridad.compile(...,
wait=True)``).  A compile still running when the interpreter exits is
abandoned (its thread is a daemon; numba and the plan cache write their
files atomically, so nothing is left half written).
"""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings
import weakref

from .._forksafe import Lock
from ..errors import MemoryBudgetError
from .decided import attach, compile_decisions

__all__ = ["TieredMixin", "default_tiered", "join_all"]


_THREADS = weakref.WeakSet()  # compile threads still running


def default_tiered():
    """Whether plans are tiered when ``tiered=None``: ``HYBRIDAD_TIERED=1`` (or
    ``true``, ``yes``, ``on``) in the environment; off by default."""
    return os.environ.get("HYBRIDAD_TIERED", "0").strip().lower() in ("1", "true", "yes", "on")


def join_all(timeout=120.0):
    """Wait for the compile threads still running (at most ``timeout`` seconds in
    all).  Nothing runs it at exit: a compile in flight then is abandoned."""
    deadline = time.monotonic() + timeout
    for thread in list(_THREADS):
        thread.join(max(0.0, deadline - time.monotonic()))


class TieredMixin:
    """The tiers of a :class:`~hybridad.plans.plan.Plan` (see the module docstring).

    Attributes
    ----------
    tier : str
        ``"numpy"`` until the switch (before the second call, or for good when
        the numba program failed to compile), ``"numba"`` after it.
    """

    #: calls the reference program serves before the switch (any kind: gradient, value)
    REFERENCE_CALLS = 1

    _reference = None  # the numpy plan serving the calls until the switch
    _pending = None  # what _compile needs, until the background thread took it
    _compiled = None  # the background compile's program, until the switch installs it
    _tier_error = None  # the compile's exception, when it failed
    _tier_calls = 0  # calls served by the reference program
    _tier_seconds = None  # seconds from the plan's trace to the end of the compile
    _tier_thread = None

    @property
    def tier(self):
        return "numpy" if self._program is None else self.backend

    def _start_tiers(self, f, args):
        """Build the reference plan and start compiling ``self._pending``;
        False (compile in the caller) when the reference cannot be built, or
        when both programs' workspaces would not fit ``memory_budget``."""
        try:  # (type(self) is Plan: only plain gradient plans are tiered)
            self._reference = self._remake(f, args, "numpy")
        except Exception:  # noqa: BLE001 -- no reference program: compile now, as untiered
            self._reference = None
            return False
        if self.memory_budget is not None and self._reference.memory.total_bytes + \
                self.memory.total_bytes > self.memory_budget:
            self._reference = None  # the budget binds both workspaces: no tiers
            return False
        self._tier_started = time.perf_counter()
        self._tier_lock = Lock()
        thread = threading.Thread(target=self._compile_pending,
                                  name=f"hybridad compile {self.name}", daemon=True)
        _THREADS.add(thread)
        self._tier_thread = thread
        #: set once the compile has ended (under the build lock: a fork sees it
        #: set, or the compile not begun): what :meth:`wait` waits for -- not
        #: the thread, whose join a KeyboardInterrupt can leave marked stopped
        #: while it still runs (Python 3.11)
        self._tier_done = threading.Event()
        thread.start()
        return True

    def _tier_reference(self):
        """The reference plan when it serves this call, else None (the
        compiled program does): the first :attr:`REFERENCE_CALLS` calls, and
        every call when there is no compiled program (over the compile budget,
        or a failed compile).  The call after those waits for the compile and
        makes the switch."""
        if self._reference is None or self._program is not None:
            return None
        with self._tier_lock:
            if self._tier_calls < self.REFERENCE_CALLS or self._tier_thread is None:
                self._tier_calls += 1
                return self._reference
        if self.wait():
            return None
        with self._tier_lock:  # the compile failed: the reference, for good
            self._tier_calls += 1
        return self._reference

    def _serve_reference(self, f, args, exc):
        """A numba program over the compile budget (``exc``, a
        :class:`hybridad.CompileBudgetError`): the numpy reference program
        serves every call, with a :class:`RuntimeWarning` (gradient plans)."""
        try:
            self._reference = self._remake(f, args, "numpy")
        except MemoryBudgetError as over:  # (the numpy program keeps more intermediates)
            raise MemoryBudgetError(
                f"{exc}; its numpy reference program, which would serve the calls instead, "
                f"does not fit memory_budget either: {over}") from over
        self._tier_error = exc
        self._tier_lock = Lock()
        warnings.warn(f"hybridad: {exc}; the plan runs its numpy reference program (no "
                      "compile, no allocation per call; slower than compiled code)",
                      RuntimeWarning, stacklevel=4)

    def _compile_pending(self):
        """Compile what is pending, if anything, under the build lock: a fork
        waits for it, so a child has either the pending work or the program
        (the background thread's target; a forked child's :meth:`wait`)."""
        from ..backends.numba import build_lock

        with build_lock():
            pending, self._pending = self._pending, None
            try:
                if pending is not None:
                    self._compile_taken(pending)
            finally:
                self._tier_done.set()

    def _compile_check(self, attach=False):
        """Compile the check of the plan's decisions on values, if it has some
        and runs on numba (:mod:`.decided`), within what ``memory_budget``
        leaves; :meth:`_attach_check` (or ``attach``) puts it in place."""
        if self._decision_check is not None and self.backend == "numba":
            budget = None if self.memory_budget is None else \
                self.memory_budget - self.memory.total_bytes
            self._check_program = compile_decisions(self._decision_check, self._specs,
                                                    self.parallel, budget)
            if attach:
                self._attach_check()

    def _attach_check(self):
        """The compiled check in place: for a tiered plan at the switch, with the
        compiled program -- a call's decisions never depend on when a
        background compile ended."""
        attach(self._decision_check, getattr(self, "_check_program", None))

    def _compile_taken(self, pending):
        try:
            self._compile_check()  # (first: the program carries it, see Plan._compile)
            self._compiled = self._compile(*pending)
        except Exception as exc:  # noqa: BLE001 -- the reference program keeps serving
            self._tier_error = exc
            warnings.warn(f"hybridad: compiling the numba program of {self.name} failed "
                          f"({type(exc).__name__}: {exc}); the plan keeps running its numpy "
                          "reference program", RuntimeWarning, stacklevel=1)
        finally:
            self._tier_seconds = time.perf_counter() - self._tier_started

    def wait(self, timeout=None):
        """Block until the compiled program serves the calls, and make the
        switch: every later call runs it.

        Parameters
        ----------
        timeout : float, optional
            Most seconds to wait; ``None`` waits for the compile to end.

        Returns
        -------
        bool
            True when the compiled program is in place (also for a plan that
            was never tiered); False on timeout or when the compile failed
            (the reference program keeps serving; ``explain()`` says why).
        """
        thread = self._tier_thread
        if thread is not None and self._program is None:
            done = self._tier_done
            if not done.is_set() and self._pending is not None and not thread.is_alive():
                # a process forked before the compile began: the child has no
                # compile thread, so it compiles here
                self._compile_pending()
            done.wait(timeout)
            if done.is_set() and self._compiled is not None:
                dropped = None
                with self._lock:  # no call is in flight on the compiled program yet
                    if self._program is None:
                        self._attach_check()
                        self._install_program(self._compiled)
                        self._compiled = None
                        # its buffers go: a call still on it holds its own reference
                        dropped, self._reference = self._reference, None
                if dropped is not None:
                    # (a plan is a reference cycle: its workspace -- the numpy
                    # program's, larger than the compiled one's -- waited for
                    # the collector, which a loop that allocates nothing never
                    # runs; 700 MB were held after 50 calls)
                    del dropped
                    gc.collect()
        return self._program is not None

    def _tier_lines(self):
        """The tier lines of :meth:`explain` (and, while the numpy reference
        plan is held, the workspace it holds beside the compiled program's)."""
        lines = self._tier_state()
        ref = self._reference
        if lines and ref is not None:
            lines.append(f"held by the numpy reference program while it serves: "
                         f"{ref.memory.total_bytes} bytes (beside the workspace below)")
        return lines

    def _tier_state(self):
        if self._tier_thread is None:
            if self._tier_error is not None:  # (over the compile budget)
                return [f"tiers: {self._tier_error}; the numpy reference program serves every "
                        "call" + (f" ({self._tier_calls} so far)" if self._reference is not None
                                  else "")]
            return []
        if self._program is not None:
            return [f"tiers: the numpy reference program answered the first "
                    f"{self._tier_calls} call(s) while numba compiled in the background "
                    f"({self._tier_seconds:.2f} s after the trace); every later call runs "
                    "the compiled program"]
        if self._tier_error is not None:
            return [f"tiers: the numba program failed to compile ({self._tier_error!r}); the "
                    f"numpy reference program serves every call ({self._tier_calls} so far)"]
        state = "compiled" if self._compiled is not None else "is compiling in the background"
        return [f"tiers: numba {state}; the numpy reference program serves the first "
                f"{self.REFERENCE_CALLS} call(s) ({self._tier_calls} so far), every later "
                "call the compiled program (the next call waits for the compile; "
                "plan.wait() switches now)"]
