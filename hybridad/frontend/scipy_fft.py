"""scipy.fft and scipy.fftpack on tracers.

The complex transforms -- ``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``,
``ihfft`` and their 2-D and n-D forms -- are numpy's on tracers
(:mod:`.numpy_fft`: the FFT ops, the same ``n``/``s``,
``axis``/``axes`` and ``norm``); scipy's ``hfft2``/``hfftn`` and
``ihfft2``/``ihfftn``, which numpy lacks, are ``irfftn``/``rfftn`` of the
conjugate with the normalization swapped, as scipy computes them.
``overwrite_x`` and ``workers`` change no value; a ``plan`` is refused.

Every other transform of the two modules is real and linear in its input:
the discrete cosine and sine transforms (types 1-4, their inverses and n-D
forms, ``norm``, ``orthogonalize``), scipy.fftpack's packed real FFT
(``rfft``, ``irfft``) and its pseudo-differential operators (``diff``,
``hilbert``, ``ihilbert``, ``tilbert``, ``itilbert``, ``shift``,
``cs_diff``, ``sc_diff``, ``ss_diff``, ``cc_diff``), and the fast Hankel
transform (``fht``, ``ifht``).  Each is applied along its axis as a product
with its matrix: scipy's own function applied to the rows of the identity,
computed once per function, length and parameters while tracing (cropping
or zero-padding to ``n`` folded into it).  So the values are scipy's to
rounding (``O(n)`` ulps), every backend runs the transform on BLAS with
matmul's derivative rules, and the cost is ``O(n^2)`` per transformed
vector (where the complex transforms are FFTs, ``O(n log n)``) -- but for
``dct``/``idct``/``dst``/``idst`` of types 2 and 3 of :data:`FAST_COSINE_FROM`
points or more, real FFTs of twice the length (:func:`_trig_core`), scaled as
scipy's ``norm`` and ``orthogonalize`` scale.
Parameters other than the input (type, lengths, ``dln``, ``mu``, ``period``,
...) are constants.  Registered in :data:`.scipy_special.INTERCEPTED` under
``"scipy.fft"`` and ``"scipy.fftpack"``.
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.tracer import Tracer
from ..ops.fft import SWAP
from ..ops.host import resolve
from . import numpy_fft as _np_fft
from .numpy_api import _tracer
from .numpy_complex import ComplexTracer
from .scipy_special import intercepts

__all__ = []

_F, _P = "scipy.fft", "scipy.fftpack"


def _constants(module, name, **params):
    """``params`` as a hashable key; a traced one refused by name."""
    for key, value in params.items():
        if isinstance(value, (Tracer, ComplexTracer)):
            raise NotImplementedError(
                f"hybridad: {module}.{name} with a traced {key}: the transform is "
                f"differentiable in its input, {key} must be a constant")
    return tuple(sorted(params.items()))


@functools.lru_cache(maxsize=128)
def _matrix(module, name, n, params, rows):
    """``T`` (``n x n_out``, float64, read-only): ``x @ T`` is ``module.name``
    of ``x`` (length ``n``) along the last axis -- the function applied to the
    identity's rows (one by one where it takes 1-D arrays only: ``rows``)."""
    _np_fft.check_table(f"{module}.{name}", 16 * n * n, n)  # (the identity and the matrix)
    fn, kw, eye = resolve(f"{module}.{name}"), dict(params), np.eye(n)
    if rows:
        t = np.stack([np.asarray(fn(e, **kw)) for e in eye])
    else:
        t = np.asarray(fn(eye, **kw))
    t = np.ascontiguousarray(t.real if np.iscomplexobj(t) else t, dtype=np.float64)
    t.flags.writeable = False
    return t


#: cosine transforms of types 2 and 3 of at least this length run as real FFTs
#: of twice their length (:func:`_cosine_core`); shorter ones, and the other
#: types, as products with their matrices
FAST_COSINE_FROM = 64

#: the unscaled transform scipy's (function, type) is a scaling of: the DCT-II
#: or DCT-III (:func:`_cosine_core`), and whether of the sine transforms'
#: mirror of it (:func:`_trig_core`)
_CORES = {("dct", 2): (2, False), ("dct", 3): (3, False), ("idct", 2): (3, False),
          ("idct", 3): (2, False), ("dst", 2): (2, True), ("dst", 3): (3, True),
          ("idst", 2): (3, True), ("idst", 3): (2, True)}


