"""Stage 1, the tracing front end: :mod:`.trace` (tracers, the trace, ``bind``),
the numpy surface on tracers (:mod:`.numpy_api` and the modules it loads:
ufuncs and core functions, :mod:`.numpy_lib`, :mod:`.numpy_reductions`,
:mod:`.numpy_linalg`, :mod:`.numpy_methods`), what ``f`` reads besides its
arguments (:mod:`.guards`) and user scalar functions (:mod:`.scalar_functions`)."""
