"""Filling a sparse result: the compressed pass of a cached plan, then the
decompression into the result's ``csr_array``.

A sparse Jacobian with ``c`` colors is ``J @ S`` -- forward mode with ``c``
tangent directions, the columns of the seed matrix ``S`` -- or ``S^T @ J``
in reverse mode; a sparse Hessian is ``H @ S``, ``c`` Hessian-vector
products.  These are exactly the *chunk* programs of
:class:`hybridad.plans.jacobian.JacobianPlan` and
:class:`hybridad.plans.hessian.HessianPlan` built with ``chunk=c`` (the
plans :func:`hybridad.jacobian` / :func:`hybridad.hessian` cache for that
chunk): the result's seed matrix is handed to the chunk program as its seed
input, all colors run as one batched pass, and the program writes the
compressed derivative into the result's own buffer.  Decompression is one
``np.take`` of precomputed positions into ``.data`` (``out=``, ``mode="wrap"``:
unbuffered).  Nothing is allocated per call.

Which plan a result runs is remembered in the result (its *binding*), so a
repeated call with the same function and arguments of the same shapes costs a
few comparisons before the plan runs.  A new binding -- another function,
other static arguments, or a plan rebuilt because ``f`` changed -- first
checks that the function's detected pattern lies within the result's (a
result built by detection from this very call skips the check).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import StalePlanError
from ..plans.hessian import HessianPlan
from ..plans.jacobian import JacobianPlan
from ..plans.validate import check_results
from ..frontend.guards import _same_content, values_read
from .pattern import hessian_pattern, jacobian_pattern, trace_for_sparsity
from .results import (
    SparseHessianResult,
    SparseJacobianResult,
    _identity,
    _signature,
    _SparseResult,
    same_function,
)

__all__ = ["SparseHessianResult", "SparseJacobianResult", "SparseResult", "hessian",
           "jacobian"]

SparseResult = _SparseResult
_STATIC = (int, float, bool, str, bytes, complex, type(None))


class _Binding:
    """The plan a result last ran, and the views of the result's buffers it reads."""

    __slots__ = ("argnums", "backend", "comp", "comp_flat", "identity", "plan", "seed", "specs",
                 "take_tmp", "verified")

    def same_call(self, f, args, argnums, backend):
        if argnums != self.argnums or backend != self.backend or len(args) != len(self.specs) \
                or not same_function(self.identity, f):
            return False
        for a, spec in zip(args, self.specs):  # noqa: B905 - lengths compared
            if type(a) is np.ndarray:
                if type(spec) is not tuple or a.shape != spec[0] or a.dtype is not spec[1]:
                    return False
            elif not (a is spec or type(a) in _STATIC and type(a) is type(spec) and a == spec):
                return False
        return True


def _spec(a):
    return (a.shape, a.dtype) if type(a) is np.ndarray else a


def _verify(out, kind, f, args, argnums):
    """Refuse ``f`` when its detected pattern has a nonzero outside ``out``'s."""
    nodes, x, y = trace_for_sparsity(f, args, argnums)
    if kind == "jacobian":
        got = jacobian_pattern(nodes, x, y)
    else:
        if y.size != 1:
            raise ValueError(f"a Hessian needs a scalar function; f returned shape {y.shape}")
        got = hessian_pattern(nodes, x, y)
    if got.shape != out.pattern.shape:
        raise ValueError(f"this result's pattern has shape {out.pattern.shape}; the "
                         f"{kind} of f here has shape {got.shape}")
    inside = got.multiply(out.pattern)
    if inside.nnz != got.nnz:
        extra = (got.astype(np.int8) - inside.astype(np.int8)).tocoo()
        k = int(np.flatnonzero(extra.data)[0])
        raise ValueError(
            f"f's {kind} has structural nonzeros outside this result's pattern (e.g. at "
            f"({int(extra.row[k])}, {int(extra.col[k])})): the result was made for another "
            f"function or other arguments; make a new Sparse{kind.capitalize()}Result for "
            "this one")


def _bind(out, kind, f, args, argnums, backend, lookup, resolve, stale=None):
    b = out._bound
    if stale is None and b is not None and b.same_call(f, args, argnums, backend):
        return b
    resolved = resolve(backend, args)
    if resolved == "cupy":
        raise TypeError("sparse results live on the host (scipy.sparse): use numpy arrays "
                        "and backend='numba' or 'numpy'")
    c, parallel = max(out.colors, 1), out.parallel
    if kind == "jacobian":
        tag = ("jacobian", out.mode, c)

        def build(g):
            return JacobianPlan(g, args, argnums, resolved, mode=out.mode, chunk=c,
                                parallel=parallel)
    else:
        tag = ("hessian", c)

        def build(g):
            return HessianPlan(g, args, argnums, resolved, chunk=c, parallel=parallel)
    plan = lookup(f, args, argnums, resolved, parallel=parallel, tag=tag, stale=stale,
                  build=build)[0]
    m, n = out.pattern.shape
    if kind == "jacobian":
        if plan._n != n or plan._m != m:
            raise ValueError(f"this result's Jacobian is {m} x {n}; f's here is "
                             f"{plan._m} x {plan._n} (f's value has shape {plan._yshape}, the "
                             f"argument {plan._shape})")
        forward = out.mode == "forward"
        seed_shape = plan._shape if forward else plan._yshape
        comp_shape = plan._yshape if forward else plan._shape
        seed_dtype = plan._dtype if forward else plan._value_dtype
    else:
        if plan._n != n:
            raise ValueError(f"this result's Hessian is {n} x {n}; the argument here has "
                             f"{plan._n} elements (shape {plan._shape})")
        seed_shape = comp_shape = plan._shape
        seed_dtype = plan._dtype
    nb = _Binding()
    nb.identity, nb.argnums, nb.backend = _identity(f), argnums, backend
    nb.specs = tuple(_spec(a) for a in args)
    nb.plan = plan
    seed = out._seed if out._seed.dtype == seed_dtype else out._seed.astype(seed_dtype)
    nb.seed = seed.reshape((out.colors, *seed_shape))
    comp = out._comp if out._comp.dtype == plan._dtype else \
        np.zeros(out._comp.shape, plan._dtype)
    nb.comp = comp.reshape((out.colors, *comp_shape))
    nb.comp_flat = comp.reshape(-1)
    nb.take_tmp = None if comp.dtype == out._data.dtype else np.zeros(out._data.shape, comp.dtype)
    verified = b.verified if b is not None else _plan_set()
    trusted = stale is None and out._detected is not None and \
        same_function(out._detected[0], f) and out._detected[1] == _signature(f, args, argnums) \
        and all(_same_content(a, snap) for a, snap in out._detected[2].values())
    if not trusted and plan not in verified:
        with values_read() as read:
            _verify(out, kind, f, args, argnums)
        plan._pin_values(read, f)  # (the pattern read captured arrays' zeros: guarded)
    elif trusted:
        plan._pin_values({k: a for k, (a, _) in out._detected[2].items()}, f)
    verified.add(plan)
    nb.verified = verified
    out._bound = nb
    return nb


