"""The primitive registry: every op declared once, with all its rules.

An :class:`Op` carries, side by side:

* ``abstract`` -- shape and dtype of the result from the operands' (shape rule);
* ``run`` / ``view`` -- the numpy reference implementation, writing into a
  preallocated ``out`` (or returning a view for view ops);
* ``vjp`` -- the reverse rule, written with numpy calls on tracers so that the
  backward pass is emitted as IR into the same graph;
* ``jvp`` -- the forward (tangent) rule, likewise emitted as IR: forward mode
  over any graph, the backward pass included (forward-over-reverse Hessians);
* ``batch`` -- how the op applies when some operands carry a leading batch
  axis (a chunk of tangents or cotangents), emitted as IR (see
  :mod:`hybridad.transforms.batching`);
* for elementwise ops, ``ufunc`` and symbolic ``partials`` (one expression per
  operand in terms of the operands and the result ``ans``), from which the
  VJP is derived -- and from which later backends render dual-number kernels;
* ``domain`` -- the interval the test-suite samples inputs from;
* ``scalar`` -- for a ufunc numba has no scalar implementation of, its value
  as a Python expression (a format string over the operands' code);
* ``dual`` -- for an elementwise op evaluated by a compiled scalar function
  (a user's :func:`hybridad.elementwise` function): the object whose
  ``ident`` names, in generated source, the function returning the value and
  every partial of one element (``header_line()`` binds it), so a fused
  kernel gets both from one dual-number evaluation;
* ``workspace`` -- for an op whose kernel needs working memory (LAPACK), the
  element count (in the result's dtype) from the operands; the memory plan
  gives it a slot of the arena and ``run`` receives it as ``work=``;
* ``expensive`` -- for elementwise ops, whether evaluating the op costs more
  than storing its partial (transcendentals): a fused region holding one
  stores its partials for the backward sweep instead of recomputing them;
* ``piecewise`` -- for elementwise ops, whether the derivative is smooth
  only piecewise (kinks or jumps: ``abs``, ``maximum``, ``remainder``), as the
  coverage table reports it;
* ``held`` -- for an op whose backends keep memory of their own beside the
  arena (a loop: its runner's carries and its body's workspace), the bytes,
  from the node; the memory plan adds them to what the plan holds;
* ``raises`` -- whether ``run`` can fail on operands of valid shape and dtype
  (LAPACK: a singular or not positive definite matrix, no convergence).  A
  call that fails writes nothing: the plans order every write into a caller's
  buffer after the last such op (:func:`hybridad.transforms.memory.plan_memory`,
  :func:`hybridad.transforms.updates.schedule_updates`, the staged programs of
  :mod:`hybridad.plans.staged`);
* ``shifts`` -- for data-movement ops whose result is made of operands'
  elements at shifted positions (``concatenate``; ``getitem`` by slices of
  step 1, integers, new axes; a ``reshape`` inserting or dropping axes of
  length 1): ``shifts(*arg_nodes, **attrs) -> [(operand position, lo, hi,
  index)]``, or None where the op's index map is not of that kind.  The
  result's elements in the box ``lo <= i < hi`` (per-axis tuples) are the
  operand's at, along each operand axis, ``i[d] + offset`` where ``index``
  has ``(d, offset)`` there, or a fixed index where it has an int.  A
  compiled backend may then read the result in place through its operands
  instead of copying it (:func:`hybridad.backends.numba.layouts.read_in_place`:
  ``np.roll``);
* ``lower`` -- for a ``composite`` op, the primitives it stands for: a trace
  holds it as one node while it is recorded and rolled (a loop's matrix-vector
  product is one node a step, not three), and
  :meth:`hybridad.core.trace.Trace.lower_composites` replaces it before any
  later pass: ``lower(node, make) -> (op, args, attrs)``, what the node itself
  becomes (the same value, shape and dtype), where ``make(op, args, attrs,
  shape, dtype)`` makes the nodes it reads (placed before it); and
  ``primitives``, how many nodes that is, the node included (what a trace's
  passes count it as: :mod:`hybridad.transforms.rolling`'s thresholds).

Adding an op touches one file in this package; tests pick it up from
:data:`REGISTRY`.
"""

from __future__ import annotations

import bisect

import importlib
import sys

