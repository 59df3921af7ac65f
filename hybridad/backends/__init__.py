"""The backends stage: each a subpackage that owns how it renders and runs ops --
:mod:`.numpy` (the reference executor, always available, the oracle),
:mod:`.numba` (CPU) and :mod:`.cuda` (GPU, through cupy) -- and the scalar
printer the compiled ones share (:mod:`.scalar`)."""
