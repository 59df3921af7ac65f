"""Arrays as numba types them, without numba: a view is a data pointer, a
shape and strides (:class:`~.values.ArrayV`), made and cut while
translating -- slices, reshapes, transposes and broadcasts cost no
instruction when their sizes are known, which in a plan they are.

Elements are read and written through the strides; an integer index that
may be negative wraps as in numba (``a[-1]``); ``a[...] = v`` and slice
assignments run loops over the target, broadcasting the value.

Every loop the translator emits is emitted inside :meth:`Arrays.loop`: a loop that reads or
writes memory backwards -- an element address that falls as its counter
rises (a reversed view ``x[::-1]``, an index ``n - 1 - i``) -- or that asks
for it (:func:`hybridad.backends.numba.simd.serial_loop`: a scan) is marked
``llvm.loop.vectorize.enable = false``.  LLVM 20's loop vectorizer costs
reversed accesses in two ways that disagree at some constant trip counts
(28-31 and 44-47 elements of a Cox likelihood's reversed cumulative sum:
llvm-project#177780), and llvmlite's LLVM, built with assertions, then
aborts the process ("VPlan cost model and legacy cost model disagreed").
"""

from __future__ import annotations

import contextlib

import numpy as np
from llvmlite import ir

from .values import BOOL, I64, ArrayV, Const, Scalar, TupleV, Unsupported, memtype

__all__ = ["Arrays"]

_I64 = ir.IntType(64)


def _is_int(v):
    return (isinstance(v, Const) and type(v.value) in (int, bool, np.int64, np.int32)) or \
        (isinstance(v, Scalar) and v.dtype.kind in "iub")


