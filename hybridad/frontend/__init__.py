"""The frontend stage, the numpy surface on tracers (above the op rules; the
tracer, the trace and ``bind`` are :mod:`hybridad.core`'s): :mod:`.objects`
(numpy's object semantics: scalars, views, in-place updates), :mod:`.numpy_api`
and the modules it loads (ufuncs and core functions, :mod:`.numpy_reductions`,
:mod:`.numpy_math`, :mod:`.numpy_selection` (with ``a[mask] op= v``:
:mod:`.numpy_masked`; ``x[mask]`` a lazy selection, :mod:`.numpy_selected` and
its reductions :mod:`.numpy_selected_reduce`), :mod:`.numpy_shapes`,
:mod:`.numpy_products`, :mod:`.numpy_linalg`, :mod:`.numpy_methods`, scatters
and signals :mod:`.numpy_signal`, array construction :mod:`.numpy_construct`,
complex values :mod:`.numpy_complex` and :mod:`.numpy_fft`); scipy's Python
functions and distributions (:mod:`.scipy_special`, :mod:`.scipy_stats`,
:mod:`.scipy_linalg`, :mod:`.scipy_spatial`, :mod:`.scipy_signal`,
:mod:`.scipy_ndimage`, :mod:`.scipy_filters`, wrapped when scipy is imported:
:mod:`.after_import`) and any other library function on values that need no derivative
(:mod:`.host_calls`); what ``f`` reads besides its arguments (noted while
tracing by :mod:`hybridad.core.observe`; the walk :mod:`.guard_walk`, the
compiled checks :mod:`.guards`, the graph :mod:`.signature`), explicit loops
(:mod:`.loops`), functions mapped over arrays (:mod:`.numpy_map`) and user
scalar functions (:mod:`.scalar_functions`)."""


# the numpy surface: the core, then the modules that register more of numpy on it
# (kept one import a line, in this order)
from . import numpy_api  # noqa: E402,F401,I001
from . import objects  # noqa: E402,F401  (in-place updates of tracers)
from . import numpy_reductions  # noqa: E402,F401  (sum, mean, var, argmax, ...)
from . import numpy_math  # noqa: E402,F401  (rounding, statistics, scans, differences)
from . import numpy_selection  # noqa: E402,F401  (take, compress, sort, median, ...)
from . import numpy_selected_reduce  # noqa: E402,F401  (reductions of lazy selections x[mask])
from . import numpy_shapes  # noqa: E402,F401  (stacking, splitting, pad, diagonals, ...)
from . import windows  # noqa: E402,F401  (sliding windows times a kernel: a correlation)
from . import numpy_out  # noqa: E402,F401  (out= into traced arrays)
from . import numpy_products  # noqa: E402,F401  (cross, tensordot, einsum, norm)
from . import numpy_linalg  # noqa: E402,F401  (numpy.linalg)
from . import numpy_methods  # noqa: E402,F401  (the ndarray methods of tracers)
from . import numpy_complex  # noqa: E402,F401  (complex values as pairs of real tracers)
from . import numpy_fft  # noqa: E402,F401  (np.fft as products with DFT tables)
from . import numpy_signal  # noqa: E402,F401  (ufunc.at, bincount, convolve, interp, ...)
from . import numpy_construct  # noqa: E402,F401  (np.array, np.r_, append, select, ...)
from . import numpy_stats  # noqa: E402  (nan-reductions, cov, meshgrid, polyval, ...)
from . import numpy_map  # noqa: E402,F401  (np.vectorize, apply_along_axis: traced once, batched)
from . import numpy_quantile  # noqa: E402,F401  (quantile, percentile and their nan forms)
from . import numpy_misc  # noqa: E402,F401  (block, cond, ldexp, unwrap, simpson, reduceat, ...)
from . import numpy_more  # noqa: E402,F401  (choose, insert, resize, put, geomspace, ...)
from . import scipy_special, scipy_stats  # noqa: E402  (scipy's Python functions)
from . import scipy_special_composites  # noqa: E402,F401  (scipy.special ufuncs as composites)
from . import scipy_interpolate  # noqa: E402  (scipy.interpolate: traced points and values)
from . import scipy_linalg  # noqa: E402,F401  (scipy.linalg)
from . import scipy_linalg_more  # noqa: E402,F401  (scipy.linalg: numpy's, and from expm)
from . import scipy_linalg_matfuncs  # noqa: E402,F401  (sqrtm, logm: iterations)
from . import scipy_linalg_extra  # noqa: E402,F401  (sylvester, polar, companion, ...)
from . import scipy_filters  # noqa: E402,F401  (scipy.signal's lfilter, filtfilt)
from . import scipy_signal_more  # noqa: E402,F401  (sosfilt, detrend, welch, ...)
from . import scipy_spatial  # noqa: E402,F401  (scipy.spatial.distance)
from . import scipy_signal  # noqa: E402,F401  (scipy.signal's convolutions)
from . import scipy_fft  # noqa: E402,F401  (scipy.fft, scipy.fftpack)
from . import scipy_ndimage  # noqa: E402,F401  (scipy.ndimage's linear filters)
from . import scipy_ndimage_more  # noqa: E402,F401  (derivative and rank filters)
from . import scipy_integrate  # noqa: E402,F401  (odeint, solve_ivp, quad: traced once)
from . import scipy_optimize  # noqa: E402,F401  (brentq & co, fsolve: implicit derivatives)
from . import host_calls  # noqa: E402  (any other function, on values needing no derivative)
from . import replay  # noqa: E402,F401  (a ufunc call's nodes replayed: after every wrapper)
from .after_import import after_import, loaded  # noqa: E402
from ..core.trace import ON_ENTER  # noqa: E402


def _install_scipy(only=None):
    """Wrap scipy's intercepted entry points in the modules imported so far (or
    in the one named ``only``, just imported).  hybridad imports no scipy
    itself: scipy costs every import a quarter of a second."""
    scipy_special.install(only)
    if loaded("scipy.stats", only) is not None and only in (None, "scipy.stats"):
        scipy_stats.install()
    if loaded("scipy.interpolate", only) is not None and only in (None, "scipy.interpolate"):
        scipy_interpolate.install()
    host_calls.install(only)  # after the traced ones: what they leave runs on values


_install_scipy()
# each scipy module imported later: at once, before user code binds its names
after_import({module for module, _ in scipy_special.INTERCEPTED} | {"scipy.stats"} |
             set(host_calls.LIBRARY_MODULES), _install_scipy)
ON_ENTER.append(_install_scipy)  # and again when a trace begins (idempotent)
numpy_stats.polynomial_dispatched()  # numpy's polynomial package: now, and when imported
after_import(numpy_stats.POLYNOMIAL_MODULES, numpy_stats.polynomial_dispatched)
# numba's implementations of np.asarray & co. typed for the constructors' wrappers too
numpy_construct.numba_aliases()
after_import(numpy_construct.NUMBA_MODULES, numpy_construct.numba_aliases)


def _install_array_api(only=None):
    """scipy's array-API conversion helper takes tracers (:mod:`.array_api`)."""
    module = loaded(_SCIPY_ARRAY_API, only)
    if module is not None:
        array_api.install_scipy(module)


from . import array_api  # noqa: E402  (the namespace of tracers; scipy's helper wrapped)

_SCIPY_ARRAY_API = "scipy._lib._array_api"
_install_array_api()
after_import({_SCIPY_ARRAY_API}, _install_array_api)
