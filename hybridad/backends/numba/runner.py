"""Running a compiled plan: :class:`NumbaProgram` (staging of other arguments,
the plan's lock, single-threaded BLAS) and the argument checks the
generated function makes before it writes anything (:class:`_Checks`)."""

from __future__ import annotations

import numpy as np

from ..._forksafe import RLock, call_ends, call_starts
from .threads import SingleThreadedBlas, ThreadChoice, refuse_forked_openmp


def _literal(value):
    """Exact source text of a numpy scalar."""
    v = value.item()
    if isinstance(v, float):
        text = f"float.fromhex({v.hex()!r})" if np.isfinite(v) else f"float({str(v)!r})"
    else:
        text = repr(v)
    return f"np.{value.dtype.name}({text})"


class NumbaProgram:
    """A compiled whole-plan function and the Python calls that feed it.

    The function is compiled for ONE signature by a dispatcher of its own that
    then refuses to compile more, so an unusual argument never triggers a
    compilation mid-loop.  It takes every array as an *object* -- the integer
    ``id(array)`` -- and reads numpy's array struct itself (:mod:`.rt`): no
    argument is unboxed, so a call makes no numba runtime allocation.  Before
    writing anything it checks that each argument is an exact ndarray of the
    plan's shape and dtype, native byte order, aligned and C-contiguous (and
    writeable for outputs), and that no two of them overlap, and raises
    ``ValueError`` otherwise.  :meth:`run` stages anything else (non-contiguous
    arrays, another float dtype, subclasses) through buffers made once.

    Where :data:`.rt.ABI` could not be established the function takes the
    arrays themselves (numba unboxes each: one NRT allocation per array per
    call) and ``objects`` is False; the checks are the same.

    Attributes
    ----------
    direct : dict
        buffer node id -> output position, for buffers computed straight
        into the caller's result (set by :func:`compile_numba_program`).
    parts : tuple
        ``(dispatcher, leading, constants)``: ``fn(*ins, *outs)`` is
        ``dispatcher(*leading, *ins, *constants, *outs)`` (for callers that
        generate their own call, like the plan's fast path).
    checked_parts : tuple or None
        The same with the leading arguments that run the plan's decision
        check inside the program first (:mod:`.prelude`), where it carries
        one; raises :class:`hybridad.errors.DecisionsChanged` before any write.
    lean_parts : tuple or None
        The same with the leading arguments that skip the copies of the
        program's optional outputs (``compile_numba_program``'s
        ``optional_outputs``), where it has some.
    fn : callable
        ``fn(*inputs, *outputs)`` for canonical arguments, given as
        ``id(array)`` when :attr:`objects` (raises ``TypeError`` for other
        argument types, ``ValueError`` when a check fails).
    objects : bool
        Whether arrays are passed as ``id(array)``.
    source : str
        The generated module.
    heavy : bool
        Whether the plan is large enough to release the GIL (``nogil``,
        ``prange``), or switches to Python while it runs (a host call, a
        loop's runner: other threads may run meanwhile); calls on one program
        are then serialized by :attr:`lock`.
    lock : lock
        Serializes what shares this program's workspace: every :meth:`run`
        (its staging buffers, the call and the copies back) and, for a heavy
        program, every :meth:`call`.  A plan gives all its programs its own
        (re-entrant) lock, since they share one arena.  A light program's
        :meth:`call` takes no lock: it holds the GIL from its checks to its
        last write (nothing in it runs Python), which makes it atomic.
    threads : ThreadChoice or None
        A parallel program's thread count, chosen from measured call times
        (:mod:`.threads`); None for a serial one.
    compiler : str
        Which compiler made :attr:`fn`, in words: hybridad's own
        (:mod:`hybridad.backends.jit`) or numba, and why numba.
    blas_limited : bool
        Whether the program makes a BLAS or LAPACK call large enough for BLAS's
        own threads (:func:`.threshold.blas_may_thread`): it then runs with
        BLAS single-threaded (:mod:`.threads`), so that its sums are in the
        same order on any thread count, and it is :attr:`heavy`.  A small plan
        holds the GIL while it runs, which serializes it at no cost (a lock
        costs ~0.3 us, as much as the whole n = 100 kernel).
    """

    compiler = "numba"
    checked_parts = checked_call = lean_parts = lean_call = None

    def __init__(self, fn, source, heavy, in_specs, out_specs, keep, objects):
        self.fn = fn
        self.source = source
        self.heavy = heavy
        self.objects = objects
        self.lock = RLock()
        self._in_specs = [(tuple(s), np.dtype(d)) for s, d in in_specs]
        self._out_specs = [(tuple(s), np.dtype(d)) for s, d in out_specs]
        self._staged = {}
        self._keep = keep  # arrays whose addresses the compiled call holds
        self.blas_limited = False
        self.threads = None  # a parallel program's ThreadChoice (set by set_parallel)
        self.parallel = False
        # the compiled functions whose object-mode blocks numba has not compiled
        # yet (:meth:`_first_call`); none without such blocks
        self._lifted = None if "with _objmode(" not in source else set()

    def set_parallel(self, parallel):
        """Whether the program has ``prange`` loops: its thread count is then
        chosen call by call from measured times (:class:`.threads.ThreadChoice`),
        unless ``HYBRIDAD_THREAD_CHOICE=0`` (then all threads, always)."""
        self.threads = ThreadChoice() if parallel and ThreadChoice.enabled() else None
        self.parallel = bool(parallel)

    def _stage(self, key, shape, dtype):
        buf = self._staged.get(key)
        if buf is None:
            buf = self._staged[key] = np.empty(shape, dtype)
        return buf

    def run(self, inputs, outputs):
        """Run on any arrays of the plan's shapes (validated by the caller):
        the staging, the call and the copies back, under :attr:`lock`."""
        with self.lock:
            ins, outs, copies = [], [], []
            for i, a in enumerate(inputs):
                shape, dtype = self._in_specs[i]
                if not (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
                        and a.flags.aligned and (self.objects or a.flags.writeable)):
                    buf = self._stage(("in", i), shape, dtype)
                    np.copyto(buf, a, casting="unsafe")
                    a = buf
                ins.append(a)
            for k, o in enumerate(outputs):
                shape, dtype = self._out_specs[k]
                if not (type(o) is np.ndarray and o.dtype == dtype and o.flags.c_contiguous
                        and o.flags.aligned and o.flags.writeable):
                    buf = self._stage(("out", k), shape, dtype)
                    copies.append((o, buf))
                    o = buf
                outs.append(o)
            self.call(ins, outs)
            for o, buf in copies:
                np.copyto(o, buf, casting="unsafe")

    def call(self, ins, outs):
        """The compiled function on canonical arrays (the caller keeps them alive)."""
        args = [id(a) for a in ins + outs] if self.objects else ins + outs
        if not self.heavy:
            return self.fn(*args)  # holds the GIL throughout: atomic
        return self.invoke(*args)

    def invoke(self, *args):
        """The compiled function on its final arguments (``id(array)`` when
        :attr:`objects`), for a heavy program: under :attr:`lock`, on the thread
        count :attr:`threads` chooses for a parallel program, and BLAS
        single-threaded when :attr:`blas_limited` (on every thread count: the
        same sums, and one owner of the cores per call)."""
        return self._invoke(self.fn, args)

    def invoke_checked(self, *args):
        """:meth:`invoke` running the decision check the program carries first
        (:attr:`checked_parts`)."""
        return self._invoke(self.checked_call, args)

    def invoke_lean(self, *args):
        """:meth:`invoke` skipping the copies of the optional outputs
        (:attr:`lean_parts`)."""
        return self._invoke(self.lean_call, args)

    def _invoke(self, fn, args):
        if self.parallel:
            refuse_forked_openmp("a parallel plan")
        with self.lock:
            if self._lifted is not None and fn not in self._lifted:
                return self._first_call(fn, args)
            call_starts()  # (a fork waits for the call: it runs without the GIL)
            try:
                if self.threads is not None:
                    return self.threads(fn, args, self.blas_limited)
                if self.blas_limited:
                    with SingleThreadedBlas():
                        return fn(*args)
                return fn(*args)
            finally:
                call_ends()

    def _first_call(self, fn, args):
        """The first call of compiled function ``fn`` with object-mode blocks
        (a loop's runner, a host call), under the lock: numba compiles those
        blocks at their first call where the function came from its disk cache,
        and warns then that they hold the GIL despite ``nogil`` -- generated
        code's business, not the user's (the builds filter numba's warnings
        the same way)."""
        import warnings

        from numba.core.errors import NumbaWarning

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*object mode.*", category=NumbaWarning)
            self._lifted.add(fn)
            return self._invoke(fn, args)


