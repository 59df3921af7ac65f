"""Python decisions on traced values, by guarded specialization.

numpy code decides on values: ``if abs(x[j] - zj) < 0.05:``, ``float(x[0] >=
0)``, builtin ``max(a, b)`` of two traced scalars.  A trace knows shapes and
dtypes only -- but a plan is always traced at the arguments of a real call, so
a decision can take *this call's* value, as torch.compile's guards do:

1. :meth:`Tracer.__bool__` (and ``float``, ``int``, ``operator.index``) asks
   :func:`decide`: while the trace has the call's arguments
   (:attr:`Trace.concrete`), the traced value is evaluated on them
   (:func:`evaluate`, the ops' reference ``run`` and ``view``), the outcome is
   recorded as a :class:`Decision` and returned to Python, which takes that
   branch.  The graph is that of the branch taken, and so are its derivatives
   (as autograd's).
2. The plan keeps the decisions and, before every call, evaluates them on the
   call's arguments (:class:`DecisionCheck`: the same reference ops, into
   buffers made once -- no allocation) and compares them with the recorded
   outcomes.  A call that decides otherwise runs another specialization, traced
   for it (:mod:`hybridad.plans.guarded`); a plan keeps at most
   :data:`MAX_SPECIALIZATIONS`, the least recently used dropped first (a
   :class:`~hybridad.errors.RetraceWarning` names the decision that keeps
   changing).  Never the wrong branch.

An ``int()`` of a traced value (or a ``float()`` of a traced bool or integer)
bakes the number into the graph, so its guard is that exact value: such a
plan is reused only where the value repeats.  A ``float()`` of a traced
*float* is refused: the number would carry the value and drop its derivative
(``math.exp(x[0])`` would differentiate to 0) -- the one wrong answer this
could give.  Without the call's arguments (a trace
from shapes alone) a decision is refused as before, with the same message.
"""

from __future__ import annotations

import math

import numpy as np

from .._forksafe import Lock
from ..errors import TracingError
from ..ir.registry import REGISTRY

__all__ = ["Decision", "DecisionCheck", "MAX_SPECIALIZATIONS", "can_decide", "concrete_index",
           "decide", "decide_constant", "decide_raises", "decided_nodes", "differentiated",
           "evaluate", "straight_line"]

#: the tracer class, put here by :mod:`.tracer` (which imports this module: imports
#: run one way)
TRACER = [None]

#: specializations one plan keeps (distinct outcomes of its decisions); a call
#: needing another then drops the least recently used one
MAX_SPECIALIZATIONS = 8


class Decision:
    """One value a trace took from a call's arguments.

    Attributes
    ----------
    node : Node
        The traced value decided on (a 0-d or one-element array).
    kind : str
        ``"bool"``, ``"float"``, ``"int"`` or ``"index"``: the conversion asked;
        ``"array"``: integer or boolean values used as indices or a mask;
        ``"raises"``: whether an op that can fail (a factorization, a solve)
        raised :class:`numpy.linalg.LinAlgError` inside a ``try`` of ``f``
        (:func:`decide_raises`).
    outcome : bool, float, int or ndarray
        What the conversion returned while tracing (``"raises"``: whether the
        op raised).
    where : str
        The user's line (``file.py:12: if x[0] > 0:``), for messages.
    """

    __slots__ = ("node", "kind", "outcome", "where")

    def __init__(self, node, kind, outcome, where):
        self.node, self.kind, self.outcome, self.where = node, kind, outcome, where

    def __repr__(self):
        out = self.outcome
        if isinstance(out, np.ndarray):
            what = (f"a mask of shape {out.shape} with {int(out.sum())} True"
                    if out.dtype == np.bool_ else f"indices of shape {out.shape}")
            return f"the values of %{self.node.id} used as {what} at {self.where}"
        if self.kind == "raises":
            return (f"%{self.node.id} {self.node.op} {'raises' if out else 'succeeds'} "
                    f"at {self.where}")
        return f"{self.kind}(%{self.node.id}) == {out!r} at {self.where}"


