"""The translator: the numba backend's generated module, as Python syntax
trees, into one LLVM module -- statements and control flow here, expressions
and calls in :mod:`.exprs`.

Variables are SSA values while translating (Braun et al., "Simple and
efficient construction of SSA form", on structured control flow): each
assignment binds a name to a value; where branches join, a name bound to
different values becomes a phi; a loop gives a phi to each name its body
assigns.  A loop variable whose type widens in the body (an int that becomes
a float, a known size that becomes a register) restarts the translation with
the wider type (:class:`Retype`), as numba's type inference would have
found it.

Functions of the generated module (the plan, its kernels and parts) become
LLVM functions of their own, ``i32 f(args)``: 0, or the number of the
exception raised (:attr:`Translator.raises`).  Library functions they call
(``vmath``, ``folds``, ``rt``) are translated inline, each call in its
caller's frame, from their Python source.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
from llvmlite import ir

from .analysis import loop_names
from .arrays import Arrays
from .exprs import Expressions
from .parallel import prange_loop
from .sites import object_mode
from .scalars import ScalarOps
from .ssa import Joins, Retype
from .values import BOOL, I64, UNDEF, ArrayV, Const, Scalar, TupleV, Unsupported, promote

__all__ = ["Frame", "FnState", "Retype", "function_tree"]

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


class FnState:
    """One LLVM function being built: its builder, and a first block that
    holds its stack slots (``alloca``, see :meth:`slot`) and then branches to
    the code (:meth:`finish`)."""

    def __init__(self, translator, fn):
        self.t = translator
        self.fn = fn
        self.allocas = fn.append_basic_block("allocas")
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._first = self.b.block

    #: a parallel loop's kernel (void): where a failure's status goes (see .parallel)
    status_ptr = None

    def slot(self, llty):
        """A stack slot of type ``llty`` made once, at the function's start."""
        return ir.IRBuilder(self.allocas).alloca(llty)

    def fail(self, status):
        """Leave the function with ``status`` (an i32, nonzero): returned, or
        in a parallel loop's kernel stored for the loop's caller."""
        if self.status_ptr is None:
            self.b.ret(status)
        else:
            self.b.store(status, self.status_ptr)
            self.b.ret_void()

    def finish(self):
        ir.IRBuilder(self.allocas).branch(self._first)


