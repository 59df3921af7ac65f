"""scipy.interpolate on tracers: interpolants evaluated at traced points, and
interpolants of traced values.

An interpolant built from data (``CubicSpline(x, y)``, ``interp1d``,
``make_interp_spline``, ``PchipInterpolator``, ``UnivariateSpline``,
``RegularGridInterpolator``, ...) and called at traced points inside ``f``
converts them with ``np.asarray``.  :func:`install` (run when scipy.interpolate
is imported, or hybridad, whichever is second) wraps the classes' ``__call__``:
a traced point is evaluated here, as a piecewise polynomial of the
interpolant's own coefficients (scipy's ``PPoly`` form: the interval by a
search among the breakpoints, a piecewise constant; the polynomial of the
offset by Horner's rule), so the derivative in the points is the
interpolant's derivative; a call on values is scipy's.

``CubicSpline``, ``make_interp_spline`` and ``interp1d`` (linear and spline
kinds) of traced *values* ``y`` at constant abscissae, and ``BSpline`` of
traced coefficients at constant knots, are linear in them:
their coefficients are scipy's for the unit vectors (computed once, while
tracing), contracted with ``y`` -- a :class:`TracedPPoly`, callable at constant
or traced points, with ``derivative()``.  Interpolants whose construction is
not linear in ``y`` (``PchipInterpolator``, ``Akima1DInterpolator``, smoothing
splines) take constant values only.

Values are scipy's to rounding (the same polynomials, evaluated in the same
form).  Out of range: ``extrapolate`` as scipy's (the end polynomials, NaN, or
periodic); ``interp1d``'s ``bounds_error`` and ``RegularGridInterpolator``'s
raise ``ValueError`` through a decision on the traced values (a call whose
points fall out of range raises, as scipy does), its ``fill_value`` fills.
"""

from __future__ import annotations

import functools

import numpy as np

from .numpy_api import _tracer
from .scipy_special import intercepts, is_traced

__all__ = ["TracedPPoly", "install"]

_M = "scipy.interpolate"


def _refuse(what, why):
    raise NotImplementedError(f"hybridad: scipy.interpolate.{what} {why}")


def _derivative(c, nu):
    """The coefficients of the ``nu``-th derivative of each piece (highest power first)."""
    for _ in range(nu):
        k = c.shape[0] - 1
        if k == 0:
            return c * 0.0
        factors = np.arange(k, 0, -1, dtype=np.float64).reshape((k,) + (1,) * (c.ndim - 1))
        c = c[:-1] * factors
    return c


def _antiderivative(c, breaks):
    """The coefficients of each piece's antiderivative, continuous and 0 at the
    first breakpoint (scipy's ``PPoly.antiderivative``): the powers' divided
    by their new degree, and a constant term, the integral of the pieces
    before."""
    k1 = c.shape[0]
    lead = (1,) * (c.ndim - 2)
    c = c / np.arange(k1, 0, -1, dtype=np.float64).reshape((k1, 1) + lead)
    h = np.diff(np.asarray(breaks, np.float64))
    powers = h[None, :] ** np.arange(k1, 0, -1)[:, None]
    pieces = np.sum(c * powers.reshape(powers.shape + lead), axis=0)
    before = np.concatenate([np.zeros((1,) + pieces.shape[1:]), np.cumsum(pieces, axis=0)[:-1]],
                            axis=0)
    return np.concatenate([c, np.expand_dims(before, 0)], axis=0)