class Arrays:
    """Array operations emitted with ``ops`` (a :class:`~.scalars.ScalarOps`)."""

    def __init__(self, ops):
        self.ops = ops
        #: the loops being emitted, innermost last: ``[counter register or None,
        #: whether LLVM is not to vectorize it, the counter's direction (1, -1)]``
        self.loop_marks = []

    # -- loops ----------------------------------------------------------------------
    @contextlib.contextmanager
    def loop(self, counter, step=1):
        """While a loop's body and back edges are emitted: ``counter`` its
        counter (an i64 register, or None), ``step`` what each iteration adds
        to it (an int; 0 unknown).  The body's accesses are watched; the back
        edges the caller appends to the list it is given get the loop ID that
        turns LLVM's vectorization off where the loop runs backwards (or asked
        for it: :meth:`serial`)."""
        mark = [counter if step else None, False, 1 if step > 0 else -1]
        self.loop_marks.append(mark)
        latches = []
        try:
            yield latches
        finally:
            self.loop_marks.pop()
        if mark[1]:
            loop_id = no_vectorize(self.b.module)
            for latch in latches:
                latch.set_metadata("llvm.loop", loop_id)

    def serial(self):
        """The innermost loop is not to be vectorized."""
        if self.loop_marks:
            self.loop_marks[-1][1] = True

    def _watch(self, off):
        """Mark serial every loop around the access whose counter's rise makes
        the byte offset ``off`` fall -- the outer ones too: LLVM unrolls an
        inner loop of a few iterations away (a reversed ``(29, 1)`` array's
        inner loop of one), and the outer one is then the loop it vectorizes."""
        if not isinstance(off, ir.Value):
            return
        memo = {}
        for mark in self.loop_marks:
            counter, _, sign = mark
            if counter is not None and (_slope(off, counter, 0, memo.setdefault(
                    id(counter), {})) or 0) * sign < 0:
                mark[1] = True

    @property
    def b(self):
        return self.ops.b

    # -- index arithmetic (Python ints stay ints) --------------------------------
    def i64(self, v):
        if isinstance(v, int):
            return ir.Constant(_I64, v)
        if isinstance(v, ir.Value):
            return v
        return self.ops.scalar(v, I64).value

    def mul(self, a, c):
        if isinstance(a, int) and isinstance(c, int):
            return a * c
        if a == 0 or c == 0:
            return 0
        if a == 1:
            return c
        if c == 1:
            return a
        return self.b.mul(self.i64(a), self.i64(c))

    def add(self, a, c):
        if isinstance(a, int) and isinstance(c, int):
            return a + c
        if a == 0:
            return c
        if c == 0:
            return a
        return self.b.add(self.i64(a), self.i64(c))

    def sub(self, a, c):
        if isinstance(a, int) and isinstance(c, int):
            return a - c
        if c == 0:
            return a
        return self.b.sub(self.i64(a), self.i64(c))

    def dim(self, v):
        """An index or size value as a Python int (known) or an i64 register."""
        if isinstance(v, Const):
            if not _is_int(v):
                raise Unsupported(f"not an integer: {v.value!r}")
            return int(v.value)
        if isinstance(v, Scalar):
            if v.dtype.kind not in "iub":
                raise Unsupported("non-integer index")
            return self.ops.scalar(v, I64).value
        raise Unsupported(f"not an integer: {v!r}")

    def value(self, d):
        """A dim (int or i64 register) as a translator value."""
        return Const(d) if isinstance(d, int) else Scalar(d, I64)

    # -- making arrays ----------------------------------------------------------
    def from_address(self, address, shape, dtype, layout="C"):
        """The C-contiguous array of ``shape`` (dims) at integer ``address``."""
        dtype = np.dtype(dtype)
        ptr = self.b.inttoptr(self.i64(address), memtype(dtype).as_pointer())
        return ArrayV(dtype, ptr, shape, self.c_strides(shape, dtype.itemsize), "C")

    def c_strides(self, shape, itemsize):
        strides, step = [], itemsize
        for d in reversed(shape):
            strides.append(step)
            step = self.mul(step, d)
        return strides[::-1]

    def offset(self, a, nbytes):
        """``a``'s data pointer moved by ``nbytes``."""
        if nbytes == 0:
            return a.data
        i8 = ir.IntType(8).as_pointer()
        p = self.b.gep(self.b.bitcast(a.data, i8), [self.i64(nbytes)])
        return self.b.bitcast(p, a.data.type)

    def element_ptr(self, a, index):
        """Pointer to element ``index`` (dims, already wrapped) of ``a``."""
        off = 0
        for i, s in zip(index, a.strides, strict=True):
            off = self.add(off, self.mul(i, s))
        if self.loop_marks:
            self._watch(off)
        return self.offset(a, off)

    def wrap(self, i, n):
        """A possibly negative index ``i`` of an axis of ``n`` (numba's wraparound)."""
        if isinstance(i, int):
            if i < 0:
                return self.add(n, i)
            return i
        if self.ops.bound(i) is not None:  # (known nonnegative: a loop's counter)
            return i
        neg = self.b.icmp_signed("<", i, ir.Constant(_I64, 0))
        return self.b.select(neg, self.b.add(i, self.i64(n)), i)

    def load(self, a, index):
        ptr = self.element_ptr(a, index)
        v = self.b.load(ptr)
        if a.dtype == BOOL:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        return Scalar(v, a.dtype)

    def store(self, a, index, value):
        s = self.ops.scalar(value, a.dtype)
        v = s.value
        if a.dtype == BOOL:
            v = self.b.zext(v, ir.IntType(8))
        self.b.store(v, self.element_ptr(a, index))

    # -- views ----------------------------------------------------------------
    def getitem(self, a, key):
        """``a[key]``: an element (Scalar) or a view (ArrayV)."""
        items = key.items if isinstance(key, TupleV) else \
            [Const(v) for v in key.value] if isinstance(key, Const) and \
            isinstance(key.value, tuple) else [key]
        if any(isinstance(k, Const) and k.value is Ellipsis for k in items):
            if len(items) != 1:
                raise Unsupported("Ellipsis with other indices")
            return a
        if len(items) > a.ndim:
            raise Unsupported("too many indices")
        if all(_is_int(k) for k in items) and len(items) == a.ndim:
            idx = [self.wrap(self.dim(k), n) for k, n in zip(items, a.shape, strict=True)]
            return self.load(a, idx)
        return self.view(a, items)

    def view(self, a, items):
        """Basic indexing: integers drop an axis, slices keep it (steps known);
        the layout numba gives the result (``get_array_index_type``): a C
        array stays C when every index but the last given is an integer and
        the last is an integer or a slice written without a step (an F array
        likewise from the right, with every axis indexed)."""
        off, shape, strides = 0, [], []
        for d, (n, s) in enumerate(zip(a.shape, a.strides, strict=True)):
            k = items[d] if d < len(items) else Const(slice(None))
            if isinstance(k, Const) and isinstance(k.value, slice):
                start, stop, step = self.slice_bounds(k.value, n)
                off = self.add(off, self.mul(start, s))
                shape.append(self.slice_length(start, stop, step))
                strides.append(self.mul(s, step) if step != 1 else s)
            elif isinstance(k, TupleV) or (isinstance(k, Const) and k.value is None):
                raise Unsupported("newaxis or fancy index")
            else:
                i = self.wrap(self.dim(k), n)
                off = self.add(off, self.mul(i, s))

        def keeps(k, innermost):
            if not (isinstance(k, Const) and isinstance(k.value, slice)):
                return True  # an integer
            return innermost and k.value.step is None

        def contiguous(ks):
            return all(keeps(k, False) for k in ks[:-1]) and (not ks or keeps(ks[-1], True))

        layout = a.layout
        if layout == "C" and not contiguous(list(items)):
            layout = "A"
        elif layout == "F" and (len(items) < a.ndim or not contiguous(list(items)[::-1])):
            layout = "A"
        return ArrayV(a.dtype, self.offset(a, off), shape, strides, layout if shape else "C")

    def slice_bounds(self, sl, n):
        """``(start, stop, step)`` of slice ``sl`` over an axis of ``n`` (known
        step; start and stop known or not), clamped as Python does."""
        step = 1 if sl.step is None else sl.step
        if not isinstance(step, int) or step == 0:
            raise Unsupported("slice step")
        if isinstance(n, int) and all(isinstance(x, (int, type(None))) for x in
                                      (sl.start, sl.stop)):
            return slice(sl.start, sl.stop, step).indices(n)
        if step != 1:
            raise Unsupported("runtime slice with a step")
        start = 0 if sl.start is None else self._clamp(sl.start, n)
        stop = n if sl.stop is None else self._clamp(sl.stop, n)
        return start, stop, 1

    def _clamp(self, v, n):
        """A slice bound (int or register) wrapped and clamped to [0, n]."""
        if isinstance(v, int) and isinstance(n, int):
            v = v + n if v < 0 else v
            return min(max(v, 0), n)
        b = self.b
        v, nn = self.i64(v), self.i64(n)
        zero = ir.Constant(_I64, 0)
        v = b.select(b.icmp_signed("<", v, zero), b.add(v, nn), v)
        v = b.select(b.icmp_signed("<", v, zero), zero, v)
        return b.select(b.icmp_signed(">", v, nn), nn, v)

    def slice_length(self, start, stop, step):
        if all(isinstance(x, int) for x in (start, stop)):
            return len(range(start, stop, step))
        b = self.b
        d = b.sub(self.i64(stop), self.i64(start))
        return b.select(b.icmp_signed("<", d, ir.Constant(_I64, 0)), ir.Constant(_I64, 0), d)

    def reshape(self, a, shape):
        """``a.reshape(shape)`` without a copy: a C array in C order (numba
        also takes an F array in F order); ``-1`` takes the remaining size."""
        size = self.size(a)
        if any(isinstance(d, int) and d == -1 for d in shape):
            known = 1
            for d in shape:
                if not (isinstance(d, int) and d == -1):
                    known = self.mul(known, d)
            if not (isinstance(size, int) and isinstance(known, int)):
                raise Unsupported("reshape -1 of a runtime size")
            shape = [size // known if isinstance(d, int) and d == -1 else d for d in shape]
        if a.layout == "C" or self._known_c(a):
            return ArrayV(a.dtype, a.data, shape, self.c_strides(shape, a.dtype.itemsize), "C")
        if a.layout == "F":
            strides = self.c_strides(shape[::-1], a.dtype.itemsize)[::-1]
            return ArrayV(a.dtype, a.data, shape, strides, "F")
        raise Unsupported("reshape of a non-contiguous array")

    def _known_c(self, a):
        if not all(isinstance(x, int) for x in a.shape + a.strides):
            return False
        return [s for n, s in zip(a.shape, a.strides, strict=True) if n != 1] == \
            [s for n, s in zip(a.shape, self.c_strides(a.shape, a.dtype.itemsize),
                               strict=True) if n != 1]

    def view_as(self, a, dtype):
        """``a.view(dtype)``: the same bytes as another dtype -- of the same
        size, or (numba's rule) a C-contiguous array whose last axis is
        rescaled."""
        if dtype.itemsize == a.dtype.itemsize:
            return ArrayV(dtype, self.b.bitcast(a.data, memtype(dtype).as_pointer()), a.shape,
                          a.strides, a.layout)
        if a.layout != "C" or not a.shape:
            raise Unsupported("view to another size of a non-contiguous array")
        last = a.shape[-1]
        if isinstance(last, int):
            nbytes = last * a.dtype.itemsize
            if nbytes % dtype.itemsize:
                raise Unsupported("view: the last axis does not divide")
            new_last = nbytes // dtype.itemsize
        else:  # (numba raises when it does not divide; here it truncates)
            new_last = self.b.sdiv(self.mul(last, a.dtype.itemsize),
                                   ir.Constant(_I64, dtype.itemsize))
        shape = a.shape[:-1] + [new_last]
        return ArrayV(dtype, self.b.bitcast(a.data, memtype(dtype).as_pointer()), shape,
                      self.c_strides(shape, dtype.itemsize), "C")

    def transpose(self, a, axes=None):
        axes = list(range(a.ndim))[::-1] if axes is None else list(axes)
        if sorted(axes) != list(range(a.ndim)):
            raise Unsupported("transpose axes")
        layout = {"C": "F", "F": "C"}.get(a.layout, "A") if axes == list(range(a.ndim))[::-1] \
            else ("C" if axes == list(range(a.ndim)) and a.layout == "C" else "A")
        if a.ndim <= 1:
            layout = a.layout
        return ArrayV(a.dtype, a.data, [a.shape[k] for k in axes],
                      [a.strides[k] for k in axes], layout)

    def broadcast_to(self, a, shape):
        """``np.broadcast_to(a, shape)``: stride 0 on the new and size-1 axes."""
        lead = len(shape) - a.ndim
        if lead < 0:
            raise Unsupported("broadcast_to fewer axes")
        strides = [0] * lead
        for n, s, m in zip(a.shape, a.strides, shape[lead:], strict=True):
            if isinstance(n, int) and n == 1 and not (isinstance(m, int) and m == 1):
                strides.append(0)
            elif isinstance(n, int) and isinstance(m, int) and n != m:
                raise Unsupported("broadcast_to: incompatible shape")
            else:
                strides.append(s)
        return ArrayV(a.dtype, a.data, shape, strides, "A")

    def size(self, a):
        n = 1
        for d in a.shape:
            n = self.mul(n, d)
        return n

    # -- loops over every element (fill and copy) ---------------------------------
    def loop_nest(self, shape, body):
        """Emit loops over ``shape`` (dims); ``body(index)`` emits the inner code."""
        b = self.b
        if not shape:
            body([])
            return
        n = shape[0]
        if isinstance(n, int) and n == 0:
            return
        pre = b.block
        header = b.append_basic_block("nest.head")
        inner = b.append_basic_block("nest.body")
        done = b.append_basic_block("nest.end")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(_I64)
        i.add_incoming(ir.Constant(_I64, 0), pre)
        b.cbranch(b.icmp_signed("<", i, self.i64(n)), inner, done)
        b.position_at_end(inner)
        with self.loop(i) as latches:
            self.loop_nest(shape[1:], lambda rest: body([i] + rest))
            nxt = b.add(i, ir.Constant(_I64, 1))
            i.add_incoming(nxt, b.block)
            latches.append(b.branch(header))
        b.position_at_end(done)

    def fill(self, a, value):
        """Every element of ``a`` set to ``value``."""
        self.loop_nest(a.shape, lambda idx: self.store(a, idx, value))

    def copy(self, dst, src):
        """``dst[...] = src`` with ``src`` broadcast to ``dst``'s shape."""
        if isinstance(src, ArrayV):
            view = self.broadcast_to(src, dst.shape) if src.shape != dst.shape else src
            self.loop_nest(dst.shape, lambda idx: self.store(dst, idx, self.load(view, idx)))
        else:
            self.fill(dst, src)


def no_vectorize(module):
    """A new loop ID (``!llvm.loop``) of ``module`` that turns LLVM's
    vectorization of its loop off: self-referential, as LLVM's loop IDs are,
    and unique (llvmlite uniques metadata: made with a name of its own, then
    its first operand replaced by itself)."""
    off = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                               ir.Constant(ir.IntType(1), 0)])
    count = getattr(module, "_serial_loops", 0)
    module._serial_loops = count + 1
    loop = module.add_metadata([ir.MetaDataString(module, f"hybridad.serial.{count}"), off])
    loop.operands = (loop, off)
    return loop


