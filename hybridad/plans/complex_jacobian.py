"""Complex Jacobians: :func:`hybridad.jacobian` of a function with complex
values, of a complex argument, or both -- JAX's conventions, on real plans.

With ``z = x + iy`` the differentiated argument and ``f`` flattened in C order:

- real ``x``, complex ``f``: ``J = dRe f/dx + 1j dIm f/dx`` (``jax.jacfwd``);
  the value is complex.
- complex ``z``, complex ``f``, ``holomorphic=True``: ``J = df/dz``, computed as
  ``dRe f/dx + 1j dIm f/dx`` -- the derivative along the real axis, which is
  ``df/dz`` where ``f`` is holomorphic (``jax.jacfwd``/``jacrev`` with
  ``holomorphic=True``; holomorphy is not checked).  Without
  ``holomorphic=True`` this is refused, as JAX refuses it.
- complex ``z``, real ``f``: row ``i`` is the gradient of ``f_i``,
  ``df_i/dx - 1j df_i/dy`` (``jax.jacrev``), so that the Jacobian of a real
  scalar function agrees with :func:`hybridad.gradient`.  ``holomorphic=True``
  is refused here, and with a real ``x``, as JAX refuses them.

The real plan sees a complex output as ``np.stack([f.real, f.imag])`` and the
complex argument as its real part (holomorphic: the imaginary part is a
constant argument) or as ``np.stack([z.real, z.imag])``; its real Jacobian is
written into the caller's complex buffers through ``.real``/``.imag`` views.
"""

from __future__ import annotations

import math
import types
import weakref

import numpy as np

from ..frontend.numpy_complex import ComplexArrayError
from ..results import DiffResult, JacobianResult
from .._xp import array_module
from .arguments import normalize_argnums
from .cache import default_backend
from .complex_args import (acquire, any_complex, complex_dtype, reads, realified, run,
                           traced_complex_output, write_complex)
from .jacobian import JacobianPlan
from .validate import check_results

__all__ = ["dispatch", "jacobian", "routes"]

#: functions seen returning complex values (owner -> method functions, None for a
#: plain function): their later Jacobians go straight to :func:`jacobian`
_COMPLEX_VALUED = weakref.WeakKeyDictionary()


def _owner(f):
    return (f.__self__, f.__func__) if isinstance(f, types.MethodType) else (f, None)


def routes(f, args, holomorphic=False):
    """Whether :func:`hybridad.jacobian` of ``f`` at ``args`` is a complex one."""
    if holomorphic or any_complex(args):
        return True
    if not _COMPLEX_VALUED:
        return False
    owner, sub = _owner(f)
    try:
        return sub in _COMPLEX_VALUED.get(owner, ())
    except TypeError:
        return False


def _remember(f):
    owner, sub = _owner(f)
    try:
        _COMPLEX_VALUED.setdefault(owner, set()).add(sub)
    except TypeError:  # not weakly referenceable: found again by the real path's error
        pass


def dispatch(real, lookup, f, args, argnums, out, mode, backend, chunk, holomorphic):
    """:func:`hybridad.jacobian`: ``real()`` (the real plan's call), or
    :func:`jacobian` for complex arguments, ``holomorphic=True``, or a function
    seen -- now, by the real plan's trace, or before -- returning complex values."""
    if routes(f, args, holomorphic):
        return jacobian(lookup, f, args, argnums, out, mode, backend, chunk, holomorphic)
    try:
        return real()
    except ComplexArrayError:  # f returned complex values to the real plan
        return jacobian(lookup, f, args, argnums, out, mode, backend, chunk, holomorphic)


def jacobian(lookup, f, args, argnums, out, mode, backend, chunk, holomorphic):
    """:func:`hybridad.jacobian` with complex values or arguments (see the
    module docstring); ``lookup`` is the plan cache (:func:`hybridad.plans.cache.lookup`)."""
    argnums, nums = normalize_argnums(argnums, len(args))
    diff = nums[0] if len(nums) == 1 else None  # a tuple: the plan says why not
    z = args[diff] if diff is not None else None
    dz = diff is not None and any_complex((z,))
    if holomorphic and not dz:
        raise TypeError("holomorphic=True needs a complex differentiated argument (as "
                        f"jax.jacfwd); argument {diff} is {np.result_type(z)}")
    layout = tuple((k, ("re" if holomorphic else "stack") if k == diff else "pair")
                   for k, a in enumerate(args) if any_complex((a,)))
    kind = "holomorphic" if holomorphic else ("real" if dz else "jacobian")
    real_f = realified(f, layout, kind)
    backend = default_backend(backend, args)
    e, held = acquire(real_f, args, layout, ("jacobian", argnums, backend, mode, chunk))
    try:
        real = e.fill(args, layout)

        def build(g):
            plan = JacobianPlan(g, real, argnums, backend, mode=mode, chunk=chunk)
            plan._complex_out = traced_complex_output()  # as f traced in this thread
            return plan

        def get_plan(stale):
            return lookup(real_f, real, argnums, backend, stale=stale, build=build,
                          tag=("jacobian", mode, chunk))[0]

        def prepare(plan, inner):
            return _prepare(plan, inner, args, z, dz, out)

        def call(plan, inner):
            plan.jacobian(*real, out=inner)
        res = run(e, get_plan, prepare, call)
        if e.plan._complex_out and not layout:
            _remember(f)
        return res
    finally:
        if held:
            e.lock.release()


def _prepare(plan, inner, args, z, dz, out):
    cplx = plan._complex_out
    val, jac = inner.value, inner.derivs[0]
    yshape = val.shape[1:] if cplx else val.shape
    m = math.prod(yshape)
    n = jac.shape[1] // 2 if dz and not cplx else jac.shape[1]
    vdt = complex_dtype(val.dtype) if cplx else val.dtype
    jdt = complex_dtype(jac.dtype) if cplx or dz else jac.dtype
    xp = array_module(val)  # (cupy arguments: cupy results)
    if out is None:
        res = JacobianResult.__new__(JacobianResult)
        DiffResult.__init__(res, xp.zeros(yshape, vdt), xp.zeros((m, n), jdt))
    else:
        if not isinstance(out, DiffResult) or not out.derivs:
            raise TypeError("out must be a JacobianResult or DiffResult (value, jacobian)")
        check_results(xp, [("out.value", out.value, yshape, vdt),
                           ("out.jacobian", out.derivs[0], (m, n), jdt)], reads(args))
        res = out

    def finish(inner):
        t, tj = res.value, res.derivs[0]
        val, jac = inner.value, inner.derivs[0]
        if cplx:  # rows: Re f, then Im f
            xp.copyto(t.real, val[0])
            xp.copyto(t.imag, val[1])
            xp.copyto(tj.real, jac[:m])
            xp.copyto(tj.imag, jac[m:])
        else:
            xp.copyto(t, val)
            if dz:  # columns: Re z, then Im z
                write_complex(tj, (jac[:, :n], jac[:, n:]))
            else:
                xp.copyto(tj, jac)
        return res
    return finish
