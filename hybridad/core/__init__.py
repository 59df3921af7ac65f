"""The tracing core, below the op rules: :mod:`.tracer` (the stand-in for an
ndarray and its Python protocols), :mod:`.trace` (the trace, ``bind``,
``as_node``, the operands' loop dtypes), :mod:`.decisions` (a Python decision
on a traced value, taken by the traced call's value and guarded),
:mod:`.observe` (what ``f`` reads besides its arguments, noted while tracing),
:mod:`.user_code` (which code is the user's) and :mod:`.supported` (the dtypes
and ndarray subclasses traced).

Op rules (:mod:`hybridad.ops`) emit IR through ``bind`` and the passes
(:mod:`hybridad.transforms`) trace through it too, so this sits under both;
the numpy surface on tracers (:mod:`hybridad.frontend`) sits above the op
rules and fills the tracer's dispatch table (``tracer.SURFACE``) when it is
imported, as JAX's ``core`` sits under ``jax.numpy``."""
