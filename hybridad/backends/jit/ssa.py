"""SSA values at joins (a mixin of :class:`.translate.Frame`): where
branches meet, a name bound to different values becomes phis -- one per
register part of the value (a scalar's register, an array's pointer and its
unknown sizes); a loop's header gets phis for the names its body carries,
typed from the value entering it and widened on a retry (:class:`Retype`)
when the body makes it wider, as numba's type inference would."""

from __future__ import annotations

from llvmlite import ir

from .values import BOOL, UNDEF, ArrayV, Const, Scalar, TupleV, Unsupported, lltype, memtype, \
    promote

__all__ = ["Joins", "Retype"]

_I64 = ir.IntType(64)


class Retype(Exception):
    """A loop-carried variable widened: translate again with ``hints``."""

    def __init__(self, key, kind):
        super().__init__(key)
        self.key, self.kind = key, kind



class Joins:
    """Phis of translator values (see the module docstring)."""

    # -- joins ------------------------------------------------------------------
    def join(self, edges, label):
        """Continue after the open blocks of ``edges`` (``(block, env)``), each
        branching to a new block where names bound differently become phis.
        False when there is no edge (nothing continues)."""
        if not edges:
            return False
        merge = self.b.append_basic_block(label)
        # (in sorted order: the phis, and so the IR and its machine code, the
        # same in every process whatever its string hashing)
        names = sorted(set().union(*(e for _, e in edges)))
        joined, plan = {}, {}
        for name in names:
            vals = [e.get(name, UNDEF) for _, e in edges]
            if any(v is UNDEF for v in vals):
                joined[name] = UNDEF
            elif all(v is vals[0] for v in vals):
                joined[name] = vals[0]
            else:
                try:
                    plan[name] = self.join_type(vals)
                except Unsupported:  # values of different kinds: unusable after the join
                    joined[name] = UNDEF
        # casts in each predecessor, then its branch
        incoming = {name: [] for name in plan}
        for block, env in edges:
            self.b.position_at_end(block)
            for name, shape in plan.items():
                incoming[name].append((self.flatten(env[name], shape), block))
            self.b.branch(merge)
        self.b.position_at_end(merge)
        for name, shape in plan.items():
            phis = self.make_phis(shape)
            for flat, block in incoming[name]:
                for phi, v in zip(phis, flat, strict=True):
                    if phi is not None:
                        phi.add_incoming(v, block)
            joined[name] = self.rebuild(shape, phis)
        self.env = joined
        return True

    # A value's "shape" for phis: its type with the parts known while
    # translating (Const numbers stay known only where all edges agree).
    def join_type(self, vals):
        first = vals[0]
        if all(isinstance(v, Const) for v in vals) and all(
                type(v.value) is type(first.value) and v.value == first.value for v in vals):
            return ("const", first)
        if all(isinstance(v, (Scalar, Const)) and v.dtype is not None for v in vals):
            dts = [v.dtype for v in vals]
            dt = BOOL if all(d == BOOL for d in dts) else promote(*dts)
            return ("scalar", dt)
        if all(isinstance(v, ArrayV) for v in vals):
            if len({(v.dtype, v.ndim) for v in vals}) != 1:
                raise Unsupported("arrays of different dtypes or ranks joined")
            shape = [_known_same([v.shape[d] for v in vals]) for d in range(first.ndim)]
            strides = [_known_same([v.strides[d] for v in vals]) for d in range(first.ndim)]
            layout = first.layout if all(v.layout == first.layout for v in vals) else "A"
            return ("array", first.dtype, shape, strides, layout)
        if all(isinstance(v, TupleV) for v in vals) and \
                len({len(v.items) for v in vals}) == 1:
            return ("tuple", [self.join_type([v.items[k] for v in vals])
                              for k in range(len(first.items))])
        raise Unsupported(f"values of different kinds joined: {vals!r}")

    def flatten(self, v, shape):
        """The register values of ``v`` for the phis of ``shape`` (None: known)."""
        kind = shape[0]
        if kind == "const":
            return []
        if kind == "scalar":
            s = self.ops.scalar(v, shape[1])
            return [s.value]
        if kind == "array":
            _, dtype, dims, strides, _ = shape
            out = [self.b.bitcast(v.data, v.data.type)]
            for known, d in zip(dims + strides, v.shape + v.strides, strict=True):
                if known is None:
                    out.append(self.arr.i64(d))
            return out
        out = []
        for item, sub in zip(v.items, shape[1], strict=True):
            out += self.flatten(item, sub)
        return out

    def make_phis(self, shape):
        kind = shape[0]
        if kind == "const":
            return []
        if kind == "scalar":
            return [self.b.phi(lltype(shape[1]))]
        if kind == "array":
            _, dtype, dims, strides, _ = shape
            phis = [self.b.phi(memtype(dtype).as_pointer())]
            phis += [self.b.phi(_I64) for known in dims + strides if known is None]
            return phis
        out = []
        for sub in shape[1]:
            out += self.make_phis(sub)
        return out

    def rebuild(self, shape, regs):
        regs = list(regs)
        kind = shape[0]
        if kind == "const":
            return shape[1]
        if kind == "scalar":
            return Scalar(regs.pop(0), shape[1])
        if kind == "array":
            _, dtype, dims, strides, layout = shape
            data = regs.pop(0)
            fill = [regs.pop(0) if known is None else known for known in dims + strides]
            n = len(dims)
            return ArrayV(dtype, data, fill[:n], fill[n:], layout)
        items = []
        for sub in shape[1]:
            k = len(self.make_phis_count(sub))
            items.append(self.rebuild(sub, regs[:k]))
            regs = regs[k:]
        return TupleV(items)

    def register_types(self, shape):
        """The LLVM types of the register parts of a value of ``shape``
        (numbers and tuples of them)."""
        kind = shape[0]
        if kind == "const":
            return []
        if kind == "scalar":
            return [lltype(shape[1])]
        if kind != "tuple":
            raise Unsupported("registers of an array")
        out = []
        for sub in shape[1]:
            out += self.register_types(sub)
        return out

    def make_phis_count(self, shape):
        kind = shape[0]
        if kind == "const":
            return []
        if kind == "scalar":
            return [None]
        if kind == "array":
            return [None] * (1 + sum(k is None for k in shape[2] + shape[3]))
        out = []
        for sub in shape[1]:
            out += self.make_phis_count(sub)
        return out

    def loop_shape(self, node, name, value):
        """The phi shape of loop-carried ``name`` entering with ``value``: its
        type widened by the hints of earlier attempts."""
        hint = self.t.hints.get((self.fkey, node.lineno, node.col_offset, name))
        if hint == "drop":
            hint = None
        if isinstance(value, Const) and value.dtype is not None:
            dt = value.dtype if hint is None else hint
            return ("scalar", dt)
        if isinstance(value, Const):
            if hint is not None:
                raise Unsupported(f"loop variable {name} changes")
            return ("const", value)
        shape = self.join_type([value])
        if shape[0] == "scalar" and hint is not None:
            return ("scalar", promote(shape[1], hint) if shape[1] != hint else hint)
        if shape[0] == "array" and hint == "dynamic":
            return ("array", shape[1], [None] * len(shape[2]), [None] * len(shape[3]),
                    shape[4] if hint != "dynamic" else "A")
        return shape

    def check_carried(self, node, name, shape, value):
        """Raise :class:`Retype` when ``value`` (at a back edge) does not fit
        the phi ``shape`` made at the loop's entry."""
        key = (self.fkey, node.lineno, node.col_offset, name)
        kind = shape[0]
        if kind == "const":
            if not (isinstance(value, Const) and type(value.value) is type(shape[1].value)
                    and value.value == shape[1].value):
                raise Unsupported(f"loop variable {name} changes its constant")
            return
        if kind == "scalar":
            if not (isinstance(value, (Scalar, Const)) and value.dtype is not None):
                raise Unsupported(f"loop variable {name} changes kind")
            joined = BOOL if value.dtype == BOOL and shape[1] == BOOL else \
                promote(shape[1], value.dtype)
            if joined != shape[1]:
                raise Retype(key, joined)
            return
        if kind == "array":
            if not isinstance(value, ArrayV) or value.dtype != shape[1] or \
                    value.ndim != len(shape[2]):
                raise Unsupported(f"loop variable {name} changes kind")
            for known, d in zip(shape[2] + shape[3], value.shape + value.strides, strict=True):
                if known is not None and not (isinstance(d, int) and d == known):
                    raise Retype(key, "dynamic")
            if shape[4] != "A" and value.layout != shape[4]:
                raise Retype(key, "dynamic")
            return
        if not isinstance(value, TupleV) or len(value.items) != len(shape[1]):
            raise Unsupported(f"loop variable {name} changes kind")
        for sub, item in zip(shape[1], value.items, strict=True):
            self.check_carried(node, name, sub, item)


def _known_same(dims):
    """A dim all values share as a known int, else None (a phi)."""
    first = dims[0]
    if isinstance(first, int) and all(isinstance(d, int) and d == first for d in dims):
        return first
    return None


