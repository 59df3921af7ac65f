"""Loops stated by the user: :func:`fori_loop` and :func:`scan`, with JAX's
signatures and semantics.

Called on plain arrays, outside any trace, they are the Python loops they
describe.  While a function is traced, the body is traced ONCE, on tracers of
one iteration's carry and slice of ``xs``, into a body graph
(:class:`BodyTrace`), and the loop becomes one ``loop`` node
(:mod:`hybridad.ops.loop`): what the plan costs to build, differentiate and
compile no longer grows with the trip count, and the compiled plan runs the
body as a loop.  Values the body reads from outside -- traced values of the
enclosing function, captured arrays -- become operands of the loop node
(:meth:`BodyTrace.lift`), so derivatives flow to them too.

As in JAX, the body is traced without values: a Python ``if`` on a carried
value raises :class:`hybridad.TracingError` (write ``np.where``), and the
carry keeps its structure, shapes and dtype from one iteration to the next.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np

from ..errors import TracingError
from ..ir.graph import Graph
from ..ops.loop import LoopBody, layout, part
from ..core.trace import Trace, _escaped, _state, as_node, bind
from ..core.tracer import Tracer
from .._tree import namedtuple_class

__all__ = ["BodyTrace", "fori_loop", "scan"]


class BodyTrace(Trace):
    """The trace of a loop body, nested in the trace of the code around it.

    A tracer of an enclosing trace, or an array captured by reference, that
    the body reads becomes one more input of the body (:meth:`lift`), and the
    loop node takes the outer value as an operand (:attr:`lifted`)."""

    def __init__(self, parent, first_index):
        super().__init__()
        self.parent = parent
        self.lifted = []  # the outer tracers, in the order of their body inputs
        self._lifted = {}  # outer node id -> body input node
        self._next = first_index
        #: whether the body's trace failed and was set aside (a value it made,
        #: stored outside the body, is refused by name: :func:`~hybridad.core.trace.as_node`)
        self.abandoned = False

    def __exit__(self, kind, exc, tb):
        if kind is not None:
            self.abandoned = True
        return super().__exit__(kind, exc, tb)

    def lift(self, x):
        """The body input standing for ``x``, a tracer of an enclosing trace."""
        if x._trace is not self.parent:
            outer = getattr(self.parent, "lift", None)
            if outer is None:
                _escaped(x)
            x = Tracer(outer(x), self.parent)
        hit = self._lifted.get(x.node.id)
        if hit is None:
            hit = self._lifted[x.node.id] = self.input(self._next, x.node.shape,
                                                       x.node.dtype).node
            self._next += 1
            self.lifted.append(x)
        return hit

    def const(self, value, literal, unique=False):
        if literal:
            return super().const(value, literal, unique)
        # an array captured by reference stays the caller's: an operand of the loop
        return self.lift(Tracer(self.parent.const(value, False), self.parent))


class _MixedDtypes(Exception):
    """A loop whose carries and per-iteration outputs are not all of one
    floating-point dtype (an int counter beside a float state, float32 beside
    float64, a bool): one ``loop`` node packs them into one float buffer, so
    :func:`fori_loop` and :func:`scan` run such a loop as the Python loop
    instead -- traced step by step, numpy's values and derivatives, the
    plan rolling the steps where they repeat.  ``y_specs``: the body's
    per-iteration outputs' ``(shape, dtype)`` (an empty scan's ys)."""

    def __init__(self, y_specs, y_def):
        super().__init__()
        self.y_specs, self.y_def = y_specs, y_def


def _tracing():
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def _flatten(obj, leaves):
    """The leaves of a pytree of tuples (namedtuples too), lists and dicts
    (anything else is a leaf), and its structure."""
    if isinstance(obj, (tuple, list)):
        return (type(obj), tuple(_flatten(o, leaves) for o in obj))
    if isinstance(obj, dict):
        keys = sorted(obj)
        return (dict, tuple(keys), tuple(_flatten(obj[k], leaves) for k in keys))
    if obj is None:
        return None
    leaves.append(obj)
    return "*"


def _unflatten(td, it):
    if td == "*":
        return next(it)
    if td is None:
        return None
    if td[0] is dict:
        return {k: _unflatten(t, it) for k, t in zip(td[1], td[2], strict=True)}
    items = [_unflatten(t, it) for t in td[1]]
    # (a namedtuple takes its fields one by one)
    return td[0](*items) if namedtuple_class(td[0]) else td[0](items)


def _tree(obj):
    leaves = []
    td = _flatten(obj, leaves)
    return leaves, td


def _as_tracer(x, trace, what):
    if not isinstance(x, (Tracer, np.ndarray, np.generic, numbers.Number)):
        raise TypeError(f"{what} must hold arrays or numbers; got {type(x).__name__}")
    return Tracer(as_node(x, trace), trace)


def _trip(value, name):
    if isinstance(value, Tracer):
        raise TracingError(f"fori_loop: {name} must be a Python int, known when the loop is "
                           "traced (the trip count is part of the plan); got a traced value")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral,)):
        raise TypeError(f"fori_loop: {name} must be an int; got {value!r}")
    return int(value)


def fori_loop(lower: int, upper: int, body_fun: Callable[[int, Any], Any],
              init_val: Any, *, unroll: int | bool | None = None) -> Any:
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)``, as JAX's
    ``lax.fori_loop``.

    Parameters
    ----------
    lower, upper : int
        The iteration range (Python ints: the trip count is part of the plan).
    body_fun : callable
        ``body_fun(i, val) -> val``; ``val`` keeps its structure (a pytree of
        tuples, lists and dicts of arrays), shapes and dtype.
    init_val : pytree of arrays or numbers
        The initial carry.
    unroll : int or bool, optional
        JAX's hint of how many iterations one compiled step runs; accepted so
        that JAX code runs as written, and checked (a positive int or a bool).
        The results do not depend on it: the plan compiles the body once and
        chooses how to run it.

    Returns
    -------
    The final carry.

    Notes
    -----
    Inside a function hybridad traces, the body is traced once and compiled
    once, and the plan runs it as a loop: its build time does not grow with
    ``upper - lower``.  Its gradient, Hessian-vector products and Hessians go
    through the loop (the carries at the start of every iteration are
    stored for the backward sweep: ``(upper - lower)`` x the carry's size).
    ``i`` is then a traced int64 scalar.  A body that needs ``i``'s value --
    an index (``A[i]``, ``x[i]``), a Python branch or ``int(i)`` -- is traced as
    the Python loop instead, ``i`` an int at each step (JAX refuses such a
    body, or indexes dynamically); the plan rolls those steps into a loop
    where they repeat (``A[i]`` of an array the loop does not change is then a
    row per step), and its build then grows with ``upper - lower``.  So is a
    loop whose carry is not of one floating-point dtype (an int counter
    beside a float state, float32 beside float64).  Outside a trace it is a
    Python loop.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> def f(x):
    ...     return np.sum(ha.fori_loop(0, 100, lambda i, v: v + 0.01 * np.tanh(v), x) ** 2)
    >>> g = ha.gradient(f, np.array([0.5, -1.0])).gradient
    """
    lower, upper = _trip(lower, "lower"), _trip(upper, "upper")
    _unroll(unroll, "fori_loop")
    if _tracing() is None and not any(isinstance(x, Tracer) for x in _tree(init_val)[0]):
        return _python_loop(lower, upper, body_fun, init_val)
    if upper <= lower:
        return init_val
    try:
        carry, _ = _loop(lambda i, c, x: (body_fun(i, c), None), init_val, None,
                         upper - lower, lower, True, False)
    except _MixedDtypes:  # (one loop node packs one float dtype: the Python loop)
        return _python_loop(lower, upper, body_fun, init_val)
    except TracingError as exc:  # the body needs i's value (A[i], x[i], `if i % 2`):
        try:  # the Python loop, i an int each step, traced where it is (rolled by
            return _python_loop(lower, upper, body_fun, init_val)  # the plan where its
        except TracingError as again:  # steps repeat)
            raise again from exc
    return carry


