"""Which ufuncs the numba backend's generated code computes with
:mod:`.vmath`'s functions, by name: kept apart from them (no numba here) so
that writing code -- the scalar printer, the cost model -- imports no numba."""

__all__ = ["FLOAT32_NATIVE", "FLOAT32_UFUNCS", "HELPERS", "VECTOR_UFUNCS"]

VECTOR_UFUNCS = {"exp": "vexp", "expm1": "vexpm1", "log": "vlog", "tanh": "vtanh",
                 "log1p": "vlog1p", "logaddexp": "vlogaddexp"}
"""ufunc name -> the function of :mod:`.vmath` that replaces it in float64 kernels
(called on the ufunc's operands: ``logaddexp`` takes two)."""

FLOAT32_UFUNCS = {"expm1": "vexpm1_32", "log": "vlog32", "log1p": "vlog1p",
                  "logaddexp": "vlogaddexp"}
"""ufunc name -> the function of :mod:`.vmath` a float32 kernel calls (widened,
then rounded); generated source names them ``<ufunc>32`` (``_vm_log32``)."""

FLOAT32_NATIVE = {"exp": "vexpf", "tanh": "vtanhf"}
"""ufunc name -> the function of :mod:`.vmath` a float32 kernel calls on float32
values directly; generated source names them ``<ufunc>f`` (``_vm_tanhf``)."""

HELPERS = {"smul": "smul", "smul32": "smul32", "floor_divide": "floor_divide",
           "floor_divide32": "floor_divide32"}
"""helper name in generated source (after the prefix) -> the function of :mod:`.vmath`."""