def _type_nums(dtype):
    """numpy's type numbers of every dtype equal to ``dtype`` (int64 is both
    ``long`` and ``longlong`` on some platforms)."""
    nums = set()
    for code in np.typecodes["All"]:
        try:
            d = np.dtype(code)
        except TypeError:
            continue
        if d == dtype:
            nums.add(d.num)
    return sorted(nums | {np.dtype(dtype).num})


def view_at(address, shape, dtype, order="C"):
    """Source of the array of ``shape`` at ``address`` (an expression), by the
    intrinsic :func:`.rt.view_at`: sizes given as ``np.int64`` (not literals,
    which numba would type one by one), a 1-D size as a number, others as a
    tuple.  A view costs numba ~10 ms to compile: a plan cuts dozens, so views
    nothing reads are not emitted (:func:`_drop_unused_views`)."""
    shape = tuple(int(d) for d in shape)
    shape = shape if order == "C" else shape[::-1]
    dt = f"np.{np.dtype(dtype).name}"
    if len(shape) == 1:
        src = f"_view({address}, np.int64({shape[0]}), {dt})"
    else:  # 0-d or >= 2-d: a tuple literal of np.int64 sizes
        dims = ", ".join(f"np.int64({d})" for d in shape)
        src = f"_view({address}, ({dims}), {dt})"
    return src + (".T" if order == "F" else "")