def _unroll(value, name):
    """JAX's ``unroll`` hint checked as JAX checks it (a bool, or an int of at
    least 1; None for fori_loop's default); it changes nothing here."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return
    if isinstance(value, Tracer) or not isinstance(value, numbers.Integral) or value < 1:
        raise TypeError(f"{name}: unroll must be a positive int or a bool; got {value!r}")


def _python_loop(lower, upper, body_fun, val):
    for i in range(lower, upper):
        val = body_fun(i, val)
    return val


def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None,
         length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1) -> tuple[Any, Any]:
    """Scan ``f`` over the leading axis of ``xs`` carrying state, as JAX's
    ``lax.scan``.

    Parameters
    ----------
    f : callable
        ``f(carry, x) -> (carry, y)``: ``x`` is one slice of ``xs`` (None
        when ``xs`` is None), ``y`` a pytree of arrays (or None).
    init : pytree of arrays or numbers
        The initial carry.
    xs : pytree of arrays, optional
        Scanned along their leading axis.
    length : int, optional
        The number of iterations; needed when ``xs`` is None.
    reverse : bool, default False
        Run from the last slice to the first (``ys`` stay in the order of
        ``xs``).
    unroll : int or bool, default 1
        JAX's hint, accepted and checked as :func:`fori_loop`'s; the results
        do not depend on it.

    Returns
    -------
    (carry, ys)
        The final carry and the ``y`` of every iteration stacked along a new
        leading axis.

    Notes
    -----
    Traced, the body is traced and compiled once (see :func:`fori_loop`)
    where the carries and the ``y`` outputs share one floating-point dtype;
    others (an int counter in the carry, float32 beside float64) run as the
    Python loop, traced step by step.
    """
    _unroll(unroll, "scan")
    x_leaves = _tree(xs)[0]
    lengths: set[Any] = {int(np.shape(x)[0]) if np.ndim(x) else None for x in x_leaves}
    if None in lengths:
        raise ValueError("scan: every leaf of xs needs a leading axis to scan over")
    if length is not None:
        lengths.add(_trip(length, "length"))
    if len(lengths) != 1:
        raise ValueError(f"scan: xs' leading axes and length disagree: {sorted(lengths)}")
    n = lengths.pop()
    tracers = any(isinstance(x, Tracer) for x in _tree(init)[0] + x_leaves)
    if _tracing() is None and not tracers:
        return _scan_eager(f, init, xs, n, reverse)
    try:
        return _loop(lambda i, c, x: f(c, x), init, xs, n, 0, False, bool(reverse))
    except _MixedDtypes as mixed:  # (one loop node packs one float dtype: the Python loop)
        if n == 0:
            return init, _unflatten(mixed.y_def, iter([np.zeros((0, *s), d)
                                                       for s, d in mixed.y_specs]))
        return _scan_eager(f, init, xs, n, reverse)


def _scan_eager(f, init, xs, n, reverse):
    x_leaves, x_def = _tree(xs)
    carry, ys = init, [None] * n
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        x = _unflatten(x_def, iter([leaf[t] for leaf in x_leaves])) if x_leaves or \
            x_def is not None else None
        carry, ys[t] = f(carry, x)
    if n == 0:  # no iteration: f run once on zeros for the ys' structure, as JAX traces it
        x = _unflatten(x_def, iter([np.zeros(np.shape(leaf)[1:], np.asarray(leaf).dtype)
                                    for leaf in x_leaves])) if x_leaves or \
            x_def is not None else None
        with np.errstate(all="ignore"):
            leaves0, y_def = _tree(f(init, x)[1])
        return carry, _unflatten(y_def, iter([np.zeros((0, *np.shape(y)), np.asarray(y).dtype)
                                              for y in leaves0]))
    leaves0, y_def = _tree(ys[0])
    # (np.stack of the leaves themselves: traced ones stack as traced values)
    stacked = [np.stack([_tree(y)[0][j] for y in ys]) for j in range(len(leaves0))]
    return carry, _unflatten(y_def, iter(stacked))


def loop_reads_as_is(a, pos, n_carry, n_xs):
    """Whether a loop reads numpy array ``a``, its operand ``pos`` (after
    ``n_carry`` carries, then ``n_xs`` xs), as it is: C-contiguous, or an xs
    whose rows each are, whatever the step from one row to the next (a
    broadcast over the steps, step 0)."""
    if a.flags.c_contiguous:
        return True
    if not n_carry <= pos < n_carry + n_xs:
        return False
    step = a.itemsize
    for n, st in zip(a.shape[:0:-1], a.strides[:0:-1], strict=True):
        if n > 1 and st != step:
            return False
        step *= n
    return True


def c_operands(args, n_carry, n_xs):
    """``args`` (a loop's carries, xs and constants, as tracers) with each
    captured constant a loop cannot read in place (:func:`loop_reads_as_is`: a
    Fortran-order or strided array) copied by the plan at each call, as a
    view is: the compiled code runs a loop on C operands in place, where its
    runner would otherwise be called from Python to stage them."""
    return [bind("copy", t) if t.node.is_const and
            not loop_reads_as_is(t.node.attrs["value"], k, n_carry, n_xs) else t
            for k, t in enumerate(args)]


def _loop(step, init, xs, length, start, index, reverse):
    outer = _tracing()
    if outer is None:  # tracers of a finished trace
        raise TracingError("fori_loop / scan got traced values outside the function "
                           "hybridad traces")
    c_in, c_def = _tree(init)
    carries = [_as_tracer(c, outer, "the loop's initial carry") for c in c_in]
    x_in, x_def = _tree(xs)
    xs_t = [_as_tracer(x, outer, "xs") for x in x_in]
    nc, nx, idx = len(carries), len(xs_t), int(index)
    body = BodyTrace(outer, idx + nc + nx)
    with body:
        i_t = [body.input(0, (), np.dtype(np.int64))] if idx else []
        c_t = [body.input(idx + j, c.shape, c.dtype) for j, c in enumerate(carries)]
        x_t = [body.input(idx + nc + k, x.shape[1:], x.dtype) for k, x in enumerate(xs_t)]
        res = step(i_t[0] if idx else None, _unflatten(c_def, iter(c_t)),
                   _unflatten(x_def, iter(x_t)) if nx or x_def is not None else None)
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError("scan: f must return a pair (carry, y)")
        new_leaves, new_def = _tree(res[0])
        if new_def != c_def:
            raise TypeError("the loop body must return a carry of the structure of its "
                            f"initial value: {c_def} then {new_def}")
        new_c = [_as_tracer(c, body, "the loop's carry") for c in new_leaves]
        for j, (a, b) in enumerate(zip(c_t, new_c, strict=True)):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise TypeError(f"the loop body changed carry leaf {j} from {a.dtype}"
                                f"{list(a.shape)} to {b.dtype}{list(b.shape)}; a carry keeps "
                                "its shape and dtype (cast it, or broadcast the initial value)")
        y_leaves, y_def = _tree(res[1])
        ys = [_as_tracer(y, body, "the body's per-iteration output") for y in y_leaves]
    dtypes = {c.dtype for c in carries} | {y.dtype for y in ys}
    if len(dtypes) > 1 or any(d.kind != "f" for d in dtypes):
        # (after the body's checks, which hold for the Python loop too; the body's
        # trace set aside: a value it made and the code kept is refused by name)
        body.abandoned = True
        raise _MixedDtypes([(y.shape, y.dtype) for y in ys], y_def)
    ny = len(ys)
    outputs = [t.node for t in new_c + ys + c_t]  # (then the carries, stored for the reverse)
    inputs = [t.node for t in i_t + c_t + x_t] + [body._lifted[t.node.id] for t in body.lifted]
    lbody = LoopBody(Graph(body.nodes, inputs, outputs), idx, nc, nx)
    order = tuple(range(len(outputs)))
    packed = bind("loop", *c_operands([*carries, *xs_t, *body.lifted], nc, nx), body=lbody,
                  length=int(length), start=int(start), reverse=bool(reverse), order=order,
                  saved=tuple(range(nc + ny, nc + ny + nc)))
    parts = [part(packed, off, shape) for _, off, shape in layout(lbody, length, order)]
    return _unflatten(c_def, iter(parts[:nc])), _unflatten(y_def, iter(parts[nc:nc + ny]))
