"""Edge values give the same results on every CPU backend, across the op registry.

For every elementwise op of the registry that has a ufunc, at 0, -0, +-1, 1/2,
2, tiny normal and subnormal numbers, huge values, +-inf, NaN and the ends of
the op's sampling domain (every pair or triple of them for an op of two or
three operands), the compiled backend (``backend="numba"``) gives the same
value, and the same derivative in every operand that has a rule, as the numpy
reference (``backend="numpy"``): both NaN, the same infinity, or both finite
and equal to rounding (the sign of a zero aside).  ``d/dx digamma(x)`` at +inf
was 0 on one and NaN on the other (the Hurwitz zeta's summation gave ``0 * inf``).

Each element is checked on its own: ``f(x, w) = sum_k sum(w[k] * op_k(x[k]))``
with ``w = 1`` has ``df/dx[k]`` the derivative of op ``k`` at each point of
row ``x[k]`` and ``df/dw[k]`` its value there, so one plan per backend (one
numba compile) checks a whole family of ops, value and derivative.
"""

import numpy as np
import pytest

import hybridad as ha
from hybridad.ops import REGISTRY
from hybridad.ops.elementwise import Underived
from hybridad.ops.special import SCIPY_SPECIAL

from test_special_points import BINARY, UNARY

#: the edge values (float64)
EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, -1e-300, 5e-324, 1e300, -1e300, 1e10, -1e10,
         np.inf, -np.inf, np.nan)
#: their float32 counterparts (1e300 and 1e-300 would round to inf and 0)
EDGES32 = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-38, -1e-38, 1e-45, 3e38, -3e38, 1e10, -1e10,
           np.inf, -np.inf, np.nan)
#: agreement of finite results: |numba - numpy| <= ATOL + RTOL * max(|numpy|, |numba|)
RTOL = {np.float64: 1e-12, np.float32: 1e-5}
ATOL = {np.float64: 1e-300, np.float32: 1e-37}


def _elementwise(op):
    return op.kind == "elementwise" and isinstance(op.ufunc, np.ufunc) and op.dual is None


def _ruled(op):
    """Positions of ``op``'s operands with a derivative rule (a partial that is not
    :class:`Underived`; 0, 1 and ``None`` included: their derivative is 0 or a constant)."""
    return tuple(i for i, p in enumerate(op.partials) if not isinstance(p, Underived))


#: the ops differentiable in every operand (tests/test_special_points.py's enumeration)
DIFFERENTIABLE = tuple(UNARY) + tuple(BINARY)
#: every other elementwise op of a ufunc, by number of operands: piecewise constant,
#: linear, boolean, or with an operand without a rule (an order: held, not differentiated)
OTHERS = tuple(sorted(n for n, op in REGISTRY.items()
                      if _elementwise(op) and n not in DIFFERENTIABLE))


def _points(name, dtype):
    """The edge values plus the ends of ``name``'s sampling domain (1.0 twice without one)."""
    edges = EDGES if dtype == np.float64 else EDGES32
    domain = REGISTRY[name].domain or (1.0, 1.0)
    return np.array(edges + tuple(domain), dtype)


#: points left out, by op: scipy's ``yn(n, x)`` recurs up to ``|n|`` times, and an
#: order beyond a C int (``1e10``, ``1e300``, ``+-inf``) is ``-2**31``: 20 s and more
#: per point at a large ``x`` (numpy's reference as much as the compiled kernel)
SKIP = {"yn": lambda n, x: (np.abs(n) > 1e3) & (np.abs(x) > 1e3) & np.isfinite(x)}


def _operands(name, dtype):
    """One array per operand of ``name``: every combination of its points."""
    nin = REGISTRY[name].ufunc.nin
    grid = [g.ravel() for g in np.meshgrid(*[_points(name, dtype)] * nin, indexing="ij")]
    if name in SKIP:
        keep = ~SKIP[name](*grid)
        grid = [g[keep] for g in grid]
    return grid


