"""Elementwise (ufunc) primitives: the rule table.

Each line declares one numpy ufunc with the partial derivative of the result
with respect to each operand, as an expression in the operands and the
result ``ans`` (DiffRules.jl style).  A partial is

* a callable ``p(*operands, ans)`` written with numpy calls and operators --
  evaluated on tracers it emits IR (the reverse pass), and later backends
  evaluate the same callable on symbolic scalars to render kernels;
* the number ``1`` or ``-1`` (the contribution is ``g`` or ``-g``);
* ``0`` for piecewise-constant ops (zero derivative almost everywhere);
* ``None`` for operands that are not differentiable (masks, comparisons).

Ties of ``maximum``/``minimum``/``fmax``/``fmin`` split the derivative
equally between the operands (as JAX does); ``fmax``/``fmin`` against a NaN
pass the whole derivative to the number they return.

Every product of a partial and a tangent or cotangent -- the chain rule's
product, in the reverse rules, the forward rules and the fused kernels -- is
:func:`chain_product`: ``0`` times anything, ``inf`` and ``nan`` included, is
``0`` (ForwardDiff.jl's NaN-safe mode).  A (co)tangent that is exactly zero
-- the untaken branch of ``np.where``, a zero weight -- carries nothing, so an
infinite or undefined partial there (``sqrt`` at 0, ``log`` of a negative,
``exp`` overflowing) never poisons the result; and a zero partial stops an
infinite tangent (``std`` of one element, ``sqrt(x**2)`` at 0).
"""

from __future__ import annotations

import numpy as np

from ..ir.registry import LazyUfunc, Op, register

LN2 = float(np.log(2.0))
LN10 = float(np.log(10.0))


class Underived:
    """A partial derivative that exists but has no rule here (the order of
    ``scipy.special.zeta``): a derivative that needs it raises
    ``NotImplementedError`` naming the function and argument; where nothing
    differentiable flows into that operand it is never evaluated."""

    def __init__(self, function, argument):
        self.argument = argument
        self.message = (f"hybridad: {function} has no derivative rule in its {argument} "
                        "argument (it is differentiable in the others); pass that argument "
                        "as a constant or as a non-differentiated argument")

    def __call__(self, *operands):
        raise NotImplementedError(self.message)


def derived(op):
    """Positions of ``op``'s operands that have a derivative rule (not
    :class:`Underived`; masks and piecewise-constant ones included)."""
    return tuple(i for i, p in enumerate(op.partials or ()) if not isinstance(p, Underived))


def _lit(value, like):
    """A scalar constant in ``like``'s dtype (so float32 stays float32)."""
    return like.dtype.type(value)


def _real(ufunc):
    """The ufunc itself (a :class:`~hybridad.ir.registry.LazyUfunc` imported)."""
    return ufunc.resolve() if type(ufunc) is LazyUfunc else ufunc


def _abstract_for(ufunc):
    def abstract(*args):
        from ..core.trace import loop_dtypes

        shapes = {a.shape for a in args}
        shapes.discard(())  # (scalars broadcast to anything)
        shape = () if not shapes else shapes.pop() if len(shapes) == 1 else \
            np.broadcast_shapes(*shapes)
        return shape, loop_dtypes(_real(ufunc), args)[-1]

    return abstract


def _run_for(ufunc):
    def run(out, *arrays):
        _real(ufunc)(*arrays, out=out)

    run.ufunc = ufunc  # (generated code may call the ufunc itself: core/decisions.py)
    return run


def _vjp_from_partials(partials):
    def vjp(g, node, active, *operands):
        *xs, ans = operands
        out = []
        for i, p in enumerate(partials):
            if not active[i] or p is None or (not callable(p) and p == 0):
                out.append(None)
            elif p == 1 and not callable(p):
                out.append(g)
            elif p == -1 and not callable(p):
                out.append(-g)
            else:
                out.append(chain_product(g, p(*xs, ans)))
        return tuple(out)

    return vjp


