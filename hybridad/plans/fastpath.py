"""The plan's fast path: a small generated ``gradient`` in front of the compiled
program, for arguments and results of the example's structure (see
:meth:`FastPathMixin._fast_path`)."""

from __future__ import annotations

import numpy as np

from .. import _tree
from ..errors import DecisionsChanged
from ..results import DiffResult, GradientResult, HvpResult
from .arguments import number_types
from .validate import FLOATS as _FLOATS

__all__ = ["FastPathMixin"]


def _unpack_source(td, expr, leaves, conds, consts):
    """Source that takes a pytree of structure ``td`` apart: the expressions
    of its array leaves (appended to ``leaves``) and the conditions under
    which they are right (appended to ``conds``, parents before children:
    container class and length, dict keys, static values equal; the names
    they use go into ``consts``).  False for a structure it cannot write."""
    if td == _tree.LEAF:
        leaves.append(expr)
        return True
    kind = td[0]
    if kind == "static":
        k = len(consts)
        consts[f"_sT{k}"], consts[f"_sV{k}"] = td[1], td[2]
        # (type(): a traced value's __class__ may say np.float64, and comparing it
        # would decide on a traced value)
        conds.append(f"type({expr}) is _sT{k} and {expr} == _sV{k}")
        return True
    subs = td[-1]
    if kind in ("tuple", "list"):
        conds.append(f"{expr}.__class__ is {kind} and len({expr}) == {len(subs)}")
        items = [f"{expr}[{i}]" for i in range(len(subs))]
    elif kind == "namedtuple":
        k = len(consts)
        consts[f"_nT{k}"] = td[1]
        conds.append(f"{expr}.__class__ is _nT{k}")
        items = [f"{expr}[{i}]" for i in range(len(subs))]
    elif kind == "dict":
        if not all(type(key) in (str, int) for key in td[1]):
            return False
        conds.append(f"{expr}.__class__ is dict and len({expr}) == {len(subs)}")
        items = [f"{expr}[{key!r}]" for key in td[1]]  # missing key: LookupError
    else:
        return False
    return all(_unpack_source(sub, item, leaves, conds, consts)
               for sub, item in zip(subs, items, strict=True))


def _no_leaves(args):
    """:meth:`FastPathMixin._leaves_of` of a structure generated code cannot
    take apart: always the general path."""
    return None


class FastPathMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def _matcher(self):
        """A generated ``matches(args) -> bool``: whether ``args`` have this
        plan's structure (containers, lengths, dict keys, static values) and
        each array leaf is an exact ndarray of its shape and dtype -- what
        the convenience functions check before reusing the last plan of a
        function called with pytree or static arguments
        (:func:`hybridad.plans.cache.recent_plan`).  None where the structure
        cannot be written so."""
        cached = vars(self).get("_matches", False)
        if cached is False:
            cached = self._matches = self._structure_fn("matches")
        return cached

    def _leaves_of(self):
        """A generated ``leaves_of(args)``: the array leaves of ``args`` in the
        plan's order when ``args`` have its structure (containers, lengths,
        dict keys, static values equal), else None -- for the paths that hand
        the leaves to a compiled program, which checks each one itself (exact
        ndarray, shape, dtype, layout, overlaps).  Made once per plan (JAX
        caches treedefs the same way); where the structure cannot be written
        so, a function that always says None."""
        cached = vars(self).get("_leaves_fn", False)
        if cached is False:
            cached = self._leaves_fn = self._structure_fn("leaves_of") or _no_leaves
        return cached

    def _structure_fn(self, what):
        """The generated function of :meth:`_matcher` (``what="matches"``: the
        structure and every leaf's type, shape and dtype, a bool) or of
        :meth:`_leaves_of` (``"leaves_of"``: the structure, the leaves or
        None); None where the structure cannot be written so."""
        consts, leaves, conds = {"_nd": np.ndarray}, [], []
        for k, td in enumerate(self._treedefs):
            if not _unpack_source(td, f"args[{k}]", leaves, conds, consts):
                return None
        if what == "matches":
            for i, (leaf, (shape, dtype)) in enumerate(zip(leaves, self._specs, strict=True)):
                consts[f"_S{i}"], consts[f"_D{i}"] = tuple(shape), np.dtype(dtype)
                # (type(), not __class__: a tracer's __class__ says ndarray or a
                # numpy scalar, and a traced call must miss -- the nested path)
                cond = f"type({leaf}) is _nd and {leaf}.shape == _S{i} and " \
                    f"{leaf}.dtype == _D{i}"
                if i in self._diff_leaves and tuple(shape) == ():  # (or a number: staged)
                    consts[f"_N{i}"] = number_types(dtype)
                    cond = f"({cond} or type({leaf}) in _N{i})"
                conds.append(cond)
            hit, miss = "True", "False"
        else:
            hit, miss = "[" + ", ".join(leaves) + "]", "None"
        lines = [f"def {what}(args):", f"    if len(args) != {len(self._treedefs)}:",
                 f"        return {miss}", "    try:",
                 "        if " + (" and ".join(conds) or "True") + ":",
                 f"            return {hit}",
                 "    except (TypeError, ValueError, LookupError, AttributeError):",
                 "        pass", f"    return {miss}"]
        exec(compile("\n".join(lines) + "\n", f"<hybridad {what} {self.name}>", "exec"),
             consts)  # noqa: S102
        return consts[what]

    def _hvp_plain(self, args, v, out, carried):
        """:meth:`Plan.hvp`'s plain path: arrays, or containers of them of the
        plan's structure, and an :class:`HvpResult` / :class:`DiffResult` of
        one differentiated leaf go straight to the compiled program, which
        checks every leaf (exact ndarray, shape, dtype, layout, no overlap)
        before writing.  ``carried``: the program carries the check of the
        plan's decisions on values (:mod:`hybridad.backends.numba.prelude`),
        run here; where it fails, or the plain path is not taken, the
        decisions are checked by :meth:`_specialized`.  Returns ``out`` when
        it ran, the specialization that serves the call, or None (the
        general path runs this plan)."""
        prog = self._program
        if out is not None and type(v) is np.ndarray and self.backend == "numba" and \
                prog.objects and type(out) in (HvpResult, DiffResult) and \
                len(self._diff_leaves) == 1 and len(out._derivs) == 2:
            leaves = args if self._plain else self._leaves_of()(args)
            d = out._derivs
            try:
                ids = [id(a) for a in leaves] + [id(v), id(out._value), id(d[0]), id(d[1])]
                if carried:  # (raises DecisionsChanged before any write)
                    (prog.invoke_checked if prog.heavy else prog.checked_call)(*ids)
                else:
                    (prog.invoke if prog.heavy else prog.fn)(*ids)
                return out
            except DecisionsChanged:
                pass  # (which specialization serves: below)
            except (TypeError, ValueError, IndexError):  # (leaves None: TypeError)
                pass  # the general path says why
        if carried:  # the decisions (the compiled check, else the reference)
            plan = self._specialized(args, True)
            if plan is not self:
                return plan
        return None

    def _fast_args(self, args, out):
        """The gradient buffer if ``args`` and ``out`` pass every check of
        :meth:`_leaves` and :meth:`_check_out` on the plain-array path; else None
        (the general path then runs and raises the precise error)."""
        if len(args) != len(self._fast_specs) or not isinstance(out, DiffResult):
            return None
        for a, (shape, dtype) in zip(args, self._fast_specs):  # noqa: B905 - lengths checked
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
        v, derivs = out.value, out.derivs
        if not derivs:
            return None
        g = derivs[0]
        gshape, gdtype = self._fast_specs[self._diff_leaves[0]]
        if type(v) is not np.ndarray or v.shape != () or v.dtype not in _FLOATS or \
                type(g) is not np.ndarray or g.shape != gshape or g.dtype != gdtype or \
                not (v.flags.writeable and g.flags.writeable):
            return None
        if np.may_share_memory(v, g):
            return None
        for a in args:
            if np.may_share_memory(v, a) or np.may_share_memory(g, a):
                return None
        return g


    #: ``(value staging buffer, result)`` of :meth:`_mixed_value`, made at its first call
    _mixed = None

    def _mixed_value(self, args, out):
        """The fast path into ``out`` whose value buffer has another dtype than
        ``f``'s value (a float32 argument of a function returning float64, as
        numpy 2 promotes ``x / np.sqrt(2)``): the program writes the value into a
        buffer of the plan's and it is cast into ``out``'s (as the general path
        does, without its checks' cost: 1.9 against 6.3 us a call, 16 x 16)."""
        v = out._value
        if v.shape != () or v.dtype not in _FLOATS or not v.flags.writeable:
            return type(self).gradient(self, *args, out=out)
        with self._lock:
            mixed = self._mixed
            if mixed is None:
                staged = np.zeros((), self._value_dtype)
                mixed = self._mixed = (staged, DiffResult(staged))
            staged, sub = mixed
            sub._derivs = out._derivs
            try:
                self.gradient(*args, out=sub)
            finally:
                sub._derivs = ()
            v[()] = staged
        return out

    def _staging_lines(self, ins, ns):
        """Lines of :meth:`_fast_path` staging a differentiated number (an
        argument that is a 0-d float leaf, given as a Python or numpy number)
        into the plan's own 0-d array (:meth:`_staged_scalar`), so that the
        compiled program takes it: no conversion, no allocation."""
        lines, at = [], 0
        for k, (name, td) in enumerate(zip(ins, self._treedefs, strict=True)):
            if td == _tree.LEAF and at in self._diff_leaves and tuple(self._specs[at][0]) == ():
                dtype = np.dtype(self._specs[at][1])
                ns[f"_N{k}"], ns[f"_ND{k}"], ns["_stg"] = number_types(dtype), dtype, \
                    self._staged_scalar
                lines += [f"                if type({name}) in _N{k}:",
                          f"                    {name} = _stg({k}, {name}, _ND{k})"]
            at += _tree.count_leaves(td)
        return lines

    def _fast_path(self):
        """The numba plan's ``gradient`` for arguments of the example's
        structure (arrays, or tuples/lists/dicts of them with the same static
        values) and a :class:`GradientResult` / :class:`DiffResult` of the
        gradient's structure: a small generated function, installed as this
        plan's ``gradient`` attribute -- one Python frame in front of numba.
        The structure is unpacked by generated code (no pytree flattening).

        It hands the compiled plan the arrays themselves (``id(array)``, see
        :mod:`hybridad.backends.numba.rt`), which checks every argument and result
        buffer -- exact ndarray, shape, dtype, native byte order, alignment,
        contiguity, writeable results, no overlaps -- before writing anything.
        Whatever it rejects (other types, staging, the precise error) goes to
        the general path (:meth:`Plan.gradient`).  A plan that decided on
        values (:mod:`hybridad.core.decisions`) checks its decisions on the
        call's arrays first; a call that decides otherwise runs the
        specialization whose decisions hold (its own fast path), or goes to
        the general path, which makes one."""
        consts = {}
        arg_leaves, arg_conds = [], []
        n = len(self._treedefs)
        ins = [f"a{i}" for i in range(n)]
        for name, td in zip(ins, self._treedefs, strict=True):
            if not _unpack_source(td, name, arg_leaves, arg_conds, consts):
                return None
        grads, grad_conds = [], []
        if not _unpack_source(self._grad_structure(), "g", grads, grad_conds, consts):
            return None
        check = "".join(f" and {c}" for c in arg_conds + grad_conds)
        # a plan that decided on values: its decisions on the call's arrays, last
        # (on arrays the checks passed); a call that decides otherwise runs the
        # specialization whose decisions hold, else the general path makes one
        route = "(" + "".join(x + ", " for x in arg_leaves) + ")" \
            if self._decision_check is not None else None
        wrap = "_id({})" if self._program.objects else "{}"
        # a program that carries the decision check (backends.numba.prelude): called
        # with the check's slot, it raises DecisionsChanged before any write
        inside = route is not None and self._program.checked_parts is not None
        jitted, fixed, bound = self._program.checked_parts if inside else self._program.parts
        ns = {"_j": jitted, "_id": id, "_GR": GradientResult, "_nd": np.ndarray,
              "_VD": np.dtype(self._value_dtype), "_mixed": self._mixed_value,
              "_DR": DiffResult, "_general": type(self).gradient, "_stale": self._check_stale,
              "_fref": self._rootref,
              "_plan": self}  # a cycle (plan -> gradient -> plan): the collector frees it
        ns.update(consts, _route=self._route_decisions)
        ns.update({f"_f{k}": v for k, v in enumerate(fixed)})
        ns.update({f"_c{k}": v for k, v in enumerate(bound)})
        call = "_j(" + ", ".join([f"_f{k}" for k in range(len(fixed))] +
                                 [wrap.format(x) for x in arg_leaves] +
                                 [f"_c{k}" for k in range(len(bound))] +
                                 [wrap.format(x) for x in ["out._value", *grads]]) + ")"
        lines = ["def gradient(*args, out=None):",
                 # what f reads besides its arguments (hybridad.frontend.guards), before any write
                 *(["    _r = _plan._root", "    if _r is None:", "        _r = _fref()",
                    "    if _r is not None and _plan._gcheck(_r, args) is not None:",
                    "        _stale(args)"] if self._guarded else []),
                 f"    if len(args) == {n} and (out.__class__ is _GR or out.__class__ is _DR):",
                 # (a value buffer of another float dtype: f's value cast into it)
                 "        if out._value.__class__ is _nd and out._value.dtype is not _VD:",
                 "            return _mixed(args, out)",
                 "        d = out._derivs",
                 "        if d:",
                 "            g = d[0]",
                 f"            {''.join(a + ', ' for a in ins)}= args" if ins else
                 "            pass",
                 # the structure checks index into containers: inside the try
                 "            try:",
                 *self._staging_lines(ins, ns),
                 f"                if True{check}:"]
        ind = "                    "
        if route is not None:
            checked = self._decision_check.program
            routing = [f"_s = _route({route}{'' if checked is None else ', False'})",
                       "if _s is not None:",
                       "    if _s is not False:",
                       "        return _s.gradient(*args, out=out)",
                       "    return _general(_plan, *args, out=out, _checked=False)"]
            if inside:  # the check inside the program's one call
                ns["_Changed"] = DecisionsChanged
                if self._program.heavy:  # the lock, and a parallel program's thread count
                    ns["_inv"] = self._program.invoke_checked
                    call = "_inv(" + ", ".join(
                        [wrap.format(x) for x in arg_leaves] +
                        [wrap.format(x) for x in ["out._value", *grads]]) + ")"
                lines += [f"{ind}try:", f"{ind}    {call}", f"{ind}except _Changed:"]
                lines += [ind + "    " + x for x in routing]
            elif checked is None:  # the reference check (generated Python) first
                lines += [ind + x for x in routing]
            else:  # the compiled check first: it raises when a decision changed
                gj, gfixed, gbound = checked.parts
                ns.update(_gj=gj, _Changed=DecisionsChanged, _gflag=checked.flag)
                ns.update({f"_gf{k}": v for k, v in enumerate(gfixed)})
                ns.update({f"_gc{k}": v for k, v in enumerate(gbound)})
                gargs = [wrap.format(x) for x in arg_leaves] + [wrap.format("_gflag")]
                if checked.heavy:  # (its lock and thread count, as the plan's program)
                    ns["_ginv"] = checked.invoke
                    gcall = "_ginv(" + ", ".join(gargs) + ")"
                else:
                    gcall = "_gj(" + ", ".join(
                        [f"_gf{k}" for k in range(len(gfixed))] + gargs[:-1] +
                        [f"_gc{k}" for k in range(len(gbound))] + gargs[-1:]) + ")"
                lines += [f"{ind}try:", f"{ind}    {gcall}", f"{ind}except _Changed:"]
                lines += [ind + "    " + x for x in routing]
        if inside:
            pass  # (called above)
        elif self._program.heavy:  # the lock, and a parallel program's thread count
            ns["_inv"] = self._program.invoke
            inv = "_inv(" + ", ".join([wrap.format(x) for x in arg_leaves] +
                                      [wrap.format(x) for x in ["out._value", *grads]]) + ")"
            lines += [f"{ind}{inv}"]
        else:
            lines += [f"{ind}{call}"]
        lines += ["                    return out",
                  "            except (TypeError, ValueError, LookupError, OverflowError):",
                  "                pass  # the general path says why",
                  # (a call that decides otherwise: the general path specializes)
                  "    return _general(_plan, *args, out=out, _checked=%s)"
                  % (self._decision_check is None)]
        exec(compile("\n".join(lines) + "\n", f"<hybridad gradient {self.name}>", "exec"),
             ns)  # noqa: S102
        fast = ns["gradient"]
        fast.__doc__ = type(self).gradient.__doc__
        fast.__wrapped__ = type(self).gradient
        fast.source = "\n".join(lines)
        return fast