class _Checks:
    """The checks opening a generated plan (before any write), driven by a
    table the plan owns (:func:`.rt.check_arrays`): one line per array in the
    generated source, so the checks cost almost nothing to compile."""

    def __init__(self, objects, trusted=False):
        self.objects = objects
        #: the caller made every array itself, as the plan's specs say (a loop
        #: body's, by the loop runner): no check, the data addresses only
        self.trusted = bool(trusted and objects)
        self.records = []  # (name, shape, dtype, flags, written, order)
        #: captured constants of other strides, by object with no check (the plan
        #: holds them): (name, C-contiguous hull shape, index into it, dtype)
        self.strided = []

    def add(self, name, shape, dtype, written, order="C"):
        from . import abi as rt

        flags = rt.ALIGNED | (rt.C_CONTIGUOUS if order == "C" else rt.F_CONTIGUOUS) | \
            (rt.WRITEABLE if written else 0)
        self.records.append((name, tuple(int(d) for d in shape), np.dtype(dtype), flags,
                             written, order))

    def add_strided(self, name, hull, index, offset, dtype):
        """A constant passed by object and read as ``index`` of the C-contiguous
        array ``hull`` at ``offset`` bytes from its data address
        (:func:`strided_hull`)."""
        self.strided.append((name, hull, index, int(offset), np.dtype(dtype)))

    def table(self):
        """The int64 check table (object fields filled per call)."""
        from . import abi as rt

        n = len(self.records)
        dims = [d for _, shape, *_ in self.records for d in shape]
        t = np.zeros(n * rt.RECORD + len(dims) + 1, np.int64)
        at = n * rt.RECORD
        for j, (_, shape, dtype, flags, written, _) in enumerate(self.records):
            nums = _type_nums(dtype)
            r = j * rt.RECORD
            t[r + rt.NDIM], t[r + rt.FLAGS] = len(shape), flags
            t[r + rt.TYPE1], t[r + rt.TYPE2] = nums[0], nums[-1]
            t[r + rt.NBYTES], t[r + rt.WRITTEN] = _nbytes(shape, dtype), int(written)
            t[r + rt.DIMS] = at
            t[at:at + len(shape)] = shape
            at += len(shape)
        return t

    def lines(self, size):
        out = [] if self.trusted else self._check_lines(size)
        if self.objects:
            for name, shape, dtype, _, _, order in self.records:
                out.append(f"{name}d = _ld64({name}p + _ABI[1])")
                out.append(f"{name} = " + view_at(f"{name}d", shape, dtype, order))
            for name, hull, index, offset, dtype in self.strided:
                shift = f" - {-offset}" if offset else ""
                out.append(f"{name}d = _ld64({name}p + _ABI[1]){shift}")
                out.append(f"{name} = " + view_at(f"{name}d", hull, dtype) + index)
        return out

    def _check_lines(self, size):
        from . import abi as rt

        out = []
        if not self.objects:  # numba typed the arrays; their shapes remain
            for name, shape, *_ in self.records:
                out += [f"if {name}.shape != {shape!r}:",
                        f"    raise ValueError('{name} does not have shape {shape}')"]
        out.append(f"_t = _view(_tabp, np.int64({size}), np.int64)")
        for j, (name, *_) in enumerate(self.records):
            src = f"{name}p" if self.objects else f"{name}.ctypes.data"
            out.append(f"_t[{j * rt.RECORD + rt.OBJ}] = {src}")
        out += [f"_e = _check(_ndt, _tabp, {len(self.records)}, {size}, "
                f"{int(self.objects)}, _ABI)",
                "if _e >= 0:",
                f"    if _e % 4 == {rt.OVERLAP}:",
                "        raise ValueError('out buffers must not share memory with each other "
                "or with the arguments')",
                "    raise ValueError('an argument or result buffer is not an aligned, "
                "contiguous array of the plan\\'s dtype and shape')"]
        return out

    def addresses(self):
        """name -> (data address expression, shape, dtype, "C") of the C-contiguous arrays."""
        if not self.objects:
            return {}
        return {name: (f"{name}d", shape, dtype, order)
                for name, shape, dtype, *_, order in self.records if order == "C"}