def _jvp_from_partials(partials):
    def jvp(tangents, node, *operands):
        *xs, ans = operands
        total = None
        for p, t in zip(partials, tangents, strict=True):
            if t is None or p is None or (not callable(p) and p == 0):
                continue
            term = t if (p == 1 and not callable(p)) else -t if not callable(p) \
                else chain_product(p(*xs, ans), t)
            total = term if total is None else total + term
        return total

    return jvp


def chain_product(a, b):
    """``a * b`` for the chain rule, on tracers: ``0`` wherever either factor is
    ``0``, even against ``inf`` or ``nan`` (op ``safe_multiply``).  A factor that
    is a number (a rule's constant: finite, nonzero) multiplies plainly."""
    from ..core.trace import bind
    from ..core.tracer import Tracer

    if not (isinstance(a, Tracer) and isinstance(b, Tracer)):
        return a * b
    if a.dtype != b.dtype:
        dtype = np.result_type(a.dtype, b.dtype)
        a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    return bind("safe_multiply", a, b)


def elementwise(ufunc, partials, domain=(-2.0, 2.0), name=None, scalar=None,
                expensive=False, piecewise=False, doc=None):
    """Declare a ufunc primitive with its partials (one per operand); ``scalar``:
    its value as a Python expression over ``{0}``, ``{1}`` where numba has no
    scalar implementation of the ufunc; ``expensive``: a transcendental (fused
    regions store its partials rather than recompute them); ``piecewise``: its
    derivative has kinks or jumps (see :class:`hybridad.ir.registry.Op`)."""
    partials = tuple(partials)
    assert type(ufunc) is LazyUfunc or len(partials) == ufunc.nin, ufunc
    return register(Op(
        name or ufunc.__name__, "elementwise", _abstract_for(ufunc), run=_run_for(ufunc),
        vjp=_vjp_from_partials(partials), jvp=_jvp_from_partials(partials), ufunc=ufunc,
        partials=partials, domain=domain,
        doc=doc or ((ufunc.__doc__ or "").strip().splitlines()[0] if ufunc.__doc__ else ""),
        scalar=scalar, expensive=expensive, piecewise=piecewise,
    ))


# --------------------------------------------------------------------------
# unary
# --------------------------------------------------------------------------
elementwise(np.negative, [-1])
elementwise(np.positive, [1])
elementwise(np.exp, [lambda x, ans: ans], expensive=True)
elementwise(np.exp2, [lambda x, ans: ans * _lit(LN2, x)], expensive=True)
elementwise(np.expm1, [lambda x, ans: ans + 1], expensive=True)
elementwise(np.log, [lambda x, ans: 1 / x], domain=(0.1, 3.0), expensive=True)
elementwise(np.log2, [lambda x, ans: 1 / (x * _lit(LN2, x))], domain=(0.1, 3.0), expensive=True)
elementwise(np.log10, [lambda x, ans: 1 / (x * _lit(LN10, x))], domain=(0.1, 3.0), expensive=True)
elementwise(np.log1p, [lambda x, ans: 1 / (1 + x)], domain=(-0.9, 3.0), expensive=True)
elementwise(np.sqrt, [lambda x, ans: 0.5 / ans], domain=(0.1, 3.0), expensive=True)
elementwise(np.cbrt, [lambda x, ans: 1 / (3 * ans * ans)], domain=(0.1, 3.0), expensive=True)
elementwise(np.square, [lambda x, ans: 2 * x])
elementwise(np.reciprocal, [lambda x, ans: -(ans * ans)], domain=(0.2, 3.0))
elementwise(np.sin, [lambda x, ans: np.cos(x)], expensive=True)
elementwise(np.cos, [lambda x, ans: -np.sin(x)], expensive=True)
elementwise(np.tan, [lambda x, ans: 1 + ans * ans], domain=(-1.2, 1.2), expensive=True)
elementwise(np.arcsin, [lambda x, ans: 1 / np.sqrt(1 - x * x)], domain=(-0.9, 0.9), expensive=True)
elementwise(np.arccos, [lambda x, ans: -1 / np.sqrt(1 - x * x)], domain=(-0.9, 0.9),
            expensive=True)
