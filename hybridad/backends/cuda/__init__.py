"""The GPU backend (``backend="cupy"``): the numpy reference program with cupy
as its array module (:mod:`.program`), fused regions as CUDA kernels printed
in the CUDA dialect of the scalar printer (:mod:`.source`) and accurate sums
(:mod:`.reduce`)."""
