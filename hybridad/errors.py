"""Exceptions raised by hybridad."""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading

__all__ = ["CompileBudgetError", "MemoryBudgetError", "OuterTracerError", "RetraceWarning",
           "StalePlanError", "TracingError", "user_location"]

#: hybridad's own package directory, with a trailing separator: code from files
#: under it is hybridad's, not the user's (every subpackage, in a checkout as in
#: an installed copy)
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NUMPY_MARK = os.sep + "numpy" + os.sep
_SCIPY_MARK = os.sep + "scipy" + os.sep


class TracingError(Exception):
    """Raised when user code cannot be traced into a static graph.

    Typical cause: Python control flow that depends on the *value* of a traced
    array (``if x[0] > 0``, ``float(x)``, ``bool(...)``).  The message names the
    offending line and the operation to use instead (``np.where``,
    ``np.maximum``, ...).
    """


class OuterTracerError(TracingError):
    """A function hybridad traces used a traced value of an enclosing traced
    function: a closure over the outer function's values, as in
    ``ha.gradient(lambda y: x * y, 2.0)`` inside an ``f`` being differentiated
    in ``x``.  :func:`hybridad.gradient`, ``hvp``, ``hessian`` and ``jacobian`` catch it
    and differentiate the inner function inside the outer trace instead
    (:mod:`hybridad.plans.nested`); other entry points there (a plan compiled
    or called inside a traced function) raise it."""


class ConversionError(TracingError):
    """A traced value was converted into numpy's memory by code tracing does not
    follow (``Tracer.__array__``, ``a[i] = t`` or ``out=`` a numpy array).
    ``user_globals``: the global namespaces of the user's code on the stack,
    where a numpy constructor may be bound by another name (``from numpy
    import asarray``).  A plan traces such a function again with the arrays it
    makes traced (:func:`hybridad.frontend.numpy_made.traced_again`)."""

    #: what else its second trace binds in the user's namespaces: ``"math"``
    #: (:class:`MathCallError`), ``"types"`` (a numpy scalar type called on the
    #: user's line: :func:`conversion_kinds`)
    kinds = frozenset()

    def __init__(self, message, user_globals=None, kinds=None):
        super().__init__(message)
        self.user_globals = user_globals
        if kinds is not None:
            self.kinds = frozenset(kinds)
        _RAISED.last = self  # (seen by the plan's trace even where the caller swallows it)


def raised_in_chain(exc, kind, links=8):
    """The first exception of class ``kind`` in ``exc``'s chain: ``exc``
    itself, then its cause (or else its context), ``links`` steps at most;
    None if there is none."""
    seen = 0
    while exc is not None and seen < links:
        if isinstance(exc, kind):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


#: the thread's last :class:`ConversionError` (:func:`swallowed_conversion`)
_RAISED = threading.local()


def swallowed_conversion(clear=False):
    """The last :class:`ConversionError` raised in this thread since the last
    ``clear``: code that catches every exception (numpy's ``Polynomial.__radd__``
    answers NotImplemented) hides the conversion behind the error it raises
    instead."""
    last = getattr(_RAISED, "last", None)
    if clear:
        _RAISED.last = None
    return last


class MemoryBudgetError(ValueError):
    """Raised by :func:`hybridad.compile` when no plan fits ``memory_budget``
    (at compile time, never as an out-of-memory at run time).  The message
    gives the smallest workspace hybridad can plan for the function."""


class CompileBudgetError(RuntimeError):
    """Raised when a numba program would take longer to compile than
    ``HYBRIDAD_COMPILE_BUDGET`` seconds (estimated from its generated code,
    before numba starts).  Gradient, Hessian and Jacobian plans catch it and
    run the function's numpy reference program instead, with a
    :class:`RuntimeWarning`; it reaches the caller only from plans that have
    no such fallback (``hvp=True``, ``update=``)."""


class StalePlanError(RuntimeError):
    """Raised by a plan of :func:`hybridad.compile` when what ``f`` reads
    besides its arguments (its globals, closure, ``self``'s attributes, a
    captured list or array) changed since the plan was traced so that ``f``
    now traces to a different graph: the plan would compute the old
    function.  The message names the value; build a new plan, or use
    :func:`hybridad.gradient` (it rebuilds when this happens), or pass the
    value as an argument."""


class RetraceWarning(UserWarning):
    """Issued when a plan had to trace ``f`` again several times because a
    value it reads besides its arguments keeps changing between calls (see
    ``docs/limitations.md``): correct, but each call then pays a trace."""