__all__ = ["REGISTRY", "InPlaceWrites", "LazyUfunc", "Op", "get", "may_raise", "register",
           "storage_root"]

REGISTRY: dict[str, Op] = {}

#: kinds of op; ``view`` results alias their first operand's storage,
#: ``inplace`` results *are* their first operand's storage, modified;
#: ``composite`` ops live in traces only (:attr:`Op.lower`), never in a plan.
KINDS = ("elementwise", "reduce", "view", "inplace", "compute", "region", "composite")


class LazyUfunc:
    """A library's ufunc named, not imported (``scipy.special.erf``), so that
    declaring its op does not import the library: :attr:`Op.ufunc` and calling
    this import it and give the ufunc itself."""

    def __init__(self, module, name):
        self.module = module
        self.__name__ = name
        self._ufunc = None

    def resolve(self):
        """The ufunc (importing its module on first use)."""
        if self._ufunc is None:
            self._ufunc = getattr(importlib.import_module(self.module), self.__name__)
        return self._ufunc

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __repr__(self):
        return f"LazyUfunc({self.module}.{self.__name__})"


class Op:
    """A primitive operation.

    Parameters
    ----------
    name : str
    kind : str
        One of :data:`KINDS`.
    abstract : callable
        ``abstract(*arg_nodes, **attrs) -> (shape, dtype)``.
    run : callable, optional
        ``run(out, *arrays, **attrs)``: write the result into ``out``
        (for ``inplace`` ops, ``out`` is ``arrays[0]``).  Must not allocate.
    view : callable, optional
        ``view(*arrays, **attrs) -> ndarray``: for ``view`` ops.
    vjp : callable, optional
        ``vjp(g, node, *arg_tracers, ans) -> tuple`` of contributions, one per
        operand (``None`` for a zero / non-differentiable operand).
    jvp : callable, optional
        ``jvp(tangents, node, *arg_tracers, ans, **attrs) -> tracer or None``:
        the result's tangent from the operands' (``None`` entries are zero).
        Elementwise ops derive it from ``partials``.
    batch : callable, optional
        ``batch(node, batched, *arg_tracers, **attrs) -> tracer``: the op
        applied to operands of which those flagged in ``batched`` have a
        leading batch axis; the result has it too.  Elementwise ops share
        one rule.
    ufunc, partials, domain, scalar :
        Elementwise ops only; see the module docstring.  ``ufunc`` may be a
        :class:`LazyUfunc` (scipy.special's: imported when first needed).
    workspace : callable, optional
        ``workspace(*arg_nodes, **attrs) -> int``; see the module docstring.
    expensive, piecewise : bool, default False
        Elementwise ops only; see the module docstring.
    raises : bool or callable, default False
        Whether ``run`` can raise at run time; see the module docstring.  A
        callable ``raises(node)`` decides per node (a loop raises where its
        body can).
    shifts : callable, optional
        Data-movement ops only; see the module docstring.
    packed : bool, default False
        The value packs several results into one flat buffer, read by 1-d
        slices (a loop's): ``vjp`` gets its cotangent as
        :class:`hybridad.ops.indexing.Pieces`, the slices that received one.
    lower : callable, optional
        For a ``composite`` op (and only for one): the primitives it stands
        for; see the module docstring.
    primitives : int, optional
        For a ``composite`` op: how many nodes ``lower`` makes of it.
    """

    __slots__ = (
        "abstract",
        "doc",
        "domain",
        "dual",
        "expensive",
        "kind",
        "name",
        "partials",
        "piecewise",
        "raises",
        "run",
        "scalar",
        "shifts",
        "_ufunc",
        "batch",
        "jvp",
        "view",
        "vjp",
        "workspace",
        "held",
        "packed",
        "lower",
        "primitives",
    )

    def __init__(self, name, kind, abstract, run=None, view=None, vjp=None, ufunc=None,
                 partials=None, domain=None, doc="", scalar=None, workspace=None, jvp=None,
                 batch=None, dual=None, raises=False, expensive=False, piecewise=False,
                 shifts=None, held=None, packed=False, lower=None, primitives=1):
        assert kind in KINDS, kind
        assert (kind == "composite") == (lower is not None) == (primitives > 1), (name, kind)
        self.lower = lower
        self.primitives = int(primitives)
        self.held = held
        self.packed = bool(packed)
        self.name = name
        self.kind = kind
        self.abstract = abstract
        self.run = run
        self.view = view
        self.vjp = vjp
        self.ufunc = ufunc
        self.partials = partials
        self.domain = domain
        self.doc = doc
        self.scalar = scalar
        self.workspace = workspace
        self.jvp = jvp
        self.batch = batch
        self.dual = dual
        self.raises = raises if callable(raises) else bool(raises)
        self.expensive = bool(expensive)
        self.piecewise = bool(piecewise)
        self.shifts = shifts

    @property
    def ufunc(self):
        """The ufunc of an elementwise op (a :class:`LazyUfunc` is imported here)."""
        ufunc = self._ufunc
        if type(ufunc) is LazyUfunc:
            ufunc = self._ufunc = ufunc.resolve()
        return ufunc

    @ufunc.setter
    def ufunc(self, ufunc):
        self._ufunc = ufunc

    def work_elements(self, *args, **attrs):
        """How many elements (of the result's dtype) of working memory the op's
        ``run`` takes as ``work=`` for operands ``args`` (nodes or arrays: their
        shapes and dtypes) -- at least one -- or None where it takes none."""
        return None if self.workspace is None else max(int(self.workspace(*args, **attrs)), 1)

    def loaded_ufunc(self):
        """:attr:`ufunc` where it exists in this process (its module imported),
        else None: a :class:`LazyUfunc` whose library nothing imported yet is
        not imported here (a ufunc of it is nothing code was given)."""
        ufunc = self._ufunc
        if type(ufunc) is LazyUfunc and ufunc.module not in sys.modules:
            return None
        return self.ufunc

    def __repr__(self):
        return f"Op({self.name!r}, kind={self.kind!r})"


