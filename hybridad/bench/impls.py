"""The implementations a problem is timed with: hybridad, the hand-written
gradients and the peers (JAX, PyTorch, autograd).

Each is set up in two phases, so that a child process measuring memory
(:mod:`hybridad.bench.rss`) can import the library and convert the inputs
before its baseline and measure only the rest:

``prepare(name, problem, **options)``
    imports the library and converts the problem's arrays to its own
    (torch tensors, jax arrays); returns ``build``.
``build()``
    builds the implementation (hybridad: trace and plan; numba: compile;
    jax: jit) and makes the first call, timed as ``first_call_s``; returns
    an :class:`Impl`.

Peers are imported only inside their ``prepare`` (they are optional).

Names (:data:`PREPARE`): ``hybridad`` (``ha.compile`` then
``plan.gradient(*args, out=res)``; options ``backend``, ``pack`` and
``parallel``), ``hybridad serial`` (the same with ``parallel=False``: every
loop in the calling thread; no row where ``ha.compile``'s default is already
serial),
``ha.gradient`` (``ha.gradient(f, *args, argnums=..., out=res)``, the plan
cache), ``hand numpy`` (the hand-written numpy gradient, allocating),
``hand numpy out=`` (the same into buffers of its own), ``hand numba``
(:mod:`hybridad.bench.kernels`; option ``cache``), ``jax.jit``
(``jax.jit(jax.value_and_grad(f, argnums))`` with x64, ``block_until_ready``),
``torch`` (``torch.autograd.grad``) and ``autograd`` (HIPS
``autograd.value_and_grad`` with ``autograd.numpy``).

Every implementation gets the problem's arrays in their dtype
(:attr:`~hybridad.bench.workloads.Problem.dtype`): jax arrays made from
float32 numpy arrays stay float32 with x64 enabled, torch tensors take the
numpy arrays' dtype.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import time
from collections.abc import Callable

import numpy as np

from .workloads import gradient_leaves

RTOL_EXACT = 1e-12  # hybridad, hand-written numpy and numba: the same arithmetic
RTOL_PEER = 1e-9  # jax, torch, autograd: their exp, tanh and reductions differ in the last bits

OPTIONAL = {"jax.jit": "jax", "torch": "torch", "autograd": "autograd"}  # impl -> module
HYBRIDAD_IMPLS = ("hybridad", "hybridad serial", "ha.gradient")


@dataclasses.dataclass
class Impl:
    """A ready-to-time implementation of one problem.

    ``call()`` is one value+gradient evaluation at the problem's arguments,
    ``result(ret)`` turns its return value into ``(float value, [gradient
    arrays])``.  ``value_and_grad(x)`` (problems differentiated w.r.t.
    argument 0 only, else None) evaluates at a new value ``x`` of argument 0
    and returns ``(float, gradient)`` with a gradient array the caller may
    keep, as ``scipy.optimize.minimize(..., jac=True)`` needs.
    """

    name: str
    call: Callable[[], object]
    result: Callable[[object], tuple]
    rtol: float = RTOL_EXACT
    first_call_s: float | None = None
    numpy_memory: bool = True  # are its allocations numpy's (countable)?
    value_and_grad: Callable | None = None
    first_return: object = None  # what the first call returned


def _timed_first(call):
    t0 = time.perf_counter()
    ret = call()
    return ret, time.perf_counter() - t0


def _numpy_pair(ret):
    value, grad = ret
    return float(value), gradient_leaves(grad)


def _optimizer_form(problem, evaluate):
    """``value_and_grad(x)`` from ``evaluate(args) -> (value, gradient)`` (None unless
    the problem is differentiated w.r.t. argument 0 only)."""
    if problem.argnums != 0:
        return None
    rest = tuple(problem.args[1:])

    def value_and_grad(x):
        value, grad = evaluate((x, *rest))
        return float(value), grad

    return value_and_grad


# --- hybridad ---------------------------------------------------------------------------------


def _gradient_result(problem):
    import hybridad as ha

    if isinstance(problem.argnums, int):
        return ha.GradientResult(problem.args[problem.argnums])
    return ha.GradientResult(tuple(problem.args[i] for i in problem.argnums))


def _ha_pair(res):
    return float(res.value), gradient_leaves(res.gradient)


def prepare_hybridad(problem, backend="numba", pack=True, label="hybridad", parallel=None):
    """``ha.compile`` (or ``Plan(..., pack=False)``) + ``GradientResult`` + ``plan.gradient``.

    ``parallel``: passed on to ``ha.compile`` / ``Plan`` (None: their default).
    """
    import hybridad as ha
    from hybridad.plans.plan import Plan

    f, args, argnums = problem.f, problem.args, problem.argnums
    chosen = {} if parallel is None else {"parallel": parallel}

    def build():
        t0 = time.perf_counter()
        plan = (ha.compile(f, *args, argnums=argnums, backend=backend, wait=True, **chosen)
                if pack else Plan(f, args, argnums, backend=backend, pack=False, tiered=False,
                                  **chosen))
        res = _gradient_result(problem)
        ret = plan.gradient(*args, out=res)

        def call():
            return plan.gradient(*args, out=res)

        def evaluate(a):
            plan.gradient(*a, out=res)
            return res.value, res.gradient.copy()  # a new array: the caller may keep it

        return Impl(label, call, _ha_pair, RTOL_EXACT, time.perf_counter() - t0,
                    value_and_grad=_optimizer_form(problem, evaluate), first_return=ret)

    return build


def default_parallel():
    """``ha.compile``'s default ``parallel`` (the ``hybridad`` row's plans)."""
    import hybridad as ha

    return inspect.signature(ha.compile).parameters["parallel"].default


def prepare_hybridad_serial(problem, label="hybridad serial", **options):
    """:func:`prepare_hybridad` with ``parallel=False``; None when the default plan is
    serial already (the row would time the ``hybridad`` row's plan again)."""
    if default_parallel() is False:
        return None
    return prepare_hybridad(problem, label=label, parallel=False, **options)


def prepare_ha_gradient(problem, label="ha.gradient"):
    """``ha.gradient(f, *args, argnums=..., out=res)`` after ``ha.clear_cache()``."""
    import hybridad as ha
    from hybridad.plans.tiered import join_all

    f, args, argnums = problem.f, problem.args, problem.argnums

    def build():
        res = _gradient_result(problem)
        ha.clear_cache()

        def call():
            return ha.gradient(f, *args, argnums=argnums, out=res)

        def evaluate(a):
            ha.gradient(f, *a, argnums=argnums, out=res)
            return res.value, res.gradient.copy()

        ret, first = _timed_first(call)  # the first call: answered by the reference tier
        join_all()  # the warm figures are the compiled program's
        return Impl(label, call, _ha_pair, RTOL_EXACT, first,
                    value_and_grad=_optimizer_form(problem, evaluate), first_return=ret)

    return build


# --- hand-written ------------------------------------------------------------------------------


def prepare_hand_numpy(problem, label="hand numpy"):
    """The hand-written numpy gradient as people write it (new arrays every call)."""
    grad, args = problem.numpy_grad, problem.args

    def build():
        def call():
            return grad(*args)

        ret, first = _timed_first(call)
        return Impl(label, call, _numpy_pair, RTOL_EXACT, first,
                    value_and_grad=_optimizer_form(problem, lambda a: grad(*a)),
                    first_return=ret)

    return build


def prepare_hand_numpy_out(problem, label="hand numpy out="):
    """The hand-written numpy gradient into buffers of its own (``out=``); None if none."""
    if problem.make_numpy_out is None:
        return None
    args = problem.args

    def build():
        t0 = time.perf_counter()
        grad = problem.make_numpy_out(*args)
        ret = grad(*args)
        first = time.perf_counter() - t0

        def call():
            return grad(*args)

        return Impl(label, call, _numpy_pair, RTOL_EXACT, first, first_return=ret)

    return build


def prepare_hand_numba(problem, cache=True, label="hand numba"):
    """The problem's hand-written ``@numba.njit`` kernel; None if it has none.

    ``first_call_s``: compilation (or loading from numba's disk cache) and one run.
    """
    if problem.make_numba is None:
        return None
    import numba  # noqa: F401  (imported before a child's baseline)

    args = problem.args

    def build():
        t0 = time.perf_counter()
        grad = problem.make_numba(*args, cache=cache)
        ret = grad(*args)
        first = time.perf_counter() - t0

        def call():
            return grad(*args)

        def evaluate(a):
            value, g = grad(*a)
            return value, g.copy()  # a new array: the kernel's buffer is reused

        return Impl(label, call, _numpy_pair, RTOL_EXACT, first,
                    value_and_grad=_optimizer_form(problem, evaluate), first_return=ret)

    return build


# --- peers ------------------------------------------------------------------------------------


def prepare_jax(problem, label="jax.jit"):
    """``jax.jit(jax.value_and_grad(f, argnums=...))`` with x64, on jax arrays."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    jargs = jax.tree_util.tree_map(jnp.asarray, problem.args)
    jax.block_until_ready(jargs)
    objective, argnums = problem.port(jnp), problem.argnums

    def pair(ret):
        value, grads = ret
        grads = [grads] if isinstance(argnums, int) else list(grads)
        return float(value), [np.asarray(g) for g in grads]

    def build():
        t0 = time.perf_counter()
        fn = jax.jit(jax.value_and_grad(objective, argnums=argnums))
        ret = jax.block_until_ready(fn(*jargs))
        first = time.perf_counter() - t0

        def call():
            return jax.block_until_ready(fn(*jargs))

        def evaluate(a):
            value, g = fn(jnp.asarray(a[0]), *jargs[1:])
            return value, np.asarray(g)

        return Impl(label, call, pair, RTOL_PEER, first, numpy_memory=False,
                    value_and_grad=_optimizer_form(problem, evaluate), first_return=ret)

    return build


def prepare_torch(problem, label="torch"):
    """torch autograd in the problem's dtype: ``torch.autograd.grad(f(*tensors), params)``."""
    import torch

    diff = problem.diff_argnums

    def convert(i, a):
        if i in diff:
            return torch.tensor(a, requires_grad=True)  # (the numpy array's dtype)
        return [torch.from_numpy(b) for b in a] if isinstance(a, list) else torch.from_numpy(a)

    targs = [convert(i, a) for i, a in enumerate(problem.args)]
    objective = problem.port(torch)

    def evaluate(targs):
        value = objective(*targs)
        grads = torch.autograd.grad(value, [targs[i] for i in diff])
        return value.detach(), grads

    def pair(ret):
        return float(ret[0]), [g.numpy() for g in ret[1]]

    def build():
        def call():
            return evaluate(targs)

        def at(a):
            value, (g,) = evaluate([torch.tensor(a[0], requires_grad=True), *targs[1:]])
            return value, g.numpy()

        ret, first = _timed_first(call)
        return Impl(label, call, pair, RTOL_PEER, first, numpy_memory=False,
                    value_and_grad=_optimizer_form(problem, at), first_return=ret)

    return build


def prepare_autograd(problem, label="autograd"):
    """HIPS ``autograd.value_and_grad`` on ``autograd.numpy`` (several arguments as one tuple)."""
    import autograd
    import autograd.numpy as anp

    f, args, argnums = problem.port(anp), problem.args, problem.argnums
    if isinstance(argnums, int):
        def g(x, rest):
            return f(*rest[:argnums], x, *rest[argnums:])
        diff_arg, rest = args[argnums], args[:argnums] + args[argnums + 1:]
    else:  # the differentiated arguments as one tuple (autograd's argnum is one position)
        diff = set(argnums)

        def g(params, rest):
            p, r = iter(params), iter(rest)
            return f(*(next(p) if i in diff else next(r) for i in range(len(args))))
        diff_arg = tuple(args[i] for i in argnums)
        rest = tuple(a for i, a in enumerate(args) if i not in diff)
    value_and_grad = autograd.value_and_grad(g)

    def pair(ret):
        value, grads = ret
        return float(value), gradient_leaves(grads)

    def build():
        def call():
            return value_and_grad(diff_arg, rest)

        ret, first = _timed_first(call)
        return Impl(label, call, pair, RTOL_PEER, first, first_return=ret,
                    value_and_grad=_optimizer_form(problem, lambda a: value_and_grad(a[0], rest)))

    return build


PREPARE = {
    "hybridad": prepare_hybridad,
    "hybridad serial": prepare_hybridad_serial,
    "ha.gradient": prepare_ha_gradient,
    "hand numpy": prepare_hand_numpy,
    "hand numpy out=": prepare_hand_numpy_out,
    "hand numba": prepare_hand_numba,
    "jax.jit": prepare_jax,
    "torch": prepare_torch,
    "autograd": prepare_autograd,
}


def prepare(name, problem, **options):
    """``build`` of implementation ``name`` for ``problem`` (see the module docstring).

    ``options`` go to the implementation's ``prepare_*`` function; ``label``
    (all of them) renames the row.

    Returns None when the problem has no such implementation (no
    hand-written kernel of that kind).
    """
    return PREPARE[name](problem, **options)


def setup(name, problem, **options):
    """:func:`prepare` and build: the ready :class:`Impl` (or None)."""
    build = prepare(name, problem, **options)
    return None if build is None else build()


@functools.cache
def availability(name):
    """``None`` when implementation ``name`` can run here, else why not (for optional peers)."""
    module = OPTIONAL.get(name)
    if module is None:
        return None
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
        return f"import {module} failed: {exc!r}"
    return None