class DecisionsChanged(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a plan's compiled decision check (:mod:`hybridad.plans.decided`)
    when a call's arguments decide otherwise than the traced call did; the
    plan catches it and runs the specialization whose decisions hold.  It
    never reaches the user."""


def is_user_file(filename):
    """Whether code of ``filename`` is the user's: not hybridad's, numpy's or scipy's."""
    fname = os.path.abspath(filename)
    return not fname.startswith(PACKAGE_DIR) and _NUMPY_MARK not in fname and \
        _SCIPY_MARK not in fname


#: numpy's polynomial package: Python code on arrays (Clenshaw's and Horner's
#: recurrences, series arithmetic that fills arrays it makes), traced as the user's
_POLYNOMIAL_MARK = os.sep + os.path.join("numpy", "polynomial") + os.sep


def traced_as_users(filename):
    """Whether code of ``filename`` makes, converts and fills arrays as the user's
    code does while tracing (its ``np.array`` of a traced value is traced, the
    arrays it makes are traced when written): the user's, and numpy's
    polynomial package (``chebval(x, c)``, ``Polynomial(c)(x)``, ``polyder(c)``
    of traced coefficients)."""
    return is_user_file(filename) or _POLYNOMIAL_MARK in os.path.abspath(filename)


def code_line(filename, lineno):
    """``'file.py:12: <source line>'`` (the line's text where it can be read)."""
    fname = os.path.abspath(filename)
    line = linecache.getline(fname, lineno).strip()
    where = f"{os.path.basename(fname)}:{lineno}"
    return f"{where}: {line}" if line else where


#: a numpy scalar type called on a line (``np.float64(loss)``, ``int64(w)``)
_SCALAR_CALL = re.compile(r"\b(?:float64|float32|int64|int32|int16|int8|uint64|uint32|uint16|"
                          r"uint8|bool_|double|single|intp|int_)\s*\(")


def conversion_kinds():
    """:attr:`ConversionError.kinds` of a conversion now: ``{"types"}`` where
    the user's line calls a numpy scalar type (the second trace then binds
    the user's names for numpy and its scalar types to stand-ins that cast a
    traced value), else none (only the arrays ``f`` makes are traced)."""
    frame = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return frozenset()
    line = linecache.getline(os.path.abspath(frame.f_code.co_filename), frame.f_lineno)
    return frozenset({"types"}) if _SCALAR_CALL.search(line) else frozenset()


class MathCallError(ConversionError):
    """``float()`` of a traced value a differentiated argument reaches, in
    code whose namespaces bind the ``math`` module or its functions
    (``math.sqrt(T)``, ``from math import exp``): a plan traces such a
    function again with those names as numpy's functions on traced values
    (:func:`hybridad.frontend.numpy_made.traced_again`); where that trace
    takes the same ``float()``, it raises this error's message as a
    :class:`TracingError`."""

    kinds = frozenset({"math"})


def math_namespaces():
    """The global namespaces of the user's code on the stack that bind the
    ``math`` module or one of its functions (for :class:`MathCallError`)."""
    import math

    ids = {id(math), *(id(v) for v in vars(math).values() if callable(v))}
    return [ns for ns in user_namespaces() if any(id(v) in ids for v in ns.values())]


def user_namespaces():
    """The global namespaces of the user's code on the stack, innermost first."""
    frame, out, seen = sys._getframe(1), [], set()
    while frame is not None:
        if is_user_file(frame.f_code.co_filename) and id(frame.f_globals) not in seen:
            seen.add(id(frame.f_globals))
            out.append(frame.f_globals)
        frame = frame.f_back
    return out


def user_location():
    """``'file.py:12: <source line>'`` of the innermost frame outside hybridad/numpy."""
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return code_line(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return "<unknown location>"


#: the scipy functions the frontend traces through their module's attribute
#: (``"scipy.integrate.odeint"``; filled by :func:`hybridad.frontend.scipy_special.intercepts`):
#: one whose own code meets a tracer was called by a name bound before hybridad wrapped it
WRAPPED_ENTRIES = set()


def _library_hint(entry):
    """What to do instead of calling scipy's ``entry`` on traced values."""
    if entry.startswith("scipy.integrate") and not entry.endswith(("trapezoid", "simpson")):
        return ("Write the integration with numpy: an ODE as a fixed-step loop (a Python for "
                "loop, which hybridad rolls, or hybridad.fori_loop / scan), a quadrature as "
                "a sum over nodes (np.polynomial.legendre.leggauss gives them).")
    if entry.startswith("scipy.optimize"):
        return ("hybridad differentiates scipy.optimize's brentq, brenth, ridder, bisect, "
                "toms748, root_scalar, fsolve, root and unconstrained minimize inside f (the "
                "implicit function theorem); write this solve as one of them, or solve on "
                "values outside f and differentiate the condition the solution meets, or "
                "write the iterations with numpy.")
    return ("Call it on values (outside the differentiated function, or on arrays that do "
            "not depend on the arguments you differentiate), or write it with numpy.")


def library_refusal(entry, where):
    """The :class:`TracingError` for scipy's ``entry`` (of :func:`library_entry`)
    converting a traced value at ``where``: one hybridad traces but reached by
    a name bound before it was wrapped, or one it does not trace."""
    if entry in WRAPPED_ENTRIES:
        module, short = entry.rsplit(".", 1)
        return TracingError(
            f"{entry} was called on traced values by a name bound before hybridad wrapped it "
            f"(at {where}; `from {module} import {short}` ahead of `import hybridad`): "
            f"hybridad traces it through its module's attribute. Import hybridad first, or "
            f"call {entry}(...)")
    return TracingError(
        f"{entry} converts its input with np.asarray, which tracing cannot follow (at "
        f"{where}): it is not among the scipy functions hybridad traces "
        f"(docs/coverage.md lists them). {_library_hint(entry)}")


def public_module(module):
    """``numpy.linalg`` for ``numpy.linalg._linalg``: a module's public path."""
    return ".".join(p for p in module.split(".") if not p.startswith("_"))


def library_entry():
    """``scipy.special.logsumexp``-style name of the outermost scipy function
    on the stack below the user's code, or None."""
    frame, entry = sys._getframe(1), None
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if _SCIPY_MARK in fname:
            entry = f"{public_module(frame.f_globals.get('__name__', 'scipy'))}." \
                f"{frame.f_code.co_name}"
        elif not fname.startswith(PACKAGE_DIR) and _NUMPY_MARK not in fname:
            break
        frame = frame.f_back
    return entry