def _cosine_core(x, n, core):
    """The unnormalized DCT-II (``core`` 2: ``2 sum_j x_j cos(pi k (2j + 1) / 2n)``)
    or DCT-III (3: ``x_0 + 2 sum_{j>0} x_j cos(pi j (2k + 1) / 2n)``) of ``x``
    along its last axis (numpy arrays or tracers): the real FFT of ``x``
    followed by its reversal, turned by ``e^{-i pi k / 2n}``; the inverse real
    FFT of ``x e^{i pi k / 2n}`` (Makhoul's, 1980)."""
    single = getattr(x, "dtype", None) == np.float32  # (float32 stays float32)
    theta = np.pi * np.arange(n) / (2 * n)
    if core == 2:
        spec = np.fft.rfft(np.concatenate([x, x[..., ::-1]], axis=-1), axis=-1)
        c, s = (w.astype(np.float32 if single else np.float64) for w in (np.cos(theta),
                                                                          np.sin(theta)))
        return np.real(spec)[..., :n] * c + np.imag(spec)[..., :n] * s
    turn = np.exp(1j * theta).astype(np.complex64 if single else np.complex128)
    return np.fft.irfft(x * turn, 2 * n, axis=-1, norm="forward")[..., :n]


def _trig_core(x, n, core, sine):
    """:func:`_cosine_core`, or for ``sine`` its mirror: the DST-II of ``x`` is
    the DCT-II of ``(-1)^j x_j`` reversed, the DST-III the DCT-III of ``x``
    reversed, times ``(-1)^k``."""
    if not sine:
        return _cosine_core(x, n, core)
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(
        np.float32 if getattr(x, "dtype", None) == np.float32 else np.float64)
    if core == 2:
        return _cosine_core(x * sign, n, 2)[..., ::-1]
    return _cosine_core(x[..., ::-1], n, 3) * sign


@functools.lru_cache(maxsize=128)
def _cosine_scaling(module, name, n, params):
    """``(a, b, core)`` with ``module.name(x, **params) = a * core(b * x)``
    (:func:`_trig_core`, ``core`` its arguments; ``a`` and ``b`` scale one
    end's element apart from the rest -- the first for the cosine transforms,
    the last for the sine ones -- as scipy's ``norm`` and ``orthogonalize``
    do), read off scipy's transforms of two unit vectors and checked on a
    random one; None for the other types, or where that check fails."""
    kw = dict(params)
    core = _CORES.get((name, kw.get("type", 2)))
    if core is None or n < 4:
        return None
    sp, rg = (n - 1, n - 2) if core[1] else (0, 1)  # (the scaled end, its neighbour)
    fn, eye = resolve(f"{module}.{name}"), np.zeros((2, n))
    eye[0, sp] = eye[1, rg] = 1.0  # (the two unit vectors; np.eye(n) would be n^2)
    t_sp, t_rg = (np.asarray(fn(e, **kw), dtype=np.float64) for e in eye)
    u_sp, u_rg = (_trig_core(e, n, *core) for e in eye)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.full(n, t_rg[rg] / u_rg[rg])
        a[sp] = t_rg[sp] / u_rg[sp]
        b = np.ones(n)
        b[sp] = t_sp[rg] / (a[rg] * u_sp[rg])
    r = np.random.default_rng(n).standard_normal(n)
    want = np.asarray(fn(r, **kw), dtype=np.float64)
    if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)) or \
            np.max(np.abs(a * _trig_core(b * r, n, *core) - want)) > 1e-12 * np.max(np.abs(want)):
        return None
    a.flags.writeable = b.flags.writeable = False
    return a, b, core