def _convert(kind, value):
    if kind == "array":
        return np.array(value, copy=True)
    v = value.reshape(()) if value.size == 1 else value
    if kind == "bool":
        return bool(v)
    if kind == "float":
        return float(v)
    return int(v) if kind == "int" else v.__index__()


def _changed(kind, value, outcome):
    """Whether ``kind(value)`` differs from ``outcome`` (a conversion that
    fails -- ``int()`` of NaN or infinity -- differs: the call is traced
    anew, and raises where ``f`` does)."""
    try:
        return not _same(_convert(kind, value), outcome)
    except (ValueError, OverflowError):
        return True


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, float):  # (math's sign, not np.signbit: a check allocates nothing)
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or \
            (a != a and b != b)
    return a == b


def can_decide(trace):
    """Whether ``trace`` can take decisions: it holds the traced call's
    arguments and is tracing ``f`` (its forward phase)."""
    return getattr(trace, "concrete", None) is not None and trace.phase == "forward"


def decide(tracer, kind, caller=None):
    """The value of ``kind(tracer)`` at the traced call's arguments, recorded
    as a decision of the trace; None when the trace has no arguments (then the
    caller refuses the conversion as before).  ``caller``: the file of the
    code that asked, for ``"float"``: a data argument's float is taken for
    the user's code and hybridad's, not for numpy's or scipy's (their
    functions on data run as host calls, call by call, instead of deciding
    on values that may change at every call)."""
    trace = tracer._trace
    if not can_decide(trace):
        return None
    concrete = trace.concrete
    if kind == "array" and tracer.dtype.kind not in "biu":
        return None  # (an index of floats: numpy refuses it, and so does the caller)
    if kind == "float" and tracer.dtype.kind not in "biu" and (
            differentiated(trace, tracer.node) or
            _library(caller) and evaluate(tracer.node, concrete, trace.decision_cache)[1]):
        # a Python float of a traced float that a differentiated argument reaches
        # would carry its value and drop its derivative (math.exp(x[0]) would
        # differentiate to 0): refused as before; int() of it is piecewise
        # constant, and a comparison's bool is what decides.  A constant's is its
        # value, and so is a data argument's (``float(np.std(y))``), guarded.
        return None
    if kind == "bool" and tracer.size != 1:
        raise ValueError("The truth value of an array with more than one element is "
                         "ambiguous. Use a.any() or a.all()")
    if kind not in ("bool", "array") and tracer.size != 1:
        raise TypeError(f"only length-1 arrays can be converted to Python scalars ({kind}())")
    if kind == "index" and tracer.dtype.kind not in "biu":
        raise TypeError("only integer scalar arrays can be converted to a scalar index")
    from ..errors import user_location

    value, depends = evaluate(tracer.node, concrete, trace.decision_cache)
    outcome = _convert(kind, value)
    if depends:  # (a value no argument reaches is the same on every call: no guard)
        trace.decisions.append(Decision(tracer.node, kind, outcome, user_location()))
    return outcome


def _library(caller):
    """Whether file ``caller`` is numpy's or scipy's (None: not known, taken as so)."""
    if caller is None:
        return True
    from ..errors import PACKAGE_DIR, is_user_file

    return not (is_user_file(caller) or caller.startswith(PACKAGE_DIR))


def decide_constant(tracer):
    """The value of ``tracer`` at the traced call, a numpy array, where no
    differentiated argument reaches it -- a value of the data arguments
    (``f(w, t)``: an ODE's output times, ``np.gradient``'s coordinates,
    quantile levels), or of constants -- recorded as a decision where an
    argument reaches it (a call with other values there runs, or traces, a
    specialization of its own); None where a differentiated argument reaches
    it (its derivative would be dropped) or the trace has no values (the
    caller refuses the traced value as before)."""
    trace = tracer._trace
    if not can_decide(trace) or differentiated(trace, tracer.node):
        return None
    from ..errors import user_location

    value, depends = evaluate(tracer.node, trace.concrete, trace.decision_cache)
    outcome = _convert("array", value)
    if depends:
        trace.decisions.append(Decision(tracer.node, "array", outcome, user_location()))
    return outcome.copy()


