"""Complex arguments of :func:`hybridad.gradient`.

A complex array argument ``z`` reaches a plan as the pair ``(z.real,
z.imag)`` of real arrays (a tuple argument), and ``f`` sees it as one
:class:`~hybridad.frontend.numpy_complex.ComplexTracer` again; everything in
between is real.  The gradient follows autograd's and JAX's convention for
a real ``u = f(z)``: ``du/dx - 1j * du/dy`` with ``z = x + iy``, the conjugate
of the steepest-ascent direction (step along ``-conj(grad)`` to descend).  A
complex output is refused, as autograd's and JAX's ``grad`` refuse it.

Splitting copies each complex argument into two real arrays on every call,
and joining writes the real gradients into a complex buffer: a call with
complex arguments allocates (a real reformulation of ``f`` does not).
"""

from __future__ import annotations

import functools

import numpy as np

from ..frontend.numpy_complex import ComplexTracer, is_complex_constant
from ..frontend.tracer import Tracer

__all__ = ["any_complex", "gradient"]


def any_complex(args):
    """Whether a top-level argument is a complex array or number."""
    return any(is_complex_constant(a) for a in args)


def _join(re, im):
    if isinstance(re, Tracer) or isinstance(im, Tracer):
        return ComplexTracer(re, im)
    return np.asarray(re) + 1j * np.asarray(im)


@functools.lru_cache(maxsize=256)
def _realified(f, positions):
    """``f`` with each complex argument at ``positions`` taken as a (real, imag) pair."""
    @functools.wraps(f)
    def real_f(*args):
        args = list(args)
        for k in positions:
            args[k] = _join(*args[k])
        out = f(*args)
        if isinstance(out, ComplexTracer) or \
                (not isinstance(out, Tracer) and np.iscomplexobj(out)):
            raise TypeError(f"{getattr(f, '__name__', 'f')} returns a complex value; a gradient "
                            "needs a real scalar (take np.real, np.abs, ...), as autograd and "
                            "JAX require")
        return out
    return real_f


def gradient(gradient_fn, f, args, argnums, out, backend):
    """:func:`hybridad.gradient` of ``f`` at ``args`` holding complex arrays."""
    positions = tuple(k for k, a in enumerate(args) if is_complex_constant(a))
    split = list(args)
    for k in positions:
        z = np.asarray(args[k])
        dtype = np.float32 if z.dtype == np.complex64 else np.float64
        split[k] = (np.array(z.real, dtype), np.array(z.imag, dtype))  # 0-d stays 0-d
    res = gradient_fn(_realified(f, positions), *split, argnums=argnums, backend=backend)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    grads = [res.gradient] if isinstance(argnums, int) else list(res.gradient)
    for i, k in enumerate(nums):
        if k in positions:
            g_re, g_im = grads[i]
            grads[i] = g_re - 1j * g_im
    if out is None:
        from ..results import DiffResult, GradientResult

        out = GradientResult.__new__(GradientResult)  # complex buffers: not from a prototype
        DiffResult.__init__(out, np.array(res.value),
                            grads[0] if isinstance(argnums, int) else tuple(grads))
        return out
    given = out.derivs[0] if out.derivs else None
    targets = [given] if isinstance(argnums, int) else list(given or ())
    for i, (t, g) in enumerate(zip(targets, grads, strict=True)):
        if not isinstance(t, np.ndarray) or t.shape != np.shape(g) or \
                (np.iscomplexobj(g) and not np.iscomplexobj(t)):
            raise ValueError(f"out.gradient[{i}] must be an array of shape {np.shape(g)} and "
                             f"dtype {np.asarray(g).dtype} (a complex argument's gradient)")
    out.value[...] = res.value
    for t, g in zip(targets, grads, strict=True):
        t[...] = g
    return out