def ppoly_eval(c, breaks, x, nu=0, extrapolate=True, axis=0, period=None):
    """A piecewise polynomial at ``x`` (scipy's ``PPoly.__call__``).

    Parameters
    ----------
    c : ndarray or Tracer
        ``(k + 1, m, *rest)``: the coefficients of each of the ``m`` pieces,
        highest power first, in the offset from the piece's left breakpoint.
    breaks : ndarray
        ``(m + 1,)`` increasing breakpoints (constants).
    x : array_like or Tracer
        The points.
    nu : int
        The order of the derivative.
    extrapolate : bool or 'periodic'
        Beyond the breakpoints: the end pieces, NaN (False) or periodic.
    axis : int
        Where the points' dimensions go among ``rest``'s (scipy's ``axis``).
    period : (float, float), optional
        The interval a periodic extrapolation repeats (default: the breakpoints';
        a periodic B-spline's base interval, ``t[k]`` to ``t[n]``).

    Returns
    -------
    Tracer or ndarray
        ``x.shape`` inserted at ``axis`` of ``rest``.
    """
    breaks = np.asarray(breaks, dtype=np.float64)
    if breaks.ndim != 1 or np.any(np.diff(breaks) < 0):
        _refuse("PPoly", "of decreasing breakpoints at traced points is not supported")
    if nu < 0:
        _refuse("PPoly", "with nu < 0 (antiderivatives) at traced points is not supported")
    c = _derivative(c, nu)
    x_shape = np.shape(x)
    xf = np.reshape(x, (-1,)).astype(np.float64) if hasattr(x, "astype") else \
        np.asarray(x, np.float64).ravel()
    m = breaks.size - 1
    if extrapolate == "periodic":
        lo, hi = (breaks[0], breaks[-1]) if period is None else period
        xf = lo + (xf - lo) % (hi - lo)
    i = np.clip(np.searchsorted(breaks, xf, side="right") - 1, 0, m - 1)
    if is_traced((i,)):  # (constants indexed by traced positions: traced constants)
        breaks_t, c = _tracer(breaks), _tracer(c)
    else:
        breaks_t = breaks
    dx = xf - breaks_t[i]
    rest = c.shape[2:]
    dx = np.reshape(dx, dx.shape + (1,) * len(rest))
    value = c[0][i]
    for k in range(1, c.shape[0]):
        value = value * dx + c[k][i]
    if extrapolate is False:
        inside = (xf >= breaks[0]) & (xf <= breaks[-1])
        value = np.where(np.reshape(inside, inside.shape + (1,) * len(rest)), value, np.nan)
    value = np.reshape(value, x_shape + rest)
    if axis:
        n = len(x_shape)
        order = list(range(n, n + axis)) + list(range(n)) + list(range(n + axis, value.ndim))
        value = np.transpose(value, order)
    return value


class TracedPPoly:
    """A piecewise polynomial of traced coefficients: what ``CubicSpline``,
    ``make_interp_spline`` and ``interp1d`` of traced values give while tracing
    (``c``, ``x``, ``extrapolate``, ``axis`` as scipy's ``PPoly``)."""

    def __init__(self, c, x, extrapolate=True, axis=0, period=None):
        self.c, self.x, self.extrapolate, self.axis = c, np.asarray(x), extrapolate, axis
        self._period = period

    def __call__(self, x, nu=0, extrapolate=None):
        return ppoly_eval(self.c, self.x, x, nu, self.extrapolate if extrapolate is None
                          else extrapolate, self.axis, self._period)

    def derivative(self, nu=1):
        return TracedPPoly(_derivative(self.c, nu), self.x, self.extrapolate, self.axis,
                           self._period)

    def antiderivative(self, nu=1):
        """scipy's ``PPoly.antiderivative``: 0 at the first breakpoint."""
        if self.extrapolate == "periodic":
            raise NotImplementedError("hybridad: antiderivative / integrate of a periodic "
                                      "spline of traced values is not supported")
        c = self.c
        for _ in range(nu):
            c = _antiderivative(c, self.x)
        return TracedPPoly(c, self.x, self.extrapolate, self.axis)

    def integrate(self, a, b, extrapolate=None):
        """scipy's ``PPoly.integrate``: the antiderivative's difference at ``b``
        and ``a`` (NaN outside the breakpoints where not extrapolated)."""
        ends = self.antiderivative()(np.array([a, b], np.float64), extrapolate=extrapolate)
        ends = np.moveaxis(ends, self.axis, 0)
        return ends[1] - ends[0]


def _ppoly_of_bspline(spline, extrapolate=None):
    """scipy's ``PPoly.from_spline`` of a B-spline whose coefficients have trailing
    dimensions too (scipy's takes 1-D coefficients: column by column)."""
    from scipy.interpolate import BSpline, PPoly

    extrapolate = spline.extrapolate if extrapolate is None else extrapolate
    c = np.moveaxis(np.asarray(spline.c), spline.axis, 0)
    if c.ndim == 1:
        out = PPoly.from_spline(BSpline(spline.t, c, spline.k), extrapolate=extrapolate)
    else:
        flat = c.reshape(c.shape[0], -1)
        pieces = [PPoly.from_spline(BSpline(spline.t, flat[:, j], spline.k),
                                    extrapolate=extrapolate) for j in range(flat.shape[1])]
        coefs = np.stack([p.c for p in pieces], axis=-1).reshape(
            pieces[0].c.shape + c.shape[1:])
        out = PPoly.construct_fast(coefs, pieces[0].x, extrapolate)
    k, t = spline.k, spline.t
    out.period = (t[k], t[len(t) - k - 1])  # (scipy's periodic B-spline repeats this)
    return out