elementwise(np.arctan, [lambda x, ans: 1 / (1 + x * x)], expensive=True)
elementwise(np.sinh, [lambda x, ans: np.cosh(x)], expensive=True)
elementwise(np.cosh, [lambda x, ans: np.sinh(x)], expensive=True)
elementwise(np.tanh, [lambda x, ans: 1 - ans * ans], expensive=True)
elementwise(np.arcsinh, [lambda x, ans: 1 / np.sqrt(x * x + 1)], expensive=True)
elementwise(np.arccosh, [lambda x, ans: 1 / np.sqrt(x * x - 1)], domain=(1.1, 3.0), expensive=True)
elementwise(np.arctanh, [lambda x, ans: 1 / (1 - x * x)], domain=(-0.9, 0.9), expensive=True)
elementwise(np.absolute, [lambda x, ans: np.sign(x)], piecewise=True)
elementwise(np.fabs, [lambda x, ans: np.sign(x)], piecewise=True)
elementwise(np.deg2rad, [lambda x, ans: _lit(np.pi / 180, x)])
elementwise(np.rad2deg, [lambda x, ans: _lit(180 / np.pi, x)])
for _f in (np.sign, np.floor, np.ceil, np.rint, np.trunc):
    elementwise(_f, [0])
# heaviside(x, h0): 0 below 0, h0 at 0, 1 above (nan stays nan); piecewise constant
elementwise(np.heaviside, [0, 0],
            scalar="({0} if {0} != {0} else (0.0 if {0} < 0 else ({1} if {0} == 0 else 1.0)))")
for _f in (np.logical_not, np.isnan, np.isinf, np.isfinite, np.signbit):
    elementwise(_f, [None])

# --------------------------------------------------------------------------
# binary
# --------------------------------------------------------------------------
elementwise(np.add, [1, 1])
elementwise(np.subtract, [1, -1])
elementwise(np.multiply, [lambda x, y, ans: y, lambda x, y, ans: x])
elementwise(np.true_divide, [lambda x, y, ans: 1 / y, lambda x, y, ans: -ans / y],
            domain=(0.2, 2.0))
elementwise(np.power, [
    # x**0 is 1 everywhere: its derivative is 0 at x = 0 too (not 0 * inf)
    lambda x, y, ans: np.where(y == 0, _lit(0, ans), y * x ** (y - 1)),
    lambda x, y, ans: np.where(x == 0, _lit(0, ans), ans * np.log(x)),
], domain=(0.2, 2.0), expensive=True)


def _tie_split(first, x, y, nan_loses=False):
    """d max(x, y)/dx (``first``) or d min(x, y)/dx: 1 where x wins, 1/2 on
    ties, 0 where y wins; ``nan_loses`` (fmax, fmin): x also wins against a
    NaN y, which numpy's result ignores."""
    one, half, zero = _lit(1, x), _lit(0.5, x), _lit(0, x)
    wins = (x > y) if first else (y > x)
    if nan_loses:
        wins = np.logical_or(wins, np.logical_and(np.isnan(y), np.logical_not(np.isnan(x))))
    return np.where(wins, one, np.where(x == y, half, zero))


elementwise(np.maximum, [lambda x, y, ans: _tie_split(True, x, y),
                         lambda x, y, ans: _tie_split(True, y, x)], piecewise=True)
elementwise(np.minimum, [lambda x, y, ans: _tie_split(False, x, y),
                         lambda x, y, ans: _tie_split(False, y, x)], piecewise=True)
elementwise(np.fmax, [lambda x, y, ans: _tie_split(True, x, y, nan_loses=True),
                      lambda x, y, ans: _tie_split(True, y, x, nan_loses=True)], piecewise=True)
elementwise(np.fmin, [lambda x, y, ans: _tie_split(False, x, y, nan_loses=True),
                      lambda x, y, ans: _tie_split(False, y, x, nan_loses=True)], piecewise=True)
elementwise(np.arctan2, [lambda x, y, ans: y / (x * x + y * y),
                         lambda x, y, ans: -x / (x * x + y * y)], domain=(0.2, 2.0),
            expensive=True)
# at the origin, where hypot has no derivative, the least-norm subgradient 0 (as
# abs at 0 and np.linalg.norm at a zero vector: hypot(x, 0) is |x|), not 0 / 0
elementwise(np.hypot, [lambda x, y, ans: np.where(ans == 0, _lit(0, ans), x / ans),
                       lambda x, y, ans: np.where(ans == 0, _lit(0, ans), y / ans)],
            expensive=True)


