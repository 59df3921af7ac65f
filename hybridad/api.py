"""Public entry points: :func:`gradient`, :func:`hvp`, :func:`hessian`,
:func:`jacobian` and :func:`compile`.

The mutating form is primary: ``gradient(f, x, out=res)`` builds (once) or
fetches the plan for ``f`` and this argument signature, then writes value and
gradient into ``res``.  Without ``out`` a new result is allocated and
returned -- a thin wrapper over the same path.  The plans live in the plan
cache (:mod:`hybridad.plans.cache`); :func:`compile` returns a plan the caller
holds instead.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import StalePlanError
from .frontend.guard_walk import root_of
from .plans.hessian import HessianPlan
from .plans import complex_args as _complex_args
from .plans import complex_jacobian as _complex_jacobian
from .plans import nested as _nested
from .plans.cache import MAX_PLANS_PER_FUNCTION, cached_plans, clear_cache
from .plans.cache import cached_call as _cached_call, call as _call, default_backend as _backend
from .plans.cache import lookup as _lookup, owner_of as _owner_of, \
    recent_gradient as _recent_gradient
from .plans.cache import recent_plan as _recent_plan, remember as _remember
from .plans.jacobian import JacobianPlan
from .plans.plan import Plan
from .results import HessianResult as _HessianResult, JacobianResult as _JacobianResult

if TYPE_CHECKING:
    from ._types import ArgNums, Backend, Function, JacobianMode
    from .optim import UpdateRule
    from .results import GradientResult, HessianResult, HvpResult, JacobianResult

__all__ = ["MAX_PLANS_PER_FUNCTION", "cached_plans", "clear_cache", "compile", "gradient",
           "hessian", "hvp", "jacobian"]

_MethodType = types.MethodType
_FunctionType = types.FunctionType
_ndarray = np.ndarray


def compile(f: Function, *example_args: Any, argnums: ArgNums = 0,  # noqa: A001
            backend: Backend = None, hvp: bool = False, parallel: bool = True,
            memory_budget: int | None = None, hessian: bool = False, jacobian: bool = False,
            mode: JacobianMode = "auto", chunk: int | None = None, cuda_graph: bool | None = None,
            update: UpdateRule | None = None, tiered: bool | None = None,
            wait: bool = False) -> Plan:
    """Build an explicit gradient plan for ``f`` at the example arguments.

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar.
    *example_args
        Arguments fixing the structure, shapes and dtypes the plan serves.
        Arrays are inputs (their values are not kept); other values (ints,
        floats, strings, None) are static and baked into the plan.
    argnums : int or tuple of int, default 0
        Which positional arguments are differentiated; all others are
        constants and cost no derivative work.
    backend : {"numba", "numpy", "cupy"}, optional
        ``"numba"``: the whole plan as one compiled function with fused
        elementwise regions; ``"numpy"``: the reference executor (numpy calls
        with ``out=``); ``"cupy"``: on an NVIDIA GPU, fused regions as
        generated CUDA kernels (``docs/gpu.md``).  Default: ``"cupy"`` when an
        argument is a cupy array, else ``"numba"``.
    hvp : bool, default False
        Build a Hessian-vector-product plan (``plan.hvp(*args, v=v, out=res)``:
        value, gradient and ``H v``) instead of a gradient plan.
    parallel : bool, default True
        ``True``: loops of at least ``PARALLEL_MIN`` (32768) iterations run
        as multithreaded ``prange`` loops (numba's threading layer, one
        pool per process).  ``False``: every loop runs in the calling
        thread and the plan starts no worker threads -- better when the
        calls are interleaved with other multithreaded work on few cores
        (an optimizer's BLAS: idle worker threads of two pools fight for
        the cores; see ``docs/scipy.md``), or when you parallelize over
        plans yourself.  Numba backend only; results agree to rounding.
    memory_budget : int, optional
        Most bytes of workspace the plan may hold (its arenas; arguments and
        result buffers are the caller's).  Over budget, every fused region
        is recomputed in the backward sweep instead of storing its partials
        from the forward sweep, and a loop stores its carries alone; then
        loops are checkpointed on 2-4 levels (``explain()`` says so, with the
        recompute factor).  A Hessian or Jacobian plan also takes fewer seeds
        per chunk (without ``chunk=``).  If nothing fits,
        :class:`hybridad.errors.MemoryBudgetError` is raised here, with the
        smallest workspace that can be planned -- never an out-of-memory at
        run time.

    hessian : bool, default False
        Build a :class:`hybridad.plans.hessian.HessianPlan` (one array argument):
        ``plan.hessian(*args, out=res)`` writes value, gradient and Hessian
        into a :class:`HessianResult`; ``plan.hvp(*args, v=v)`` gives ``H v``
        for one ``v`` or a stack of them, and ``plan.linearize(*args)``
        followed by ``plan.hvp(v=v)`` serves many ``v`` at one point with only
        the tangent pass per ``v``.  Forward over reverse.
    jacobian : bool, default False
        Build a :class:`hybridad.plans.jacobian.JacobianPlan` for ``f`` returning an
        array: ``plan.jacobian(*args, out=res)`` into a :class:`JacobianResult`.
    mode : {"auto", "forward", "reverse"}, default "auto"
        Jacobian plans: forward mode (chunks of tangents: columns) or reverse
        mode (chunks of cotangent seeds: rows); ``"auto"`` takes forward when
        ``x.size <= y.size``.
    chunk : int, optional
        Jacobian and Hessian plans: seeds per run of the chunked program
        (default :func:`hybridad.plans.chunks.default_chunk`: all of them up to 128,
        else 32, fewer when one seed's workspace is large; measured).
    cuda_graph : bool, optional
        ``backend="cupy"`` only.  By default (None) a GPU plan captures its
        gradient program as a CUDA graph once the same arrays come back a
        second time in a row, and replays it while they do (one launch per
        call instead of one per kernel); calls with new arrays run eagerly.
        True captures at the first call; False never captures (see
        ``docs/gpu.md``).
    update : hybridad.optim.UpdateRule, optional
        ``SGD(lr)``, ``Momentum(lr, momentum)`` or ``Adam(lr, ...)``: build a
        training-step plan; ``plan.step(*args, out=res)`` writes the loss into
        ``res.value`` and updates the differentiated arrays in place, each as
        soon as its gradient is complete in the backward sweep (the rule's
        state preallocated in the plan; no gradient buffer for the caller).
    tiered : bool, optional
        Gradient plans on numba: answer the first call with the numpy
        reference program while the numba program compiles in a background
        thread; every later call runs the compiled program (the second call
        waits for the compile).  The first call's results agree with the
        compiled program's to rounding, not bitwise
        (:mod:`hybridad.plans.tiered`).  Default: off (the plan compiles
        before it returns and every call is the compiled program's), unless
        the environment sets ``HYBRIDAD_TIERED=1``.
    wait : bool, default False
        Return only once the compiled program is in place (``plan.wait()``).

    Returns
    -------
    Plan
        With ``.gradient(*args, out=None)`` (``.hvp(*args, v, out=None)`` when
        ``hvp=True``), ``.value(*args)`` and ``.explain()``; a
        ``HessianPlan`` or ``JacobianPlan`` for ``hessian=True`` /
        ``jacobian=True``.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.linspace(0.0, 1.0, 5)
    >>> plan = ha.compile(lambda x: np.sum(np.exp(x)), x)
    >>> res = ha.GradientResult(x)
    >>> _ = plan.gradient(x, out=res)
    >>> bool(np.allclose(res.gradient, np.exp(x)))
    True
    """
    backend = _backend(backend, example_args)
    if hessian and jacobian:
        raise ValueError("hessian=True and jacobian=True: choose one")
    if (hessian or jacobian) and (hvp or cuda_graph or update is not None):
        raise ValueError("hessian / jacobian plans take neither hvp=True, cuda_graph=True nor "
                         "an update rule")
    plan: Plan
    if hessian:
        plan = HessianPlan(f, example_args, argnums, backend, chunk=chunk, parallel=parallel,
                           colors=hessian_colors, memory_budget=memory_budget)
    elif jacobian:
        plan = JacobianPlan(f, example_args, argnums, backend, mode=mode, chunk=chunk,
                            parallel=parallel, memory_budget=memory_budget)
    else:
        plan = Plan(f, example_args, argnums, backend, hvp=hvp, parallel=parallel,
                    memory_budget=memory_budget, cuda_graph=cuda_graph, update=update,
                    tiered=tiered)
        if wait:
            plan.wait()
    plan._root = root_of(f)  # an explicit plan keeps f alive: its guards read from it
    return plan


def hessian_colors(nodes, x, y, n, dtype):
    """A dense Hessian plan's coloring of its Hessian, or None
    (:func:`hybridad.sparse.dense.hessian_colors`; the sparse package is
    imported when a plan first asks: plans of at least
    :data:`~hybridad.plans.hessian.COLORS_MIN_N` elements)."""
    from .sparse.dense import hessian_colors as colors

    return colors(nodes, x, y, n, dtype)


def _is_sparse(out):
    """Whether ``out`` is a sparse result (:mod:`hybridad.sparse`, imported on first use)."""
    results = sys.modules.get("hybridad.sparse.results")
    return results is not None and isinstance(out, results._SparseResult)




def gradient(f: Function, *args: Any, argnums: ArgNums = 0, out: GradientResult | None = None,
             backend: Backend = None) -> GradientResult:
    """Value and gradient of a scalar function, written into ``out``.

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar (0-d) value.
    *args
        Arguments to ``f``.  Differentiated ones are float32 or float64
        arrays, or tuples/namedtuples/lists/dicts of them (the gradient has the same
        structure).  Numbers and (nested, rectangular) lists or tuples of
        numbers are converted as ``np.asarray`` does, integers to float64,
        so ``f`` receives one array; a list holding arrays, or a ragged one,
        is a container.  Other array arguments are constants; non-array
        arguments are static (part of the cache key).  ndarray subclasses
        with their own semantics (masked arrays, ``np.matrix``) and dtypes
        hybridad does not trace (float16, longdouble, object) raise a
        TypeError naming the argument (docs/limitations.md).  A complex
        argument ``z = x + iy`` gets ``du/dx - 1j du/dy`` (autograd, JAX).
    argnums : int or tuple of int, default 0
        Arguments to differentiate.  With a tuple, ``out.gradient`` is a tuple,
        in the order of ``argnums`` (as ``jax.grad``: ``(2, 0)`` gives the
        derivatives of arguments 2 and 0, in that order).
    out : GradientResult or DiffResult, optional
        Preallocated result, overwritten in place and returned.  It is checked
        before anything is written and left untouched on error.
    backend : {"numba", "numpy", "cupy"}, optional
        See :func:`compile` (default: ``"cupy"`` for cupy arrays, else ``"numba"``).

    Returns
    -------
    GradientResult
        ``out``, or a newly allocated result when ``out`` is None.

    Notes
    -----
    The first call for a new signature traces ``f`` and builds a plan; later
    calls only run it and allocate no numpy memory.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([0.5, -1.0])
    >>> res = ha.gradient(lambda x: np.sum(np.sin(x)), x)
    >>> bool(np.allclose(res.gradient, np.cos(x)))
    True
    """
    # the function's most recent plan, for a call like the last one (inlined
    # _recent_plan, one or two arguments spelled out: this is most of
    # ha.gradient's own cost)
    if type(f) is _MethodType:
        owner, sub = f.__self__, f.__func__
    else:
        owner, sub = f, None
    e = _recent_gradient.get(id(owner))
    if e is None and sub is None and type(f) is _FunctionType:  # (a lambda made anew: its twin's)
        owner = _owner_of(f)
        e = _recent_gradient.get(id(owner))
    if e is not None and e[1] is sub and e[2] == argnums and e[3] == backend and \
            e[0]() is owner and ((made := e[7]) is None or f.__code__ is made[0] and
                                 f.__defaults__ is made[1] and f.__kwdefaults__ is made[2]):
        shapes, dtypes, n = e[5], e[6], len(args)
        if shapes is None:  # pytree or static arguments: the plan's generated check
            ok = dtypes(args)
        elif n == 1:
            a = args[0]
            ok = type(a) is _ndarray and a.shape == shapes[0] and a.dtype is dtypes[0]
        elif n == 2:
            a, b = args
            ok = type(a) is _ndarray and a.shape == shapes[0] and a.dtype is dtypes[0] and \
                type(b) is _ndarray and b.shape == shapes[1] and b.dtype is dtypes[1]
        else:
            ok = n == len(shapes) and all(
                type(a) is _ndarray and a.shape == s and a.dtype is d
                for a, s, d in zip(args, shapes, dtypes))  # noqa: B905 - lengths compared
        if ok:
            try:
                # (the plan's attribute, not a bound method kept: a tiered plan
                # puts its fast path there when its compiled program arrives)
                return e[8].gradient(*args, out=out)
            except StalePlanError:
                pass  # f changed: the general path rebuilds
    # (inside a function being differentiated: plans/nested.py)
    return _nested.plan_or_nested(args, lambda: _gradient(f, args, argnums, out, backend),
                                  lambda: _nested.gradient(f, args, argnums, out))


def _gradient(f, args, argnums, out, backend):
    """:func:`gradient` by a plan (the general path)."""
    if _complex_args.any_complex(args):  # as (real, imag) pairs: plans/complex_args.py
        return _complex_args.gradient(_lookup, f, args, argnums, out, backend)
    requested = backend
    backend = _backend(backend, args)

    def lookup(stale):
        plan = _lookup(f, args, argnums, backend, stale=stale, twin=True)[0]
        _remember("gradient", f, args, argnums, requested, plan)
        return plan

    return _call(lookup, lambda plan: plan.gradient(*args, out=out))


def hvp(f: Function, x: Any, v: Any, *args: Any, argnums: ArgNums = 0,
        out: HvpResult | None = None, backend: Backend = None) -> HvpResult:
    """Value, gradient and Hessian-vector product of a scalar function.

    ``H v`` is computed without forming ``H``: tangents are pushed through
    the gradient's graph (forward over reverse), about the cost of three
    gradients.  For many ``v`` at one point, see
    :meth:`hybridad.plans.hessian.HessianPlan.linearize`.  Complex ``x``:
    ``d/dt gradient(x + t v)``, as ``jax.jvp(jax.grad(f), (x,), (v,))``.

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar, called as ``f(x, *args)``.
    x : ndarray
        The first argument.
    v : ndarray or tuple/list/dict of ndarray
        The vector, shaped like the differentiated argument(s).
    *args
        Further arguments to ``f``.
    argnums : int or tuple of int, default 0
        Arguments (positions in ``(x, *args)``) differentiated.
    out : HvpResult or DiffResult, optional
        Preallocated ``(value, gradient, hvp)`` buffers, overwritten in place
        (checked first, untouched on error).
    backend : {"numba", "numpy"}, default "numba"

    Returns
    -------
    HvpResult
        ``out``, or a newly allocated result.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> res = ha.hvp(lambda x: np.sum(x ** 3) + x[0] * x[1], x, np.array([1.0, 1.0]))
    >>> res.hvp  # [[6, 1], [1, 12]] @ [1, 1]
    array([ 7., 13.])
    """
    both = (x, *args)
    plan = _recent_plan("hvp", f, both, argnums, backend)  # (exact real ndarrays only)
    if plan is not None:
        try:
            return plan.hvp(*both, v=v, out=out)
        except StalePlanError:
            pass  # f changed: the general path rebuilds
    def by_plan():
        if _complex_args.any_complex(both):  # plans/complex_args.py
            return _complex_args.hvp(_lookup, f, both, v, argnums, out, backend)
        return _cached_call("hvp", f, both, argnums, backend, None, None,
                            lambda plan: plan.hvp(*both, v=v, out=out), hvp=True)

    # (inside a function being differentiated: plans/nested.py)
    return _nested.plan_or_nested((*both, v), by_plan,
                                  lambda: _nested.hvp(f, both, v, argnums, out))


def hessian(f: Function, x: Any, *args: Any, argnums: ArgNums = 0,
            out: HessianResult | None = None, backend: Backend = None,
            chunk: int | None = None) -> HessianResult:
    """Value, gradient and Hessian of a scalar function of one array.

    Forward over reverse: chunks of tangents are pushed through the forward
    and backward graph (see :class:`hybridad.plans.hessian.HessianPlan`); the plan
    is cached like :func:`gradient`'s.  Complex ``x``: the real ``(2n, 2n)``
    Hessian over ``(x.real, x.imag)`` (:mod:`hybridad.plans.complex_args`).

    Parameters
    ----------
    f : callable
        Plain numpy code returning a scalar, called as ``f(x, *args)``.
    x : ndarray
        The first argument.
    *args
        Further arguments to ``f``.
    argnums : int, default 0
        The one array argument (a position in ``(x, *args)``) differentiated.
    out : HessianResult or DiffResult, optional
        Preallocated ``(value, gradient, hessian)`` buffers, the Hessian of
        shape ``(n, n)`` for ``n`` elements of the argument (flattened in C
        order), overwritten in place (checked first, untouched on error).
    backend : {"numba", "numpy"}, default "numba"
    chunk : int, optional
        Hessian columns per run of the chunked program (see :func:`compile`).

    Returns
    -------
    HessianResult
        ``out``, or a newly allocated result.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> ha.hessian(lambda x: np.sum(x ** 3) + x[0] * x[1], x).hessian
    array([[ 6.,  1.],
           [ 1., 12.]])
    """
    full = (x, *args)
    # the function's most recent plan for a call like the last one (exact real
    # ndarrays, or the plan's structure: a tracer or complex array never matches)
    plan = _recent_plan("hessian", f, full, argnums, backend, chunk)
    if plan is not None and (out is None or out.__class__ is _HessianResult):
        try:
            return plan.hessian(*full, out=out)
        except StalePlanError:
            pass  # f changed: the general path rebuilds
    if _is_sparse(out):  # a sparse Hessian: hybridad/sparse/run.py
        from .sparse import run as _sparse

        return _sparse.hessian(f, (x, *args), argnums, out, backend, chunk, _lookup, _backend)
    full = (x, *args)
    def by_plan():
        if _complex_args.any_complex(full):  # plans/complex_args.py
            return _complex_args.hessian(_lookup, f, full, argnums, out, backend, chunk)
        return _cached_call("hessian", f, full, argnums, backend, chunk,
                            lambda g, b: HessianPlan(g, full, argnums, b, chunk=chunk,
                                                  colors=hessian_colors),
                            lambda plan: plan.hessian(*full, out=out), tag=("hessian", chunk))

    # (inside a function being differentiated: plans/nested.py)
    return _nested.plan_or_nested(full, by_plan, lambda: _nested.hessian(f, full, argnums, out))


def jacobian(f: Function, x: Any, *args: Any, argnums: ArgNums = 0,
             out: JacobianResult | None = None, mode: JacobianMode = "auto",
             backend: Backend = None, chunk: int | None = None,
             holomorphic: bool = False) -> JacobianResult:
    """Value and Jacobian of a function from one array to an array.

    Parameters
    ----------
    f : callable
        Plain numpy code returning an array (any shape), called as ``f(x, *args)``.
    x : ndarray
        The first argument.
    *args
        Further arguments to ``f``.
    argnums : int, default 0
        The one array argument differentiated.
    out : JacobianResult or DiffResult, optional
        Preallocated ``(value, jacobian)`` buffers: the value shaped like
        ``f``'s, the Jacobian ``(y.size, x.size)`` (both flattened in C order),
        overwritten in place (checked first, untouched on error).
    mode : {"auto", "forward", "reverse"}, default "auto"
        Forward mode (chunks of tangents, one chunk per ``chunk`` columns) or
        reverse mode (chunks of cotangent seeds, rows); ``"auto"``: forward
        when ``x.size <= y.size``.
    backend : {"numba", "numpy"}, default "numba"
    chunk : int, optional
        Seeds per run of the chunked program (see :func:`compile`).
    holomorphic : bool, default False
        Complex values of a complex ``x``: ``J = df/dz`` (needed, and refused
        otherwise, as by ``jax.jacfwd``/``jacrev``).  Complex values of a real
        ``x``: ``dRe f/dx + 1j dIm f/dx``; real values of a complex ``x``: rows
        are gradients (:mod:`hybridad.plans.complex_jacobian`).

    Returns
    -------
    JacobianResult
        ``out``, or a newly allocated result.

    Examples
    --------
    >>> import numpy as np, hybridad as ha
    >>> x = np.array([1.0, 2.0])
    >>> ha.jacobian(lambda x: np.stack([x[0] * x[1], np.sin(x[0])]), x).jacobian.round(4)
    array([[2.    , 1.    ],
           [0.5403, 0.    ]])
    """
    full = (x, *args)
    if not holomorphic:  # the most recent plan, as for hessian
        plan = _recent_plan("jacobian", f, full, argnums, backend, (mode, chunk))
        if plan is not None and (out is None or out.__class__ is _JacobianResult):
            try:
                return plan.jacobian(*full, out=out)
            except StalePlanError:
                pass
    if _is_sparse(out):  # a sparse Jacobian: hybridad/sparse/run.py
        from .sparse import run as _sparse

        return _sparse.jacobian(f, (x, *args), argnums, out, backend, mode, chunk, _lookup,
                                _backend)
    full = (x, *args)
    return _nested.plan_or_nested(  # (inside a function being differentiated: plans/nested.py)
        full, lambda: _complex_jacobian.dispatch(  # complex ones: plans/complex_jacobian.py
            lambda: _cached_call("jacobian", f, full, argnums, backend, (mode, chunk),
                                 lambda g, b: JacobianPlan(g, full, argnums, b, mode=mode,
                                                           chunk=chunk),
                                 lambda plan: plan.jacobian(*full, out=out),
                                 tag=("jacobian", mode, chunk)),
            _lookup, f, full, argnums, out, mode, backend, chunk, holomorphic),
        lambda: _nested.jacobian(f, full, argnums, out))
