"""Stage 1, the tracing front end: :mod:`.trace` (tracers, the trace, ``bind``),
the numpy surface on tracers (:mod:`.numpy_api` and the modules it loads:
ufuncs and core functions, :mod:`.numpy_lib`, :mod:`.numpy_reductions`,
:mod:`.numpy_linalg`, :mod:`.numpy_methods`), what ``f`` reads besides its
arguments (:mod:`.guards`) and user scalar functions (:mod:`.scalar_functions`)."""

# the numpy surface: the core, then the modules that register more of numpy on it
from . import numpy_api  # noqa: E402,F401
from . import numpy_reductions  # noqa: E402,F401  (sum, mean, var, argmax, ...)
from . import numpy_lib  # noqa: E402,F401  (more of numpy's functions)
from . import numpy_linalg  # noqa: E402,F401  (numpy.linalg)
from . import numpy_methods  # noqa: E402,F401  (the ndarray methods of tracers)