def _basis_coefficients(build, units):
    """``(c, breaks, extrapolate, period)`` of ``build(units)``: the PPoly
    coefficients ``(k + 1, m, r)`` of the interpolant of each of the ``r`` columns
    of values (``period``: a B-spline's base interval)."""
    from scipy.interpolate import BSpline

    spline = build(units)
    if isinstance(spline, BSpline):
        spline = _ppoly_of_bspline(spline)
    return spline.c, spline.x, spline.extrapolate, getattr(spline, "period", None)


def _linear_in_values(build, y, axis, extrapolate_default=True, periodic=False):
    """The interpolant of traced values ``y`` along ``axis``: scipy's interpolant
    of the unit vectors, contracted with ``y`` (``periodic``: of the first n - 1,
    the last value the first's)."""
    axis = axis % max(np.ndim(y), 1)
    y = np.moveaxis(y, axis, 0) if axis else y
    n = y.shape[0]
    units = np.eye(n)
    if periodic:
        units = units[:, :-1]
        units[-1, 0] = 1.0
        y = y[:-1]
    c, breaks, extrapolate, period = _basis_coefficients(build, units)
    traced_c = np.tensordot(c, y, axes=([2], [0]))
    return TracedPPoly(traced_c, breaks, extrapolate_default if extrapolate is None
                       else extrapolate, axis, period)


def _check_periodic(y, axis):
    if np.any(np.take(y, 0, axis=axis) != np.take(y, -1, axis=axis)):  # (a decision)
        raise ValueError("The first and last `y` point along axis must be identical "
                         "(within machine precision) when bc_type='periodic'.")


def _traced_cubic_spline(x, y, axis=0, bc_type="not-a-knot", extrapolate=None):
    if is_traced((x,)):
        _refuse("CubicSpline", "of traced abscissae x is not supported (traced values y are)")
    if not isinstance(bc_type, str) and np.ndim(y) > 1:
        _refuse("CubicSpline", "of traced values y of several dimensions with derivative "
                "boundary values is not supported (a bc_type name is)")
    from scipy.interpolate import CubicSpline

    if bc_type == "periodic":
        _check_periodic(y, axis)
    traced = _linear_in_values(
        lambda units: CubicSpline(x, units, axis=0, bc_type=_homogeneous(bc_type, units),
                                  extrapolate=extrapolate), y, axis,
        periodic=bc_type == "periodic")
    if not isinstance(bc_type, str):  # the boundary values' own spline (y = 0)
        zero = CubicSpline(x, np.zeros(len(x)), bc_type=bc_type, extrapolate=extrapolate)
        traced.c = traced.c + zero.c
    return traced


def _homogeneous(bc_type, units):
    """``bc_type`` with its derivative values 0 (the unit vectors' splines)."""
    if isinstance(bc_type, str) or bc_type is None:
        return bc_type
    return tuple(b if isinstance(b, str) else (b[0], np.zeros(units.shape[1]))
                 for b in bc_type)


@intercepts(_M, "make_interp_spline")
def make_interp_spline(x, y, k=3, t=None, bc_type=None, axis=0, check_finite=True):
    """The interpolating B-spline of traced values ``y`` (as a :class:`TracedPPoly`:
    the same piecewise polynomials), or of constants at traced knots refused."""
    from scipy.interpolate import make_interp_spline as scipys

    if is_traced((x, t)):
        _refuse("make_interp_spline", "of traced abscissae or knots is not supported "
                "(traced values y are)")
    if bc_type is not None and not isinstance(bc_type, str) and any(
            not isinstance(b, str) and np.any(np.asarray([v for _, v in b]) != 0)
            for b in bc_type if b is not None):
        _refuse("make_interp_spline", "of traced values y with nonzero derivative boundary "
                "values is not supported")
    if bc_type == "periodic":
        _check_periodic(y, axis)
    return _linear_in_values(lambda units: scipys(x, units, k=k, t=t, bc_type=bc_type, axis=0),
                             y, axis, periodic=bc_type == "periodic")