def differentiated(trace, node):
    """Whether an input the plan of ``trace`` differentiates reaches ``node``
    (:attr:`~hybridad.core.trace.Trace.differentiated`; every input where it
    is None).  Walked once per node, the answers kept with the trace."""
    wrt = trace.differentiated
    # (node id -> (node, answer): ids go on from a rollback's first, so an
    # answer counts for the node it was found for only)
    memo = trace.__dict__.setdefault("_differentiated", {})

    def known(n):
        hit = memo.get(n.id)
        return hit is not None and hit[0] is n

    stack = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if known(n):
            continue
        if n.op == "input":
            memo[n.id] = (n, wrt is None or n.attrs["index"] in wrt)
        elif not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if not known(a))
        else:
            memo[n.id] = (n, any(memo[a.id][1] for a in n.args))
    return memo[node.id][1]


def decide_raises(node, trace):
    """Where a ``try`` statement of ``f`` surrounds the op of ``node`` (one
    that can fail at run time, :attr:`hybridad.ir.registry.Op.raises`), the
    op evaluated on the traced call's values: a failure
    (:class:`numpy.linalg.LinAlgError`) is raised into ``f`` -- whose
    ``except`` then runs, as on numpy arrays -- and whether it failed is a
    decision of the trace (a call where it fails otherwise runs another
    specialization).  Elsewhere, or without the call's values, nothing is
    evaluated: a failure propagates from the plan's call, as numpy's would
    (see :mod:`hybridad.core.catching`)."""
    if not can_decide(trace):
        return
    from .catching import caught_here

    if not caught_here():
        return
    from ..errors import user_location

    cache = trace.decision_cache
    try:
        depends = evaluate(node, trace.concrete, cache)[1]
        raised = None
    except np.linalg.LinAlgError as exc:  # (its operands are evaluated: in the cache)
        depends = any(cache[a.id][1] for a in node.args)
        raised = exc
    if depends:  # (a failure no argument reaches happens at every call: no guard)
        trace.decisions.append(Decision(node, "raises", raised is not None, user_location()))
    if raised is not None:
        raise np.linalg.LinAlgError(*raised.args)


def concrete_index(index):
    """``index`` (of ``x[index]``) with each traced integer or boolean part
    replaced by its value at the traced call -- a decision each: a 0-d
    integer becomes a Python int, an array (indices, a mask computed from
    values) a numpy array; unchanged where the trace has no values."""
    parts = index if isinstance(index, tuple) else (index,)
    if not any(map(_traced, parts)):
        return index
    out = [_value(k) for k in parts]
    return tuple(out) if isinstance(index, tuple) else out[0]


# (module functions, not closures of concrete_index: a recursive closure is a
# reference cycle, garbage only the collector frees -- a loop's 10^4 element
# writes left 10^5 of them for one collection of a quarter of a second)
def _traced(k):
    Tracer = TRACER[0]
    return isinstance(k, Tracer) or (
        isinstance(k, slice) and any(isinstance(v, Tracer) for v in (k.start, k.stop, k.step))
    ) or (type(k) is list and any(map(_traced, k)))


def _value(k):
    if isinstance(k, TRACER[0]) and k.dtype.kind in "biu":
        v = decide(k, "index" if k.ndim == 0 and k.dtype.kind != "b" else "array")
        return k if v is None else v
    if isinstance(k, slice):
        return slice(_value(k.start), _value(k.stop), _value(k.step))
    if type(k) is list:
        return [_value(v) for v in k]
    return k