def _slope(v, counter, depth, memo=None):
    """How much the i64 value ``v`` changes per step of the loop counter
    ``counter`` (an int), as far as adds, subtracts, multiplies by constants,
    casts and selects of equal slopes tell; 0 for what does not read the
    counter through them; None where that is unknown (``memo``: the values
    seen, each looked at once)."""
    if v is counter:
        return 1
    if not isinstance(v, ir.Instruction):  # (a constant, an argument)
        return 0
    if depth > 16:
        return None
    memo = {} if memo is None else memo
    if id(v) in memo:
        return memo[id(v)]
    op, args = v.opname, v.operands

    def of(a):
        return _slope(a, counter, depth + 1, memo)

    if op in ("add", "sub"):
        a, c = of(args[0]), of(args[1])
        out = None if a is None or c is None else a + c if op == "add" else a - c
    elif op == "mul":
        out = None
        for k in (0, 1):
            if isinstance(args[k], ir.Constant) and isinstance(args[k].constant, int):
                s = of(args[1 - k])
                out = None if s is None else s * args[k].constant
                break
        else:
            out = 0 if of(args[0]) == 0 and of(args[1]) == 0 else None
    elif op in ("sext", "zext", "trunc"):
        out = of(args[0])
    elif op == "select":
        a, c = of(args[1]), of(args[2])
        out = a if a == c else None
    else:
        out = 0  # (a load, a call, another loop's counter: not this counter's arithmetic)
    memo[id(v)] = out
    return out
