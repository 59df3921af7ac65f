"""Tiered execution: a numba plan answers its first calls at once.

Compiling a plan's numba program takes from a few tenths of a second to
several seconds (LLVM); the numpy reference program of the same function is
built in milliseconds and, like the compiled one, allocates nothing per call.
A tiered plan (:class:`~hybridad.plans.plan.Plan` with ``tiered=True``, the
default of gradient plans on numba) is traced, lowered and memory-planned as
usual, then

1. builds the reference plan of the same function (``backend="numpy"``) and
   serves its calls there (tier 0);
2. compiles the numba program in a background thread (tier 1);
3. switches at a call boundary once the program is ready: a call that began
   on the reference program ends there, the next one runs compiled code.

Results agree between tiers to rounding: the reference program evaluates
the same graph with numpy's ufuncs and reductions (pairwise summation)
where the compiled one runs fused loops, so values and gradients differ by a
few ulps per reduction (``docs/guide.md``, "First calls").

A compile that fails leaves the plan on the reference program for good,
with a :class:`RuntimeWarning` naming the error.  :meth:`TieredMixin.wait`
blocks until the compiled program is in place (``hybridad.compile(...,
wait=True)``); :func:`join_all` (run at interpreter exit) waits for every
compile still running, so no thread is left half way through writing numba's
disk cache.  ``HYBRIDAD_TIERED=0`` in the environment turns tiering off for
plans that do not ask for it.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
import weakref

__all__ = ["TieredMixin", "default_tiered", "join_all", "track_thread"]


_THREADS = weakref.WeakSet()  # compile threads still running


def default_tiered():
    """Whether plans are tiered when ``tiered=None`` (``HYBRIDAD_TIERED``, default on)."""
    return os.environ.get("HYBRIDAD_TIERED", "1").strip().lower() not in ("0", "false", "no",
                                                                          "off", "")


def track_thread(thread):
    """Count ``thread`` (a compile) among those :func:`join_all` waits for."""
    _THREADS.add(thread)


def join_all(timeout=120.0):
    """Wait for the compile threads still running (at most ``timeout`` seconds in all)."""
    deadline = time.monotonic() + timeout
    for thread in list(_THREADS):
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(join_all)


class TieredMixin:
    """The tiers of a :class:`~hybridad.plans.plan.Plan` (see the module docstring).

    Attributes
    ----------
    tier : str
        ``"numpy"`` while the reference program serves the calls (the numba
        program is compiling or failed to compile), ``"numba"`` after the switch.
    """

    _reference = None  # the numpy plan serving the calls until the switch
    _pending = None  # what _compile needs, until the background thread took it
    _tier_error = None  # the compile's exception, when it failed
    _tier_calls = 0  # calls served by the reference program
    _tier_seconds = None  # seconds from the plan's trace to the switch

    @property
    def tier(self):
        return "numpy" if self._program is None else self.backend

    def _start_tiers(self, f, args):
        """Build the reference plan and start compiling ``self._pending``;
        False (compile in the caller) when the reference cannot be built."""
        try:  # (type(self) is Plan: only plain gradient plans are tiered)
            self._reference = type(self)(f, args, self.argnums, backend="numpy",
                                         parallel=self.parallel, tiered=False)
        except Exception:  # noqa: BLE001 -- no reference program: compile now, as untiered
            self._reference = None
            return False
        self._tier_started = time.perf_counter()
        thread = threading.Thread(target=self._compile_in_background,
                                  name=f"hybridad compile {self.name}", daemon=True)
        _THREADS.add(thread)
        self._tier_thread = thread
        thread.start()
        return True

    def _serve_reference(self, f, args, exc):
        """A numba program over the compile budget (``exc``, a
        :class:`hybridad.CompileBudgetError`): the numpy reference program
        serves every call, with a :class:`RuntimeWarning` (gradient plans)."""
        self._reference = type(self)(f, args, self.argnums, backend="numpy",
                                     parallel=self.parallel, tiered=False)
        self._tier_error = exc
        warnings.warn(f"hybridad: {exc}; the plan runs its numpy reference program (no "
                      "compile, no allocation per call; slower than compiled code)",
                      RuntimeWarning, stacklevel=4)

    def _compile_in_background(self):
        pending, self._pending = self._pending, None
        try:
            program = self._compile(*pending)
        except Exception as exc:  # noqa: BLE001 -- the reference program keeps serving
            self._tier_error = exc
            warnings.warn(f"hybridad: compiling the numba program of {self.name} failed "
                          f"({type(exc).__name__}: {exc}); the plan keeps running its numpy "
                          "reference program", RuntimeWarning, stacklevel=1)
            return
        with self._lock:  # no compiled call is in flight before the switch
            self._install_program(program)
            self._tier_seconds = time.perf_counter() - self._tier_started
        # its buffers go: a call still on it holds its own reference until it ends
        self._reference = None

    def wait(self, timeout=None):
        """Block until the compiled program serves the calls.

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
        thread = getattr(self, "_tier_thread", None)
        if thread is not None:
            thread.join(timeout)
        return self._program is not None

    def _tier_lines(self):
        """The tier lines of :meth:`explain`."""
        if getattr(self, "_tier_thread", None) is None:
            if self._tier_error is not None:  # (over the compile budget)
                return [f"tiers: {self._tier_error}; the numpy reference program serves every "
                        "call" + (f" ({self._tier_calls} so far)" if self._reference is not None
                                  else "")]
            return []
        if self._tier_seconds is not None:
            return [f"tiers: the numpy reference program answered the first "
                    f"{self._tier_calls} call(s) while numba compiled in the background; "
                    f"switched to the compiled program {self._tier_seconds:.2f} s after the "
                    "trace"]
        if self._tier_error is not None:
            return [f"tiers: the numba program failed to compile ({self._tier_error!r}); the "
                    f"numpy reference program serves every call ({self._tier_calls} so far)"]
        return [f"tiers: numba is compiling in the background; the numpy reference program "
                f"serves the calls until it is ready ({self._tier_calls} so far; "
                "plan.wait() blocks until the switch)"]