def register(op):
    """Add ``op`` to :data:`REGISTRY` (names are unique)."""
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    REGISTRY[op.name] = op
    return op


def get(name):
    """Look up a primitive by name."""
    return REGISTRY[name]


def may_raise(node):
    """Whether running ``node`` can fail at run time (:attr:`Op.raises`)."""
    op = REGISTRY.get(node.op)
    if op is None:
        return False
    return bool(op.raises(node)) if callable(op.raises) else op.raises


def storage_root(node):
    """The node whose storage ``node`` uses: followed through views and
    in-place ops to the op that made the buffer (an input or constant ends
    the chain)."""
    while node.op in REGISTRY and REGISTRY[node.op].kind in ("view", "inplace"):
        node = node.args[0]
    return node


def storage_roots(nodes):
    """``{node id: its storage root's id}`` for every node of ``nodes`` (in a
    valid order), in one sweep: :func:`storage_root` of each node alone walks
    the whole chain before it, and a chain of T in-place accumulations (an
    unrolled loop's gradient) made that T^2."""
    roots = {}
    for n in nodes:
        if n.op in REGISTRY and REGISTRY[n.op].kind in ("view", "inplace"):
            a = n.args[0]
            r = roots.get(a.id)
            roots[n.id] = r if r is not None else storage_root(a).id
        else:
            roots[n.id] = n.id
    return roots


class InPlaceWrites:
    """The in-place writes of a node list (an ``inplace`` op writes the
    storage of its first operand): ``roots``, the storage written, and
    :meth:`between`, found by position (a pass asking about thousands of
    producer-reader pairs looks at the few writes between each, not at every
    node)."""

    def __init__(self, nodes):
        self.position = {n.id: i for i, n in enumerate(nodes)}
        self.root = storage_roots(nodes)  # (as the nodes were: a pass may rewrite them)
        self._writes = [(i, self.root[n.id]) for i, n in enumerate(nodes)
                        if n.op in REGISTRY and REGISTRY[n.op].kind == "inplace"]
        self._starts = [i for i, _ in self._writes]
        self.roots = {root for _, root in self._writes}

    def last_writes(self):
        """``{storage root id: position of its last in-place write}``."""
        return {root: i for i, root in self._writes}

    def between(self, p, r):
        """Whether a write after ``p`` and before ``r`` goes to storage ``p`` reads."""
        lo = bisect.bisect_right(self._starts, self.position[p.id])
        hi = bisect.bisect_left(self._starts, self.position[r.id])
        if lo >= hi:
            return False
        roots = {storage_root(a).id for a in p.args}
        return any(root in roots for _, root in self._writes[lo:hi])