def _linear(module, name, x, axis=-1, n=None, rows=False, **params):
    """``module.name(x, ...)`` of a traced ``x`` along ``axis``: the product
    with the function's matrix (of length ``n``: ``x`` cropped or zero-padded
    to it first, as scipy's ``n``/``s``), a complex ``x`` part by part."""
    if isinstance(x, ComplexTracer):
        return ComplexTracer(*(_linear(module, name, part, axis, n, rows, **params)
                               for part in x.full()))
    x = _tracer(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    if x.ndim == 0:
        raise ValueError(f"{module}.{name}: x must be at least 1-D")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {x.ndim}")
    m = x.shape[axis]
    n = m if n is None else int(n)
    if n < 1:
        raise ValueError(f"invalid number of data points ({n}) specified")
    key = _constants(module, name, **params)
    if name in ("dct", "idct", "dst", "idst") and n >= FAST_COSINE_FROM:
        fast = _cosine_scaling(module, name, n, key)
        if fast is not None:  # (types 2 and 3: by real FFTs of twice the length)
            a, b, core = fast
            dt = np.float32 if x.dtype == np.float32 else np.float64
            z = np.moveaxis(x, axis, -1)
            z = z[..., :n] if m >= n else np.pad(z, [(0, 0)] * (z.ndim - 1) + [(0, n - m)])
            y = _trig_core(z * b.astype(dt), n, *core) * a.astype(dt)
            return np.moveaxis(y, -1, axis)
    t = _matrix(module, name, n, key, rows)
    if m <= n:  # (zero-padded: the padding's rows contribute nothing)
        t = t[:m]
    else:  # (cropped: the dropped elements' rows are zero)
        t = np.concatenate([t, np.zeros((m - n, t.shape[1]))])
    dt = np.float32 if x.dtype == np.float32 else np.float64
    y = np.matmul(np.moveaxis(x, axis, -1), t.astype(dt))
    return np.moveaxis(y, -1, axis)


def _no_plan(name, plan):
    if plan is not None:
        raise NotImplementedError(f"hybridad: scipy.fft.{name} with plan= on traced values "
                                  "(a plan of scipy's backend: leave it out)")


# --------------------------------------------------------------------------
# complex transforms: numpy's on tracers
# --------------------------------------------------------------------------
def _one_d(name, impl):
    def transform(x, n=None, axis=-1, norm=None, overwrite_x=False, workers=None, *, plan=None):
        _no_plan(name, plan)
        return impl(x, n, axis, norm)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fft.{name}``: ``numpy.fft.{name}`` on tracers."
    intercepts(_F, name)(transform)


def _n_d(name, impl, axes_default):
    def transform(x, s=None, axes=axes_default, norm=None, overwrite_x=False, workers=None, *,
                  plan=None):
        _no_plan(name, plan)
        return impl(x, s=s, axes=axes, norm=norm)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fft.{name}``."
    intercepts(_F, name)(transform)


for _name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    _one_d(_name, getattr(_np_fft, _name))
for _name, _impl in (("fftn", _np_fft._nd(False)), ("ifftn", _np_fft._nd(True)),
                     ("rfftn", _np_fft._rnd), ("irfftn", _np_fft._irnd)):
    _n_d(_name, _impl, None)
    _n_d(_name[:-1] + "2", _impl, (-2, -1))


def _swapped(norm):
    return SWAP[_np_fft._norm(norm)]


def _hermitian(x, s=None, axes=None, norm=None):
    """scipy's ``hfftn``: ``irfftn`` of the conjugate, the normalization swapped."""
    return _np_fft._irnd(_np_fft.as_complex(x).conj(), s=s, axes=axes, norm=_swapped(norm))


def _inverse_hermitian(x, s=None, axes=None, norm=None):
    """scipy's ``ihfftn``: the conjugate of ``rfftn``, the normalization swapped."""
    if isinstance(x, ComplexTracer):
        raise TypeError("x must be a real sequence")
    return _np_fft._rnd(x, s=s, axes=axes, norm=_swapped(norm)).conj()


_n_d("hfftn", _hermitian, None)
_n_d("hfft2", _hermitian, (-2, -1))
_n_d("ihfftn", _inverse_hermitian, None)
_n_d("ihfft2", _inverse_hermitian, (-2, -1))


# --------------------------------------------------------------------------
# real linear transforms: products with their matrices
# --------------------------------------------------------------------------
def _trig(module, name):
    """The cosine or sine transform ``name`` of ``module`` and its n-D form."""
    def one(x, type=2, n=None, axis=-1, norm=None, overwrite_x=False,  # noqa: A002
            workers=None, orthogonalize=None):
        extra = {} if module == _P else {"orthogonalize": orthogonalize}
        return _linear(module, name, x, axis, n, type=type, norm=norm, **extra)

    def many(x, type=2, s=None, axes=None, norm=None, overwrite_x=False,  # noqa: A002
             workers=None, orthogonalize=None):
        axes, ns = _np_fft._axes_and_sizes(x, s, axes)
        for ax, n in zip(axes, ns, strict=True):
            x = one(x, type, n, ax, norm, orthogonalize=orthogonalize)
        return x

    if module == _P:  # (fftpack's own signatures: no workers or orthogonalize)
        def one_p(x, type=2, n=None, axis=-1, norm=None, overwrite_x=False):  # noqa: A002
            return one(x, type, n, axis, norm)

        def many_p(x, type=2, shape=None, axes=None, norm=None, overwrite_x=False):  # noqa: A002
            return many(x, type, shape, axes, norm)
        fns = (one_p, many_p)
    else:
        fns = (one, many)
    for fn, suffix in zip(fns, ("", "n"), strict=True):
        fn.__name__ = fn.__qualname__ = name + suffix
        fn.__doc__ = f"``{module}.{name}{suffix}``: a product with its matrix per axis."
        intercepts(module, name + suffix)(fn)


for _name in ("dct", "idct", "dst", "idst"):
    _trig(_F, _name)
    _trig(_P, _name)


def _hankel(name):
    def transform(a, dln, mu, offset=0.0, bias=0.0):
        return _linear(_F, name, a, dln=dln, mu=mu, offset=offset, bias=bias)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fft.{name}`` (along the last axis)."
    intercepts(_F, name)(transform)


_hankel("fht")
_hankel("ifht")


# --------------------------------------------------------------------------
# scipy.fftpack
# --------------------------------------------------------------------------
def _pack_one(name, impl):
    def transform(x, n=None, axis=-1, overwrite_x=False):
        return impl(x, n, axis, None)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fftpack.{name}``: ``numpy.fft.{name}`` on tracers."
    intercepts(_P, name)(transform)


def _pack_n(name, impl, axes_default):
    def transform(x, shape=None, axes=axes_default, overwrite_x=False):
        return impl(x, s=shape, axes=axes, norm=None)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fftpack.{name}``."
    intercepts(_P, name)(transform)


_pack_one("fft", _np_fft.fft)
_pack_one("ifft", _np_fft.ifft)
for _name, _impl in (("fftn", _np_fft._nd(False)), ("ifftn", _np_fft._nd(True))):
    _pack_n(_name, _impl, None)
    _pack_n(_name[:-1] + "2", _impl, (-2, -1))


def _packed_real(name):
    """fftpack's ``rfft``/``irfft``: real in, real out (its packed layout)."""
    def transform(x, n=None, axis=-1, overwrite_x=False):
        if isinstance(x, ComplexTracer):
            raise TypeError("1st argument must be real sequence")
        return _linear(_P, name, x, axis, n)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fftpack.{name}`` (the packed real layout)."
    intercepts(_P, name)(transform)


_packed_real("rfft")
_packed_real("irfft")


def _pseudo(name, *names):
    """A pseudo-differential operator of fftpack (1-D sequences, as scipy's)."""
    def transform(x, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names) + 1} positional arguments "
                            f"({len(args) + 1} given)")
        params = dict(zip(names, args, strict=False)) | kwargs
        params.pop("_cache", None)
        if np.ndim(x.real if isinstance(x, ComplexTracer) else x) != 1:
            raise ValueError(f"hybridad: scipy.fftpack.{name} takes a 1-D sequence")
        return _linear(_P, name, x, rows=True, **params)
    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``scipy.fftpack.{name}`` (a product with its matrix)."
    intercepts(_P, name)(transform)


_pseudo("diff", "order", "period")
_pseudo("hilbert")
_pseudo("ihilbert")
_pseudo("tilbert", "h", "period")
_pseudo("itilbert", "h", "period")
_pseudo("shift", "a", "period")
for _name in ("cs_diff", "sc_diff", "ss_diff", "cc_diff"):
    _pseudo(_name, "a", "b", "period")