def _traced_points(original, handler):
    """``original(self, x, ...)`` wrapped: ``handler(self, x, ...)`` at traced points."""
    @functools.wraps(original)
    def call(self, x, *args, **kwargs):
        if is_traced((x, *args), kwargs):
            return handler(self, x, *args, **kwargs)
        return original(self, x, *args, **kwargs)
    call.__hybridad_original__ = original
    return call


def _ppoly_call(self, x, nu=0, extrapolate=None):
    from scipy.interpolate import PPoly

    pp = self if isinstance(self, PPoly) else PPoly.from_bernstein_basis(self)
    return ppoly_eval(pp.c, pp.x, x, nu, self.extrapolate if extrapolate is None
                      else extrapolate, self.axis)


def _bspline_call(self, x, nu=0, extrapolate=None):
    extrapolate = self.extrapolate if extrapolate is None else extrapolate
    pp = _ppoly_of_bspline(self, extrapolate)
    return ppoly_eval(pp.c, pp.x, x, nu, extrapolate, self.axis, pp.period)


def _out_of_range(x, lo, hi, bounds_error):
    below, above = x < lo, x > hi
    if bounds_error and np.any(below | above):  # (a decision on the traced points)
        raise ValueError(f"A value in x_new is outside the interpolation range [{lo}, {hi}].")
    return below, above


def _interp1d_call(self, x):
    kind = self._kind
    xs = self.x
    y = np.moveaxis(self.y, self.axis, 0)
    x_shape = np.shape(x)
    xf = np.reshape(x, (-1,))
    rest = y.shape[1:]
    if kind == "linear":
        c = np.stack([np.diff(y, axis=0) / np.reshape(np.diff(xs), (-1,) + (1,) * len(rest)),
                      y[:-1]])
        out = ppoly_eval(c, xs, xf)
    elif kind == "spline" and isinstance(self._spline, TracedPPoly):  # (of traced values)
        out = self._spline(xf)
    elif kind == "spline":  # (scipy's: its coefficients the values as a 2-D array)
        out = np.reshape(_bspline_call(self._spline, xf, extrapolate=True), xf.shape + rest)
    elif kind in ("nearest", "nearest-up", "previous", "next"):
        if kind.startswith("nearest"):
            index = np.searchsorted(0.5 * (xs[1:] + xs[:-1]), xf,
                                    side="left" if kind == "nearest" else "right")
        else:
            index = np.searchsorted(xs, xf, side="right" if kind == "previous" else "left")
            index = index - 1 if kind == "previous" else index
        out = _tracer(y)[np.clip(index, 0, len(xs) - 1)]
        if kind in ("previous", "next"):  # beyond the data: NaN before filling
            nan = (index < 0) | (index > len(xs) - 1)
            out = np.where(np.reshape(nan, nan.shape + (1,) * len(rest)), np.nan, out)
    else:
        _refuse("interp1d", f"of kind {kind!r} at traced points is not supported")
    if not self._extrapolate:
        below, above = _out_of_range(xf, xs[0], xs[-1], self.bounds_error)
        shape = below.shape + (1,) * len(rest)
        out = np.where(np.reshape(below, shape), self._fill_value_below, out)
        out = np.where(np.reshape(above, shape), self._fill_value_above, out)
    out = np.reshape(out, x_shape + rest)
    return np.moveaxis(out, tuple(range(len(x_shape))),
                       tuple(range(self.axis, self.axis + len(x_shape)))) if self.axis and \
        x_shape else out


class _TracedInterp1d:
    """``interp1d`` of traced values (kinds 'linear' and the splines): scipy's
    attributes its call reads, the values traced."""

    def __init__(self, x, y, kind, axis, bounds_error, fill_value):
        from scipy.interpolate import interp1d

        probe = interp1d(x, np.zeros(np.shape(y)), kind=kind, axis=axis,
                         bounds_error=bounds_error, fill_value=fill_value)
        self.__dict__.update({k: getattr(probe, k) for k in (
            "_kind", "x", "axis", "bounds_error", "_extrapolate", "_fill_value_below",
            "_fill_value_above")})
        order = np.argsort(x, kind="mergesort")
        self.y = np.take(y, order, axis=axis) if np.any(order != np.arange(len(order))) else y
        if self._kind == "spline":
            k = probe._spline.k
            self._spline = _linear_in_values(lambda eye: _scipy_spline(self.x, eye, k),
                                             np.moveaxis(self.y, self.axis, 0), 0)

    def __call__(self, x):
        return _interp1d_call(self, x)


