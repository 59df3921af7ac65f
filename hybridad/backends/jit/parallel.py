"""``prange`` loops on numba's threads, as numba's parfors run them.

A ``prange`` loop of a function compiled with ``parallel=...`` becomes a
kernel ``void k(char **args, intp *dims, intp *steps, void *data)`` -- the
calling convention of numba's gufunc kernels -- that runs the iterations of
its rows of a schedule; the loop itself becomes a call of numba's threading
layer (``numba_parallel_for``, whichever layer numba picked: TBB, OpenMP or
its work queue) with one row per thread.  The thread count is numba's
(``get_num_threads``, which ``numba.set_num_threads`` and hybridad's thread
choice set); ``get_thread_id()`` in the body is the worker's number, as in
numba, so per-thread scratch is indexed the same way.

The variables the body reads are packed into a struct passed as ``data``.
The body's own assignments are private to an iteration: a variable it reads
before assigning (a reduction across iterations) is refused, as is one read
after the loop.  The loop is split into contiguous equal chunks, one per
thread, so each iteration runs once whatever the count.
"""

from __future__ import annotations

import ast
import contextlib

from llvmlite import ir

from .analysis import loop_names, reads
from .values import I64, UNDEF, ArrayV, Const, Scalar, TupleV, Unsupported, declare

__all__ = ["prange_loop", "start_threads"]

_I8P = ir.IntType(8).as_pointer()
_I64 = ir.IntType(64)


def start_threads():
    """Start numba's threading layer; its symbols (``numba_parallel_for``,
    ``get_num_threads``, ``get_thread_id``) are then known to LLVM.  Its pool
    must not be larger than the plans' per-thread scratch was sized for."""
    import numba  # noqa: F401 -- first: waits for another thread's import of numba
    from numba.np.ufunc.parallel import _launch_threads

    from ..numba.layouts import check_pool_size

    _launch_threads()
    check_pool_size()


def _layer_symbol(name):
    """A symbol of numba's threading layer (numba registers them as it starts)."""
    from . import engine

    start_threads()
    return engine._llvm().address_of_symbol(name)


def _register_symbols():
    from . import engine

    for name in ("numba_parallel_for", "get_num_threads", "get_thread_id"):
        engine.SYMBOLS[name] = (lambda n: lambda: _layer_symbol(n))(name)


_register_symbols()


def max_threads():
    from numba import config

    return int(config.NUMBA_NUM_THREADS)


def thread_id(frame, args, kwargs):
    """``numba.get_thread_id()``: the worker's number (0 outside a parallel loop)."""
    start_threads()
    fn = declare(frame.b.module, "get_thread_id", _I64, [])
    return Scalar(frame.b.call(fn, []), I64)


def _pack(frame, v):
    """(rebuild(regs) -> value, LLVM registers) of a value the body reads."""
    if isinstance(v, Const):
        return (lambda regs: v), []
    if isinstance(v, Scalar):
        return (lambda regs: Scalar(regs[0], v.dtype)), [v.value]
    if isinstance(v, ArrayV):
        dims = [d if isinstance(d, int) else None for d in v.shape + v.strides]
        regs = [v.data] + [d for d in v.shape + v.strides if not isinstance(d, int)]

        def rebuild(r):
            r = list(r)
            data = r.pop(0)
            fill = [r.pop(0) if d is None else d for d in dims]
            return ArrayV(v.dtype, data, fill[:v.ndim], fill[v.ndim:], v.layout)
        return rebuild, regs
    if isinstance(v, TupleV):
        subs = [_pack(frame, x) for x in v.items]

        def rebuild_t(r):
            out, at = [], 0
            for (fn, regs) in subs:
                out.append(fn(r[at:at + len(regs)]))
                at += len(regs)
            return TupleV(out)
        return rebuild_t, [x for _, regs in subs for x in regs]
    raise Unsupported(f"prange body reads {v!r}")


