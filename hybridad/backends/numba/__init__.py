"""The numba CPU backend: the whole plan as one generated, compiled function
(:mod:`.program`), its loops (:mod:`.loops`, :mod:`.reduce`), the runtime it
calls (:mod:`.rt`, :mod:`.folds`, :mod:`.lapack`, :mod:`.vmath`, :mod:`.threads`), dual
numbers for user functions (:mod:`.dual`), small kernels of the plans
(:mod:`.kernels`) and the verified disk cache (:mod:`.cache`)."""
