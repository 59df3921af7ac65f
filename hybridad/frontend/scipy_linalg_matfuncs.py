"""scipy.linalg's ``sqrtm``, ``logm`` and ``fractional_matrix_power`` on
tracers, as iterations of traced matrix products and inverses.

* ``sqrtm``: the product form of the Denman-Beavers iteration with
  determinant scaling (Higham, *Functions of Matrices*, 2008, (6.17) and
  (6.28)): ``M_0 = X_0 = A``, ``X <- mu X (I + M^-1 / mu^2) / 2``, ``M <- (I +
  (mu^2 M + M^-1 / mu^2) / 2) / 2`` with ``mu = |det M|^(-1/2n)``, until
  ``M`` is the identity to :data:`TOL`, then once more.  The principal square
  root of any matrix without eigenvalues on the closed negative real axis
  (real or complex-conjugate spectra, repeated eigenvalues and non-normal
  matrices alike); scipy's Schur method's values to rounding.
* ``logm``: inverse scaling and squaring: ``k`` square roots until ``||X -
  I||_1 <= 1/4``, then ``log X = 2 atanh(Z)``, ``Z = (X - I)(X + I)^-1``, its
  series summed to below the unit roundoff, times ``2^k``.
* ``fractional_matrix_power(A, t)``: ``np.linalg.matrix_power`` for an
  integer ``t``, else ``expm(t logm(A))``.

Each iteration runs on values the trace does not know: the number of steps
is decided by Python comparisons of traced values (guarded decisions: a plan
checks them on every call, and a call that needs another number of steps is
traced again, :mod:`hybridad.frontend.guards`).  The derivative is the
converged iteration's -- the Frechet derivative (to rounding against the
Sylvester equation ``S L + L S = E`` of the square root, repeated
eigenvalues included, where a route through the eigendecomposition divides
by zero) -- and so are the second derivatives.  A matrix with an eigenvalue
on the closed negative real axis, where scipy's result is complex or
singular, is refused.  Registered in :data:`.scipy_special.INTERCEPTED`
under ``"scipy.linalg"``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..core.tracer import Tracer
from .numpy_linalg import _operands, _result
from .scipy_linalg import expm
from .scipy_special import intercepts

__all__ = []

_M = "scipy.linalg"

#: the change below which an iteration here (and in :mod:`.scipy_linalg_extra`) takes
#: one last step: ``max |M - I|`` for the square root, relative for the others
TOL = 1e-10
#: the iteration's limit: far beyond what a convergent one needs (about 6-12)
STEPS = 60


def _square(a, name):
    (a,), dtype = _operands(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: expected a square matrix (or a stack of them), got "
                         f"shape {a.shape}")
    return a, dtype


def _refuse(name):
    raise NotImplementedError(
        f"hybridad: scipy.linalg.{name} of a matrix with an eigenvalue on the closed negative "
        "real axis (or a singular one) is not supported: scipy's result is complex or "
        "singular there, and hybridad traces real matrix functions")


def converged(state, step, settled):
    """``state <- step(state)`` until ``settled(old, new)``, then once more: the
    last state; None where a step returns None (no limit there) or after
    :data:`STEPS` (the steps are decided on values: guarded decisions)."""
    last = False
    for _ in range(STEPS):
        new = step(state)
        if new is None or last:
            return new
        last = settled(state, new)
        state = new
    return None


def _sqrt(a, name):
    """The principal square root of the float64 stack ``a`` (Denman-Beavers)."""
    n = a.shape[-1]
    eye = np.eye(n)

    def step(state):
        x, m = state
        inverse = np.linalg.inv(m)
        det = np.abs(np.linalg.det(m))
        if not np.all((det > 0) & np.isfinite(det)):
            return None
        mu2 = (det ** (-1.0 / n))[..., None, None]  # mu^2
        return np.sqrt(mu2) * np.matmul(x, eye + inverse / mu2) / 2, \
            (eye + (mu2 * m + inverse / mu2) / 2) / 2

    out = converged((a, a), step, lambda old, new: bool(np.max(np.abs(new[1] - eye)) < TOL))
    if out is None:
        _refuse(name)
    return out[0]


@intercepts(_M, "sqrtm")
def sqrtm(A, disp=True, blocksize=64):  # noqa: N803 - scipy's name
    """The principal square root (see the module's docstring); float32 in,
    float32 out, as scipy."""
    a, dtype = _square(A, "sqrtm")
    return _result(_sqrt(a, "sqrtm"), dtype)


def _log(a, name):
    n = a.shape[-1]
    eye = np.eye(n)
    x, k = a, 0
    while bool(np.max(np.sum(np.abs(x - eye), axis=-2)) > 0.25):
        if k == STEPS:
            _refuse(name)
        x, k = _sqrt(x, name), k + 1
    z = np.matmul(x - eye, np.linalg.inv(x + eye))
    z2, term = np.matmul(z, z), z
    total = z
    for j in range(1, 11):  # ||z|| <= 1/7: z^(2j+1) / (2j+1) below 1e-19 by j = 10
        term = np.matmul(term, z2)
        total = total + term / (2 * j + 1)
    return (2.0 ** (k + 1)) * total


@intercepts(_M, "logm")
def logm(A, disp=True):  # noqa: N803
    """The principal logarithm (see the module's docstring), in float64 as
    scipy's."""
    a, _ = _square(A, "logm")
    return _log(a, "logm")


@intercepts(_M, "fractional_matrix_power")
def fractional_matrix_power(A, t):  # noqa: N803
    """``A^t``: ``matrix_power`` for an integer ``t``, else ``expm(t logm(A))``."""
    a, _ = _square(A, "fractional_matrix_power")
    if isinstance(t, Tracer):
        raise NotImplementedError("hybridad: scipy.linalg.fractional_matrix_power with a "
                                  "traced power t: t must be a constant (A is differentiable)")
    if isinstance(t, numbers.Integral) or float(t).is_integer():
        return np.linalg.matrix_power(a, int(t))
    return expm(float(t) * _log(a, "fractional_matrix_power"))