def _scipy_spline(x, eye, k):
    from scipy.interpolate import make_interp_spline as scipys

    return scipys(x, eye, k=k, check_finite=False)


def _traced_interp1d(x, y, kind="linear", axis=-1, copy=True, bounds_error=None,
                     fill_value=np.nan, assume_sorted=False):
    if is_traced((x,)):
        _refuse("interp1d", "of traced abscissae x is not supported (traced values y are; "
                "np.interp takes traced xp)")
    if is_traced((fill_value,)):
        _refuse("interp1d", "with a traced fill_value is not supported")
    axis = axis % np.ndim(y)
    return _TracedInterp1d(np.asarray(x, np.float64), y, kind, axis, bounds_error,
                           fill_value)


def _grid_call(self, xi, method=None, *, nu=None):
    method = self.method if method is None else method
    if nu is not None or method not in ("linear", "nearest", "slinear"):
        _refuse("RegularGridInterpolator", f"with method {method!r} (or nu) at traced points "
                "is not supported ('linear', 'slinear', 'nearest' are)")
    grid = getattr(self, "_grid", self.grid)
    values = getattr(self, "_values", self.values)
    if getattr(self, "_descending_dimensions", None):
        _refuse("RegularGridInterpolator", "of a grid with descending dimensions at traced "
                "points is not supported")
    nd = len(grid)
    xi_shape = np.shape(xi)
    if xi_shape[-1] != nd:
        raise ValueError(f"The requested sample points xi have dimension {xi_shape[-1]} but "
                         f"this RegularGridInterpolator has dimension {nd}")
    pts = np.reshape(xi, (-1, nd))
    values = _tracer(values)
    rest = values.shape[nd:]
    out_of_range = None
    index, weight = [], []
    for d, g in enumerate(grid):
        g = np.asarray(g, np.float64)
        p = pts[:, d]
        if self.bounds_error or self.fill_value is not None:
            out_d = (p < g[0]) | (p > g[-1])
            out_of_range = out_d if out_of_range is None else out_of_range | out_d
        i = np.clip(np.searchsorted(g, p, side="right") - 1, 0, max(len(g) - 2, 0))
        index.append(i)
        gt = _tracer(g)
        weight.append((p - gt[i]) / (gt[np.minimum(i + 1, len(g) - 1)] - gt[i]) if len(g) > 1
                      else p * 0.0)
    if self.bounds_error and np.any(out_of_range):  # (a decision on the traced points)
        raise ValueError("One of the requested xi is out of bounds in dimension")
    shape = (-1,) + (1,) * len(rest)
    if method == "nearest":
        picked = tuple(np.where(w > 0.5, i + 1, i) for i, w in zip(index, weight, strict=True))
        out = values[picked]
    else:
        out = 0.0
        for corner in np.ndindex(*(2,) * nd):
            w = 1.0
            for d, bit in enumerate(corner):
                w = w * (weight[d] if bit else 1 - weight[d])
            out = out + np.reshape(w, shape) * values[tuple(
                np.minimum(i + bit, len(g) - 1) for i, bit, g in zip(index, corner, grid,
                                                                       strict=True))]
    if self.fill_value is not None:
        out = np.where(np.reshape(out_of_range, shape), self.fill_value, out)
    return np.reshape(out, xi_shape[:-1] + rest)


def _fitpack_at(t, c, k, x, nu, ext):
    """FITPACK's spline ``(t, c, k)`` at traced points, beyond its base interval
    as ``ext`` says (0 the end pieces, 1 zeros, 2 raise, 3 the end values)."""
    from scipy.interpolate import BSpline

    xf = np.reshape(x, (-1,))
    lo, hi = t[k], t[-k - 1]
    if ext == 3:
        xf = np.clip(xf, lo, hi)
    out = _bspline_call(BSpline(t, c, k), xf, nu, extrapolate=True)
    if ext == 1:
        out = np.where((xf < lo) | (xf > hi), 0.0, out)
    elif ext == 2:
        _out_of_range(xf, lo, hi, True)
    return np.reshape(out, np.shape(x))


