"""What tracing supports, generated from the op registry and the numpy surface
(``docs/coverage.md`` is this module's :func:`render`; a test keeps it current).

    python -m hybridad.coverage > docs/coverage.md
"""

from __future__ import annotations

__all__ = ["render", "rows"]

#: autograd's numpy functions with derivative rules, for comparison: ~108 in
#: autograd/numpy/numpy_vjps.py (counted by hand on HIPS/autograd master) and
#: ~12 in autograd/numpy/linalg.py
AUTOGRAD_COUNT = 120

#: Tracer attributes that are not numpy's (or that raise: values are not known)
_NOT_METHODS = {"node", "item", "tolist"}

#: numpy.linalg functions on the LAPACK primitives (hybridad/ops/linalg*.py)
_LAPACK = {"numpy.linalg.solve": "smooth (LAPACK gesv; adjoint rule: the reverse sweep's and "
                                  "tangents' solves reuse gesv's LU factors, getrs)",
           "numpy.linalg.inv": "smooth (LAPACK gesv; adjoint rule)",
           "numpy.linalg.det": "smooth (LAPACK getrf; adjoint rule)",
           "numpy.linalg.slogdet": "smooth (LAPACK getrf; adjoint rule)",
           "numpy.linalg.cholesky": "smooth; reads one triangle, as numpy (LAPACK potrf)",
           "numpy.linalg.eigh": "smooth for distinct eigenvalues; reads one triangle, as "
                                "numpy (LAPACK syevd)",
           "numpy.linalg.eigvalsh": "smooth; reads one triangle, as numpy (LAPACK syevd "
                                    "without vectors)",
           # hybridad/ops/linalg_spectral.py, linalg_factor.py
           "numpy.linalg.svd": "smooth for distinct singular values (LAPACK gesdd; adjoint "
                               "rule); full_matrices' extra columns have none",
           "numpy.linalg.svdvals": "smooth for distinct singular values (LAPACK gesdd)",
           "numpy.linalg.pinv": "smooth at constant rank (LAPACK gesdd; Golub-Pereyra rule)",
           "numpy.linalg.eig": "real spectra (a complex one raises when the plan runs); "
                               "smooth for distinct eigenvalues (LAPACK geev)",
           "numpy.linalg.eigvals": "real spectra (a complex one raises when the plan runs); "
                                   "smooth for distinct eigenvalues (LAPACK geev)",
           "numpy.linalg.qr": "smooth at full rank (LAPACK geqrf + orgqr); complete Q's "
                              "extra columns have none",
           "numpy.linalg.lstsq": "smooth at constant rank (pinv); rank-deficient residuals "
                                 "raise when the plan runs",
           "numpy.linalg.norm": "composite; orders 2, -2, 'nuc' of matrices from singular "
                                "values (LAPACK gesdd)",
           "numpy.linalg.matrix_norm": "as numpy.linalg.norm"}
#: what a function's row says, where it is more than "composite of primitives"
_NOTES = {**_LAPACK,
          "scipy.integrate.odeint": "scipy's solver on the traced right-hand side (op ode); "
                                    "adjoint and tangent equations (constant t)",
          "scipy.optimize.minimize": "unconstrained: scipy's minimizer of the traced "
                                     "objective (op root); the implicit function theorem "
                                     "on its gradient",
          "scipy.integrate.solve_ivp": "scipy's solver on the traced right-hand side (op "
                                       "ode); adjoint and tangent equations (constant "
                                       "t_eval, required)",
          **dict.fromkeys(("scipy.integrate.quad", "scipy.integrate.quad_vec",
                           "scipy.integrate.dblquad", "scipy.integrate.tplquad"),
                          "scipy's quad of the traced integrand (op quad); Leibniz's rule "
                          "in the limits and parameters"),
          **dict.fromkeys((f"scipy.optimize.{n}" for n in ("brentq", "brenth", "ridder",
                                                           "bisect", "toms748", "fsolve",
                                                           "root_scalar", "root")),
                          "scipy's root of the traced residual (op root); the implicit "
                          "function theorem"),
          "numpy.pad": "modes 'constant', 'edge', 'reflect', 'symmetric', 'wrap' "
                       "(reflect_type 'even'): composite of primitives",
          "numpy.linalg.cond": "composite; p None, 2, -2 from singular values (LAPACK "
                               "gesdd), the others norm(x) * norm(inv(x))",
          **{f"numpy.{name}": "composite (np.sort, reads at positions from the constant q, "
                              "numpy's interpolation); every method" for name in
             ("quantile", "percentile")},
          **{f"numpy.{name}": "composite (np.sort, positions from each slice's count of "
                              "non-NaN values, one-hot reads, numpy's interpolation); every "
                              "method" for name in ("nanquantile", "nanpercentile")}}


def _kind(op):
    from .ops.elementwise import Underived

    partials = op.partials
    if all(p is None for p in partials):
        return "none (mask / boolean)"
    if all(p is None or (not callable(p) and p == 0) for p in partials):
        return "zero (piecewise constant)"
    kind = "piecewise smooth" if op.piecewise else "smooth"
    missing = [p.argument for p in partials if isinstance(p, Underived)]
    if missing:  # (a derivative that exists but has no rule: refused by name)
        kind += f"; no derivative rule in its {' and '.join(missing)} argument" + \
            ("s" if len(missing) > 1 else "")
    return kind