def decided_nodes(decisions):
    """The nodes the values of ``decisions`` are computed from (each decided
    node and its ancestors), in id order."""
    return _ancestors([d.node for d in decisions])


def _ancestors(targets):
    """The nodes ``targets`` are computed from, in a topological order (each
    after its operands; not by id: a lowered composite's nodes have ids after
    the node they feed, :meth:`hybridad.core.trace.Trace.lower_composites`)."""
    order, done, stack = [], set(), [(t, False) for t in reversed(targets)]
    while stack:
        n, ready = stack.pop()
        if n.id in done:
            continue
        if ready:  # (its operands are placed)
            done.add(n.id)
            order.append(n)
            continue
        stack.append((n, True))
        stack.extend((a, False) for a in reversed(n.args) if a.id not in done)
    return order


def _reference_op(n):
    """The registry's op of node ``n``, which has a reference ``run`` or ``view``."""
    op = REGISTRY.get(n.op)
    if op is None or (op.run is None and op.view is None):
        raise TracingError(f"a Python decision on a traced value needs %{n.id} {n.op}, "
                           "which has no reference implementation to evaluate it with")
    return op


def _run_node(n, vals):
    """The value of node ``n`` from its operands' values ``vals``."""
    if n.op == "const":
        return np.asarray(n.attrs["value"])
    op = _reference_op(n)
    if op.kind == "view" and op.view is not None:
        return op.view(*vals, **n.attrs)
    out = np.empty(n.shape, n.dtype)
    attrs = n.attrs
    if op.workspace is not None:  # (the working memory a backend's arena gives it:
        # LAPACK's; sized from the operands' shapes and dtypes, as the memory plan's)
        attrs = dict(attrs, work=np.empty(op.work_elements(*vals, **attrs), n.dtype))
    if op.kind == "inplace":
        np.copyto(out, vals[0])
        op.run(out, *vals[1:], **attrs)
        return out
    op.run(out, *vals, **attrs)
    return out


class _Frozen:
    """A node as it was traced (later passes rewrite nodes in place: fusion
    makes regions of them), its operands by id."""

    __slots__ = ("id", "op", "arg_ids", "attrs", "shape", "dtype")

    def __init__(self, n):
        self.id, self.op, self.attrs = n.id, n.op, dict(n.attrs)
        self.arg_ids = tuple(a.id for a in n.args)
        self.shape, self.dtype = n.shape, n.dtype


def evaluate(node, concrete, cache=None):
    """``node``'s value at the leaf arrays ``concrete`` (by input index), by
    the ops' reference implementations, and whether it depends on an input;
    ``cache`` (a dict by node id, kept across calls) holds ``(value,
    depends)`` of every node evaluated, and a walk stops at them: decisions
    along a long trace cost in proportion to the nodes new since the last."""
    cache = {} if cache is None else cache
    stack = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if n.id in cache:
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if a.id not in cache)
            continue
        if n.op == "input":
            cache[n.id] = (np.asarray(concrete[n.attrs["index"]]), True)
            continue
        with np.errstate(all="ignore"):
            value = _run_node(n, [cache[a.id][0] for a in n.args])
        cache[n.id] = (value, any(cache[a.id][1] for a in n.args))
    return cache[node.id]


