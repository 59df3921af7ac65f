"""The Hessian plan: value, gradient, Hessian and Hessian-vector products of a
scalar function of one array, forward over reverse, as staged programs
(:mod:`.staged`): a primal program, a tangent program for one ``H v`` and a
chunk program for K columns at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results import GradientResult, HessianResult, HvpResult

import functools

import numpy as np

from .. import _tree
from ..core.trace import Trace
from ..frontend.guards import values_read
from ..results import DiffResult, HessianResult, HvpResult
from ..transforms.autodiff import backward, jvp
from ..transforms.batching import vmap
from ..transforms import pipeline
from ..transforms.products import mark_seed_products
from .plan import Plan, serialized
from .chunks import default_chunk, seed_bytes
from .staged import StagedPlan, direct_call, falls_back
from .validate import real_values

__all__ = ["COLORS_MIN_N", "HessianPlan"]

#: the fewest elements of x for which a plan given ``colors`` asks for a
#: coloring of its Hessian (below it, one chunk of n seeds costs about what
#: finding the pattern would save, and importing the sparse package 0.7 s)
COLORS_MIN_N = 64


class HessianPlan(StagedPlan):
    """Value, gradient, Hessian and Hessian-vector products of a scalar function.

    Built by :func:`hybridad.compile` with ``hessian=True`` (or by
    :func:`hybridad.hessian`).  Forward over reverse: the tangent pass runs
    through the forward and (functional) backward graph.

    Methods
    -------
    hessian(*args, out=None)
        Value, gradient and the full Hessian (chunks of :attr:`chunk` columns).
    hvp(*args, v, out=None)
        ``H v`` for one ``v`` shaped like ``x`` or a stack ``(k, *x.shape)``;
        without ``args``, at the point of the last :meth:`linearize`.
    linearize(*args, out=None)
        The primal pass only: value and gradient, and what ``H v`` needs is kept.
    """

    _kind = "hessian"

    def _computes(self):
        return ("values, gradients, Hessians and Hessian-vector products (plan.gradient, "
                "plan.hessian, plan.hvp, plan.linearize)")

    def __init__(self, f, args, argnums=0, backend="numba", chunk=None, parallel=True,
                 poison=False, pack=True, colors=None, memory_budget=None):
        self._chunk_request = chunk
        self._colors = colors
        super().__init__(f, args, argnums, backend, parallel=parallel, poison=poison,
                         pack=pack, memory_budget=memory_budget)
        self.order = 2
        self._options_of(chunk=chunk, colors=colors, memory_budget=memory_budget)

    def _remake(self, f, args, backend):
        return HessianPlan._from_recording(self._recording, f, args, self.argnums, backend,
                                           chunk=self._chunk_request, parallel=self.parallel,
                                           colors=self._colors, memory_budget=self.memory_budget)

    def _build(self, f, args, leaves):
        trace = Trace()
        self._concrete(trace, leaves)
        with trace:
            _, targs, diff_tracers = self._trace_args(trace, leaves)
            shape, dtype = self._one_array("a Hessian")
            n = int(np.prod(shape, dtype=np.int64))
            out = self._trace_f(f, targs, trace)
            self._checkpointed(trace, out)
            self._decided(trace)
            self._value_dtype = out.dtype
            (x,) = diff_tracers
            # a Hessian whose structural sparsity gives few colors: H S in one chunk
            # of the colors' seeds, scattered into the dense result (see _colored)
            comp = None
            if self._colors is not None and self._chunk_request is None and \
                    n >= COLORS_MIN_N and self.backend in ("numpy", "numba"):
                with values_read() as read:  # (a captured array's zeros: guarded)
                    comp = self._colors(list(trace.nodes), x.node, out.node, n, dtype)
                if comp is not None:
                    self._pin_values(read, f)
            (grad,) = backward(trace, out, [x], inplace=False)
            t1 = trace.input(len(leaves), shape, dtype)
            tangents = jvp(trace, list(trace.nodes), {x.node.id: t1})
            hv = None if grad is None else tangents.get(grad.node.id)
            per_seed = seed_bytes(trace.nodes, tangents, self.backend == "numba")
            products = any(nd.op == "matmul" for nd in trace.nodes if nd.id in tangents)
            k = self._seeds_per_chunk(comp.colors if comp is not None else
                                      default_chunk(n, per_seed, products,
                                                    np.dtype(dtype).itemsize))
            if comp is not None and k < comp.colors:  # (a budget's fewer seeds: unit seeds)
                comp = None
            self.chunk = k = int(min(k, max(n, 1)))
            tk = trace.input(len(leaves) + 1, (k, *shape), dtype)
            batched = vmap(trace, list(trace.nodes), {t1.node.id: tk}, k)
            hvk = None if hv is None else batched.get(hv.node.id)
            if self.backend == "numba":  # products of the unit seeds: rows of the matrix
                mark_seed_products(trace.nodes, tk.node)
        self._grad_node = None if grad is None else grad.node
        primal_outputs = [out.node, self._grad_node]
        outputs = [out.node] + [m.node for m in (grad, hv, hvk) if m is not None]
        graph = pipeline.lower(trace.nodes, [nd for nd in trace.nodes if nd.op == "input"],
                               outputs, self.backend, staged=True)
        self._primal_outputs = primal_outputs
        self._primal_specs = [((), out.dtype), (shape, dtype)]
        self._stage_specs = {"tangent": [(shape, dtype)], "chunk": [((k, *shape), dtype)]}
        self._stage(graph, primal_outputs, {"tangent": (t1.node, [None if hv is None
                                                                  else hv.node]),
                                            "chunk": (tk.node, [None if hvk is None
                                                                else hvk.node])})
        self._shape, self._dtype, self._n = shape, np.dtype(dtype), n
        self._seed = self._xp.zeros((k, *shape), dtype)
        self._seed_flat = self._seed.reshape(k, n)
        self._stage_out = self._xp.zeros((k, *shape), dtype)
        self._point = [self._xp.empty(s, d) for s, d in self._specs]
        self._have_point = False
        self._at_point = False  # whether the arena holds the linearized point's values
        self._scratch_grad = self._xp.zeros(shape, dtype)
        self._scratch_value = self._xp.zeros((), out.dtype)
        self._compression = comp
        if comp is not None:  # its seeds, the compressed H S, the nonzeros' values
            self._color_seed = np.ascontiguousarray(comp.seed.reshape((k, *shape)))
            self._color_out = np.zeros((k, *shape), dtype)
            self._color_flat = self._color_out.reshape(-1)
            self._color_values = np.zeros(comp.nnz, dtype)
        if self.backend == "numba":  # one direction's plain calls (see _hvp_fast)
            self.hvp = self._hvp_fast()
            if comp is None and 0 < n <= k and len(shape) == 1:  # (the unit seeds: I)
                self.hessian = self._one_chunk_fast(
                    type(self).hessian, HessianResult, 2, lambda: np.eye(n, dtype=self._dtype))

    # ------------------------------------------------------------ results
    def new_result(self) -> HessianResult:
        """A fresh :class:`HessianResult` matching this plan."""
        return HessianResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)

    def _primal(self, leaves, v, g):
        """The primal program at ``leaves`` into ``v``, ``g``; it leaves the
        arena's pinned values at this point (no longer the linearized one)."""
        self._at_point = False
        self._run_program("primal", leaves, [v, g])

    # -------------------------------------------------------------- calls
    @falls_back
    @serialized
    def gradient(self, *args: Any, out: GradientResult | None = None) -> GradientResult:
        """Value and gradient (the primal program), as :meth:`Plan.gradient`."""
        if self._guarded:
            plan = self._routed(args)
            if plan is not self:
                return type(plan).gradient(plan, *args, out=out)
        leaves = self._leaves(args)
        if out is None:
            out = HvpResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)
        v, g = self._check(out, "GradientResult", ("value", "gradient"), ((), self._shape),
                           leaves)
        self._primal(leaves, v, g)
        return out

    @falls_back
    @serialized
    def linearize(self, *args: Any, out: GradientResult | None = None
                  ) -> GradientResult | None:
        """Run the primal pass at ``args``; later :meth:`hvp` calls without
        arguments differentiate at this point.

        Parameters
        ----------
        *args
            Arguments matching the example arguments.
        out : GradientResult or DiffResult, optional
            Receives the value and gradient at ``args``.

        Returns
        -------
        GradientResult, DiffResult or None
            ``out``.
        """
        if self._guarded:
            plan = self._routed(args)
            self._point_plan = plan  # (hvp(v=) runs where the point is)
            if plan is not self:
                self._at_point = False  # (this arena's point is not the last one)
                return type(plan).linearize(plan, *args, out=out)
        leaves = self._leaves(args)
        if out is not None:
            v, g = self._check(out, "GradientResult", ("value", "gradient"),
                               ((), self._shape), leaves)
        else:
            v, g = self._scratch_value, self._scratch_grad
        self._primal(leaves, v, g)
        for own, a in zip(self._point, leaves, strict=True):
            self._xp.copyto(own, a)  # the tangent programs read the point's arguments
        self._have_point = self._at_point = True
        self._point_args = args  # what the guards read (static arguments) at this point
        self._point_ids = [id(a) for a in self._point]  # (the plan's own arrays)
        return out

    def _hvp_fast(self):
        """This plan's ``hvp`` with a fast path in front for one direction
        into an :class:`HvpResult` (or :class:`DiffResult`) on the numba
        backend, after the guards and with none of the general path's
        Python: ``plan.hvp(*arrays, v=v, out=res)`` is the fused HVP plan's
        own fast path once it is made (:meth:`_fused_plan`);
        ``plan.hvp(v=v, out=res)`` after :meth:`linearize` calls the compiled
        tangent program on the ``id``s of the point's arrays, ``v`` and
        ``out``'s buffers, under the plan's lock -- the program checks every
        array (exact ndarray, shape, dtype, layout, writeable results, no
        overlaps) before it writes.  Any other call, and any call a check
        turns down, is the general method's.  The tangent program's entry is
        taken after the general path compiled it, and held with the programs
        and point arrays it was made for (a plan rebuilt by a retrace has
        others: the general path again)."""
        general, plan = type(self).hvp, self
        acquire, release = self._lock.acquire, self._lock.release
        entry = []  # [the tangent's calls (full, lean), the programs, the point, scratch]

        def _entry():
            from ..backends.numba.link import bind

            programs = plan._programs
            tangent = programs.get("tangent")
            if tangent is None or not tangent.objects or plan._raises["tangent"]:
                return
            calls = []
            for lean in (False, True):  # (lean: H v only, the value and gradient not copied)
                if lean and tangent.lean_parts is None:
                    calls.append(None)
                    continue
                fn, lead, consts = direct_call(tangent, lean)
                # (the point's ids, like the program's leading arguments, are the same
                # on every call: bound into one small generated function with them)
                fixed = [*lead, *(id(a) for a in plan._point)]
                calls.append(functools.partial(fn, *fixed) if not consts else
                             bind(fn, fixed, consts, 1, 3))  # (a partial: no frame of its own)
            # (a lean call's value and gradient: the plan's scratch, not written; held)
            sv, sg = plan._scratch_value, plan._scratch_grad
            entry[:] = [*calls, programs, plan._point, (id(sv), id(sg), sv, sg)]

        nd, results = np.ndarray, (HvpResult, DiffResult)
        state = vars(plan)  # (its _point_plan read without the property's call)

        @functools.wraps(general)
        def hvp(*args, v, out=None):
            if not args and entry and v.__class__ is nd and plan._twin is None and \
                    plan._have_point and state.get("_point_plan_", plan) is plan:
                # at the linearized point: the tangent program (into out's three
                # buffers, or H v alone into an array); a point another plan holds
                # (a specialization for other decisions): the general path
                if plan._guarded:  # (StagedPlan._check_reads inline; a retrace: other programs)
                    root = plan._root if plan._root is not None else plan._rootref()
                    if root is not None and plan._gcheck(root, plan._point_args) is not None:
                        plan._check_stale(plan._point_args)
                call, lean, programs, point, scratch = entry
                if plan._programs is not programs or plan._point is not point:
                    pass  # (rebuilt: the general path)
                elif out.__class__ in results:
                    d = out._derivs
                    acquire()  # (a with statement costs twice as much: 0.25 us)
                    try:
                        if plan._at_point and len(d) == 2:
                            call(id(v), id(out._value), id(d[0]), id(d[1]))
                            return out
                    except (TypeError, ValueError):
                        pass
                    finally:
                        release()
                elif out.__class__ is nd and lean is not None:
                    acquire()
                    try:
                        if plan._at_point:
                            lean(id(v), scratch[0], scratch[1], id(out))
                            return out
                    except (TypeError, ValueError):
                        pass
                    finally:
                        release()
            elif args and v.__class__ is nd and plan._twin is None and out.__class__ is not nd:
                if plan._fused and v.shape == plan._shape:  # (a stack: the chunks')
                    if plan._guarded:  # (this plan's guards serve its fused plan)
                        plan._check_reads(args)
                    fused = plan._fused
                    if fused:  # (its plain path first: no decisions, this plan's guards)
                        if fused._hvp_plain(args, v, out, False) is out and out is not None:
                            return out
                        return fused.hvp(*args, v=v, out=out)
            result = general(plan, *args, v=v, out=out)
            if not entry:
                _entry()
            return result

        return hvp

    @falls_back
    @serialized
    def hvp(self, *args: Any, v: Any, out: DiffResult | None = None) -> DiffResult:
        """Value, gradient and ``H v``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments; none: at the point of the
            last :meth:`linearize` (only the tangent pass runs).
        v : ndarray
            One direction, shaped like ``x``, or a stack of ``k`` directions
            ``(k, *x.shape)`` (run in chunks of :attr:`chunk`).
        out : HvpResult, DiffResult or ndarray, optional
            ``(value, gradient, hvp)`` buffers; ``hvp`` shaped like ``v``.  Or
            one array shaped like ``v``, of the plan's dtype: ``H v`` alone --
            at the linearized point the tangent pass then writes nothing else
            (what scipy's ``hessp`` asks for, and the cheapest call).

        Returns
        -------
        HvpResult, DiffResult or ndarray
            ``out``, or a new :class:`HvpResult` (for one direction).
        """
        if not args and not self._point_plan._have_point:
            raise ValueError("hvp without arguments needs a point: call plan.linearize(*args) "
                             "first, or pass the arguments")
        if self._guarded:
            if args:
                plan = self._routed(args)
            else:  # at the linearized point: the plan that holds it
                plan = self._point_plan
                if plan is self:
                    self._check_stale(getattr(self, "_point_args", ()))
            if plan is not self:
                return type(plan).hvp(plan, *args, v=v, out=out)
        if type(out) is self._xp.ndarray:  # H v alone: through a result of the plan's own
            return self._hv_only(args, v, out)
        if args and self.backend == "numba" and np.shape(v) == self._shape:
            fused = self._fused_plan(args)
            if fused is not None:  # value, gradient and H v in one fused program
                return fused.hvp(*args, v=v, out=out)
        if self._fast_hvp(args, v, out):
            return out  # type: ignore[return-value]  # a fast call had an out
        leaves = self._leaves(args) if args else self._point
        _tree.refuse_subclass(v, "v")
        v = self._xp.asarray(real_values(v, "v"), dtype=self._dtype) \
            if type(v) is not self._xp.ndarray or v.dtype != self._dtype else v
        many = v.shape != self._shape
        if many and v.shape[1:] != self._shape:
            raise ValueError(f"v must have shape {self._shape} (one direction) or (k, "
                             f"*{self._shape}) (k directions); got {v.shape}")
        if out is None:
            out = HvpResult(self._xp.zeros(self._shape, self._dtype), dtype=self._value_dtype)
            if many:
                out = DiffResult(out.value, out.gradient, self._xp.zeros(v.shape, self._dtype))
        bufs = self._check(out, "HvpResult", ("value", "gradient", "hvp"),
                           ((), self._shape, v.shape), leaves, [("v", v)])
        stage = "chunk" if many else "tangent"
        val, g, hv = self._targets(stage, bufs)
        if args:
            self._primal(leaves, val, g)
        elif not self._at_point:  # another call ran the primal since linearize
            self._primal(leaves, self._scratch_value, self._scratch_grad)
            self._at_point = True
        if not many:
            self._run_program("tangent", [*leaves, v], [val, g, hv])
        elif not len(v):  # no direction: no chunk writes the value and gradient
            if not args:
                self._primal(leaves, val, g)
                self._at_point = True  # (at the point's own arrays)
        else:
            self._chunks(leaves, val, g, v.reshape(len(v), self._n), hv.reshape(len(hv), self._n))
        self._deliver(bufs, (val, g, hv))
        return out

    #: the plan whose arena holds the point of the last :meth:`linearize` (this
    #: one, or the specialization for its decisions on values)
    @property
    def _point_plan(self):
        return vars(self).get("_point_plan_", self)

    @_point_plan.setter
    def _point_plan(self, plan):
        self._point_plan_ = plan

    #: the ``hvp=True`` plan that serves ``hvp(*args, v=one direction)`` on the
    #: numba backend (built from this plan's recording at the first such
    #: call), False where it cannot be built (see :meth:`_fused_plan`)
    _fused = None

    def _fused_plan(self, args):
        """The fused HVP plan: ``plan.hvp(*args, v=v)`` computes value, gradient
        and ``H v`` in the one pass of an ``hvp=True`` plan (region fusion and
        its memory plan), where the staged programs would run the primal --
        storing every value the tangent program reads -- and then the tangent
        program.  Built once, from this plan's recording (``f`` is not traced
        again; this plan's guards serve both); its arena is its own, so a
        linearized point stays.  None for a plan that decided on values (its
        specializations are this plan's) or whose ``f`` is gone."""
        fused = self._fused
        if fused is None:
            self._leaves(args)  # (checked as this plan's first: the fused plan is built at them)
            fused = False
            f = self._f()
            if self._recording is not None and f is not None and self.memory_budget is None \
                    and self._decision_check is None and self._twin is None:
                fused = Plan._from_recording(self._recording, f, args, self.argnums,
                                             backend=self.backend, hvp=True,
                                             parallel=self.parallel, tiered=False)
            self._fused = fused
            if len(self._programs) > len(self._stages):  # (nothing else needs it)
                self._recording = None
        return fused or None

    def _hv_only(self, args, v, out):
        """:meth:`hvp` into one array ``out`` (``H v`` alone) on the general
        path: checked first (untouched when it does not fit), computed into a
        result of the plan's own (made once per shape of ``v``), copied."""
        shape = np.shape(v)
        if out.shape != shape or out.dtype != self._dtype or not out.flags.writeable:
            raise ValueError(f"out: an array receiving H v alone must be a writeable "
                             f"{self._dtype} array of v's shape {shape}; got "
                             f"{out.dtype}{list(out.shape)}")
        own = vars(self).setdefault("_hv_results", {})
        res = own.get(shape)
        if res is None:
            res = own[shape] = DiffResult(self._xp.zeros((), self._value_dtype),
                                          self._xp.zeros(self._shape, self._dtype),
                                          self._xp.zeros(shape, self._dtype))
        type(self).hvp(self, *args, v=v, out=res)
        self._xp.copyto(out, res.derivs[1])
        return out

    def _fast_hvp(self, args, v, out):
        """:meth:`hvp` of one direction on its plain path, in a few checks:
        plain arrays of the plan's shapes and dtypes, an :class:`HvpResult` /
        :class:`DiffResult` of exact arrays, a compiled tangent program that
        cannot fail and checks its buffers itself (alignment, contiguity,
        writeable results, no overlaps) before writing.  Without ``args``,
        at the linearized point, only the tangent program runs.  Whether it
        ran; if not, the general path runs (and says what is wrong)."""
        if self.backend != "numba" or self._raises["tangent"] or type(v) is not np.ndarray or \
                (out.__class__ is not HvpResult and out.__class__ is not DiffResult):
            return False
        if not args:  # at the linearized point: the tangent program checks the rest
            return self._at_point_fast(v, out)
        d = out._derivs
        if len(d) != 2 or len(args) != len(self._specs) or self._primal_raises:
            return False
        tangent = self._programs.get("tangent")
        if tangent is None or not tangent.objects:
            return False
        val, g, hv = out._value, d[0], d[1]
        primal = self._programs.get("primal")
        if primal is None or not primal.objects:
            return False
        # the primal program writes the plan's own scratch value and gradient
        # (never the caller's buffers: no overlap to check first); the tangent
        # program then checks every argument and result -- exact arrays,
        # layout, writeable results, no overlaps -- before it writes any
        try:  # (no numpy errstate: as the gradient's fast path, compiled code only)
            primal.call(list(args), [self._scratch_value, self._scratch_grad])
        except ValueError:
            return False
        self._at_point = False
        try:
            tangent.call([*args, v], [val, g, hv])
        except ValueError:
            return False
        return True

    def _at_point_fast(self, v, out):
        """:meth:`_fast_hvp` at the linearized point: the compiled tangent
        program on ``id``s of the point's arrays, ``v`` and ``out``'s buffers;
        it checks each (exact ndarray, shape, dtype, layout, writeable
        results, no overlaps) before writing, as the ``hvp=True`` plan's
        does.  Whether it ran."""
        if not (self._have_point and self._at_point):
            return False
        tangent = self._programs.get("tangent")
        if tangent is None or not tangent.objects:
            return False
        d = out._derivs
        if len(d) != 2:
            return False
        ids = self._point_ids + [id(v), id(out._value), id(d[0]), id(d[1])]
        try:
            if tangent.heavy:
                tangent.invoke(*ids)
            else:
                tangent.fn(*ids)
        except (TypeError, ValueError):
            return False
        return True

    def _targets(self, stage, bufs):
        """Where the programs of a call write: the caller's ``bufs``, or -- when
        the ``stage`` program can fail -- buffers of the plan, delivered by
        :meth:`_deliver` once every program has run."""
        if not self._raises[stage]:
            return bufs
        return (self._scratch_value, self._scratch_grad) + tuple(
            self._staging(k, b.shape, b.dtype) for k, b in enumerate(bufs[2:]))

    @falls_back
    @serialized
    def hessian(self, *args: Any, out: HessianResult | None = None) -> HessianResult:
        """Value, gradient and Hessian of ``f`` at ``args``.

        Parameters
        ----------
        *args
            Arguments matching the example arguments.
        out : HessianResult or DiffResult, optional
            ``(value, gradient, hessian)`` buffers, the Hessian ``(n, n)`` for
            ``n = x.size``; validated before anything is written.

        Returns
        -------
        HessianResult or DiffResult
            ``out`` (or a new result).
        """
        if self._guarded:
            plan = self._routed(args)
            if plan is not self:
                return type(plan).hessian(plan, *args, out=out)
        leaves = self._leaves(args)
        if out is None:
            out = self.new_result()
        bufs = self._check(out, "HessianResult", ("value", "gradient", "hessian"),
                           ((), self._shape, (self._n, self._n)), leaves)
        val, g, h = self._targets("chunk", bufs)
        # one run of the chunk program (a colored Hessian, or n <= chunk): the
        # primal and the chunk as one program (see StagedPlan._run_whole)
        whole = self._n > 0 and (self._compression is not None or self._n <= self.chunk) and \
            not self._primal_raises  # (no variables, no chunk: the primal alone)
        if whole:
            self._at_point = False
        else:
            self._primal(leaves, val, g)
        run = self._run_whole if whole else self._run_program
        if self._compression is not None:
            self._colored(leaves, val, g, h, run)
        else:
            self._chunks(leaves, val, g, None, h, run)
        self._deliver(bufs, (val, g, h))
        return out

    def _colored(self, leaves, val, g, h, run):
        """``h`` = the Hessian from one run of the chunk program on the
        coloring's seeds (:mod:`hybridad.sparse.dense`): ``H S``, its
        structural nonzeros scattered into ``h``, zeros elsewhere.  ``run``:
        how the chunk program runs (:meth:`_run_program`, or with the primal,
        :meth:`_run_whole`)."""
        comp = self._compression
        run("chunk", [*leaves, self._color_seed], [val, g, self._color_out])
        values = self._color_values
        self._color_flat.take(comp.sources, out=values, mode="wrap")  # (unbuffered)
        h.fill(0)
        if h.flags.c_contiguous:
            h.reshape(-1).put(comp.positions, values)
        else:
            h[np.divmod(comp.positions, self._n)] = values  # (a strided h: allocates)

    def _chunks(self, leaves, val, g, vs, rows, run=None):
        """``rows[i] = H vs[i]`` (``vs`` None: the unit vectors, ``rows`` = H), in
        chunks of :attr:`chunk` through the chunk program (the first chunk run by
        ``run``: :meth:`_run_whole` for a call that ran no primal program)."""
        first = self._run_program if run is None else run
        k, seed = self.chunk, self._seed_flat
        total = rows.shape[0]
        try:
            for start in range(0, total, k):
                stop = min(start + k, total)
                m = stop - start
                if vs is None:
                    ones = self._unit_seeds(start, m, 1)
                else:
                    seed[:m] = vs[start:stop]
                    seed[m:].fill(0)
                run = first if start == 0 else self._run_program
                if m == k and rows.flags.c_contiguous:
                    block = rows[start:stop].reshape((k, *self._shape))
                    run("chunk", [*leaves, self._seed], [val, g, block])
                else:
                    run("chunk", [*leaves, self._seed], [val, g, self._stage_out])
                    rows[start:stop] = self._stage_out.reshape(k, -1)[:m]
                if vs is None:
                    ones.fill(0)
        finally:  # the seed is all zeros between calls (unit seeds rely on it)
            seed.fill(0)