def _univariate_call(self, x, nu=0, ext=None):
    ext = self.ext if ext is None else {"extrapolate": 0, "zeros": 1, "raise": 2,
                                        "const": 3}.get(ext, ext)
    return _fitpack_at(*self._eval_args, x, nu, ext)


@intercepts(_M, "splev")
def splev(x, tck, der=0, ext=0):
    """``splev`` at traced points (a ``BSpline`` or ``(t, c, k)``), as
    ``UnivariateSpline``'s call."""
    from scipy.interpolate import BSpline

    if is_traced((tck,)) or (isinstance(tck, tuple) and is_traced(tck)):
        _refuse("splev", "of a traced spline is not supported (traced points are)")
    t, c, k = (tck.t, tck.c, tck.k) if isinstance(tck, BSpline) else tck
    return _fitpack_at(np.asarray(t), np.asarray(c), int(k), x, der, ext)


def _traced_bspline(t, c, k, extrapolate=True, axis=0):
    """``BSpline(t, c, k)`` of traced coefficients ``c`` at constant knots:
    linear in ``c`` -- scipy's piecewise polynomials of the unit coefficient
    vectors, contracted with ``c`` (the coefficients past the ``len(t) - k -
    1`` the knots take are ignored, as scipy ignores them)."""
    if is_traced((t, k, extrapolate)):
        _refuse("BSpline", "of traced knots is not supported (traced coefficients c are)")
    from scipy.interpolate import BSpline

    t, k = np.asarray(t, np.float64), int(k)
    axis = axis % max(np.ndim(c), 1)
    n = len(t) - k - 1
    if k < 0 or n < k + 1 or np.shape(c)[axis] < n:
        BSpline(t, np.zeros(np.shape(c)[axis]), k)  # (scipy's error for these knots)
    c = np.take(_tracer(c), np.arange(n), axis=axis)
    return _linear_in_values(lambda units: BSpline(t, units, k, extrapolate=extrapolate,
                                                   axis=0), c, axis, extrapolate)


def _values_new(original_new, traced):
    """A class's ``__new__``: ``traced(*args, **kwargs)`` when an argument is traced,
    else the class's own (pickling's ``cls.__new__(cls)`` included)."""
    def __new__(cls, *args, **kwargs):  # noqa: N807
        if not is_traced(args, kwargs):
            return original_new(cls)
        return traced(*args, **kwargs)
    return __new__


def _refusal(name, why):
    def refuse(*args, **kwargs):
        _refuse(name, f"of traced values is not supported: {why}; it may be called at "
                "traced points")
    return refuse


#: the interpolants whose construction is not linear in the values
_NOT_LINEAR = {
    "PchipInterpolator": "its slopes depend on the signs of the values' differences",
    "Akima1DInterpolator": "its slopes are weighted by the values' differences",
    "UnivariateSpline": "its knots are chosen by the values",
}


def install():
    """Wrap scipy.interpolate's classes (idempotent)."""
    from scipy.interpolate import (BSpline, CubicSpline, RegularGridInterpolator,
                                   UnivariateSpline, interp1d)
    from scipy.interpolate._interpolate import _PPolyBase

    for cls, name, handler in ((_PPolyBase, "__call__", _ppoly_call),
                               (BSpline, "__call__", _bspline_call),
                               (interp1d, "__call__", _interp1d_call),
                               (RegularGridInterpolator, "__call__", _grid_call),
                               (UnivariateSpline, "__call__", _univariate_call)):
        current = cls.__dict__.get(name) or getattr(cls, name)
        if getattr(current, "__hybridad_original__", None) is None:
            setattr(cls, name, _traced_points(current, handler))
    import scipy.interpolate as module

    news = [(CubicSpline, _traced_cubic_spline), (interp1d, _traced_interp1d),
            (BSpline, _traced_bspline)]
    news += [(getattr(module, name), _refusal(name, why)) for name, why in _NOT_LINEAR.items()]
    for cls, traced in news:
        current = cls.__dict__.get("__new__")
        if current is None or getattr(current, "__hybridad_original__", None) is None:
            new = _values_new(object.__new__ if current is None else current, traced)
            new.__hybridad_original__ = current or object.__new__
            cls.__new__ = new