def _node_lines(n, by_id, ns, lines):
    """Append to ``lines`` the generated statements that compute node ``n``
    (``v<id>``) from its operands, putting what they call in ``ns``."""
    v = f"v{n.id}"
    args = ", ".join(f"v{a}" for a in n.arg_ids)
    if n.op == "input":
        lines.append(f"    {v} = leaves[{n.attrs['index']}]")
        return
    if n.op == "const":
        ns[f"_c{n.id}"] = np.asarray(n.attrs["value"])
        lines.append(f"    {v} = _c{n.id}")
        return
    op = _reference_op(n)
    ns[f"_a{n.id}"] = dict(n.attrs)
    if op.workspace is not None:  # (its working memory, as _run_node's)
        size = op.work_elements(*(by_id[a] for a in n.arg_ids), **n.attrs)
        ns[f"_a{n.id}"]["work"] = np.empty(size, n.dtype)
    if op.kind == "view" and op.view is not None:
        ns[f"_f{n.id}"] = op.view
        lines.append(f"    {v} = _f{n.id}({args}, **_a{n.id})")
        return
    ns[f"_f{n.id}"], ns[f"_b{n.id}"] = op.run, np.empty(n.shape, n.dtype)
    ufunc = getattr(op.run, "ufunc", None)
    if ufunc is not None and not n.attrs and op.kind != "inplace":
        # an elementwise op's run is its ufunc into the buffer: called directly
        ns[f"_f{n.id}"] = ufunc.resolve() if hasattr(ufunc, "resolve") else ufunc
        lines += [f"    _f{n.id}({args}, out=_b{n.id})", f"    {v} = _b{n.id}"]
        return
    if op.kind == "inplace":
        first, rest = f"v{n.arg_ids[0]}", "".join(f", v{a}" for a in n.arg_ids[1:])
        lines += [f"    _copyto(_b{n.id}, {first})",
                  f"    _f{n.id}(_b{n.id}{rest}, **_a{n.id})"]
    else:
        lines.append(f"    _f{n.id}(_b{n.id}, {args + ', ' if args else ''}**_a{n.id})")
    lines.append(f"    {v} = _b{n.id}")


def straight_line(graph):
    """``run(leaves) -> [output arrays]``: ``graph``'s outputs computed from
    its input arrays (``leaves``, by input index) by the ops' reference
    implementations, as one generated straight-line function into buffers
    made once -- the arrays it returns are those buffers (or inputs, or views
    of them): copy what is kept.  One call at a time (the caller locks)."""
    nodes = [_Frozen(n) for n in _ancestors(list(graph.outputs))]
    by_id = {n.id: n for n in nodes}
    ns = {"_copyto": np.copyto}
    lines = ["def run(leaves):"]
    for n in nodes:
        _node_lines(n, by_id, ns, lines)
    lines.append("    return [" + "".join(f"v{o.id}, " for o in graph.outputs) + "]")
    exec(compile("\n".join(lines) + "\n", "<hybridad reference>", "exec"), ns)  # noqa: S102
    return ns["run"]