def _plan_set():
    return weakref.WeakSet()


def _decompress(out, b):
    if b.take_tmp is None:
        np.take(b.comp_flat, out._sources, out=out._data, mode="wrap")
    else:
        np.take(b.comp_flat, out._sources, out=b.take_tmp, mode="wrap")
        np.copyto(out._data, b.take_tmp, casting="unsafe")


def _run_jacobian(out, b, args):
    plan = b.plan
    with plan._lock:
        if plan._guarded:
            plan._check_stale(args)
        leaves = plan._leaves(args)
        value, data = out._value, out._check_matrix("jacobian")
        check_results(np, [("out.value", value, plan._yshape, plan._value_dtype),
                           ("out.jacobian.data", data, data.shape, plan._value_dtype)],
                      plan._reads(leaves))
        staged = plan._raises["chunk"]  # a chunk that can fail: the value waits for it
        val = plan._staging("sparse_value", value.shape, value.dtype) if staged else value
        plan._run_program("primal", leaves, [val])
        if out.colors:
            plan._run_program("chunk", [*leaves, b.seed], [val, b.comp])
        if staged:
            np.copyto(value, val)
        _decompress(out, b)
    return out


def _run_hessian(out, b, args):
    plan = b.plan
    with plan._lock:
        if plan._guarded:
            plan._check_stale(args)
        leaves = plan._leaves(args)
        value, grad, data = out._value, out._derivs[0], out._check_matrix("hessian")
        check_results(np, [("out.value", value, (), None),
                           ("out.gradient", grad, plan._shape, plan._dtype),
                           ("out.hessian.data", data, data.shape, plan._dtype)],
                      plan._reads(leaves))
        staged = plan._raises["chunk"]
        val, g = (plan._scratch_value, plan._scratch_grad) if staged else (value, grad)
        plan._primal(leaves, val, g)
        if out.colors:
            plan._run_program("chunk", [*leaves, b.seed], [val, g, b.comp])
        if staged:
            np.copyto(value, val)
            np.copyto(grad, g)
        _decompress(out, b)
    return out


def _fill(kind, run, f, args, argnums, out, backend, lookup, resolve):
    b = _bind(out, kind, f, args, argnums, backend, lookup, resolve)
    try:
        return run(out, b, args)
    except StalePlanError:  # f changed since it was traced: a new plan, checked again
        b = _bind(out, kind, f, args, argnums, backend, lookup, resolve, stale=b.plan)
        return run(out, b, args)


def jacobian(f, args, argnums, out, backend, mode, chunk, lookup, resolve):
    """``hybridad.jacobian(f, *args, out=out)`` for a :class:`SparseJacobianResult`
    (``lookup`` and ``resolve``: the plan cache's lookup and backend default,
    from :mod:`hybridad.api`)."""
    if not isinstance(out, SparseJacobianResult):
        raise TypeError(f"out must be a SparseJacobianResult here; got {type(out).__name__}")
    if mode not in ("auto", out.mode):
        raise ValueError(f"this SparseJacobianResult was colored for mode={out.mode!r}; got "
                         f"mode={mode!r} (choose the mode when making the result)")
    if chunk is not None:
        raise ValueError("chunk= does not apply to a sparse Jacobian: all its colors run as "
                         "one batched pass")
    if not isinstance(argnums, (int, np.integer)) or isinstance(argnums, bool):
        raise TypeError(f"a sparse Jacobian differentiates one array argument; got "
                        f"argnums={argnums!r}")
    return _fill("jacobian", _run_jacobian, f, args, argnums, out, backend, lookup, resolve)


def hessian(f, args, argnums, out, backend, chunk, lookup, resolve):
    """``hybridad.hessian(f, *args, out=out)`` for a :class:`SparseHessianResult`."""
    if not isinstance(out, SparseHessianResult):
        raise TypeError(f"out must be a SparseHessianResult here; got {type(out).__name__}")
    if chunk is not None:
        raise ValueError("chunk= does not apply to a sparse Hessian: all its colors run as "
                         "one batched pass")
    if not isinstance(argnums, (int, np.integer)) or isinstance(argnums, bool):
        raise TypeError(f"a sparse Hessian differentiates one array argument; got "
                        f"argnums={argnums!r}")
    return _fill("hessian", _run_hessian, f, args, argnums, out, backend, lookup, resolve)
