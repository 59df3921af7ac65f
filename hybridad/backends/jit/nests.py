"""A loop's runner called in object mode, run natively instead: a loop of a
plan, or one inside a loop body (:mod:`hybridad.backends.nesting`).

``with objmode(): runner(work, out, *operands)`` where ``runner`` offers
``nest()`` (:class:`hybridad.backends.loops.runner_named`) becomes, when the
runner's body is this compiler's machine code: the initial carries copied
into the workspace ``work``, the body called ``length`` times through its
address (read from a cell the load fills with the runner's context), each
array argument passed as the address of a stack word holding its data
pointer less the data field's offset (the body reads only that field of an
array argument), and the final carries copied into ``out``.  If the body
fails, the same call runs again through the Python site
(:func:`.sites._emit_call`): the inner loop reads only its operands and
writes only ``work`` and ``out``, so the run from the start raises the
body's own exception with its message.
"""

from __future__ import annotations

from llvmlite import ir

from .parallel import _counted
from .values import ArrayV, declare_global

__all__ = ["emit_nest", "nestable", "spec_matches"]

_I1 = ir.IntType(1)
_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _c(v):
    return ir.Constant(_I64, v)


def _c_order(v, first):
    """Whether array value ``v`` is C-contiguous from axis ``first`` on: numba's
    layout says so, or its shape and strides are constants that do (a
    broadcast operand's rows, its leading step 0)."""
    if not isinstance(v, ArrayV):
        return False
    if v.layout == "C":
        return True
    step = v.dtype.itemsize
    for d, s in zip(v.shape[:first - 1:-1] if first else v.shape[::-1],
                    v.strides[:first - 1:-1] if first else v.strides[::-1], strict=True):
        if not (isinstance(d, int) and isinstance(s, int)) or d > 1 and s != step:
            return False
        step *= d
    return True


def nestable(spec, values):
    """Whether the call's translated arguments ``values`` (``work``, ``out``,
    the operands) fit the inner loop of ``spec``: arrays of the body's dtypes,
    C-contiguous (an xs: its rows, whatever the step between them), a
    workspace known to be large enough."""
    nc, nx = spec["nc"], spec["nx"]
    if len(values) != 2 + nc + nx + spec["nconst"] or \
            not all(_c_order(v, 1 if 2 + nc <= k < 2 + nc + nx else 0)
                    for k, v in enumerate(values)):
        return False
    work = values[0]
    size = work.dtype.itemsize
    for d in work.shape:
        if not isinstance(d, int):
            return False
        size *= d
    return size >= spec["work"] and \
        [v.dtype.str for v in values[2:]] == spec["dtypes"]


def emit_nest(frame, symbol, spec, values, fallback):
    """Emit the native run of the inner loop of ``spec`` on ``values`` (see
    the module docstring); ``symbol``: the cell holding the address of the
    runner's context; ``fallback()`` emits the Python site's call."""
    b = frame.b
    module = frame.t.module
    data_off = spec["data"]
    nc, nx, nconst = spec["nc"], spec["nx"], spec["nconst"]
    length = spec["length"]
    work, out, *ops = values
    carries0, xs, consts = ops[:nc], ops[nc:nc + nx], ops[nc + nx:]

    def addr(v):
        return b.ptrtoint(v.data, _I64)

    w, o = addr(work), addr(out)
    cell = declare_global(module, symbol, _I8P)
    ctx = b.bitcast(b.load(cell), _I64.as_pointer())

    def ctx_word(j):
        return b.load(b.gep(ctx, [_c(j)]))

    fnty = ir.FunctionType(_I32, [_I64] * spec["nargs"])
    body = b.inttoptr(ctx_word(0), fnty.as_pointer())
    na = len(spec["arenas"])
    fixed = [b.add(w, _c(off)) for off in spec["arenas"]] + \
        [ctx_word(1 + j) for j in range(spec["n_fixed"] - na)]
    bound = [ctx_word(1 + spec["n_fixed"] - na + j) for j in range(spec["n_bound"])]
    # the stack words standing for array objects: two per carry (its two sets),
    # then the index's (its value and the word pointing at it), the xs, the
    # constants and the per-iteration outputs
    rows = spec["rows"]
    nwords = 2 * nc + 2 + nx + nconst + len(rows)
    words = frame.state.slot(ir.ArrayType(_I64, nwords))

    def word(j):
        return b.gep(words, [ir.Constant(_I32, 0), ir.Constant(_I32, j)])

    def obj(j):  # (the body reads the data pointer at obj + data_off)
        return b.sub(b.ptrtoint(word(j), _I64), _c(data_off))

    memcpy = module.declare_intrinsic("llvm.memcpy", [_I8P, _I8P, _I64])

    def copy(dst, src, nbytes):
        b.call(memcpy, [b.inttoptr(dst, _I8P), b.inttoptr(src, _I8P), _c(nbytes),
                        ir.Constant(_I1, 0)])

    for k, a in enumerate(carries0):  # the initial carries into the first set
        copy(b.add(w, _c(spec["carries"][0][k])), addr(a), spec["carry_bytes"][k])
    for s in range(2):
        for k in range(nc):
            b.store(b.add(w, _c(spec["carries"][s][k])), word(s * nc + k))
    at_index, at_xs = 2 * nc, 2 * nc + 2
    at_consts, at_rows = at_xs + nx, at_xs + nx + nconst
    b.store(b.ptrtoint(word(at_index), _I64), word(at_index + 1))
    for j, c in enumerate(consts):
        b.store(addr(c), word(at_consts + j))
    steps = [frame.arr.i64(x.strides[0]) for x in xs]
    starts = [addr(x) for x in xs]

    fail = b.append_basic_block("nest.fail")
    done = b.append_basic_block("nest.done")

    def iteration(t):
        row = b.sub(_c(length - 1), t) if spec["reverse"] else t  # (the row it reads, writes)
        if spec["index"]:
            b.store(b.add(row, _c(spec["start"])), word(at_index))
        for j, (start, step) in enumerate(zip(starts, steps, strict=True)):
            b.store(b.add(start, b.mul(row, step)), word(at_xs + j))
        for j, (off, nbytes) in enumerate(rows):
            b.store(b.add(o, b.add(_c(off), b.mul(row, _c(nbytes)))), word(at_rows + j))
        odd = b.icmp_signed("!=", b.and_(t, _c(1)), _c(0))
        cur = [b.select(odd, obj(nc + k), obj(k)) for k in range(nc)]
        other = [b.select(odd, obj(k), obj(nc + k)) for k in range(nc)]
        args = fixed + ([obj(at_index + 1)] if spec["index"] else []) + cur + \
            [obj(at_xs + j) for j in range(nx)] + [obj(at_consts + j) for j in range(nconst)] + \
            bound + other + [obj(at_rows + j) for j in range(len(rows))]
        status = b.call(body, args)
        cont = b.append_basic_block("nest.next")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(_I32, 0)), fail, cont)
        b.position_at_end(cont)

    _counted(b, _c(0), _c(length), iteration)
    last = length % 2
    for k in range(nc):  # the final carries out
        copy(b.add(o, _c(spec["finals"][k])), b.add(w, _c(spec["carries"][last][k])),
             spec["carry_bytes"][k])
    b.branch(done)
    b.position_at_end(fail)
    fallback()
    b.branch(done)
    b.position_at_end(done)


def spec_matches(spec, current):
    """Whether the ``spec`` a cached object was translated with is the
    runner's now (its JSON round trip: lists for tuples)."""
    import json

    return current is not None and json.loads(json.dumps(current[0])) == spec