def _name(f):
    mod = getattr(f, "__module__", None) or "numpy"
    name = getattr(f, "__name__", repr(f))
    for sub in ("linalg", "fft", "lib.stride_tricks"):
        if mod.startswith(f"numpy.{sub}"):
            return f"numpy.{sub}.{name}"
    return f"numpy.{name}"


def rows():
    """``(section, name, derivative kind, backends)`` of every supported
    numpy function, ufunc method and ndarray method."""
    from .frontend import numpy_api  # noqa: F401  (fills HANDLED)
    from .frontend.numpy_api import _UFUNC_ALIASES, HANDLED, ufunc_name, ufunc_ops
    from .core.tracer import Tracer
    from .ops import REGISTRY

    both = "numpy, numba"
    out = []
    special = []
    for uf, name in sorted(ufunc_ops(load=True).items(), key=lambda kv: kv[1]):
        row = (ufunc_name(uf), _kind(REGISTRY[name]), both)
        if row[0].startswith("numpy."):
            out.append(("ufuncs", *row))
        else:
            special.append(("scipy.special ufuncs (fused into kernels; CUDA spellings too)",
                            *row))
    for uf, target in _UFUNC_ALIASES.items():
        out.append(("ufuncs", f"numpy.{uf.__name__}",
                    f"as numpy.{target.__name__}", both))
    out += [("ufuncs", "numpy.float_power", "smooth (power in float64)", both),
            ("ufuncs", "numpy.matmul", "smooth (BLAS)", both),
            ("ufuncs", "numpy.conjugate", "identity (real arrays)", both),
            ("ufuncs", "numpy.ldexp", "composite (x times constant powers of two; the "
             "exponent constant)", both),
            ("ufuncs", "numpy.frexp", "composite (exact scalings by powers of two); mantissa "
             "2**-e, exponent none", both),
            ("ufuncs", "numpy.modf", "composite (trunc); fractional part 1, integral part "
             "zero", both)]
    for method in ("numpy.add.reduce", "numpy.multiply.reduce", "numpy.maximum.reduce",
                   "numpy.minimum.reduce", "numpy.logaddexp.reduce", "numpy.add.accumulate",
                   "numpy.multiply.accumulate", "numpy.add.at", "numpy.subtract.at",
                   "numpy.multiply.at", "numpy.maximum.at", "numpy.minimum.at"):
        out.append(("ufunc methods", method, "composite", both))
    for method in ("numpy.maximum.accumulate", "numpy.minimum.accumulate",
                   "numpy.fmax.accumulate", "numpy.fmin.accumulate"):
        out.append(("ufunc methods", method, "composite (a log-step scan of the ufunc)", both))
    for method in ("numpy.add.reduceat", "numpy.multiply.reduceat", "numpy.maximum.reduceat",
                   "numpy.minimum.reduceat"):
        out.append(("ufunc methods", method, "composite (constant indices)", both))
    out.append(("ufunc methods", "numpy.<binary ufunc>.outer", "composite (the ufunc, axes "
                "appended to the first operand)", both))
    names = {}
    for f, impl in HANDLED.items():
        if not getattr(impl, "refused", False):
            names.setdefault(_name(f), f)
    for name in sorted(names):
        out.append(("functions", name, _NOTES.get(name, "composite of primitives"), both))
    out += [("scipy functions (intercepted while tracing)", f"scipy.interpolate.{name}", how,
             both) for name, how in (
        ("CubicSpline, PchipInterpolator, Akima1DInterpolator, PPoly, BPoly, BSpline",
         "called at traced points: the piecewise polynomial; CubicSpline of traced values"),
        ("interp1d", "every kind, at traced points and of traced values"),
        ("RegularGridInterpolator", "linear, slinear, nearest at traced points"),
        ("UnivariateSpline, splev", "at traced points"))]
    out.append(("functions", "numpy.polynomial (chebval, legval, ..., Polynomial(c)(x), "
                "Chebyshev, deriv, integ, fit, series arithmetic)",
                "its Python, traced as the user's code; in coefficients and points", both))
    from .frontend.numpy_construct import WRAPPERS

    out += [("numpy constructors (intercepted while tracing)", f"numpy.{name}",
             "composite of primitives", both) for name in sorted([*WRAPPERS, "r_", "c_"])]
    from .frontend.numpy_methods import REFUSED

    methods = sorted(m for m, v in vars(Tracer).items()
                     if not m.startswith("_") and m not in _NOT_METHODS | REFUSED and
                     (callable(v) or isinstance(v, property)))
    out += [("ndarray methods and attributes", f"x.{m}", "as the function", both)
            for m in methods]
    out += special
    from .frontend.scipy_special import COMPOSITES, INTERCEPTED

    out += [("scipy.special ufuncs (fused into kernels; CUDA spellings too)",
             f"scipy.special.{name}", "composite of the traced ufuncs (scipy's formula)", both)
            for name in sorted(COMPOSITES)]
    from .frontend.scipy_stats import CDF, DISCRETE_CDF, LOGPDF, LOGPMF, PPF, SHAPE_FIXED_TAILS

    out += [("scipy functions (intercepted while tracing)", f"{module}.{name}",
             _NOTES.get(f"{module}.{name}", "composite of primitives"), both)
            for module, name in sorted(INTERCEPTED)]

    def methods(d, first, tails, quantiles):
        return ", ".join([*first, *(("cdf", "sf", "logcdf", "logsf") if d in tails else ()),
                          *(("ppf", "isf") if d in quantiles else ())])

    out += [("scipy.stats distributions", f"scipy.stats.{d}",
             methods(d, ("logpdf", "pdf"), CDF, PPF) + "; in x and every parameter"
             + (" (the tails: in x, loc and scale)" if d in SHAPE_FIXED_TAILS else ""), both)
            for d in sorted(LOGPDF)]
    out += [("scipy.stats distributions", f"scipy.stats.{d}",
             methods(d, ("logpmf", "pmf"), DISCRETE_CDF, ()) + "; in the parameters", both)
            for d in sorted(LOGPMF)]
    out += [("scipy.stats distributions", f"scipy.stats.{d}", how, both) for d, how in (
        ("multivariate_normal", "logpdf, pdf, frozen or not; in x, mean and cov"),
        ("multivariate_t", "logpdf, pdf, frozen or not; in x, loc, shape and df"),
        ("dirichlet", "logpdf, pdf; in x and alpha"),
        ("multinomial", "logpmf, pmf; in p"),
        ("gaussian_kde", "logpdf, pdf, evaluate, __call__; in the points"))]
    out += [("complex values (pairs of real tracers)", "complex intermediates",
             "+ - * / ** @, exp log sqrt sin cos tan sinh cosh tanh, real imag conj angle abs, "
             "sum mean cumsum, shapes, concatenate stack, dot vdot, norm; max min maximum "
             "minimum fmax fmin argmax argmin in numpy's lexicographic order; numpy.fft as "
             "DFT matmuls", both),
            ("complex values (pairs of real tracers)", "complex arguments of hybridad.gradient",
             "du/dx - 1j du/dy (autograd, JAX); no allocation per call with out=", both),
            ("complex values (pairs of real tracers)", "hybridad.hvp / hessian of complex x",
             "d/dt gradient(x + t v); the real (2n, 2n) Hessian over (x.real, x.imag)", both),
            ("complex values (pairs of real tracers)", "hybridad.jacobian with complex values",
             "real x: dRe/dx + 1j dIm/dx; complex x, complex f: holomorphic=True, df/dz; "
             "complex x, real f: the gradient convention per row", both),
            ("functions without rules", "any numpy function, scipy's public Python functions",
             "on values that need no derivative: run as numpy runs them (host_call); a "
             "derivative through them raises naming the function", "numpy, numba")]
    out.append(("operators", "+ - * / ** @ // % divmod() unary - + abs() < <= > >= == != "
                "& \\| ^ ~ (booleans) x[index] (basic, integer arrays, boolean masks) len() "
                "iteration round(x[i], n) copy.copy; in place: += -= *= /= **= @= //= %= &= "
                "\\|= ^=", "as the ufuncs", both))
    return out