class Frame(Expressions, Joins):
    """The translation of one Python function's body into an LLVM function:
    the function's own (a generated function), or inlined in another's (a
    library function called from it)."""

    def __init__(self, state, fkey, fdef, globals_, flags=(), serial_prange=True):
        self.state = state
        self.t = state.t
        self.fkey = fkey
        self.fdef = fdef
        self.globals = globals_
        self.ops = ScalarOps(state.b, flags, state.t.bounds)
        self.arr = Arrays(self.ops)
        self.env = {}
        self.loops = []  # [(breaks, continues)]
        self.returns = None  # [(block, env, value)] of an inlined call
        self.result = None  # a function of its own: (result pointer, its shape) (see .module)
        self.serial_prange = serial_prange

    @property
    def b(self):
        return self.state.b

    # -- statements ---------------------------------------------------------------
    def stmts(self, body):
        """Translate statements; False when control cannot reach their end."""
        for s in body:
            if not self.stmt(s):
                return False
        return True

    def stmt(self, s):
        m = getattr(self, "_s_" + type(s).__name__, None)
        if m is None:
            raise Unsupported(f"statement {type(s).__name__}")
        try:
            r = m(s)
        except Unsupported as e:  # where: the innermost function and line
            if not getattr(e, "located", False):
                e.located = True
                e.args = (f"{e.args[0]} (in {self.fdef.name}, line {s.lineno})",)
            raise
        return True if r is None else r

    def _s_Pass(self, s):
        return True

    def _s_Expr(self, s):
        if isinstance(s.value, ast.Constant):  # a docstring
            return True
        self.expr(s.value)
        return True

    def _s_Assign(self, s):
        value = self.expr(s.value)
        for target in s.targets:
            self.assign(target, value)
        return True

    def _s_AugAssign(self, s):
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise Unsupported(f"augmented {type(s.op).__name__}")
        rhs = self.expr(s.value)
        if isinstance(s.target, ast.Name):
            self.env[s.target.id] = self.binop(op, self.load_name(s.target.id), rhs)
        elif isinstance(s.target, ast.Subscript):
            a = self.expr(s.target.value)
            key = self.subscript_key(s.target.slice)
            if not isinstance(a, ArrayV):
                raise Unsupported("augmented subscript of a non-array")
            old = self.arr.getitem(a, key)
            if not isinstance(old, Scalar):
                raise Unsupported("augmented assignment of a slice")
            self.setitem(a, key, self.binop(op, old, rhs))
        else:
            raise Unsupported("augmented assignment target")
        return True

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.items if isinstance(value, TupleV) else \
                [Const(v) for v in value.value] if isinstance(value, Const) and \
                isinstance(value.value, tuple) else None
            if items is None or len(items) != len(target.elts):
                raise Unsupported("tuple unpacking")
            for t, v in zip(target.elts, items, strict=True):
                self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            a = self.expr(target.value)
            if not isinstance(a, ArrayV):
                raise Unsupported("item assignment to a non-array")
            self.setitem(a, self.subscript_key(target.slice), value)
        else:
            raise Unsupported(f"assignment to {type(target).__name__}")

    def setitem(self, a, key, value):
        got = self.arr.getitem(a, key) if not _all_ints(key, a.ndim) else None
        if got is None:
            items = key.items if isinstance(key, TupleV) else \
                [Const(v) for v in key.value] if isinstance(key, Const) and \
                isinstance(key.value, tuple) else [key]
            idx = [self.arr.wrap(self.arr.dim(k), n) for k, n in zip(items, a.shape,
                                                                       strict=True)]
            self.arr.store(a, idx, value)
        elif isinstance(got, ArrayV):
            self.arr.copy(got, value)
        else:
            raise Unsupported(f"setitem of {a!r} at {key!r}")

    def _s_Raise(self, s):
        exc = s.exc
        if isinstance(exc, ast.Call) and not exc.keywords:
            cls, args = self.expr(exc.func), [self.expr(a) for a in exc.args]
            if not all(isinstance(a, Const) for a in args):
                raise Unsupported("an exception message known only at run time")
            msg = " ".join(str(a.value) for a in args)
        elif isinstance(exc, (ast.Name, ast.Attribute)):
            cls, msg = self.expr(exc), ""
        else:
            raise Unsupported("raise of a non-literal exception")
        if not (isinstance(cls, Const) and isinstance(cls.value, type) and
                issubclass(cls.value, BaseException)):
            raise Unsupported("raise of something not an exception class")
        self.raise_status(cls.value, msg)
        return False

    def store_result(self, value):
        """Store a function's returned value (numbers and tuples of them)
        through its result pointer (``i8*``, the first argument): every
        return of the function must give the same kind of value."""
        if self.result is None:
            raise Unsupported("a generated function returning a value")
        ptr, shape = self.result
        if isinstance(value, Const) and value.dtype is not None:  # a literal: in the type
            value = self.ops.scalar(value, shape[0][1] if shape[0] is not None and
                                    shape[0][0] == "scalar" else None)
        elif isinstance(value, (TupleV, Const)):  # a tuple: its literals as registers
            items = value.items if isinstance(value, TupleV) else \
                [Const(v) for v in value.value] if isinstance(value.value, tuple) else None
            if items is None or not all(isinstance(i, Scalar) or i.dtype is not None
                                        for i in items):
                raise Unsupported("a function returning other than numbers")
            subs = shape[0][1] if shape[0] is not None and shape[0][0] == "tuple" else None
            value = TupleV([self.ops.scalar(i, None if subs is None or subs[k][0] != "scalar"
                                            else subs[k][1]) for k, i in enumerate(items)])
        got = self.join_type([value])
        if got[0] == "scalar" and shape[0] is not None and shape[0][0] == "scalar" and \
                promote(got[1], shape[0][1]) == shape[0][1]:
            value, got = self.ops.scalar(value, shape[0][1]), shape[0]
        if shape[0] is None:
            if got[0] not in ("scalar", "tuple") or got[0] == "tuple" and any(
                    sub[0] != "scalar" for sub in got[1]):
                raise Unsupported("a function returning other than numbers")
            shape[0] = got
        elif shape[0] != got:
            raise Unsupported(f"a function returning values of different types: {shape[0]} {got}")
        regs = self.flatten(value, shape[0])
        struct = ir.LiteralStructType([r.type for r in regs])
        p = self.b.bitcast(ptr, struct.as_pointer())
        for k, r in enumerate(regs):
            self.b.store(r, self.b.gep(p, [ir.Constant(_I32, 0), ir.Constant(_I32, k)]))

    def raise_status(self, name, msg):
        code = self.t.raise_code(name, msg)
        self.state.fail(ir.Constant(_I32, code))

    def _s_Return(self, s):
        value = Const(None) if s.value is None else self.expr(s.value)
        if self.returns is None:  # a function of its own: the value through its pointer
            if not (isinstance(value, Const) and value.value is None):
                self.store_result(value)
            self.b.ret(ir.Constant(_I32, 0))
            return False
        self.returns.append((self.b.block, dict(self.env), value))
        return False

    def _s_If(self, s):
        cond = self.truth_of(self.expr(s.test))
        if isinstance(cond, Const):  # decided while translating
            return self.stmts(s.body if cond.value else s.orelse)
        then = self.b.append_basic_block("if.then")
        other = self.b.append_basic_block("if.else")
        self.b.cbranch(cond.value, then, other)
        before = dict(self.env)
        edges = []
        for block, body in ((then, s.body), (other, s.orelse)):
            self.env = dict(before)
            self.b.position_at_end(block)
            if self.stmts(body):
                edges.append((self.b.block, dict(self.env)))
        return self.join(edges, "if.end")

    # -- loops ------------------------------------------------------------------
    def _loop(self, node, body, cond_fn, target=None, start=None, step=None, stop=None):
        """A loop: ``cond_fn(env)`` -> i1 in the header; ``target`` bound to
        the induction variable (``start``, ``+= step``) when given."""
        assigned, exposed = loop_names(node, target)
        # every name the body assigns and the loop entered with goes round the
        # loop (its value after the loop is the last one): unless its kind
        # changes in the body and the body never reads it before assigning
        # it -- then it is unknown after the loop (a retry drops it)
        drop = self.t.hints
        carried = sorted(n for n in assigned if n in self.env and self.env[n] is not UNDEF and
                         n != target and
                         drop.get((self.fkey, node.lineno, node.col_offset, n)) != "drop")
        dropped = [n for n in assigned if n not in carried and n != target]
        shapes = {n: self.loop_shape(node, n, self.env[n]) for n in carried}
        pre = dict(self.env)
        pre_flat = {n: self.flatten(pre[n], shapes[n]) for n in carried}
        pre_block = self.b.block
        header = self.b.append_basic_block("loop.head")
        self.b.branch(header)
        self.b.position_at_end(header)
        phis = {n: self.make_phis(shapes[n]) for n in carried}
        for n in carried:
            for phi, v in zip(phis[n], pre_flat[n], strict=True):
                phi.add_incoming(v, pre_block)
        ind = None
        if target is not None:
            ind = self.b.phi(_I64, name=target)
            ind.add_incoming(self.arr.i64(start), pre_block)
            if step and step > 0 and stop is not None:
                # from start up to the last value that passes stop
                lo, hi = self.ops.bound(start), self.ops.bound(stop)
                if lo is not None and hi is not None:
                    self.ops.note(ind, max(lo, hi + step - 1))
        env_head = dict(pre)
        for n in carried:
            env_head[n] = self.rebuild(shapes[n], phis[n])
        for n in dropped:
            if n in env_head:
                env_head[n] = UNDEF
        if target is not None:
            env_head[target] = Scalar(ind, I64)
        self.env = dict(env_head)
        cond = cond_fn()
        body_block = self.b.append_basic_block("loop.body")
        exit_block = self.b.append_basic_block("loop.exit")
        if isinstance(cond, Const):
            if not cond.value:
                raise Unsupported("a loop that never runs")
            self.b.branch(body_block)
        else:
            self.b.cbranch(cond.value, body_block, exit_block)
        self.b.position_at_end(body_block)
        breaks, continues = [], []
        self.loops.append((breaks, continues))
        with self.arr.loop(ind, step or 0) as latches:
            alive = self.stmts(body)
            self.loops.pop()
            if alive:
                continues.append((self.b.block, dict(self.env)))
            # the back edges: each through a latch that steps the induction variable
            for block, env in continues:
                self.b.position_at_end(block)
                for n in carried:
                    try:
                        self.check_carried(node, n, shapes[n], env[n])
                    except Unsupported:
                        if n in exposed:
                            raise
                        raise Retype((self.fkey, node.lineno, node.col_offset, n),
                                     "drop") from None
                    for phi, v in zip(phis[n], self.flatten(env[n], shapes[n]), strict=True):
                        phi.add_incoming(v, self.b.block)
                if ind is not None:
                    nxt = self.b.add(ind, self.arr.i64(step))
                    ind.add_incoming(nxt, self.b.block)
                latches.append(self.b.branch(header))
        edges = [] if isinstance(cond, Const) else [(exit_block, env_head)]
        # (the header's exit edge enters exit_block directly: it is the first edge)
        self.b.position_at_end(exit_block)
        if ind is not None and edges:  # after the loop, its variable holds the last value
            env_head = dict(env_head)
            env_head[target] = Scalar(self.b.sub(ind, self.arr.i64(step)), I64)
        if not breaks:
            if not edges:
                self.b.unreachable()
                return False
            self.env = dict(env_head)
            return True
        # breaks and the header's exit edge join after exit_block
        tail = [(exit_block, env_head)] if edges else []
        if not edges:
            self.b.unreachable()
        return self.join(tail + breaks, "loop.end")

    def _s_While(self, s):
        if s.orelse:
            raise Unsupported("while ... else")
        return self._loop(s, s.body, lambda: self.truth_of(self.expr(s.test)))

    def _s_For(self, s):
        if s.orelse:
            raise Unsupported("for ... else")
        it = s.iter
        if isinstance(it, (ast.Tuple, ast.List)) or \
                (isinstance(it, ast.Constant) and isinstance(it.value, tuple)):
            return self._unrolled(s, self.expr(it))
        if not (isinstance(it, ast.Call) and isinstance(it.func, (ast.Name, ast.Attribute))):
            raise Unsupported("for over a non-range")
        fn = self.expr(it.func)
        kind = self.t.range_kind(fn.value if isinstance(fn, Const) else None)
        if kind is None:
            raise Unsupported("for over a non-range")
        if not isinstance(s.target, ast.Name):
            raise Unsupported("for with a tuple target")
        args = [self.expr(a) for a in it.args]
        if any(not (isinstance(a, Const) and type(a.value) in (int, bool, np.int64)) and
               not (isinstance(a, Scalar) and a.dtype.kind in "iub") for a in args):
            raise Unsupported("range of non-integers")
        start, stop, step = (Const(0), args[0], Const(1)) if len(args) == 1 else \
            (args[0], args[1], Const(1)) if len(args) == 2 else args
        if not isinstance(step, Const) or int(step.value) == 0:
            raise Unsupported("range with a runtime step")
        step_v = int(step.value)
        start_d, stop_d = self.arr.dim(start), self.arr.dim(stop)
        name = s.target.id
        if kind == "prange" and not self.serial_prange:
            if step_v != 1:
                raise Unsupported("prange with a step")
            return prange_loop(self, s, start_d, stop_d)

        def cond():
            i = self.env[name].value
            op = "<" if step_v > 0 else ">"
            return Scalar(self.b.icmp_signed(op, i, self.arr.i64(stop_d)), BOOL)
        return self._loop(s, s.body, cond, target=name, start=start_d, step=step_v,
                          stop=stop_d)

    def _unrolled(self, s, seq):
        """A loop over a literal tuple: its body once per item (names bound to
        the item's values), as numba's literal_unroll would."""
        items = seq.items if isinstance(seq, TupleV) else [Const(v) for v in seq.value]
        for item in items:
            self.assign(s.target, item)
            self.loops.append(([], []))
            alive = self.stmts(s.body)
            brk, cont = self.loops.pop()
            if brk or cont:
                raise Unsupported("break or continue in a loop over a tuple")
            if not alive:
                return False
        return True

    def _s_Break(self, s):
        if not self.loops:
            raise Unsupported("break outside a loop")
        self.loops[-1][0].append((self.b.block, dict(self.env)))
        return False

    def _s_Continue(self, s):
        if not self.loops:
            raise Unsupported("continue outside a loop")
        self.loops[-1][1].append((self.b.block, dict(self.env)))
        return False

    def _s_With(self, s):  # numba's object mode (see .sites)
        return object_mode(self, s)

    # -- inlined calls ----------------------------------------------------------
    def inline(self, fdef, globals_, fkey, args, kwargs, flags, parallel=False):
        """The value of calling Python function ``fdef`` (its syntax tree;
        names resolved in ``globals_``) with translator values ``args``,
        translated here, in this LLVM function (``parallel``: its ``prange``
        loops run on threads, unless this frame is itself a parallel body)."""
        frame = Frame(self.state, fkey, fdef, globals_, flags,
                      serial_prange=self.serial_prange or not parallel)
        frame.returns = []
        params = fdef.args
        if params.vararg or params.kwarg or params.kwonlyargs:
            raise Unsupported("*args or **kwargs")
        names = [a.arg for a in params.args]
        defaults = params.defaults
        bound = dict(zip(names, args, strict=False))
        if len(args) > len(names):
            raise Unsupported("too many arguments")
        for k, v in kwargs.items():
            if k not in names or k in bound:
                raise Unsupported(f"keyword {k}")
            bound[k] = v
        for j, name in enumerate(names[len(names) - len(defaults):]):
            if name not in bound:
                bound[name] = frame.expr(defaults[j])
        if set(bound) != set(names):
            raise Unsupported("missing arguments")
        frame.env = bound
        if frame.stmts(fdef.body):
            frame.returns.append((self.b.block, dict(frame.env), Const(None)))
        rets = frame.returns
        if not rets:
            self.b.position_at_end(self.b.append_basic_block("noreturn"))
            return Const(None)
        if len(rets) == 1:
            block, _, value = rets[0]
            self.b.position_at_end(block)
            return value
        # several returns: one phi per part of the value
        shape = self.join_type([v for _, _, v in rets])
        cont = self.b.append_basic_block("ret")
        flats = []
        for block, _, value in rets:
            self.b.position_at_end(block)
            flats.append((self.flatten(value, shape), self.b.block))
            self.b.branch(cont)
        self.b.position_at_end(cont)
        phis = self.make_phis(shape)
        for flat, block in flats:
            for phi, v in zip(phis, flat, strict=True):
                phi.add_incoming(v, block)
        return self.rebuild(shape, phis)


def _all_ints(key, ndim):
    items = key.items if isinstance(key, TupleV) else \
        [Const(v) for v in key.value] if isinstance(key, Const) and \
        isinstance(key.value, tuple) else [key]
    if len(items) != ndim:
        return False
    return all((isinstance(k, Const) and type(k.value) in (int, bool, np.int64)) or
               (isinstance(k, Scalar) and k.dtype.kind in "iub") for k in items)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}


def function_tree(fn):
    """The syntax tree of Python function ``fn`` (its source, dedented)."""
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise Unsupported(f"no source for {fn!r}")
    fdef.decorator_list = []
    return fdef