class Family:
    """Ops of one number of operands and one set of ruled operands, evaluated in one
    plan: row ``k`` of operand array ``i`` holds op ``k``'s ``i``-th operands."""

    def __init__(self, names, dtype):
        self.names = tuple(names)
        self.dtype = np.dtype(dtype).type
        op = REGISTRY[self.names[0]]
        self.nin = op.ufunc.nin
        self.ruled = _ruled(op)
        assert all(REGISTRY[n].ufunc.nin == self.nin and _ruled(REGISTRY[n]) == self.ruled
                   for n in self.names), self.names
        per_op = [_operands(n, dtype) for n in self.names]
        width = max(len(ops[0]) for ops in per_op)
        # rows padded to one length with ordinary points (1.0)
        self.args = [np.ones((len(self.names), width), dtype) for _ in range(self.nin)]
        self.sizes = []
        for k, ops in enumerate(per_op):
            for i, values in enumerate(ops):
                self.args[i][k, :len(values)] = values
            self.sizes.append(len(ops[0]))
        self.w = np.ones((len(self.names), width), dtype)
        self.ufuncs = [REGISTRY[n].ufunc for n in self.names]

    def function(self):
        ufuncs, nin, dtype = self.ufuncs, self.nin, self.dtype

        def f(*args):
            *xs, w = args
            terms = []
            for k, fn in enumerate(ufuncs):
                value = fn(*(x[k] for x in xs[:nin]))
                if value.dtype != dtype:  # a predicate's booleans: 0 and 1
                    value = np.where(value, dtype(1), dtype(0))
                terms.append(w[k] * value)
            return np.sum(sum(terms))

        return f

    def evaluate(self, backend):
        """``{"value": ..., "d/d arg i": ...}``: arrays (ops, points) from ``backend``."""
        argnums = (*self.ruled, self.nin)
        res = ha.gradient(self.function(), *self.args, self.w, argnums=argnums,
                          backend=backend)
        out = {"value": res.gradient[-1]}
        for i, g in zip(self.ruled, res.gradient[:-1], strict=True):
            out[f"d/d arg {i}"] = g
        return out


def agree(a, b, dtype):
    """Elementwise: both NaN, the same infinity, or finite and equal to rounding."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(a - b) <= ATOL[dtype] + RTOL[dtype] * np.maximum(np.abs(a), np.abs(b))
    both_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & (a == b)
    return both_nan | same_inf | (np.isfinite(a) & np.isfinite(b) & close)


def disagreements(family):
    """Lines naming each op, point and quantity where the backends differ."""
    ref, got = family.evaluate("numpy"), family.evaluate("numba")
    lines = []
    for what in ref:
        ok = agree(ref[what], got[what], family.dtype)
        for k, name in enumerate(family.names):
            for j in np.flatnonzero(~ok[k, :family.sizes[k]]):
                point = ", ".join(repr(float(x[k, j])) for x in family.args)
                lines.append(f"{name}({point}) {what}: numpy {ref[what][k, j]!r}, "
                             f"numba {got[what][k, j]!r}")
    return lines


def _check(*families):
    """Every family's disagreements, the first 80 named, in one failure."""
    lines = [line for family in families for line in disagreements(family)]
    shown = "\n".join(lines[:80]) + (f"\n... and {len(lines) - 80} more" if len(lines) > 80
                                     else "")
    assert not lines, f"{len(lines)} disagreements between numpy and numba:\n{shown}"


def _families(names, dtype):
    """``names`` grouped into families (same number of operands, same ruled operands)."""
    groups = {}
    for n in names:
        op = REGISTRY[n]
        groups.setdefault((op.ufunc.nin, _ruled(op)), []).append(n)
    return [Family(group, dtype) for _, group in sorted(groups.items())]