def _share(exp, x, y, ans):
    """d logaddexp(x, y) / dx = 1 / (1 + exp(y - x)) (``exp``: np.exp, or np.exp2
    for logaddexp2): its limit 1 at x = inf with y finite, where ``exp(x - ans)``
    is ``exp(inf - inf)``, nan; one half at two equal infinities (``y - x`` NaN
    there: finite equal values take the formula, and its derivative)."""
    one = _lit(1, ans)
    d = y - x
    share = one / (one + exp(d))
    return np.where(x == y, np.where(np.isnan(d), _lit(0.5, ans), share), share)


elementwise(np.logaddexp, [lambda x, y, ans: _share(np.exp, x, y, ans),
                           lambda x, y, ans: _share(np.exp, y, x, ans)], expensive=True)
elementwise(np.logaddexp2, [lambda x, y, ans: _share(np.exp2, x, y, ans),
                            lambda x, y, ans: _share(np.exp2, y, x, ans)], expensive=True)
elementwise(np.remainder, [1, lambda x, y, ans: -np.floor(x / y)], domain=(0.3, 2.0),
            piecewise=True)
elementwise(np.fmod, [1, lambda x, y, ans: -np.trunc(x / y)], domain=(0.3, 2.0), piecewise=True)
elementwise(np.floor_divide, [0, 0], domain=(0.3, 2.0))
elementwise(np.copysign, [lambda x, y, ans: np.sign(x) * np.sign(ans), 0], piecewise=True)
# nextafter(x, y): x moved one float toward y -- in x, the identity to within one
# ulp (derivative 1); in y a step (0)
elementwise(np.nextafter, [1, 0], piecewise=True)
for _f in (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal,
           np.logical_and, np.logical_or, np.logical_xor):
    elementwise(_f, [None, None])

# --------------------------------------------------------------------------
# the chain rule's product (see the module docstring)
# --------------------------------------------------------------------------
def _safe_multiply_abstract(a, b):
    return np.broadcast_shapes(a.shape, b.shape), np.result_type(a.dtype, b.dtype)


def _safe_multiply_workspace(a, b):
    """Elements of the node's dtype holding one bool per element (the zero mask)."""
    size = int(np.prod(np.broadcast_shapes(a.shape, b.shape)))
    itemsize = np.result_type(a.dtype, b.dtype).itemsize
    return -(-size // itemsize) + 1


#: the 0-d zeros written where a factor is 0 (module constants: no allocation per call)
_ZEROS = {np.dtype(np.float64): np.zeros((), np.float64),
          np.dtype(np.float32): np.zeros((), np.float32)}


def _safe_multiply_run(out, a, b, work=None):
    """``a * b`` into ``out``, then 0 wherever ``a`` or ``b`` is 0 (so 0 * inf
    and 0 * nan are 0), through a bool mask in the op's workspace (a caller
    without one -- constant folding while tracing -- gets a new mask).  Plain
    numpy: the numpy executor needs no compiler, so a plan's first calls do
    not wait for numba (:mod:`hybridad.plans.tiered`)."""
    np.multiply(a, b, out=out)
    mask = np.empty(out.shape, np.bool_) if work is None else \
        work.view(np.bool_)[:out.size].reshape(out.shape)
    zero = _ZEROS[out.dtype]
    for factor in (a, b):
        np.equal(factor, _ZEROS.get(np.result_type(factor), 0), out=mask)
        np.copyto(out, zero, where=mask)


_SAFE_PARTIALS = (lambda a, b, ans: b, lambda a, b, ans: a)
register(Op("safe_multiply", "elementwise", _safe_multiply_abstract, run=_safe_multiply_run,
            workspace=_safe_multiply_workspace,
            vjp=_vjp_from_partials(_SAFE_PARTIALS), jvp=_jvp_from_partials(_SAFE_PARTIALS),
            partials=_SAFE_PARTIALS,
            domain=(-2.0, 2.0), doc="a * b, but 0 where a or b is 0 (the chain rule's product)"))