def render():
    """docs/coverage.md (markdown)."""
    table = rows()
    n_funcs = len({name for section, name, *_ in table if section in ("ufuncs", "functions",
                                                                       "ufunc methods")})
    lines = [
        "# Coverage: the numpy hybridad traces and differentiates",
        "",
        "Generated by `python -m hybridad.coverage > docs/coverage.md` from the op registry",
        "(`hybridad/ops`) and the numpy surface (`hybridad/numpy_api.py`,",
        "`hybridad/numpy_reductions.py`, `hybridad/numpy_math.py`, `hybridad/numpy_selection.py`,",
        "`hybridad/numpy_shapes.py`, `hybridad/numpy_products.py`, `hybridad/numpy_linalg.py`,",
        "`hybridad/numpy_methods.py`); `tests/test_docs.py` fails when this page is stale.",
        "",
        f"**{n_funcs} numpy functions, ufuncs and ufunc methods** (autograd's numpy rules "
        f"cover about {AUTOGRAD_COUNT}, linalg included). Every entry runs on both backends "
        "with zero allocations per call; "
        "*composite* entries are built from the primitives, so their derivatives follow from "
        "the primitives' rules.",
        "",
        "Derivative kinds: *smooth*; *piecewise smooth* (a kink: ties of maximum/minimum split "
        "the derivative equally, |x| has derivative sign(x), 0 at 0); *zero* (piecewise "
        "constant: floor, sign, round, ...); *none* (boolean results). Not yet supported: see "
        "[limitations](limitations.md).",
        "",
    ]
    section = None
    for sec, name, kind, backends in table:
        if sec != section:
            lines += ["", f"## {sec}", "", "| name | derivative | backends |", "|---|---|---|"]
            section = sec
        lines.append(f"| `{name}` | {kind} | {backends} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
