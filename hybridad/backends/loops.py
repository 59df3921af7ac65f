"""Running a ``loop`` node (:mod:`hybridad.ops.loop`) on every backend: its
body compiled ONCE as a program of its own, called once per iteration.

A :class:`LoopRunner` lowers the body graph with the backend's passes
(:func:`hybridad.transforms.pipeline.lower`), plans its memory and compiles
it -- the numpy reference program, or one numba function -- then runs it
``length`` times into the loop node's buffer: the carries go back and forth
between two sets of buffers, each iteration's row of an ``xs`` operand is
read in place, each per-iteration output is written in place into its row
of the loop's value.  Nothing is allocated per call.  Where the body runs
natively (the numba plan's compiled driver calls it), the two sets of
carries and the body's arena are the loop's *workspace*, a slot of the
calling plan's arena live while the loop runs (:func:`workspace_layout`,
:func:`.numba.layouts.loop_workspace`): loops that run one after the other
share those bytes, and the runner keeps none.  Otherwise the runner holds
its carries and its body's program its arena (allocated once, counted as
the plan's held memory: :attr:`hybridad.ops.Op.held`).  The body's program,
and so the time to build it, do not depend on the trip count.

The numpy program calls the runner as the node's function, and so does the
GPU program (``"cupy"``: the body is a GPU program of its own, its kernels
launched per iteration from the host, its buffers on the device); the numba plan
function calls it in object mode (one switch to Python per loop, not per
iteration) through a module-level name the generated source binds from the
runner's key (:func:`runner_named`), so the plan's source, and numba's disk
cache of it, are the same in every process.  Where hybridad's compiler
translates that source and the body is its machine code, the call is no
switch to Python: the calling code runs the loop in place, calling the body
itself (:mod:`.nesting`) -- a loop in a plan, or inside another loop's body.
Runners are shared by every plan with the same body and trip count; one lock
serializes their calls from Python (its tables are one; the code run in
place keeps its state on its stack and in the caller's arena).  The
programs that call a runner hold it, and it goes -- its carries or the views
of its callers' workspaces, its body's program and tables -- with the last of
them: the registry and the generated modules (which live as long as the
process) know it by key only.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import operator
import weakref

import numpy as np

from .._forksafe import Lock, RLock
from ..frontend.loops import loop_reads_as_is
from .nesting import workspace_layout
from .numba.abi import ABI
from .numba.threshold import loops_serial
from .switches import jit_enabled

__all__ = ["COMPILERS", "LoopRunner", "describe", "emit_numba", "runner", "runner_for",
           "runner_named", "workspace_layout"]

#: key -> runner, while a program that calls it holds it
_RUNNERS = weakref.WeakValueDictionary()
_LOCK = Lock()
#: backend -> its body compiler ``compile_body(graph) -> (call(ins, outs), program,
#: parts, make_driver)``: ``parts`` the numba program's ``(dispatcher, fixed,
#: bound)`` where its arrays go as ``id()`` (else None), ``make_driver(key, n)``
#: the maker of ``runs(plan, count)``: a call running a compiled loop whose
#: argument lists an ``int64[n, 5]`` plan gives (:meth:`LoopRunner._plan`; else None).
#: Each backend's program module registers its own when imported (it is what
#: runs or emits a loop node), so imports run one way
COMPILERS = {}


def _key(node, backend):
    a = node.attrs
    # (a plan built with parallel=False has runners of its own: a body may run threads;
    # so has one built with HYBRIDAD_JIT=0: a body with a loop inside runs from Python)
    head = (a["body"].key, a["length"], a["start"], a["reverse"], tuple(a["order"]), backend,
            loops_serial(), jit_enabled(),
            node.shape, node.dtype.str, tuple((n.shape, n.dtype.str) for n in node.args))
    return hashlib.sha1(repr(head).encode()).hexdigest()


def runner(node, backend, device=None):
    """The runner of loop ``node`` on ``backend`` (``"numpy"``, ``"numba"`` or
    ``"cupy"``: its :data:`COMPILERS` entry), compiled on first use and
    shared.  ``device``: the GPU program's ``(array module, launcher, whether
    its matrix products are its own kernels)``, for ``"cupy"`` (runners are
    shared per kind of each)."""
    xp = np
    compile_body = COMPILERS[backend]
    if device is not None:
        xp, launcher, products = device
        backend = f"{backend}/{xp.__name__}/{type(launcher).__qualname__}/{products}"
        compile_body = functools.partial(compile_body, device=device)
    key = _key(node, backend)
    with _LOCK:
        hit = _RUNNERS.get(key)
    if hit is None:
        hit = LoopRunner(node, key, compile_body, xp)
        with _LOCK:
            hit = _RUNNERS.setdefault(key, hit)
        hit.prepare()
    return hit


def describe(node, backend):
    """How loop ``node``'s iterations run on ``backend``, in words, from its
    runner if one is compiled (None if not: nothing is compiled here).  Call
    where the plan's :func:`~.numba.threshold.serial_loops` setting is in
    effect (it is part of the runner's key)."""
    with _LOCK:
        hit = _RUNNERS.get(_key(node, backend))
    return None if hit is None else hit.describe()


def runner_for(key):
    """The runner registered under ``key`` (a program that calls it holds it)."""
    return _RUNNERS[key]


class runner_named:  # noqa: N801 -- a function to the generated source
    """``runner_named(key)(work, out, *operands)`` calls the runner registered under
    ``key``: what generated source binds at module level -- a generated module
    lives as long as the process, so it names the runner without holding it
    (the program made from it does, :attr:`_SourceName.keep`)."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __call__(self, work, *args):
        return _RUNNERS[self.key](*args, work=work)

    def nest(self):
        """The registered runner's :meth:`LoopRunner.nest` (None if it is gone)."""
        hit = _RUNNERS.get(self.key)
        return None if hit is None else hit.nest()


class _SourceName:
    """A runner as a name in generated numba source, bound at module level
    from the runner's key (the same source in every process); ``keep``: the
    runner, for the program compiled from the source to hold."""

    cacheable = True

    def __init__(self, runner):
        self.key, self.ident, self.keep = runner.key, "_lp_" + runner.key[:16], runner

    def header_line(self):
        return (f"from numba import objmode as _objmode; from hybridad.backends.loops import "
                f"runner_named as _lp_named; {self.ident} = _lp_named({self.key!r})")

    def driver(self):
        return runner_named(self.key)


_DATA = None if ABI is None else ABI["data"]
#: the most placements (iteration tables) a runner keeps: a runner is shared by
#: every loop of its body, in every plan
_PLACES = 8
_LOAD = ctypes.c_int64.from_address


def emit_numba(e):
    """The numba emitter of a loop node (``e``: :class:`.numba.emit.Emit`): its
    runner called in object mode, one switch to Python per loop (none where
    hybridad's compiler runs it in place: :mod:`.nesting`)."""
    name = e.consts.kernel(_SourceName(runner(e.node, "numba")))
    work = e.names.get(("scratch", e.node.id), "None")  # (its workspace: .numba.layouts)
    e.w.emit("with _objmode():")
    e.w.emit(f"    {name}({', '.join([work, e.out, *e.a])})")


def lower_body(graph, backend):
    """The body graph lowered by ``backend``'s passes, on a copy (the passes
    rewrite nodes in place; the body stays as traced for its rules, its
    reference run and the other backends)."""
    from ..ir.graph import copy_graph
    from ..transforms import pipeline

    from .numba.machine import lowering_machine

    g = copy_graph(graph)
    return pipeline.lower(g.nodes, g.inputs, g.outputs, backend,
                          machine=lowering_machine(backend))


def _address(a):
    """The data address of array ``a``: read from numpy's array struct where
    its layout is known (:mod:`.numba.abi`), ~10x cheaper than
    ``__array_interface__``."""
    return _LOAD(id(a) + _DATA).value if _DATA is not None else \
        a.__array_interface__["data"][0]


class LoopRunner:
    """One loop node's body, compiled, and the buffers its iterations use.

    Call as ``runner(out, *operands)``: ``out`` is the loop node's buffer,
    the operands its carries' initial values, its xs and its constants."""

    def __init__(self, node, key, compile_body, xp=np):
        a = node.attrs
        self.key = key
        self._xp = xp  # the array module of its buffers (cupy's on the GPU)
        self._dtype = np.dtype(node.dtype)  # (the loop's value: its parts, one dtype)
        self.body = body = a["body"]
        self.length, self.start, self.reverse = a["length"], a["start"], a["reverse"]
        self.call, self._prog, parts, self._make_driver = compile_body(body.graph)
        self._lock = RLock()
        outs = body.graph.outputs
        nc = body.n_carry
        # a body run natively runs on a workspace each call gives (its carries and its
        # arena: workspace_layout), else on the runner's own carries and program
        self._layout = None if parts is None else \
            workspace_layout(body, self._prog.memory.arena_bytes)
        self._carries = None if parts is not None else \
            [[xp.empty(n.shape, n.dtype) for n in outs[:nc]] for _ in range(2)]
        self._private = None  # (a workspace of its own, for a call that gives none)
        # the iteration index, row t of an array: (an xs of the body, in effect)
        self._index = xp.arange(self.start, self.start + self.length, dtype=np.int64) \
            if body.index else None
        # numba's body: (dispatcher, fixed, bound) called on argument lists made
        # once (see _iterations), or None: the Python loop over ``call``
        self._parts_of_body = parts
        self._tables = {}  # placement -> (run, final carries' views, views kept alive)
        self._drive = None
        from ..ops.loop import layout

        self._parts = {k: (off, shape) for k, off, shape in layout(body, self.length, a["order"])}
        self._staged = {}
        #: (the loop's buffer address, operand position) -> the runner's copy of an
        #: operand that moved between calls there
        self._moving = {}
        #: the data addresses of a call's buffer and operands -> (whole, kept, the
        #: :meth:`_iterations` entry it runs): see :meth:`_whole`
        self._wholes = {}
        #: the copy tables of the _wholes entries, a block of rows each (made with the
        #: first: a call at a new place -- a plan's fast path handing in a seed of its
        #: own, another plan's -- allocates nothing), and the blocks free
        self._copy_rows, self._free_rows = None, list(range(2 * _PLACES))

    def describe(self):
        """How this runner runs its iterations, in words (for ``explain()``)."""
        threads = getattr(self._prog, "parallel", False)
        if self._nested is not None and self._nested[0] is not None:
            how = ("one native call: run in place by the compiled code that calls it, the body "
                   "called natively each iteration")
        elif self._drive is not None:
            how = "one native call: the compiled driver calls the body each iteration"
        elif self._parts_of_body is not None:
            how = "the body's compiled function called from Python each iteration"
        elif threads:
            how = ("the body on the threads (one iteration is large), called from Python each "
                   "iteration")
        else:
            how = ("the body's program called from Python each iteration (it switches to "
                   "Python itself: a host call, or a loop inside it run from Python)")
        return f"{self.length} iterations, {how}"

    _nested = None

    def nest(self):
        """``(spec, cell, context)`` for running this loop natively inside a
        compiled outer body (:func:`.nesting.describe`), or None; made once."""
        if self._nested is None:
            from .nesting import describe

            self._nested = (describe(self),)
        return self._nested[0]

    def _canonical(self, pos, a):
        """Operand ``pos`` as the body reads it: ``a`` itself where it is an
        aligned native ndarray, C-contiguous -- for an xs, each of its rows
        (the step from one row to the next is the driver's: a broadcast xs,
        step 0, is read in place) -- else its copy in a buffer of the runner's."""
        xp = self._xp
        if xp is not np:  # (device arrays: the body's kernels read any strides)
            return a
        nc = self.body.n_carry
        if type(a) is np.ndarray and a.flags.aligned and a.dtype.isnative and \
                loop_reads_as_is(a, pos, nc, self.body.n_xs):
            return a
        buf = self._staged.get(pos)
        if buf is None or buf.shape != a.shape or buf.dtype != a.dtype:
            buf = self._staged[pos] = np.empty(a.shape, a.dtype.newbyteorder("="))
        np.copyto(buf, a)
        return buf

    def prepare(self):
        """Compile the numba driver: the loop over the iterations' argument
        lists as one compiled function calling the body natively (no dispatch
        per iteration).  Needs the runner registered (its source finds the
        body by the runner's key)."""
        if self._parts_of_body is None or self._drive is not None or self._make_driver is None:
            return
        own, fixed, bound = self._parts_of_body
        if not all(isinstance(v, int) for v in (*fixed, *bound)):
            return  # (a constant passed as an array: the Python loop)
        n = len(fixed) + len(bound) + len(self.body.graph.inputs) + len(self.body.graph.outputs)
        self._drive = self._make_driver(self.key, n)
        self._nested = None  # (described before its driver was made, by another thread: again)
        from .nesting import watched

        if watched(self.key):  # (compiled outer bodies call it: its context, not the last's)
            self.nest()

    def _steps(self, out, ops, carries):
        """``(inputs, outputs)`` of the body at each iteration, in the order
        they run: the carries alternate between the two sets ``carries``,
        the xs are read and the per-iteration outputs written row by row."""
        body = self.body
        nc, nx = body.n_carry, body.n_xs
        rows = [self._row(out, k) for k in range(nc, len(body.graph.outputs))]
        xs, consts = ops[nc:nc + nx], ops[nc + nx:]
        order = range(self.length - 1, -1, -1) if self.reverse else range(self.length)
        for step, t in enumerate(order):
            cur, other = carries[step % 2], carries[(step + 1) % 2]
            index = [self._index[t, ...]] if body.index else []
            yield index + cur + [x[t, ...] for x in xs] + consts, \
                other + [r[t, ...] for r in rows]

    def _on(self, work):
        """``(carries, fixed)`` on workspace ``work`` (:func:`workspace_layout`;
        the runner's own where a call gives none, or one too small): the two
        sets of carries, views of it, and the body's leading arguments with
        its arenas' addresses in it."""
        nbytes, offsets, arenas = self._layout
        if work is None or work.nbytes < nbytes or not work.flags.c_contiguous:
            if self._private is None:
                self._private = np.empty(nbytes, np.uint8)
            work = self._private
        raw = work.reshape(-1).view(np.uint8)
        outs = self.body.graph.outputs[:self.body.n_carry]
        carries = [[raw[o:o + n.nbytes].view(n.dtype).reshape(n.shape)
                    for o, n in zip(set_, outs, strict=True)] for set_ in offsets]
        base = _address(raw)
        fixed = list(self._parts_of_body[1])
        for k, dt in enumerate(self._prog.arena_dtypes):
            fixed[k] = base + arenas[dt]
        return carries, fixed

    def _iterations(self, out, ops, work):
        """The iterations of a numba body as one call: the compiled driver's
        plan of their argument lists (:meth:`_plan`: a few rows, whatever the
        trip count), or the argument lists themselves (every array of every
        iteration as ``id(view)``, the views made once and kept here) where
        there is no driver; and the views of ``out`` the final carries go to,
        and the carries (in ``work``: :meth:`_on`).
        One entry per placement -- the data addresses of what it reads: the
        loop's buffer, its workspace, the xs and the constants -- kept for the
        next call there (a runner serves every loop
        of its body: the forward loop and its recomputation in a reverse body
        are two).  An xs or constant that moves between calls at one place
        (an argument of the plan) is copied from then on into a buffer of the
        runner's, so the table there is made once, not at every call."""
        nc = self.body.n_carry
        at = 0 if work is None else _address(work)
        key = (_address(out), at, *map(_address, ops[nc:]))
        hit = self._tables.get(key)
        if hit is None:
            seen = next((k for k in self._tables if k[:2] == key[:2]), None)
            if seen is not None:  # operands moved, at a place seen before
                for j, (a, b) in enumerate(zip(key[2:], seen[2:], strict=True), nc):
                    if a != b:
                        # (C order: empty_like keeps a broadcast row's strides, rows apart)
                        buf = self._moving[key[0], j] = np.empty(ops[j].shape, ops[j].dtype)
                        np.copyto(buf, ops[j])
                        ops[j] = buf
                key = (*key[:2], *map(_address, ops[nc:]))
                hit = self._tables.get(key)
        if hit is None:
            own, _, bound = self._parts_of_body
            carries, fixed = self._on(work)
            if self._drive is not None:
                table, keep = self._plan(out, ops, carries, fixed)
                run = self._drive(table, self.length)  # (the plan is kept with the run, below)
            else:
                keep, iterations = [], []
                for ins, outs in self._steps(out, ops, carries):
                    keep.append(ins + outs)
                    iterations.append((*fixed, *map(id, ins), *bound, *map(id, outs)))

                def run():
                    for args in iterations:
                        own(*args)
            if len(self._tables) >= _PLACES:  # (plans that are gone leave theirs)
                gone = next(iter(self._tables))
                del self._tables[gone]
                for k in [k for k in self._moving if k[0] == gone[0]]:
                    del self._moving[k]
            hit = self._tables[key] = (run, [self._row(out, k) for k in range(nc)],
                                       (keep, iterations if self._drive is None else table),
                                       carries)
        return hit

    def _plan(self, out, ops, carries, fixed):
        """``(plan, keep)``: the ``int64[n, 5]`` rows ``(obj, alt, base, step,
        moves)`` from which the driver computes the argument lists of
        :meth:`_steps`' iterations (:func:`hybridad.backends.jit.loop_driver`):
        a value, the ``id()`` of an array, or of the two carries' buffers in
        turn; an ``xs``, a per-iteration output and the iteration index are one
        view object each (``keep`` holds them), its data address moved to the
        row an iteration reads or writes -- so what a placement keeps does not
        grow with the trip count."""
        bound = self._parts_of_body[2]
        body, length = self.body, self.length
        nc, nx = body.n_carry, body.n_xs
        keep, rows = [], []

        def fixed_row(value):
            rows.append((value, 0, 0, 0, 0))

        def moving(a):
            """One view object for the rows of ``a``, in the order the steps run."""
            if length == 0:  # (no iteration reads it)
                keep.append(a)
                fixed_row(id(a))
                return
            view = a[0, ...]
            step = a.strides[0]
            first = _address(a) + (step * (length - 1) if self.reverse else 0)
            keep.append(view)
            rows.append((id(view), 0, first, -step if self.reverse else step, 1))

        for v in fixed:
            fixed_row(v)
        if body.index:
            moving(self._index)
        first, second = carries
        rows += [(id(a), id(b) - id(a), 0, 0, 0) for a, b in zip(first, second, strict=True)]
        for x in ops[nc:nc + nx]:
            moving(x)
        for c in ops[nc + nx:]:
            fixed_row(id(c))
        for v in bound:
            fixed_row(v)
        rows += [(id(b), id(a) - id(b), 0, 0, 0) for a, b in zip(first, second, strict=True)]
        for k in range(nc, len(body.graph.outputs)):
            moving(self._row(out, k))
        keep += [ops[nc + nx:], carries]
        return np.array(rows, np.int64).reshape(len(rows), 5), keep

    def _row(self, out, k):
        off, shape = self._parts[k]
        return out[off:off + math.prod(shape)].reshape(shape)

    #: ``(out, operands, whole, kept, work)`` of the last call whose operands the
    #: runner read in place (none staged, none moving): ``whole()`` runs that
    #: call again -- the initial carries copied in, the iterations, the final
    #: carries copied out; one native call where hybridad's compiler made the
    #: body -- so a call with the same objects again (a plan's loop, each call:
    #: an array's data never moves) runs it without looking at them
    _last = None

    def __call__(self, out, *operands, work=None):
        """Run the loop into ``out`` from ``operands`` (its carries' initial
        values, its xs, its constants); ``work``: its workspace in the calling
        plan's arena, for a body run natively (:func:`workspace_layout`)."""
        with self._lock:
            last = self._last
            if last is not None and last[0] is out and last[4] is work and \
                    len(operands) == len(last[1]) and all(map(operator.is_, operands, last[1])):
                self._checked(last[2], out, operands, work)
                return
            nc = self.body.n_carry
            ops = [self._canonical(i, a) for i, a in enumerate(operands)]
            if self._moving:
                site = _address(out)
                for (at, j), buf in self._moving.items():
                    if at == site:
                        np.copyto(buf, ops[j])
                        ops[j] = buf
            if self._parts_of_body is None:  # (the Python loop over the body's program)
                def run():
                    for ins, outs in self._steps(out, ops, self._carries):
                        self.call(ins, outs)
                self._copying(run, [self._row(out, k) for k in range(nc)], ops[:nc],
                              self._carries)()
                return
            hit = self._iterations(out, ops, work)
            if all(o is a for o, a in zip(ops, operands, strict=True)):
                # (kept by every address it reads but the initial carries', which
                # are copied in: several plans share a runner, and a loop inside
                # another's body starts from a row the outer loop moves each step)
                at = tuple(map(_address, (out, *ops[nc:]))) + \
                    (0 if work is None else _address(work),)
                got = self._wholes.get(at)
                if got is not None and (got[2] is not hit or not self._restart(got, ops[:nc])):
                    del self._wholes[at]  # (stale, or initial carries its table cannot take)
                    if got[1] is not None:  # (its copy rows free)
                        self._free_rows.append(got[1])
                    got = None
                if got is None:
                    if len(self._wholes) >= 2 * _PLACES:
                        old = self._wholes.pop(next(iter(self._wholes)))
                        if old[1] is not None:
                            self._free_rows.append(old[1])
                    got = self._wholes[at] = (*self._whole(hit, ops), hit,
                                              list(map(_address, ops[:nc])))
                self._last = (out, operands, got[0], got[1], work)
                whole = got[0]
            else:
                whole = self._copying(hit[0], hit[1], ops[:nc], hit[3])
            self._checked(whole, out, ops, work)

    def _checked(self, whole, out, ops, work):
        """``whole()``; where the body failed under the compiled driver (a
        status of its own module's: :class:`.jit.BodyFailed`), the iterations
        once more from the start, each a call of the body's own entry point,
        which raises the body's exception with its message (a singular
        matrix: numpy's ``LinAlgError``).  The loop reads only its operands
        (``ops``, a sequence: made a list only there)."""
        try:
            whole()
        except RuntimeError as e:
            if not isinstance(e, getattr(self._drive, "failed", ())):
                raise
            ops = list(ops)  # (:meth:`_steps` adds their constants to lists)
            own, _, bound = self._parts_of_body
            carries, fixed = self._on(work)
            for c, a in zip(carries[0], ops[:self.body.n_carry], strict=True):
                np.copyto(c, a)
            for ins, outs in self._steps(out, ops, carries):
                own(*fixed, *map(id, ins), *bound, *map(id, outs))
            raise

    def _whole(self, hit, ops):
        """``(whole, block)`` for a call kept for the next (its copy table made
        once, in ``block`` of the runner's copy rows, or None): ``whole()``
        runs the iterations of :meth:`_iterations`' entry ``hit`` from the
        initial carries in ``ops`` and copies the final carries to their
        place -- as one call of hybridad's driver where it made the body, else
        :meth:`_copying`."""
        run, finals, (_, table), carries = hit
        nc = self.body.n_carry
        if getattr(self._drive, "copies", False):
            pairs = list(zip(carries[0], ops[:nc], strict=True)) + \
                list(zip(finals, carries[self.length % 2], strict=True))
            if all(d.dtype == s.dtype and d.shape == s.shape and d.flags.c_contiguous and
                   s.flags.c_contiguous for d, s in pairs):
                if self._copy_rows is None:
                    self._copy_rows = np.zeros((2 * _PLACES, 2 * nc, 3), np.int64)
                block = self._free_rows.pop()
                rows = self._copy_rows[block]
                for j, (d, s) in enumerate(pairs):
                    rows[j] = _address(d), _address(s), d.nbytes
                return self._drive(table, self.length, (rows, nc, nc)), block
        return self._copying(run, finals, ops[:nc], carries), None

    def _restart(self, got, starts):
        """Whether :attr:`_wholes` entry ``got`` runs from initial carries
        ``starts``: its copy table is pointed at them where only their
        addresses changed (C arrays: the table copies bytes)."""
        seen = got[3]
        now = list(map(_address, starts))
        if now == seen:
            return True
        if got[1] is None or not all(a.flags.c_contiguous for a in starts):
            return False  # (a closure over the arrays, or a copy the table cannot make)
        rows = self._copy_rows[got[1]]
        for j, address in enumerate(now):
            rows[j, 1] = address
        seen[:] = now
        return True

    def _copying(self, run, finals, starts, carries):
        """``whole()``: the initial carries ``starts`` copied into the first
        set of ``carries``, ``run()`` (the iterations), the final carries
        copied to ``finals``."""
        first, last = carries[0], carries[self.length % 2]

        copyto = self._xp.copyto

        def whole():
            for c, a in zip(first, starts, strict=True):
                copyto(c, a)
            run()
            for dst, src in zip(finals, last, strict=True):
                copyto(dst, src)
        return whole