def strided_hull(array):
    """``(hull, index, offset)``: a C-contiguous shape at ``offset`` bytes from
    ``array``'s data address and the index source (``"[:, :4]"``) that reads
    ``array`` out of it -- for a view whose strides, in magnitude, are
    decreasing and each a multiple of the next (a column block, every k-th
    row or element of a C array; reversed along any axis, ``k[::-1]``: that
    axis read backward from the hull's lowest address) -- else None.  The
    hull may reach past ``array``'s last element (its rows are padded to the
    stride); only ``array``'s own elements are read."""
    size = array.itemsize
    hull, index, prev, offset = [], [], None, 0
    for n, st in zip(array.shape, array.strides, strict=True):
        if n == 1:  # any stride: an axis of one
            hull.append(1)
            index.append(":")
            continue
        if st == 0 or st % size:
            return None
        back = st < 0
        if back:  # (the first element of the axis is its highest address)
            offset += (n - 1) * st
        e = abs(st) // size
        if prev is None:
            hull.append(n)
            index.append("::-1" if back else ":")
        else:
            if prev % e or n * e > prev:  # not nested, or rows that overlap
                return None
            hull.append(prev // e)
            index.append(f"{n - 1}::-1" if back else f":{n}")
        prev = e
    if prev is None:
        return None  # (no axis longer than one: contiguous, not here)
    if prev > 1:  # the last axis skips elements: an axis of the stride, read at 0
        hull.append(prev)
        index.append("0")
    return tuple(hull), "[" + ", ".join(index) + "]", offset


def _nbytes(shape, dtype):
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
