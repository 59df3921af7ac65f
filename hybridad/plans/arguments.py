"""A plan's arguments and result buffers: ``argnums``, argument names and
structure, the checks of every call's arguments and ``out`` before anything
is written."""

from __future__ import annotations

from typing import Any

import inspect
import threading
import types

import numpy as np

from .. import _tree
from .._xp import array_module
from ..core.supported import SUPPORTED_DTYPES
from ..results import DiffResult, GradientResult, HvpResult
from .validate import FLOATS as _FLOATS
from .validate import check_results, real_values

__all__ = ["ArgumentsMixin", "normalize_argnums", "arg_names", "prepare_args"]


def _static_paths(treedefs):
    """``(expression over the call's args tuple a, value)`` of every static
    (non-array) argument leaf that is an object: the guards walk them like
    ``f``'s closure (their attributes can change; their identity is in the
    plan's key)."""
    out = []

    def walk(td, expr):
        if td == _tree.LEAF:
            return
        kind = td[0]
        if kind == "static":
            if not isinstance(td[2], (type(None), bool, int, float, complex, str, bytes)):
                out.append((expr, td[2]))
        elif kind in ("tuple", "list", "namedtuple"):
            for i, sub in enumerate(td[-1]):
                walk(sub, f"{expr}[{i}]")
        elif kind == "dict":
            for key, sub in zip(td[1], td[2], strict=True):
                if isinstance(key, (str, int)):
                    walk(sub, f"{expr}[{key!r}]")
        elif kind == "dataclass":
            for key, sub in zip(td[2], td[3], strict=True):
                walk(sub, f"{expr}.{key}")

    for k, td in enumerate(treedefs):
        walk(td, f"a[{k}]")
    return out


def normalize_argnums(argnums, nargs):
    """Validate ``argnums`` (int or tuple of ints) against ``nargs`` arguments."""
    single = isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool)
    nums = (argnums,) if single else argnums
    if not isinstance(nums, tuple) or not nums or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in nums):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints; got {argnums!r}")
    out = []
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"argnums={argnums!r} is out of range for a call with {nargs} "
                             "positional argument(s)")
        out.append(int(i) % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"argnums={argnums!r} repeats an argument")
    return (out[0] if single else tuple(out)), tuple(out)


#: (code object, bound method?, nargs) -> names: a call's names without inspect's
#: signature each time (~40 us; the convenience functions ask on every call)
_NAMES = {}