#: float32: numpy's own ufuncs (vmath's float32 kernels) and a few of scipy's
FLOAT32_UNARY = tuple(n for n in UNARY if n not in SCIPY_SPECIAL) + (
    "psi", "gammaln", "erf", "erfcx", "dawsn", "expit", "log_ndtr", "i1e")


def test_float32_subset_is_registered():
    assert set(FLOAT32_UNARY) <= set(UNARY) and len(FLOAT32_UNARY) > 30


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unary_ops(dtype):
    names = UNARY if dtype == np.float64 else FLOAT32_UNARY
    _check(Family(names, dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_binary_ops(dtype):
    names = BINARY if dtype == np.float64 else tuple(n for n in BINARY if n not in SCIPY_SPECIAL)
    _check(Family(names, dtype))


# scipy's expn and yn warn (through Python) when they truncate a float order to an
# integer; the compiled kernels truncate it the same way, silently
@pytest.mark.filterwarnings("ignore:floating point number truncated to an integer")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_other_ops(dtype):
    """Piecewise-constant, linear and boolean ops, and the ops differentiable in
    some operands only (Bessel functions of an order, zeta, incomplete gamma and
    beta functions), differentiated in those (float32: numpy's own ufuncs)."""
    names = OTHERS if dtype == np.float64 else tuple(n for n in OTHERS
                                                      if n not in SCIPY_SPECIAL)
    _check(*_families(names, dtype))



#: op -> (x, d op / dx) far out, where the closed forms cancel or the summation
#: failed (references: mpmath at 50 digits; 0 at infinity)
LIMITS = {
    "dawsn": [(50.0, -0.00020012012016830307), (-1000.0, -5.0000075000187501e-7),
              (1e10, -5.0e-21), (-np.inf, 0.0), (np.inf, 0.0)],
    "erfcx": [(50.0, -0.00022554056313532388), (1000.0, -5.6418873726549667e-7),
              (1e10, -5.6418958354775629e-21), (1e300, 0.0), (np.inf, 0.0)],
    "i0e": [(50.0, -0.00056850275455879289), (-1000.0, 6.3101989626271155e-6),
            (1e10, -1.9947114020819651e-16), (-1e10, 1.9947114020819651e-16), (np.inf, 0.0)],
    "i1e": [(50.0, -0.00055135972329911511), (-1000.0, -6.300731294301514e-6),
            (1e10, -1.9947114017827584e-16), (-1e10, -1.9947114017827584e-16), (np.inf, 0.0)],
    "k0e": [(50.0, -0.0017594027013862365), (1000.0, -1.9809212205993365e-5),
            (1e10, -6.2665706863425049e-16), (1e300, 0.0), (np.inf, 0.0)],
    "k1e": [(50.0, -0.001811928469790075), (1000.0, -1.9838918606966845e-5),
            (1e10, -6.2665706872824905e-16), (1e300, 0.0), (np.inf, 0.0)],
    "psi": [(50.0, 0.020201333226697126), (1000.0, 0.0010005001666666333),
            (1e10, 1.00000000005e-10), (1e300, 1e-300), (np.inf, 0.0)],
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_derivatives_far_out_are_right(backend):
    """Agreeing is not enough: at large arguments the derivatives are the true
    ones (to 1e-13), not two roundings of a cancelled difference."""
    names = sorted(LIMITS)
    x = np.array([[p for p, _ in LIMITS[n]] for n in names])
    expected = np.array([[d for _, d in LIMITS[n]] for n in names])
    ufuncs = [REGISTRY[n].ufunc for n in names]
    g = ha.gradient(lambda x: sum(np.sum(fn(x[k])) for k, fn in enumerate(ufuncs)), x,
                    backend=backend).gradient
    wrong = ~(np.abs(g - expected) <= 1e-13 * np.abs(expected))
    assert not wrong.any(), "\n".join(
        f"{backend}: {names[k]}'({float(x[k, j])!r}) = {float(g[k, j])!r}, "
        f"not {float(expected[k, j])!r}" for k, j in zip(*np.nonzero(wrong), strict=True))