class DecisionCheck:
    """The check of a plan's decisions on a call's arguments: the traced
    values recomputed by the ops' reference implementations into buffers made
    once, each compared with its recorded outcome.  Made right after the
    trace, from a copy of the nodes the decisions read, as one generated
    straight-line function (a call costs the ops themselves, a few
    microseconds, not an interpreter's loop over the nodes).

    A plan may add a compiled form (:mod:`hybridad.plans.decided`):
    :attr:`program` and :attr:`compiled`, ``compiled(leaves) -> bool``.  The
    decisions then hold where the compiled check passes or, failing that,
    the reference check does (the two may round a value a bit apart)."""

    #: the compiled check's program and ``holds(leaves)`` (set by the plan), or None
    program = compiled = None

    def __init__(self, decisions, lazy=False):
        self.decisions = list(decisions)
        #: those checked before a call: with ``lazy``, all but the ops that did
        #: not raise inside a try of f -- a call where one fails raises from the
        #: plan's program instead, and the plan then asks :meth:`first_failing`
        #: with ``full`` (a factorization is not computed twice per call)
        self.eager = [d for d in self.decisions
                      if not (lazy and d.kind == "raises" and not d.outcome)]
        self.lazy = len(self.eager) < len(self.decisions)
        # the generated check writes into buffers of its own: one call at a time
        self._lock = Lock()
        #: the nodes the eager decisions read, as traced (in id order)
        self.frozen = [_Frozen(n) for n in _ancestors([d.node for d in self.eager])]
        self._check, self.source = self._generate(self.eager, self.frozen)
        self._full = self._check if not self.lazy else self._generate(
            self.decisions, [_Frozen(n) for n in _ancestors([d.node for d in self.decisions])])[0]

    def _generate(self, decisions, nodes):
        """``(first_failing(leaves) -> index into self.decisions or -1, source)``
        checking ``decisions`` from the frozen ``nodes`` they read."""
        ns = {"_changed": _changed, "_copyto": np.copyto, "_LinAlgError": np.linalg.LinAlgError}
        by_id = {n.id: n for n in nodes}
        index = {id(d): k for k, d in enumerate(self.decisions)}
        # the ops that raised, or did not, inside a try of f: run inside one here
        raising = {d.node.id: index[id(d)] for d in decisions if d.kind == "raises"}
        lines = ["def first_failing(leaves):"]
        for n in nodes:
            if n.id in raising:
                k, start = raising[n.id], len(lines)
                _node_lines(n, by_id, ns, lines)
                lines[start:] = ["    try:", *("    " + line for line in lines[start:]),
                                 f"        _r{k} = False", "    except _LinAlgError:",
                                 f"        _r{k} = True", f"    if _r{k} is not _o{k}: return {k}"]
                continue
            _node_lines(n, by_id, ns, lines)
        for d in decisions:
            k = index[id(d)]
            v = f"v{d.node.id}"
            ns[f"_o{k}"] = d.outcome
            if d.kind == "raises":  # (checked where its op runs, above)
                continue
            if d.kind == "array":
                ns[f"_s{k}"], ns[f"_d{k}"], ns[f"_y{k}"] = d.outcome.shape, d.outcome.dtype, \
                    d.outcome.tobytes()
                cond = (f"{v}.shape != _s{k} or {v}.dtype != _d{k} or "
                        f"{v}.tobytes() != _y{k}")
            elif d.kind == "bool":
                cond = f"bool({v}) is not _o{k}"
            else:
                cond = f"_changed({d.kind!r}, {v}, _o{k})"
            lines.append(f"    if {cond}: return {k}")
        lines.append("    return -1")
        source = "\n".join(lines) + "\n"
        exec(compile(source, "<hybridad decisions>", "exec"), ns)  # noqa: S102
        return ns["first_failing"], source

    def first_failing(self, leaves, compiled=True, full=False):
        """None when every eager decision holds for the leaf arrays ``leaves``,
        else the first one that does not (numpy's floating-point warnings off
        while the decisions' ops run).  ``compiled=False``: the caller saw the
        compiled check fail on these leaves (the reference check decides).
        ``full``: every decision, the lazy ones too (after a call whose
        program raised)."""
        check = self.compiled
        if not full and (not self.eager or compiled and check is not None and check(leaves)):
            return None
        run = self._full if full else self._check
        with self._lock:
            if _IGNORE is None:
                with np.errstate(all="ignore"):  # (a fresh errstate: not reentrant)
                    k = run(leaves)
            else:  # numpy's errstate without making its state anew on every call
                token = _IGNORE[0].set(_IGNORE[1])
                try:
                    k = run(leaves)
                finally:
                    _IGNORE[0].reset(token)
        return None if k < 0 else self.decisions[k]


def _ignore_state():
    """``(numpy's errstate context variable, its all-ignore value)`` made once
    (what ``np.errstate(all="ignore")`` sets on entry: 1.5 us a call made
    anew), or None where numpy keeps its state otherwise."""
    try:
        from numpy._core import _ufunc_config as config

        state = (config._extobj_contextvar, config._make_extobj(all="ignore"))
        token = state[0].set(state[1])
        try:
            ignored = np.geterr() == {"divide": "ignore", "over": "ignore",
                                      "under": "ignore", "invalid": "ignore"}
        finally:
            state[0].reset(token)
        return state if ignored else None
    except Exception:  # noqa: BLE001 - another numpy: np.errstate each call
        return None


_IGNORE = _ignore_state()