def prange_loop(frame, node, start, stop):
    """Translate ``for target in prange(start, stop): body`` (``start`` and
    ``stop`` dims) in ``frame`` as a parallel loop."""
    target = node.target.id
    assigned, exposed = loop_names(node, target)
    if exposed & assigned:
        raise Unsupported("prange body carries a variable across iterations")
    if any(isinstance(n, (ast.Raise, ast.Return, ast.Break, ast.Continue))
           for s in node.body for n in ast.walk(s)):
        raise Unsupported("raise, return, break or continue in a prange body")
    start_threads()
    free = sorted(n for n in set().union(*(reads(s) for s in node.body))
                  if n in frame.env and n != target and frame.env[n] is not UNDEF)
    packs = {n: _pack(frame, frame.env[n]) for n in free}
    b, t = frame.b, frame.t
    module = b.module
    i32 = ir.IntType(32)
    status = frame.state.slot(i32)  # a kernel's failure (a call that raised)
    b.store(ir.Constant(i32, 0), status)
    regs = [status] + [r for n in free for r in packs[n][1]]
    struct = ir.LiteralStructType([r.type for r in regs])
    slot = frame.state.slot(struct)
    for k, r in enumerate(regs):
        b.store(r, b.gep(slot, [ir.Constant(i32, 0), ir.Constant(i32, k)]))
    data = b.bitcast(slot, _I8P)
    # the kernel
    kty = ir.FunctionType(ir.VoidType(), [_I8P.as_pointer(), _I64.as_pointer(),
                                          _I64.as_pointer(), _I8P])
    kernel = ir.Function(module, kty, name=f"{frame.state.fn.name}.prange{len(module.globals)}")
    kernel.linkage = "internal"
    ks = type(frame.state)(t, kernel)
    kf = type(frame)(ks, frame.fkey, frame.fdef, frame.globals, frame.ops.flags, serial_prange=True)
    kb = ks.b
    kargs, kdims, _, kdata = kernel.args
    env = dict(frame.env)
    for n in assigned:
        env.pop(n, None)
    sp = kb.bitcast(kdata, struct.as_pointer())
    loaded = [kb.load(kb.gep(sp, [ir.Constant(i32, 0), ir.Constant(i32, k)]))
              for k in range(len(regs))]
    ks.status_ptr = loaded[0]
    at = 1
    for n in free:
        fn, r = packs[n]
        env[n] = fn(loaded[at:at + len(r)])
        at += len(r)
    sched = kb.bitcast(kb.load(kargs), _I64.as_pointer())
    rows = kb.load(kdims)
    kf.env = env

    # a loop from a start >= 0: each thread's bounds are too, which LLVM is
    # told (!range), so that it drops numba's wraparound of a negative index
    # (``o[1 + i]``: a select per access kept the loop from vectorizing, 1.7x
    # slower on one thread than the serial loop, whose bounds it knows)
    nonneg = isinstance(start, int) and start >= 0
    bounds = module.add_metadata([ir.Constant(_I64, 0), ir.Constant(_I64, 2 ** 63 - 1)])

    def body(index):
        row = index[0]
        lo = kb.load(kb.gep(sched, [kb.mul(row, ir.Constant(_I64, 2))]))
        hi = kb.load(kb.gep(sched, [kb.add(kb.mul(row, ir.Constant(_I64, 2)),
                                           ir.Constant(_I64, 1))]))
        if nonneg:
            lo.set_metadata("range", bounds)
            hi.set_metadata("range", bounds)
        def iteration(i):
            if nonneg:  # (and so the counter: no wraparound emitted, .scalars.ScalarOps.bound)
                kf.ops.note(i, kf.ops.bound(stop))
            _iteration(kf, node, target, i, env)
        _counted(kb, lo, hi, iteration, kf.arr)
    kf.arr.loop_nest([rows], body)
    kb.ret_void()
    ks.finish()
    # the call: one row [lo, hi) per thread
    nmax = max_threads()
    get_n = declare(module, "get_num_threads", _I64, [])
    pfor = declare(module, "numba_parallel_for", ir.VoidType(), [_I8P] * 5 + [_I64] * 3)
    arr = frame.arr
    lo0, hi0 = arr.i64(start), arr.i64(stop)
    total = b.sub(hi0, lo0)
    with b.if_then(b.icmp_signed(">", total, ir.Constant(_I64, 0))):
        # one row per thread, empty rows when there are more threads than
        # iterations: the layer sets every thread's count (the caller's too,
        # with OpenMP) to the number it is given, so it must be the caller's own
        n = b.call(get_n, [])
        n = b.select(b.icmp_signed(">", n, ir.Constant(_I64, nmax)), ir.Constant(_I64, nmax), n)
        table = frame.state.slot(ir.ArrayType(_I64, 2 * nmax))
        base = b.bitcast(table, _I64.as_pointer())
        each, rem = b.sdiv(total, n), b.srem(total, n)

        def fill(index):
            k = index[0]
            extra = b.select(b.icmp_signed("<", k, rem), k, rem)
            lo = b.add(lo0, b.add(b.mul(k, each), extra))
            size = b.add(each, b.zext(b.icmp_signed("<", k, rem), _I64))
            b.store(lo, b.gep(base, [b.mul(k, ir.Constant(_I64, 2))]))
            b.store(b.add(lo, size), b.gep(base, [b.add(b.mul(k, ir.Constant(_I64, 2)),
                                                       ir.Constant(_I64, 1))]))
        arr.loop_nest([n], fill)
        args = frame.state.slot(_I8P)
        dims = frame.state.slot(_I64)
        steps = frame.state.slot(_I64)
        b.store(b.bitcast(base, _I8P), args)
        b.store(n, dims)
        b.store(ir.Constant(_I64, 16), steps)
        b.call(pfor, [b.bitcast(kernel, _I8P), b.bitcast(args, _I8P), b.bitcast(dims, _I8P),
                      b.bitcast(steps, _I8P), data, ir.Constant(_I64, 0), ir.Constant(_I64, 1),
                      n])
        code = b.load(status)
        with b.if_then(b.icmp_signed("!=", code, ir.Constant(i32, 0)), likely=False):
            frame.state.fail(code)
    t.parallel = True
    # names the body assigned are unknown after it
    for name in assigned:
        if name in frame.env:
            frame.env[name] = UNDEF
    return True


def _counted(b, lo, hi, body, arr=None):
    """``for i in range(lo, hi): body(i)`` with registers ``lo``, ``hi``;
    ``arr``: the body's :class:`~.arrays.Arrays`, which watches its accesses
    (None: a body of calls)."""
    pre = b.block
    head = b.append_basic_block("pr.head")
    inner = b.append_basic_block("pr.body")
    done = b.append_basic_block("pr.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(_I64)
    i.add_incoming(lo, pre)
    b.cbranch(b.icmp_signed("<", i, hi), inner, done)
    b.position_at_end(inner)
    with contextlib.nullcontext([]) if arr is None else arr.loop(i) as latches:
        body(i)
        i.add_incoming(b.add(i, ir.Constant(_I64, 1), flags=["nsw"]), b.block)  # (i < hi)
        latches.append(b.branch(head))
    b.position_at_end(done)


def _iteration(kf, node, target, i, env):
    """One iteration of the body, its own names fresh."""
    kf.env = dict(env)
    kf.env[target] = Scalar(i, I64)
    if not kf.stmts(node.body):
        raise Unsupported("a prange body that does not complete")