def arg_names(f, nargs):
    """Parameter names of ``f`` for error messages (``'x'``), or ``'arg k'``
    (a plan's first look at ``f``: one that is not callable is refused)."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if type(code) is not types.CodeType:
        if not callable(f):  # (ha.gradient(x, A): the function left out)
            raise TypeError(f"f must be a callable, the function to differentiate, before "
                            f"its arguments; got {type(f).__name__}")
        return _arg_names(f, nargs)
    key = (code, inspect.ismethod(f), nargs)
    names = _NAMES.get(key)
    if names is None:
        if len(_NAMES) > 4096:
            _NAMES.clear()
        names = _NAMES[key] = _arg_names(f, nargs)
    return names


def _arg_names(f, nargs):
    try:
        params = [p.name for p in inspect.signature(f).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [f"'{params[k]}'" if k < len(params) else f"at position {k}" for k in range(nargs)]


#: the number types a differentiated argument may be (a 0-d array of the dtype
#: numpy gives it: integers and booleans as float64)
_SCALAR_DTYPES = {float: np.dtype(np.float64), int: np.dtype(np.float64),
                  bool: np.dtype(np.float64), np.float64: np.dtype(np.float64),
                  np.float32: np.dtype(np.float32), np.int64: np.dtype(np.float64),
                  np.int32: np.dtype(np.float64), np.bool_: np.dtype(np.float64)}


def number_types(dtype):
    """The number types a differentiated 0-d leaf of ``dtype`` may be given as."""
    return frozenset(t for t, d in _SCALAR_DTYPES.items() if d == np.dtype(dtype))


def prepare_args(args, diff, names, stage=None):
    """Convert differentiated arguments to float arrays (see
    :func:`hybridad._tree.as_array_tree`); flatten everything; refuse ndarray
    subclasses and dtypes hybridad does not trace (:func:`hybridad._tree.plain_leaf`).

    ``stage``: ``stage(k, value, dtype)`` -> a 0-d array holding the number
    ``value`` (a plan's own buffer, :meth:`ArgumentsMixin._staged_scalar`),
    for a differentiated argument that is a number: converting it would
    allocate an array each call.

    Returns ``(leaves, treedefs)`` with one treedef per argument.
    """
    leaves, treedefs = [], []
    for k, a in enumerate(args):
        staged = None
        if stage is not None and k in diff and type(a) in _SCALAR_DTYPES:
            try:
                staged = stage(k, a, _SCALAR_DTYPES[type(a)])
            except OverflowError:  # (an int beyond float64: converted below, refused by name)
                pass
        if staged is not None:
            a = staged
        elif k in diff and (type(a) is not np.ndarray or a.dtype not in _FLOATS):
            names = names() if callable(names) else names
            a = _tree.as_array_tree(a, names[k])  # converts, or raises a clear TypeError
        lv, td = _tree.flatten(a)
        for i, leaf in enumerate(lv):
            if type(leaf) is not np.ndarray or leaf.dtype not in SUPPORTED_DTYPES:
                names = names() if callable(names) else names
                lv[i] = _tree.plain_leaf(leaf, names[k])  # or a TypeError naming it
        leaves.extend(lv)
        treedefs.append(td)
    return leaves, tuple(treedefs)


class ArgumentsMixin:
    """Methods of :class:`hybridad.plans.plan.Plan` (a mixin)."""


    def _staged_scalar(self, k, value, dtype):
        """Argument ``k``, a number, in a 0-d array of ``dtype`` of this plan's
        (one per thread, argument and dtype: a call reads it before the thread's
        next call writes it again), so that a differentiated number allocates
        nothing per call."""
        local = self.__dict__.get("_scalars")
        if local is None:
            local = self.__dict__.setdefault("_scalars", threading.local())
        bufs = getattr(local, "bufs", None)
        if bufs is None:
            bufs = local.bufs = {}
        buf = bufs.get((k, dtype))
        if buf is None:
            buf = bufs[k, dtype] = np.zeros((), dtype)
        buf[()] = value
        return buf

    def _leaves(self, args):
        if len(args) != len(self._treedefs):
            raise TypeError(f"plan for {self.name} takes {len(self._treedefs)} positional "
                            f"argument(s); got {len(args)}")
        leaves, treedefs = prepare_args(args, self._diff, self._names, self._staged_scalar)
        if treedefs != self._treedefs:  # (dicts' keys in another order: the plan's)
            again = tuple(_tree.reordered(a, td) for a, td in
                          zip(args, self._treedefs, strict=True))
            if all(a is not _tree.MISMATCH for a in again):
                leaves, treedefs = prepare_args(again, self._diff, self._names,
                                                self._staged_scalar)
        if treedefs != self._treedefs:
            for k, (a, b) in enumerate(zip(treedefs, self._treedefs, strict=True)):
                if a != b:
                    raise ValueError(f"argument {self._names[k]} does not match the plan: its "
                                     "structure or static values differ from the example "
                                     "arguments the plan was compiled for")
        for i, (leaf, (shape, dtype)) in enumerate(zip(leaves, self._specs, strict=True)):
            if not isinstance(leaf, self._xp.ndarray):
                kind = "device (cupy)" if self.backend == "cupy" else "host (numpy)"
                raise TypeError(f"argument {self._leaf_name(i)} is a "
                                f"{type(leaf).__module__}.{type(leaf).__name__}; this plan "
                                f"(backend={self.backend!r}) takes {kind} arrays")
            if leaf.shape != shape or leaf.dtype != dtype:
                raise ValueError(f"argument {self._leaf_name(i)} has shape "
                                 f"{leaf.shape} and dtype {leaf.dtype}; the plan was compiled "
                                 f"for shape {shape} and dtype {dtype}")
        return leaves


    def _leaf_name(self, i):
        """Leaf ``i``'s name in messages: its argument's, and where the argument
        is a tuple, list or dict of arrays, the leaf's place in it
        (``'params'['W']``)."""
        names = vars(self).get("_leaf_names")
        if names is None:
            names = self._leaf_names = [
                self._names[k] + path for k, td in enumerate(self._treedefs)
                for path in _tree.leaf_paths(td)]
        return names[i]

    def _grad_structure(self):
        tds = [self._treedefs[k] for k in self.argnums] \
            if isinstance(self.argnums, tuple) else self._treedefs[self.argnums]
        return ("tuple", tuple(tds)) if isinstance(self.argnums, tuple) else tds


    def new_result(self) -> Any:
        """A fresh :class:`GradientResult` (an :class:`HvpResult` for a
        Hessian-vector-product plan) matching this plan."""
        protos = [self._xp.zeros(*self._specs[i]) for i in self._diff_leaves]
        grad = _tree.unflatten(self._grad_structure(), protos)
        cls = HvpResult if self.order == 2 else GradientResult
        return cls(grad, dtype=self._value_dtype)


    def _reads(self, leaves, skip=None):
        """``(name, array)`` of the argument leaves (all but leaf ``skip``), for
        :func:`hybridad.plans.validate.check_results`."""
        idx = [i for i in range(len(self._specs)) if i != skip]
        return [(f"argument {self._leaf_name(i)}", a)
                for i, a in zip(idx, leaves, strict=True)]


    def _check_out(self, out, leaves, vleaves=()):
        """The gradient (and hvp) leaves of ``out`` after checking every buffer
        (:func:`hybridad.plans.validate.check_results`) against the arguments and
        ``vleaves`` (an hvp's ``v``)."""
        if not isinstance(out, DiffResult):
            raise TypeError(f"out must be a GradientResult or DiffResult; got "
                            f"{type(out).__name__}")
        results = [("out.value", out.value, (), None)]
        if len(out.derivs) < self.order:
            raise ValueError("out holds no gradient buffer (DiffResult(value, gradient))"
                             if self.order == 1 else "out must hold a gradient and a "
                             "Hessian-vector product buffer (HvpResult(x))")
        gleaves = []
        for what, buf in zip(("gradient", "hvp")[:self.order], out.derivs[:self.order],
                             strict=True):
            try:
                leaves_k, td = _tree.flatten_as(buf, self._grad_structure())
            except TypeError:  # (a sparse matrix: a SparseHessianResult's Hessian)
                td = None
            if td != self._grad_structure():
                fits = "an HvpResult" if self.order == 2 else "a GradientResult"
                raise ValueError(f"out.{what} does not have the structure of the "
                                 "differentiated argument(s) "
                                 f"{', '.join(self._names[k] for k in self._diff)} (out is a "
                                 f"{type(out).__name__}; {fits} made from them fits)")
            for g, i in zip(leaves_k, self._diff_leaves, strict=True):
                results.append((f"out.{what} for argument {self._leaf_name(i)}",
                                g, *self._specs[i]))
            gleaves += leaves_k
        check_results(self._xp, results, self._reads(leaves) + [("v", t) for t in vleaves])
        return gleaves


    def _tangent_leaves(self, v):
        if self._grad_structure() == _tree.LEAF and not _tree.is_array(v):
            v = np.asarray(real_values(v, "v"), dtype=self._specs[self._diff_leaves[0]][1])
        try:
            if self._grad_structure() != _tree.LEAF:  # (numbers in it: arrays, as x's are)
                v = _tree.as_array_tree(v, "v")
            vleaves, td = _tree.flatten_as(v, self._grad_structure())
        except TypeError:
            td = None
        if td != self._grad_structure():
            raise ValueError("v must have the structure of the differentiated argument(s) "
                             f"{', '.join(self._names[k] for k in self._diff)}")
        out = []
        for t, i in zip(vleaves, self._diff_leaves, strict=True):
            shape, dtype = self._specs[i]
            _tree.refuse_subclass(t, "v")
            if type(t) is not np.ndarray or t.dtype != dtype:
                # (a device array stays on its device: cupy refuses np.asarray)
                t = array_module(t).asarray(real_values(t, "v"), dtype=dtype)
            if t.shape != shape:
                raise ValueError(f"v for argument {self._leaf_name(i)} has shape "
                                 f"{t.shape}; expected {shape}")
            out.append(t)
        return out


    def _trace_args(self, trace, leaves):
        """Input tracers for the leaves; the arguments rebuilt from them; the
        differentiated ones, in the order of ``argnums`` (as ``jax.grad``
        returns them: ``argnums=(2, 0)`` gives the gradients of arguments 2
        and 0, in that order)."""
        tracers = [trace.input(i, a.shape, a.dtype) for i, a in enumerate(leaves)]
        it = iter(tracers)
        targs, self._leaf_arg, per_arg = [], [], []
        for k, td in enumerate(self._treedefs):
            n = _tree.count_leaves(td)
            mine = [next(it) for _ in range(n)]
            self._leaf_arg.extend([k] * n)
            targs.append(_tree.unflatten(td, mine))
            per_arg.append(mine)
        diff_tracers = [t for k in self._diff for t in per_arg[k]]
        self._diff_leaves = [t.node.attrs["index"] for t in diff_tracers]
        trace.differentiated = frozenset(self._diff_leaves)
        return tracers, targs, diff_tracers
